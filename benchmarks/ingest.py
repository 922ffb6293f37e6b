"""Ingest benchmark: lancepart's Spark write vs Spark's own partitioned Parquet writer.

In ONE Spark session, on the same cached DataFrame, each case runs both writers warm for
several rounds and prints the median time of each and their ratio (lancepart / Spark;
target <= 1.0), rows/s, and the number of __manifest commits per lancepart job.

Cases (same number of partitions for both writers):
* bucket16:  lancepart bucket(user_id, 16)   vs  partitionBy(<precomputed bucket column>)
* identity1k: lancepart identity(shop_id)   vs  partitionBy(shop_id), ~1000 distinct values

Both writers run in the same session with the same driver heap (``--driver-memory``, 4g by
default: at 1g Spark's Parquet writer starves at 16 M rows and the ratio says nothing).

    python benchmarks/ingest.py [--rows 2000000] [--rounds 3] [--master local[*]] [--driver-memory 4g]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow as pa
from machine_info import machine


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--cases", default="bucket16,identity1k")
    ap.add_argument("--driver-memory", default="4g",
                    help="spark.driver.memory, the same for both writers (with local[*] the driver runs the tasks)")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lancepart import PartitionedNamespace
    from lancepart import spark as lps
    from lancepart.model import murmur3
    from lancepart.spark.sample import generated_events

    spark = (SparkSession.builder.master(args.master).appName("lancepart-bench-ingest")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "8")
             .config("spark.driver.memory", args.driver_memory).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="lancepart-bench-")

    base = generated_events(spark, args.rows, seed=1).withColumn("shop_id", F.col("user_id") % 1000)
    # Spark's writer needs the partition value as a column; give it the same bucket numbers.
    @F.pandas_udf("int")
    def bucket16(s):  # computed once, before timing, for the Spark side only
        import pandas as pd

        return pd.Series(murmur3.bucket(pa.array(s), 16).to_numpy(zero_copy_only=False))

    df = base.withColumn("b16", bucket16("user_id")).cache()
    n = df.count()
    specs = {
        "bucket16": ({"field_id": "b", "source_ids": [4], "transform": {"type": "bucket", "num_buckets": 16},
                      "result_type": {"type": "int32"}}, "b16"),
        "identity1k": ({"field_id": "shop", "source_ids": [6], "transform": {"type": "identity"},
                        "result_type": {"type": "int64"}}, "shop_id"),
    }
    from pyspark.sql.pandas.types import to_arrow_schema

    tz = spark.conf.get("spark.sql.session.timeZone")
    schema = to_arrow_schema(df.drop("b16").schema, timezone=tz)
    report = {"machine": machine("pyspark", "lance", "pyarrow"), "rows": n, "rounds": args.rounds,
              "driver_memory": args.driver_memory, "cases": {}}
    for case in args.cases.split(","):
        field, spark_col = specs[case]
        lp_df, sp_df = df.drop("b16"), df
        lp_times, sp_times, commits, parts = [], [], [], 0
        for rnd in range(args.rounds + 1):  # round 0 warms up both writers
            root = os.path.join(work, f"{case}-lp-{rnd}")
            ns = PartitionedNamespace.create(root, schema, {"id": 1, "fields": [field]})
            v0 = ns.manifest_version
            t = time.perf_counter()
            r = lps.write(lp_df, root)
            lp = time.perf_counter() - t
            out = os.path.join(work, f"{case}-spark-{rnd}")
            t = time.perf_counter()
            sp_df.write.mode("overwrite").partitionBy(spark_col).parquet(out)
            sp = time.perf_counter() - t
            parts = r.partitions_touched
            spark_parts = sum(1 for d in os.listdir(out) if d.startswith(spark_col + "="))
            assert r.rows_written == n and spark_parts == parts, (r, spark_parts)
            if rnd:
                lp_times.append(lp)
                sp_times.append(sp)
                commits.append(r.manifest_version - v0)
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
            print(f"{case} round {rnd}: lancepart {lp:.2f}s {r.details}  spark parquet {sp:.2f}s", file=sys.stderr)
        lp_med, sp_med = statistics.median(lp_times), statistics.median(sp_times)
        report["cases"][case] = {
            "partitions": parts, "lancepart_s": round(lp_med, 3), "spark_parquet_s": round(sp_med, 3),
            "ratio": round(lp_med / sp_med, 3), "lancepart_rows_per_s": round(n / lp_med),
            "spark_rows_per_s": round(n / sp_med), "manifest_commits_per_job": statistics.median(commits),
        }
    print(f"machine: {report['machine']}, driver memory {args.driver_memory}")
    print(f"{'case':<12}{'partitions':>11}{'lancepart s':>13}{'spark s':>10}{'ratio':>8}{'lp rows/s':>13}"
          f"{'commits/job':>13}")
    for case, c in report["cases"].items():
        print(f"{case:<12}{c['partitions']:>11}{c['lancepart_s']:>13.2f}{c['spark_parquet_s']:>10.2f}"
              f"{c['ratio']:>8.2f}{c['lancepart_rows_per_s']:>13,}{c['manifest_commits_per_job']:>13}")
    print(json.dumps(report))
    shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
