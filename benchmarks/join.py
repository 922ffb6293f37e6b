"""Storage-partitioned join benchmark (spec Appendix F, docs/spark-join.md): ``lps.join`` with
compatible bucket layouts vs the same join with both sides shuffled.

Builds ``orders`` partitioned by bucket(customer_id, 16) and ``customers`` by
bucket(id, 8), then times, in one Spark session (started before the clock), the same
aggregate ``groupBy(segment).agg(count, sum(amount))`` over:

* spj:      ``lps.join(...)``: one task per partition group (coarse bucket b with fine buckets
            b and b + 8), no Exchange for the join;
* shuffled: ``lps.join(..., spj=False)``: both sides read with ``lps.read`` and joined by Spark
            (sort-merge, broadcast off as it would be at scale).

One warm-up round each, then the median of ``--rounds``; the aggregates of both are checked
equal, and the executed plans are checked for Exchange (the SPJ join has none).

    python benchmarks/join.py [--orders 2000000] [--customers 200000] [--rounds 3] [--master local[*]]
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

import numpy as np
import pyarrow as pa
from machine_info import machine


def bucket(field_id: str, source: int, n: int) -> dict:
    return {"field_id": field_id, "source_ids": [source], "transform": {"type": "bucket", "num_buckets": n},
            "result_type": {"type": "int32"}}


def build(base: str, orders: int, customers: int) -> tuple[str, str, float]:
    from lancepart import PartitionedNamespace

    rng = np.random.default_rng(11)
    started = time.monotonic()
    o_root, c_root = os.path.join(base, "orders"), os.path.join(base, "customers")
    o_schema = pa.schema([pa.field("order_id", pa.int64(), False), ("customer_id", pa.int64()),
                          ("amount", pa.float64())])
    o = PartitionedNamespace.create(o_root, o_schema, {"id": 1, "fields": [bucket("customer_bucket", 1, 16)]})
    o.write(pa.table({"order_id": pa.array(np.arange(orders, dtype=np.int64)),
                      "customer_id": pa.array(rng.integers(0, customers, orders), pa.int64()),
                      "amount": pa.array(np.round(rng.gamma(2.0, 20.0, orders), 2))}, schema=o.schema))
    c_schema = pa.schema([pa.field("id", pa.int64(), False), ("segment", pa.utf8())])
    c = PartitionedNamespace.create(c_root, c_schema, {"id": 1, "fields": [bucket("id_bucket", 0, 8)]})
    c.write(pa.table({"id": pa.array(np.arange(customers, dtype=np.int64)),
                      "segment": pa.array(np.array([f"s{i}" for i in range(7)])[np.arange(customers) % 7])},
                     schema=c.schema))
    return o_root, c_root, time.monotonic() - started


def plan_of(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, default=2_000_000)
    ap.add_argument("--customers", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lancepart import spark as lps

    work = tempfile.mkdtemp(prefix="lancepart-join-bench-")
    try:
        o_root, c_root, build_s = build(work, args.orders, args.customers)
        spark = (SparkSession.builder.master(args.master).appName("lancepart-join-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.autoBroadcastJoinThreshold", "-1").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(4).count()  # start the executors before the clock

        def query(spj: bool):
            joined = lps.join(spark, o_root, c_root, on=[("customer_id", "id")], spj=spj)
            return joined, joined.groupBy("segment").agg(F.count("*").alias("n"), F.sum("amount").alias("amount"))

        report: dict = {"machine": machine("lance", "pyarrow", "pyspark"), "orders": args.orders,
                        "customers": args.customers, "build_s": round(build_s, 1)}
        results = {}
        for name, spj in (("spj", True), ("shuffled", False)):
            joined, agg = query(spj)
            report[f"{name}_join_has_exchange"] = "Exchange" in plan_of(joined)
            report[f"{name}_tasks"] = joined.rdd.getNumPartitions()
            results[name] = sorted((r["segment"], r["n"], round(r["amount"], 2)) for r in agg.collect())  # warm-up
            times = []
            for _ in range(args.rounds):
                t = time.monotonic()
                query(spj)[1].collect()
                times.append(time.monotonic() - t)
            report[f"{name}_s"] = round(statistics.median(times), 2)
            report[f"{name}_rounds_s"] = [round(x, 2) for x in times]
        spark.stop()
        assert results["spj"] == results["shuffled"], "SPJ and the shuffled join disagree"
        assert not report["spj_join_has_exchange"] and report["shuffled_join_has_exchange"]
        report["joined_rows"] = sum(n for _, n, _ in results["spj"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {report['machine']}")
    print(f"{report['orders']} orders x {report['customers']} customers, bucket(16) x bucket(8): "
          f"SPJ {report['spj_s']} s ({report['spj_tasks']} tasks, no Exchange), "
          f"shuffled {report['shuffled_s']} s; {report['joined_rows']} joined rows, same aggregates")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
