"""Partition pruning through ``__manifest`` (lancepart/read/manifest_query.py).

Spec: spec/partitioning.md "Query Optimization" (Manifest Table Schema, Partition Pruning),
"Partition Evolution / Compatibility with Partition Pruning", Appendices C and D;
docs/design.md §1-§3 (murmur3 buckets, truncate, time transforms as date_part values).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import statistics

import datafusion
import pyarrow as pa
import pytest

from lancepart.errors import InvalidArgumentError
from lancepart.model.spec import PartitionSpec
from lancepart.model.transforms import apply, validate_spec
from lancepart.read.manifest_query import PruneResult, _sql_literal, prune

D = dt.date


def _f(name: str, t: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, t, nullable, {"lance:field_id": str(fid)})


def _identity(fid: str, src: int, t: dict) -> dict:
    return {"field_id": fid, "source_ids": [src], "transform": {"type": "identity"}, "result_type": t}


INT32 = {"type": "int32"}


# =========================================================================== Appendix C / D

APPENDIX_SCHEMA = pa.schema([_f("id", pa.int64(), 0, False), _f("event_date", pa.date32(), 1),
                             _f("country", pa.utf8(), 2)])
APPENDIX_SPECS = {
    1: PartitionSpec.from_json({"id": 1, "fields": [_identity("event_date", 1, {"type": "date32"})]}),
    2: PartitionSpec.from_json({"id": 2, "fields": [
        {"field_id": "event_year", "source_ids": [1], "transform": {"type": "year"}, "result_type": INT32},
        _identity("country", 2, {"type": "utf8"})]}),
}


def appendix_rows(extra: bool = True) -> pa.Table:
    """The __manifest rows of Appendix C (plus, with ``extra``, tables the query must prune)."""
    rows = [
        ("v1", "namespace", None, None, None, None, None),
        ("v1$k7m2n9p4q8r5s3t6", "namespace", None, None, D(2025, 12, 10), None, None),
        ("v1$k7m2n9p4q8r5s3t6$dataset", "table", "b4a3c2d1_v1$k7m2n9p4q8r5s3t6$dataset", 5, D(2025, 12, 10),
         None, None),
        ("v2", "namespace", None, None, None, None, None),
        ("v2$e9f0g1h2i3j4k5l6", "namespace", None, None, None, 2025, None),
        ("v2$e9f0g1h2i3j4k5l6$m7n8o9p0q1r2s3t4", "namespace", None, None, None, 2025, "US"),
        ("v2$e9f0g1h2i3j4k5l6$m7n8o9p0q1r2s3t4$dataset", "table",
         "aabbccdd_v2$e9f0g1h2i3j4k5l6$m7n8o9p0q1r2s3t4$dataset", 3, None, 2025, "US"),
    ]
    if extra:
        rows += [
            ("v1$w1x2y3z4a5b6c7d8", "namespace", None, None, D(2025, 12, 11), None, None),
            ("v1$w1x2y3z4a5b6c7d8$dataset", "table", "55667788_v1$w1x2y3z4a5b6c7d8$dataset", 2, D(2025, 12, 11),
             None, None),
            ("v2$e9f0g1h2i3j4k5l6$aaaabbbbccccdddd$dataset", "table",
             "11223344_v2$e9f0g1h2i3j4k5l6$aaaabbbbccccdddd$dataset", 4, None, 2025, "FR"),
            ("v2$zzzzyyyyxxxxwwww$m7n8o9p0q1r2s3t4$dataset", "table",
             "99887766_v2$zzzzyyyyxxxxwwww$m7n8o9p0q1r2s3t4$dataset", 1, None, 2024, "US"),
        ]
    cols = list(zip(*rows, strict=True))
    return pa.table({
        "object_id": pa.array(cols[0], pa.utf8()),
        "object_type": pa.array(cols[1], pa.utf8()),
        "location": pa.array(cols[2], pa.utf8()),
        "read_version": pa.array(cols[3], pa.uint64()),
        "partition_field_event_date": pa.array(cols[4], pa.date32()),
        "partition_field_event_year": pa.array(cols[5], pa.int32()),
        "partition_field_country": pa.array(cols[6], pa.utf8()),
    })


def test_appendix_d_query_returns_the_two_tables():
    """Appendix D: ``event_date = '2025-12-10' AND country = 'US'`` selects the v1 table of that
    date (country cannot be pushed into v1) and the v2 table of year 2025 and US."""
    r = prune("event_date = '2025-12-10' AND country = 'US'", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())
    assert r.object_ids == ["v1$k7m2n9p4q8r5s3t6$dataset", "v2$e9f0g1h2i3j4k5l6$m7n8o9p0q1r2s3t4$dataset"]
    assert r.kept.column("location").to_pylist() == [
        "b4a3c2d1_v1$k7m2n9p4q8r5s3t6$dataset", "aabbccdd_v2$e9f0g1h2i3j4k5l6$m7n8o9p0q1r2s3t4$dataset"]
    assert r.kept.column("read_version").to_pylist() == [5, 3]
    assert r.kept_counts == {1: 1, 2: 1} and r.pruned == {1: 1, 2: 2}
    assert r.residual == "event_date = '2025-12-10' AND country = 'US'"
    # The manifest query has the shape Appendix D shows, with date_part('year', ...) evaluated.
    assert r.predicates == {
        1: "partition_field_event_date = DATE '2025-12-10'",
        2: "partition_field_event_year = 2025 AND partition_field_country = 'US'",
    }
    sql = r.manifest_sql
    assert sql.startswith("SELECT object_id, location, read_version\nFROM __manifest\nWHERE object_type = 'table'")
    assert "(object_id LIKE 'v1$%'\n      AND partition_field_event_date = DATE '2025-12-10')" in sql
    assert "OR\n    (object_id LIKE 'v2$%'\n      AND partition_field_event_year = 2025\n" in sql
    # The SQL is runnable as printed and returns the same tables (Appendix D's result).
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("__manifest", [appendix_rows().to_batches()])
    assert sorted(ctx.sql(sql).to_pydict()["object_id"]) == r.object_ids
    text = r.explain()
    assert "v1 [event_date=identity(1)]: kept 1 of 2 partition tables, pruned 1" in text
    assert "v2 [event_year=year(1), country=identity(2)]: kept 1 of 3 partition tables, pruned 2" in text


def test_appendix_d_exact_rows_and_year_evolution():
    """"Compatibility with Partition Pruning": v1 matches exact dates, v2 every partition of year
    2025; namespace rows are never returned."""
    r = prune("event_date = DATE '2025-12-10'", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows(extra=False))
    assert r.object_ids == ["v1$k7m2n9p4q8r5s3t6$dataset", "v2$e9f0g1h2i3j4k5l6$m7n8o9p0q1r2s3t4$dataset"]
    r = prune("event_date = DATE '2025-12-10'", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())
    assert r.object_ids == ["v1$k7m2n9p4q8r5s3t6$dataset", "v2$e9f0g1h2i3j4k5l6$m7n8o9p0q1r2s3t4$dataset",
                            "v2$e9f0g1h2i3j4k5l6$aaaabbbbccccdddd$dataset"]


@pytest.mark.parametrize("flt, expected", [
    (None, 5),
    ("", 5),
    ("country IN ('US', 'FR')", 2 + 3),
    ("country NOT IN ('US')", 2 + 1),
    ("country LIKE 'F%'", 2 + 1),
    ("country IS NULL", 2),
    ("event_date BETWEEN DATE '2025-12-11' AND DATE '2025-12-31'", 1 + 2),
    ("event_date < '2025-01-01'", 0 + 1),
    ("NOT (event_date >= '2025-01-01')", 0 + 1),
    ("event_date = '2025-12-10' OR country = 'FR'", 2 + 2),  # v1 has no country: both v1 tables
    ("event_date = '2025-12-10' AND event_date = '2025-12-11'", 0),
    ("event_date = TIMESTAMP '2025-12-10 10:00:00'", 0),  # a date is never 10:00
    ("event_date = TIMESTAMP '2025-12-10 00:00:00'", 1 + 2),
    ("event_date < TIMESTAMP '2025-12-11 10:00:00' AND event_date > TIMESTAMP '2025-12-10 00:00:00'", 1 + 2),
])
def test_appendix_predicates(flt, expected):
    """Appendix C rows under comparisons, IN, NOT IN, LIKE, IS NULL, BETWEEN, NOT, OR and
    date-vs-timestamp literals (coerced as DataFusion does)."""
    r = prune(flt, APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())
    assert r.kept.num_rows == expected, r.explain()


@pytest.mark.parametrize("flt", [
    "id = 3",
    "lower(country) = 'us'",
    "random() > 0.5",
    "event_date + INTERVAL '1 day' = DATE '2025-12-11'",
    "country ILIKE 'us' OR id > 0",
    "CASE WHEN country = 'US' THEN true ELSE false END",
    "country = 'US' OR id = 1",
    "NOT (country = 'US' AND random() > 0.5)",
    "country SIMILAR TO 'U.*'",
    "event_date IS NOT NULL",  # year() of an out-of-range instant is NULL: v2 cannot use it
    "TRY_CAST(country AS INT) IS NULL",  # TRUE for 'US': must not become country IS NULL
])
def test_unprojectable_predicates_keep_everything(flt):
    """Spec "Partition Pruning": a predicate with no partition-column counterpart cannot prune;
    every table is kept (the filter is still applied in each scan)."""
    r = prune(flt, APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())
    assert r.kept.num_rows == 5, r.explain()
    assert r.residual == flt


def test_invalid_filter_raises_typed_error():
    """Filters are SQL boolean expressions over the namespace's source columns (docs/reading.md "Filters and
    pruning"); a filter DataFusion cannot plan raises InvalidArgumentError naming it (and the column)."""
    with pytest.raises(InvalidArgumentError, match=r"filter 'country = ' is not a valid SQL boolean expression"):
        prune("country = ", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())
    with pytest.raises(InvalidArgumentError, match=r"unknown column 'countri'"):
        prune("countri = 'US'", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())
    with pytest.raises(InvalidArgumentError, match=r"filter 'id'"):
        prune("id", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())  # not boolean
    with pytest.raises(InvalidArgumentError):
        prune("1 = 1; DROP TABLE t", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())
    with pytest.raises(InvalidArgumentError, match="no subqueries"):
        prune("id IN (SELECT 1)", APPENDIX_SCHEMA, APPENDIX_SPECS, appendix_rows())


