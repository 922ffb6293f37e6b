"""Rollback: publish the partition tables of an older ``__manifest`` version as a new version.

``ns.rollback(N)`` makes the namespace read as snapshot N did, in ONE ``__manifest`` commit
(docs/history.md "Rollback"):

* a partition table that N pinned at version V and that now reads otherwise gets a new table
  version whose fragments are exactly V's (``Restore(V)`` on its latest version, then foreign
  fragments removed: :func:`lancepart.storage.table_commit.commit_exactly`), and ``read_version`` moves
  *forward* to it, so published table versions only ever increase and a writer holding the
  old ``read_version`` rebases as after any publish;
* a partition table whose published version already holds exactly the fragments and schema of
  the version N pinned (the copy an earlier rollback to N made) is left as it is: a rollback to
  the snapshot the namespace already reads publishes nothing;
* a partition table N did not have (created, or first published, after N) leaves
  ``__manifest`` as ``drop_partitions`` removes it; a reservation without a published version
  (a writer running now) stays;
* a partition table N had but that was dropped since comes back with N's row;
* rows that are not partition tables (a foreign tool's root-level tables) are left alone, and so
  are the partition specs and the schema: they only ever grow, and every table N pinned is
  readable under them.

Batch ids (docs/exactly-once.md): the ids published after N whose rows the rollback removes are
recorded as *undone* in the rollback's own commit, and ids N had published but a later rollback
undid as *redone*; the exactly-once check then lets a rerun of an undone batch publish again and
skips a redone one. The record is part of the commit, so it holds exactly when the rollback is
published.

Conflicts: the commit is optimistic and its mutation is a pure function of the snapshot; on a
conflict it is recomputed on the new one (a publish that landed first is rolled back too, and
its batch id undone). A table version made for an earlier attempt is kept while the table's
``read_version`` did not move. A kill before the ``__manifest`` commit leaves table versions no
snapshot pins, which cleanup removes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from lance import LanceOperation

from lancepart.errors import InvalidArgumentError, SnapshotExpiredError
from lancepart.maintenance.drop import _gone
from lancepart.model import ids as _ids
from lancepart.ops.history import retained_versions, snapshot_at
from lancepart.results import CommitResult
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import ManifestChanges, ManifestSnapshot, is_not_found, join_uri, set_read_versions
from lancepart.storage.table_commit import _ident, commit_exactly
from lancepart.util import faults
from lancepart.util.parallel import map_threads
from lancepart.write import batches
from lancepart.write.publish import CommitProducer, TableChange

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.maintenance")
ROLLBACK_TO_PROPERTY = "lancepart.rollback_to"  # transaction property: the version a rollback restored
_PIN_COLUMNS = ("read_version", "read_branch", "read_tag")


def _partition_tables(rows: pa.Table) -> dict[str, dict[str, Any]]:
    """object_id -> row of every partition table row (``v<N>$...$dataset``)."""
    from lancepart.model.ids import partition_spec_id

    out = {}
    cols = rows.select(["object_id", "object_type", "location", *_PIN_COLUMNS]).to_pylist()
    for i, r in enumerate(cols):
        if r["object_type"] == "table" and partition_spec_id(r["object_id"]) is not None:
            out[r["object_id"]] = {**r, "_row": i}
    return out


def _pins(row: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """What a row makes readers read; None for no row or a reservation that pins nothing."""
    if row is None or all(row[c] is None for c in _PIN_COLUMNS):
        return None
    return tuple(row[c] for c in _PIN_COLUMNS)


def _same(now: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """Whether a row reads what ``want`` read: the same pins in the same table directory (a
    partition removed and made again has the same object id and pins that start over at 1, in
    another directory)."""
    return now is not None and _pins(now) == _pins(want) and now["location"] == want["location"]


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` (of an older ``__manifest`` version) in ``schema``: partition columns added by a
    later spec evolution are NULL in them."""
    return pa.Table.from_arrays([rows.column(f.name).cast(f.type) if f.name in rows.column_names
                                 else pa.nulls(rows.num_rows, f.type) for f in schema], schema=schema)


def _table_content(root: str, location: str, version: int, storage_options: Mapping[str, str] | None
                   ) -> tuple[frozenset[Any], pa.Schema] | None:
    """What a reader of version ``version`` of the table at ``location`` reads: its fragments (data
    and deletion files) and its schema; None when that version cannot be opened."""
    try:
        ds = open_table(join_uri(root, location), version=version,
                           storage_options=dict(storage_options) if storage_options else None)
    except (OSError, ValueError):
        return None
    return frozenset(_ident(f.metadata) for f in ds.get_fragments()), ds.schema


