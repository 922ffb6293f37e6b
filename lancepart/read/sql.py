"""DataFusion SQL over the namespace: ``ns.sql`` (docs/reading.md).

:func:`sql` runs a read-only DataFusion query over the namespace (DDL, DML and statements are
refused when it is planned, before anything runs). Before anything is read, the query is planned
in the caller's context (its tables, UDFs and settings) with the namespace registered as an empty
table of its schema, and the predicate DataFusion's optimizer placed directly above the table's
scan is handed to ``__manifest`` pruning; DataFusion then runs the whole query, scanning the kept
partitions as a stream when the DataFrame is collected (:class:`SqlTable`). Pruning with that
predicate can only drop partitions the query would filter out, so when the predicate cannot be
taken out (or pruning refuses it) everything is read and the answer is the same. The context is
left with the tables it had.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from lancepart.arguments import check_instance, check_text, invalid
from lancepart.errors import InvalidArgumentError
from lancepart.read.pyarrow_dataset import NamespaceDataset, check_expression

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle


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


def _filter_sql(node: Any) -> tuple[str | None, bool]:
    """(the predicate of the ``Filter`` plan ``node`` as SQL or None when none of it can be
    rendered, whether that SQL is the whole predicate). A predicate the unparser cannot render
    whole, or whose rendering means something else (:func:`_rendered`), keeps the terms of its
    ``AND`` chain that render to what they mean (a row value such as ``(country, id) IN (('US',
    1))`` is a comparison of struct literals, which the unparser does not support): the whole
    predicate implies them, so pruning with them still drops only partitions the query filters
    out."""
    from datafusion.expr import Expr

    from lancepart.read.snapshot import _filter_context

    scan = node.inputs()[0]
    predicate = node.to_variant().predicate()
    try:
        where = _rendered(scan, Expr(predicate), _where(node))
        if where is not None:
            return where, True
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
    return " AND ".join(terms) or None, False


def scan_predicates(plan: Any, table: str) -> tuple[str | None, bool]:
    """(the predicate DataFusion's optimized ``plan`` applies directly above every scan of
    ``table``, as SQL over its unqualified columns (the OR of them when the table is scanned more
    than once), or None when some scan of it has none (or none of it can be rendered); whether
    the table is scanned once and that SQL is the whole of its scan's filter)."""
    found: list[tuple[str | None, bool]] = []

    def walk(node: Any, parent: Any) -> None:
        variant = node.to_variant()
        if type(variant).__name__ == "TableScan" and variant.table_name() == table:
            if parent is None or type(parent.to_variant()).__name__ != "Filter":
                found.append((None, False))
                return
            where, whole = _filter_sql(parent)
            found.append((_unqualified(where, table) if where else None, whole))
            return
        for child in node.inputs():
            walk(child, node)

    walk(plan, None)
    if not found or any(p is None for p, _ in found):
        return None, False
    if len(found) == 1:
        return found[0]
    return " OR ".join(f"({p})" for p, _ in found), False


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
    the partitions read pruned by the predicate the query applies to ``table`` and streamed into
    the query when it is collected (read into DataFusion first when a filter DataFusion would
    push into the scan is not covered by that predicate: see :class:`SqlTable`). Read-only
    queries only; planned in ``ctx`` (its tables, UDFs and settings), which is left as it was.
    ``ns`` is a handle pinned to the snapshot the DataFrame reads."""
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
    predicate, covers = scan_predicates(plan, table)
    filter = None
    if predicate is not None:
        with contextlib.suppress(Exception):  # not prunable: read every partition
            ns.scan_plan(predicate)
            filter = predicate
    streamed = SqlTable(ns, filter, covers=covers)
    with _registered(ctx, table, lambda: ctx.register_dataset(table, streamed)):
        df = _planned(ctx, query, table)
        if covers or not _pushed_filters(df.optimized_logical_plan(), table):
            return df
    # DataFusion would take filters as applied by the scan that only pyarrow could apply, with
    # its semantics (NaN compares otherwise): the rows are read first, as DataFusion's own
    materialised = ns.to_batches(filter)
    with _registered(ctx, table, lambda: ctx.from_arrow(materialised, name=table)):
        return _planned(ctx, query, table)


def _pushed_filters(plan: Any, table: str) -> bool:
    """Whether some scan of ``table`` in the optimized ``plan`` has filters pushed into it."""
    variant = plan.to_variant()
    if type(variant).__name__ == "TableScan" and variant.table_name() == table and list(variant.filters()):
        return True
    return any(_pushed_filters(child, table) for child in plan.inputs())


class SqlTable(NamespaceDataset):
    """The namespace table of ``ns.sql`` (:func:`sql`), registered with
    DataFusion's pyarrow Dataset provider, which plans the query with it and streams it when the
    DataFrame is collected; nothing is read before.

    DataFusion hands the provider the query's projection and the terms of its ``WHERE`` that
    translate to pyarrow Expressions, takes them as applied exactly, and reads the whole table as
    one stream (:meth:`get_fragments`: one fragment, the pruned tables one after another, memory
    flat as ``ns.to_batches``). Its SQL ``filter`` is the predicate DataFusion places above the
    table's scan, rendered back to SQL (it prunes and is applied with DataFusion's own
    semantics). When that predicate is the whole of what the query filters the table's rows by
    (``covers``), the Expressions DataFusion pushes down are parts of it and are not applied again
    (pyarrow compares some values otherwise than DataFusion); else pyarrow applies them, as for
    DuckDB (:func:`sql` registers it only when DataFusion pushes none then).

    DataFusion calls it from the threads that drive its runtime, where a call that prunes with an
    Expression panics ("Cannot start a runtime from within a runtime") and loses its pruning:
    with no Expression applied, a scan prunes by the dataset's plan, made before the query runs."""

    def __init__(self, ns: NamespaceHandle, filter: str | None, *, covers: bool) -> None:
        super().__init__(ns, filter)
        self._covers = covers and filter is not None

    def scanner(self, columns: Any = None, filter: pc.Expression | None = None, batch_size: int | None = None,
                **options: Any) -> pds.Scanner:
        """:meth:`NamespaceDataset.scanner` without the Expressions ``filter`` holds when the
        dataset's SQL filter covers them, and at lancepart's batch size (DataFusion's 8 192 would
        make Python hand every batch over 8 times as often). Making it reads nothing: DataFusion
        reads ``projected_schema`` when it plans, the batches when it executes."""
        expression = None if self._covers else check_expression(filter)
        return NamespaceDataset.scanner(self, columns, expression, **options)

    def get_fragments(self, filter: Any = None) -> list[_WholeTable]:
        """One fragment: the whole (pruned) table as one stream (DataFusion runs one scan per
        fragment, all at once: one keeps a single table's read-ahead in memory)."""
        return [_WholeTable(self)]

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("the table of ns.sql is not pickled: pickle ns.to_pyarrow_dataset() or the query")


class _WholeTable:
    """The one fragment of a :class:`SqlTable`: DataFusion calls ``scanner(dataset_schema,
    columns=, filter=, batch_size=)`` on it for each execution."""

    def __init__(self, table: SqlTable) -> None:
        self._table = table

    def scanner(self, schema: Any = None, columns: Any = None, filter: pc.Expression | None = None,
                batch_size: int | None = None, **options: Any) -> pds.Scanner:
        return self._table.scanner(columns, filter, batch_size)
