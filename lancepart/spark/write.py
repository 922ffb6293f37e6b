"""Spark front end of the write path (spec "Transaction"; DESIGN-NOTES §8).

1. plan: executors compute the partition tuples (``mapInArrow``); only distinct tuples
   reach the driver, which reserves new partitions in one ``__manifest`` commit;
2. write: executors compute the partition values again, group each task's rows by
   partition (one sort, Arrow) and write Lance fragments straight into each partition
   table's directory with ``lance.fragment.write_fragments``, one partition at a time, so
   a task never holds more than one open writer; only fragment metadata (JSON) travels
   back;
3. publish: the driver commits each touched table and makes ONE ``__manifest`` commit.

A task that fails leaves only unreferenced files; nothing is published unless every task
succeeded. Large partitions are split naturally: every task writes its own fragments.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from lancepart.errors import LancepartError
from lancepart.manifest import join_uri
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.write.local import check_mode
from lancepart.write.plan import check_schema
from lancepart.write.publish import TableWrite, committed_batch, fragments_from_json, publish
from lancepart.write.reserve import reserve_partitions

log = logging.getLogger("lancepart.spark")

FRAGMENT_ROW_SCHEMA = "object_id string, fragments string, num_rows long"


class NonDeterministicInputError(LancepartError):
    """The input produced a partition in the write pass that the planning pass did not see."""


def _arrow_schema_of(df) -> pa.Schema:
    """The Arrow schema Spark hands to ``mapInArrow`` for ``df`` (TIMESTAMP carries the session zone)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    tz = df.sparkSession.conf.get("spark.sql.session.timeZone")
    return to_arrow_schema(df.schema, timezone=tz)


def _write_task(root: str, spec_json: str, schema_bytes: bytes, locations: Mapping[str, str],
                storage_options: Mapping[str, str] | None, flush_rows: int, max_rows_per_file: int):
    """The executor function: Arrow batches in, one row per written partition group out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import lance

        from lancepart.spec import PartitionSpec
        from lancepart.write.plan import conform, group_rows, partition_values

        spec = PartitionSpec.from_json(spec_json)
        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        so = dict(storage_options) if storage_options else None
        pending: list[pa.RecordBatch] = []
        size = 0

        def flush() -> pa.RecordBatch | None:
            table = conform(pa.Table.from_batches(pending), schema)
            groups = group_rows(partition_values(table, spec, schema), spec.id)
            oids, frags, counts = [], [], []
            for oid, idx in zip(groups.table_object_ids, groups.indices, strict=True):
                location = locations.get(oid)
                if location is None:
                    raise NonDeterministicInputError(
                        f"partition table {oid} appeared while writing but not while planning: the input is not "
                        f"deterministic; persist or checkpoint the DataFrame before writing it")
                written = lance.fragment.write_fragments(table.take(idx), join_uri(root, location),
                                                         max_rows_per_file=max_rows_per_file, storage_options=so)
                oids.append(oid)
                frags.append(json.dumps([f.to_json() for f in written]))
                counts.append(len(idx))
            if not oids:
                return None
            return pa.RecordBatch.from_arrays([pa.array(oids), pa.array(frags), pa.array(counts, pa.int64())],
                                              names=["object_id", "fragments", "num_rows"])

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


def write(
    df,
    root: str,
    mode: str = "append",
    batch_id: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    *,
    persist: bool = True,
    flush_rows: int = 1_000_000,
    max_rows_per_file: int = 1_048_576,
    max_retries: int = 20,
    expectations: list[dict[str, Any]] | None = None,
) -> CommitResult:
    """Write a Spark DataFrame into the partitioned namespace at ``root`` and publish it in one
    ``__manifest`` commit.

    ``mode``: ``"append"`` or ``"overwrite"`` (dynamic partition overwrite). A ``batch_id``
    that is already published makes this a no-op with ``skipped=True``. ``persist`` keeps
    the input between the planning and the writing pass so both see the same rows.
    ``expectations`` run as a data-quality gate before anything is written.

    >>> # from lancepart import spark as lps; lps.write(df, "/data/events", batch_id="2025-12-10")
    """
    started = time.monotonic()
    check_mode(mode)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    schema, spec, manifest = ns.schema, ns.current_spec, ns.manifest
    check_schema(_arrow_schema_of(df), schema)  # before any byte is written
    if batch_id is not None:
        snap = manifest.snapshot()
        if committed_batch(snap, batch_id) is not None:
            log.info("batch %s already published; skipping", batch_id)
            return CommitResult(manifest_version=snap.version, batch_id=batch_id, skipped=True,
                                seconds=round(time.monotonic() - started, 3))
    if expectations:
        from lancepart.quality import check

        check(df, expectations)
    cached = persist and not df.storageLevel.useMemory and not df.storageLevel.useDisk
    if cached:
        df = df.persist()
    try:
        from lancepart.spark.plan import distinct_partitions

        phases: dict[str, float] = {}
        t = time.monotonic()
        parts = distinct_partitions(df, spec, schema)
        phases["plan_s"] = round(time.monotonic() - t, 3)
        log.info("planned %d partitions in %.2fs", parts.num_rows, phases["plan_s"])
        if parts.num_rows == 0:
            return publish(manifest, spec.namespace, [], mode=mode, batch_id=batch_id, started=started,
                           max_retries=max_retries)
        t = time.monotonic()
        res = reserve_partitions(manifest, spec, [parts.column(f.column_name).combine_chunks() for f in spec.fields],
                                 schema, max_retries=max_retries)
        phases["reserve_s"] = round(time.monotonic() - t, 3)
        log.info("reserved %d new partitions (%d retries)", res.created, res.retries)
        locations = {t.object_id: t.location for t in res.tables}
        task = _write_task(manifest.root, spec.to_json_string(), schema.serialize().to_pybytes(), locations,
                           manifest.storage_options, flush_rows, max_rows_per_file)
        t = time.monotonic()
        rows = df.mapInArrow(task, FRAGMENT_ROW_SCHEMA).collect()
        phases["write_s"] = round(time.monotonic() - t, 3)
    finally:
        if cached:
            df.unpersist()
    writes: dict[str, TableWrite] = {}
    for r in rows:
        w = writes.setdefault(r["object_id"], TableWrite(r["object_id"], locations[r["object_id"]]))
        w.fragments.extend(fragments_from_json(json.loads(r["fragments"])))
        w.rows += r["num_rows"]
    log.info("wrote %d fragments into %d partition tables", sum(len(w.fragments) for w in writes.values()),
             len(writes))
    t = time.monotonic()
    result = publish(manifest, spec.namespace, list(writes.values()), mode=mode, batch_id=batch_id,
                     partitions_created=res.created, max_retries=max_retries, started=started,
                     extra_retries=res.retries)
    phases["publish_s"] = round(time.monotonic() - t, 3)
    phases["fragments"] = sum(len(w.fragments) for w in writes.values())
    result.details.update(phases)
    return result