def test_unknown_spec_version_tables_are_kept():
    """A table of a spec version the caller does not know cannot be judged: it is kept."""
    rows = appendix_rows()
    extra = pa.table({"object_id": ["v9$abc$dataset"], "object_type": ["table"], "location": ["x"],
                      "read_version": pa.array([1], pa.uint64()),
                      "partition_field_event_date": pa.array([None], pa.date32()),
                      "partition_field_event_year": pa.array([None], pa.int32()),
                      "partition_field_country": pa.array([None], pa.utf8())})
    r = prune("country = 'XX' AND event_date = DATE '1999-01-01'", APPENDIX_SCHEMA, APPENDIX_SPECS,
              pa.concat_tables([rows, extra]))
    assert r.object_ids == ["v9$abc$dataset"]
    assert r.kept_counts[-1] == 1


# =========================================================================== transforms, one by one

ONE_SCHEMA = pa.schema([
    _f("i", pa.int64(), 1), _f("s", pa.utf8(), 2), _f("d", pa.date32(), 3), _f("ts", pa.timestamp("us"), 4),
    _f("tsn", pa.timestamp("us", tz="America/New_York"), 5), _f("i32", pa.int32(), 6),
])


def one_field_case(field: dict, values: dict[str, list], flt: str) -> tuple[PruneResult, dict[str, bool]]:
    """One spec with one field; one table per distinct partition value of ``values``. Returns the
    result and, per table object_id, whether it holds a row matching ``flt`` (brute force in
    DataFusion)."""
    spec = PartitionSpec.from_json({"id": 1, "fields": [field]})
    validate_spec(spec, ONE_SCHEMA)
    data = pa.table({n: pa.array(v, ONE_SCHEMA.field(n).type) for n, v in values.items()})
    pv = apply(spec.fields[0], data, ONE_SCHEMA)
    keys = [repr(x) for x in pv.to_pylist()]
    first = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    ids = [f"v1${hashlib.sha256(k.encode()).hexdigest()[:16]}$dataset" for k in first]
    rows = pa.table({"object_id": ids, "object_type": ["table"] * len(ids),
                     spec.fields[0].column_name: pv.take(list(first.values()))})
    r = prune(flt, ONE_SCHEMA, {1: spec}, rows)
    matched = _brute_force(data, flt)
    hit = {keys[i] for i in matched}
    return r, {oid: k in hit for oid, k in zip(ids, first, strict=True)}


