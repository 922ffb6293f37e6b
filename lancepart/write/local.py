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
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa

from lancepart.errors import InvalidArgumentError, SchemaChangedError
from lancepart.evolution.file_format import data_storage_version
from lancepart.model import ids as _ids
from lancepart.model.constraints import constraints as declared
from lancepart.model.constraints import constraints_json
from lancepart.results import CommitResult
from lancepart.storage.error_mapping import storage_errors
from lancepart.util import faults
from lancepart.util.parallel import map_threads
from lancepart.write import constraints as _constraints
from lancepart.write.batches import check_batch_id
from lancepart.write.create import NewTables, create_table_with, create_tables, write_new_fragments
from lancepart.write.plan import Groups, check_schema, conform, group_rows, partition_values
from lancepart.write.publish import TableChange, already_published, publish
from lancepart.write.reserve import reserve_partitions
from lancepart.write.upgrade import append_fragments, upgrade_tables

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle
    from lancepart.model.spec import PartitionSpec
    from lancepart.storage.manifest import Manifest

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
    """Write ``data`` into ``ns`` in one ``__manifest`` commit:

    1. check the arguments and the input's schema, before any byte is written;
    2. a ``batch_id`` already published returns that commit's result;
    3. check the expectations (a table in memory only);
    4. per chunk: check the rows against the namespace's constraints
       (:mod:`lancepart.write.constraints`), plan the rows into partitions, reserve the partitions not seen yet, write
       each partition's rows as fragments (:class:`_LocalWrite`);
    5. create the tables of new partitions and publish everything in one commit.
    """
    started = time.monotonic()
    data, reader = _check_input(data, mode, batch_id, chunk_rows)
    schema, spec, manifest = ns.schema, ns.current_spec, ns.manifest
    check_schema(reader.schema, schema)  # before any byte is written
    if batch_id is not None and (done := already_published(manifest, manifest.snapshot(), batch_id, started)):
        return done
    op = _LocalWrite(manifest, spec, schema, one_pass=isinstance(data, pa.Table),
                     max_rows_per_file=max_rows_per_file, max_retries=max_retries,
                     constraints=ns.snapshot().metadata)
    if expectations:
        op.check_expectations(data, expectations)
    # a table in memory already: one pass, so each partition gets one fragment (per
    # max_rows_per_file) however the table is chunked; a stream is cut into chunk_rows chunks
    op.write_chunks([data] if op.one_pass else _chunks(reader, chunk_rows))
    return op.publish(mode, batch_id, started, index_on_write, properties)


def _check_input(data: pa.Table | pa.RecordBatchReader | pa.RecordBatch, mode: str, batch_id: str | None,
                 chunk_rows: int) -> tuple[pa.Table | pa.RecordBatchReader, pa.RecordBatchReader]:
    """The mode and batch id checked; ``data`` (a record batch as a table) and a reader over it."""
    check_mode(mode)
    if batch_id is not None:
        check_batch_id(batch_id)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    reader = data.to_reader(max_chunksize=chunk_rows) if isinstance(data, pa.Table) else data
    if not isinstance(reader, pa.RecordBatchReader):
        raise InvalidArgumentError(f"data must be a pa.Table, pa.RecordBatch or pa.RecordBatchReader, "
                                   f"got {type(data).__name__}")
    return data, reader


