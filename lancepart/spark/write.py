"""Spark front end of the write path (spec "Transaction"; docs/decisions.md §8).

One pass over the input:

1. executors compute the partition values of their rows (vectorised transforms inside
   ``mapInArrow``), group each task's rows by partition (one Arrow sort) and write Lance
   fragments with ``lance.fragment.write_fragments``, one partition at a time, so a task
   never holds more than one open writer. A partition that already has a table is written
   into that table's directory; a new one into a directory this job names itself
   (``<hash of job id and object id>_<object_id>``), so no driver round trip is needed.
   Only fragment metadata (and the values of new partitions) travel back;
2. the driver creates the new partitions' tables (empty) and reserves them in one
   ``__manifest`` commit. If a concurrent writer reserved one of them first, its row wins
   and this job rewrites its rows for that partition into the winner's table;
3. the driver commits each touched table and publishes them all in ONE ``__manifest`` commit.

A task that fails leaves only unreferenced files; nothing is published unless every task
succeeded. Large partitions are split naturally: every task writes its own fragments.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation

from lancepart.ids import check_location
from lancepart.manifest import commit_lock, join_uri
from lancepart.namespace import PartitionedNamespace
from lancepart.parallel import map_threads
from lancepart.results import CommitResult
from lancepart.spark.tasks import options_value, spark_action
from lancepart.write import faults
from lancepart.write.batches import check_batch_id
from lancepart.write.local import check_mode
from lancepart.write.plan import check_schema
from lancepart.write.publish import TableWrite, already_published, fragments_from_json, publish
from lancepart.write.reserve import remove_table_dir, reserve_partitions

log = logging.getLogger("lancepart.spark")

FRAGMENT_ROW_SCHEMA = "object_id string, location string, fragments string, num_rows long, keys binary"


def job_location(job_id: str, object_id: str) -> str:
    """The directory a job uses for a partition table it creates (docs/decisions.md §5 form)."""
    return f"{hashlib.sha256(f'{job_id}/{object_id}'.encode()).hexdigest()[:8]}_{object_id}"


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
                storage_options: Mapping[str, str] | None, flush_rows: int, max_rows_per_file: int):
    """The executor function: Arrow batches in, one row per written partition group out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lancepart.error_mapping import storage_errors
        from lancepart.spec import PartitionSpec
        from lancepart.write.plan import conform, group_rows, partition_values

        spec = PartitionSpec.from_json(spec_json)
        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        so = options_value(storage_options)
        pending: list[pa.RecordBatch] = []
        size = 0

        def flush() -> pa.RecordBatch | None:
            table = conform(pa.Table.from_batches(pending), schema)
            groups = group_rows(partition_values(table, spec, schema), spec.id)
            out: dict[str, list] = {"object_id": [], "location": [], "fragments": [], "num_rows": [], "keys": []}
            for i, (oid, idx) in enumerate(zip(groups.table_object_ids, groups.indices, strict=True)):
                location = existing.get(oid)
                keys = None
                if location is not None:  # a hand-edited __manifest row must not lead outside the root
                    check_location(location, oid, root)
                else:
                    location, keys = job_location(job_id, oid), _ipc(groups.keys.slice(i, 1))
                # a full or forbidden store: a typed error naming the table directory (in the task's failure)
                with storage_errors(join_uri(root, location), table=oid):
                    written = lance.fragment.write_fragments(table.take(idx), join_uri(root, location),
                                                             schema=schema, max_rows_per_file=max_rows_per_file,
                                                             storage_options=so)
                for k, v in (("object_id", oid), ("location", location), ("num_rows", len(idx)), ("keys", keys),
                             ("fragments", json.dumps([f.to_json() for f in written]))):
                    out[k].append(v)
            if not out["object_id"]:
                return None
            return pa.RecordBatch.from_pydict(out, schema=pa.schema([
                ("object_id", pa.utf8()), ("location", pa.utf8()), ("fragments", pa.utf8()),
                ("num_rows", pa.int64()), ("keys", pa.binary())]))

        for batch in batches:
            pending.append(batch)
            size += batch.num_rows
            if size >= flush_rows:
                out = flush()
                pending, size = [], 0
                if out is not None:
                    yield out
        if size:
            out = flush()
            if out is not None:
                yield out

    return run


def _create_empty(root: str, location: str, schema: pa.Schema, so: Mapping[str, str] | None) -> int:
    """Create the (empty) table in a directory that already holds this job's data files."""
    uri = join_uri(root, location)
    so_ = dict(so) if so else None
    return lance.LanceDataset.commit(uri, LanceOperation.Overwrite(schema, []), storage_options=so_,
                                     commit_lock=commit_lock(uri, so_)).version


def _move_into(root: str, w: TableWrite, winner: str, schema: pa.Schema, so: Mapping[str, str] | None) -> None:
    """A concurrent writer created the partition first: rewrite our rows into its table."""
    so_ = dict(so) if so else None
    uri = join_uri(root, w.location)
    ours = lance.LanceDataset.commit(uri, LanceOperation.Update(removed_fragment_ids=[], new_fragments=w.fragments),
                                     read_version=1, storage_options=so_, commit_lock=commit_lock(uri, so_))
    w.fragments = lance.fragment.write_fragments(ours.to_table(), join_uri(root, winner), schema=schema,
                                                 storage_options=so_)
    remove_table_dir(root, w.location, so)  # local or object store; leftovers are unreferenced
    w.location = winner


