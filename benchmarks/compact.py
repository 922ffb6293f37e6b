"""Compaction benchmark: a namespace of many partitions built by many small appends, compacted
in-process (``ns.compact``) and with Spark (``lps.compact``, one task per table).

Builds ``--partitions`` partition tables (identity(shop_id)) with ``--appends`` appends of
``--rows-per-partition`` rows to every partition (one fragment per partition per append), copies
the namespace, compacts one copy locally and the other with Spark (session started before the
clock; once with one task per table, once with the default grouping of tables into tasks), and
prints fragments and bytes before/after, the time of each (with its phases), the __manifest
commits, and a full-snapshot read before and after compaction.

    python benchmarks/compact.py [--partitions 512] [--appends 20] [--rows-per-partition 100] [--master local[*]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
from machine_info import machine


def build(root: str, partitions: int, appends: int, rows_per_partition: int) -> float:
    from lancepart import PartitionedNamespace

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("shop_id", pa.int32()),
                        ("amount", pa.float64()), ("note", pa.utf8())])
    spec = {"id": 1, "fields": [{"field_id": "shop_id", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(root, schema, spec)
    rng = np.random.default_rng(7)
    n = partitions * rows_per_partition
    started = time.monotonic()
    for i in range(appends):
        ns.write(pa.table({
            "id": pa.array(np.arange(i * n, (i + 1) * n, dtype=np.int64)),
            "shop_id": pa.array(np.repeat(np.arange(partitions, dtype=np.int32), rows_per_partition)),
            "amount": pa.array(np.round(rng.gamma(2.0, 20.0, n), 2)),
            "note": pa.array(rng.choice(np.array(["ok", "late", "refund", "gift wrap"]), n)),
        }))
        print(f"append {i + 1}/{appends}", file=sys.stderr)
    return time.monotonic() - started


def timed_read(root: str) -> tuple[float, int]:
    from lancepart import PartitionedNamespace

    ns = PartitionedNamespace.open(root)
    t = time.monotonic()
    rows = ns.to_table().num_rows
    return time.monotonic() - t, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=512)
    ap.add_argument("--appends", type=int, default=20)
    ap.add_argument("--rows-per-partition", type=int, default=100)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from lancepart import PartitionedNamespace
    from lancepart import spark as lps

    work = tempfile.mkdtemp(prefix="lancepart-compact-bench-")
    try:
        src, local_root, spark_root, grouped_root = (os.path.join(work, n) for n in ("src", "local", "spark", "grp"))
        build_s = build(src, args.partitions, args.appends, args.rows_per_partition)
        shutil.copytree(src, local_root)
        shutil.copytree(src, spark_root)
        shutil.copytree(src, grouped_root)
        read_before_s, rows = timed_read(src)

        ns = PartitionedNamespace.open(local_root)
        v0 = ns.manifest_version
        t = time.monotonic()
        local = ns.compact()
        local_s = time.monotonic() - t
        read_after_s, rows_after = timed_read(local_root)
        assert rows_after == rows, (rows_after, rows)

        spark = (SparkSession.builder.master(args.master).appName("lancepart-compact-bench")
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(4).count()  # start the executors before the clock
        t = time.monotonic()
        remote = lps.compact(spark, spark_root, tables_per_task=1)
        spark_s = time.monotonic() - t
        t = time.monotonic()
        grouped = lps.compact(spark, grouped_root)
        grouped_s = time.monotonic() - t
        spark.stop()
        assert timed_read(spark_root)[1] == rows == timed_read(grouped_root)[1]

        d = local.details
        report = {
            "machine": machine("lance", "pyarrow", "pyspark"),
            "partitions": args.partitions, "appends": args.appends, "rows": rows, "build_s": round(build_s, 1),
            "fragments_before": d["fragments_before"], "fragments_after": d["fragments_after"],
            "bytes_before": d["bytes_before"], "bytes_after": d["bytes_after"],
            "tables_compacted": local.partitions_touched, "rows_rewritten": local.rows_written,
            "local_s": round(local_s, 2), "spark_s": round(spark_s, 2),
            "local_phases": {k: v for k, v in d.items() if k.endswith("_s")},
            "spark_phases": {k: v for k, v in remote.details.items() if k.endswith("_s")},
            "manifest_commits": local.manifest_version - v0,
            "spark_fragments_after": remote.details["fragments_after"],
            "spark_grouped_s": round(grouped_s, 2), "spark_grouped_tasks": grouped.details["spark_tasks"],
            "spark_grouped_phases": {k: v for k, v in grouped.details.items() if k.endswith("_s")},
            "spark_grouped_fragments_after": grouped.details["fragments_after"],
            "read_before_s": round(read_before_s, 2), "read_after_s": round(read_after_s, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {report['machine']}")
    print(f"{report['partitions']} partitions x {report['appends']} appends, {report['rows']} rows: fragments "
          f"{report['fragments_before']} -> {report['fragments_after']}, bytes {report['bytes_before']} -> "
          f"{report['bytes_after']}; local {report['local_s']} s, Spark {report['spark_s']} s (one task per table), "
          f"{report['spark_grouped_s']} s ({report['spark_grouped_tasks']} tasks); full read "
          f"{report['read_before_s']} s -> {report['read_after_s']} s")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
