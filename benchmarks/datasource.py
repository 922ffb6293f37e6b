"""The ``lancepart`` data source (docs/datasource.md) against ``lps.write`` / ``lps.read`` on the
same data, in one Spark session started before the clock.

Each round, in alternating order: write the same DataFrame (generated on the executors, cached
first) into a fresh namespace through ``df.write.format("lancepart")`` and through ``lps.write``;
then read a whole namespace and one day of it (``count()`` and ``sum(amount)``) through
``spark.read.format("lancepart")`` and ``lps.read``. The data source reads the day with option
``filter`` (pruned through ``__manifest``) and with a ``WHERE`` (applied by Spark after reading
every partition table). One warm-up round, then the median of ``--rounds``. Results are
checked equal.

    python benchmarks/datasource.py [--rows 1000000] [--rounds 3] [--master local[2]]
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

from machine_info import machine

SPEC = {"id": 1, "fields": [
    {"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"}, "result_type": {"type": "date32"}},
    {"field_id": "user_bucket", "source_ids": [4], "transform": {"type": "bucket", "num_buckets": 4},
     "result_type": {"type": "int32"}},
]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lancepart import PartitionedNamespace
    from lancepart import spark as lps
    from lancepart.spark.sample import generated_events
    from lancepart.util.sample import demo_events

    spark = (SparkSession.builder.master(args.master).appName("datasource-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    lps.register(spark)
    df = generated_events(spark, args.rows, seed=3).cache()
    df.count()
    schema = demo_events(1).schema
    schema = schema.set(0, schema.field("id").with_nullable(False))
    day = df.select(F.min("event_date")).collect()[0][0]
    base = tempfile.mkdtemp(prefix="lp-ds-bench-")

    def write(kind: str, i: int) -> tuple[float, str]:
        root = os.path.join(base, f"{kind}-{i}")
        PartitionedNamespace.create(root, schema, SPEC)
        t = time.monotonic()
        if kind == "format":
            df.write.format("lancepart").mode("append").save(root)
        else:
            lps.write(df, root)
        return time.monotonic() - t, root

    def read(kind: str, root: str, where: bool) -> tuple[float, tuple]:
        t = time.monotonic()
        by_day = f"event_date = DATE '{day}'" if where else None
        if kind == "format":
            r = spark.read.format("lancepart")
            r = (r.option("filter", by_day) if by_day else r).load(root)
        elif kind == "where":
            r = spark.read.format("lancepart").load(root).where(F.col("event_date") == F.lit(day))
        else:
            r = lps.read(spark, root, by_day)
        row = r.agg(F.count("*"), F.sum("amount")).collect()[0]
        return time.monotonic() - t, (row[0], round(row[1], 2))

    times: dict[str, list[float]] = {k: [] for k in ("write_format", "write_lps", "read_all_format", "read_all_lps",
                                                     "read_day_format", "read_day_where", "read_day_lps")}
    for i in range(args.rounds + 1):
        order = ("format", "lps") if i % 2 == 0 else ("lps", "format")
        roots, answers = {}, {}
        for kind in order:
            s, roots[kind] = write(kind, i)
            if i:
                times[f"write_{kind}"].append(s)
        for where, name in ((False, "read_all"), (True, "read_day")):
            for kind in order + (("where",) if where else ()):
                s, answers[(name, kind)] = read(kind, roots["lps"], where)
                if i:
                    times[f"{name}_{kind}"].append(s)
            assert len({v for (n, _), v in answers.items() if n == name}) == 1, answers
        a = PartitionedNamespace.open(roots["format"]).to_table().sort_by("id")
        b = PartitionedNamespace.open(roots["lps"]).to_table().sort_by("id")
        assert a.equals(b)
        for kind in order:
            shutil.rmtree(roots[kind])
    shutil.rmtree(base, ignore_errors=True)
    out = {"rows": args.rows, "rounds": args.rounds, "master": args.master,
           "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
           "machine": machine("pyspark", "pyarrow", "lance")}
    print(json.dumps(out, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
