"""A ``pyarrow.dataset.Dataset`` over a namespace snapshot (``ns.to_pyarrow_dataset``; docs/reading.md).

Engines that take a pyarrow Dataset hand it their projection and their filter as a pyarrow
compute ``Expression``: DuckDB calls :meth:`NamespaceDataset.scanner` for each scan of a query,
Polars' ``scan_pyarrow_dataset`` calls :meth:`NamespaceDataset.to_batches`. Each scan then

1. translates the Expression, where it can, into a SQL filter that is TRUE wherever the
   Expression is (:func:`lancepart.read.arrow_filter.prune_sql`) and prunes the partitions of
   the snapshot through ``__manifest`` with it, ANDed with the dataset's own SQL ``filter``;
2. streams the kept tables at their pinned versions (:func:`lancepart.read.snapshot.scan_stream`:
   a few tables in flight, memory flat), the dataset's SQL filter applied exactly by DataFusion;
3. applies the Expression and the projection with pyarrow itself
   (``pyarrow.dataset.Scanner.from_batches``): the rows are the ones pyarrow returns for that
   Expression over the same rows, whatever the translation made of it.

The snapshot is the one of the handle when the dataset was made (a read-only handle on it is
kept): later commits are not seen, by any scan.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds

from lancepart.arguments import check_filter, check_int, invalid
from lancepart.errors import InvalidArgumentError, LancepartError
from lancepart.read import arrow_filter

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.read")

_OPERATION = "to_pyarrow_dataset"


class NamespaceDataset(pds.Dataset):
    """The rows of a namespace snapshot matching a SQL ``filter``, projected on ``columns``, as
    a pyarrow Dataset. Made by ``ns.to_pyarrow_dataset``; see the module docstring.

    A scanner (:meth:`scanner`) reads its stream once, as pyarrow's ``Scanner.from_batches``
    does: each call of :meth:`scanner`, :meth:`to_table`, :meth:`to_batches`, :meth:`head`,
    :meth:`count_rows` or :meth:`take` reads the snapshot again. ``batch_readahead``,
    ``fragment_readahead``, ``fragment_scan_options`` and ``cache_metadata`` are accepted and
    have no effect (the read-ahead is lancepart's own)."""

    def __init__(self, ns: NamespaceHandle, filter: str | None = None, columns: Sequence[str] | None = None,
                 *, polars: bool = False, expression: pc.Expression | None = None) -> None:
        from lancepart.read.engines import polars_schema
        from lancepart.read.snapshot import projected

        # no super().__init__(): pyarrow's refuses to build a Dataset from Python (pylance's
        # LanceDataset does the same); every method that would reach its C++ dataset is overridden
        self._ns = ns
        self._sql = check_filter(filter)
        self._columns = None if columns is None else list(projected(ns.schema, columns).names)
        self._source_schema = projected(ns.schema, columns)
        self._polars = polars
        self._schema = polars_schema(self._source_schema) if polars else self._source_schema
        self._expression = check_expression(expression)
        # the filter is checked now; its plan (the snapshot's, which never changes) serves every scan
        # the Expression does not narrow (listing every partition of a large namespace costs ms)
        self._base_plan = ns.scan_plan(self._sql)
        self._plan_lock = threading.Lock()  # an engine may start scans on several threads (a self-join)

    # ------------------------------------------------------------------ what it is
    @property
    def schema(self) -> pa.Schema:
        """The columns a scan returns without ``columns=``: the namespace schema projected on the
        dataset's ``columns`` (Polars' types for ``ns.scan_polars``)."""
        return self._schema

    @property
    def partition_expression(self) -> pc.Expression:
        """TRUE: partitions are pruned through ``__manifest``, not described by an expression."""
        return pc.scalar(True)

    @property
    def manifest_version(self) -> int:
        """The ``__manifest`` version of the snapshot every scan reads."""
        return self._ns.manifest_version

    def __repr__(self) -> str:
        return (f"NamespaceDataset(root={self._ns.root!r}, manifest_version={self.manifest_version}, "
                f"filter={self._sql!r}, columns={self._columns!r})")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the root, storage options and ``__manifest`` version it reads (unpickled, it
        opens that version again), with its filters and projection."""
        return (_reopen, (self._ns.root, self._ns.storage_options, self.manifest_version, self._sql, self._columns,
                          self._polars, self._expression))

    # ------------------------------------------------------------------ reading
    def filter(self, expression: pc.Expression) -> NamespaceDataset:
        """A dataset whose scans also apply ``expression`` (ANDed with what it applies already)."""
        expression = check_expression(expression)
        if expression is None:
            raise invalid("expression", expression, "a pyarrow.compute.Expression")
        combined = expression if self._expression is None else self._expression & expression
        narrowed = NamespaceDataset.__new__(NamespaceDataset)  # the same snapshot and plan, not made again
        narrowed.__dict__.update(self.__dict__)
        narrowed._expression = combined
        return narrowed

    def scanner(self, columns: Sequence[str] | Mapping[str, pc.Expression] | None = None,
                filter: pc.Expression | None = None, batch_size: int | None = None, batch_readahead: Any = None,
                fragment_readahead: Any = None, fragment_scan_options: Any = None, use_threads: bool = True,
                cache_metadata: Any = None, memory_pool: pa.MemoryPool | None = None) -> pds.Scanner:
        """A pyarrow Scanner of the rows matching ``filter`` (a pyarrow Expression, ANDed with the
        dataset's filters), projected on ``columns`` (names, or ``{name: Expression}``). The
        filter prunes partitions as far as it translates to SQL and is applied by pyarrow."""
        expression = check_expression(filter)
        if self._expression is not None:
            expression = self._expression if expression is None else self._expression & expression
        size = check_int("batch_size", batch_size, minimum=1, optional=True)
        out_columns, needed = self._columns_for(columns, expression)
        parts, exact, scan_filter = self._plan(expression)
        reader = self._stream(parts, exact, scan_filter, needed, size)
        options: dict[str, Any] = {"columns": out_columns, "filter": expression, "use_threads": use_threads,
                                   "memory_pool": memory_pool}
        if size is not None:
            options["batch_size"] = size
        try:
            return pds.Scanner.from_batches(reader, **options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidArgumentError(f"{_OPERATION}: the scan's columns {columns!r} / filter {expression} cannot "
                                       f"be applied to the dataset's columns {self._schema.names} (pyarrow: {e})"
                                       ) from None

    def to_batches(self, columns: Any = None, filter: pc.Expression | None = None, batch_size: int | None = None,
                   **options: Any) -> Iterator[pa.RecordBatch]:
        """:meth:`scanner`'s batches, streamed."""
        return self.scanner(columns, filter, batch_size, **options).to_batches()

    def to_table(self, columns: Any = None, filter: pc.Expression | None = None, batch_size: int | None = None,
                 **options: Any) -> pa.Table:
        """:meth:`scanner`'s rows as one table."""
        return self.scanner(columns, filter, batch_size, **options).to_table()

    def head(self, num_rows: int, columns: Any = None, filter: pc.Expression | None = None,
             batch_size: int | None = None, **options: Any) -> pa.Table:
        """The first ``num_rows`` rows; the stream stops once they are read."""
        n = check_int("num_rows", num_rows, minimum=0)
        return self.scanner(columns, filter, batch_size, **options).head(n)

    def take(self, indices: Any, columns: Any = None, filter: pc.Expression | None = None,
             batch_size: int | None = None, **options: Any) -> pa.Table:
        """The rows at ``indices`` (positions in the scan's order)."""
        return self.scanner(columns, filter, batch_size, **options).take(indices)

    def count_rows(self, filter: pc.Expression | None = None, batch_size: int | None = None,
                   **options: Any) -> int:
        """How many rows match; only the columns the filters need are read."""
        return self.scanner([], filter, batch_size, **options).count_rows()

    # ------------------------------------------------------------------ what pyarrow would do in C++
    def sort_by(self, sorting: Any, **kwargs: Any) -> pds.Dataset:
        """The rows sorted, in memory (as pyarrow's ``Dataset.sort_by`` returns them)."""
        return pds.dataset(self.to_table()).sort_by(sorting, **kwargs)

    def join(self, right_dataset: Any, keys: Any, *args: Any, **kwargs: Any) -> pds.Dataset:
        """pyarrow's join of the rows, read whole (the result is in memory as pyarrow's is)."""
        return pds.dataset(self.to_table()).join(_in_memory(right_dataset), keys, *args, **kwargs)

    def join_asof(self, right_dataset: Any, on: Any, by: Any, tolerance: Any, *args: Any, **kwargs: Any
                  ) -> pds.Dataset:
        """pyarrow's as-of join of the rows, read whole."""
        return pds.dataset(self.to_table()).join_asof(_in_memory(right_dataset), on, by, tolerance, *args, **kwargs)

    def get_fragments(self, filter: Any = None) -> Iterator[Any]:
        raise NotImplementedError("a namespace dataset has no pyarrow fragments: read it with scanner(), "
                                  "to_batches() or to_table()")

    def replace_schema(self, schema: pa.Schema) -> pds.Dataset:
        raise NotImplementedError("a namespace dataset reads the namespace schema; project it with columns=")

    # ------------------------------------------------------------------ internals
    def _columns_for(self, columns: Any, expression: pc.Expression | None) -> tuple[Any, list[str]]:
        """(the projection handed to pyarrow, the dataset columns to read: the projection's and
        the filter's). An unknown column named by either is :class:`InvalidArgumentError` naming it."""
        names = self._schema.names
        if columns is None:
            out: Any = list(names)
            wanted: set[str] | None = set(names)
        elif isinstance(columns, Mapping):
            if not all(isinstance(k, str) and isinstance(v, pc.Expression) for k, v in columns.items()):
                raise invalid("columns", columns, "a list of column names or a dict of {name: pyarrow Expression}")
            out, wanted = dict(columns), arrow_filter.columns_of(list(columns.values()))
        else:
            from lancepart.arguments import check_columns

            out = check_columns(columns)
            wanted = set(out)  # type: ignore[arg-type]
        in_filter = set() if expression is None else arrow_filter.columns_of([expression])
        for what, cols in (("filter", in_filter), ("columns", wanted)):
            unknown = sorted((cols or set()) - set(names))
            if unknown:
                raise InvalidArgumentError(f"{what}: column {unknown[0]!r} is not in the dataset (columns: {names})")
        if wanted is None or in_filter is None:  # an expression not read: read every column, pyarrow binds it
            return out, list(names)
        return out, [n for n in names if n in wanted | in_filter]

    def _plan(self, expression: pc.Expression | None) -> tuple[list[Any], str | None, str | None]:
        """(kept partitions, exact SQL filter, inclusive scan filter): pruned by the dataset's
        filter AND what the Expression translates to; the exact filter is the dataset's alone."""
        parts, exact, scan_filter = self._base_plan
        prune = arrow_filter.prune_sql(expression, self._ns.schema)
        if prune is None:
            return list(parts), exact, scan_filter
        combined = prune if exact is None else f"({exact}) AND ({prune})"
        try:
            with self._plan_lock:  # the handle's plan cache is not shared between threads
                parts, _, scan_filter = self._ns.scan_plan(combined)
        except LancepartError as e:  # pruning refuses it: the Expression still filters
            log.debug("the pruning predicate %r of %s is not used: %s", prune, expression, e)
        return list(parts), exact, scan_filter

    def _stream(self, parts: list[Any], exact: str | None, scan_filter: str | None, columns: list[str],
                batch_size: int | None) -> pa.RecordBatchReader:
        from lancepart.read.engines import typed_reader
        from lancepart.read.snapshot import scan_stream

        ns = self._ns
        reader = typed_reader(scan_stream(ns.root, parts, ns.schema, filter=exact, columns=columns,
                                          storage_options=ns.storage_options, scan_filter=scan_filter,
                                          namespace_md=ns.snapshot().metadata, batch_size=batch_size),
                              _OPERATION, ns.root)
        if not self._polars:
            return reader
        target = pa.schema([self._schema.field(c) for c in columns])
        return pa.RecordBatchReader.from_batches(target, (b.cast(target) for b in reader))


def check_expression(value: Any) -> pc.Expression | None:
    if value is not None and not isinstance(value, pc.Expression):
        raise invalid("filter", value, "a pyarrow.compute.Expression or None")
    return value


def _in_memory(dataset: Any) -> Any:
    return pds.dataset(dataset.to_table()) if isinstance(dataset, NamespaceDataset) else dataset


def _reopen(root: str, storage_options: Mapping[str, str] | None, version: int, filter: str | None,
            columns: list[str] | None, polars: bool, expression: pc.Expression | None) -> NamespaceDataset:
    from lancepart import handle

    ns = handle.open_handle(root, version=version, storage_options=storage_options)
    return NamespaceDataset(ns, filter, columns, polars=polars, expression=expression)
