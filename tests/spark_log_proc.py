"""A Spark writer process for the Lance log test: a user's own SparkSession, started before
lancepart is imported (so neither the JVM nor its Python workers inherit lancepart's LANCE_LOG),
writes generated rows into a new namespace under DIR/quiet; then, with the session's executor
environment set to ``LANCE_LOG=warn`` (Lance's usual filter), into DIR/loud. Prints a marker line
on stderr between the two, and the manifest versions as JSON on stdout."""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession


def main() -> int:
    out = sys.argv[1]
    os.environ.pop("LANCE_LOG", None)
    spark = (SparkSession.builder.master("local[2]").appName("lancepart-log-test")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    from lancepart import spark as lps
    from lancepart.spark.sample import generated_events
    from tests.conftest import create_events_ns

    versions = {}
    for name in ("quiet", "loud"):
        if name == "loud":
            print("=== LANCE_LOG=warn from here ===", file=sys.stderr, flush=True)
            spark.sparkContext.environment["LANCE_LOG"] = "warn"
        root = os.path.join(out, name)
        create_events_ns(root)
        versions[name] = lps.write(generated_events(spark, 2_000, seed=7), root).manifest_version
    print(json.dumps(versions))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
