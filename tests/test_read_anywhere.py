"""Reading the published snapshot anywhere: a bounded-memory Arrow stream, pandas, Polars, DuckDB and
DataFusion SQL, each checked against an oracle DataFusion computes over the rows written (spec
"Transaction / Read Behavior", "Partition Pruning")."""

from __future__ import annotations

import os
import sys

import datafusion
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import DataFilesMissingError, InvalidArgumentError, MissingDependencyError
from lancepart.util.sample import demo_events
from tests.conftest import create_events_ns, written_events

FILTERS = [
    None,
    "event_date = DATE '2025-12-03'",
    "event_date = DATE '2025-12-03' AND user_id = 12345",
    "event_date >= DATE '2025-12-02' AND country = 'FR'",
    "user_id IN (1, 2, 3, 777777) OR country = 'JP'",
    "amount > 50 AND country LIKE 'D%'",
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return written_events(tmp_path_factory, "anywhere", 12_000, seed=5, commits=3)


def oracle(data: pa.Table, flt: str | None, columns: list[str]) -> list[tuple]:
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [data.to_batches()])
    where = f" WHERE {flt}" if flt else ""
    got = ctx.sql(f"SELECT {', '.join(columns)} FROM t{where}").to_arrow_table()
    return sorted(tuple(r.values()) for r in got.to_pylist())


def rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("flt", FILTERS)
def test_to_batches_streams_what_the_oracle_selects(written, flt):
    ns, data = written
    reader = ns.to_batches(flt, columns=["id", "amount"], batch_size=500)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema.names == ["id", "amount"]
    batches = list(reader)
    assert all(b.num_rows <= 500 for b in batches)
    got = pa.Table.from_batches(batches, schema=reader.schema)
    assert rows(got) == oracle(data, flt, ["id", "amount"])
    assert rows(ns.to_table(flt, columns=["id", "amount"])) == rows(got)


def test_to_batches_reads_the_snapshot_of_the_call(written, tmp_path):
    """A write published after the reader was made is not in it (the reader pinned the versions)."""
    import shutil

    ns0, data = written
    root = str(tmp_path / "copy")
    shutil.copytree(ns0.root, root)
    ns = PartitionedNamespace.open(root)
    reader = ns.to_batches("event_date = DATE '2025-12-03'", columns=["id"])
    PartitionedNamespace.open(root).write(demo_events(2_000, seed=99, start_id=10_000_000))
    got = reader.read_all()
    assert rows(got) == oracle(data, "event_date = DATE '2025-12-03'", ["id"])


def test_to_batches_refuses_bad_arguments_when_called(written):
    ns, _ = written
    with pytest.raises(InvalidArgumentError, match="nope"):
        ns.to_batches(columns=["id", "nope"])
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        ns.to_batches(batch_size=0)


def test_to_batches_raises_a_typed_error_naming_the_table_when_a_file_is_gone(tmp_path):
    ns = create_events_ns(str(tmp_path / "ns"))
    ns.write(demo_events(3_000, seed=1))
    part = ns.partitions()[0]
    data_dir = os.path.join(ns.root, part.location, "data")
    for f in os.listdir(data_dir):
        os.remove(os.path.join(data_dir, f))
    reader = ns.to_batches()
    with pytest.raises(DataFilesMissingError) as e:  # typed while the stream is read, not only at the call
        reader.read_all()
    assert part.object_id in str(e.value)


