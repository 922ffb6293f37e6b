"""Spark front end of the write path (spec "Transaction"; docs/design.md §8).

One pass over the input:

1. executors compute the partition values of their rows (vectorised transforms inside
   ``mapInArrow``), group each task's rows by partition (one Arrow sort) and write Lance
   fragments, one partition at a time, so a task never holds more than one open writer. A
   partition that already has a table is written into that table's directory; a new one into
   a directory this job names itself (``<hash of job id and object id>_<object_id>``), so no
   driver round trip is needed. Only fragment metadata (and the values of new partitions)
   travel back;
2. the driver creates each new partition's table with every task's fragments as its first
   version (:mod:`lancepart.write.create`);
3. the driver commits each touched existing table and publishes everything in ONE
   ``__manifest`` commit, which also adds the new partitions' rows. If a concurrent writer
   published one of the new partitions first, its row wins and this job moves its rows for
   that partition into the winner's table before publishing.

A task that fails leaves only unreferenced files; nothing is published unless every task
succeeded. Large partitions are split naturally: every task writes its own fragments.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from lancepart.arguments import CommitOptions, commit_settings
from lancepart.deprecation import keyword_only
from lancepart.errors import InvalidArgumentError
from lancepart.evolution.file_format import data_storage_version
from lancepart.model.constraints import constraints_json
from lancepart.model.ids import check_location
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.spark.registry import register
from lancepart.spark.tasks import options_value, spark_action
from lancepart.spark.workers import check_workers
from lancepart.storage.error_mapping import public_operation
from lancepart.storage.manifest import join_uri
from lancepart.util import faults
from lancepart.write.batches import check_batch_id
from lancepart.write.create import NewTables, create_tables
from lancepart.write.local import check_mode
from lancepart.write.plan import check_schema
from lancepart.write.publish import TableChange, already_published, fragments_from_json, publish

log = logging.getLogger("lancepart.spark")

FRAGMENT_ROW_SCHEMA = "object_id string, location string, fragments string, num_rows long, keys binary"


def job_location(job_id: str, object_id: str) -> str:
    """The directory a job uses for a partition table it creates (docs/design.md §5 form)."""
    return f"{hashlib.sha256(f'{job_id}/{object_id}'.encode()).hexdigest()[:8]}_{object_id}"


def existing_tables(snap, spec_namespace: str) -> dict[str, str]:
    """``{object_id: location}`` of the partition tables ``snap`` publishes under the spec
    namespace ``spec_namespace`` (``v<N>``): where the tasks append; any other partition gets a
    table of its own."""
    tables = snap.table_pins()
    prefix = spec_namespace + "$"
    return {oid: loc for oid, loc in zip(tables.column("object_id").to_pylist(),
                                         tables.column("location").to_pylist(), strict=True) if oid.startswith(prefix)}


def _arrow_schema_of(df) -> pa.Schema:
    """The Arrow schema Spark hands to ``mapInArrow`` for ``df`` (TIMESTAMP carries the session zone)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    tz = df.sparkSession.conf.get("spark.sql.session.timeZone")
    return to_arrow_schema(df.schema, timezone=tz)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _write_task(root: str, spec_json: str, schema_bytes: bytes, existing: Mapping[str, str], job_id: str,
                storage_options: Mapping[str, str] | None, flush_rows: int, max_rows_per_file: int,
                write_threads: int = 8, data_storage_version: str | None = None, constraints: str = "{}",
                what: str = "lps.write"):
    """The executor function: Arrow batches in, one row per written partition group out. The
    partition groups of a flush are written ``write_threads`` at a time (Lance writes without
    the GIL; on an object store each group is a few round trips), all on the process's one
    Lance session. New tables get the file format version ``data_storage_version`` (None: the
    namespace's, read when the task first writes a new table; docs/file-format.md). Each flush's
    rows are checked against ``constraints`` (the CHECK constraints of the snapshot the job
    planned on, as JSON) before they are written."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        writer = _TaskWriter(root, spec_json, schema_bytes, existing, job_id, storage_options, max_rows_per_file,
                             write_threads, data_storage_version, json.loads(constraints), what)
        pending: list[pa.RecordBatch] = []
        size = 0
        for batch in batches:
            pending.append(batch)
            size += batch.num_rows
            if size >= flush_rows:
                out = writer.flush(pending)
                pending, size = [], 0
                if out is not None:
                    yield out
        if size:
            out = writer.flush(pending)
            if out is not None:
                yield out

    return run


_UNREAD = object()


class _TaskWriter:
    """What one executor task of :func:`_write_task` writes with: the spec, the schema, the
    storage options and the file format version of new tables (read once per task, and only by
    a task that creates a table)."""

    def __init__(self, root: str, spec_json: str, schema_bytes: bytes, existing: Mapping[str, str], job_id: str,
                 storage_options: Mapping[str, str] | None, max_rows_per_file: int, write_threads: int,
                 data_storage_version: str | None, constraints: Mapping[str, str] | None = None,
                 what: str = "lps.write") -> None:
        from lancepart.model.spec import PartitionSpec
        from lancepart.storage.manifest import Manifest

        self.root, self.existing, self.job_id = root, existing, job_id
        self.max_rows_per_file, self.write_threads = max_rows_per_file, write_threads
        self.data_storage_version = data_storage_version
        self.spec = PartitionSpec.from_json(spec_json)
        self.schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        self.so = options_value(storage_options)
        self.manifest = Manifest(root, self.so)
        self._new_table_version: Any = _UNREAD
        self.constraints, self.what = dict(constraints or {}), what
        self._lock = threading.Lock()

    def new_table_version(self) -> str:
        with self._lock:
            if self._new_table_version is _UNREAD:
                from lancepart.evolution.file_format import namespace_data_storage_version

                self._new_table_version = self.data_storage_version or namespace_data_storage_version(self.root,
                                                                                                      self.so)
            return self._new_table_version

    def flush(self, pending: list[pa.RecordBatch]) -> pa.RecordBatch | None:
        """Write the rows of ``pending`` by partition; one output row per partition group."""
        from lancepart.util.parallel import map_threads
        from lancepart.write.plan import conform, group_rows, partition_values

        table = conform(pa.Table.from_batches(pending), self.schema)
        if self.constraints:
            from lancepart.write.constraints import check_rows

            check_rows(table, self.constraints, self.what)
        groups = group_rows(partition_values(table, self.spec, self.schema), self.spec.id)
        items = [(oid, rows, groups.keys.slice(i, 1))
                 for i, (oid, rows) in enumerate(zip(groups.table_object_ids, groups.rows(table), strict=True))]
        written = map_threads(self.write_group, items, max_workers=max(1, self.write_threads))
        if not written:
            return None
        oids, locations, nums, keys, fragments = (list(c) for c in zip(*written, strict=True))
        return pa.RecordBatch.from_pydict(
            {"object_id": oids, "location": locations, "fragments": fragments, "num_rows": nums, "keys": keys},
            schema=pa.schema([("object_id", pa.utf8()), ("location", pa.utf8()), ("fragments", pa.utf8()),
                              ("num_rows", pa.int64()), ("keys", pa.binary())]))

    def write_group(self, item: tuple[str, pa.Table, pa.Table]) -> tuple[str, str, int, bytes | None, str]:
        """One partition group's rows as fragments: appended to its table, or, for a partition
        without one, into the directory this job names for it."""
        from lancepart.storage.error_mapping import storage_errors
        from lancepart.write.create import write_new_fragments
        from lancepart.write.upgrade import append_fragments

        oid, rows, key = item
        root = self.root
        location = self.existing.get(oid)
        keys = None
        if location is not None:  # a hand-edited __manifest row must not lead outside the root
            check_location(location, oid, root)
        else:
            location, keys = job_location(self.job_id, oid), _ipc(key)
        # a full or forbidden store: a typed error naming the table directory (in the task's failure)
        with storage_errors(join_uri(root, location), table=oid):
            if keys is not None:  # no table there yet: the driver creates it with every task's fragments
                written = write_new_fragments(rows, root, location, self.schema, self.max_rows_per_file, self.so,
                                              data_storage_version=self.new_table_version())
            else:
                written = append_fragments(self.manifest, oid, location, rows, self.schema,
                                           max_rows_per_file=self.max_rows_per_file)
        return oid, location, rows.num_rows, keys, json.dumps([f.to_json() for f in written])


@contextmanager
def _released(df, cached: bool) -> Iterator[None]:
    """Unpersist ``df`` on leaving, if this write cached it."""
    try:
        yield
    finally:
        if cached:
            df.unpersist()


@keyword_only("mode", "batch_id", "storage_options")
@public_operation("lps.write", root_arg=1)
def write(
    df,
    root: str,
    *,
    mode: str = "append",
    expectations: list[dict[str, Any]] | None = None,
    flush_rows: int = 1_000_000,
    max_rows_per_file: int = 1_048_576,
    index_on_write: bool = True,
    write_threads: int = 8,
    batch_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    commit: CommitOptions | None = None,
    max_retries: int | None = None,
) -> CommitResult:
    """Write a Spark DataFrame into the partitioned namespace at ``root`` and publish it in one
    ``__manifest`` commit.

    ``mode``: ``"append"`` or ``"overwrite"``, a **dynamic partition overwrite**: only the
    partitions the input has rows for are replaced, the others keep their rows. A ``batch_id``
    that is already published makes this a no-op with ``skipped=True``. ``expectations``
    run as a data-quality gate (:mod:`lancepart.ops.quality`) before anything is written.
    ``flush_rows`` bounds the rows a task buffers before writing its fragments;
    ``write_threads`` is how many of a flush's partition groups a task writes at once.
    ``index_on_write``: bring the declared indexes of the touched tables up to date before the
    publish (docs/indexes.md). ``commit``: :class:`~lancepart.arguments.CommitOptions`.

    1. check the arguments, the input's schema and the Spark workers, before any byte is written;
       a ``batch_id`` already published returns that commit's result;
    2. the quality gate (:func:`_quality_gate`);
    3. the tasks write the fragments (:func:`_write_task`, run by :func:`_run_tasks`);
    4. the driver creates the new tables and publishes (:func:`publish_fragments`).

    Example::

        from lancepart import spark as lps
        lps.write(df, "/data/events", batch_id="2025-12-10")
    """
    register(df.sparkSession, strict=False)  # the `lancepart` data source, for format("lancepart") in the same session
    started = time.monotonic()
    _check_options(mode, batch_id, write_threads)
    retries, props = commit_settings(commit, max_retries)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    schema, spec, manifest = ns.schema, ns.current_spec, ns.manifest
    check_schema(_arrow_schema_of(df), schema)  # before any byte is written
    check_workers(df.sparkSession)  # before the quality gate, whose expectations broken workers would all "fail"
    snap = ns.snapshot()  # read at open (its table rows too), retried if a cleanup removed it meanwhile
    file_version = data_storage_version(snap.metadata)  # of new tables; a bad property fails before any write
    if batch_id is not None and (done := already_published(manifest, snap, batch_id, started)):
        return done
    phases: dict[str, Any] = {}
    # the gate's pass over the input fills a cache that the write then reads: the source (a CSV to
    # parse, a remote Parquet to fetch) is computed once for both; released when the write's job ends
    cached = bool(expectations) and not df.is_cached
    if expectations:
        _quality_gate(df, expectations, cached, phases)
    existing = existing_tables(snap, spec.namespace)
    checked = constraints_json(snap.metadata)  # the tasks check their rows against these
    t = time.monotonic()
    rows = _run_tasks(df, manifest, spec, schema, existing, cached, flush_rows=flush_rows,
                      max_rows_per_file=max_rows_per_file, write_threads=write_threads, file_version=file_version,
                      constraints=checked)
    phases["write_s"] = round(time.monotonic() - t, 3)
    return publish_fragments(manifest, spec, schema, rows, mode=mode, batch_id=batch_id, max_retries=retries,
                             started=started, phases=phases, index_on_write=index_on_write, properties=props,
                             checked=checked)


def _check_options(mode: str, batch_id: str | None, write_threads: int) -> None:
    check_mode(mode)
    if batch_id is not None:
        check_batch_id(batch_id)
    if not isinstance(write_threads, int) or isinstance(write_threads, bool) or write_threads < 1:
        raise InvalidArgumentError(f"write_threads must be a positive int, got {write_threads!r}")


def _quality_gate(df, expectations: list[dict[str, Any]], cached: bool, phases: dict[str, Any]) -> None:
    """Check ``expectations`` on ``df`` (persisted first when ``cached``: this write caches it, and
    unpersists it if the gate fails); its seconds into ``phases``."""
    from lancepart.ops.quality import check

    t = time.monotonic()
    if cached:
        df.persist()
    try:
        report = check(df, expectations)
    except BaseException:
        if cached:
            df.unpersist()
        raise
    phases["expectations_s"] = round(time.monotonic() - t, 3)
    # of which computing the input into the cache the write reads next (the write's own cost
    # without a gate); the rest is the gate proper: collecting its columns and evaluating
    phases["expectations_input_s"] = round(report.input_seconds, 3)


def _run_tasks(df, manifest, spec, schema: pa.Schema, existing: Mapping[str, str], cached: bool, *, flush_rows: int,
               max_rows_per_file: int, write_threads: int, file_version: str | None, constraints: str = "{}") -> list:
    """Run :func:`_write_task` over ``df`` under a new job id; the rows the tasks returned. ``df``
    is unpersisted at the end if this write cached it."""
    job_id = uuid.uuid4().hex
    so = manifest.storage_options
    with spark_action(df.sparkSession, so) as shipped, _released(df, cached):
        task = _write_task(manifest.root, spec.to_json_string(), schema.serialize().to_pybytes(), existing, job_id,
                           shipped, flush_rows, max_rows_per_file, write_threads, file_version, constraints)
        return df.mapInArrow(task, FRAGMENT_ROW_SCHEMA).collect()


def table_writes(rows, checked: str | None = None) -> dict[str, TableChange]:
    """One :class:`TableChange` per partition table from the rows :func:`_write_task` returned;
    ``checked``: the constraints the tasks checked the rows against (TableChange.checked)."""
    writes: dict[str, TableChange] = {}
    for r in rows:
        w = writes.setdefault(r["object_id"], TableChange(r["object_id"], r["location"], checked=checked))
        w.fragments.extend(fragments_from_json(json.loads(r["fragments"])))
        w.rows += r["num_rows"]
        if r["keys"] is not None and w.keys is None:  # a new partition: its values, to add its rows
            w.keys = pa.ipc.open_stream(r["keys"]).read_all()
    return writes


def publish_fragments(manifest, spec, schema: pa.Schema, rows, *, mode: str, batch_id: str | None,
                      max_retries: int, started: float, phases: dict[str, Any],
                      index_on_write: bool = True, properties: Mapping[str, str] | None = None,
                      checked: str | None = None) -> CommitResult:
    """The driver's part after the tasks: ``rows`` are what :func:`_write_task` returned (Spark
    rows or dicts with the same keys); create the new partitions' tables, publish everything in
    one ``__manifest`` commit and log the result. Shared by :func:`write` and the ``lancepart``
    data source (:mod:`lancepart.spark.datasource`)."""
    faults.checkpoint("after_fragments")
    writes = table_writes(rows, checked)
    t = time.monotonic()
    # each new partition's table is created with every task's fragments, and published (or, if
    # another writer published the partition first, its rows moved there) by the publish below
    create_tables(manifest.root, schema, list(writes.values()), manifest.storage_options)
    phases["reserve_s"] = round(time.monotonic() - t, 3)
    faults.checkpoint("after_reserve")
    t = time.monotonic()
    new_tables = NewTables(manifest, spec, schema)
    result = publish(manifest, spec.namespace, list(writes.values()), mode=mode, batch_id=batch_id,
                     max_retries=max_retries, started=started, new_tables=new_tables,
                     index_on_write=index_on_write, properties=properties)
    if new_tables.adopted:
        phases["adopted"] = new_tables.adopted
    phases["publish_s"] = round(time.monotonic() - t, 3)
    phases["fragments"] = sum(len(w.fragments) for w in writes.values())  # as written by the tasks
    result.details.update(phases)
    log.info("published %s", json.dumps(result.to_dict(), default=str))
    return result
