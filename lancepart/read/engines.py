"""The published snapshot in other engines: a streaming Arrow reader, pandas, Polars, DuckDB and
DataFusion SQL (docs/reading.md).

Every path reads through the same pruned, pinned, exactly filtered stream
(:func:`lancepart.read.snapshot.scan_stream`): what a filter means is what DataFusion says, whichever
engine consumes the rows.

* DuckDB gets an object it may scan any number of times (each scan starts a new stream of the
  same snapshot, registered when ``to_duckdb`` was called), not a one-shot reader.
* :func:`sql` runs a DataFusion query over the namespace. Before anything is read, the query is
  planned over an empty table of the namespace schema and the predicate DataFusion's optimizer
  placed directly above the table's scan is handed to ``__manifest`` pruning; DataFusion then
  runs the whole query on the rows of the kept partitions. Pruning with that predicate can only
  drop partitions the query would filter out, so when the predicate cannot be taken out (or
  pruning refuses it) everything is read and the answer is the same.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from lancepart.arguments import check_instance, check_text, invalid
from lancepart.error_mapping import operation_error
from lancepart.errors import InvalidArgumentError, MissingDependencyError


def require(module: str, extra: str) -> Any:
    """``import module``, or :class:`MissingDependencyError` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"{module} is not installed; install it with `pip install 'lancepart[{extra}]'` "
            f"(or `pip install {module}`)") from e


def typed_reader(reader: pa.RecordBatchReader, operation: str, root: str) -> pa.RecordBatchReader:
    """``reader`` whose errors (raised while it is read, after the call that made it returned)
    are the typed errors the operation would have raised."""

    def batches() -> Iterator[pa.RecordBatch]:
        it = iter(reader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except Exception as e:
                typed = operation_error(e, operation, root, publishes=False)
                if typed is None:
                    raise
                raise typed from e
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


class Rescannable:
    """An Arrow stream source (``__arrow_c_stream__``) that starts a new stream of the same rows
    each time it is asked: DuckDB asks once per scan of a registered object."""

    def __init__(self, make: Callable[[], pa.RecordBatchReader], schema: pa.Schema) -> None:
        self._make = make
        self.schema = schema

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._make().__arrow_c_stream__(requested_schema)

    def __arrow_c_schema__(self) -> Any:
        return self.schema.__arrow_c_schema__()


def check_duckdb_target(table_name: Any, connection: Any) -> None:
    """:class:`InvalidArgumentError` unless ``table_name`` is a non-empty string and ``connection``
    a DuckDB connection or None (:class:`MissingDependencyError` without DuckDB)."""
    duckdb = require("duckdb", "duckdb")
    check_text("table_name", table_name)
    check_instance("connection", connection, duckdb.DuckDBPyConnection, "a duckdb.DuckDBPyConnection")


def to_duckdb(make: Callable[[], pa.RecordBatchReader], schema: pa.Schema, table_name: str,
              connection: Any = None) -> Any:
    """Register the stream source in DuckDB as ``table_name`` (on ``connection``, or DuckDB's
    default connection, which ``duckdb.sql`` uses); returns the connection."""
    duckdb = require("duckdb", "duckdb")
    check_duckdb_target(table_name, connection)
    con = connection if connection is not None else duckdb.default_connection()
    con.register(table_name, Rescannable(make, schema))
    return con


def to_polars(table: pa.Table) -> Any:
    pl = require("polars", "polars")
    return pl.from_arrow(table)


# ------------------------------------------------------------------------------ DataFusion SQL
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _unqualified(sql: str, table: str) -> str:
    """``sql`` without the ``table.`` qualifiers the unparser puts on columns, outside string
    literals only."""
    parts = re.split(r"('(?:[^']|'')*')", sql)
    name = re.escape(table)
    qual = re.compile(r'(?<![\w."])(?:"' + name + '"|' + name + r")\.")
    return "".join(p if i % 2 else qual.sub("", p) for i, p in enumerate(parts))


def scan_predicate(plan: Any, table: str) -> str | None:
    """The predicate DataFusion's optimized ``plan`` applies directly above every scan of
    ``table``, as SQL over its unqualified columns (the OR of them when the table is scanned more
    than once), or None when some scan of it has none (or it cannot be rendered)."""
    from datafusion.unparser import Dialect, Unparser

    found: list[str | None] = []

    def walk(node: Any, parent: Any) -> None:
        variant = node.to_variant()
        if type(variant).__name__ == "TableScan" and variant.table_name() == table:
            if parent is None or type(parent.to_variant()).__name__ != "Filter":
                found.append(None)
                return
            text = Unparser(Dialect.default()).plan_to_sql(parent)
            cut = text.find(" WHERE ")
            found.append(_unqualified(text[cut + len(" WHERE "):], table) if cut >= 0 else None)
            return
        for child in node.inputs():
            walk(child, node)

    walk(plan, None)
    if not found or any(p is None for p in found):
        return None
    return found[0] if len(found) == 1 else " OR ".join(f"({p})" for p in found)


def sql(ns: Any, query: str, table: str, ctx: Any = None) -> Any:
    """``query`` run by DataFusion with the namespace as ``table`` (a ``datafusion.DataFrame``),
    the partitions read pruned by the predicate the query applies to ``table``."""
    import datafusion

    from lancepart.datafusion_udfs import register_udfs

    if not isinstance(table, str) or not _IDENT.match(table):
        raise invalid("table", table, "a plain SQL identifier (a str)")
    check_text("query", query, "SQL text (a non-empty str)")
    check_instance("ctx", ctx, datafusion.SessionContext, "a datafusion.SessionContext")
    schema = ns.schema
    probe = datafusion.SessionContext()
    register_udfs(probe)
    probe.register_record_batches(table, [[pa.RecordBatch.from_pylist([], schema=schema)]])
    try:
        plan = probe.sql(query).optimized_logical_plan()
    except Exception as e:  # DataFusion raises plain Exception
        raise InvalidArgumentError(f"query cannot be planned over {table} (DataFusion: {e})") from None
    predicate = scan_predicate(plan, table)
    filter = None
    if predicate is not None:
        with contextlib.suppress(Exception):  # not prunable: read every partition
            ns.scan_plan(predicate)
            filter = predicate
    data = ns.to_batches(filter)
    if ctx is None:
        ctx = datafusion.SessionContext()
        register_udfs(ctx)
    with contextlib.suppress(Exception):
        ctx.deregister_table(table)
    ctx.register_table(table, ctx.from_arrow(data))
    return ctx.sql(query)
