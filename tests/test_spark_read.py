"""The Spark reader on real Spark local[2] against real Lance tables: spec/partitioning.md
"Query Optimization / Partition Pruning" and "Transaction / Read Behavior". Every result is
compared with ``ns.to_table`` (the in-process snapshot read) and, for pinned partitions, with
Lance's own reads of the pinned versions."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import os
from contextlib import contextmanager

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from lancepart.errors import InvalidArgumentError
from lancepart.util.sample import demo_events
from tests.conftest import EVENTS_SPEC

pytestmark = pytest.mark.spark

_FIRST = demo_events(12_000, seed=17).slice(0, 1).to_pylist()[0]  # a row the fixture writes
POINT = f"event_date = DATE '{_FIRST['event_date']}' AND user_id = {_FIRST['user_id']}"
FILTERS = [
    None,
    "event_date = DATE '2025-12-03'",                                  # 4 of 28 tables
    POINT,                                                             # 1 table (bucket of the literal)
    "event_date >= DATE '2025-12-02' AND event_date < DATE '2025-12-05' AND country = 'FR'",
    "user_id IN (1, 2, 3, 777777) OR country = 'JP'",                  # no pruning, filter in the scan
    "NOT (event_date = DATE '2025-12-01') AND abs(amount - 50) < 10",  # abs(): exact filter after the scan
]


def events_namespace(root: str) -> PartitionedNamespace:
    schema = demo_events(1).schema
    return PartitionedNamespace.create(root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC)


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    """28 partition tables (7 dates x 4 buckets), each with two fragments (two appends)."""
    ns = events_namespace(str(tmp_path_factory.mktemp("read") / "ns"))
    ns.write(demo_events(12_000, seed=17))  # keep in step with _FIRST
    ns.write(demo_events(8_000, seed=18, start_id=12_000))
    return ns


def by_id(t: pa.Table) -> list[dict]:
    return t.sort_by("id").to_pylist()


def stage_tasks(spark, group: str, action):
    """Run ``action`` under a job group: the number of tasks of every stage it ran, and its result."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    return [tracker.getStageInfo(s).numTasks for j in tracker.getJobIdsForGroup(group)
            for s in tracker.getJobInfo(j).stageIds], result


@pytest.mark.parametrize("flt", FILTERS)
def test_read_equals_to_table(spark, events, flt):
    """Partition Pruning + Read Behavior: the Spark read is the pruned snapshot, row for row and
    type for type, and Spark runs the kept partition tables packed into tasks (at most one each)."""
    parts = events.partitions(flt)
    df = lps.read(spark, events.root, flt)
    n = df.rdd.getNumPartitions()
    assert 1 <= n <= len(parts)
    tasks, got = stage_tasks(spark, f"read-{FILTERS.index(flt)}", df.toArrow)
    assert tasks == [n]
    expected = events.to_table(flt)
    assert got.num_rows == expected.num_rows > 0
    assert [f.type for f in got.schema] == [f.type for f in expected.schema]
    assert by_id(got) == by_id(expected)


def test_pruning_keeps_only_matching_tables(spark, events):
    """Appendix D: a point lookup reads one table of 28; the plan is MapInArrow over the task rows."""
    flt = POINT
    df = lps.read(spark, events.root, flt)
    assert len(events.partitions()) == 28 and df.rdd.getNumPartitions() == 1
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in plan and "Exchange" not in plan
    assert by_id(df.toArrow()) == by_id(events.to_table(flt))


def test_column_projection(spark, events):
    """Columns are projected in the order asked, the filter may use columns not projected."""
    flt = "country = 'DE' AND amount > 40"
    df = lps.read(spark, events.root, flt, columns=["amount", "id"])
    assert df.columns == ["amount", "id"]
    got = df.toArrow()
    assert by_id(got) == by_id(events.to_table(flt, columns=["amount", "id"]))
    with pytest.raises(InvalidArgumentError, match="nope"):
        lps.read(spark, events.root, columns=["id", "nope"])


def test_empty_results_have_the_schema(spark, events, root):
    """Nothing kept (pruned away), kept tables without a matching row, and a namespace without
    tables all give an empty DataFrame with the namespace (or projected) schema."""
    expected_types = [f.type for f in events.to_table("id < 0").schema]
    pruned_away = lps.read(spark, events.root, "event_date = DATE '2030-01-01'")
    assert pruned_away.rdd.getNumPartitions() == 0
    no_match = lps.read(spark, events.root, "amount < 0")
    assert no_match.rdd.getNumPartitions() >= 1  # the 28 kept tables, packed into tasks
    for df in (pruned_away, no_match, lps.read(spark, events_namespace(root).root)):
        t = df.toArrow()
        assert t.num_rows == 0
        assert [f.type for f in t.schema] == expected_types
    projected = lps.read(spark, events.root, "event_date = DATE '2030-01-01'", columns=["country"]).toArrow()
    assert projected.schema.names == ["country"] and projected.num_rows == 0


