"""The ``lancepart`` data source's change feed (``readChangeFeed``) and Structured Streaming source
(``spark.readStream.format("lancepart")``) on real Spark (local[2]) and real Lance tables.

Offsets of the source are ``__manifest`` versions (spec "Transaction / Read Behavior": a version is a
snapshot), so a replayed micro-batch reads exactly the rows it read the first time."""

from __future__ import annotations

import os
import time
from collections import Counter
from datetime import timedelta

import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from lancepart.util.sample import demo_events
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
    ns.write(demo_events(800, seed=1, days=2))  # 8 partition tables: the sink writes each in every micro-batch
    qid = _run(spark, src, sink, ck)
    assert sorted(PartitionedNamespace.open(sink).to_table().column("id").to_pylist()) == list(range(800))

    ns = PartitionedNamespace.open(src)
    ns.write(demo_events(200, seed=2, start_id=5_000, days=2))
    ns.delete("country = 'FR'")  # not an insert: a plain stream does not emit it
    ns.compact()  # changes no row
    ns.write(demo_events(100, seed=3, start_id=9_000, days=2))
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


def _stream_to_parquet(spark, src, out, ck, **options):
    reader = spark.readStream.format("lancepart")
    for k, v in options.items():
        reader = reader.option(k, v)
    return (reader.load(src).writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
            .trigger(availableNow=True).start())


def _stream_error(q, timeout: float = 300) -> str:
    """The error query ``q`` ended with. Bounded: a query still running after ``timeout`` seconds
    is stopped and fails the test, as does one that ends without an error."""
    try:
        ended = q.awaitTermination(timeout)
    except Exception as e:  # Spark's StreamingQueryException around the source's error
        return str(e)
    q.stop()
    pytest.fail("the query ended without an error" if ended else f"the query still ran after {timeout} s")


def _ids(spark, path) -> list[int]:
    return sorted(r.id for r in spark.read.parquet(path).select("id").collect())


def test_stream_restarted_after_a_cleanup_removed_its_checkpointed_version(spark, tmp_path, monkeypatch):
    """issue 30 item 7: stream, stop, write more, a cleanup removes the checkpointed version, restart
    from the checkpoint: SnapshotExpiredError (in Spark's error) naming the checkpointed version, the
    oldest version the stream can resume from and how; doing what it says streams the next rows."""
    from tests.test_cleanup import later

    src, ck = str(tmp_path / "src"), str(tmp_path / "ck")
    ns = create_events_ns(src)
    ns.write(demo_events(300, seed=1))
    q = _stream_to_parquet(spark, src, str(tmp_path / "out"), ck)
    q.awaitTermination(300)
    assert q.exception() is None and _ids(spark, str(tmp_path / "out")) == list(range(300))
    checkpointed = ns.manifest_version
    for i in range(3):
        ns.write(demo_events(100, seed=i + 2, start_id=(i + 1) * 1_000))
    later(monkeypatch)
    ns.cleanup(older_than=timedelta(0), allow_short_retention=True)
    oldest = min(e.version for e in PartitionedNamespace.open(src).history())
    assert oldest > checkpointed

    text = _stream_error(_stream_to_parquet(spark, src, str(tmp_path / "out"), ck))
    assert "SnapshotExpiredError" in text and "CorruptTableError" not in text, text[-3000:]
    assert f"__manifest version {checkpointed} is gone" in text and f"reaches back to version {oldest}" in text
    assert f"can resume from version {oldest} at the earliest" in text and f"startingVersion={oldest + 1}" in text

    ns.refresh().write(demo_events(50, seed=7, start_id=7_000))
    q = _stream_to_parquet(spark, src, str(tmp_path / "out2"), str(tmp_path / "ck2"), startingVersion=oldest + 1)
    q.awaitTermination(300)
    assert q.exception() is None and _ids(spark, str(tmp_path / "out2")) == list(range(7_000, 7_050))


def test_stream_micro_batch_cut_by_a_cleanup_while_it_reads_is_snapshot_expired(spark, tmp_path, monkeypatch):
    """issue 30 item 7: the restarted query planned its micro-batch from __manifest; before the
    executors read it (held at the fault step before_change_task) a cleanup removed those versions
    and the table versions they pinned. The query fails with SnapshotExpiredError naming the oldest
    version it can resume from (it was CorruptTableError, "partition table ... cannot be opened")."""
    from lancepart.spark.datasource import LancepartDataSource
    from tests.test_cleanup import later

    src, ck, out = str(tmp_path / "src"), str(tmp_path / "ck"), str(tmp_path / "out")
    ns = create_events_ns(src)
    ns.write(demo_events(300, seed=1))
    q = _stream_to_parquet(spark, src, out, ck)
    q.awaitTermination(300)
    assert q.exception() is None
    for i in range(3):
        ns.write(demo_events(100, seed=i + 2, start_id=(i + 1) * 1_000))
    gate = tmp_path / "gate"
    env = spark.sparkContext.environment
    env["LANCEPART_FAULT"] = f"before_change_task:wait:{gate}"
    spark.dataSource.register(LancepartDataSource)  # its Python workers get the environment of now
    q = None
    try:
        q = _stream_to_parquet(spark, src, out, ck)
        deadline = time.monotonic() + 300
        while not os.path.exists(f"{gate}.reached") and q.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        assert os.path.exists(f"{gate}.reached"), f"no task reached the fault step: {q.exception()}"
        ns.write(demo_events(50, seed=9, start_id=9_000))
        later(monkeypatch)
        ns.cleanup(older_than=timedelta(0), allow_short_retention=True)
        oldest = min(e.version for e in PartitionedNamespace.open(src).history())
        gate.touch()
        text = _stream_error(q)
    finally:
        gate.touch()
        env.pop("LANCEPART_FAULT", None)
        spark.dataSource.register(LancepartDataSource)
        if q is not None:
            q.stop()
    assert "SnapshotExpiredError" in text and "CorruptTableError" not in text, text[-3000:]
    assert "after the change feed was planned" in text and f"reaches back to version {oldest}" in text
    assert f"can resume from version {oldest} at the earliest" in text