def _pool_threads() -> set:
    """The live worker threads of thread pools (what a stream's read-ahead runs on)."""
    import threading

    return {t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor")}


def _until_gone(threads: set) -> set:
    import time

    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {t for t in threads if t.is_alive()}


def test_a_stream_closed_early_stops_reading(written):
    """Dropping a stream after one batch stops its read-ahead threads (they were blocked on full
    queues of the tables after the first). pyarrow's ``close()`` keeps the iterator it was made
    from: the threads stop when the reader is released."""
    ns, _ = written
    before = _pool_threads()
    reader = ns.to_batches(batch_size=100)
    first = reader.read_next_batch()
    assert first.num_rows <= 100
    started = _pool_threads() - before
    assert started  # tables being read ahead
    reader.close()
    del reader
    assert not _until_gone(started)


def test_renamed_column_streams_under_its_new_name(tmp_path):
    ns = create_events_ns(str(tmp_path / "ns"))
    data = demo_events(2_000, seed=3)
    ns.write(data)
    ns.update_schema(rename={"amount": "amount_usd"})
    ns = PartitionedNamespace.open(ns.root)
    got = ns.to_batches("amount_usd > 10", columns=["id", "amount_usd"]).read_all()
    expected = oracle(data.rename_columns(["amount_usd" if n == "amount" else n for n in data.column_names]),
                      "amount_usd > 10", ["id", "amount_usd"])
    assert rows(got) == expected


@pytest.mark.parametrize("flt", FILTERS[:3])
def test_to_pandas_and_to_polars(written, flt):
    ns, data = written
    expected = oracle(data, flt, ["id", "country"])
    pdf = ns.to_pandas(flt, columns=["id", "country"])
    assert sorted(zip(pdf["id"].tolist(), pdf["country"].tolist(), strict=True)) == expected
    pl = pytest.importorskip("polars")
    df = ns.to_polars(flt, columns=["id", "country"])
    assert isinstance(df, pl.DataFrame)
    assert sorted(df.iter_rows()) == expected


def test_missing_extra_is_a_typed_error_naming_it(written, monkeypatch):
    ns, _ = written
    monkeypatch.setitem(sys.modules, "polars", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(MissingDependencyError, match=r"lancepart\[polars\]"):
        ns.to_polars()
    with pytest.raises(MissingDependencyError, match=r"lancepart\[duckdb\]"):
        ns.to_duckdb("events")


@pytest.mark.parametrize("flt", FILTERS[:4])
def test_to_duckdb_runs_sql_over_the_stream_more_than_once(written, flt):
    duckdb = pytest.importorskip("duckdb")
    ns, data = written
    con = duckdb.connect()
    assert ns.to_duckdb("events", flt, columns=["id", "country", "amount"], connection=con) is con
    expected = oracle(data, flt, ["id", "country", "amount"])
    got = con.sql("SELECT id, country, amount FROM events").fetchall()
    assert sorted(got) == expected
    # a second scan of the registered name: a new stream of the same snapshot
    n = con.sql("SELECT count(*) FROM events").fetchall()[0][0]
    assert n == len(expected)
    # the default connection (duckdb.sql)
    ns.to_duckdb("events_default", flt, columns=["id"])
    assert duckdb.sql("SELECT count(*) FROM events_default").fetchall()[0][0] == len(expected)


SQL = [
    ("SELECT country, count(*) AS n, round(sum(amount), 2) AS s FROM events WHERE event_date = DATE '2025-12-03' "
     "GROUP BY country", "event_date"),
    ("SELECT id FROM events WHERE user_id = 12345 AND event_date = DATE '2025-12-03'", "user_id"),
    ("SELECT count(*) AS n FROM events WHERE country = 'events.FR' OR country = 'FR'", "country"),
    ("SELECT count(*) AS n FROM events", None),
    ("SELECT a.id FROM events a JOIN events b ON a.id = b.id WHERE a.event_date = DATE '2025-12-02' "
     "AND b.country = 'FR'", None),
]


@pytest.mark.parametrize(("query", "pruned_on"), SQL)
def test_datafusion_sql_prunes_through_manifest_and_equals_the_oracle(written, query, pruned_on):
    from lancepart.read.sql import scan_predicates

    ns, data = written
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("events", [data.to_batches()])
    expected = rows(ctx.sql(query).to_arrow_table())
    assert rows(ns.sql(query, table="events").to_arrow_table()) == expected

    probe = datafusion.SessionContext()
    probe.register_record_batches("events", [[pa.RecordBatch.from_pylist([], schema=ns.schema)]])
    predicate = scan_predicates(probe.sql(query).optimized_logical_plan(), "events")[0]
    if "JOIN" in query:  # a table scanned twice: the OR of both scans' predicates
        assert "event_date" in predicate and "country" in predicate and " OR " in predicate, predicate
    elif pruned_on is None:
        assert predicate is None
    else:
        assert pruned_on in predicate and "events." not in predicate.replace("'events.FR'", "")
        if pruned_on == "event_date":
            assert len(ns.partitions(predicate)) < len(ns.partitions())


def test_sql_refuses_a_query_it_cannot_plan(written):
    ns, _ = written
    with pytest.raises(InvalidArgumentError, match="nope"):
        ns.sql("SELECT nope FROM events", table="events")


def test_stream_in_order_producers_end_when_the_consumer_leaves():
    """A producer whose table is done but whose queue is full (its end marker waits for room)
    ends too when the consumer leaves early: no thread is left blocked."""
    import time

    from lancepart.util.parallel import stream_in_order

    before = _pool_threads()
    stream = stream_in_order(lambda x: [x], list(range(8)), window=4, buffered=1)
    assert next(stream) == 0
    time.sleep(0.2)  # the other producers put their one item and wait to put their end marker
    started = _pool_threads() - before
    assert started
    stream.close()
    assert not _until_gone(started)
