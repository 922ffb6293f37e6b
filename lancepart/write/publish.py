"""Publish a job: commit each touched partition table, then ONE ``__manifest`` commit that
moves ``read_version`` of all of them (spec "Transaction / Commit Behavior"; docs/design.md §8).

The manifest commit is optimistic (see :mod:`lancepart.manifest`). Its mutation is the
rebase: on every attempt it re-reads each touched table's published version from the
snapshot; a table whose published version is no longer the one our table commit was
based on (a concurrent job published first, or restored our version away) is committed
again on top of the new published version, so ``read_version`` only moves forward and
no one's fragments are lost or published twice.

Exactly-once batches: a ``batch_id`` is recorded in the same commit, as a Lance transaction
property of the publishing ``__manifest`` commit (:mod:`lancepart.write.batches`); inside the
rebase every version up to the snapshot is checked for it, so of two writers with the same id
exactly one publishes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from lance.fragment import FragmentMetadata

from lancepart.errors import CommitConflictError, LancepartError, PartitionPinnedError
from lancepart.index import IndexDeclaration, Maintain, apply_on_exact, declarations
from lancepart.manifest import (
    OPERATION_PROPERTY,
    PARTITIONS_PROPERTY,
    ROWS_PROPERTY,
    Manifest,
    ManifestChanges,
    ManifestSnapshot,
    SnapshotGone,
    is_not_found,
    join_uri,
)
from lancepart.parallel import map_threads
from lancepart.results import CommitResult
from lancepart.write import batches, faults
from lancepart.write.guard import check_files_present, commit_on_published
from lancepart.write.reserve import remove_table_dir
from lancepart.write.tables import commit_table

if TYPE_CHECKING:
    from lancepart.write.create import NewTables

log = logging.getLogger("lancepart.write")


@dataclass
class TableWrite:
    """Fragments a job wrote into one partition table.

    ``keys`` (one row of partition values) marks a partition that had no table: ``location`` is
    a directory this job named, and ``created`` the version of the table it created there with
    exactly ``fragments`` (:mod:`lancepart.write.create`), published by adding its rows."""

    object_id: str
    location: str
    fragments: list[FragmentMetadata] = field(default_factory=list)
    rows: int = 0
    keys: pa.Table | None = None
    created: int | None = None
    published: int | None = None  # the table's read_version its fragments were written against


def already_published(manifest: Manifest, snap: ManifestSnapshot, batch_id: str, started: float
                      ) -> CommitResult | None:
    """The skipped result of a write whose ``batch_id`` is already published as of ``snap``,
    else None: the early check that spares a rerun its work (publish checks again, atomically)."""
    try:
        found = batches.find_batch(manifest, batch_id, snap)
    except SnapshotGone:  # superseded and cleaned up since: the publish checks again, atomically
        return None
    if found is None:
        return None
    log.info("batch %r already published in __manifest version %d; skipping", batch_id, found.manifest_version)
    # the index may know a version newer than snap: report one at which the batch is visible
    return CommitResult(manifest_version=max(snap.version, found.manifest_version), batch_id=batch_id, skipped=True,
                        seconds=round(time.monotonic() - started, 3),
                        details=batches.result_details(found, batches.batch_id_retention(snap.metadata)))


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
    new_tables: NewTables | None = None,
    index_on_write: bool = True,
) -> CommitResult:
    """Commit every touched table and publish them in one ``__manifest`` commit; ``new_tables``
    adds the rows of the tables the write created with their data (``TableWrite.created``).
    With ``index_on_write``, the declared indexes of each touched table are brought up to date on
    the version published (:func:`keep_indexes`); nothing is done when none is declared."""
    started = time.monotonic() if started is None else started
    if batch_id is not None:
        batches.check_batch_id(batch_id)
    writes = [w for w in writes if w.fragments]
    by_oid: dict[str, TableWrite] = {w.object_id: w for w in writes}
    if len(by_oid) != len(writes):
        raise ValueError("one TableWrite per partition table expected")
    done: dict[str, tuple[int | None, int]] = {}  # object_id -> (base read_version, our table version)
    overwrite = mode == "overwrite"
    skipped: dict[str, batches.BatchRecord | None] = {"value": None}
    indexed: dict[str, int] = {}  # object_id of a table this write created -> its version before indexing
    commit_tables_s = [0.0]  # table commits and their file checks, over every attempt

    def mutate(snap: ManifestSnapshot):
        # every version up to snap.version: a concurrent writer with the same id that committed
        # first makes our commit conflict, and the rebase then finds its id here
        skipped["value"] = None
        if batch_id is not None and (found := batches.find_batch(manifest, batch_id, snap)) is not None:
            skipped["value"] = found
            return None, None
        if not writes and batch_id is None:
            return None, None
        decls = declarations(snap.metadata) if index_on_write else []
        if decls:
            keep_indexes(manifest, [w for w in by_oid.values() if w.created is not None], decls, indexed)
        added, new_count = new_tables.rows(snap, by_oid) if new_tables is not None else (None, 0)
        existing = [o for o, w in by_oid.items() if w.created is None]
        current = {r["object_id"]: r for r in
                   snap.lookup(existing).select(["object_id", "read_version", "read_branch", "read_tag"]).to_pylist()}
        todo = []
        for oid in existing:
            row = current.get(oid)
            if row is None:  # dropped (drop_partitions) while this write ran: a rerun reserves a fresh table
                raise CommitConflictError(f"partition table {oid} was removed from __manifest (dropped) while this "
                                          f"write ran; nothing was published; run the write again")
            if row["read_branch"] is not None or row["read_tag"] is not None:
                raise PartitionPinnedError(
                    f"partition table {oid} is pinned to branch={row['read_branch']!r} tag={row['read_tag']!r}; "
                    f"lancepart writes to main only; unpin it before writing")
            if oid not in done or done[oid][0] != row["read_version"]:
                todo.append((oid, row["read_version"]))

        def commit_one(item: tuple[str, int | None]) -> int:
            oid, published = item
            w = by_oid[oid]
            version = commit_on_published(manifest, snap.version, oid, w.location, published, lambda: commit_table(
                manifest.root, w.location, published, w.fragments, overwrite=overwrite,
                storage_options=manifest.storage_options))
            if published is not None and version <= published:
                raise LancepartError(f"{oid}: table version {version} would move read_version {published} backwards")
            faults.checkpoint("after_table_commit")
            if decls:
                version = index_or_warn(manifest, oid, w.location, version, decls)
            return version

        t = time.monotonic()
        for (oid, published), version in zip(todo, map_threads(commit_one, todo), strict=True):
            done[oid] = (published, version)
        faults.checkpoint("after_table_commits")
        check_files_present(manifest.root, [(o, w.location, None if w.created is not None else done[o][1],
                                             w.fragments) for o, w in by_oid.items()], manifest.storage_options)
        commit_tables_s[0] += time.monotonic() - t
        upserts = snap.read_version_changes({o: done[o][1] for o in existing}).upserts
        if added is not None:
            upserts = pa.concat_tables([upserts, added.select(upserts.schema.names).cast(upserts.schema)])
        faults.checkpoint("before_manifest_commit")
        return ManifestChanges(upserts=upserts), new_count

    props = {OPERATION_PROPERTY: mode, ROWS_PROPERTY: str(sum(w.rows for w in writes)),
             PARTITIONS_PROPERTY: str(len(writes)),
             **(batches.transaction_properties(batch_id) if batch_id is not None else {})}
    update_started = time.monotonic()
    snap, new_count, retries = manifest.update(mutate, max_retries=max_retries, what="publish",
                                               transaction_properties=props)
    # the __manifest part of the update: reading it, the batch-id check, the commit, and any retries
    manifest_commit_s = time.monotonic() - update_started - commit_tables_s[0]
    writes = list(by_oid.values())  # new partitions found published by another writer were adopted
    skip = skipped["value"]
    if skip is not None:  # the tables this write created are referenced by no __manifest version
        for w in writes:
            if w.created is not None:
                remove_table_dir(manifest.root, w.location, manifest.storage_options)
    if skip is None and (writes or batch_id is not None):
        faults.checkpoint("after_manifest_commit")
        if batch_id is not None or batches.index_exists(manifest):
            batches.index_quietly(manifest, snap.version)
        manifest.protect(snap.metadata)  # older namespaces: from now on DirectoryNamespace may not rewrite it
    result = CommitResult(
        manifest_version=snap.version if skip is None else max(snap.version, skip.manifest_version),
        rows_written=0 if skip is not None else sum(w.rows for w in writes),
        partitions_touched=0 if skip is not None else len(writes),
        partitions_created=partitions_created + (new_count or 0),
        retries=retries + extra_retries,
        batch_id=batch_id,
        skipped=skip is not None,
        seconds=round(time.monotonic() - started, 3),
        details=batches.result_details(skip, batches.batch_id_retention(snap.metadata)) if batch_id is not None
        else {},
    )
    result.details.update(commit_tables_s=round(commit_tables_s[0], 3), manifest_commit_s=round(manifest_commit_s, 3))
    log.info("published %s", json.dumps(result.to_dict(), default=str))
    return result


def index_or_warn(manifest: Manifest, object_id: str, location: str, version: int,
                  decls: Sequence[IndexDeclaration]) -> int:
    """The version of the table at ``location`` holding exactly the fragments of ``version`` with
    the declared indexes up to date; ``version`` itself, with a warning, when Lance cannot build
    one (the data is published unindexed: a search scans it flat, ``verify`` reports
    ``index_missing``); an index never fails a write."""
    try:
        return apply_on_exact(join_uri(manifest.root, location), version,
                              Maintain(decls, storage_options=manifest.storage_options, rebuild_stale=False),
                              manifest.storage_options,
                              f"partition table {location} (index)")
    except (OSError, ValueError, RuntimeError, CommitConflictError) as e:
        if is_not_found(e):
            raise  # the version is gone (a cleanup): the caller rebases
        log.warning("partition table %s: declared indexes not updated on version %d, published without them "
                    "(%s: %s)", object_id, version, type(e).__name__, e)
        return version


def keep_indexes(manifest: Manifest, created: Sequence[TableWrite], decls: Sequence[IndexDeclaration],
                 indexed: dict[str, int]) -> None:
    """Bring the declared indexes ``decls`` up to date on the tables this write created (each
    one's ``created`` version becomes the version that carries them), once per table; below a
    declaration's ``min_rows`` a table stays unindexed. Docs: docs/indexes.md."""
    todo = [w for w in created if w.object_id not in indexed]

    def one(w: TableWrite) -> int:
        return index_or_warn(manifest, w.object_id, w.location, w.created, decls)

    for w, version in zip(todo, map_threads(one, todo), strict=True):
        indexed[w.object_id] = w.created
        w.created = version


def fragments_from_json(items: Sequence[str | Mapping]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_json(i if isinstance(i, str) else json.dumps(i)) for i in items]
