"""``ns.sql`` streams (issue 33 §2): the namespace table reaches DataFusion through its pyarrow
Dataset provider, which pushes the query's projection and the filters it can translate into
the scan; the kept partition tables are read one after another when the DataFrame is collected,
never before, and never held whole in DataFusion (the memory is measured by
benchmarks/sql_memory.py, not here).

What is checked, on real Lance tables and real DataFusion: which tables a collection opens
(counted, only the pruned ones, none before), that the filters DataFusion takes as applied by
the scan keep DataFusion's semantics (where pyarrow's differ: NaN sorts above every number in
DataFusion), what a DataFrame collected later sees (the snapshot of the call, twice the same,
its context gone; a cleanup of the versions it reads makes it fail), that tables of an older
schema are read in the current one, and that no scan panics on DataFusion's runtime threads.
Every answer is checked against DataFusion over the rows written."""

from __future__ import annotations

import gc
from datetime import timedelta

import datafusion
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.util.sample import demo_events
from tests.conftest import create_events_ns, written_events


def rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def oracle(data: pa.Table, query: str, **tables: pa.Table) -> list[tuple]:
    """``query`` answered by DataFusion over ``data`` as ``t`` (and ``tables`` by name)."""
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [data.to_batches()])
    for name, table in tables.items():
        ctx.register_record_batches(name, [table.to_batches()])
    return rows(ctx.sql(query).to_arrow_table())


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return written_events(tmp_path_factory, "sql_stream", 3_000, seed=7)


def test_nothing_is_read_before_collection_then_only_the_kept_tables(written, opened):
    """``ns.sql`` opens no partition table; collecting opens the tables pruning keeps, each
    once, and the scan DataFusion plans reads only the column the query needs, with the query's
    filter pushed into it. A query that prunes everything opens none and answers over no rows."""
    ns, data = written
    where = "event_date = DATE '2025-12-03' AND country = 'US'"
    query = f"SELECT round(sum(amount), 6) AS s, count(*) AS n FROM t WHERE {where}"
    df = ns.sql(query)
    assert opened == []
    kept = {p.object_id for p in ns.partitions(where)}
    assert 1 < len(kept) < len(ns.partitions())
    plan = df.execution_plan().display_indent()
    assert "DatasetExec" in plan and "projection=[amount]" in plan, plan
    got = rows(df.to_arrow_table())
    assert sorted(opened) == sorted(kept)
    assert got == oracle(data, query) and got[0][1] > 0

    opened.clear()
    empty = ns.sql("SELECT id, country FROM t WHERE event_date = DATE '1999-01-01'").to_arrow_table()
    assert opened == [] and empty.num_rows == 0 and empty.schema.names == ["id", "country"]


FLOATS = pa.table({"id": pa.array(range(6), pa.int64()), "k": pa.array([1, 1, 2, 2, 3, 3], pa.int64()),
                   "f": pa.array([float("nan"), 2.0, -0.0, 0.0, None, 0.5])})
FLOAT_SPEC = {"id": 1, "fields": [{"field_id": "k", "source_ids": [1], "transform": {"type": "identity"},
                                   "result_type": {"type": "int64"}}]}


@pytest.mark.parametrize("where", ["f > 1", "f >= 'NaN'", "f < 'NaN'", "f = 'NaN'", "f = 0", "f = -0.0",
                                   "f > 1 AND k < 3", "NOT (f <= 1)", "f IN (0.0, 2.0)"])
def test_filters_pushed_into_the_scan_mean_what_they_mean_in_datafusion(tmp_path, where):
    """DataFusion hands a pyarrow Dataset the terms of ``WHERE`` it can translate and takes them
    as applied; pyarrow compares NaN otherwise (``f > 1`` is TRUE for NaN in DataFusion, FALSE in
    pyarrow: DataFusion's own pyarrow provider answers the first 4 of these wrong). The scan
    applies the query's predicate with DataFusion instead, so the answer is DataFusion's over
    every row."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), FLOATS.schema, FLOAT_SPEC)
    ns.write(FLOATS)
    query = f"SELECT id FROM t WHERE {where}"
    assert rows(ns.sql(query).to_arrow_table()) == oracle(FLOATS, query)


def _sql_in_a_dropped_context(ns: PartitionedNamespace, query: str, dim: pa.Table) -> datafusion.DataFrame:
    """``ns.sql`` in a caller's context that is gone once this returns."""
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("dim", [dim.to_batches()])
    return ns.sql(query, ctx=ctx)


