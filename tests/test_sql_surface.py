"""What ``ns.sql`` runs and where (issue 30 item 8): read-only queries only (COPY, CREATE, INSERT,
DROP, SET are refused before anything runs, is written or registered), planned in the caller's
``ctx`` (its tables and UDFs) which is left as it was, and row values (``(a, b) IN ((x, y))``)
answered as DataFusion answers them over every row. Every answer is checked against DataFusion
over the rows written; all engines are real."""

from __future__ import annotations

import datafusion
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError
from lancepart.read.sql import scan_predicates
from tests.conftest import written_events

DIM = pa.table({"country": ["US", "FR", "DE", "JP"], "region": ["americas", "europe", "europe", "asia"]})


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return written_events(tmp_path_factory, "sql_surface", 4_000, seed=11)


def _double(values: pa.Array) -> pa.Array:
    return pc.multiply(values, 2)


def caller_ctx() -> datafusion.SessionContext:
    """A context of the caller's own: a table ``dim`` and a UDF ``dbl`` lancepart knows nothing of."""
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("dim", [DIM.to_batches()])
    ctx.register_udf(datafusion.udf(_double, [pa.float64()], pa.float64(), "immutable", "dbl"))
    return ctx


def oracle(data: pa.Table, query: str, table: str = "t") -> list[tuple]:
    """``query`` answered by DataFusion over every row written, in a context like the caller's."""
    ctx = caller_ctx()
    ctx.register_record_batches(table, [data.to_batches()])
    return rows(ctx.sql(query).to_arrow_table())


def rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def table_names(ctx: datafusion.SessionContext) -> set[str]:
    return set(ctx.catalog().schema().names())


def batch_size(ctx: datafusion.SessionContext) -> list:
    return ctx.sql("SHOW datafusion.execution.batch_size").to_pylist()


REFUSED = [
    ("COPY (SELECT * FROM t) TO '{out}/copy.parquet'", "COPY"),
    ("CREATE EXTERNAL TABLE ext STORED AS CSV LOCATION '{out}/plain.csv'", "CreateExternalTable"),
    ("CREATE TABLE made AS SELECT * FROM t", "CreateMemoryTable"),
    ("CREATE VIEW made AS SELECT * FROM t", "CreateView"),
    ("INSERT INTO {dim} SELECT * FROM {dim}", "Insert Into"),
    ("DROP TABLE {dim}", "DropTable"),
    ("SET datafusion.execution.batch_size = 7", "SetVariable"),
    ("EXPLAIN ANALYZE COPY (SELECT * FROM t) TO '{out}/explained.parquet'", "COPY"),
]


@pytest.mark.parametrize(("statement", "named"), REFUSED)
@pytest.mark.parametrize("own_ctx", [True, False])
def test_statements_are_refused_and_nothing_runs(written, tmp_path, statement, named, own_ctx):
    """Item 8: only queries run; a statement that writes a file, registers, fills or drops a
    table or changes a setting is InvalidArgumentError naming it, and nothing of it happens (in
    the caller's context, whose ``dim`` it targets, or the one ``ns.sql`` makes)."""
    ns, _ = written
    (tmp_path / "plain.csv").write_text("a,b\n1,2\n")
    before_files = sorted(p.name for p in tmp_path.iterdir())
    ctx = caller_ctx() if own_ctx else None
    if ctx is not None:
        tables, setting = table_names(ctx), batch_size(ctx)
    with pytest.raises(InvalidArgumentError, match="only SELECT / WITH queries are accepted") as e:
        ns.sql(statement.format(out=tmp_path, dim="dim" if own_ctx else "t"), ctx=ctx)
    assert named in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before_files  # no file written
    if ctx is not None:
        assert table_names(ctx) == tables  # nothing registered, dropped or left behind
        assert batch_size(ctx) == setting
        assert rows(ctx.sql("SELECT * FROM dim").to_arrow_table()) == rows(DIM)


def test_queries_are_accepted(written):
    ns, data = written
    for query in ["WITH us AS (SELECT id FROM t WHERE country = 'US') SELECT count(*) AS n FROM us",
                  "SELECT country, count(*) AS n FROM t GROUP BY country ORDER BY country",
                  "(SELECT id FROM t WHERE amount > 90) UNION ALL (SELECT id FROM t WHERE amount < 1)"]:
        assert rows(ns.sql(query).to_arrow_table()) == oracle(data, query), query


JOIN = ("SELECT dim.region, count(*) AS n, round(sum(dbl(e.amount)), 4) AS s FROM events e JOIN dim "
        "ON e.country = dim.country WHERE e.event_date = DATE '2025-12-03' GROUP BY dim.region")


def test_a_query_sees_the_tables_and_udfs_of_the_callers_context(written):
    """Item 8: the query is planned in the caller's ``ctx``: a join with its table ``dim`` and a
    call of its UDF ``dbl`` answer as DataFusion does over the rows written, the partitions are
    still pruned by the query's predicate, and the context keeps no table of the call."""
    ns, data = written
    ctx = caller_ctx()
    got = ns.sql(JOIN, table="events", ctx=ctx)
    assert table_names(ctx) == {"dim"}
    expected = oracle(data, JOIN, table="events")
    assert expected and rows(got.to_arrow_table()) == expected
    assert rows(got.to_arrow_table()) == expected  # the DataFrame reads the namespace again, after the call

    probe = caller_ctx()
    probe.register_record_batches("events", [[pa.RecordBatch.from_pylist([], schema=ns.schema)]])
    predicate = scan_predicates(probe.sql(JOIN).optimized_logical_plan(), "events")[0]
    assert "event_date" in predicate
    assert len(ns.partitions(predicate)) < len(ns.partitions())