@contextmanager
def _released(df, cached: bool) -> Iterator[None]:
    """Unpersist ``df`` on leaving, if this write cached it."""
    try:
        yield
    finally:
        if cached:
            df.unpersist()


def write(
    df,
    root: str,
    mode: str = "append",
    batch_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    *,
    flush_rows: int = 1_000_000,
    max_rows_per_file: int = 1_048_576,
    max_retries: int = 20,
    expectations: list[dict[str, Any]] | None = None,
) -> CommitResult:
    """Write a Spark DataFrame into the partitioned namespace at ``root`` and publish it in one
    ``__manifest`` commit.

    ``mode``: ``"append"`` or ``"overwrite"`` (dynamic partition overwrite). A ``batch_id``
    that is already published makes this a no-op with ``skipped=True``. ``expectations``
    run as a data-quality gate (:mod:`lancepart.quality`) before anything is written.
    ``flush_rows`` bounds the rows a task buffers before writing its fragments.

    >>> # from lancepart import spark as lps; lps.write(df, "/data/events", batch_id="2025-12-10")
    """
    started = time.monotonic()
    check_mode(mode)
    if batch_id is not None:
        check_batch_id(batch_id)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    schema, spec, manifest = ns.schema, ns.current_spec, ns.manifest
    check_schema(_arrow_schema_of(df), schema)  # before any byte is written
    snap = manifest.snapshot()
    if batch_id is not None and (done := already_published(manifest, snap, batch_id, started)):
        return done
    phases: dict[str, Any] = {}
    # the gate's pass over the input fills a cache that the write then reads: the source (a CSV to
    # parse, a remote Parquet to fetch) is computed once for both; released when the write's job ends
    cached = bool(expectations) and not df.is_cached
    if expectations:
        from lancepart.quality import check

        t = time.monotonic()
        if cached:
            df.persist()
        try:
            check(df, expectations)
        except BaseException:
            if cached:
                df.unpersist()
            raise
        phases["expectations_s"] = round(time.monotonic() - t, 3)
    tables = snap.tables()
    prefix = spec.namespace + "$"
    existing = {oid: loc for oid, loc in zip(tables.column("object_id").to_pylist(),
                                             tables.column("location").to_pylist(), strict=True)
                if oid.startswith(prefix)}
    job_id = uuid.uuid4().hex
    so = manifest.storage_options
    t = time.monotonic()
    with spark_action(df.sparkSession, so) as shipped, _released(df, cached):
        task = _write_task(manifest.root, spec.to_json_string(), schema.serialize().to_pybytes(), existing, job_id,
                           shipped, flush_rows, max_rows_per_file)
        rows = df.mapInArrow(task, FRAGMENT_ROW_SCHEMA).collect()
    phases["write_s"] = round(time.monotonic() - t, 3)
    faults.checkpoint("after_fragments")
    writes: dict[str, TableWrite] = {}
    new_keys: dict[str, bytes] = {}
    for r in rows:
        w = writes.setdefault(r["object_id"], TableWrite(r["object_id"], r["location"]))
        w.fragments.extend(fragments_from_json(json.loads(r["fragments"])))
        w.rows += r["num_rows"]
        if r["keys"] is not None:
            new_keys.setdefault(r["object_id"], r["keys"])
    t = time.monotonic()
    created = retries = 0
    if new_keys:
        oids = list(new_keys)
        keys = pa.concat_tables([pa.ipc.open_stream(new_keys[o]).read_all() for o in oids])
        versions = map_threads(lambda o: _create_empty(manifest.root, writes[o].location, schema, so), oids)
        prepared = {o: (writes[o].location, v) for o, v in zip(oids, versions, strict=True)}
        res = reserve_partitions(manifest, spec, [c.combine_chunks() for c in keys.columns], schema,
                                 max_retries=max_retries, prepared=prepared)
        created, retries = res.created, res.retries
        # a partition that exists (a concurrent writer's, or another writer's found by its values
        # under its own object_id, possibly declared only): move our rows into its table
        lost = [(o, ref) for o, ref in zip(oids, res.tables, strict=True) if ref.location != writes[o].location]
        map_threads(lambda item: _move_into(manifest.root, writes[item[0]], item[1].location, schema, so), lost)
        for o, ref in lost:
            if ref.object_id != o:
                w = writes.pop(o)
                into = writes.setdefault(ref.object_id, TableWrite(ref.object_id, ref.location))
                into.fragments.extend(w.fragments)
                into.rows += w.rows
        if lost:
            phases["adopted"] = len(lost)
    phases["reserve_s"] = round(time.monotonic() - t, 3)
    faults.checkpoint("after_reserve")
    t = time.monotonic()
    result = publish(manifest, spec.namespace, list(writes.values()), mode=mode, batch_id=batch_id,
                     partitions_created=created, max_retries=max_retries, started=started, extra_retries=retries)
    phases["publish_s"] = round(time.monotonic() - t, 3)
    phases["fragments"] = sum(len(w.fragments) for w in writes.values())
    result.details.update(phases)
    log.info("published %s", json.dumps(result.to_dict(), default=str))
    return result