def _brute_force(data: pa.Table, flt: str) -> list[int]:
    ctx = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    t = data.append_column("__row", pa.array(range(data.num_rows), pa.int64()))
    ctx.register_record_batches("rows", [t.to_batches()])
    return ctx.sql(f"SELECT __row FROM rows WHERE {flt}").to_pydict()["__row"]


def _ts(*a) -> dt.datetime:
    return dt.datetime(*a)


@pytest.mark.parametrize("field, values, flt, expect_kept", [
    # bucket: = and IN hash the literals; NULL source -> NULL bucket
    ({"field_id": "b", "source_ids": [1], "transform": {"type": "bucket", "num_buckets": 16}, "result_type": INT32},
     {"i": [*range(64), None]}, "i = 34", 1),
    ({"field_id": "b", "source_ids": [1], "transform": {"type": "bucket", "num_buckets": 16}, "result_type": INT32},
     {"i": [*range(64), None]}, "i IN (34, 35)", None),
    ({"field_id": "b", "source_ids": [1], "transform": {"type": "bucket", "num_buckets": 16}, "result_type": INT32},
     {"i": [*range(64), None]}, "i IS NULL", 1),
    ({"field_id": "b", "source_ids": [1], "transform": {"type": "bucket", "num_buckets": 16}, "result_type": INT32},
     {"i": [*range(64), None]}, "i BETWEEN 3 AND 4", None),
    # truncate: ranges are monotonic, LIKE prefixes
    ({"field_id": "t", "source_ids": [1], "transform": {"type": "truncate", "width": 10}, "result_type":
      {"type": "int64"}}, {"i": list(range(-50, 50))}, "i >= 20 AND i < 30", 1),
    ({"field_id": "t", "source_ids": [1], "transform": {"type": "truncate", "width": 10}, "result_type":
      {"type": "int64"}}, {"i": list(range(-50, 50))}, "i > -11 AND i < 0", 2),  # -10 and 0 (truncate(-1)=0)
    ({"field_id": "t", "source_ids": [2], "transform": {"type": "truncate", "width": 2}, "result_type":
      {"type": "utf8"}}, {"s": ["apple", "apricot", "banana", "avocado", "a", None]}, "s LIKE 'apr%'", 1),
    ({"field_id": "t", "source_ids": [2], "transform": {"type": "truncate", "width": 2}, "result_type":
      {"type": "utf8"}}, {"s": ["apple", "apricot", "banana", "avocado", "a", None]}, "s LIKE 'a%'", 3),
    ({"field_id": "t", "source_ids": [2], "transform": {"type": "truncate", "width": 2}, "result_type":
      {"type": "utf8"}}, {"s": ["apple", "apricot", "banana", "avocado", "a", None]}, "s >= 'b'", 1),
    # year / month / day / hour are date_part values (docs/design.md §3)
    ({"field_id": "y", "source_ids": [3], "transform": {"type": "year"}, "result_type": INT32},
     {"d": [D(2023, 5, 1), D(2024, 1, 1), D(2025, 12, 31), None]}, "d >= DATE '2024-06-01'", 3),  # + NULL year
    # an instant beyond chrono's range (year > 262142) has a NULL year: one-sided ranges keep it,
    # two-sided ranges (both ends in range) do not
    ({"field_id": "y", "source_ids": [4], "transform": {"type": "year"}, "result_type": INT32},
     {"ts": [1_700_000_000_000_000, 1_750_000_000_000_000, 9_000_000_000_000_000_000]},
     "ts >= TIMESTAMP '2024-06-01 00:00:00' AND ts IS NOT NULL", 2),
    ({"field_id": "y", "source_ids": [4], "transform": {"type": "year"}, "result_type": INT32},
     {"ts": [1_700_000_000_000_000, 1_750_000_000_000_000, 9_000_000_000_000_000_000]},
     "ts >= TIMESTAMP '2024-06-01 00:00:00' AND ts < TIMESTAMP '2026-01-01 00:00:00'", 1),
    ({"field_id": "m", "source_ids": [3], "transform": {"type": "month"}, "result_type": INT32},
     {"d": [D(2024, m, 3) for m in range(1, 13)]}, "d = DATE '2031-02-10'", 1),
    ({"field_id": "m", "source_ids": [3], "transform": {"type": "month"}, "result_type": INT32},
     {"d": [D(2024, m, 3) for m in range(1, 13)]}, "d BETWEEN DATE '2024-11-20' AND DATE '2025-01-05'", 3),
    ({"field_id": "m", "source_ids": [3], "transform": {"type": "month"}, "result_type": INT32},
     {"d": [D(2024, m, 3) for m in range(1, 13)]}, "d >= DATE '2024-11-20'", 12),  # one-sided: all months
    ({"field_id": "dd", "source_ids": [3], "transform": {"type": "day"}, "result_type": INT32},
     {"d": [D(2024, 1, x) for x in range(1, 32)]}, "d > DATE '2024-03-30' AND d < DATE '2024-04-02'", 2),
    ({"field_id": "h", "source_ids": [4], "transform": {"type": "hour"}, "result_type": INT32},
     {"ts": [_ts(2025, 1, 1, h, 30) for h in range(24)]},
     "ts >= TIMESTAMP '2025-03-01 22:15:00' AND ts < TIMESTAMP '2025-03-02 01:00:00'", 3),
    ({"field_id": "h", "source_ids": [4], "transform": {"type": "hour"}, "result_type": INT32},
     {"ts": [_ts(2025, 1, 1, h, 30) for h in range(24)]}, "ts = TIMESTAMP '2030-07-01 13:59:59.999999'", 1),
    ({"field_id": "h", "source_ids": [5], "transform": {"type": "hour"}, "result_type": INT32},
     {"tsn": [_ts(2025, 1, 1, h, 30) for h in range(24)]}, "tsn = TIMESTAMP '2025-07-01 12:00:00'", 1),
    ({"field_id": "y", "source_ids": [5], "transform": {"type": "year"}, "result_type": INT32},
     # instants 01-01T02:00Z: New York's year is the one before (2019..2024)
     {"tsn": [_ts(y, 1, 1, 2) for y in range(2020, 2026)]}, "tsn >= TIMESTAMP '2024-06-01 00:00:00'", 1),
    # expressions: the literal is substituted into the expression (Appendix D's recipe)
    ({"field_id": "e", "source_ids": [3], "expression": "date_part('year', col0)", "result_type": INT32},
     {"d": [D(2024, 1, 1), D(2025, 12, 10), None]}, "d = DATE '2025-12-10'", 1),
    ({"field_id": "e", "source_ids": [1], "expression": "col0 % 7", "result_type": {"type": "int64"}},
     {"i": list(range(30))}, "i IN (1, 8, 9)", 2),
    ({"field_id": "e", "source_ids": [1], "expression": "col0 % 7", "result_type": {"type": "int64"}},
     {"i": list(range(30))}, "i >= 3 AND i <= 4", 2),
    ({"field_id": "e", "source_ids": [1], "expression": "coalesce(col0, 99) % 7", "result_type": {"type": "int64"}},
     {"i": [*range(30), None]}, "i IS NULL", 1),  # NULL does not map to NULL here
    # identity with casts DataFusion inserts: int32 column vs int64 literal, floats
    ({"field_id": "x", "source_ids": [6], "transform": {"type": "identity"}, "result_type": INT32},
     {"i32": [1, 2, 3]}, "i32 = 3000000000", 0),
    ({"field_id": "x", "source_ids": [6], "transform": {"type": "identity"}, "result_type": INT32},
     {"i32": [1, 2, 3]}, "i32 > 1.5", 2),
    ({"field_id": "x", "source_ids": [6], "transform": {"type": "identity"}, "result_type": INT32},
     {"i32": [1, 2, 3]}, "i32 IN (2, 3000000000)", 1),
])
def test_single_transform_projection(field, values, flt, expect_kept):
    """Spec "Partition Pruning" step 2: the partition expression evaluated on the query values;
    never drops a table with a matching row, and prunes the rest as the table documents."""
    r, has_match = one_field_case(field, values, flt)
    kept = set(r.object_ids)
    ids = r.kept.column("object_id").to_pylist()
    assert len(ids) == len(kept)
    assert r.kept_counts[1] + r.pruned[1] == len(has_match)
    if expect_kept is not None:
        assert r.kept_counts[1] == expect_kept, r.explain()
    # never wrong: every table with a matching row is kept
    assert {oid for oid, hit in has_match.items() if hit} <= kept, r.explain()


