"""``ns.to_pyarrow_dataset``: a pyarrow Dataset over a namespace snapshot whose engine-side
filters prune partitions (docs/reading.md "pyarrow Dataset: DuckDB's WHERE, Polars' lazy
filters"; spec "Partition Pruning", "Transaction / Read Behavior").

Real Lance tables on disk, real DuckDB and Polars. Every scan must return exactly what pyarrow
returns for the same Expression over all published rows; pruning is proven by the partition
tables a scan opens (``lancepart.read.snapshot.open_published``, which every read of a table goes
through), never by timing."""

from __future__ import annotations

import datetime as dt
import pickle

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError, InvalidFilterError
from lancepart.read import arrow_filter
from lancepart.read.snapshot import apply_filter

D = dt.date
UTC = dt.timezone.utc
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()), ("Country", pa.utf8()), ("my col", pa.float64()),
    ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("flag", pa.bool_())])
SPEC = {"id": 1, "fields": [
    {"field_id": "k", "source_ids": [1], "transform": {"type": "identity"}, "result_type": {"type": "int32"}},
    {"field_id": "country", "source_ids": [2], "transform": {"type": "identity"}, "result_type": {"type": "utf8"}}]}
KS = [0, 1, 2, 3, 4, None]
COUNTRIES = ["US", "FR", "it's", None]
FLOATS = [1.5, -2.0, 0.0, -0.0, float("nan"), None, 3.25]


