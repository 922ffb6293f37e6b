"""Reading through the ``lancepart`` data source against Spark's own Parquet source on the same
rows, in one Spark session started before the clock (docs/benchmarks.md "Spark scans").

The rows (``id``, ``k``, ``amount``, a 24-character ``note``) are written once by lancepart
(identity partitions on ``k``) and once by ``df.write.partitionBy("k").parquet(...)``. Each
round, in alternating order, runs the same queries on both, each on a DataFrame loaded afresh:

* ``count``: ``count()`` of everything (Parquet answers it from its footers);
* ``sum``: ``sum(amount)`` of everything (a column read; Spark 4.3 gives a Python data source no
  column pruning, so lancepart reads every column);
* ``sum_projected``: the same with ``.schema("amount double")`` on the lancepart reader (the
  projection docs/datasource.md shows), beside Parquet's ``sum``;
* ``where``: ``.where("k = <one key>")`` then ``count()`` + ``sum(amount)`` (Parquet prunes to one
  directory; the data source reads every table and Spark filters, see docs/datasource.md
  "One read plan per DataFrame");
* ``filter``: the same through ``option("filter", "k = <key>")`` (pruned through ``__manifest``),
  beside Parquet's pruned ``where``.

One warm-up round, then the median of ``--rounds``; answers are checked equal; ratios are
lancepart / Parquet.

    python benchmarks/spark_scan.py [--rows 1000000] [--partitions 16 1000] [--rounds 3] [--master local[2]]
                                    [--no-warmup] [--queries count sum sum_projected where filter]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

from machine_info import machine


def _query(spark, kind: str, q: str, root: str, pq: str, key: int) -> tuple[float, tuple]:
    """Seconds of query ``q`` on ``kind`` ("lancepart" or "parquet"), and its answer."""
    from pyspark.sql import functions as F

    t = time.monotonic()
    if kind == "parquet":
        df = spark.read.parquet(pq)
    elif q == "filter":
        df = spark.read.format("lancepart").option("filter", f"k = {key}").load(root)
    elif q == "sum_projected":  # the data source reads the columns .schema(...) names
        df = spark.read.format("lancepart").schema("amount double").load(root)
    else:
        df = spark.read.format("lancepart").load(root)
    if q == "count":
        out: tuple = (df.count(),)
    elif q in ("sum", "sum_projected"):
        out = (df.agg(F.sum("amount")).first()[0],)
    else:
        if q == "where" or kind == "parquet":
            df = df.where(F.col("k") == key)
        row = df.agg(F.count("*"), F.sum("amount")).first()
        out = (row[0], row[1])
    return time.monotonic() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, nargs="+", default=[16, 1000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-warmup", action="store_true",
                    help="no warm-up round (at 10 000 partitions every Parquet load lists 10 000 directories)")
    ap.add_argument("--queries", nargs="+", default=["count", "sum", "sum_projected", "where", "filter"])
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from lancepart import PartitionedNamespace, PartitionSpec
    from lancepart import spark as lps

    spark = (SparkSession.builder.master(args.master).appName("spark-scan-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    lps.register(spark)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()), ("amount", pa.float64()),
                        ("note", pa.utf8())])
    base = tempfile.mkdtemp(prefix="lp-scan-bench-")
    results = {}
    for parts in args.partitions:
        ids = np.arange(args.rows, dtype=np.int64)
        rng = np.random.default_rng(7)
        table = pa.table({"id": ids, "k": pa.array(ids % parts, pa.int32()), "amount": rng.random(args.rows) * 100,
                          "note": pa.array([f"note-{i:018d}" for i in range(args.rows)])}, schema=schema)
        root, pq = os.path.join(base, f"lp-{parts}"), os.path.join(base, f"pq-{parts}")
        spec = {"id": 1, "fields": [{"field_id": "k", "source_ids": [1], "transform": {"type": "identity"},
                                     "result_type": {"type": "int32"}}]}
        ns = PartitionedNamespace.create(root, schema, PartitionSpec.from_json(spec))
        ns.write(table)
        spark.createDataFrame(table).write.partitionBy("k").parquet(pq)
        key = parts // 2

        queries = tuple(args.queries)
        times: dict[str, list[float]] = {f"{q}_{k}": [] for q in queries for k in ("lancepart", "parquet")}
        tasks = spark.read.format("lancepart").load(root).rdd.getNumPartitions()
        for i in range(0 if args.no_warmup else 1, args.rounds + 1):
            order = ("lancepart", "parquet") if i % 2 == 0 else ("parquet", "lancepart")
            for q in queries:
                answers = {}
                for kind in order:
                    s, answers[kind] = _query(spark, kind, q, root, pq, key)
                    if i:
                        times[f"{q}_{kind}"].append(s)
                a, b = answers["lancepart"], answers["parquet"]
                assert a[0] == b[0] if q == "count" else math.isclose(a[-1], b[-1], rel_tol=1e-9), (q, answers)
        med = {k: round(statistics.median(v), 3) for k, v in times.items()}
        results[parts] = {"tasks": tasks, "median_s": med,
                          "ratio": {q: round(med[f"{q}_lancepart"] / med[f"{q}_parquet"], 2) for q in queries}}
        shutil.rmtree(root)
        shutil.rmtree(pq)
    shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"rows": args.rows, "rounds": args.rounds, "master": args.master, "partitions": results,
                      "machine": machine("pyspark", "pyarrow", "lance")}, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