def test_the_callers_table_of_the_same_name_is_back_after_the_call(written):
    """The namespace is ``table`` while the call plans the query; a table the caller had under
    that name is back afterwards (the DataFrame returned still reads the namespace)."""
    ns, data = written
    ctx = caller_ctx()
    ctx.register_record_batches("t", [pa.table({"mine": [1, 2, 3]}).to_batches()])
    got = ns.sql("SELECT count(*) AS n FROM t WHERE country = 'FR'", ctx=ctx)
    assert table_names(ctx) == {"dim", "t"}
    assert ctx.sql("SELECT sum(mine) AS s FROM t").to_pydict() == {"s": [6]}
    assert rows(got.to_arrow_table()) == oracle(data, "SELECT count(*) AS n FROM t WHERE country = 'FR'")
    with pytest.raises(InvalidArgumentError, match="nope"):
        ns.sql("SELECT nope FROM t", ctx=ctx)
    assert table_names(ctx) == {"dim", "t"}
    assert ctx.sql("SELECT sum(mine) AS s FROM t").to_pydict() == {"s": [6]}


def test_without_a_context_lancepart_udfs_are_there(written):
    ns, data = written
    query = "SELECT count(*) AS n FROM t WHERE abs(murmur3(user_id)) % 4 = 1"
    expected = datafusion.SessionContext()
    from lancepart.model.datafusion_udfs import register_udfs

    register_udfs(expected)
    expected.register_record_batches("t", [data.to_batches()])
    assert rows(ns.sql(query).to_arrow_table()) == rows(expected.sql(query).to_arrow_table())


def _pairs(data: pa.Table, n: int) -> list[tuple]:
    return sorted({(r["country"], r["user_id"]) for r in data.select(["country", "user_id"]).slice(0, 50).to_pylist()}
                  )[:n]


def test_row_value_in_answers_as_datafusion(written):
    """Item 8: ``(country, user_id) IN (('US', 1))`` is a comparison of struct values, which
    pruning cannot use: nothing is pruned for it (the other terms of the WHERE still prune) and
    the answer is DataFusion's over every row."""
    ns, data = written
    pairs = _pairs(data, 3)
    tuples = ", ".join(f"('{c}', {u})" for c, u in pairs)
    one = f"('{pairs[0][0]}', {pairs[0][1]})"
    queries = [
        f"SELECT id, country, user_id FROM t WHERE (country, user_id) IN (({one[1:-1]}))",
        f"SELECT id FROM t WHERE (country, user_id) IN ({tuples})",
        f"SELECT count(*) AS n FROM t WHERE (country, user_id) IN ({tuples}) AND event_date >= DATE '2025-12-03'",
        f"SELECT count(*) AS n FROM t WHERE (country, user_id) NOT IN ({tuples})",
    ]
    for query in queries:
        expected = oracle(data, query)
        assert rows(ns.sql(query).to_arrow_table()) == expected, query
    assert oracle(data, queries[1])  # the pairs exist: not an empty answer compared with an empty one

    probe = datafusion.SessionContext()
    probe.register_record_batches("t", [[pa.RecordBatch.from_pylist([], schema=ns.schema)]])
    predicate = scan_predicates(probe.sql(queries[2]).optimized_logical_plan(), "t")[0]
    assert predicate is not None and "event_date" in predicate and "struct" not in predicate.lower(), predicate
    assert len(ns.partitions(predicate)) < len(ns.partitions())


def test_a_zoned_timestamp_literal_prunes_as_the_instant_it_names(tmp_path):
    """DataFusion's unparser renders a literal of a zoned timestamp column as ``CAST('...+05:30'
    AS TIMESTAMP)``, which DataFusion reads back as another instant: pruning with it dropped the
    partition holding the matching row. The predicate handed to pruning names the literal's own
    instant (or is not used), so the answer is DataFusion's over every row and pruning still
    happens."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("at", pa.timestamp("us", tz="+05:30"))])
    spec = {"id": 1, "fields": [{"field_id": "at_hour", "source_ids": [1], "transform": {"type": "hour"},
                                 "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    local = ["2025-01-02T10:00:00+05:30", "2025-01-02T12:00:00+05:30", "2025-01-02T14:00:00+05:30",
             "2025-01-03T12:00:00+05:30"]
    data = pa.table({"id": pa.array(range(4), pa.int64()),
                     "at": pc.cast(pc.strptime(local, "%Y-%m-%dT%H:%M:%S%z", "us"), schema.field("at").type)})
    ns.write(data)
    assert len(ns.partitions()) == 3
    for where in ["at = '2025-01-02T12:00:00+05:30'",
                  "at IN ('2025-01-02T06:30:00+00:00', '2025-01-02T08:30:00+00:00', '2025-01-03T06:30:00Z', "
                  "'2025-01-09T06:30:00Z')",
                  "at BETWEEN '2025-01-02T11:00:00+05:30' AND '2025-01-02T13:00:00+05:30'"]:
        query = f"SELECT id FROM t WHERE {where}"
        expected = oracle(data, query)
        assert expected, where
        assert rows(ns.sql(query).to_arrow_table()) == expected, where
        probe = datafusion.SessionContext()
        probe.register_record_batches("t", [[pa.RecordBatch.from_pylist([], schema=ns.schema)]])
        predicate = scan_predicates(probe.sql(query).optimized_logical_plan(), "t")[0]
        assert predicate is not None and "AS TIMESTAMP" not in predicate, predicate
        assert len(ns.partitions(predicate)) < len(ns.partitions()), predicate
