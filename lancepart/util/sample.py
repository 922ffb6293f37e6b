"""Seeded sample data for demos, benchmarks and tests (vectorised numpy -> Arrow)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

COUNTRIES = np.array(["US", "FR", "DE", "JP", "BR"])
DEMO_START = dt.datetime(2025, 12, 1)


def demo_events(num_rows: int, seed: int = 42, start_id: int = 0, days: int = 7) -> pa.Table:
    """Click events: id, event_date, event_ts, country, user_id, amount.

    >>> demo_events(3).num_rows
    3
    """
    rng = np.random.default_rng(seed + start_id)
    start_us = int(DEMO_START.replace(tzinfo=dt.timezone.utc).timestamp() * 1_000_000)
    ts = start_us + rng.integers(0, days * 86_400_000_000, num_rows)
    return pa.table({
        "id": pa.array(np.arange(start_id, start_id + num_rows, dtype=np.int64)),
        "event_date": pa.array((ts // 86_400_000_000).astype(np.int32), pa.date32()),
        "event_ts": pa.array(ts, pa.timestamp("us")),
        "country": pa.array(COUNTRIES[rng.integers(0, len(COUNTRIES), num_rows)]),
        "user_id": pa.array(rng.integers(0, 1_000_000, num_rows, dtype=np.int64)),
        "amount": pa.array(np.round(rng.gamma(2.0, 20.0, num_rows), 2)),
    })
