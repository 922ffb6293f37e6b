"""Storage-partitioned join: spec/partitioning.md "Query Optimization / Storage Partitioned
Join" and Appendix F. The compatibility decision and the partition groups are checked
without Spark; the Spark joins run on real Spark local[2] against real Lance tables, are
compared with a plain Spark join of the two ``lps.read`` DataFrames, and their executed plans
are checked for (no) shuffle."""

from __future__ import annotations

import datetime as dt
import logging

import datafusion
import mmh3
import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace, PartitionSpec
from lancepart import spark as lps
from lancepart.errors import InvalidArgumentError
from lancepart.read.spj import (
    compatibility,
    group_keys,
    join_layout,
    join_tables,
    plan_groups,
)
from lancepart.results import PartitionInfo
from lancepart.util.sample import demo_events
from tests.conftest import EVENTS_SPEC


# --------------------------------------------------------------------------- helpers
def schema_of(*cols: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(n, t, metadata={"lance:field_id": str(i)}) for i, (n, t) in enumerate(cols)])


def field(fid: str, sources: list[int], transform: dict | None = None, expression: str | None = None,
          result: str = "int32") -> dict:
    f = {"field_id": fid, "source_ids": sources, "result_type": {"type": result}}
    f.update({"transform": transform} if transform else {"expression": expression})
    return f


def spec(*fields: dict, id: int = 1) -> PartitionSpec:
    return PartitionSpec.from_json({"id": id, "fields": list(fields)})


def bucket(fid: str, src: int, n: int) -> dict:
    return field(fid, [src], {"type": "bucket", "num_buckets": n})


def info(oid: str, **values) -> PartitionInfo:
    return PartitionInfo(f"v1${oid}$dataset", f"00000000_v1${oid}$dataset", 1, values, 1)


KS = schema_of(("k", pa.int64()), ("ts", pa.timestamp("us")), ("name", pa.utf8()), ("d", pa.date32()))
HOUR, DAY = field("h", [1], {"type": "hour"}), field("dd", [1], {"type": "day"})


# --------------------------------------------------------------------------- the decision, no Spark
def test_bucket_divisibility_appendix_f():
    """Appendix F: orders bucket(customer_id, 16) ~ customers bucket(id, 8) is compatible; customers
    bucket i meets orders buckets i and i + 8 (finer_bucket % 8 == coarser_bucket)."""
    orders = schema_of(("customer_id", pa.int64()))
    customers = schema_of(("id", pa.int64()), ("name", pa.utf8()))
    c = compatibility(orders, [spec(bucket("customer_bucket", 0, 16))], customers, [spec(bucket("id_bucket", 0, 8))],
                      ["customer_id"], ["id"])
    assert c and c.matches[0].kind == "bucket" and c.matches[0].left_modulus == 8
    left = [info(f"o{i}", customer_bucket=i) for i in range(16)]
    right = [info(f"c{i}", id_bucket=i) for i in range(8)]
    groups = plan_groups(c, left, right, "inner")
    assert len(groups) == 8
    for g in groups:
        (i,) = {p.values["id_bucket"] for p in g.right}
        assert sorted(p.values["customer_bucket"] for p in g.left) == [i, i + 8]
    # the other way round: the right side is the finer one
    r = compatibility(customers, [spec(bucket("id_bucket", 0, 8))], orders, [spec(bucket("customer_bucket", 0, 16))],
                      ["id"], ["customer_id"])
    assert r and r.matches[0].right_modulus == 8 and len(plan_groups(r, right, left, "inner")) == 8


@pytest.mark.parametrize(("left", "right", "needle"), [
    (bucket("b", 0, 16), bucket("b", 0, 6), "neither divides"),
    (bucket("b", 0, 16), field("t", [0], {"type": "truncate", "width": 100}, result="int64"), "different transforms"),
    (HOUR, DAY, "date_part"),
    (field("y", [1], {"type": "year"}), field("m", [1], {"type": "month"}), "date_part"),
    (field("t", [0], {"type": "truncate", "width": 10}, result="int64"),
     field("t", [0], {"type": "truncate", "width": 100}, result="int64"), "widths differ"),
    (field("e", [0], expression="col0 % 7"), field("e", [0], expression="col0 % 5"), "different transforms"),
])
def test_incompatible_transforms_say_why(left, right, needle):
    """Transform Compatibility: anything but same transform / bucket divisibility / a coarser
    partition that the finer side also carries is refused with the reason."""
    c = compatibility(KS, [spec(left)], KS, [spec(right)], ["k", "ts"], ["k", "ts"])
    assert not c and needle in c.reason and not c.matches


