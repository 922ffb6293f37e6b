"""Read benchmark, manifest part: partition pruning (spec "Partition Pruning", Appendix D) over
``__manifest`` rows of many partitions.

Builds the ``__manifest`` rows of a namespace with ``--days`` x ``--buckets`` partition tables
(spec v1: identity(event_date) + bucket(user_id, N)), plus a second spec version
(v2: year(event_date) + identity(country)) with a few hundred tables, and times
:func:`lancepart.read.manifest_query.prune` (median of ``--rounds``) for:

* point:  ``event_date = DATE '...' AND user_id = ...``   (one v1 table kept)
* range:  one week of ``event_date`` and a country        (7 * N v1 tables kept)
* in:     ``user_id IN (...)`` of 8 users                  (<= 8 buckets per day kept)
* all:    no filter                                        (every table kept)

The manifest rows are built directly (no Lance I/O); ``benchmarks/read_e2e.py`` measures the
whole read on a real namespace.

    python benchmarks/read.py [--days 625] [--buckets 16] [--rounds 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time

import numpy as np
import pyarrow as pa
from machine_info import machine


def build(days: int, buckets: int):
    """(schema, specs, manifest rows) of a namespace with days * buckets v1 tables and a v2."""
    from lancepart.model.spec import PartitionSpec
    from lancepart.storage.manifest import manifest_schema

    schema = pa.schema([
        pa.field("user_id", pa.int64(), False, {"lance:field_id": "0"}),
        pa.field("event_date", pa.date32(), True, {"lance:field_id": "1"}),
        pa.field("country", pa.utf8(), True, {"lance:field_id": "2"}),
    ])
    specs = {
        1: PartitionSpec.from_json({"id": 1, "fields": [
            {"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"},
             "result_type": {"type": "date32"}},
            {"field_id": "user_bucket", "source_ids": [0], "transform": {"type": "bucket", "num_buckets": buckets},
             "result_type": {"type": "int32"}}]}),
        2: PartitionSpec.from_json({"id": 2, "fields": [
            {"field_id": "event_year", "source_ids": [1], "transform": {"type": "year"},
             "result_type": {"type": "int32"}},
            {"field_id": "country", "source_ids": [2], "transform": {"type": "identity"},
             "result_type": {"type": "utf8"}}]}),
    }
    start = (dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days
    d = np.repeat(np.arange(start, start + days, dtype=np.int32), buckets)
    b = np.tile(np.arange(buckets, dtype=np.int32), days)
    n1 = len(d)
    countries = [f"C{i:03d}" for i in range(200)]
    years = [2026, 2027]
    v2_year = np.repeat(np.array(years, dtype=np.int32), len(countries))
    v2_country = countries * len(years)
    n2 = len(v2_year)
    ids = [f"v1$d{i:06d}$dataset" for i in range(n1)] + [f"v2$y{i:06d}$dataset" for i in range(n2)]
    mschema = manifest_schema([pa.field("partition_field_event_date", pa.date32()),
                               pa.field("partition_field_user_bucket", pa.int32()),
                               pa.field("partition_field_event_year", pa.int32()),
                               pa.field("partition_field_country", pa.utf8())])
    n = n1 + n2
    cols = {
        "object_id": pa.array(ids, pa.utf8()),
        "object_type": pa.array(["table"] * n, pa.utf8()),
        "location": pa.array([f"0000abcd_{i}" for i in ids], pa.utf8()),
        "metadata": pa.array(["{}"] * n, pa.utf8()),
        "base_objects": pa.nulls(n, mschema.field("base_objects").type),
        "read_version": pa.array(np.ones(n, dtype=np.uint64)),
        "read_branch": pa.nulls(n, pa.utf8()),
        "read_tag": pa.nulls(n, pa.utf8()),
        "partition_field_event_date": pa.concat_arrays([pa.array(d).view(pa.date32()), pa.nulls(n2, pa.date32())]),
        "partition_field_user_bucket": pa.concat_arrays([pa.array(b), pa.nulls(n2, pa.int32())]),
        "partition_field_event_year": pa.concat_arrays([pa.nulls(n1, pa.int32()), pa.array(v2_year)]),
        "partition_field_country": pa.concat_arrays([pa.nulls(n1, pa.utf8()), pa.array(v2_country, pa.utf8())]),
    }
    return schema, specs, pa.Table.from_pydict(cols, schema=mschema)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=625)
    ap.add_argument("--buckets", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()

    from lancepart.read.manifest_query import prune

    schema, specs, rows = build(args.days, args.buckets)
    n_tables = rows.num_rows
    cases = {
        "point": "event_date = DATE '2024-06-01' AND user_id = 42",
        "range": "event_date >= DATE '2024-06-01' AND event_date < DATE '2024-06-08' AND country = 'C007'",
        "in": "user_id IN (1, 2, 3, 4, 5, 6, 7, 8)",
        "all": None,
    }
    info = machine("pyarrow", "datafusion", "lance")
    print(json.dumps({"machine": info, "tables": n_tables, "v1_tables": args.days * args.buckets}))
    prune(None, schema, specs, rows)  # warm up: DataFusion, UDF registration, imports
    for name, flt in cases.items():
        times = []
        result = None
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            result = prune(flt, schema, specs, rows)
            times.append(time.perf_counter() - t0)
        assert result is not None
        kept = result.kept.num_rows
        print(json.dumps({
            "case": name, "filter": flt, "median_ms": round(statistics.median(times) * 1000, 2),
            "min_ms": round(min(times) * 1000, 2), "kept": kept, "pruned": n_tables - kept,
        }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
