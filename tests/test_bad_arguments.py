"""Arguments of the wrong type (issue 30 item 5): every public reading method of
PartitionedNamespace refuses them with InvalidArgumentError naming the argument and the type it
got, before anything is read, never with a raw TypeError / AttributeError from deeper down
(``ns.changes(None)``, ``to_table(filter=5)``, ``columns=[None]``, ``sql(q, ctx="x")``,
``to_duckdb(..., connection="x")``). Walks each method with wrong-typed values for each of its
arguments, on a real namespace (Lance tables, DataFusion, DuckDB)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError

DIM = 4
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("country", pa.utf8()),
                    ("v", pa.list_(pa.float32(), DIM)), ("body", pa.utf8())])
SPEC = {"id": 1, "fields": [{"field_id": "country", "source_ids": [1], "transform": {"type": "identity"},
                              "result_type": {"type": "utf8"}}]}


@pytest.fixture(scope="module")
def ns(tmp_path_factory) -> PartitionedNamespace:
    root = str(tmp_path_factory.mktemp("bad_arguments") / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    n = 40
    vec = np.random.default_rng(3).standard_normal((n, DIM)).astype(np.float32)
    ns.write(pa.table({
        "id": pa.array(range(n), pa.int64()),
        "country": pa.array(["US", "FR"] * (n // 2)),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), DIM),
        "body": pa.array(["lance river", "apple kiwi"] * (n // 2)),
    }))
    ns.create_index("body", "INVERTED", min_rows=1)
    return ns


class Opaque:
    """An object of a type no argument accepts."""


# wrong-typed values by what the argument is
FILTER = [5, 1.5, True, b"id = 1", ["id = 1"], {"id": 1}, Opaque()]
COLUMNS = [5, True, "id", b"id", [None], [1], ["id", 2], {"id": 1}, Opaque()]
TEXT = [None, 5, 1.5, True, b"x", ["x"], Opaque()]
COUNT = [None, "3", 1.5, True, [3], Opaque()]
VERSION = [None, "1", 1.5, True, [1], Opaque()]
OBJECT = ["x", 5, ["x"], Opaque()]
OPTIONAL_COUNT = ["3", 1.5, True, [3], Opaque()]

Q = np.zeros(DIM, dtype=np.float32)

# method -> (call, good arguments, {argument: wrong values})
METHODS = {
    "to_table": (lambda ns, **kw: ns.to_table(**kw), {"filter": "id > 1", "columns": ["id"]},
                 {"filter": FILTER, "columns": COLUMNS}),
    "to_batches": (lambda ns, **kw: ns.to_batches(**kw).read_all(),
                   {"filter": "id > 1", "columns": ["id"], "batch_size": 8},
                   {"filter": FILTER, "columns": COLUMNS, "batch_size": OPTIONAL_COUNT}),
    "to_pandas": (lambda ns, **kw: ns.to_pandas(**kw), {"filter": "id > 1", "columns": ["id"]},
                  {"filter": FILTER, "columns": COLUMNS}),
    "to_polars": (lambda ns, **kw: ns.to_polars(**kw), {"filter": "id > 1", "columns": ["id"]},
                  {"filter": FILTER, "columns": COLUMNS}),
    "to_duckdb": (lambda ns, **kw: ns.to_duckdb(**kw),
                  {"table_name": "bad_arguments", "filter": "id > 1", "columns": ["id"], "connection": None},
                  {"table_name": TEXT, "filter": FILTER, "columns": COLUMNS, "connection": OBJECT}),
    "to_pyarrow_dataset": (lambda ns, **kw: ns.to_pyarrow_dataset(**kw).to_table(),
                           {"filter": "id > 1", "columns": ["id"]}, {"filter": FILTER, "columns": COLUMNS}),
    "scan_polars": (lambda ns, **kw: ns.scan_polars(**kw).collect(), {"filter": "id > 1", "columns": ["id"]},
                    {"filter": FILTER, "columns": COLUMNS}),
    "sql": (lambda ns, **kw: ns.sql(**kw).to_arrow_table(),
            {"query": "SELECT count(*) FROM t", "table": "t", "ctx": None},
            {"query": TEXT, "table": TEXT, "ctx": OBJECT}),
    "changes": (lambda ns, **kw: ns.changes(**kw).read_all(),
                {"start_version": 0, "end_version": None, "filter": "id > 1", "columns": ["id"]},
                {"start_version": VERSION, "end_version": VERSION[1:], "filter": FILTER, "columns": COLUMNS}),
    "partitions": (lambda ns, **kw: ns.partitions(**kw), {"filter": "country = 'US'"}, {"filter": FILTER}),
    "explain": (lambda ns, **kw: ns.explain(**kw), {"filter": "country = 'US'"}, {"filter": FILTER}),
    "search": (lambda ns, **kw: ns.search(**kw),
               {"column": "v", "query": Q, "k": 3, "filter": "id > 1", "columns": ["id"], "metric": "l2",
                "nprobes": 2, "refine_factor": 1, "ef": 10, "use_index": True},
               {"column": TEXT, "query": [None, "x", 5, True, b"x", {"a": 1}, Opaque()], "k": COUNT,
                "filter": FILTER, "columns": COLUMNS, "metric": [5, True, b"l2", ["l2"], Opaque()],
                "nprobes": OPTIONAL_COUNT, "refine_factor": OPTIONAL_COUNT, "ef": OPTIONAL_COUNT,
                "use_index": [1, "yes", None, Opaque()]}),
    "search_text": (lambda ns, **kw: ns.search_text(**kw),
                    {"column": "body", "query": "kiwi", "k": 3, "filter": "id > 1", "columns": ["id"]},
                    {"column": TEXT, "query": TEXT, "k": COUNT, "filter": FILTER, "columns": COLUMNS}),
}


def test_every_public_read_method_is_walked():
    """The walk covers every public reading method of PartitionedNamespace."""
    assert set(METHODS) == {"to_table", "to_batches", "to_pandas", "to_polars", "to_duckdb", "to_pyarrow_dataset",
                            "scan_polars", "sql", "changes", "partitions", "explain", "search", "search_text"}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_wrong_types_are_invalid_argument_errors_naming_the_argument(ns, method):
    """Item 5: with its good arguments the method answers; with each argument replaced by a value
    of a wrong type it raises InvalidArgumentError whose message names the argument and the
    value's type."""
    call, good, wrong = METHODS[method]
    call(ns, **good)
    problems = []
    for name, values in wrong.items():
        for value in values:
            try:
                call(ns, **{**good, name: value})
            except InvalidArgumentError as e:
                kind = type(value).__name__ if not isinstance(value, list) or not value or \
                    all(isinstance(v, str) for v in value) else None
                if name not in str(e) or (kind is not None and kind not in str(e)):
                    problems.append(f"{name}={value!r}: the message does not name {name!r} and {kind!r}: {e}")
            except Exception as e:
                problems.append(f"{name}={value!r}: {type(e).__module__}.{type(e).__name__}: {e}")
            else:
                problems.append(f"{name}={value!r}: accepted")
    assert not problems, "\n".join(problems)