def rows_of(n: int, start: int = 0) -> pa.Table:
    """``n`` rows covering every (k, Country) pair, NULLs, NaN and both zeros included."""
    ids = list(range(start, start + n))
    return pa.table({
        "id": ids,
        "k": [KS[i % len(KS)] for i in ids],
        "Country": [COUNTRIES[(i // len(KS)) % len(COUNTRIES)] for i in ids],
        "my col": [FLOATS[i % len(FLOATS)] for i in ids],
        "d": [None if i % 11 == 0 else D(2025, 12, 1) + dt.timedelta(days=i % 9) for i in ids],
        "ts": [None if i % 13 == 0 else dt.datetime(2025, 12, 1, tzinfo=UTC) + dt.timedelta(hours=7 * (i % 17))
               for i in ids],
        "flag": [None if i % 5 == 0 else i % 2 == 0 for i in ids],
    }, schema=SCHEMA)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pyarrow_dataset") / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    ns.write(rows_of(300))
    ns.write(rows_of(120, start=300))  # a second commit: several fragments per table
    ns = PartitionedNamespace.open(root)
    return ns, ns.to_table()


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def tables_for(ns: PartitionedNamespace, sql: str) -> set[str]:
    return {p.object_id for p in ns.partitions(sql)}


def field(name: str) -> pc.Expression:
    return pc.field(name)


# (Expression, the SQL filter meaning the same for ns.to_table, the SQL that prunes as it should)
SAME = [
    (field("k") == 3, "k = 3", "k = 3"),
    (field("k") != 3, "k <> 3", "k <> 3"),
    (pc.scalar(2) < field("k"), "k > 2", "k > 2"),
    ((field("k") >= 1) & (field("k") <= 2), "k BETWEEN 1 AND 2", "k BETWEEN 1 AND 2"),
    (field("Country") == "it's", "\"Country\" = 'it''s'", "\"Country\" = 'it''s'"),
    ((field("Country") == "US") | (field("k") == 0), "\"Country\" = 'US' OR k = 0", "\"Country\" = 'US' OR k = 0"),
    (~(field("k") == 1), "NOT (k = 1)", "k <> 1"),
    (field("k").is_null(), "k IS NULL", "k IS NULL"),
    (field("Country").is_valid() & (field("k") == pa.scalar(4, pa.int8())), "\"Country\" IS NOT NULL AND k = 4",
     "\"Country\" IS NOT NULL AND k = 4"),
    (field("d") == pa.scalar(D(2025, 12, 3)), "d = DATE '2025-12-03'", None),
    (field("ts") >= pa.scalar(dt.datetime(2025, 12, 2, tzinfo=UTC), pa.timestamp("s", tz="UTC")),
     "ts >= TIMESTAMP '2025-12-02T00:00:00Z'", None),
    (field("my col") > 1.0, "\"my col\" > 1.0 AND NOT isnan(\"my col\")", None),
    (field("flag") & (field("k") == 2), "flag AND k = 2", "k = 2"),
]


@pytest.mark.parametrize(("expr", "sql", "prunes_as"), SAME, ids=[s for _, s, _ in SAME])
def test_a_scan_equals_to_table_and_opens_only_the_kept_partitions(written, opened, expr, sql, prunes_as):
    """A filter Expression returns the rows ``ns.to_table`` returns for the same filter in SQL,
    and only the partitions pruning with that SQL keeps are opened."""
    ns, _ = written
    ds = ns.to_pyarrow_dataset()
    got = ds.to_table(filter=expr)
    assert ids(got) == ids(ns.to_table(sql))
    assert got.schema == ns.schema
    if prunes_as is not None:
        opened.clear()
        ds.to_table(filter=expr, columns=["id"])
        assert set(opened) == tables_for(ns, prunes_as)
        assert len(opened) < len(ns.partitions())


def test_duckdb_where_prunes_without_any_lancepart_call(written, opened):
    """``duckdb.sql("... FROM ds WHERE k = 3")`` on the dataset: DuckDB hands ``ds.scanner`` its
    filter; only the tables of partition k = 3 are opened, and the count is exact."""
    duckdb = pytest.importorskip("duckdb")
    ns, _ = written
    ds = ns.to_pyarrow_dataset()  # noqa: F841 (DuckDB finds it by its name)
    opened.clear()
    assert duckdb.sql("SELECT count(*) FROM ds WHERE k = 3").fetchall() == [(ns.to_table("k = 3").num_rows,)]
    assert set(opened) == tables_for(ns, "k = 3")
    opened.clear()
    got = duckdb.sql("SELECT id FROM ds WHERE \"Country\" IN ('US', 'FR') AND k <= 1").fetchall()
    assert sorted(r[0] for r in got) == ids(ns.to_table("\"Country\" IN ('US', 'FR') AND k <= 1"))
    assert set(opened) == tables_for(ns, "\"Country\" IN ('US', 'FR') AND k <= 1")
    opened.clear()  # a WHERE DuckDB keeps to itself reads everything and is still exact
    got = duckdb.sql("SELECT count(*) FROM ds WHERE \"Country\" LIKE 'U%'").fetchall()
    assert got == [(ns.to_table("\"Country\" LIKE 'U%'").num_rows,)]
    assert set(opened) == tables_for(ns, "TRUE")


def test_each_scan_of_a_duckdb_self_join_prunes_by_its_own_filter(written, opened):
    """A query scanning the dataset twice (a self-join, scans on DuckDB's threads): each scan is
    pruned by the filter DuckDB pushes into it."""
    duckdb = pytest.importorskip("duckdb")
    ns, _ = written
    con = duckdb.connect()
    con.register("ev", ns.to_pyarrow_dataset())
    opened.clear()
    got = con.sql("SELECT count(*) FROM ev a JOIN ev b ON a.id + 1 = b.id WHERE a.k = 1 AND b.k = 2").fetchall()
    assert got == [(len(set(ids(ns.to_table("k = 1"))) & {i - 1 for i in ids(ns.to_table("k = 2"))}),)]
    assert set(opened) == tables_for(ns, "k IN (1, 2)")


def test_polars_lazy_filter_prunes_without_any_lancepart_call(written, opened):
    """``pl.scan_pyarrow_dataset(ds).filter(pl.col("k") == 3)``: Polars hands ``ds.to_batches``
    the filter; only the tables of k = 3 are opened."""
    pl = pytest.importorskip("polars")
    ns, _ = written
    ds = ns.to_pyarrow_dataset()
    opened.clear()
    df = pl.scan_pyarrow_dataset(ds).filter(pl.col("k") == 3).select("id").collect()
    assert sorted(df["id"].to_list()) == ids(ns.to_table("k = 3"))
    assert set(opened) == tables_for(ns, "k = 3")
    opened.clear()
    lazy = ns.scan_polars(columns=["id", "k", "Country"])
    df = lazy.filter((pl.col("Country") == "FR") & pl.col("k").is_in([1, 2])).collect()
    assert sorted(df["id"].to_list()) == ids(ns.to_table("\"Country\" = 'FR' AND k IN (1, 2)"))
    assert set(opened) == tables_for(ns, "\"Country\" = 'FR' AND k IN (1, 2)")


def test_to_duckdb_where_prunes_and_keeps_its_own_filter(written, opened):
    """``to_duckdb`` registers the dataset: a query's WHERE prunes too, on top of the filter given
    to ``to_duckdb``; each query streams the snapshot again."""
    duckdb = pytest.importorskip("duckdb")
    ns, _ = written
    con = duckdb.connect()
    ns.to_duckdb("ev", "\"Country\" = 'US'", columns=["id", "k"], connection=con)
    opened.clear()
    got = con.sql("SELECT id FROM ev WHERE k = 2").fetchall()
    assert sorted(r[0] for r in got) == ids(ns.to_table("\"Country\" = 'US' AND k = 2"))
    assert set(opened) == tables_for(ns, "\"Country\" = 'US' AND k = 2")
    assert con.sql("SELECT count(*) FROM ev").fetchall() == [(ns.to_table("\"Country\" = 'US'").num_rows,)]


def test_an_untranslatable_expression_prunes_nothing_and_is_still_exact(written, opened):
    """Arithmetic, a field compared with a field, a function pruning cannot follow: every table
    is read and pyarrow filters exactly."""
    ns, full = written
    ds = ns.to_pyarrow_dataset()
    every = tables_for(ns, "TRUE")
    for expr in [pc.multiply(field("k"), 2) == 6, field("k") == field("id"),
                 pc.starts_with(field("Country"), "U"), (field("k") == 1) | (pc.multiply(field("k"), 2) == 6)]:
        assert arrow_filter.prune_sql(expr, ns.schema) is None
        opened.clear()
        assert ids(ds.to_table(filter=expr)) == ids(full.filter(expr))
        assert set(opened) == every


def test_an_and_keeps_pruning_with_its_translatable_part(written, opened):
    """``k = 1 AND <untranslatable>`` prunes by ``k = 1``; ``NOT (<untranslatable> OR k = 1)``
    is ``NOT <untranslatable> AND k <> 1`` and prunes the tables of k = 1."""
    ns, full = written
    ds = ns.to_pyarrow_dataset()
    untranslatable = pc.multiply(field("k"), 2) == 2
    for expr, prunes_as in [((field("k") == 1) & untranslatable, "k = 1"),
                            (~(untranslatable | (field("k") == 1)), "k <> 1")]:
        opened.clear()
        assert ids(ds.to_table(filter=expr)) == ids(full.filter(expr))
        assert set(opened) == tables_for(ns, prunes_as)


def test_nulls_follow_pyarrow(written, opened):
    """pyarrow's NULL semantics: a comparison with NULL drops the row, also under NOT; ``is_in``
    matches a NULL input only when its value set holds a null (FALSE, never NULL, otherwise);
    ``is_null`` reads only the partitions whose value is NULL."""
    ns, full = written
    ds = ns.to_pyarrow_dataset()
    null_k = full.filter(field("k").is_null()).num_rows
    assert null_k > 0
    assert ids(ds.to_table(filter=field("k") != 3)) == ids(ns.to_table("k <> 3"))
    assert ds.count_rows(filter=~(field("k") == 3)) == full.num_rows - null_k - full.filter(field("k") == 3).num_rows
    with_null = field("Country").isin(["US", None])
    assert ids(ds.to_table(filter=with_null)) == ids(ns.to_table("\"Country\" = 'US' OR \"Country\" IS NULL"))
    not_in = ~field("Country").isin(["US"])  # TRUE for a NULL Country: is_in was FALSE
    assert ids(ds.to_table(filter=not_in)) == ids(ns.to_table("\"Country\" IS NULL OR \"Country\" <> 'US'"))
    skipping = ~pc.is_in(field("Country"), pa.array(["US", None]), skip_nulls=True)
    assert ids(ds.to_table(filter=skipping)) == ids(ns.to_table("\"Country\" IS NULL OR \"Country\" <> 'US'"))
    opened.clear()
    assert ds.count_rows(filter=field("k").is_null()) == null_k
    assert set(opened) == tables_for(ns, "k IS NULL")


def test_the_dataset_reads_the_snapshot_of_the_call(tmp_path, opened):
    """Rows published after ``to_pyarrow_dataset`` (a new partition, more rows in an old one) are
    seen by no scan of it: the tables stay at the versions pinned at the call."""
    duckdb = pytest.importorskip("duckdb")
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, SPEC)
    ns.write(rows_of(60))
    ds = ns.to_pyarrow_dataset()
    before = ids(ds.to_table())
    later = rows_of(60, start=1000)
    ns.write(later.set_column(1, "k", pa.array([9] * 30 + [3] * 30, pa.int32())))
    assert ns.to_table().num_rows == 120
    assert ids(ds.to_table()) == before
    assert ds.count_rows(filter=field("k") == 9) == 0
    assert duckdb.sql("SELECT count(*) FROM ds WHERE k = 3").fetchall() == [(len([i for i in range(60)
                                                                                   if KS[i % 6] == 3]),)]
    assert ds.manifest_version < ns.manifest_version


def test_count_rows_head_and_an_empty_projection(written, opened):
    """``count_rows`` and ``columns=[]`` count rows without reading a column the filter does not
    need; ``head`` returns the first rows of the scan."""
    duckdb = pytest.importorskip("duckdb")
    ns, full = written
    ds = ns.to_pyarrow_dataset()
    assert ds.count_rows() == full.num_rows
    assert ds.count_rows(filter=field("k") == 2) == ns.to_table("k = 2").num_rows
    empty = ds.to_table(columns=[], filter=field("k") == 2)
    assert (empty.num_columns, empty.num_rows) == (0, ns.to_table("k = 2").num_rows)
    assert ds.to_table(columns=[]).num_rows == full.num_rows
    assert duckdb.sql("SELECT count(*) FROM ds").fetchall() == [(full.num_rows,)]
    head = ds.head(5, columns=["id", "k"], filter=field("k") == 4)
    assert head.num_rows == 5 and head.column_names == ["id", "k"]
    assert set(head.column("id").to_pylist()) <= set(ids(ns.to_table("k = 4")))
    assert ds.head(0).num_rows == 0


def test_the_dataset_filter_and_columns_combine_with_the_scan(written, opened):
    """``to_pyarrow_dataset(filter, columns)``: the SQL filter and the scan's Expression are
    ANDed (both prune), the scan's projection narrows the dataset's; ``filter()`` ANDs too."""
    ns, _ = written
    ds = ns.to_pyarrow_dataset("\"Country\" = 'FR'", columns=["id", "k"])
    assert ds.schema.names == ["id", "k"]
    opened.clear()
    got = ds.to_table(filter=field("k") >= 3, columns=["id"])
    assert got.column_names == ["id"]
    assert ids(got) == ids(ns.to_table("\"Country\" = 'FR' AND k >= 3"))
    assert set(opened) == tables_for(ns, "\"Country\" = 'FR' AND k >= 3")
    narrowed = ds.filter(field("k") == 4)
    assert isinstance(narrowed, pds.Dataset)
    assert ids(narrowed.to_table(filter=field("id") > 100)) == ids(ns.to_table("\"Country\" = 'FR' AND k = 4 "
                                                                                "AND id > 100"))
    assert narrowed.to_table(columns={"twice": pc.multiply(field("id"), 2)}).column_names == ["twice"]
    with pytest.raises(InvalidArgumentError, match="Country"):
        ds.to_table(filter=field("Country") == "FR")  # projected away


def test_a_name_that_needs_quoting_prunes_and_filters(tmp_path, opened):
    """A partition column named ``my col`` (quoted in SQL) prunes from pyarrow, DuckDB and Polars."""
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("my col", pa.utf8())])
    spec = {"id": 1, "fields": [{"field_id": "my_col", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns.write(pa.table({"id": list(range(40)), "my col": ["a b", "c", "it's", None] * 10}, schema=schema))
    ds = ns.to_pyarrow_dataset()
    expected = tables_for(ns, "\"my col\" = 'a b'")
    assert len(expected) == 1
    counts = []
    for engine in ("pyarrow", "duckdb", "polars"):
        opened.clear()
        if engine == "pyarrow":
            counts.append(ds.count_rows(filter=field("my col") == "a b"))
        elif engine == "duckdb":
            counts.append(duckdb.sql("SELECT count(*) FROM ds WHERE \"my col\" = 'a b'").fetchall()[0][0])
        else:
            counts.append(pl.scan_pyarrow_dataset(ds).filter(pl.col("my col") == "a b").collect().height)
        assert set(opened) == expected, engine
    assert counts == [10, 10, 10]
    assert ds.count_rows(filter=field("my col") == "it's") == 10


def test_bad_arguments_are_typed_errors(written):
    """An unknown column (in the filter or the projection) is InvalidArgumentError naming it; a
    filter that is not an Expression is refused; the dataset's SQL filter is checked at the call."""
    ns, _ = written
    ds = ns.to_pyarrow_dataset()
    with pytest.raises(InvalidArgumentError, match="filter: column 'nope'"):
        ds.to_table(filter=field("nope") == 1)
    with pytest.raises(InvalidArgumentError, match="nope"):
        ds.scanner(columns=["id", "nope"])
    with pytest.raises(InvalidArgumentError, match="filter"):
        ds.to_table(filter="k = 1")
    with pytest.raises(InvalidArgumentError, match="nope"):
        ns.to_pyarrow_dataset(columns=["nope"])
    with pytest.raises(InvalidFilterError):
        ns.to_pyarrow_dataset("\"Country\" = 42")
    with pytest.raises(InvalidArgumentError, match="pyarrow"):
        ds.to_table(filter=field("Country") == 1)  # pyarrow cannot compare a string with an int


def test_batches_stream_in_the_size_asked_and_the_dataset_pickles(written):
    ns, _ = written
    ds = ns.to_pyarrow_dataset("k = 1")
    batches = list(ds.to_batches(batch_size=7, columns=["id"]))
    assert batches and all(b.num_rows <= 7 for b in batches)
    assert sorted(i for b in batches for i in b.column(0).to_pylist()) == ids(ns.to_table("k = 1"))
    again = pickle.loads(pickle.dumps(ds.filter(field("Country") == "US")))
    assert again.manifest_version == ds.manifest_version
    assert ids(again.to_table()) == ids(ns.to_table("k = 1 AND \"Country\" = 'US'"))


def test_scan_polars_takes_the_types_to_polars_takes(tmp_path):
    """``scan_polars`` hands Polars the types ``to_polars`` converts to (a ``decimal256`` of at
    most 38 digits as ``decimal128``, a ``+05:30`` zone as UTC), and filters on them."""
    pl = pytest.importorskip("polars")
    from decimal import Decimal

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("amount", pa.decimal256(20, 2)),
                        ("ts", pa.timestamp("us", tz="+05:30"))])
    spec = {"id": 1, "fields": [{"field_id": "id_b", "source_ids": [0],
                                 "transform": {"type": "bucket", "num_buckets": 2}, "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    t0 = dt.datetime(2025, 1, 1, tzinfo=UTC)
    ns.write(pa.table({"id": [1, 2, 3], "amount": [Decimal("1.50"), Decimal("2.25"), None],
                       "ts": [t0, t0 + dt.timedelta(hours=1), None]}, schema=schema))
    got = ns.scan_polars().filter(pl.col("ts") > t0).collect()
    assert got["id"].to_list() == [2]
    assert ns.scan_polars().sort("id").collect().equals(ns.to_polars().sort("id"))


# ------------------------------------------------------------------ the translation itself


@pytest.mark.parametrize(("expr", "sql"), [
    (field("k") == 3, "k = 3"),
    (pc.scalar(3) <= field("k"), "k >= 3"),
    (field("Country") == "it's", "\"Country\" = 'it''s'"),
    (field("Country").isin(["US", None]), "(\"Country\" IS NULL OR \"Country\" IN ('US'))"),
    (field("Country").isin(["US"]), "(\"Country\" IS NOT NULL AND \"Country\" IN ('US'))"),
    (field("k").isin([]), "FALSE"),
    (pc.if_else(field("Country").is_valid(), field("Country").isin(["US"]), pa.scalar(None, pa.bool_())),
     "(\"Country\" IS NOT NULL) AND ((\"Country\" IS NOT NULL AND \"Country\" IN ('US')))"),
    (field("k") == pc.cast(pa.scalar(3, pa.int64()), pa.int32()), "k = 3"),
    ((field("k") == 1) & (pc.multiply(field("k"), 2) == 2), "(k = 1)"),
    (~(field("k") == 1), "NOT (k = 1)"),
    (field("my col") > 1.5, "\"my col\" > 1.5"),
    (field("d") < pa.scalar(D(2025, 12, 3)), "d < DATE '2025-12-03'"),
    (field("ts") == pa.scalar(dt.datetime(2025, 12, 2, tzinfo=UTC), pa.timestamp("s", tz="UTC")),
     "ts = arrow_cast('2025-12-02T00:00:00.000000Z', 'Timestamp(Microsecond, Some(\"UTC\"))')"),
])
def test_what_translates(expr, sql):
    """The SQL pruning gets for the Expressions that translate (docs/reading.md)."""
    assert arrow_filter.prune_sql(expr, SCHEMA) == sql


@pytest.mark.parametrize("expr", [
    ~(field("my col") > 1.5),  # IEEE and DataFusion disagree on NaN where a comparison is FALSE
    field("my col") == 0.0,  # 0.0 and -0.0
    field("my col") == float("nan"),
    field("my col").is_null(nan_is_null=True),
    field("k") == 2.5,  # an int32 column and a float literal: pyarrow compares as doubles
    field("k") == 5_000_000_000,  # beyond int32
    field("ts") > pa.scalar(dt.datetime(2025, 1, 1), pa.timestamp("us")),  # a naive literal, a zoned column
    field("d") == pa.scalar(dt.datetime(2025, 1, 1), pa.timestamp("us")),  # a date and a timestamp
    (field("k") == 1) | pc.starts_with(field("Country"), "U"),
    ~((field("k") == 1) & pc.starts_with(field("Country"), "U")),
    field("k") == field("id"),
    field("nope") == 1,
])
def test_what_does_not_translate(expr):
    """Expressions whose translation could drop rows pyarrow keeps prune nothing."""
    assert arrow_filter.prune_sql(expr, SCHEMA) is None


# ------------------------------------------------------------------ property: random Expressions

LITERALS = {
    "k": st.one_of(st.integers(-1, 5).map(lambda v: pa.scalar(v, pa.int32())), st.integers(-1, 5).map(pa.scalar),
                   st.integers(-1, 5).map(lambda v: pa.scalar(v, pa.int8()))),
    "Country": st.sampled_from(["US", "FR", "it's", "DE", ""]).map(pa.scalar),
    "my col": st.sampled_from([1.5, -2.0, 0.0, -0.0, float("nan"), 3.25, 2.0, 1]).map(pa.scalar),
    "d": st.integers(-1, 10).map(lambda n: pa.scalar(D(2025, 12, 1) + dt.timedelta(days=n))),
    "ts": st.integers(-3, 120).map(lambda h: pa.scalar(dt.datetime(2025, 12, 1, tzinfo=UTC) + dt.timedelta(hours=h),
                                                        pa.timestamp("us", tz="UTC"))),
    "flag": st.booleans().map(pa.scalar),
}
COMPARE = [pc.equal, pc.not_equal, pc.less, pc.less_equal, pc.greater, pc.greater_equal]


@st.composite
def leaf(draw) -> pc.Expression:
    col = draw(st.sampled_from(sorted(LITERALS)))
    kind = draw(st.sampled_from(["cmp", "cmp", "mirrored", "in", "null", "odd"]))
    if kind == "in":
        values = draw(st.lists(LITERALS[col], max_size=3))
        with_null = draw(st.booleans())
        arr = pa.array([v.as_py() for v in values] + ([None] if with_null else []),
                       type=values[0].type if values and col != "my col" else SCHEMA.field(col).type)
        return pc.is_in(field(col), arr, skip_nulls=draw(st.booleans()))
    if kind == "null":
        return field(col).is_null() if draw(st.booleans()) else field(col).is_valid()
    if kind == "odd":  # what pruning cannot follow
        return draw(st.sampled_from([pc.multiply(field("k"), 2) == 4, field("k") == field("id"),
                                     pc.starts_with(field("Country"), "F")]))
    op = draw(st.sampled_from(COMPARE))
    lit = draw(LITERALS[col])
    return op(field(col), lit) if kind == "cmp" else op(pc.scalar(lit), field(col))


def expressions() -> st.SearchStrategy[pc.Expression]:
    return st.recursive(leaf(), lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] & ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] | ab[1]),
        inner.map(lambda a: ~a),
        inner.map(lambda a: pc.if_else(field("Country").is_valid(), a, pc.scalar(pa.scalar(None, pa.bool_()))))),
        max_leaves=5)