def test_the_dataframe_reads_the_snapshot_of_the_call_when_it_is_collected(tmp_path):
    """The DataFrame holds the snapshot of the call, not a name in a context: a commit published
    after the call is not in it, collected twice it answers twice the same, collected after
    another call on the same context it reads its own snapshot, and its context may be gone. It
    holds a snapshot, not a lock, and reads nothing before it is collected: once a cleanup has
    removed the versions it reads, collecting it fails, while a new call reads the new ones."""
    ns = create_events_ns(str(tmp_path / "ns"))
    first, later = demo_events(1_000, seed=1), demo_events(500, seed=2, start_id=10_000)
    dim = pa.table({"country": ["US", "FR"], "region": ["am", "eu"]})
    ns.write(first.slice(0, 500))
    ns.write(first.slice(500))
    count = "SELECT count(*) AS n, round(sum(amount), 4) AS s FROM t"
    joined = "SELECT dim.region, count(*) AS n FROM t JOIN dim ON t.country = dim.country GROUP BY dim.region"
    ctx = datafusion.SessionContext()
    df = ns.sql(count, ctx=ctx)
    gone = _sql_in_a_dropped_context(ns, joined, dim)
    gc.collect()

    ns.write(later)  # published after the call
    fr = "SELECT count(*) AS n FROM t WHERE country = 'FR'"
    other = ns.sql(fr, ctx=ctx)  # another call on ctx
    assert rows(df.to_arrow_table()) == oracle(first, count)
    assert rows(df.to_arrow_table()) == oracle(first, count)  # collected twice
    assert rows(other.to_arrow_table()) == oracle(pa.concat_tables([first, later]), fr)
    assert rows(gone.to_arrow_table()) == oracle(first, joined, dim=dim)  # its context is gone

    ns.compact()  # every table rewritten: the versions df reads are superseded...
    ns.cleanup(timedelta(0), allow_short_retention=True)  # ...and removed with their files
    with pytest.raises(Exception, match="cannot be opened"):  # lancepart's error, inside DataFusion's
        df.to_arrow_table()
    assert rows(ns.sql(count).to_arrow_table()) == oracle(pa.concat_tables([first, later]), count)


def test_tables_of_an_older_schema_are_read_in_the_current_one(tmp_path):
    """Tables written before a rename, a widening, an added and a dropped column are read, by
    field id, in the current schema (as ns.to_table reads them): the renamed column under its
    new name, the widened one cast, the added one NULL, the dropped one gone; the query's filter
    on the renamed column finds the old tables' rows."""
    ns = create_events_ns(str(tmp_path / "ns"))
    old = demo_events(600, seed=3, days=2)
    ns.write(old)
    ns.update_schema(rename={"user_id": "uid"}, widen={"country": pa.large_utf8()}, drop=["event_ts"],
                     add=[pa.field("score", pa.float64())])
    assert ns.schema.names == ["id", "event_date", "country", "uid", "amount", "score"]
    new = demo_events(400, seed=4, start_id=5_000, days=2)
    later_days = pa.array([d + timedelta(days=30) for d in new["event_date"].to_pylist()], pa.date32())
    new = pa.table({"id": new["id"], "event_date": later_days, "country": new["country"].cast(pa.large_utf8()),
                    "uid": new["user_id"], "amount": new["amount"], "score": pa.array([float(i) for i in range(400)])})
    ns.write(new)  # new days: new tables beside the old ones
    everything = ns.to_table()
    assert everything.num_rows == 1_000

    got = ns.sql("SELECT * FROM t").to_arrow_table()
    assert [(f.name, f.type) for f in got.schema] == [(f.name, f.type) for f in ns.schema]
    assert rows(got) == rows(everything)
    some = old.column("user_id")[0].as_py()
    for query in [f"SELECT id, uid, score, country FROM t WHERE uid = {some}",
                  "SELECT country, count(*) AS n, count(score) AS scored FROM t WHERE country IN ('US', 'FR') "
                  "GROUP BY country",
                  "SELECT count(*) AS n FROM t WHERE score IS NULL"]:
        assert rows(ns.sql(query).to_arrow_table()) == oracle(everything, query), query
    assert oracle(everything, f"SELECT id FROM t WHERE uid = {some}")


def test_a_self_join_scans_each_side_with_its_own_filter(written, opened):
    """Two scans of the namespace table, each with its own filter: the tables of both sides are
    opened (the OR of their predicates prunes), each scan keeps its own rows, and the answer is
    DataFusion's."""
    ns, data = written
    query = ("SELECT a.country, count(*) AS n FROM t a JOIN t b ON a.country = b.country "
             "WHERE a.event_date = DATE '2025-12-02' AND b.event_date = DATE '2025-12-04' GROUP BY a.country")
    got = rows(ns.sql(query).to_arrow_table())
    assert got == oracle(data, query) and got
    either = "event_date = DATE '2025-12-02' OR event_date = DATE '2025-12-04'"
    assert set(opened) == {p.object_id for p in ns.partitions(either)}
    assert len(set(opened)) < len(ns.partitions())


def test_no_scan_panics_on_datafusions_runtime_threads(written, capfd):
    """DataFusion runs the provider's scans on the threads driving its runtime; a call that
    prunes with a pyarrow Expression there panics ("Cannot start a runtime from within a
    runtime"), which DataFusion survives with an answer, the pruning lost. A scan prunes by the
    plan made before the query runs instead: a query over one kept table, a LIMIT that stops the
    stream early and a query of many partitions answer, many times over, and no panic is printed
    (Rust prints it to the process's stderr)."""
    ns, data = written
    first = data.slice(0, 1).to_pylist()[0]
    single = f"event_date = DATE '{first['event_date']}' AND user_id = {first['user_id']}"
    assert len(ns.partitions(single)) == 1
    queries = [f"SELECT count(*) AS n FROM t WHERE {single}", "SELECT id FROM t ORDER BY id LIMIT 3",
               "SELECT country, count(*) AS n FROM t WHERE country > 'D' GROUP BY country"]
    for _ in range(3):
        for query in queries:
            assert rows(ns.sql(query).to_arrow_table()) == oracle(data, query), query
    err = capfd.readouterr().err
    assert "Cannot start a runtime" not in err and "panicked" not in err, err[-2000:]