@contextmanager
def session_conf(spark, **conf: str):
    """``spark.conf`` set to ``conf`` (keys with ``_`` for ``.``) inside, restored after."""
    keys = {k.replace("_", "."): v for k, v in conf.items()}
    before = {k: spark.conf.get(k, None) for k in keys}
    try:
        for k, v in keys.items():
            spark.conf.set(k, v)
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def test_split_rows_reads_large_tables_by_fragment(spark, events):
    """A table above ``split_rows`` is split into runs of whole fragments; with a task size that
    takes one split each (the session's spark.sql.files.maxPartitionBytes) that is one task per
    fragment, and with split size and open cost above every table's size, one per table; same rows."""
    flt = "event_date = DATE '2025-12-04'"
    parts = events.partitions(flt)
    fragments = sum(len(lance.dataset(os.path.join(events.root, p.location), version=p.read_version)
                        .get_fragments()) for p in parts)
    assert fragments == 2 * len(parts)
    with session_conf(spark, spark_sql_files_maxPartitionBytes="1"):
        df = lps.read(spark, events.root, flt, split_rows=1)
        assert df.rdd.getNumPartitions() == fragments
        assert by_id(df.toArrow()) == by_id(events.to_table(flt))
    with session_conf(spark, spark_sql_files_maxPartitionBytes="1GB", spark_sql_files_openCostInBytes="1GB"):
        assert lps.read(spark, events.root, flt, split_rows=10**9).rdd.getNumPartitions() == len(parts)


def _set_pin(ns: PartitionedNamespace, object_id: str, **values) -> None:
    """Set read_version / read_branch / read_tag of one table row in one __manifest commit."""

    def mutate(snap):
        rows = snap.rows
        hit = pc.equal(rows.column("object_id"), object_id)
        for name, value in values.items():
            i = rows.schema.get_field_index(name)
            f = rows.schema.field(i)
            rows = rows.set_column(i, f, pc.if_else(hit, pa.scalar(value, f.type), rows.column(i)))
        return rows, None

    ns.manifest.update(mutate)
    ns.refresh()


def test_tag_and_branch_pinned_partitions(spark, ns):
    """Read Behavior: a read_tag partition is read at the tagged version (not its read_version),
    a read_branch + read_version partition at that version of the branch; the reader agrees with
    ns.to_table and with Lance's own reads of those versions."""
    ns.write(demo_events(4_000, seed=5))
    by_oid = {p.object_id: p for p in ns.partitions()}
    tagged, branched = sorted(by_oid)[:2]
    tag_uri = os.path.join(ns.root, by_oid[tagged].location)
    lance.dataset(tag_uri).tags.create("golden", by_oid[tagged].read_version)
    tagged_rows = lance.dataset(tag_uri, version="golden").to_table().column("id").to_pylist()
    ns.write(demo_events(4_000, seed=6, start_id=10_000))  # moves every read_version on
    after = {p.object_id: p for p in ns.partitions()}
    assert after[tagged].read_version > by_oid[tagged].read_version
    _set_pin(ns, tagged, read_tag="golden")
    br_uri = os.path.join(ns.root, after[branched].location)
    branch = lance.dataset(br_uri).create_branch("exp", after[branched].read_version)
    extra = demo_events(7, seed=7, start_id=10**6).cast(ns.schema)
    branch = lance.write_dataset(extra, branch, mode="append")
    _set_pin(ns, branched, read_branch="exp", read_version=branch.version)

    got = lps.read(spark, ns.root).toArrow()
    assert by_id(got) == by_id(ns.to_table())
    pinned = {p.object_id: p for p in ns.partitions()}
    ids = set(got.column("id").to_pylist())
    main_latest = set(lance.dataset(tag_uri).to_table().column("id").to_pylist())
    assert set(tagged_rows) <= ids and not (main_latest - set(tagged_rows)) & ids  # batch 2 of it is hidden
    assert set(extra.column("id").to_pylist()) <= ids
    one = lps.read(spark, ns.root, f"event_date = DATE '{pinned[tagged].values['event_date']}'").toArrow()
    assert set(tagged_rows) <= set(one.column("id").to_pylist())


def test_rows_beyond_read_version_stay_invisible(spark, ns):
    """Rows a table holds beyond its read_version (a writer behind lancepart's back, a job that
    died before publishing) are not read."""
    ns.write(demo_events(3_000, seed=9))
    before = by_id(ns.to_table())
    p = ns.partitions()[0]
    intruders = demo_events(50, seed=99, start_id=10**7).cast(ns.schema)
    lance.write_dataset(intruders, os.path.join(ns.root, p.location), mode="append")
    assert lance.dataset(os.path.join(ns.root, p.location)).version > p.read_version
    got = lps.read(spark, ns.root).toArrow()
    assert by_id(got) == before
    assert not set(intruders.column("id").to_pylist()) & set(got.column("id").to_pylist())