def restore_table(root: str, location: str, version: int, storage_options: Mapping[str, str] | None) -> int:
    """Commit, on the latest version of the table at ``location``, a version whose fragments are
    exactly those of ``version``; return it (always newer than every existing version)."""
    uri = join_uri(root, location)
    so = dict(storage_options) if storage_options else None
    try:
        old = open_table(uri, version=version, storage_options=so)
    except (OSError, ValueError) as e:
        if is_not_found(e):
            raise SnapshotExpiredError(f"partition table {location} version {version} is gone (a cleanup removed it); "
                                       f"the rollback cannot restore it; nothing was published") from e
        raise
    wanted = {_ident(f.metadata) for f in old.get_fragments()}

    def update(have: Mapping[Any, int]) -> LanceOperation.Update:
        return LanceOperation.Update(removed_fragment_ids=[fid for ident, fid in have.items() if ident not in wanted])

    return commit_exactly(uri, version, wanted, wanted, update, so, f"partition table {location} (rollback)")


class _Rollback(CommitProducer):
    """A rollback through the one commit producer. On each attempt's snapshot (:meth:`changes`):
    a table that N pinned at a main version and that today's row pins at another main version in
    the same directory is a table change (:func:`restore_table`; ``read_version`` moves forward
    to the copy); every other table N pinned that reads otherwise gets N's row back
    (:meth:`row_changes`: brought back after a drop, in N's directory after the partition was
    made again, re-pinned to N's branch or tag, or pinned again after a reservation), with
    N's version restored in N's directory when N pinned one; tables N did not have go, with
    the namespace rows they leave childless."""

    def __init__(self, root: str, manifest: Any, version: int, target: ManifestSnapshot, *,
                 max_retries: int, properties: Mapping[str, str] | None = None) -> None:
        super().__init__(manifest, what=f"rollback to {version}", max_retries=max_retries, properties=properties)
        self.root, self.version, self.target = root, version, target
        self.wanted = _partition_tables(target.rows)
        self.restored: dict[str, tuple[Any, int]] = {}  # object_id -> (its pins when restored, the version made)
        self.same: dict[tuple[str, Any], bool] = {}  # (object_id, its pins now) -> whether it reads as N's version
        self.info: dict[str, Any] = {}
        self.in_place: list[str] = []
        self.replaced: list[str] = []
        self.remove: list[str] = []
        self.have: dict[str, dict[str, Any]] = {}

    def reads_as_wanted(self, oids: list[str]) -> set[str]:
        """Of ``oids`` (tables N pinned at a main version that now read another one), those whose
        version now holds exactly the fragments and schema of N's: a table a rollback to N already
        restored (its copy of N's version) reads as N did, and is left as it is."""
        have, so = self.have, self.manifest.storage_options
        todo = [o for o in oids if (o, _pins(have[o])) not in self.same]

        def check(oid: str) -> bool:
            now, want = have[oid], self.wanted[oid]
            if now["location"] != want["location"] or now["read_branch"] is not None or now["read_tag"] is not None:
                return False
            have_now = _table_content(self.root, now["location"], now["read_version"], so)
            then = _table_content(self.root, want["location"], want["read_version"], so)
            return (have_now is not None and then is not None and have_now[0] == then[0]
                    and have_now[1].equals(then[1], check_metadata=True))

        for oid, result in zip(todo, map_threads(check, todo), strict=True):
            self.same[(oid, _pins(have[oid]))] = result
        return {o for o in oids if self.same[(o, _pins(have[o]))]}

    def changes(self, snap: ManifestSnapshot) -> list[TableChange]:
        self.have = have = _partition_tables(snap.rows)
        wanted = self.wanted
        differ = [oid for oid, want in wanted.items() if _pins(want) is not None and _pins(have.get(oid)) is not None
                  and not _same(have[oid], want) and want["read_branch"] is None and want["read_tag"] is None]
        already = self.reads_as_wanted(differ)
        self.in_place, self.replaced, bring_back = [], [], []
        for oid, want in wanted.items():
            now = have.get(oid)
            if _pins(want) is None or _same(now, want) or oid in already:
                continue
            main = want["read_branch"] is None and want["read_tag"] is None
            if (main and now is not None and now["location"] == want["location"] and now["read_version"] is not None
                    and now["read_branch"] is None and now["read_tag"] is None):
                self.in_place.append(oid)  # a new version of the same table: read_version moves forward
            else:
                self.replaced.append(oid)  # N's row back (and N's version restored, if N pinned one)
            if now is None:
                bring_back.append(oid)
        self.remove = [oid for oid, now in have.items() if _pins(now) is not None and _pins(wanted.get(oid)) is None]
        restored = sorted(self.in_place + self.replaced)
        self.info = {"rolled_back_to": self.version, "restored": restored, "removed": sorted(self.remove),
                     "brought_back": sorted(bring_back), "undone": [], "redone": []}
        if restored or self.remove:
            self.info["undone"], self.info["redone"] = batch_changes(self.manifest, self.version, snap.version)
        return [TableChange(oid, wanted[oid]["location"], commit=self._restore_in_place(oid)) for oid in self.in_place]

    def _restore_in_place(self, oid: str):
        want = self.wanted[oid]
        return lambda published, location: restore_table(self.root, want["location"], want["read_version"],
                                                         self.manifest.storage_options)

    def plan(self, snap: ManifestSnapshot) -> bool:
        super().plan(snap)
        return bool(self.in_place or self.replaced or self.remove)

    def row_changes(self, snap: ManifestSnapshot) -> ManifestChanges | None:
        """N's rows of the tables replaced (their version restored in N's directory first, kept
        over attempts while today's row did not move) and of the namespaces above them that are
        not there now; the tables N did not have removed, with the namespace rows they leave."""
        if not self.replaced and not self.remove:
            return None
        have, wanted = self.have, self.wanted
        todo = [o for o in self.replaced if _pins(wanted[o])[0] is not None and wanted[o]["read_branch"] is None
                and wanted[o]["read_tag"] is None and self.restored.get(o, (None,))[0] != _pins(have.get(o))]
        def restore(oid: str) -> int:
            made = restore_table(self.root, wanted[oid]["location"], wanted[oid]["read_version"],
                                 self.manifest.storage_options)
            faults.checkpoint("after_table_commit")
            return made

        made = map_threads(restore, todo)
        for oid, v in zip(todo, made, strict=True):
            self.restored[oid] = (_pins(have.get(oid)), v)
        gone, _ = _gone(snap, [have[o]["_row"] for o in self.remove]) if self.remove else ([], [])
        present = set(snap.rows.column("object_id").to_pylist()) - set(gone)
        ancestors = {_ids.DELIMITER.join(o.split(_ids.DELIMITER)[:k]) for o in self.replaced
                     for k in range(2, len(o.split(_ids.DELIMITER)))} - present
        t_index = {o: i for i, o in enumerate(self.target.rows.column("object_id").to_pylist())}
        added = self.target.rows.take(pa.array([t_index[o] for o in self.replaced]
                                               + [t_index[a] for a in sorted(ancestors) if a in t_index], pa.int64()))
        added = set_read_versions(added, {o: self.restored[o][1] for o in self.replaced if o in self.restored})
        return ManifestChanges(upserts=_conform(added, snap.rows.schema) if added.num_rows else None,
                               deletes=tuple(o for o in gone if o not in set(self.replaced)))

    def properties_of(self, made: Any) -> dict[str, str]:
        props = {ROLLBACK_TO_PROPERTY: str(self.version), batches.COMMITTED_AT_PROPERTY: datetime.now(UTC).isoformat()}
        if self.info["undone"]:
            props[batches.UNDONE_PROPERTY] = json.dumps(self.info["undone"], ensure_ascii=False)
        if self.info["redone"]:
            props[batches.REDONE_PROPERTY] = json.dumps(self.info["redone"], ensure_ascii=False)
        return props

    def after_commit(self, snap: ManifestSnapshot, committed: bool) -> None:
        super().after_commit(snap, committed)
        if committed and (self.info["undone"] or self.info["redone"]) and not batches.index_exists(self.manifest):
            batches.index_quietly(self.manifest, snap.version)


