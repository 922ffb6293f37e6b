"""The published snapshot in other engines: a streaming Arrow reader, pandas, Polars, DuckDB and
DataFusion SQL (docs/reading.md).

Every path reads through the same pruned, pinned, exactly filtered stream
(:func:`lancepart.read.snapshot.scan_stream`): what a filter means is what DataFusion says, whichever
engine consumes the rows.

* DuckDB and Polars (``scan_polars``) get a pyarrow Dataset of the snapshot taken at the call
  (:mod:`lancepart.read.pyarrow_dataset`): each scan starts a new stream of it, pruned by the
  filter the engine pushes down as far as that translates to SQL, and filtered by pyarrow.
* :func:`sql` runs a read-only DataFusion query over the namespace (DDL, DML and statements are
  refused when it is planned, before anything runs). Before anything is read, the query is
  planned in the caller's context (its tables, UDFs and settings) with the namespace registered
  as an empty table of its schema, and the predicate DataFusion's optimizer placed directly
  above the table's scan is handed to ``__manifest`` pruning; DataFusion then runs the whole
  query on the rows of the kept partitions. Pruning with that predicate can only drop
  partitions the query would filter out, so when the predicate cannot be taken out (or pruning
  refuses it) everything is read and the answer is the same. The context is left with the
  tables it had.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from lancepart.arguments import check_instance, check_text, invalid
from lancepart.errors import InvalidArgumentError, MissingDependencyError
from lancepart.storage.error_mapping import operation_error


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


def check_duckdb_target(table_name: Any, connection: Any) -> None:
    """:class:`InvalidArgumentError` unless ``table_name`` is a non-empty string and ``connection``
    a DuckDB connection or None (:class:`MissingDependencyError` without DuckDB)."""
    duckdb = require("duckdb", "duckdb")
    check_text("table_name", table_name)
    check_instance("connection", connection, duckdb.DuckDBPyConnection, "a duckdb.DuckDBPyConnection")


def to_duckdb(dataset: Any, table_name: str, connection: Any = None) -> Any:
    """Register ``dataset`` (a :class:`lancepart.read.pyarrow_dataset.NamespaceDataset`) in DuckDB
    as ``table_name`` (on ``connection``, or DuckDB's default connection, which ``duckdb.sql``
    uses); returns the connection. DuckDB scans it through ``dataset.scanner(columns=...,
    filter=...)`` with each query's projection and the part of its ``WHERE`` it pushes down."""
    duckdb = require("duckdb", "duckdb")
    check_duckdb_target(table_name, connection)
    con = connection if connection is not None else duckdb.default_connection()
    con.register(table_name, dataset)
    return con


_OFFSET_TZ = re.compile(r"^[+-]\d{2}:?\d{2}$")


