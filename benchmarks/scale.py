"""Namespace-size benchmark: what a publish, an open and a pruned lookup cost as the number of
partitions grows (docs/design.md, "The __manifest commit").

For each size (1 000, 10 000, 100 000 partitions by default) a namespace with one
``identity(shop)`` partition field is built with ``ns.write`` calls of ``--build-batch``
partitions each (one row per partition; the build rate is printed), then, ``--runs`` times each:

* ``append``: a one-row ``ns.write`` into an existing partition (a table commit and one
  ``__manifest`` publish);
* ``open``: ``PartitionedNamespace.open(root)``;
* ``open+prune``: open, then ``partitions("shop = <v>")`` (a pruned point lookup);
* ``cold open``, ``cold open+prune``: the same with a process cache of ``__manifest`` rows
  emptied first, where the code has one (without one they measure the same as the others);
* ``manifest commit``: the ``__manifest`` publish alone (``read_version`` of one table moved
  to the version it already has), which is what grows when every commit rewrites the table.

Medians in milliseconds, and the ratio of each size to the smallest. ``--keep DIR`` keeps the
built namespaces under DIR and reuses them on the next run (the build of 100 000 partitions
takes minutes).

    python benchmarks/scale.py [--sizes 1000,10000,100000] [--runs 15] [--keep /tmp/scale]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import pyarrow as pa
from machine_info import machine
from timing import median_ms

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("shop", pa.int32())])
SPEC = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                             "result_type": {"type": "int32"}}]}


def rows(shops: range, start_id: int) -> pa.Table:
    n = len(shops)
    return pa.table({"id": pa.array(range(start_id, start_id + n), pa.int64()),
                     "shop": pa.array(shops, pa.int32())}, schema=SCHEMA)


def build(root: str, size: int, batch: int) -> tuple[float, bool]:
    """Create (or reuse) a namespace of ``size`` partitions at ``root``; (seconds, reused)."""
    from lancepart import PartitionedNamespace

    if os.path.exists(os.path.join(root, "__manifest")):
        ns = PartitionedNamespace.open(root)
        if len(ns.partitions()) == size:
            return 0.0, True
        raise SystemExit(f"{root} exists with another number of partitions; remove it")
    t = time.perf_counter()
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    for lo in range(0, size, batch):
        hi = min(size, lo + batch)
        ns.write(rows(range(lo, hi), lo))
        print(f"  built {hi}/{size} partitions, {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return time.perf_counter() - t, False


def measure(root: str, size: int, runs: int) -> dict:
    from lancepart import PartitionedNamespace

    try:
        from lancepart.storage.manifest import PINS_CACHE
    except ImportError:  # a release without the cache: every open is cold
        PINS_CACHE = None
    ns = PartitionedNamespace.open(root)
    next_id = 10**12 + size * 1000
    shop = size // 2

    def append(i: int) -> None:
        ns.write(rows(range(shop, shop + 1), next_id + i))

    def open_(i: int) -> None:
        PartitionedNamespace.open(root)

    def open_prune(i: int) -> None:
        found = PartitionedNamespace.open(root).partitions(f"shop = {(shop + 7 * i) % size}")
        assert len(found) == 1, found

    def cold(fn):  # the first open of a version in this process: its table rows are read
        def run(i: int) -> None:
            if PINS_CACHE is not None:
                PINS_CACHE.clear()
            fn(i)
        return run

    def manifest_commit(i: int) -> None:
        snap = ns.manifest.snapshot()
        if hasattr(snap, "read_version_changes"):
            version = snap.lookup([found_oid]).column("read_version")[0].as_py()
            ns.manifest.commit_changes(snap, snap.read_version_changes({found_oid: version}))
        else:  # a release whose every commit rewrites the table
            ns.manifest.commit(snap, snap.rows)

    found_oid = PartitionedNamespace.open(root).partitions(f"shop = {shop}")[0].object_id
    append(runs)  # warm
    return {
        "partitions": size,
        "append_ms": median_ms(append, runs),
        "open_ms": median_ms(open_, runs),
        "open_prune_ms": median_ms(open_prune, runs),
        "cold_open_ms": median_ms(cold(open_), runs),
        "cold_open_prune_ms": median_ms(cold(open_prune), runs),
        "manifest_commit_ms": median_ms(manifest_commit, runs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--build-batch", type=int, default=10_000)
    ap.add_argument("--keep", help="directory to keep (and reuse) the built namespaces in")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = args.keep or tempfile.mkdtemp(prefix="lancepart-scale-")
    os.makedirs(base, exist_ok=True)
    print(json.dumps({"machine": machine("lance", "pyarrow")}))
    results = []
    for size in sizes:
        root = os.path.join(base, f"ns{size}")
        seconds, reused = build(root, size, args.build_batch)
        r = measure(root, size, args.runs)
        r["build_s"] = None if reused else round(seconds, 1)
        r["build_partitions_per_s"] = None if reused else round(size / seconds)
        results.append(r)
        print(json.dumps(r), flush=True)
    first = results[0]
    print(f"\n{'partitions':>10} {'append ms':>10} {'open ms':>8} {'open+prune ms':>14} {'cold open':>10} "
          f"{'cold open+prune':>16} {'__manifest ms':>14} {'append/append@' + str(first['partitions']):>18}")
    for r in results:
        print(f"{r['partitions']:>10} {r['append_ms']:>10} {r['open_ms']:>8} {r['open_prune_ms']:>14} "
              f"{r['cold_open_ms']:>10} {r['cold_open_prune_ms']:>16} {r['manifest_commit_ms']:>14} "
              f"{r['append_ms'] / first['append_ms']:>18.2f}")


if __name__ == "__main__":
    main()
