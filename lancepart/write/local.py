"""In-process write (no Spark): the same plan -> fragments -> publish path.

A ``pa.Table`` is planned in one pass; a ``RecordBatchReader`` is consumed in chunks of
``chunk_rows`` so memory stays bounded. Each partition's rows are written as Lance fragments
straight into its table, or, for a partition that has no table yet, into a directory of its own
where the table is then created with them (:mod:`lancepart.write.create`); the whole input is
published at the end in one ``__manifest`` commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from lancepart.errors import InvalidArgumentError, SchemaChangedError
from lancepart.evolution.file_format import data_storage_version
from lancepart.model import ids as _ids
from lancepart.results import CommitResult
from lancepart.storage.error_mapping import storage_errors
from lancepart.util import faults
from lancepart.util.parallel import map_threads
from lancepart.write.batches import check_batch_id
from lancepart.write.create import NewTables, create_table_with, create_tables, write_new_fragments
from lancepart.write.plan import check_schema, conform, group_rows, partition_values
from lancepart.write.publish import TableWrite, already_published, publish
from lancepart.write.reserve import reserve_partitions
from lancepart.write.upgrade import append_fragments, upgrade_tables

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.write")
MODES = ("append", "overwrite")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")


def _chunks(reader: pa.RecordBatchReader, chunk_rows: int) -> Iterator[pa.Table]:
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in reader:
        pending.append(batch)
        size += batch.num_rows
        if size >= chunk_rows:
            yield pa.Table.from_batches(pending, schema=reader.schema)
            pending, size = [], 0
    if pending:
        yield pa.Table.from_batches(pending, schema=reader.schema)


SCHEMA_ATTEMPTS = 3


def write_local(*args, **kwargs) -> CommitResult:
    """:func:`_write_local` with storage errors typed: a full disk, a refused directory or a root
    that is a file name the namespace root (:mod:`lancepart.storage.error_mapping`). A table in memory
    whose write met a concurrent schema change (:class:`SchemaChangedError`: nothing was
    committed) is written again on the new schema; a stream cannot be replayed: the error reaches
    the caller."""
    ns = args[0] if args else kwargs["ns"]
    data = args[1] if len(args) > 1 else kwargs.get("data")
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            with storage_errors(ns.root):
                return _write_local(*args, **kwargs)
        except SchemaChangedError as e:
            if not isinstance(data, pa.Table | pa.RecordBatch) or attempt == SCHEMA_ATTEMPTS - 1:
                raise
            log.info("write to %s met a concurrent schema change (%s); writing again", ns.root, e)
            ns.refresh()
    raise AssertionError("unreachable")


def _write_local(
    ns: NamespaceHandle,
    data: pa.Table | pa.RecordBatchReader | pa.RecordBatch,
    mode: str = "append",
    batch_id: str | None = None,
    *,
    chunk_rows: int = 1_000_000,
    max_rows_per_file: int = 1_048_576,
    max_retries: int = 20,
    expectations: list[dict] | None = None,
    index_on_write: bool = True,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    started = time.monotonic()
    check_mode(mode)
    if batch_id is not None:
        check_batch_id(batch_id)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    reader = data.to_reader(max_chunksize=chunk_rows) if isinstance(data, pa.Table) else data
    if not isinstance(reader, pa.RecordBatchReader):
        raise InvalidArgumentError(f"data must be a pa.Table, pa.RecordBatch or pa.RecordBatchReader, "
                                   f"got {type(data).__name__}")
    schema, spec, manifest = ns.schema, ns.current_spec, ns.manifest
    check_schema(reader.schema, schema)  # before any byte is written
    if batch_id is not None and (done := already_published(manifest, manifest.snapshot(), batch_id, started)):
        return done
    phases: dict[str, float] = {}  # seconds per phase, summed over the chunks (CommitResult.details)
    if expectations:
        if not isinstance(data, pa.Table):
            raise InvalidArgumentError("expectations need the whole input: pass a pa.Table, not a stream")
        from lancepart.ops.quality import check

        t = time.monotonic()
        check(data, expectations)
        phases["expectations_s"] = time.monotonic() - t
    writes: dict[str, TableWrite] = {}  # by lancepart's table object id of the partition
    file_version: str | None = None  # of the tables this write creates: read with the first reservation
    created = retries = n_chunks = 0
    so = manifest.storage_options
    # a table is in memory already: one pass, so each partition gets one fragment (per
    # max_rows_per_file) however the table is chunked; a stream is cut into chunk_rows chunks
    one_pass = isinstance(data, pa.Table)
    chunks = [data] if one_pass else _chunks(reader, chunk_rows)
    loop_started = time.monotonic()
    for chunk in chunks:
        n_chunks += 1
        t = time.monotonic()
        table = conform(chunk, schema)
        groups = group_rows(partition_values(table, spec, schema), spec.id)
        phases["plan_s"] = phases.get("plan_s", 0.0) + time.monotonic() - t
        faults.checkpoint("after_plan")
        if not groups.indices:
            continue
        oids = groups.table_object_ids
        unseen = [i for i, oid in enumerate(oids) if oid not in writes]  # seen in an earlier chunk: same table
        t = time.monotonic()
        if unseen:
            # partitions with a table write into it; the others into a directory of their own, where
            # their table is created with its data and published with everything (write/create.py)
            take = pa.array(unseen, pa.int64())
            res = reserve_partitions(manifest, spec, [a.take(take) for a in groups.key_arrays], schema,
                                     max_retries=max_retries, create_missing=False)
            created += res.created
            retries += res.retries
            for i, ref in zip(unseen, res.tables, strict=True):
                writes[oids[i]] = (TableWrite(oids[i], _ids.table_location(oids[i]), keys=groups.keys.slice(i, 1))
                                   if ref is None else TableWrite(ref.object_id, ref.location,
                                                                  published=ref.read_version))
            # existing tables in an older form of the schema: brought up to date in one commit
            # (after a schema change; nothing is opened before one)
            upgraded = upgrade_tables(manifest, [(ref.object_id, ref.location) for ref in res.tables
                                                 if ref is not None], max_retries=max_retries)
            for w in (writes[oids[i]] for i in unseen):
                w.published = upgraded.get(w.object_id, w.published)
            # new tables get the namespace's file format version (docs/file-format.md), read once
            # per write: a table made of several chunks' fragments has one; appends keep each
            # table's own
            if file_version is None:
                file_version = data_storage_version(res.snapshot.metadata)
        phases["reserve_s"] = phases.get("reserve_s", 0.0) + time.monotonic() - t
        faults.checkpoint("after_reserve")

        def write_group(item: tuple[TableWrite, pa.Table], file_version: str | None = file_version) -> list:
            w, rows = item
            if w.keys is not None and one_pass:  # all its rows at once: the table is born with them
                frags, w.created = create_table_with(rows, manifest.root, w.location, schema, max_rows_per_file, so,
                                                     data_storage_version=file_version)
            elif w.keys is not None:
                frags = write_new_fragments(rows, manifest.root, w.location, schema, max_rows_per_file, so,
                                            data_storage_version=file_version)
            else:
                frags = append_fragments(manifest, w.object_id, w.location, rows, schema, published=w.published,
                                         max_rows_per_file=max_rows_per_file)
            faults.checkpoint("after_fragments")
            return frags

        # one Lance write per partition, on the bounded driver thread pool (Lance releases the GIL)
        t = time.monotonic()
        items = [(writes[oid], rows) for oid, rows in zip(oids, groups.rows(table), strict=True)]
        for (w, rows), frags in zip(items, map_threads(write_group, items), strict=True):
            w.fragments.extend(frags)
            w.rows += rows.num_rows
        phases["write_s"] = phases.get("write_s", 0.0) + time.monotonic() - t
    # reading the input (a RecordBatchReader may compute it): the loop's time outside the phases
    loop_s = time.monotonic() - loop_started
    phases["read_s"] = max(0.0, loop_s - sum(phases.get(k, 0.0) for k in ("plan_s", "reserve_s", "write_s")))
    t = time.monotonic()
    create_tables(manifest.root, schema, list(writes.values()), so)
    phases["create_tables_s"] = time.monotonic() - t
    t = time.monotonic()
    result = publish(manifest, spec.namespace, list(writes.values()), mode=mode, batch_id=batch_id,
                     partitions_created=created, max_retries=max_retries, started=started, extra_retries=retries,
                     new_tables=NewTables(manifest, spec, schema), index_on_write=index_on_write,
                     properties=properties)
    phases["publish_s"] = time.monotonic() - t
    for k in ("plan_s", "reserve_s", "write_s"):
        phases.setdefault(k, 0.0)
    result.details.update({k: round(v, 3) for k, v in phases.items()}, chunks=n_chunks,
                          fragments=sum(len(w.fragments) for w in writes.values()))
    return result