def polars_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` in types Polars takes. Polars panics on ``decimal256`` and refuses a fixed-offset
    time zone (``'+05:30'``): a ``decimal256`` of at most 38 digits becomes the same
    ``decimal128`` and a fixed-offset timestamp the same instant in UTC (docs/reading.md); a wider
    decimal is :class:`InvalidArgumentError` naming the column."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_decimal256(t):
            if t.precision > 38:
                raise InvalidArgumentError(
                    f"column {f.name!r} is {t}: Polars holds decimals of at most 38 digits; leave it out "
                    f"(columns=[...]) or read it with to_table / to_pandas")
            t = pa.decimal128(t.precision, t.scale)
        elif pa.types.is_timestamp(t) and t.tz is not None and _OFFSET_TZ.match(t.tz):
            t = pa.timestamp(t.unit, tz="UTC")
        fields.append(f.with_type(t))
    return pa.schema(fields, metadata=schema.metadata)


def polars_ready(table: pa.Table) -> pa.Table:
    """``table`` in the types of :func:`polars_schema`."""
    schema = polars_schema(table.schema)
    return table if schema.equals(table.schema) else table.cast(schema)


def to_polars(table: pa.Table) -> Any:
    pl = require("polars", "polars")
    return pl.from_arrow(polars_ready(table))


# ------------------------------------------------------------------------------ DataFusion SQL
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _unqualified(sql: str, table: str) -> str:
    """``sql`` without the ``table.`` qualifiers the unparser puts on columns, outside string
    literals only."""
    parts = re.split(r"('(?:[^']|'')*')", sql)
    name = re.escape(table)
    qual = re.compile(r'(?<![\w."])(?:"' + name + '"|' + name + r")\.")
    return "".join(p if i % 2 else qual.sub("", p) for i, p in enumerate(parts))


def _where(plan: Any) -> str | None:
    """The ``WHERE`` condition of ``plan`` (a filter over a table scan) as DataFusion's unparser
    renders it, or None without one; raises what the unparser raises."""
    from datafusion.unparser import Dialect, Unparser

    text = Unparser(Dialect.default()).plan_to_sql(plan)
    cut = text.find(" WHERE ")
    return text[cut + len(" WHERE "):] if cut >= 0 else None


def _conjuncts(expr: Any) -> list[Any]:
    """The terms of the ``AND`` chain ``expr`` (``[expr]`` when it is not one)."""
    variant = expr.to_variant()
    if type(variant).__name__ == "BinaryExpr" and str(variant.op()).upper() == "AND":
        return _conjuncts(variant.left()) + _conjuncts(variant.right())
    return [expr]


# The unparser renders a timestamp literal of a zoned column (TimestampMicrosecond(v, "+05:30"))
# as CAST('2025-01-02T13:30:00+05:30' AS TIMESTAMP): DataFusion reads that back as the naive
# wall time of that instant in UTC, then as a time of the column's zone, another instant. The
# bare string is coerced to the column's type as the instant it names.
_ZONED_CAST = re.compile(r"CAST\('(\d{4}-\d{2}-\d{2}T[0-9:.]+[+-]\d{2}:\d{2})' AS TIMESTAMP\)")


def _rendered(scan: Any, expr: Any, where: str | None) -> str | None:
    """``where`` (the unparser's SQL of ``expr``, a predicate over ``scan``) with zoned timestamp
    literals as plain strings (:data:`_ZONED_CAST`), if it plans back over ``scan`` into what
    ``expr`` plans into; else None: SQL that means something else must not prune."""
    from lancepart.read.snapshot import _filter_context

    if where is None:
        return None
    where = _ZONED_CAST.sub(r"'\1'", where)
    base = _filter_context().create_dataframe_from_logical_plan(scan)  # plans only: nothing registered
    try:
        back = base.filter(where).optimized_logical_plan().display_indent()
        return where if back == base.filter(expr).optimized_logical_plan().display_indent() else None
    except Exception:  # DataFusion raises plain Exception (a function only the caller's context has)
        return None


def _filter_sql(node: Any) -> str | None:
    """The predicate of the ``Filter`` plan ``node`` as SQL, or None when none of it can be
    rendered. A predicate the unparser cannot render whole, or whose rendering means something
    else (:func:`_rendered`), keeps the terms of its ``AND`` chain that render to what they mean
    (a row value such as ``(country, id) IN (('US', 1))`` is a comparison of struct literals,
    which the unparser does not support): the whole predicate implies them, so pruning with them
    still drops only partitions the query filters out."""
    from datafusion.expr import Expr

    from lancepart.read.snapshot import _filter_context

    scan = node.inputs()[0]
    predicate = node.to_variant().predicate()
    try:
        where = _rendered(scan, Expr(predicate), _where(node))
        if where is not None:
            return where
    except Exception:  # DataFusion raises plain Exception
        pass
    make = _filter_context()  # builds plans only: nothing is registered in it
    terms = []
    for term in _conjuncts(predicate):
        try:
            where = _where(make.create_dataframe_from_logical_plan(scan).filter(Expr(term)).logical_plan())
        except Exception:  # this term cannot be rendered: left to DataFusion alone
            continue
        where = _rendered(scan, Expr(term), where)
        if where:
            terms.append(f"({where})")
    return " AND ".join(terms) or None


def scan_predicate(plan: Any, table: str) -> str | None:
    """The predicate DataFusion's optimized ``plan`` applies directly above every scan of
    ``table``, as SQL over its unqualified columns (the OR of them when the table is scanned more
    than once), or None when some scan of it has none (or none of it can be rendered)."""
    found: list[str | None] = []

    def walk(node: Any, parent: Any) -> None:
        variant = node.to_variant()
        if type(variant).__name__ == "TableScan" and variant.table_name() == table:
            if parent is None or type(parent.to_variant()).__name__ != "Filter":
                found.append(None)
                return
            where = _filter_sql(parent)
            found.append(_unqualified(where, table) if where else None)
            return
        for child in node.inputs():
            walk(child, node)

    walk(plan, None)
    if not found or any(p is None for p in found):
        return None
    return found[0] if len(found) == 1 else " OR ".join(f"({p})" for p in found)


# DataFusion's words when SQLOptions refuse a plan: "DDL not supported: CreateExternalTable",
# "DML not supported: COPY", "Statement not supported: SetVariable"
_REFUSED = re.compile(r"\b(DDL|DML|Statement) not supported: ([^\n]+)")
_KINDS = {"DDL": "DDL", "DML": "DML", "Statement": "a statement"}


def _query_options() -> Any:
    """DataFusion's :class:`SQLOptions` of a read-only query: DDL (``CREATE``, ``DROP``), DML
    (``INSERT``, ``COPY``, ``DELETE``, ``UPDATE``) and statements (``SET``, ``PREPARE``) are
    refused when the query is planned, before anything runs or is registered."""
    from datafusion import SQLOptions

    return SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)


def _planned(ctx: Any, query: str, table: str) -> Any:
    """``query`` planned in ``ctx`` as a read-only query (a ``datafusion.DataFrame``), or
    :class:`InvalidArgumentError` naming what DataFusion refused or could not plan."""
    try:
        return ctx.sql_with_options(query, _query_options())
    except Exception as e:  # DataFusion raises plain Exception
        refused = _REFUSED.search(str(e))
        if refused is not None:
            kind, what = refused.group(1), refused.group(2).strip()
            raise InvalidArgumentError(
                f"query: only SELECT / WITH queries are accepted, not {_KINDS[kind]} ({what}); "
                f"nothing was run or registered") from None
        raise InvalidArgumentError(f"query cannot be planned over {table} (DataFusion: {e})") from None


@contextlib.contextmanager
def _registered(ctx: Any, name: str, register: Callable[[], Any]) -> Iterator[None]:
    """While the block runs, ``register()`` (which registers a table ``name`` in ``ctx``) is in
    effect; afterwards ``ctx`` has under ``name`` what it had before: its own table back, or none.
    A DataFrame planned meanwhile keeps reading the registered table."""
    saved = ctx.table_provider(name) if ctx.table_exist(name) else None
    if saved is not None:
        ctx.deregister_table(name)
    try:
        register()
        yield
    finally:
        if ctx.table_exist(name):
            ctx.deregister_table(name)
        if saved is not None:
            ctx.register_table(name, saved)


def sql(ns: Any, query: str, table: str, ctx: Any = None) -> Any:
    """``query`` run by DataFusion with the namespace as ``table`` (a ``datafusion.DataFrame``),
    the partitions read pruned by the predicate the query applies to ``table``. Read-only
    queries only; planned in ``ctx`` (its tables, UDFs and settings), which is left as it was."""
    import datafusion

    from lancepart.model.datafusion_udfs import register_udfs

    if not isinstance(table, str) or not _IDENT.match(table):
        raise invalid("table", table, "a plain SQL identifier (a str)")
    check_text("query", query, "SQL text (a non-empty str)")
    check_instance("ctx", ctx, datafusion.SessionContext, "a datafusion.SessionContext")
    if ctx is None:
        ctx = datafusion.SessionContext()
        register_udfs(ctx)
    empty = pa.RecordBatch.from_pylist([], schema=ns.schema)
    with _registered(ctx, table, lambda: ctx.register_record_batches(table, [[empty]])):
        plan = _planned(ctx, query, table).optimized_logical_plan()
    predicate = scan_predicate(plan, table)
    filter = None
    if predicate is not None:
        with contextlib.suppress(Exception):  # not prunable: read every partition
            ns.scan_plan(predicate)
            filter = predicate
    data = ns.to_batches(filter)
    with _registered(ctx, table, lambda: ctx.from_arrow(data, name=table)):
        return _planned(ctx, query, table)