def test_multi_bucket_needs_every_source():
    """multi_bucket prunes only when every source column is pinned by = / IN in one conjunction."""
    schema = pa.schema([_f("a", pa.int64(), 1), _f("b", pa.utf8(), 2)])
    spec = PartitionSpec.from_json({"id": 1, "fields": [{"field_id": "mb", "source_ids": [1, 2], "transform":
                                    {"type": "multi_bucket", "num_buckets": 8}, "result_type": INT32}]})
    data = pa.table({"a": pa.array([i % 10 for i in range(60)], pa.int64()), "b": [f"k{i % 7}" for i in range(60)]})
    pv = apply(spec.fields[0], data, schema)
    buckets = sorted(set(pv.to_pylist()))
    rows = pa.table({"object_id": [f"v1$b{b}$dataset" for b in buckets], "object_type": ["table"] * len(buckets),
                     "partition_field_mb": pa.array(buckets, pa.int32())})
    assert prune("a = 3", schema, {1: spec}, rows).kept.num_rows == len(buckets)
    r = prune("a = 3 AND b = 'k3'", schema, {1: spec}, rows)
    assert r.kept.num_rows == 1 and r.predicates[1].startswith("partition_field_mb = ")
    r = prune("a IN (3, 4) AND (b = 'k3' OR b = 'k4')", schema, {1: spec}, rows)
    assert 1 <= r.kept.num_rows <= 4
    r = prune("(a = 3 AND b = 'k3') OR (a = 5 AND b = 'k5')", schema, {1: spec}, rows)
    assert 1 <= r.kept.num_rows <= 2
    assert prune("a = 3 OR b = 'k3'", schema, {1: spec}, rows).kept.num_rows == len(buckets)


