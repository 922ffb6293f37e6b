"""The ``lancepart`` data source's change feed (``readChangeFeed``) and Structured Streaming source
(``spark.readStream.format("lancepart")``) on real Spark (local[2]) and real Lance tables.

Offsets of the source are ``__manifest`` versions (spec "Transaction / Read Behavior": a version is a
snapshot), so a replayed micro-batch reads exactly the rows it read the first time."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from lancepart.sample import demo_events
from tests.conftest import EVENTS_SPEC, create_events_ns

pytestmark = pytest.mark.spark

COLS = ["id", "event_date", "country", "amount"]


@pytest.fixture(autouse=True)
def registered(spark):
    lps.register(spark)


def rows(records, cols=(*COLS, "_change_type", "_commit_version")) -> Counter:
    return Counter(tuple(r[c] for c in cols) for r in records)


@pytest.fixture
def history(tmp_path):
    root = str(tmp_path / "src")
    ns = create_events_ns(root)
    ns.write(demo_events(1_000, seed=1))
    first = ns.manifest_version
    ns.write(demo_events(500, seed=2, start_id=10_000))
    ns.delete("country = 'DE'")
    upd = demo_events(1_000, seed=1).slice(0, 30)
    upd = upd.set_column(5, "amount", pa.array([1.5] * 30))
    ns.merge(upd, on=["id"])
    ns.compact()
    return root, first


def test_read_change_feed_equals_ns_changes(spark, history):
    root, first = history
    ns = PartitionedNamespace.open(root)
    df = (spark.read.format("lancepart").option("readChangeFeed", "true").option("startingVersion", first + 1)
          .load(root))
    assert df.columns[-3:] == ["_change_type", "_commit_version", "_commit_timestamp"]
    got = rows(r.asDict() for r in df.select(*COLS, "_change_type", "_commit_version").collect())
    want = rows(ns.changes(first).read_all().to_pylist())
    assert got == want and sum(want.values()) > 0
    kinds = {k[-2] for k in want}
    assert {"insert", "delete", "update_preimage", "update_postimage"} <= kinds
    # endingVersion and a filter
    df = (spark.read.format("lancepart").option("readChangeFeed", "true").option("startingVersion", first + 1)
          .option("endingVersion", first + 2).option("filter", "country = 'US'").load(root))
    got = rows(r.asDict() for r in df.select(*COLS, "_change_type", "_commit_version").collect())
    assert got == rows(ns.changes(first, first + 2, filter="country = 'US'").read_all().to_pylist())
    with pytest.raises(Exception, match="startingVersion"):
        spark.read.format("lancepart").option("readChangeFeed", "true").load(root).collect()


def _run(spark, src_root, sink_root, ck, **options):
    reader = spark.readStream.format("lancepart")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load(src_root).writeStream.format("lancepart").option("checkpointLocation", ck)
         .trigger(availableNow=True).start(sink_root))
    q.awaitTermination()
    assert q.exception() is None
    return q.id


def test_stream_source_emits_each_published_row_once_across_restarts_and_a_replayed_batch(spark, tmp_path):
    """lancepart -> lancepart: the first micro-batch is the snapshot, later ones what new commits
    inserted; a restart continues from the checkpoint; a micro-batch replayed after a crash
    (its commit log entry removed) reads the same rows and the sink skips it."""
    src, sink, ck = str(tmp_path / "src"), str(tmp_path / "sink"), str(tmp_path / "ck")
    ns = create_events_ns(src)
    PartitionedNamespace.create(sink, ns.schema, EVENTS_SPEC)
    ns.write(demo_events(800, seed=1))
    qid = _run(spark, src, sink, ck)
    assert sorted(PartitionedNamespace.open(sink).to_table().column("id").to_pylist()) == list(range(800))

    ns = PartitionedNamespace.open(src)
    ns.write(demo_events(200, seed=2, start_id=5_000))
    ns.delete("country = 'FR'")  # not an insert: a plain stream does not emit it
    ns.compact()  # changes no row
    ns.write(demo_events(100, seed=3, start_id=9_000))
    assert _run(spark, src, sink, ck) == qid
    want = sorted([*range(800), *range(5_000, 5_200), *range(9_000, 9_100)])
    assert sorted(PartitionedNamespace.open(sink).to_table().column("id").to_pylist()) == want

    published = PartitionedNamespace.open(sink).manifest_version
    last = max(int(n) for n in os.listdir(os.path.join(ck, "commits")) if n.isdigit())
    os.remove(os.path.join(ck, "commits", str(last)))  # killed after the sink published, before Spark's commit
    os.remove(os.path.join(ck, "commits", f".{last}.crc"))
    assert _run(spark, src, sink, ck) == qid
    after = PartitionedNamespace.open(sink)
    assert sorted(after.to_table().column("id").to_pylist()) == want
    assert after.manifest_version == published
    assert lps.last_result(sink).skipped


def test_stream_source_change_feed_with_starting_version(spark, tmp_path):
    src = str(tmp_path / "src")
    ns = create_events_ns(src)
    ns.write(demo_events(300, seed=1))
    start = ns.manifest_version + 1
    ns.write(demo_events(100, seed=2, start_id=1_000))
    ns.delete("country = 'US'")
    out = str(tmp_path / "out")
    q = (spark.readStream.format("lancepart").option("readChangeFeed", "true").option("startingVersion", start)
         .load(src).writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    got = rows(r.asDict() for r in spark.read.parquet(out).select(*COLS, "_change_type", "_commit_version").collect())
    assert got == rows(ns.refresh().changes(start - 1).read_all().to_pylist())


def test_stream_source_after_a_rollback_across_a_compaction_emits_no_row_twice(spark, tmp_path):
    """Issue 30 item 3: three appends, a compaction, an append, a rollback to before the
    compaction: the insert-only stream emits each appended row once (the rollback publishes the
    first 300 rows again unchanged: no change), and nothing for the rows the rollback removed."""
    src = str(tmp_path / "src")
    ns = create_events_ns(src)
    for i in range(3):
        ns.write(demo_events(100, seed=i, start_id=i * 100))
    v = ns.manifest_version
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def drain() -> list[int]:
        q = (spark.readStream.format("lancepart").load(src).writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ck).trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None
        return sorted(r.id for r in spark.read.parquet(out).select("id").collect())

    assert drain() == list(range(300))
    ns.compact(min_small_fragments=2)
    ns.write(demo_events(40, seed=9, start_id=5_000))
    assert drain() == [*range(300), *range(5_000, 5_040)]
    ns.rollback(v)
    assert drain() == [*range(300), *range(5_000, 5_040)]  # nothing emitted twice
    assert sorted(ns.refresh().to_table(columns=["id"]).column("id").to_pylist()) == list(range(300))
