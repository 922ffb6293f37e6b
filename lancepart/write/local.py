"""In-process write (no Spark): the same plan -> reserve -> fragments -> publish path.

Input is consumed in chunks of ``chunk_rows`` so memory stays bounded for a
``RecordBatchReader``; each chunk's partitions are reserved, its groups written as Lance
fragments straight into the partition tables, and the whole input published at the end
in one ``__manifest`` commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import lance
import numpy as np
import pyarrow as pa

from lancepart.error_mapping import storage_errors
from lancepart.errors import InvalidArgumentError
from lancepart.manifest import join_uri
from lancepart.parallel import map_threads
from lancepart.results import CommitResult
from lancepart.write import faults
from lancepart.write.batches import check_batch_id
from lancepart.write.plan import check_schema, conform, group_rows, partition_values
from lancepart.write.publish import TableWrite, already_published, publish
from lancepart.write.reserve import TableRef, reserve_partitions

if TYPE_CHECKING:
    from lancepart.namespace import PartitionedNamespace

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


def write_local(*args, **kwargs) -> CommitResult:
    """:func:`_write_local` with storage errors typed: a full disk, a refused directory or a root
    that is a file name the namespace root (:mod:`lancepart.error_mapping`)."""
    ns = args[0] if args else kwargs["ns"]
    with storage_errors(ns.root):
        return _write_local(*args, **kwargs)


def _write_local(
    ns: PartitionedNamespace,
    data: pa.Table | pa.RecordBatchReader | pa.RecordBatch,
    mode: str = "append",
    batch_id: str | None = None,
    *,
    chunk_rows: int = 1_000_000,
    max_rows_per_file: int = 1_048_576,
    max_retries: int = 20,
    expectations: list[dict] | None = None,
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
        from lancepart.quality import check

        t = time.monotonic()
        check(data, expectations)
        phases["expectations_s"] = time.monotonic() - t
    writes: dict[str, TableWrite] = {}
    created = retries = chunks = 0
    so = manifest.storage_options
    loop_started = time.monotonic()
    for chunk in _chunks(reader, chunk_rows):
        chunks += 1
        t = time.monotonic()
        table = conform(chunk, schema)
        groups = group_rows(partition_values(table, spec, schema), spec.id)
        phases["plan_s"] = phases.get("plan_s", 0.0) + time.monotonic() - t
        faults.checkpoint("after_plan")
        if not groups.indices:
            continue
        t = time.monotonic()
        res = reserve_partitions(manifest, spec, groups.key_arrays, schema, max_retries=max_retries)
        phases["reserve_s"] = phases.get("reserve_s", 0.0) + time.monotonic() - t
        created += res.created
        retries += res.retries
        faults.checkpoint("after_reserve")

        def write_group(item: tuple[TableRef, np.ndarray], table: pa.Table = table) -> list:
            ref, idx = item
            frags = lance.fragment.write_fragments(table.take(idx), join_uri(manifest.root, ref.location),
                                                   max_rows_per_file=max_rows_per_file, storage_options=so)
            faults.checkpoint("after_fragments")
            return frags

        # one Lance write per partition, on the bounded driver thread pool (Lance releases the GIL)
        t = time.monotonic()
        items = list(zip(res.tables, groups.indices, strict=True))
        for (ref, idx), frags in zip(items, map_threads(write_group, items), strict=True):
            w = writes.setdefault(ref.object_id, TableWrite(ref.object_id, ref.location))
            w.fragments.extend(frags)
            w.rows += len(idx)
        phases["write_s"] = phases.get("write_s", 0.0) + time.monotonic() - t
    # reading the input (a RecordBatchReader may compute it): the loop's time outside the phases
    loop_s = time.monotonic() - loop_started
    phases["read_s"] = max(0.0, loop_s - sum(phases.get(k, 0.0) for k in ("plan_s", "reserve_s", "write_s")))
    t = time.monotonic()
    result = publish(manifest, spec.namespace, list(writes.values()), mode=mode, batch_id=batch_id,
                     partitions_created=created, max_retries=max_retries, started=started, extra_retries=retries)
    phases["publish_s"] = time.monotonic() - t
    for k in ("plan_s", "reserve_s", "write_s"):
        phases.setdefault(k, 0.0)
    result.details.update({k: round(v, 3) for k, v in phases.items()}, chunks=chunks,
                          fragments=sum(len(w.fragments) for w in writes.values()))
    return result