def test_null_semantics():
    """``col = x`` never matches the NULL partition; ``col IS NULL`` keeps exactly it (identity,
    bucket, truncate, time transforms map a NULL source to a NULL partition value)."""
    for field in [
        _identity("x", 1, {"type": "int64"}),
        {"field_id": "x", "source_ids": [1], "transform": {"type": "bucket", "num_buckets": 4}, "result_type": INT32},
        {"field_id": "x", "source_ids": [1], "transform": {"type": "truncate", "width": 5},
         "result_type": {"type": "int64"}},
    ]:
        r, _ = one_field_case(field, {"i": [1, 2, 3, 17, None]}, "i IS NULL")
        assert r.kept_counts[1] == 1 and "IS NULL" in r.predicates[1]
        r, _ = one_field_case(field, {"i": [1, 2, 3, 17, None]}, "i = 17")
        assert "IS NULL" not in r.predicates[1] and r.kept_counts[1] == 1
    r, _ = one_field_case({"field_id": "y", "source_ids": [3], "transform": {"type": "year"}, "result_type": INT32},
                          {"d": [D(2024, 1, 1), None]}, "d IS NULL")
    assert r.kept_counts[1] == 1


def test_each_transform_owns_its_projections():
    """The projector asks a field's transform how to project (lancepart/model/projection.py), never
    its name: only truncate and year bound a range on their own, only identity has a strict
    projection, and a transform without a projection of its own keeps every partition."""
    from lancepart.model.projection import Projection
    from lancepart.model.spec import PartitionField
    from lancepart.model.transforms import transform_for

    fields = {
        "identity": ({"type": "identity"}, [1]), "year": ({"type": "year"}, [1]), "month": ({"type": "month"}, [1]),
        "day": ({"type": "day"}, [1]), "hour": ({"type": "hour"}, [1]),
        "bucket": ({"type": "bucket", "num_buckets": 4}, [1]),
        "multi_bucket": ({"type": "multi_bucket", "num_buckets": 4}, [1, 2]),
        "truncate": ({"type": "truncate", "width": 3}, [1]),
    }
    monotonic, strict = set(), set()
    for name, (tf, src) in fields.items():
        t = transform_for(PartitionField("f", src, tf, result_type=INT32))
        assert isinstance(t, Projection)
        if type(t).project_bound is not Projection.project_bound:
            monotonic.add(name)
        if t.strict_project("partition_field_f") is not None:
            assert t.strict_project("partition_field_f") == "partition_field_f"
            strict.add(name)
    expression = transform_for(PartitionField("e", [1], expression="col0 % 7", result_type={"type": "int64"}))
    assert expression.strict_project("partition_field_e") is None
    assert monotonic == {"truncate", "year"} and strict == {"identity"}


def test_sql_literals_round_trip():
    """Every partition value type renders as a DataFusion literal equal to the value, so the
    manifest query compares exactly (identity partitions of any flat type)."""
    cases = [
        (pa.int8(), -128), (pa.int64(), -(2**63)), (pa.uint64(), 2**64 - 1), (pa.int32(), 7),
        (pa.float32(), 1.5), (pa.float64(), -0.1), (pa.float64(), 1e300), (pa.float64(), float("inf")),
        (pa.decimal128(10, 2), "-12.30"), (pa.decimal256(40, 3), "123456789012345678901234567890.125"),
        (pa.utf8(), "it's"), (pa.large_utf8(), "日本"), (pa.binary(), b"\x00\xff'"), (pa.binary(3), b"abc"),
        (pa.large_binary(), b"xy"), (pa.bool_(), True), (pa.date32(), D(2025, 12, 10)), (pa.date32(), -800_000),
        (pa.date64(), D(1969, 12, 31)), (pa.timestamp("us"), _ts(2025, 1, 2, 3, 4, 5, 123456)),
        (pa.timestamp("ns"), 1_735_707_600_123_456_789), (pa.timestamp("s", tz="UTC"), 0),
        (pa.timestamp("ms", tz="America/New_York"), 1_735_707_600_123),
        (pa.timestamp("us", tz="+05:30"), -1), (pa.timestamp("us"), 2**62),
    ]
    from decimal import Decimal

    for t, v in cases:
        if pa.types.is_decimal(t):
            v = Decimal(v)
        if pa.types.is_date32(t) and isinstance(v, int):
            arr = pa.array([v], pa.int32()).view(t)
        elif pa.types.is_timestamp(t) and isinstance(v, int):
            arr = pa.array([v], pa.int64()).view(t)
        else:
            arr = pa.array([v], t)
        lit = _sql_literal(arr[0])
        ctx = datafusion.SessionContext()
        ctx.register_record_batches("x", [[pa.record_batch({"c": arr})]])
        got = ctx.sql(f"SELECT c = {lit} AS eq FROM x").to_pydict()["eq"]
        assert got == [True], (t, v, lit)


