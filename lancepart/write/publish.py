"""Publish a job: commit each touched partition table, then ONE ``__manifest`` commit that
moves ``read_version`` of all of them (spec "Transaction / Commit Behavior"; DESIGN-NOTES §8).

The manifest commit is optimistic (see :mod:`lancepart.manifest`). Its mutation is the
rebase: on every attempt it re-reads each touched table's published version from the
snapshot; a table whose published version is no longer the one our table commit was
based on (a concurrent job published first, or restored our version away) is committed
again on top of the new published version, so ``read_version`` only moves forward and
no one's fragments are lost or published twice.

Exactly-once batches: a ``batch_id`` is recorded in the same commit, as a property
``lancepart.batch.<id>`` of the spec version namespace row (``v<N>``) it was written under.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from lance.fragment import FragmentMetadata

from lancepart.errors import CommitConflictError, LancepartError, PartitionPinnedError
from lancepart.manifest import Manifest, ManifestSnapshot
from lancepart.parallel import map_threads
from lancepart.results import CommitResult
from lancepart.write import faults
from lancepart.write.guard import check_files_present, commit_on_published
from lancepart.write.tables import commit_table

log = logging.getLogger("lancepart.write")

BATCH_PREFIX = "lancepart.batch."
MAX_BATCH_IDS = 10_000  # per spec version namespace row; oldest dropped first


@dataclass
class TableWrite:
    """Fragments a job wrote into one partition table."""

    object_id: str
    location: str
    fragments: list[FragmentMetadata] = field(default_factory=list)
    rows: int = 0


def batch_key(batch_id: str) -> str:
    return BATCH_PREFIX + batch_id


def committed_batch(snap: ManifestSnapshot, batch_id: str) -> str | None:
    """The record of ``batch_id`` if a published commit carries it, else None."""
    key = batch_key(batch_id)
    rows = snap.rows
    ns_rows = rows.filter(pc.and_(pc.equal(rows.column("object_type"), "namespace"),
                                  pc.invert(pc.match_substring(rows.column("object_id"), "$"))))
    for md in ns_rows.column("metadata").to_pylist():
        if md and key in md:  # cheap substring test first
            value = json.loads(md).get(key)
            if value is not None:
                return value
    return None


def _record_batch(rows: pa.Table, spec_namespace: str, batch_id: str, manifest_version: int) -> pa.Table:
    index = rows.column("object_id").to_pylist().index(spec_namespace)
    props = json.loads(rows.column("metadata")[index].as_py() or "{}")
    props[batch_key(batch_id)] = json.dumps({"manifest_version": manifest_version, "committed_at": time.time()})
    batches = sorted((k for k in props if k.startswith(BATCH_PREFIX)),
                     key=lambda k: json.loads(props[k]).get("committed_at", 0))
    for k in batches[:-MAX_BATCH_IDS]:
        del props[k]
    md = rows.column("metadata").to_pylist()
    md[index] = json.dumps(props, separators=(",", ":"), sort_keys=True)
    i = rows.schema.get_field_index("metadata")
    return rows.set_column(i, rows.schema.field(i), pa.array(md, pa.utf8()))


def publish(
    manifest: Manifest,
    spec_namespace: str,
    writes: Sequence[TableWrite],
    *,
    mode: str = "append",
    batch_id: str | None = None,
    partitions_created: int = 0,
    max_retries: int = 20,
    started: float | None = None,
    extra_retries: int = 0,
) -> CommitResult:
    """Commit every touched table and publish them in one ``__manifest`` commit."""
    started = time.monotonic() if started is None else started
    writes = [w for w in writes if w.fragments]
    by_oid: dict[str, TableWrite] = {w.object_id: w for w in writes}
    if len(by_oid) != len(writes):
        raise ValueError("one TableWrite per partition table expected")
    done: dict[str, tuple[int | None, int]] = {}  # object_id -> (base read_version, our table version)
    overwrite = mode == "overwrite"
    skipped = {"value": False}

    def mutate(snap: ManifestSnapshot):
        skipped["value"] = False
        if batch_id is not None and committed_batch(snap, batch_id) is not None:
            skipped["value"] = True
            return None, None
        if not writes and batch_id is None:
            return None, None
        index = snap.row_index()
        read_version = snap.rows.column("read_version").to_pylist()
        branch = snap.rows.column("read_branch").to_pylist()
        tag = snap.rows.column("read_tag").to_pylist()
        todo = []
        for oid in by_oid:
            i = index.get(oid)
            if i is None:  # dropped (drop_partitions) while this write ran: a rerun reserves a fresh table
                raise CommitConflictError(f"partition table {oid} was removed from __manifest (dropped) while this "
                                          f"write ran; nothing was published; run the write again")
            if branch[i] is not None or tag[i] is not None:
                raise PartitionPinnedError(
                    f"partition table {oid} is pinned to branch={branch[i]!r} tag={tag[i]!r}; lancepart writes "
                    f"to main only; unpin it before writing")
            if oid not in done or done[oid][0] != read_version[i]:
                todo.append((oid, read_version[i]))

        def commit_one(item: tuple[str, int | None]) -> int:
            oid, published = item
            w = by_oid[oid]
            version = commit_on_published(manifest, snap.version, oid, w.location, published, lambda: commit_table(
                manifest.root, w.location, published, w.fragments, overwrite=overwrite,
                storage_options=manifest.storage_options))
            if published is not None and version <= published:
                raise LancepartError(f"{oid}: table version {version} would move read_version {published} backwards")
            faults.checkpoint("after_table_commit")
            return version

        for (oid, published), version in zip(todo, map_threads(commit_one, todo), strict=True):
            done[oid] = (published, version)
        faults.checkpoint("after_table_commits")
        check_files_present(manifest.root, [(o, by_oid[o].location, done[o][1], by_oid[o].fragments) for o in by_oid],
                            manifest.storage_options)
        rows = snap.with_read_versions({oid: done[oid][1] for oid in by_oid})
        if batch_id is not None:
            rows = _record_batch(rows, spec_namespace, batch_id, snap.version + 1)
        faults.checkpoint("before_manifest_commit")
        return rows, None

    snap, _, retries = manifest.update(mutate, max_retries=max_retries, what="publish")
    if not skipped["value"] and (writes or batch_id is not None):
        faults.checkpoint("after_manifest_commit")
    result = CommitResult(
        manifest_version=snap.version,
        rows_written=0 if skipped["value"] else sum(w.rows for w in writes),
        partitions_touched=0 if skipped["value"] else len(writes),
        partitions_created=partitions_created,
        retries=retries + extra_retries,
        batch_id=batch_id,
        skipped=skipped["value"],
        seconds=round(time.monotonic() - started, 3),
    )
    log.info("published %s", json.dumps(result.to_dict(), default=str))
    return result


def fragments_from_json(items: Sequence[str | Mapping]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_json(i if isinstance(i, str) else json.dumps(i)) for i in items]