def test_same_transforms_are_compatible():
    """Same transform type: identity = identity, hour = hour, bucket[N] = bucket[N], same expression."""
    for f in (field("i", [0], {"type": "identity"}, result="int64"), HOUR, bucket("b", 0, 8),
              field("e", [0], expression="col0 % 7", result="int64")):
        c = compatibility(KS, [spec(f)], KS, [spec(f)], ["k", "ts"], ["k", "ts"])
        assert c and c.matches[0].kind == "same", f


def test_time_hierarchy_needs_the_coarser_field_on_the_finer_side():
    """Time hierarchy under date_part semantics (docs/design.md §3): [day, hour] ~ [day] groups by
    day; hour ~ day alone cannot (an hour partition holds every day); [year, month] ~ [year]."""
    c = compatibility(KS, [spec(DAY, HOUR)], KS, [spec(DAY)], ["ts"], ["ts"])
    assert c and [(m.left_field, m.right_field) for m in c.matches] == [("dd", "dd")]
    left = [info(f"l{d}{h}", dd=d, h=h) for d in (1, 2) for h in range(24)]
    right = [info(f"r{d}", dd=d) for d in (1, 2, 3)]
    groups = plan_groups(c, left, right, "inner")
    assert [(g.key, len(g.left), len(g.right)) for g in sorted(groups, key=lambda g: g.key)] == [
        ((1,), 24, 1), ((2,), 24, 1)]
    year, month = field("y", [1], {"type": "year"}), field("m", [1], {"type": "month"})
    assert compatibility(KS, [spec(year)], KS, [spec(year, month)], ["ts"], ["ts"])
    assert not compatibility(KS, [spec(HOUR)], KS, [spec(DAY)], ["ts"], ["ts"])


def test_identity_side_is_mapped_through_the_other_transform():
    """identity(k) ~ bucket(k, 8): the identity side's value is the key, so its bucket (murmur3 of
    the int64 little-endian bytes, computed here with mmh3) is its group key."""
    c = compatibility(KS, [spec(field("i", [0], {"type": "identity"}, result="int64"))], KS,
                      [spec(bucket("b", 0, 8))], ["k"], ["k"])
    assert c and c.matches[0].kind == "derive"
    values = [0, 1, 34, -7, 10**12, None]
    keys = group_keys(c, [info(f"l{i}", i=v) for i, v in enumerate(values)], "left")
    expected = [None if v is None else abs(mmh3.hash(v.to_bytes(8, "little", signed=True), 0, signed=True)) % 8
                for v in values]
    assert [k[0] for k in keys] == expected


def test_multi_key_and_multi_bucket():
    """Every matching field adds to the group key; multi_bucket needs its sources in the same
    order on both sides."""
    s = schema_of(("d", pa.date32()), ("a", pa.int64()), ("b", pa.utf8()))
    ident = field("d", [0], {"type": "identity"}, result="date32")
    mb = lambda n, src: field(f"mb{n}", src, {"type": "multi_bucket", "num_buckets": n})  # noqa: E731
    c = compatibility(s, [spec(ident, mb(16, [1, 2]))], s, [spec(ident, mb(4, [1, 2]))], ["d", "a", "b"],
                      ["d", "a", "b"])
    assert c and [m.kind for m in c.matches] == ["same", "bucket"]
    k = group_keys(c, [info("x", d=dt.date(2025, 1, 2), mb16=13)], "left")
    assert k == [(dt.date(2025, 1, 2), 1)]
    swapped = compatibility(s, [spec(mb(16, [1, 2]))], s, [spec(mb(4, [2, 1]))], ["a", "b"], ["a", "b"])
    assert not swapped


def test_unusable_keys_and_spec_versions():
    """No partition field over the join keys, key types without shared partition values, and a
    field missing from a spec version that also has tables: all refused with the reason."""
    b = spec(bucket("b", 0, 8))
    assert "no partition field" in compatibility(KS, [b], KS, [b], ["name"], ["name"]).reason
    other = schema_of(("k", pa.utf8()))
    assert "do not share" in compatibility(KS, [b], other, [b], ["k"], ["k"]).reason
    v2 = spec(field("n", [2], {"type": "identity"}, result="utf8"), id=2)
    c = compatibility(KS, [b, v2], KS, [b], ["k"], ["k"])
    assert not c and "not in spec version(s) [2]" in c.reason
    int32_keys = schema_of(("k", pa.int32()))
    assert compatibility(KS, [b], int32_keys, [b], ["k"], ["k"])  # murmur3 is width-independent
    with pytest.raises(InvalidArgumentError, match="nope"):
        compatibility(KS, [b], KS, [b], ["nope"], ["k"])