def test_a_column_list_names_the_element_of_the_wrong_type(ns):
    with pytest.raises(InvalidArgumentError, match=r"columns .*got NoneType None"):
        ns.to_table(columns=["id", None])
    with pytest.raises(InvalidArgumentError, match=r"columns .*got int 1"):
        ns.changes(0, columns=[1])


def test_changes_needs_a_start_version(ns):
    with pytest.raises(InvalidArgumentError, match=r"start_version must be an integer >= 0, got NoneType None"):
        ns.changes(None)


def test_duckdb_needs_a_column(ns):
    """``columns=[]`` keeps the row count elsewhere (tests/test_edges.py); a DuckDB table cannot
    have no column: InvalidArgumentError saying so, not DuckDB's own exception."""
    import duckdb

    con = duckdb.connect()
    with pytest.raises(InvalidArgumentError, match="at least one column"):
        ns.to_duckdb("nothing", columns=[], connection=con)
    assert ns.to_table(columns=[]).num_rows == 40
    ns.to_duckdb("ids", columns=["id"], connection=con)
    assert con.sql("SELECT count(*) FROM ids").fetchall() == [(40,)]


def test_search_counts_are_checked_together(ns):
    with pytest.raises(InvalidArgumentError, match="minimum_nprobes=5 is above maximum_nprobes=2"):
        ns.search("v", Q, minimum_nprobes=5, maximum_nprobes=2)
    with pytest.raises(InvalidArgumentError, match="nprobes must be an integer >= 1"):
        ns.search("v", Q, nprobes=0)
