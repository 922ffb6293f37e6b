"""Partition tables created small that grew large: what the compaction's re-encode costs and
what it gives back, in compaction time, bytes on disk, read time and the bytes of a later append.

A table created with fewer than ``SMALL_TABLE_ROWS`` rows stores its strings uncompressed, and
Lance writes every later append and compaction rewrite of it the same way (docs/file-format.md).
Here ``--partitions`` tables are created with 1 000 rows each, then grow by ``--appends``
appends of ``--append-rows`` rows per table (an int64 ``id``, a timestamp, a float64 and a
URL-like string of about 75 characters, almost every value distinct). Two identical namespaces are then compacted
in ONE process, order rotating per round:

* ``re-encode``: ``ns.compact()`` as it is (the grown tables get Lance's string compression
  back, then the rewrite);
* ``as before``: the same compaction with the re-encode kept from firing (the tables keep
  ``compression=none``), what lancepart did before.

Then each namespace is read in full (``ns.to_table()``), the bytes of its published table
versions measured, one more append of
``--append-rows`` rows per table written and its bytes measured. One untimed warm-up round;
medians; the machine and versions printed.

    python benchmarks/grown_tables.py [--partitions 20] [--appends 4] [--append-rows 50000] [--rounds 3]
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

SYSTEMS = ["re-encode", "as before"]


def rows(n: int, partitions: int, start: int, seed: int) -> pa.Table:
    """``n`` rows, spread evenly over ``partitions`` shops; ``url`` is a page address with two
    random numbers in it (almost every value distinct, as addresses, user agents or messages are:
    Lance's dictionary encoding does not apply, its FSST does)."""
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    item = pc.cast(pa.array(rng.integers(0, 10**9, n)), pa.utf8())
    ref = pc.cast(pa.array(rng.integers(0, 10**6, n)), pa.utf8())
    url = pc.binary_join_element_wise("https://shop.example.com/catalog/item/", item, "?ref=campaign-", ref, "")
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "shop": pa.array(np.arange(n) % partitions, pa.int64()),
        "ts": pa.array(rng.integers(0, 10**15, n), pa.timestamp("us", "UTC")),
        "amount": pa.array(rng.random(n)),
        "url": url,
    })


def published_bytes(ns) -> int:
    """The bytes of the data files every published table version holds (older versions, which a
    cleanup removes later, left out)."""
    import lance

    from lancepart.storage.manifest import join_uri

    total = 0
    for p in ns.partitions():
        ds = lance.dataset(join_uri(ns.root, p.location), version=p.read_version)
        total += sum(f.file_size_bytes or 0 for fr in ds.get_fragments() for f in fr.metadata.files)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--appends", type=int, default=4)
    ap.add_argument("--append-rows", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from lancepart import PartitionedNamespace
    from lancepart.evolution import file_format

    small = file_format.SMALL_TABLE_ROWS
    p = args.partitions
    spec = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int64"}}]}
    first = rows(1_000 * p, p, 0, 1)
    appends = [rows(args.append_rows * p, p, (i + 1) * 10**8, i + 2) for i in range(args.appends)]
    later = rows(args.append_rows * p, p, 10**12, 99)
    total = first.num_rows + sum(a.num_rows for a in appends)
    print(json.dumps({"machine": machine("pyarrow", "lance"), "partitions": p, "rows_per_table":
                      total // p, "appends": args.appends, "rounds": args.rounds}), flush=True)
    keys = ("compact_s", "bytes", "read_s", "append_bytes")
    results: dict[str, list[tuple[float, ...]]] = {s: [] for s in SYSTEMS}
    work = tempfile.mkdtemp(prefix="lancepart-bench-grown-")
    try:
        for rnd in range(args.rounds + 1):
            roots = {}
            for system in SYSTEMS:  # the same namespace twice, untimed
                roots[system] = root = os.path.join(work, f"{rnd}-{SYSTEMS.index(system)}")
                ns = PartitionedNamespace.create(root, first.schema, spec)
                ns.write(first)
                for a in appends:
                    ns.write(a)
            settle()
            line = []
            for system in rotated(SYSTEMS, rnd):
                root = roots[system]
                ns = PartitionedNamespace.open(root)
                file_format.SMALL_TABLE_ROWS = small if system == "re-encode" else 10**18
                try:
                    t0 = time.perf_counter()
                    result = ns.compact()
                    compact = time.perf_counter() - t0
                finally:
                    file_format.SMALL_TABLE_ROWS = small
                assert result.details["tables_reencoded"] == (p if system == "re-encode" else 0), result.details
                size = published_bytes(ns)
                t0 = time.perf_counter()
                n = ns.to_table().num_rows
                read = time.perf_counter() - t0
                assert n == total, (system, n)
                ns.write(later)
                append = published_bytes(ns) - size
                if rnd:
                    results[system].append((compact, size, read, append))
                line.append(f"{system}: compact {compact:.2f}s {size / 1e6:.1f} MB read {read:.2f}s "
                            f"append {append / 1e6:.1f} MB")
            for root in roots.values():
                shutil.rmtree(root)
            print(f"round {rnd}{' (warm-up)' if not rnd else ''}: " + "; ".join(line), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {s: dict(zip(keys, (statistics.median(r[i] for r in v) for i in range(len(keys))), strict=True))
           for s, v in results.items()}
    print(f"{'compaction':12s} {'compact s':>9s} {'MB pub.':>9s} {'read s':>7s} {'append MB':>9s}")
    for s, m in med.items():
        print(f"{s:12s} {m['compact_s']:9.2f} {m['bytes'] / 1e6:9.1f} {m['read_s']:7.2f}"
              f" {m['append_bytes'] / 1e6:9.1f}")
    print(json.dumps({s: {k: round(v, 3) for k, v in m.items()} for s, m in med.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