def test_outer_joins_keep_one_sided_groups():
    """Groups without tables on one side are kept exactly when the join type can produce rows from them."""
    c = compatibility(KS, [spec(bucket("b", 0, 4))], KS, [spec(bucket("b", 0, 4))], ["k"], ["k"])
    left = [info(f"l{i}", b=i) for i in (0, 1, 2)]
    right = [info(f"r{i}", b=i) for i in (1, 2, 3)]
    counts = {how: sorted(g.key[0] for g in plan_groups(c, left, right, how))
              for how in ("inner", "left", "right", "full", "left_semi", "left_anti")}
    assert counts == {"inner": [1, 2], "left": [0, 1, 2], "right": [1, 2, 3], "full": [0, 1, 2, 3],
                      "left_semi": [1, 2], "left_anti": [0, 1, 2]}


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "left_semi", "left_anti"])
def test_local_join_matches_datafusion(how):
    """The in-task join (Arrow hash join on keys and row numbers, then take) returns the rows
    DataFusion's SQL join returns, NULL keys never matching; list payloads are carried."""
    rng = np.random.default_rng(3)
    lk = rng.integers(0, 40, 300).astype(object)
    lk[::17] = None
    rk = rng.integers(20, 60, 200).astype(object)
    rk[::13] = None
    left = pa.table({"k": pa.array(lk, pa.int64()), "v": pa.array(np.arange(300)),
                     "lst": pa.array([[i] for i in range(300)], pa.list_(pa.int32()))})
    right = pa.table({"k": pa.array(rk, pa.int32()), "v": pa.array(np.arange(200) * 10)})
    layout = join_layout(left.schema, right.schema, [("k", "k")], how)
    got = join_tables(left, right, [("k", "k")], how, layout)
    assert got.column_names == ([c.name for c in layout])
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("l", [left.to_batches()])
    ctx.register_record_batches("r", [right.to_batches()])
    sql_how = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN",
               "left_semi": "LEFT SEMI JOIN", "left_anti": "LEFT ANTI JOIN"}[how]
    key = {"right": "r.k", "full": "coalesce(l.k, r.k)"}.get(how, "l.k")
    select = ("l.k, l.v, l.lst" if how.startswith("left_") else
              f"CAST({key} AS BIGINT) AS k, l.v AS v, l.lst AS lst, r.v AS v_right")
    expected = ctx.sql(f"SELECT {select} FROM l {sql_how} r ON l.k = r.k").to_arrow_table()
    assert got.num_rows == expected.num_rows > 0
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, expected.rename_columns(got.column_names)
                                                            .to_pylist()))


# --------------------------------------------------------------------------- Spark
ORDERS_SCHEMA = demo_events(1).schema


def create(root: str, schema: pa.Schema, *fields: dict) -> PartitionedNamespace:
    return PartitionedNamespace.create(root, schema, {"id": 1, "fields": list(fields)})


@pytest.fixture(scope="module")
def spaces(tmp_path_factory):
    """orders bucket(user_id, 16); users bucket(user_id, 8), bucket(user_id, 6), truncate(user_id, 500)."""
    base = tmp_path_factory.mktemp("spj")
    orders = demo_events(6_000, seed=21)
    orders = orders.set_column(4, "user_id", pa.array(np.random.default_rng(2).integers(0, 3_000, orders.num_rows)))
    o = create(str(base / "orders"), orders.schema, bucket("user_bucket", 4, 16))
    o.write(orders)
    users = pa.table({"user_id": pa.array(np.arange(0, 4_000, 2, dtype=np.int64)),
                      "segment": pa.array([f"s{i % 7}" for i in range(2_000)])})
    out = {"orders": o}
    for name, f in (("users8", bucket("ub", 0, 8)), ("users6", bucket("ub", 0, 6)),
                    ("users_trunc", field("ut", [0], {"type": "truncate", "width": 500}, result="int64"))):
        out[name] = create(str(base / name), users.schema, f)
        out[name].write(users)
    return out


@pytest.fixture
def no_broadcast(spark):
    """Plain joins of small tables would broadcast; force the shuffle join Spark uses at scale."""
    old = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    yield
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", old)