def test_ten_thousand_partitions_point_lookup():
    """10 000 partition tables (identity(event_date) x bucket(user_id, 16)): a point lookup keeps
    exactly one. Its speed is measured by benchmarks/read.py and benchmarks/read_e2e.py."""
    schema = pa.schema([_f("user_id", pa.int64(), 0, False), _f("event_date", pa.date32(), 1)])
    spec = PartitionSpec.from_json({"id": 1, "fields": [
        _identity("event_date", 1, {"type": "date32"}),
        {"field_id": "b", "source_ids": [0], "transform": {"type": "bucket", "num_buckets": 16},
         "result_type": INT32}]})
    start = (D(2024, 1, 1) - D(1970, 1, 1)).days
    days = pa.array([start + i // 16 for i in range(10_000)], pa.int32()).view(pa.date32())
    rows = pa.table({"object_id": [f"v1$p{i:05d}$dataset" for i in range(10_000)],
                     "object_type": ["table"] * 10_000, "location": [f"x_{i}" for i in range(10_000)],
                     "read_version": pa.array([1] * 10_000, pa.uint64()), "partition_field_event_date": days,
                     "partition_field_b": pa.array([i % 16 for i in range(10_000)], pa.int32())})
    flt = "event_date = DATE '2024-06-01' AND user_id = 42"
    r = prune(flt, schema, {1: spec}, rows)
    assert r.kept.num_rows == 1 and r.pruned == {1: 9_999}
    assert r.kept.column("partition_field_event_date")[0].as_py() == D(2024, 6, 1)


# =========================================================================== randomized property

PROP_SCHEMA = pa.schema([
    _f("id", pa.int64(), 0, False),
    _f("i", pa.int64(), 1), _f("i32", pa.int32(), 2), _f("s", pa.utf8(), 3), _f("d", pa.date32(), 4),
    _f("ts", pa.timestamp("us"), 5), _f("tsz", pa.timestamp("us", tz="+05:30"), 6),
    _f("tsn", pa.timestamp("us", tz="America/New_York"), 7),
])


def _tf(fid, src, type_, rt=INT32, **kw):
    return {"field_id": fid, "source_ids": src, "transform": {"type": type_, **kw}, "result_type": rt}


PROP_SPECS = {
    1: PartitionSpec.from_json({"id": 1, "fields": [
        _identity("i32", 2, INT32), _identity("s", 3, {"type": "utf8"}), _identity("d", 4, {"type": "date32"}),
        _identity("ts", 5, {"type": "timestamp"})]}),
    2: PartitionSpec.from_json({"id": 2, "fields": [
        _tf("i_b8", [1], "bucket", num_buckets=8), _tf("mb", [2, 3], "multi_bucket", num_buckets=8),
        _tf("i_t10", [1], "truncate", {"type": "int64"}, width=10),
        _tf("s_t2", [3], "truncate", {"type": "utf8"}, width=2)]}),
    3: PartitionSpec.from_json({"id": 3, "fields": [
        _tf("ts_y", [5], "year"), _tf("ts_m", [5], "month"), _tf("d_day", [4], "day"), _tf("tsz_h", [6], "hour")]}),
    4: PartitionSpec.from_json({"id": 4, "fields": [
        _tf("tsn_y", [7], "year"), _tf("tsn_m", [7], "month"), _tf("d_m", [4], "month"),
        {"field_id": "e_mod", "source_ids": [1], "expression": "col0 % 7", "result_type": {"type": "int64"}},
        {"field_id": "e_cat", "source_ids": [3, 2], "expression": "concat(col0, '-', CAST(col1 AS VARCHAR))",
         "result_type": {"type": "utf8"}}]}),
    5: PartitionSpec.from_json({"id": 5, "fields": [
        _tf("d_y", [4], "year"), _tf("tsz_d", [6], "day"), _tf("i32_b4", [2], "bucket", num_buckets=4),
        {"field_id": "e_ym", "source_ids": [4],
         "expression": "date_part('year', col0) * 100 + date_part('month', col0)", "result_type": {"type": "int64"}}]}),
    6: PartitionSpec.from_json({"id": 6, "fields": [
        {"field_id": "e_first", "source_ids": [3], "expression": "coalesce(left(col0, 1), '?')",
         "result_type": {"type": "utf8"}},  # NULL -> '?': IS NULL must evaluate, not assume NULL
        _tf("ts_d", [5], "day"), _tf("tsn_h", [7], "hour"), _tf("i32_t100", [2], "truncate", INT32, width=100)]}),
}

_EPOCH = dt.datetime(1970, 1, 1)
_WORDS = ["", "a", "ab", "abc", "abd", "b", "ba", "bab", "c", "ca", "cab", "é", "éa", "a'b", "a_c", "a%c"]


def _gen_rows(rng: random.Random, n: int) -> pa.Table:
    def maybe(v):
        return None if rng.random() < 0.1 else v

    base_day = (D(2024, 11, 15) - D(1970, 1, 1)).days
    base_us = int((dt.datetime(2024, 12, 30, 20) - _EPOCH).total_seconds()) * 1_000_000
    i_pool = [rng.randint(-40, 40) for _ in range(12)]
    i32_pool = [rng.randint(-1000, 1000) for _ in range(8)]
    d_pool = [base_day + rng.randint(-60, 500) for _ in range(25)]
    ts_pool = [base_us + rng.randint(0, 5 * 86_400) * 1_000_000 + rng.choice([0, rng.randint(0, 999_999)])
               for _ in range(15)] + [base_us + rng.randint(0, 400 * 86_400) * 1_000_000 for _ in range(10)]
    ts_pool += [base_us + rng.randint(0, 30 * 3_600_000_000) for _ in range(10)]  # dense hours
    cols = {
        "id": pa.array(range(n), pa.int64()),
        "i": pa.array([maybe(rng.choice(i_pool)) for _ in range(n)], pa.int64()),
        "i32": pa.array([maybe(rng.choice(i32_pool)) for _ in range(n)], pa.int32()),
        "s": pa.array([maybe(rng.choice(_WORDS)) for _ in range(n)], pa.utf8()),
        "d": pa.array([maybe(rng.choice(d_pool)) for _ in range(n)], pa.int32()).view(pa.date32()),
    }
    for name in ("ts", "tsz", "tsn"):
        # A rare instant beyond chrono's range (year > 262142) gets a NULL year/month/day partition.
        pool = ts_pool + ([9_000_000_000_000_000_000] if name == "ts" else [])
        cols[name] = pa.array([maybe(rng.choice(pool)) for _ in range(n)], pa.int64()).view(
            PROP_SCHEMA.field(name).type)
    return pa.table(cols, schema=PROP_SCHEMA)


def _manifest_for(data: pa.Table) -> tuple[pa.Table, dict[int, list[str]]]:
    """One table row per distinct partition tuple per spec, and each data row's table per spec."""
    columns: dict[str, pa.Field] = {}
    for spec in PROP_SPECS.values():
        for f in spec.fields:
            columns[f.column_name] = pa.field(f.column_name, f.result_type)
    pieces = []
    row_tables: dict[int, list[str]] = {}
    for sid, spec in PROP_SPECS.items():
        values = {f.column_name: apply(f, data, PROP_SCHEMA) for f in spec.fields}
        tuples = list(zip(*(_physical(pa.chunked_array([v])) for v in values.values()), strict=True))
        ids = [f"v{sid}${hashlib.sha256(repr(t).encode()).hexdigest()[:16]}$dataset" for t in tuples]
        row_tables[sid] = ids
        first: dict[str, int] = {}
        for i, oid in enumerate(ids):
            first.setdefault(oid, i)
        take = pa.array(list(first.values()), pa.int64())
        cols = {"object_id": pa.array(list(first), pa.utf8()),
                "object_type": pa.array(["table"] * len(first), pa.utf8())}
        for name, field in columns.items():
            cols[name] = values[name].take(take) if name in values else pa.nulls(len(first), field.type)
        pieces.append(pa.table(cols))
    # a namespace row, which must never be returned
    ns = {"object_id": ["v1"], "object_type": ["namespace"]}
    ns.update({name: pa.nulls(1, f.type) for name, f in columns.items()})
    pieces.append(pa.table(ns, schema=pieces[0].schema))
    return pa.concat_tables(pieces), row_tables


def _sql_value(rng: random.Random, col: str, v) -> str:
    """A SQL literal for value ``v`` of column ``col`` in one of the spellings users write."""
    if col in ("i", "i32"):
        return str(v)
    if col == "s":
        return "'" + v.replace("'", "''") + "'"
    if col == "d":
        day = D(1970, 1, 1) + dt.timedelta(days=v)
        form = rng.random()
        if form < 0.6:
            return f"DATE '{day.isoformat()}'"
        if form < 0.8:
            return f"'{day.isoformat()}'"
        return f"TIMESTAMP '{day.isoformat()} {rng.choice(['00:00:00', '10:00:00'])}'"
    t = _EPOCH + dt.timedelta(microseconds=v)
    if col == "ts":
        form = rng.random()
        if form < 0.15:
            return f"DATE '{t.date().isoformat()}'"
        return f"TIMESTAMP '{t.isoformat(sep=' ')}'"
    # zoned columns: a UTC instant with an explicit offset, or a naive literal DataFusion reads in
    # the column's zone (avoiding the hours a DST change skips or repeats)
    if rng.random() < 0.5 or col == "tsz" or t.hour >= 4:
        return f"'{t.isoformat()}+00:00'"
    return f"TIMESTAMP '{t.replace(hour=12).isoformat(sep=' ')}'"


def _random_value(rng: random.Random, data: pa.Table, col: str):
    """A value of the data (70%) or one outside it, as the physical Python value."""
    vals = [x for x in _physical(data.column(col)) if x is not None and _printable(col, x)]
    if vals and rng.random() < 0.7:
        return rng.choice(vals)
    if col == "i":
        return rng.choice([rng.randint(-60, 60), 10**12])
    if col == "i32":
        return rng.randint(-2000, 2000)
    if col == "s":
        return rng.choice(["zz", "abz", "", "b", "éé"])
    if col == "d":
        return (D(2024, 11, 15) - D(1970, 1, 1)).days + rng.randint(-400, 800)
    return int((dt.datetime(2025, 1, 1) - _EPOCH).total_seconds() * 1e6) + rng.randint(-10**13, 10**13)


def _printable(col: str, v) -> bool:
    """Whether a literal can be written for ``v`` (dates and instants of the years 1-9999)."""
    if col == "d":
        return -719_162 <= v <= 2_932_896
    if col in ("ts", "tsz", "tsn"):
        return -62_135_596_800_000_000 <= v <= 253_402_300_799_000_000
    return True


def _physical(col: pa.ChunkedArray) -> list:
    col = col.combine_chunks()
    t = col.type
    if pa.types.is_date32(t):
        return col.view(pa.int32()).to_pylist()
    if pa.types.is_timestamp(t):
        return col.view(pa.int64()).to_pylist()
    return col.to_pylist()


def _atom(rng: random.Random, data: pa.Table) -> tuple[str, bool]:
    """(predicate, whether it is an equality-like atom)."""
    col = rng.choice(["i", "i32", "s", "d", "ts", "tsz", "tsn", "i", "s", "d"])

    def lit():
        return _sql_value(rng, col, _random_value(rng, data, col))

    r = rng.random()
    if r < 0.06:
        # i32 and s pinned together (multi_bucket, the two-column expression): values of a few rows
        picks = [rng.randrange(data.num_rows) for _ in range(rng.randint(1, 3))]
        a = [data.column("i32")[i].as_py() for i in picks]
        b = [data.column("s")[i].as_py() for i in picks]
        left = "i32 IS NULL" if a[0] is None else f"i32 IN ({', '.join(str(x) for x in a if x is not None)})"
        right = "s IS NULL" if b[0] is None else "s IN (" + ", ".join(_sql_value(rng, "s", x) for x in b
                                                                        if x is not None) + ")"
        return f"{left} AND {right}", True
    if col == "s" and r < 0.2:
        pick = _random_value(rng, data, col)
        prefix = pick[: rng.randint(0, 3)].replace("'", "''")
        tail = rng.choice(["%", "%", "_%", "", "%b"])
        neg = "NOT " if rng.random() < 0.2 else ""
        return f"s {neg}LIKE '{prefix}{tail}'", False
    if col == "i32" and r < 0.05:
        return f"i32 {rng.choice(['=', '<', '>='])} {rng.choice(['3000000000', '-3000000000', '1.5', '-7.25'])}", False
    if r < 0.35:
        return f"{col} = {lit()}", True
    if r < 0.5:
        items = ", ".join(lit() for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.1:
            items += ", NULL"
        return f"{col} IN ({items})", True
    if r < 0.55:
        return f"{col} NOT IN ({', '.join(lit() for _ in range(rng.randint(1, 3)))})", False
    if r < 0.63:
        return f"{col} {rng.choice(['<', '<=', '>', '>=', '!='])} {lit()}", False
    if r < 0.76 and col in ("i", "i32", "d", "ts", "tsz", "tsn"):
        # a narrow window: what month/day/hour and bucket enumerate
        v = _random_value(rng, data, col)
        width = {"i": 12, "i32": 300, "d": 45}.get(col, rng.choice([3, 20, 40]) * 3_600_000_000)
        near = [x for x in _physical(data.column(col)) if x is not None and v <= x <= v + width]
        hi = rng.choice(near) if near and rng.random() < 0.7 else v + rng.randint(0, width)
        if not _printable(col, hi):
            hi = v
        lo_op, hi_op = rng.choice([">", ">="]), rng.choice(["<", "<="])
        if rng.random() < 0.4:  # the tightest bounds around data values: x > v - 1 AND x < w + 1
            lo_op, hi_op, v, hi = ">", "<", v - 1, hi + 1
        return f"{col} {lo_op} {_sql_value(rng, col, v)} AND {col} {hi_op} {_sql_value(rng, col, hi)}", False
    if r < 0.88:
        a, b = sorted([_random_value(rng, data, col), _random_value(rng, data, col)], key=_sort_key)
        neg = "NOT " if rng.random() < 0.15 else ""
        return f"{col} {neg}BETWEEN {_sql_value(rng, col, a)} AND {_sql_value(rng, col, b)}", False
    negated = rng.random() < 0.3
    return f"{col} IS {'NOT ' if negated else ''}NULL", not negated


def _sort_key(v):
    return v.encode() if isinstance(v, str) else v


def _filter(rng: random.Random, data: pa.Table, depth: int = 0) -> tuple[str, bool]:
    r = rng.random()
    if depth >= 2 or r < 0.45:
        return _atom(rng, data)
    if r < 0.75:
        parts = [_filter(rng, data, depth + 1) for _ in range(rng.randint(2, 3))]
        return " AND ".join(f"({p})" for p, _ in parts), all(e for _, e in parts)
    if r < 0.9:
        parts = [_filter(rng, data, depth + 1) for _ in range(2)]
        return " OR ".join(f"({p})" for p, _ in parts), all(e for _, e in parts)
    inner, _ = _filter(rng, data, depth + 1)
    return f"NOT ({inner})", False


def test_randomized_pruning_never_drops_a_matching_partition():
    """Property (spec "Partition Pruning", "Compatibility with Partition Pruning"): over random
    data, six spec versions covering identity (int, string, date, timestamp), bucket,
    multi_bucket, truncate (int, string), year/month/day/hour (naive, fixed-offset and named
    zones), single- and multi-column expressions, and random filters, every table holding a
    row that matches the filter (DataFusion over the rows) is kept; equality filters prune."""
    rng = random.Random(20251210)
    cases = 0
    fractions, eq_fractions = [], []
    for _dataset in range(16):
        data = _gen_rows(rng, 150)
        rows, row_tables = _manifest_for(data)
        n_tables = sum(1 for t in rows.column("object_type").to_pylist() if t == "table")
        for _ in range(40):
            flt, equality = _filter(rng, data)
            result = prune(flt, PROP_SCHEMA, PROP_SPECS, rows)
            kept = set(result.object_ids)
            assert "v1" not in kept
            matched = _brute_force(data, flt)
            for sid, tables in row_tables.items():
                missing = {tables[i] for i in matched} - kept
                assert not missing, f"filter {flt!r} dropped matching v{sid} tables {missing}\n{result.explain()}"
            frac = 1 - len(kept) / n_tables
            fractions.append(frac)
            if equality:
                eq_fractions.append(frac)
            cases += 1
    print(f"\n{cases} random filters; average fraction of tables pruned: {statistics.mean(fractions):.3f}; "
          f"equality-only filters ({len(eq_fractions)}): {statistics.mean(eq_fractions):.3f}")
    assert cases >= 500
    assert statistics.mean(eq_fractions) > 0.3
    assert statistics.mean(fractions) > 0.1