def rollback(ns: NamespaceHandle, version: int, *, max_retries: int = 20,
             properties: Mapping[str, str] | None = None) -> CommitResult:
    """Publish snapshot ``version`` of ``__manifest`` as a new version (module docstring)."""
    started = time.monotonic()
    manifest = ns.manifest
    target = snapshot_at(manifest, version=version)  # typed errors for a version that is not there
    ds = manifest.dataset()
    at = dict(retained_versions(ds)).get(version)  # UTC
    retention = batches.batch_id_retention(ds.metadata)
    if at is not None and at < datetime.now(UTC) - retention:
        raise InvalidArgumentError(
            f"rollback to version {version} of {ns.root}: it was committed at {at.isoformat()}, longer ago than "
            f"the batch id retention ({retention}); batch ids published before it may be forgotten, so the "
            f"rollback could not tell which reruns to allow; raise lancepart.batch_id_retention or choose a "
            f"later version")
    producer = _Rollback(ns.root, manifest, version, target, max_retries=max_retries, properties=properties)
    pub = producer.publish()
    snap, retries, info = pub.snapshot, pub.retries, producer.info
    what = producer.what
    result = CommitResult(
        manifest_version=snap.version, partitions_touched=len(info["restored"]) + len(info["removed"]),
        retries=retries, seconds=round(time.monotonic() - started, 3),
        details={"rolled_back_to": version, "restored": info["restored"], "removed": info["removed"],
                 "brought_back": info["brought_back"], "undone_batch_ids": info["undone"],
                 "redone_batch_ids": info["redone"]})
    log.info("%s %s: %d partition tables restored, %d removed, %d batch ids undone, %d redone (manifest version %d)",
             ns.root, what, len(info["restored"]), len(info["removed"]), len(info["undone"]), len(info["redone"]),
             snap.version)
    return result


def batch_changes(manifest: Any, version: int, upto: int) -> tuple[list[str], list[str]]:
    """The batch ids published as of ``__manifest`` version ``upto`` but not as of ``version``
    (a rollback to ``version`` undoes them), and the other way round (it redoes them)."""
    records = batches.all_records(manifest, upto)
    then, now = batches.published_at(records, version), batches.published_at(records, upto)
    return sorted(set(now) - set(then)), sorted(set(then) - set(now))