def plan_of(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def rows(t: pa.Table) -> list[str]:
    return sorted(map(repr, t.to_pylist()))


def check_against_plain(spark, df, left: str, right: str, on, how: str = "inner",
                        filter_left: str | None = None, filter_right: str | None = None) -> None:
    """``df`` equals the plain Spark join of the two ``lps.read`` DataFrames, column for column."""
    plain = lps.read(spark, left, filter_left).join(lps.read(spark, right, filter_right), on=on, how=how)
    got, expected = df.toArrow(), plain.toArrow()
    assert got.column_names == expected.column_names
    assert got.num_rows == expected.num_rows > 0
    assert rows(got) == rows(expected)
    assert "Exchange hashpartitioning" in plan_of(plain)  # the shuffle SPJ avoids


@pytest.mark.spark
def test_spj_bucket_16_by_8_has_no_shuffle(spark, spaces, no_broadcast):
    """Appendix F on Spark: 8 groups (coarse bucket b with fine buckets b and b + 8), one task each,
    no Exchange in the executed plan, the same rows as the shuffled Spark join."""
    o, u = spaces["orders"].root, spaces["users8"].root
    df = lps.join(spark, o, u, "user_id")
    plan = df.lancepart_join
    assert plan.spj and len(plan.groups) == 8 and df.rdd.getNumPartitions() == 8
    for g in plan.groups:
        (b,) = {p.values["ub"] for p in g.right}
        assert sorted(p.values["user_bucket"] for p in g.left) == [b, b + 8]
    check_against_plain(spark, df, o, u, "user_id")
    assert "Exchange" not in plan_of(df) and "MapInArrow" in plan_of(df)
    # outer join with a filter on each side: still no shuffle, still the plain join's rows
    fl, fr = "amount > 30", "segment <> 's3'"
    full = lps.join(spark, o, u, "user_id", how="full", filter_left=fl, filter_right=fr)
    assert full.lancepart_join.spj
    check_against_plain(spark, full, o, u, "user_id", "full", fl, fr)
    assert "Exchange" not in plan_of(full)


@pytest.mark.spark
def test_spj_identity_by_identity(spark, tmp_path, no_broadcast):
    """identity(event_date) on both sides, joined on (event_date, country): one group per date;
    the left's bucket(user_id, 4) tables of a date form its group."""
    left = PartitionedNamespace.create(str(tmp_path / "events"), ORDERS_SCHEMA, EVENTS_SPEC)
    left.write(demo_events(4_000, seed=4))
    dates = [dt.date(2025, 12, 1) + dt.timedelta(days=i) for i in range(7)]
    targets = pa.table({"event_date": pa.array([d for d in dates for _ in range(5)], pa.date32()),
                        "country": ["US", "FR", "DE", "JP", "XX"] * 7, "target": pa.array(np.arange(35.0))})
    right = create(str(tmp_path / "targets"), targets.schema,
                   field("event_date", [0], {"type": "identity"}, result="date32"))
    right.write(targets)
    df = lps.join(spark, left.root, right.root, ["event_date", "country"])
    plan = df.lancepart_join
    assert plan.spj and len(plan.groups) == 7
    assert all(len(g.left) == 4 and len(g.right) == 1 for g in plan.groups)
    check_against_plain(spark, df, left.root, right.root, ["event_date", "country"])
    assert "Exchange" not in plan_of(df)


@pytest.mark.spark
def test_spj_time_hierarchy_hour_by_day(spark, tmp_path, no_broadcast):
    """Time hierarchy: hourly tables [day(ts), hour(ts)] joined with daily tables [day(ts)] on the
    timestamp: the 24 hour tables of a day meet that day's table, no shuffle."""
    events = demo_events(3_000, seed=8, days=2)
    left = create(str(tmp_path / "hourly"), events.schema, field("day", [2], {"type": "day"}),
                  field("hour", [2], {"type": "hour"}))
    left.write(events)
    notes = pa.table({"event_ts": events.column("event_ts").take(np.arange(0, 3_000, 3)),
                      "label": pa.array([f"n{i}" for i in range(1_000)])})
    right = create(str(tmp_path / "daily"), notes.schema, field("day", [0], {"type": "day"}))
    right.write(notes)
    df = lps.join(spark, left.root, right.root, "event_ts")
    plan = df.lancepart_join
    assert plan.spj and len(plan.groups) == 2 and len(left.partitions()) == 48
    assert all(len(g.left) == 24 and len(g.right) == 1 for g in plan.groups)
    check_against_plain(spark, df, left.root, right.root, "event_ts")
    assert "Exchange" not in plan_of(df)


@pytest.mark.spark
@pytest.mark.parametrize(("right", "needle"), [("users6", "neither divides"), ("users_trunc", "different transforms")])
def test_incompatible_falls_back_to_a_shuffled_join(spark, spaces, no_broadcast, caplog, right, needle):
    """bucket 16 x bucket 6 and bucket x truncate cannot be joined group by group: the join says
    so (a warning, the result's plan, explain_join) and is still correct (a shuffled join)."""
    o, u = spaces["orders"].root, spaces[right].root
    assert needle in str(lps.explain_join(o, u, "user_id"))
    with caplog.at_level(logging.WARNING, logger="lancepart.spark"):
        df = lps.join(spark, o, u, "user_id")
    assert not df.lancepart_join.spj and needle in df.lancepart_join.reason
    assert any("no storage-partitioned join" in r.message and needle in r.message for r in caplog.records)
    check_against_plain(spark, df, o, u, "user_id")
    assert "Exchange hashpartitioning" in plan_of(df)
