"""Read partition tables at their published version (spec "Transaction / Read Behavior").

``read_version`` alone: that version of main; ``read_branch`` + ``read_version``: that
version of the branch; ``read_tag``: the tagged version; all NULL: latest main. Rows a
table holds beyond its published version are never visible here.

A filtered scan pushes an *inclusive* rendering of the filter into each Lance scanner
(:attr:`lancepart.read.prune.PruneResult.scan_filter`: literals already coerced to the column
types, so Lance's own literal coercion cannot change its meaning) and then applies the filter
exactly, with DataFusion's semantics, to the rows read: what a filter means is what DataFusion
says, whichever engine scans.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

import datafusion
import lance
import pyarrow as pa

from lancepart.error_mapping import storage_errors, typed_error, unreadable_file
from lancepart.errors import CorruptTableError, InvalidArgumentError, LancepartError
from lancepart.ids import check_location
from lancepart.lance_io import open_table
from lancepart.manifest import is_not_found, join_uri
from lancepart.parallel import map_threads
from lancepart.results import PartitionInfo

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


_contexts = threading.local()  # one DataFusion context per thread, for apply_filter


def _filter_context() -> datafusion.SessionContext:
    """This thread's DataFusion context with lancepart's UDFs (made once: a new context and its
    UDFs cost about as much as filtering a table of a few thousand rows)."""
    ctx = getattr(_contexts, "ctx", None)
    if ctx is None:
        from lancepart.datafusion_udfs import register_udfs

        ctx = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
        register_udfs(ctx)
        _contexts.ctx = ctx
    return ctx


def apply_filter(table: pa.Table, filter: str) -> pa.Table:
    """The rows of ``table`` for which ``filter`` is TRUE, evaluated by DataFusion (row order kept).
    The filter is parsed as one expression over the table's columns, never spliced into a query:
    text that is not a single expression (``TRUE UNION SELECT ...``, ``a) OR (b``) is refused."""
    ctx = _filter_context()
    ctx.register_record_batches("t", [table.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]])
    try:
        out = ctx.table("t").filter(filter).to_arrow_table()
    except Exception as e:  # DataFusion raises plain Exception
        raise InvalidArgumentError(f"filter {filter!r} failed on the scanned rows (DataFusion: {e})") from None
    finally:
        ctx.deregister_table("t")
    return out.cast(table.schema) if out.num_rows else table.schema.empty_table()


def scan(root: str, partitions: Sequence[PartitionInfo], schema: pa.Schema, *, filter: str | None = None,
         columns: Sequence[str] | None = None, storage_options: Mapping[str, str] | None = None,
         scan_filter: str | None = None, namespace_md: Mapping[str, str] | None = None) -> pa.Table:
    """Concatenate the published rows of ``partitions`` that match ``filter``, projected to
    ``columns``. ``scan_filter`` (an inclusive form of ``filter``) and the columns the filter
    needs are pushed into each Lance scan; ``filter`` is then applied exactly.

    A table written under an older namespace schema is read in the current one, by field id
    (:mod:`lancepart.schema_evolution`; ``namespace_md`` are the root properties): renamed
    columns under their new names, widened ones cast, missing ones NULL, dropped ones left out;
    the filter is not pushed into such a table (its column names may mean other fields)."""
    from lancepart.predicates import filter_columns
    from lancepart.schema_evolution import conform, is_current, source_columns

    namespace_md = dict(namespace_md or {})

    cols = list(columns) if columns is not None else list(schema.names)
    unknown = [c for c in cols if c not in schema.names]
    if unknown:
        raise InvalidArgumentError(f"columns {unknown} are not in the namespace schema {schema.names}")
    needed = set(cols) | set(filter_columns(filter, schema))
    read_cols = cols if not filter else [n for n in schema.names if n in needed]
    read_schema = pa.schema([schema.field(c) for c in read_cols])

    def read(info: PartitionInfo) -> pa.Table:
        ds = open_published(root, info, storage_options)
        if ds is None:  # declared, not created yet: no rows
            return read_schema.empty_table()
        # a data file gone or undecodable: a typed error naming the table and the file
        mapping = None
        if not is_current(ds.schema, namespace_md, schema):  # written under an older namespace schema
            mapping = source_columns(ds.schema, namespace_md, schema, read_cols)
        table_cols = read_cols if mapping is None else [c for c in mapping.values() if c is not None]
        try:
            with storage_errors(join_uri(root, info.location), table=info.object_id, reading=True):
                t = scan_table(ds, table_cols, scan_filter if mapping is None else None)
        except CorruptTableError as e:
            bad = unreadable_file(ds, table_cols)
            if bad is None or bad in str(e):
                raise
            raise CorruptTableError(f"{e} (the unreadable file is {bad})") from e
        if mapping is not None:
            return conform(t, mapping, read_schema)
        return t.select(read_schema.names).cast(read_schema)

    # Opening a table costs a few object-store round trips: overlap them (order is kept).
    tables = map_threads(read, partitions)
    out = pa.concat_tables(tables) if tables else read_schema.empty_table()
    if filter:
        out = apply_filter(out, filter)
    return out.select(cols)