RICH = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("part", pa.utf8()),
    ("i8", pa.int8()), ("i16", pa.int16()), ("u32", pa.uint32()), ("u64", pa.uint64()),
    ("f32", pa.float32()), ("flag", pa.bool_()),
    ("price", pa.decimal128(12, 3)),
    ("note", pa.large_utf8()), ("blob", pa.binary()),
    ("day", pa.date32()),
    ("wall", pa.timestamp("us")), ("wall_ns", pa.timestamp("ns")), ("instant", pa.timestamp("us", tz="UTC")),
    ("tags", pa.list_(pa.int32())),
    ("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
])


def test_types_map_to_spark(spark, root, caplog):
    """Namespace types reach Spark as the right SQL types: wall-clock timestamps (no zone) as
    TIMESTAMP_NTZ, instants as TIMESTAMP, decimals with their precision/scale, large strings as
    STRING, unsigned integers widened; values survive the trip. Storage options never appear in
    the plan or the logs."""
    spec = {"id": 1, "fields": [{"field_id": "part", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    ns = PartitionedNamespace.create(root, RICH, spec)
    t0 = dt.datetime(2025, 12, 10, 23, 30)
    data = pa.table({
        "id": pa.array([1, 2, 3], pa.int64()), "part": ["a", "b", "a"],
        "i8": pa.array([-128, 0, 127], pa.int8()), "i16": pa.array([-5, None, 5], pa.int16()),
        "u32": pa.array([0, 2**32 - 1, 7], pa.uint32()), "u64": pa.array([0, 2**64 - 1, None], pa.uint64()),
        "f32": pa.array([1.5, None, -2.25], pa.float32()), "flag": [True, False, None],
        "price": pa.array([decimal.Decimal("123456789.125"), None, decimal.Decimal("-0.001")], pa.decimal128(12, 3)),
        "note": pa.array(["x" * 3, None, "ünïcode"], pa.large_utf8()), "blob": [b"\x00\x01", None, b""],
        "day": pa.array([dt.date(1969, 12, 31), dt.date(2025, 12, 10), None], pa.date32()),
        "wall": pa.array([t0, None, dt.datetime(1900, 1, 1)], pa.timestamp("us")),
        "wall_ns": pa.array([1_700_000_000_123_456_789, None, 0], pa.timestamp("ns")),
        "instant": pa.array([t0.replace(tzinfo=dt.timezone.utc), None, None], pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[1, 2], [], None], pa.list_(pa.int32())),
        "point": pa.array([{"x": 1.0, "y": 2.0}, None, {"x": -1.0, "y": 0.5}], RICH.field("point").type),
    })
    ns.write(data)
    secret = "TOP-SECRET-KEY-123"
    with caplog.at_level(logging.DEBUG, logger="lancepart"):
        df = lps.read(spark, root, storage_options={"aws_secret_access_key": secret})
        got = df.toArrow()
    types = dict(df.dtypes)
    assert types["wall"] == types["wall_ns"] == "timestamp_ntz"
    assert types["instant"] == "timestamp"
    assert types["price"] == "decimal(12,3)"
    assert (types["note"], types["blob"], types["day"]) == ("string", "binary", "date")
    assert (types["i8"], types["i16"], types["u32"], types["u64"]) == ("tinyint", "smallint", "bigint", "decimal(20,0)")
    assert (types["tags"], types["point"]) == ("array<int>", "struct<x:double,y:double>")
    rows = {r["id"]: r for r in got.to_pylist()}
    assert rows[1]["wall"] == t0 and rows[3]["wall"] == dt.datetime(1900, 1, 1)  # wall clock, not shifted
    assert rows[1]["wall_ns"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)   # ns truncated to us
    assert rows[1]["instant"] == t0.replace(tzinfo=dt.timezone.utc)
    assert rows[2]["u64"] == 2**64 - 1 and rows[2]["u32"] == 2**32 - 1
    assert rows[1]["price"] == decimal.Decimal("123456789.125") and rows[3]["note"] == "ünïcode"
    assert rows[1]["tags"] == [1, 2] and rows[2]["tags"] == [] and rows[3]["point"] == {"x": -1.0, "y": 0.5}
    expected = ns.to_table()
    for name in ("i8", "i16", "f32", "flag", "price", "blob", "day", "wall"):
        assert [rows[i][name] for i in (1, 2, 3)] == expected.sort_by("id").column(name).to_pylist(), name
    plan = df._jdf.queryExecution().toString()
    assert secret not in plan and secret not in caplog.text
    # a filter Lance's own parser refuses (zoned literal) still means what DataFusion says
    flt = "instant = '2025-12-10T23:30:00+00:00' OR wall_ns > '2023-11-14T22:13:20'"
    one = lps.read(spark, root, flt, columns=["id"]).toArrow()
    assert one.column("id").to_pylist() == ns.to_table(flt, columns=["id"]).column("id").to_pylist() == [1]
