"""Small partition tables: what the string encoding of a new table costs in write time, bytes on
disk and read time, against delta-rs writing the same partitions.

In ONE process, on 1 M generated rows (an int64 ``id``, a timestamp, a float64 and a
40-character string drawn from 20 000 distinct values; ``--rows``, ``--partitions``) written
into ``identity(shop)`` partitions of about 1 000 rows each:

* ``lancepart``: ``ns.write`` as it is (tables created with fewer than
  ``SMALL_TABLE_ROWS`` rows store their strings uncompressed, docs/file-format.md);
* ``lancepart, Lance's compression``: the same with every new table left to Lance's own
  per-page compression choice (what lancepart did before);
* ``delta-rs``: ``write_deltalake(partition_by=["shop"])``.

Each round writes a fresh copy with each system (order rotating), then reads everything back
(``ns.to_table()``, ``DeltaTable.to_pyarrow_table()``) and measures the bytes under the root.
The page cache is written out before each write (``timing.settle``, untimed) and every copy is
kept until the end (about 0.8 GB at the defaults): a copy written back, or thousands of files
removed, while the next system writes slowed it by up to 2x. One untimed warm-up round;
medians; the machine and versions printed.

    python benchmarks/small_tables.py [--rows 1000000] [--partitions 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
from machine_info import machine
from timing import rotated, settle

SYSTEMS = ["lancepart", "lancepart, Lance's compression", "delta-rs"]


def data(rows: int, partitions: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = pa.array([rng.bytes(20).hex() for _ in range(20_000)])
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "shop": pa.array(rng.integers(0, partitions, rows), pa.int64()),
        "ts": pa.array(rng.integers(0, 10**15, rows), pa.timestamp("us", "UTC")),
        "amount": pa.array(rng.random(rows)),
        "s": words.take(pa.array(rng.integers(0, len(words), rows))),
    })


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import deltalake

    from lancepart import PartitionedNamespace
    from lancepart.evolution import file_format

    small = file_format.SMALL_TABLE_ROWS
    table = data(args.rows, args.partitions)
    spec = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int64"}}]}
    print(json.dumps({"machine": machine("pyarrow", "lance", "deltalake"), "rows": args.rows,
                      "partitions": args.partitions, "rounds": args.rounds}), flush=True)
    results: dict[str, list[tuple[float, float, int]]] = {s: [] for s in SYSTEMS}
    work = tempfile.mkdtemp(prefix="lancepart-bench-small-")
    try:
        for rnd in range(args.rounds + 1):
            order = rotated(SYSTEMS, rnd)
            line = []
            for system in order:
                root = os.path.join(work, f"{rnd}-{SYSTEMS.index(system)}")
                settle()  # the copies written before are on disk, not written back during this write
                if system == "delta-rs":
                    t0 = time.perf_counter()
                    deltalake.write_deltalake(root, table, partition_by=["shop"])
                    write = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    n = deltalake.DeltaTable(root).to_pyarrow_table().num_rows
                    read = time.perf_counter() - t0
                else:
                    file_format.SMALL_TABLE_ROWS = small if system == "lancepart" else 0
                    ns = PartitionedNamespace.create(root, table.schema, spec)
                    t0 = time.perf_counter()
                    ns.write(table)
                    write = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    n = ns.to_table().num_rows
                    read = time.perf_counter() - t0
                    file_format.SMALL_TABLE_ROWS = small
                assert n == args.rows, (system, n)
                size = du(root)  # every copy stays until the end: removing one slowed whichever wrote next
                if rnd:
                    results[system].append((write, read, size))
                line.append(f"{system} write {write:.2f}s read {read:.2f}s {size / 1e6:.1f} MB")
            print(f"round {rnd}{' (warm-up)' if not rnd else ''}: " + "; ".join(line), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {s: tuple(statistics.median(r[i] for r in v) for i in range(3)) for s, v in results.items()}
    delta = med["delta-rs"]
    print(f"{'system':34s} {'write s':>8s} {'vs delta':>8s} {'read s':>7s} {'MB':>7s}")
    for s, (w, r, b) in med.items():
        print(f"{s:34s} {w:8.2f} {w / delta[0]:8.2f} {r:7.2f} {b / 1e6:7.1f}")
    print(json.dumps({s: {"write_s": round(w, 3), "read_s": round(r, 3), "bytes": int(b),
                          "write_vs_delta_rs": round(w / delta[0], 2)} for s, (w, r, b) in med.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
