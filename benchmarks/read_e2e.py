"""Read benchmark, end to end: a real namespace on disk (Lance tables, ``__manifest``), a point
lookup through ``ns.to_table(filter)`` with partition pruning vs the same filter over every
partition table (a full scan without pruning), at several namespace sizes.

For each size, ``--days`` x 16 partition tables (spec v1: identity(event_date) x
bucket(user_id, 16)) are written with ``ns.write`` (``--rows-per-partition`` rows each), then
the namespace is evolved to a v2 spec (year(event_date) x identity(country)) and one more day
is written under it, so pruning spans two spec versions. Timed (median of ``--rounds``, after
one warm-up):

* open:        ``PartitionedNamespace.open`` (reads ``__manifest``)
* prune:       ``ns.partitions(filter)``: the ``__manifest`` query alone
* pruned read: ``ns.to_table(filter)``: prune + scan of the kept tables + exact filter
* full scan:   the same filter over every published table (what a reader without pruning does)

    python benchmarks/read_e2e.py [--sizes 2000,10000] [--rows-per-partition 20] [--rounds 15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from machine_info import machine

BUCKETS = 16


def build(root: str, days: int, rows_per_partition: int):
    from lancepart import PartitionedNamespace

    schema = pa.schema([pa.field("user_id", pa.int64(), False), ("event_date", pa.date32()),
                        ("country", pa.utf8()), ("amount", pa.float64())])
    spec = {"id": 1, "fields": [
        {"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"},
         "result_type": {"type": "date32"}},
        {"field_id": "user_bucket", "source_ids": [0], "transform": {"type": "bucket", "num_buckets": BUCKETS},
         "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(root, schema, spec)
    rng = np.random.default_rng(7)
    # enough distinct users that every (day, bucket) gets rows
    n = days * BUCKETS * rows_per_partition
    start = (dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days
    data = pa.table({
        "user_id": pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
        "event_date": pa.array(np.repeat(np.arange(start, start + days, dtype=np.int32), BUCKETS * rows_per_partition)
                               ).view(pa.date32()),
        "country": pa.array(rng.choice(["US", "FR", "DE", "JP", "BR"], n)),
        "amount": pa.array(rng.random(n)),
    }, schema=ns.schema)
    t0 = time.perf_counter()
    r = ns.write(data, chunk_rows=2_000_000)
    write_s = time.perf_counter() - t0
    ns.evolve([{"source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int32"}},
               {"source_ids": [2], "transform": {"type": "identity"}, "result_type": {"type": "utf8"}}])
    extra = data.slice(0, 1000)
    ns.write(extra.set_column(1, ns.schema.field("event_date"),
                              pa.array([dt.date(2026, 1, 1)] * 1000, pa.date32())))
    return ns, data, r, write_s


def timed(fn, rounds: int):
    fn()  # warm-up
    times = []
    out = None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, round(statistics.median(times) * 1000, 1), round(min(times) * 1000, 1)


def run_size(root: str, size: int, rows_per_partition: int, rounds: int) -> dict:
    from lancepart import PartitionedNamespace
    from lancepart.read.manifest_query import prune
    from lancepart.read.snapshot import scan

    ns, data, _, write_s = build(root, size // BUCKETS, rows_per_partition)
    user = int(data.column("user_id")[12345 % data.num_rows].as_py())
    day = data.column("event_date")[12345 % data.num_rows].as_py()
    flt = f"event_date = DATE '{day.isoformat()}' AND user_id = {user}"
    _, open_ms, _ = timed(lambda: PartitionedNamespace.open(ns.root), rounds)
    kept, prune_ms, _ = timed(lambda: ns.partitions(flt), rounds)
    got, read_ms, read_min = timed(lambda: ns.to_table(flt), rounds)
    everything = ns.partitions()
    scan_filter = prune(flt, ns.schema, ns.specs, ns.snapshot().rows).scan_filter
    full, full_ms, full_min = timed(lambda: scan(ns.root, everything, ns.schema, filter=flt, scan_filter=scan_filter),
                                    max(3, rounds // 5))
    assert sorted(got.column("user_id").to_pylist()) == sorted(full.column("user_id").to_pylist())
    assert got.num_rows >= 1
    return {
        "partitions": len(everything), "rows": data.num_rows + 1000, "write_s": round(write_s, 1),
        "filter": flt, "kept": len(kept), "rows_returned": got.num_rows,
        "open_ms": open_ms, "prune_ms": prune_ms, "pruned_read_ms": read_ms, "pruned_read_min_ms": read_min,
        "full_scan_ms": full_ms, "full_scan_min_ms": full_min, "speedup": round(full_ms / read_ms, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,10000", help="partition counts (multiples of 16)")
    ap.add_argument("--rows-per-partition", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print(json.dumps({"machine": machine("pyarrow", "datafusion", "lance")}))
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_size(f"{tmp}/ns", size, args.rows_per_partition, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
