"""Read partition tables at their published version (spec "Transaction / Read Behavior").

``read_version`` alone: that version of main; ``read_branch`` + ``read_version``: that
version of the branch; ``read_tag``: the tagged version; all NULL: latest main. Rows a
table holds beyond its published version are never visible here.

A filtered scan pushes an *inclusive* rendering of the filter into each Lance scanner
(:attr:`lancepart.read.manifest_query.PruneResult.scan_filter`: literals already coerced to the column
types, so Lance's own literal coercion cannot change its meaning) and then applies the filter
exactly, with DataFusion's semantics, to the rows read: what a filter means is what DataFusion
says, whichever engine scans.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa

from lancepart.arguments import check_columns, check_int
from lancepart.errors import CorruptTableError, InvalidArgumentError, LancepartError
from lancepart.model.datafusion_udfs import filter_context
from lancepart.model.ids import check_location
from lancepart.results import PartitionInfo
from lancepart.storage.error_mapping import storage_errors, typed_error, unreadable_file
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import is_not_found, join_uri
from lancepart.util.parallel import MAX_WORKERS, stream_in_order

log = logging.getLogger("lancepart.read")


def open_partition(root: str, info: PartitionInfo, storage_options: Mapping[str, str] | None = None
                   ) -> lance.LanceDataset:
    """The partition table at its published version. :class:`UnsafeLocationError` when its
    ``location`` leaves the root; :class:`CorruptTableError` (a :class:`CorruptNamespaceError`)
    naming the table when Lance cannot open that version; :class:`StoragePermissionError` when
    the storage refuses access."""
    so = dict(storage_options) if storage_options else None
    uri = join_uri(root, check_location(info.location, info.object_id, root))
    try:
        if info.read_tag is not None:
            return open_table(uri, version=info.read_tag, storage_options=so)
        if info.read_branch is not None:
            return open_table(uri, storage_options=so).checkout_version((info.read_branch, info.read_version))
        return open_table(uri, version=info.read_version, storage_options=so)
    except (OSError, ValueError) as e:
        typed = typed_error(e, uri, table=info.object_id)
        if typed is not None:
            raise typed from e
        raise CorruptTableError(
            f"partition table {info.object_id!r} at {uri} (read_version={info.read_version}, "
            f"read_branch={info.read_branch!r}, read_tag={info.read_tag!r}) cannot be opened: {e}") from e


def is_declared(info: PartitionInfo) -> bool:
    """Whether the row pins nothing (``read_version``, ``read_branch`` and ``read_tag`` all NULL):
    it reads the latest version, and if its directory holds no table yet (a table declared
    but not created, as Lance's ``declare_table`` leaves it) it reads as empty."""
    return info.read_version is None and info.read_branch is None and info.read_tag is None


def open_published(root: str, info: PartitionInfo, storage_options: Mapping[str, str] | None = None
                   ) -> lance.LanceDataset | None:
    """:func:`open_partition`, or None for a declared-only table (:func:`is_declared`) whose
    directory holds no table yet: it has no rows. A table whose row pins a version but whose
    directory is gone stays an error (published data is missing)."""
    try:
        return open_partition(root, info, storage_options)
    except LancepartError as e:  # whichever typed error Lance's "not found" became
        if is_declared(info) and isinstance(e.__cause__, ValueError) and is_not_found(e.__cause__):
            return None
        raise


def scan_table(ds: lance.LanceDataset, columns: Sequence[str] | None, scan_filter: str | None) -> pa.Table:
    """``ds`` with ``scan_filter`` pushed into Lance's scanner; should Lance's planner refuse
    it, the columns unfiltered (the exact filter is applied afterwards anyway)."""
    cols = list(columns) if columns is not None else None
    if scan_filter is not None:
        try:
            return ds.to_table(columns=cols, filter=scan_filter)
        except ValueError as e:
            log.debug("Lance refused the pushed-down filter %r (%s); scanning without it", scan_filter, e)
    return ds.to_table(columns=cols)


# this thread's DataFusion context with lancepart's UDFs, shared with the expression checks of the model
_filter_context = filter_context


_ROWS_COLUMN = "__lp_rows"


def apply_filter(table: pa.Table, filter: str) -> pa.Table:
    """The rows of ``table`` for which ``filter`` is TRUE, evaluated by DataFusion (row order kept).
    The filter is parsed as one expression over the table's columns, never spliced into a query:
    text that is not a single expression (``TRUE UNION SELECT ...``, ``a) OR (b``) is refused."""
    if table.num_columns == 0:  # DataFusion sees no rows in batches without columns: count them in one
        counted = table.append_column(_ROWS_COLUMN, pa.nulls(table.num_rows, pa.int8()))
        return apply_filter(counted, filter).drop_columns([_ROWS_COLUMN])
    ctx = _filter_context()
    ctx.register_record_batches("t", [table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]])
    try:
        out = ctx.table("t").filter(filter).to_arrow_table()
    except Exception as e:  # DataFusion raises plain Exception
        raise InvalidArgumentError(f"filter {filter!r} failed on the scanned rows (DataFusion: {e})") from None
    finally:
        ctx.deregister_table("t")
    return out.cast(table.schema) if out.num_rows else table.schema.empty_table()