class _LocalWrite:
    """The state of one local write across its chunks: a :class:`TableChange` per partition table,
    the partitions it created, the retries it took and the seconds of each phase."""

    def __init__(self, manifest: Manifest, spec: PartitionSpec, schema: pa.Schema, *, one_pass: bool,
                 max_rows_per_file: int, max_retries: int, constraints: Mapping[str, str] | None = None) -> None:
        self.manifest, self.spec, self.schema = manifest, spec, schema
        # the constraints of the handle's snapshot: each chunk is checked before it is written,
        # and the publish reads nothing back while its snapshot declares the same ones
        self.constraints = declared(constraints or {})
        self.checked = constraints_json(constraints or {})
        self.so = self.manifest.storage_options
        self.one_pass = one_pass
        self.max_rows_per_file = max_rows_per_file
        self.max_retries = max_retries
        self.phases: dict[str, float] = {}  # seconds per phase, summed over the chunks (CommitResult.details)
        self.writes: dict[str, TableChange] = {}  # by lancepart's table object id of the partition
        self.file_version: str | None = None  # of the tables this write creates: read with the first reservation
        self.created = self.retries = self.n_chunks = 0

    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        yield
        self.phases[name] = self.phases.get(name, 0.0) + time.monotonic() - t

    def check_expectations(self, data: pa.Table | pa.RecordBatchReader, expectations: list[dict]) -> None:
        if not isinstance(data, pa.Table):
            raise InvalidArgumentError("expectations need the whole input: pass a pa.Table, not a stream")
        from lancepart.ops.quality import check

        with self._phase("expectations_s"):
            check(data, expectations)

    def write_chunks(self, chunks: Iterator[pa.Table] | list[pa.Table]) -> None:
        loop_started = time.monotonic()
        for chunk in chunks:
            self.write_chunk(chunk)
        # reading the input (a RecordBatchReader may compute it): the loop's time outside the phases
        loop_s = time.monotonic() - loop_started
        self.phases["read_s"] = max(0.0, loop_s - sum(self.phases.get(k, 0.0)
                                                      for k in ("plan_s", "constraints_s", "reserve_s", "write_s")))

    def write_chunk(self, chunk: pa.Table) -> None:
        """Plan, reserve and write one chunk's rows."""
        self.n_chunks += 1
        with self._phase("plan_s"):
            table = conform(chunk, self.schema)
        if self.constraints:
            with self._phase("constraints_s"):
                _constraints.check_rows(table, self.constraints, "write")
        with self._phase("plan_s"):
            groups = group_rows(partition_values(table, self.spec, self.schema), self.spec.id)
        faults.checkpoint("after_plan")
        if not groups.indices:
            return
        oids = groups.table_object_ids
        unseen = [i for i, oid in enumerate(oids) if oid not in self.writes]  # seen in an earlier chunk: same table
        with self._phase("reserve_s"):
            if unseen:
                self._reserve(groups, unseen)
        faults.checkpoint("after_reserve")
        # one Lance write per partition, on the bounded driver thread pool (Lance releases the GIL)
        with self._phase("write_s"):
            items = [(self.writes[oid], rows) for oid, rows in zip(oids, groups.rows(table), strict=True)]
            for (w, rows), frags in zip(items, map_threads(self._write_group, items), strict=True):
                w.fragments.extend(frags)
                w.rows += rows.num_rows

    def _reserve(self, groups: Groups, unseen: list[int]) -> None:
        """A :class:`TableChange` for each partition of ``groups`` at the positions ``unseen``."""
        oids = groups.table_object_ids
        # partitions with a table write into it; the others into a directory of their own, where
        # their table is created with its data and published with everything (write/create.py)
        take = pa.array(unseen, pa.int64())
        res = reserve_partitions(self.manifest, self.spec, [a.take(take) for a in groups.key_arrays], self.schema,
                                 max_retries=self.max_retries, create_missing=False)
        self.created += res.created
        self.retries += res.retries
        for i, ref in zip(unseen, res.tables, strict=True):
            self.writes[oids[i]] = (TableChange(oids[i], _ids.table_location(oids[i]), keys=groups.keys.slice(i, 1),
                                                checked=self.checked)
                                    if ref is None else TableChange(ref.object_id, ref.location,
                                                                   published=ref.read_version, checked=self.checked))
        # existing tables in an older form of the schema: brought up to date in one commit
        # (after a schema change; nothing is opened before one)
        upgraded = upgrade_tables(self.manifest, [(ref.object_id, ref.location) for ref in res.tables
                                                  if ref is not None], max_retries=self.max_retries)
        for w in (self.writes[oids[i]] for i in unseen):
            w.published = upgraded.get(w.object_id, w.published)
        # new tables get the namespace's file format version (docs/file-format.md), read once
        # per write: a table made of several chunks' fragments has one; appends keep each
        # table's own
        if self.file_version is None:
            self.file_version = data_storage_version(res.snapshot.metadata)

    def _write_group(self, item: tuple[TableChange, pa.Table]) -> list:
        """One partition's rows as fragments: a new table born with all of them (one pass), fragments
        in a new table's directory (a stream), or fragments appended to an existing table."""
        w, rows = item
        manifest, schema, rows_per_file = self.manifest, self.schema, self.max_rows_per_file
        if w.keys is not None and self.one_pass:  # all its rows at once: the table is born with them
            frags, w.created = create_table_with(rows, manifest.root, w.location, schema, rows_per_file, self.so,
                                                 data_storage_version=self.file_version)
        elif w.keys is not None:
            frags = write_new_fragments(rows, manifest.root, w.location, schema, rows_per_file, self.so,
                                        data_storage_version=self.file_version)
        else:
            frags = append_fragments(manifest, w.object_id, w.location, rows, schema, published=w.published,
                                     max_rows_per_file=rows_per_file)
        faults.checkpoint("after_fragments")
        return frags

    def publish(self, mode: str, batch_id: str | None, started: float, index_on_write: bool,
                properties: Mapping[str, str] | None = None) -> CommitResult:
        """Create the new partitions' tables, publish every table in one ``__manifest`` commit."""
        with self._phase("create_tables_s"):
            create_tables(self.manifest.root, self.schema, list(self.writes.values()), self.so)
        with self._phase("publish_s"):
            result = publish(self.manifest, self.spec.namespace, list(self.writes.values()), mode=mode,
                             batch_id=batch_id, partitions_created=self.created, max_retries=self.max_retries,
                             started=started, extra_retries=self.retries,
                             new_tables=NewTables(self.manifest, self.spec, self.schema), index_on_write=index_on_write,
                             properties=properties)
        for k in ("plan_s", "reserve_s", "write_s"):
            self.phases.setdefault(k, 0.0)
        result.details.update({k: round(v, 3) for k, v in self.phases.items()}, chunks=self.n_chunks,
                              fragments=sum(len(w.fragments) for w in self.writes.values()))
        return result
