"""The namespace the reading benchmarks share: id, event_date (over ``days`` days), country,
user_id, amount; partitioned by identity(event_date) x bucket(user_id, 4)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("event_date", pa.date32()), ("country", pa.utf8()),
                    ("user_id", pa.int64()), ("amount", pa.float64())])
SPEC = {"id": 1, "fields": [
    {"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"},
     "result_type": {"type": "date32"}},
    {"field_id": "user_bucket", "source_ids": [3], "transform": {"type": "bucket", "num_buckets": 4},
     "result_type": {"type": "int32"}}]}


def events(rng: np.random.Generator, start: int, n: int, days: int) -> pa.Table:
    """``n`` rows with ids from ``start``, vectorised."""
    return pa.table({
        "id": pa.array(np.arange(start, start + n), pa.int64()),
        "event_date": pa.array(rng.integers(20_000, 20_000 + days, n).astype(np.int32)).view(pa.date32()),
        "country": pa.array(rng.choice(["US", "FR", "DE", "JP", "BR", "IN"], n)),
        "user_id": pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
        "amount": pa.array(rng.random(n) * 100),
    }, schema=SCHEMA)