def _ids_where(table: pa.Table, sql: str) -> set[int]:
    return set(apply_filter(table, sql).column("id").to_pylist())


@settings(max_examples=250, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(expr=expressions())
def test_the_translation_never_loses_a_row(written, expr):
    """Over all published rows (NULLs, NaN, -0.0 among them): where pyarrow says TRUE, the SQL
    pruning gets is TRUE (DataFusion evaluating it), and the predicate a NOT turns to is FALSE
    where pyarrow says FALSE. Pruning can then only drop partitions pyarrow drops."""
    ns, full = written
    node = arrow_filter.decode(expr)
    assert node is not None
    true_sql = arrow_filter._sql(node, ns.schema, True)
    false_sql = arrow_filter._sql(node, ns.schema, False)
    if true_sql is not None:
        assert set(full.filter(expr).column("id").to_pylist()) <= _ids_where(full, true_sql), true_sql
    if false_sql is not None:
        assert set(full.filter(~expr).column("id").to_pylist()) <= _ids_where(full, f"({false_sql}) IS FALSE"), \
            false_sql


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(expr=expressions())
def test_a_scan_returns_what_pyarrow_returns(written, expr):
    """End to end: pruning, the stream and pyarrow's filter return exactly what pyarrow returns
    over all published rows."""
    ns, full = written
    ds = ns.to_pyarrow_dataset()
    assert ids(ds.to_table(filter=expr, columns=["id"])) == sorted(full.filter(expr).column("id").to_pylist())
