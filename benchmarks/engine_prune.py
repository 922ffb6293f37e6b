"""Engine-side pruning through ``ns.to_pyarrow_dataset``: a DuckDB query and a Polars lazy query
filtered to one partition, vs the same engine scanning every partition, vs ``ns.to_table(filter)``.

One namespace of ``--partitions`` identity(k) partition tables of ``--rows-per-partition`` rows
each. The dataset is made once (``ds = ns.to_pyarrow_dataset()``); after it nothing
lancepart-specific is called:

* duckdb filtered:  ``duckdb.sql("SELECT count(*), sum(amount) FROM ds WHERE k = 417")``
* duckdb full:      the same query without the WHERE (every partition read)
* polars filtered:  ``pl.scan_pyarrow_dataset(ds).filter(pl.col("k") == 417).select(...).collect()``
* polars full:      the same without the filter
* to_table:         ``ns.to_table("k = 417", columns=["amount"])``

Each round runs every case once, in an order that alternates between rounds (interleaved), after
one warm-up round; medians and the ratios the goal is stated in (filtered <= 0.2x the engine's
full scan, <= 3x ``ns.to_table(filter)``) are printed with the machine.

    python benchmarks/engine_prune.py [--partitions 1000] [--rows-per-partition 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
from machine_info import machine

TARGET = 417


def build(root: str, partitions: int, rows_per_partition: int):
    from lancepart import PartitionedNamespace

    schema = pa.schema([pa.field("id", pa.int64(), False), ("k", pa.int32()), ("country", pa.utf8()),
                        ("amount", pa.float64())])
    spec = {"id": 1, "fields": [{"field_id": "k", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(root, schema, spec)
    n = partitions * rows_per_partition
    rng = np.random.default_rng(11)
    ns.write(pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "k": pa.array(np.repeat(np.arange(partitions, dtype=np.int32), rows_per_partition)),
        "country": pa.array(rng.choice(["US", "FR", "DE", "JP", "BR"], n)),
        "amount": pa.array(rng.random(n)),
    }, schema=ns.schema), chunk_rows=2_000_000)
    return PartitionedNamespace.open(root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rows-per-partition", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import duckdb
    import polars as pl

    with tempfile.TemporaryDirectory(prefix="lancepart-engine-prune-") as d:
        t0 = time.perf_counter()
        ns = build(f"{d}/ns", args.partitions, args.rows_per_partition)
        print(f"built {len(ns.partitions())} partition tables in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        ds = ns.to_pyarrow_dataset()
        con = duckdb.connect()
        con.register("ds", ds)
        k = TARGET % args.partitions

        def polars(lazy):
            return lazy.select(pl.len(), pl.col("amount").sum()).collect().row(0)

        cases = {  # each returns (rows, ...)
            "duckdb filtered": lambda: con.sql(f"SELECT count(*), sum(amount) FROM ds WHERE k = {k}").fetchall()[0],
            "duckdb full": lambda: con.sql("SELECT count(*), sum(amount) FROM ds").fetchall()[0],
            "polars filtered": lambda: polars(pl.scan_pyarrow_dataset(ds).filter(pl.col("k") == k)),
            "polars full": lambda: polars(pl.scan_pyarrow_dataset(ds)),
            "to_table": lambda: (ns.to_table(f"k = {k}", columns=["amount"]).num_rows,),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        counts: dict[str, int] = {}
        order = list(cases)
        for r in range(args.rounds + 1):  # round 0 warms up (imports, caches)
            for name in order if r % 2 else reversed(order):
                t = time.perf_counter()
                counts[name] = cases[name]()[0]
                if r:
                    times[name].append(time.perf_counter() - t)
        rows = args.partitions * args.rows_per_partition
        assert counts["duckdb full"] == counts["polars full"] == rows, counts
        assert counts["duckdb filtered"] == counts["polars filtered"] == counts["to_table"] == args.rows_per_partition

    med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    print(json.dumps({"machine": machine("pyarrow", "lance", "duckdb", "polars"), "partitions": args.partitions,
                      "rows": rows, "rounds": args.rounds}))
    for name, ms in med.items():
        print(json.dumps({"case": name, "median_ms": round(ms, 1), "min_ms": round(min(times[name]) * 1e3, 1),
                          "rows": counts[name]}))
    for engine in ("duckdb", "polars"):
        f = med[f"{engine} filtered"]
        print(json.dumps({"engine": engine, "filtered_vs_full": round(f / med[f"{engine} full"], 3),
                          "filtered_vs_to_table": round(f / med["to_table"], 2),
                          "goal": "filtered_vs_full <= 0.2 and filtered_vs_to_table <= 3"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
