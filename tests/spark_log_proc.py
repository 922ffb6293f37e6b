"""A Spark writer process for the Lance log test: a user's own SparkSession, started before
lancepart is imported (so neither the JVM nor its Python workers inherit lancepart's LANCE_LOG),
writes generated rows into a new namespace under DIR/quiet; then, with the session's executor
environment set to ``LANCE_LOG=warn`` (Lance's usual filter), into DIR/warn; then, as a control,
a Spark task writes Lance fragments into fresh directories the way lancepart's Spark write used
to. Prints a marker line on stderr between the phases, and JSON on stdout."""

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
    root = os.path.join(out, "quiet")
    create_events_ns(root)
    versions["quiet"] = lps.write(generated_events(spark, 2_000, seed=7), root).manifest_version
    print("=== LANCE_LOG=warn from here ===", file=sys.stderr, flush=True)
    spark.sparkContext.environment["LANCE_LOG"] = "warn"
    root = os.path.join(out, "warn")
    create_events_ns(root)
    versions["warn"] = lps.write(generated_events(spark, 2_000, seed=7), root).manifest_version
    print("=== control from here ===", file=sys.stderr, flush=True)
    # what lancepart's Spark write used to do: fragments into a directory with no table yet
    fresh = os.path.join(out, "control")

    def write_fresh(batches):
        import lance
        import pyarrow as pa

        for i, batch in enumerate(batches):
            lance.fragment.write_fragments(pa.Table.from_batches([batch]), f"{fresh}/t{os.getpid()}_{i}")
            yield batch.slice(0, 0)

    df = generated_events(spark, 2_000, seed=7)
    versions["control"] = len(df.mapInArrow(write_fresh, df.schema).collect()) + 1
    print(json.dumps(versions))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