SCAN_BATCH_ROWS = 65_536  # rows per batch Lance's scanner yields (and to_batches' default)
TABLES_IN_FLIGHT = 4  # partition tables a streaming read keeps open and reading ahead
BATCHES_AHEAD = 2  # batches each of them may hold ready before its turn


def projected(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """``schema`` projected on ``columns`` (all when None); :class:`InvalidArgumentError` naming an
    unknown or repeated column."""
    cols = check_columns(columns)
    if cols is None:
        return schema
    unknown = [c for c in cols if schema.get_field_index(c) < 0]
    if unknown:
        raise InvalidArgumentError(f"columns {unknown} are not in the namespace schema (columns: {schema.names})")
    if len(set(cols)) != len(cols):
        raise InvalidArgumentError(f"columns {cols} name a column twice")
    return pa.schema([schema.field(c) for c in cols])


def read_schema_for(schema: pa.Schema, filter: str | None,
                    columns: Sequence[str] | None) -> tuple[list[str], pa.Schema]:
    """``(output columns, columns to read)`` of a read of ``columns`` (all when None) with
    ``filter``: the read adds the columns the filter needs (:func:`projected` checks the columns)."""
    from lancepart.model.predicates import filter_columns

    out = projected(schema, columns)
    if not filter:
        return list(out.names), out
    needed = set(out.names) | set(filter_columns(filter, schema))
    return list(out.names), pa.schema([f for f in schema if f.name in needed])


def table_batches(root: str, info: PartitionInfo, schema: pa.Schema, read_schema: pa.Schema, *,
                  scan_filter: str | None = None, storage_options: Mapping[str, str] | None = None,
                  namespace_md: Mapping[str, str] | None = None, fragments: Sequence[int] | None = None,
                  batch_size: int = SCAN_BATCH_ROWS, whole: bool = False) -> Iterator[pa.RecordBatch]:
    """The published rows of one partition table (or of its ``fragments``) as batches of
    ``read_schema`` (a projection of the namespace ``schema``), streamed from Lance's scanner with
    ``scan_filter`` (an inclusive form of the read's filter) pushed into it. The exact filter is
    the caller's to apply.

    A table written under an older namespace schema is read in the current one, by field id
    (:mod:`lancepart.evolution.schema_evolution`; ``namespace_md`` are the root properties): renamed
    columns under their new names, widened ones cast, missing ones NULL, dropped ones left out;
    the filter is not pushed into such a table (its column names may mean other fields). A data
    file gone or undecodable is a typed error naming the table and the file. ``whole``: read the
    table in one call to Lance and hand its batches out (for a caller keeping every row anyway)."""
    from lancepart.evolution.schema_evolution import conform, is_current, source_columns

    ds = open_published(root, info, storage_options)
    if ds is None:  # declared, not created yet: no rows
        return
    md = dict(namespace_md or {})
    mapping = None
    if not is_current(ds.schema, md, schema):  # written under an older namespace schema
        mapping = source_columns(ds.schema, md, schema, read_schema.names)
        scan_filter = None  # its column names may mean other fields
    table_cols = read_schema.names if mapping is None else [c for c in mapping.values() if c is not None]
    frags = [ds.get_fragment(i) for i in fragments] if fragments is not None else None
    scan = _TableScan(ds, join_uri(root, info.location), info.object_id, table_cols, frags, batch_size, whole)
    scan.open(scan_filter)
    for batch in scan.batches():
        if not read_schema.names:  # an empty projection keeps the row count (count(*) engines rely on it)
            yield batch.select([])
        elif mapping is not None:
            yield from conform(pa.Table.from_batches([batch]), mapping, read_schema).to_batches()
        else:
            yield batch.select(read_schema.names).cast(read_schema)


class _TableScan:
    """Lance's scan of one partition table for :func:`table_batches`: the pushed-down filter
    dropped when Lance refuses it, a storage error typed and naming the table (and the file
    that cannot be read)."""

    def __init__(self, ds: lance.LanceDataset, uri: str, object_id: str, columns: list[str],
                 fragments: list | None, batch_size: int, whole: bool) -> None:
        self.ds, self.uri, self.object_id, self.columns = ds, uri, object_id, columns
        self.fragments, self.batch_size, self.whole = fragments, batch_size, whole
        self.scanner: Any = None
        self.scan_filter: str | None = None

    def _scanner(self, **filter: str) -> Any:
        scanner = self.ds.scanner(columns=self.columns, fragments=self.fragments, batch_size=self.batch_size,
                                  **filter)
        return scanner if self.whole else scanner.to_reader()

    def open(self, scan_filter: str | None) -> None:
        """The scanner, with ``scan_filter`` pushed into it unless Lance's planner refuses it."""
        self.scan_filter = scan_filter
        with storage_errors(self.uri, table=self.object_id, reading=True):
            if scan_filter is not None:
                try:
                    self.scanner = self._scanner(filter=scan_filter)
                except ValueError as e:  # Lance's planner refused it; the exact filter still applies
                    log.debug("Lance refused the pushed-down filter %r (%s); scanning without it", scan_filter, e)
                    self.scanner = None
            if self.scanner is None:
                self.scanner = self._scanner()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The scanner's non-empty batches. ``whole``: the table in one call (a stream pays a
        hand-off per batch); a filter Lance refuses only then is dropped and the scan made again."""
        batches = None
        while True:
            try:
                with storage_errors(self.uri, table=self.object_id, reading=True):
                    if batches is None:
                        batches = iter(self.scanner.to_table().to_batches() if self.whole else self.scanner)
                    batch = next(batches, None)
            except ValueError as e:
                if not self.whole or self.scanner is None or self.scan_filter is None:
                    raise
                log.debug("Lance refused the pushed-down filter %r (%s); scanning without it", self.scan_filter, e)
                self.scanner = self.ds.scanner(columns=self.columns, fragments=self.fragments,
                                               batch_size=self.batch_size)
                self.scan_filter = None
                continue
            except CorruptTableError as e:
                bad = unreadable_file(self.ds, self.columns)
                if bad is None or bad in str(e):
                    raise
                raise CorruptTableError(f"{e} (the unreadable file is {bad})") from e
            if batch is None:
                return
            if batch.num_rows:
                yield batch


def filtered(batches: Iterable[pa.RecordBatch], read_schema: pa.Schema, filter: str | None, cols: Sequence[str],
             *, batch_size: int = SCAN_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """``batches`` (of ``read_schema``) with ``filter`` applied exactly and projected to ``cols``.
    Small batches are gathered up to ``batch_size`` rows before the filter runs (one DataFusion
    call per gathered chunk, not per table), so memory holds one chunk."""
    if not filter:
        for b in batches:
            yield b.select(cols) if b.schema.names != list(cols) else b
        return
    pending: list[pa.RecordBatch] = []
    rows = 0

    def flush() -> Iterator[pa.RecordBatch]:
        out = apply_filter(pa.Table.from_batches(pending, schema=read_schema), filter).select(cols)
        pending.clear()
        for b in out.to_batches(max_chunksize=batch_size):
            if b.num_rows:
                yield b

    for b in batches:
        pending.append(b)
        rows += b.num_rows
        if rows >= batch_size:
            yield from flush()
            rows = 0
    if pending:
        yield from flush()


def scan_stream(root: str, partitions: Sequence[PartitionInfo], schema: pa.Schema, *, filter: str | None = None,
                columns: Sequence[str] | None = None, storage_options: Mapping[str, str] | None = None,
                scan_filter: str | None = None, namespace_md: Mapping[str, str] | None = None,
                batch_size: int | None = None) -> pa.RecordBatchReader:
    """The published rows of ``partitions`` that match ``filter``, projected to ``columns``, as
    a stream: partition table after partition table, in order, with :data:`TABLES_IN_FLIGHT`
    tables opened and read ahead on threads and at most :data:`BATCHES_AHEAD` batches waiting
    for each, so memory stays flat whatever the size of the namespace. ``scan_filter`` and the
    columns the filter needs are pushed into each Lance scan (:func:`table_batches`); ``filter``
    is then applied exactly with DataFusion's semantics (:func:`filtered`)."""
    size = check_int("batch_size", batch_size, minimum=1, optional=True) or SCAN_BATCH_ROWS
    cols, read_schema = read_schema_for(schema, filter, columns)
    out_schema = pa.schema([schema.field(c) for c in cols])

    def one(info: PartitionInfo) -> Iterator[pa.RecordBatch]:
        return table_batches(root, info, schema, read_schema, scan_filter=scan_filter,
                             storage_options=storage_options, namespace_md=namespace_md, batch_size=size)

    stream = stream_in_order(one, partitions, window=TABLES_IN_FLIGHT, buffered=BATCHES_AHEAD)
    return pa.RecordBatchReader.from_batches(out_schema, filtered(stream, read_schema, filter, cols, batch_size=size))


def scan(root: str, partitions: Sequence[PartitionInfo], schema: pa.Schema, *, filter: str | None = None,
         columns: Sequence[str] | None = None, storage_options: Mapping[str, str] | None = None,
         scan_filter: str | None = None, namespace_md: Mapping[str, str] | None = None) -> pa.Table:
    """:func:`scan_stream`, read whole (``ns.to_table``). More tables are read ahead than a
    stream keeps (the result is in memory anyway); the filter runs per gathered chunk."""
    cols, read_schema = read_schema_for(schema, filter, columns)
    out_schema = pa.schema([schema.field(c) for c in cols])

    def one(info: PartitionInfo) -> Iterator[pa.RecordBatch]:
        return table_batches(root, info, schema, read_schema, scan_filter=scan_filter,
                             storage_options=storage_options, namespace_md=namespace_md, whole=True)

    stream = stream_in_order(one, partitions, window=MAX_WORKERS, buffered=1_000_000)
    batches = list(filtered(stream, read_schema, filter, cols, batch_size=1 << 62))
    return pa.Table.from_batches(batches, schema=out_schema) if batches else out_schema.empty_table()
