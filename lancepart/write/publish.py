"""The one publish path: commit each touched partition table, then ONE ``__manifest`` commit
that moves ``read_version`` of all of them (spec "Transaction / Commit Behavior"; docs/design.md
§8 and "How an operation flows"). Every operation that changes partition tables (write,
overwrite, replace-where, merge, delete, compaction, index builds, schema upgrades) builds a
:class:`TableChange` per table and hands them to the one :class:`CommitProducer`.

The manifest commit is optimistic (see :mod:`lancepart.storage.manifest`). Its mutation is the
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from lance.fragment import FragmentMetadata

from lancepart.errors import (
    CommitConflictError,
    CorruptNamespaceError,
    DataFilesMissingError,
    InvalidArgumentError,
    LancepartError,
    PartitionPinnedError,
)
from lancepart.evolution.schema_evolution import columns_of
from lancepart.index import IndexDeclaration, Maintain, PreparedCache, apply_on_exact, declarations
from lancepart.model.constraints import constraints as declared
from lancepart.model.constraints import constraints_json
from lancepart.model.ids import check_location
from lancepart.results import CommitResult
from lancepart.storage.error_mapping import table_failure
from lancepart.storage.manifest import (
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
from lancepart.storage.table_commit import commit_table
from lancepart.util import faults
from lancepart.util.parallel import map_threads
from lancepart.write import batches, constraints
from lancepart.write.guard import check_files_present, commit_on_published
from lancepart.write.reserve import remove_table_dir

log = logging.getLogger("lancepart.write")


# ---------------------------------------------------------------------------------- the protocol
ADDS_NO_ROWS = "*"  # TableChange.checked of a change that gains no row (deletions only)


@dataclass
class TableChange:
    """One partition table's part of an operation, handed to the :class:`CommitProducer`.

    ``commit(published, location)`` makes the change on top of the table's *published* version
    and returns the version made (None, or ``published`` itself: nothing to change), or a
    :class:`Made` carrying what the operation wants back (rows deleted, stats); it raises
    :class:`LeaveOut` to publish the others without this table. Without ``commit`` the change
    appends ``fragments`` (replaces every fragment with ``overwrite``; replaces ``removed`` by
    ``fragments``, a compaction's rewrite) with :func:`commit_table`.

    ``keys`` (one row of partition values) marks a partition that had no table: ``location`` is a
    directory the operation named and ``created`` the version of the table it created there with
    exactly ``fragments`` (:mod:`lancepart.write.create`), published by adding its rows."""

    object_id: str
    location: str | None = None  # the table's directory; None: the one the snapshot names
    fragments: list[FragmentMetadata] = field(default_factory=list)  # data files written: checked before publishing
    rows: int = 0
    keys: pa.Table | None = None
    created: int | None = None
    published: int | None = None  # the table's read_version its fragments were written against
    commit: Callable[[int | None, str], int | Made | None] | None = None
    overwrite: bool = False
    removed: list[FragmentMetadata] = field(default_factory=list)
    # the constraints (constraints_json) the rows the table gains (``fragments``; what ``commit``
    # adds is exactly them) were checked against when written: the publish does not read them
    # back while the snapshot declares the same ones; ADDS_NO_ROWS: the change only removes rows
    checked: str | None = None




@dataclass
class Made:
    """What one table's commit made: on its published version ``published``, the version
    ``version`` (None or ``published``: unchanged), with what the operation reports (``info``)."""

    object_id: str
    published: int | None
    version: int | None
    info: Any = None
    left_out: str | None = None  # why the table was left out (LeaveOut); then nothing was made
    failure: bool = False  # left out because its storage failed

    @property
    def changed(self) -> bool:
        return self.left_out is None and self.version is not None and self.version != self.published


class LeaveOut(Exception):
    """Raised by a :attr:`TableChange.commit` to publish the operation without its table (a
    compaction whose rewritten fragments are gone). ``failure``: the table's storage failed."""

    def __init__(self, reason: str, *, failure: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.failure = reason, failure


@dataclass
class TableWork:
    """One table commit to make on an attempt's snapshot: what a :data:`Runner` gets."""

    change: TableChange
    location: str
    published: int | None


# makes the table commits of one attempt (``snapshot version``, work) elsewhere (Spark tasks);
# returns a Made per work (``left_out`` set to leave a table out), or raises ManifestConflict to rebase
Runner = Callable[[int, Sequence[TableWork]], Sequence[Made]]


@dataclass
class Published:
    """The outcome of :meth:`CommitProducer.publish`."""

    snapshot: ManifestSnapshot
    committed: bool  # a __manifest commit landed
    made: dict[str, Made]  # object_id -> what was published for it (changed tables only)
    left_out: dict[str, str]  # object_id -> why it was left out
    failures: dict[str, str]  # of those, the ones whose storage failed
    retries: int
    changes: list[TableChange]  # the changes as published (a partition another writer created is adopted)
    created: int = 0  # tables the operation created and published
    skipped: Any = None  # the batch record when the batch id was published already
    commit_tables_s: float = 0.0


class RowChanges(Protocol):
    """The ``__manifest`` rows an operation adds or removes besides the ``read_version`` moves
    of its table commits: the tables it created with their data (:class:`lancepart.write.create.NewTables`),
    the partitions it drops, the tables a rollback brings back."""

    def rows(self, snap: ManifestSnapshot, by_oid: dict[str, TableChange]) -> tuple[pa.Table | None, int]:
        """``(rows to add, tables added)`` under ``snap``; may adopt a partition another writer
        published first (``by_oid`` updated) and raise ManifestConflict to rebase."""
        ...




class CommitProducer:
    """THE publish protocol of every operation that changes partition tables (docs/design.md,
    "How an operation flows"). One attempt runs on a snapshot of ``__manifest``, in named steps:

    1. :meth:`batch_published` -- the batch id is looked for in every version up to it (found:
       nothing is published);
    2. :meth:`check` -- raises if what the operation read moved;
    3. :meth:`plan` -- the changes on this snapshot (:meth:`changes`: the operation's hook);
    4. :meth:`index_created` -- the tables the operation created get their declared indexes;
    5. :meth:`row_changes` -- their ``__manifest`` rows, and the rows the operation removes (a
       partition another writer published first is adopted and the attempt rebased);
    6. :meth:`tables_to_commit` -- each other table's row is looked up: a table dropped, pinned
       to a branch or tag, or declared without a ``read_version`` fails the operation
       (``unpublishable="raise"``) or is left out (``"leave_out"``); a table is (re)committed when
       its published version is not the one an earlier attempt built on;
    7. :meth:`commit_tables` -- each on top of its published version, on the bounded thread pool
       or by ``run`` (Spark tasks); a version that would move ``read_version`` backwards is an
       error; with ``index_on_write`` the declared indexes follow each commit; with
       ``leave_out_unreadable`` a table whose published version is gone or cannot be read is left
       out (a failure naming it), not the operation's end;
    8. :meth:`check_files` -- every version and data file about to be published is present;
       :meth:`check_constraints` -- the rows the tables gained meet the CHECK constraints declared
       on this snapshot (:mod:`lancepart.write.constraints`; operations that add no row, such as
       compaction and index builds, pass ``check_constraints=False``);
    9. :meth:`manifest_changes` -- the one place ``read_version`` is written: the changed tables'
       rows with their new versions, plus the rows of step 5.

    :meth:`publish` runs the attempts through :meth:`Manifest.update` (one ``__manifest`` commit;
    on a conflict everything reruns on the newer snapshot, redoing only tables whose published
    version moved), then :meth:`after_commit`: the batch-id index and the writer flag; when the
    batch was published already, the tables this operation created are removed.

    An operation either hands a list of :class:`TableChange` (``changes``) or subclasses and
    overrides the hooks :meth:`changes`, :meth:`check`, :meth:`properties_of` (a merge evaluates
    again on a snapshot where a table it read moved: :class:`lancepart.write.merge.ChangeProducer`)."""

    def __init__(
        self,
        manifest: Manifest,
        changes: Sequence[TableChange] | Callable[[ManifestSnapshot], Sequence[TableChange]] = (),
        *,
        what: str,
        properties: Mapping[str, str] | None = None,
        properties_of: Callable[[Sequence[Made]], Mapping[str, str]] | None = None,
        batch_id: str | None = None,
        new_tables: RowChanges | None = None,
        index_on_write: bool = False,
        unpublishable: str = "raise",
        run: Runner | None = None,
        check: Callable[[ManifestSnapshot], None] | None = None,
        leave_out_unreadable: bool = False,
        max_retries: int = 20,
        check_constraints: bool = True,
    ) -> None:
        if batch_id is not None:
            batches.check_batch_id(batch_id)
        if unpublishable not in ("raise", "leave_out"):
            raise ValueError(f"unpublishable: 'raise' or 'leave_out', not {unpublishable!r}")
        self.manifest, self.what, self.batch_id, self.max_retries = manifest, what, batch_id, max_retries
        self.properties, self._properties_of, self._check = dict(properties or {}), properties_of, check
        self.new_tables, self.index_on_write, self.run = new_tables, index_on_write, run
        self.unpublishable, self.leave_out_unreadable = unpublishable, leave_out_unreadable
        self._changes = changes if callable(changes) else list(changes)
        self._handed_out = False  # the list given went to plan (an attempt may end before it plans)
        self.by_oid: dict[str, TableChange] = {}
        self.indexed: dict[str, int] = {}
        self.prepared: PreparedCache = {}  # index builds kept over attempts: a rebase commits them, never builds again
        self.skipped: Any = None
        self.created = 0
        self.commit_tables_s = 0.0
        self.attempts = 0
        self.rows_changed = False
        self.constraints = check_constraints
        self.constraints_checked: set[tuple[Any, ...]] = set()  # (table, base, version, constraints) over attempts
        self.forget()

    # ------------------------------------------------------------------------------ hooks
    def changes(self, snap: ManifestSnapshot) -> Sequence[TableChange] | None:
        """The operation's changes on ``snap``, or None to keep the previous attempt's (rebased).
        Default: the list given, planned once (by the first attempt that gets to plan: one can
        end before, its snapshot removed by a cleanup while it looked for the batch id); or the
        callable given, on every attempt."""
        if callable(self._changes):
            return self._changes(snap)
        if self._handed_out:
            return None
        self._handed_out = True
        return self._changes

    def check(self, snap: ManifestSnapshot) -> None:
        """Raise if what the operation read moved in ``snap``."""
        if self._check is not None:
            self._check(snap)

    def properties_of(self, made: Sequence[Made]) -> Mapping[str, str]:
        """Commit properties that depend on what was made on the snapshot committed on."""
        return self._properties_of(made) if self._properties_of is not None else {}

    def forget(self) -> None:
        """Drop what earlier attempts made: the next attempt commits every table again (an
        operation whose changes were planned anew, not rebased)."""
        self.done: dict[str, Made] = {}  # object_id -> what was made on its published version, over attempts
        self.left_out: dict[str, str] = {}  # never published again: a rewrite's fragments do not come back
        self.failures: dict[str, str] = {}

    # ------------------------------------------------------------------------------ the steps
    def batch_published(self, snap: ManifestSnapshot) -> bool:
        self.skipped = None
        if self.batch_id is not None:
            self.skipped = batches.find_batch(self.manifest, self.batch_id, snap)
        return self.skipped is not None

    def plan(self, snap: ManifestSnapshot) -> bool:
        """Take the changes on ``snap``; whether there is anything to publish."""
        planned = self.changes(snap)
        if planned is not None:
            self.by_oid = _by_object_id(planned)
        return bool(self.by_oid) or self.batch_id is not None

    def index_created(self, snap: ManifestSnapshot, decls: Sequence[IndexDeclaration]) -> None:
        if decls:
            keep_indexes(self.manifest, [c for c in self.by_oid.values() if c.created is not None], decls,
                         self.indexed, self.prepared, snap.metadata)

    def row_changes(self, snap: ManifestSnapshot) -> ManifestChanges | None:
        """The rows the operation adds (default: the tables it created, ``new_tables``) or
        removes (an override: dropped partitions), under ``snap``; None: none."""
        added, self.created = (self.new_tables.rows(snap, self.by_oid) if self.new_tables is not None
                               else (None, 0))
        return None if added is None else ManifestChanges(upserts=added)

    def tables_to_commit(self, snap: ManifestSnapshot) -> tuple[list[str], list[TableWork], dict[str, str]]:
        """``(the existing tables changed, the commits to make on snap, their directories)``."""
        existing = [o for o, c in self.by_oid.items() if c.created is None and o not in self.left_out]
        current = {r["object_id"]: r for r in snap.lookup(existing).select(
            ["object_id", "location", "read_version", "read_branch", "read_tag"]).to_pylist()}
        todo, location = [], {}
        for oid in existing:
            row = current.get(oid)
            reason = _unpublishable(oid, row, self.what)
            if reason is not None:
                if self.unpublishable == "raise":
                    raise reason
                self.left_out[oid] = str(reason)
                continue
            location[oid] = self.by_oid[oid].location or check_location(row["location"], oid, self.manifest.root)
            if oid not in self.done or self.done[oid].published != row["read_version"]:
                todo.append(TableWork(self.by_oid[oid], location[oid], row["read_version"]))
        return [o for o in existing if o not in self.left_out], todo, location

    def commit_tables(self, snap: ManifestSnapshot, todo: Sequence[TableWork],
                      decls: Sequence[IndexDeclaration]) -> None:
        if not todo:
            return
        made = (self.run(snap.version, todo) if self.run is not None
                else map_threads(lambda w: self.commit_one(snap, decls, w), todo))
        for m in made:
            if m.left_out is not None:
                self.left_out[m.object_id] = m.left_out
                if m.failure:
                    self.failures[m.object_id] = m.left_out
                continue
            if m.version is not None and m.published is not None and m.version < m.published:
                raise LancepartError(f"{m.object_id}: table version {m.version} would move read_version "
                                     f"{m.published} backwards")
            self.done[m.object_id] = m

    def commit_one(self, snap: ManifestSnapshot, decls: Sequence[IndexDeclaration], work: TableWork) -> Made:
        """One table's commit on top of its published version (then its declared indexes)."""
        c, manifest = work.change, self.manifest
        try:
            out = commit_on_published(manifest, snap.version, c.object_id, work.location, work.published,
                                      lambda: _commit(manifest, c, work))
        except LeaveOut as e:
            return Made(c.object_id, work.published, None, left_out=e.reason, failure=e.failure)
        except (DataFilesMissingError, CorruptNamespaceError) as e:
            if not self.leave_out_unreadable:
                raise
            why = table_failure(e.__cause__ or e, join_uri(manifest.root, work.location), c.object_id)
            return Made(c.object_id, work.published, None, left_out=why, failure=True)
        made = out if isinstance(out, Made) else Made(c.object_id, work.published, out)
        if made.changed:
            faults.checkpoint("after_table_commit")
            if decls:
                made.version = index_or_warn(manifest, c.object_id, work.location, made.version, decls,
                                             self.prepared, snap.metadata)
        return made

    def check_files(self, changed: Sequence[Made], location: Mapping[str, str]) -> None:
        check_files_present(self.manifest.root, [(m.object_id, location[m.object_id], m.version,
                                                  self.by_oid[m.object_id].fragments) for m in changed],
                            self.manifest.storage_options, versions=self.attempts > 1)

    def check_constraints(self, snap: ManifestSnapshot, changed: Sequence[Made], location: Mapping[str, str],
                          rows: ManifestChanges | None) -> None:
        """The rows each changed table gained (and every row of a table row the operation adds)
        checked against the constraints declared on ``snap``; on a rebase only what was not
        checked against the same constraints yet."""
        if not self.constraints or not declared(snap.metadata):
            return
        todo = [constraints.TableRows(m.object_id, location[m.object_id], m.published, m.version) for m in changed]
        if rows is not None and rows.upserts is not None and rows.upserts.num_rows:
            todo += [constraints.TableRows(r["object_id"], r["location"], None, r["read_version"])
                     for r in rows.upserts.select(["object_id", "object_type", "location", "read_version"]).to_pylist()
                     if r["object_type"] == "table" and r["read_version"] is not None]
        key = constraints_json(snap.metadata)
        todo = [t for t in todo if (t, key) not in self.constraints_checked
                and not (t.object_id in self.by_oid and self.by_oid[t.object_id].checked in (key, ADDS_NO_ROWS))]
        constraints.check_tables(self.manifest, snap.metadata, todo, self.what)
        self.constraints_checked.update((t, key) for t in todo)

    def manifest_changes(self, snap: ManifestSnapshot, changed: Sequence[Made],
                         rows: ManifestChanges | None) -> ManifestChanges:
        """The one writer of ``read_version``: each changed table's row with the version made
        (never backwards: :meth:`commit_tables`), plus the rows added and removed (each table
        row added pinned to a version, a branch or a tag; no row both changed and removed)."""
        upserts = snap.read_version_changes({m.object_id: m.version for m in changed}).upserts
        deletes: tuple[str, ...] = ()
        if rows is not None:
            if rows.upserts is not None and rows.upserts.num_rows:
                _check_pinned(rows.upserts, self.what)
                upserts = pa.concat_tables([upserts, rows.upserts.select(upserts.schema.names).cast(upserts.schema)])
            deletes = tuple(rows.deletes)
            both = {m.object_id for m in changed} & set(deletes)
            if both:
                raise LancepartError(f"{self.what}: partition table {sorted(both)[0]} both changed and removed; "
                                     f"nothing was published")
        return ManifestChanges(upserts=upserts if upserts.num_rows or not deletes else None, deletes=deletes)

    # ------------------------------------------------------------------------------ running it
    def attempt(self, snap: ManifestSnapshot) -> tuple[ManifestChanges | None, list[Made]]:
        """One attempt on ``snap`` (:meth:`Manifest.update`'s mutation: this is the rebase)."""
        self.attempts += 1
        self.rows_changed = False
        faults.checkpoint("before_batch_check")
        if self.batch_published(snap):
            return None, []
        self.check(snap)
        if not self.plan(snap):
            return None, []
        decls = declarations(snap.metadata) if self.index_on_write else []
        self.index_created(snap, decls)
        rows = self.row_changes(snap)
        self.rows_changed = rows is not None
        existing, todo, location = self.tables_to_commit(snap)
        t = time.monotonic()
        self.commit_tables(snap, todo, decls)
        faults.checkpoint("after_table_commits")
        changed = [self.done[o] for o in existing if o not in self.left_out and self.done[o].changed]
        self.check_files(changed, location)
        self.check_constraints(snap, changed, location, rows)
        self.commit_tables_s += time.monotonic() - t
        if not changed and rows is None and self.batch_id is None:
            return None, []
        changes = self.manifest_changes(snap, changed, rows)
        faults.checkpoint("before_manifest_commit")
        return changes, changed

    def publish(self) -> Published:
        props = {**self.properties, **(batches.transaction_properties(self.batch_id) if self.batch_id else {})}
        snap, changed, retries = self.manifest.update(self.attempt, max_retries=self.max_retries, what=self.what,
                                                      transaction_properties=props,
                                                      properties_of=self.properties_of)
        committed = self.skipped is None and (bool(changed) or self.rows_changed or self.batch_id is not None)
        self.after_commit(snap, committed)
        return Published(snap, committed, {m.object_id: m for m in changed or []}, dict(self.left_out),
                         dict(self.failures), retries, list(self.by_oid.values()),
                         self.created if committed else 0, self.skipped, self.commit_tables_s)

    def after_commit(self, snap: ManifestSnapshot, committed: bool) -> None:
        manifest = self.manifest
        if self.skipped is not None:  # the tables this operation created are referenced by no __manifest version
            for c in self.by_oid.values():
                if c.created is not None:
                    remove_table_dir(manifest.root, c.location, manifest.storage_options)
        if committed:
            faults.checkpoint("after_manifest_commit")
            if self.batch_id is not None or batches.index_exists(manifest):
                batches.index_quietly(manifest, snap.version)
            manifest.protect(snap.metadata)  # older namespaces: from now on DirectoryNamespace may not rewrite it


def publish_changes(
    manifest: Manifest,
    changes: Sequence[TableChange] | Callable[[ManifestSnapshot], Sequence[TableChange]],
    **options: Any,
) -> Published:
    """Publish ``changes`` (or ``changes(snapshot)``: re-planned on each attempt) with a
    :class:`CommitProducer` built with ``options`` (its keyword arguments)."""
    return CommitProducer(manifest, changes, **options).publish()


def _by_object_id(changes: Sequence[TableChange]) -> dict[str, TableChange]:
    """The changes that change something, by table; one per table."""
    real = [c for c in changes if c.fragments or c.commit is not None or c.removed]
    out = {c.object_id: c for c in real}
    if len(out) != len(real):
        raise ValueError("one change per partition table expected")
    return out


def _check_pinned(rows: pa.Table, what: str) -> None:
    """Every table row in ``rows`` is pinned to a version, a branch or a tag."""
    unpinned = pc.and_kleene(pc.equal(rows.column("object_type"), "table"), pc.and_kleene(
        pc.is_null(rows.column("read_version")), pc.and_kleene(pc.is_null(rows.column("read_branch")),
                                                               pc.is_null(rows.column("read_tag")))))
    if pc.any(pc.fill_null(unpinned, False)).as_py():
        oid = rows.filter(pc.fill_null(unpinned, False)).column("object_id")[0].as_py()
        raise LancepartError(f"{what}: the row it adds for table {oid} has no read_version; nothing was published")


def _unpublishable(oid: str, row: Mapping[str, Any] | None, what: str) -> LancepartError | None:
    """Why the table ``oid`` (its ``__manifest`` row) cannot take a commit of ``what``, else None."""
    if row is None:  # dropped (drop_partitions) while the operation ran: a rerun reserves a fresh table
        return CommitConflictError(f"partition table {oid} was removed from __manifest (dropped) while this "
                                   f"{what} ran; nothing was published; run it again")
    if row["read_branch"] is not None or row["read_tag"] is not None:
        return PartitionPinnedError(
            f"partition table {oid} is pinned to branch={row['read_branch']!r} tag={row['read_tag']!r}; "
            f"lancepart changes main only; unpin it first; nothing was published")
    if row["read_version"] is None:
        return InvalidArgumentError(f"partition table {oid} is declared without a read_version; nothing was "
                                    f"published")
    return None


def _commit(manifest: Manifest, c: TableChange, work: TableWork) -> int | Made | None:
    if c.commit is not None:
        return c.commit(work.published, work.location)
    return commit_table(manifest.root, work.location, work.published, c.fragments, overwrite=c.overwrite,
                        remove=c.removed, storage_options=manifest.storage_options)


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
    writes: Sequence[TableChange],
    *,
    mode: str = "append",
    batch_id: str | None = None,
    partitions_created: int = 0,
    max_retries: int = 20,
    started: float | None = None,
    extra_retries: int = 0,
    new_tables: RowChanges | None = None,
    index_on_write: bool = True,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Publish a write (append or overwrite): every touched table committed, then one
    ``__manifest`` commit, by :func:`publish_changes`; ``new_tables`` adds the rows of the tables
    the write created with their data (``TableChange.created``). With ``index_on_write``, the
    declared indexes of each touched table are brought up to date on the version published
    (:func:`keep_indexes`); nothing is done when none is declared."""
    started = time.monotonic() if started is None else started
    writes = [w for w in writes if w.fragments]
    for w in writes:
        w.overwrite = mode == "overwrite"
    props = {**(properties or {}), OPERATION_PROPERTY: mode, ROWS_PROPERTY: str(sum(w.rows for w in writes)),
             PARTITIONS_PROPERTY: str(len(writes))}
    update_started = time.monotonic()
    pub = publish_changes(manifest, writes, what=mode, properties=props, batch_id=batch_id, new_tables=new_tables,
                          index_on_write=index_on_write, max_retries=max_retries)
    # the __manifest part of the update: reading it, the batch-id check, the commit, and any retries
    manifest_commit_s = time.monotonic() - update_started - pub.commit_tables_s
    writes = pub.changes  # new partitions found published by another writer were adopted
    skip, snap = pub.skipped, pub.snapshot
    result = CommitResult(
        manifest_version=snap.version if skip is None else max(snap.version, skip.manifest_version),
        rows_written=0 if skip is not None else sum(w.rows for w in writes),
        partitions_touched=0 if skip is not None else len(writes),
        partitions_created=partitions_created + pub.created,
        retries=pub.retries + extra_retries,
        batch_id=batch_id,
        skipped=skip is not None,
        seconds=round(time.monotonic() - started, 3),
        details=batches.result_details(skip, batches.batch_id_retention(snap.metadata)) if batch_id is not None
        else {},
    )
    result.details.update(commit_tables_s=round(pub.commit_tables_s, 3), manifest_commit_s=round(manifest_commit_s, 3))
    log.info("published %s", json.dumps(result.to_dict(), default=str))
    return result


def index_or_warn(manifest: Manifest, object_id: str, location: str, version: int,
                  decls: Sequence[IndexDeclaration], prepared: PreparedCache | None = None,
                  namespace_md: Mapping[str, str] | None = None) -> int:
    """The version of the table at ``location`` holding exactly the fragments of ``version`` with
    the declared indexes up to date; ``version`` itself, with a warning, when Lance cannot build
    one (the data is published unindexed: a search scans it flat, ``verify`` reports
    ``index_missing``); an index never fails a write."""
    try:
        return apply_on_exact(join_uri(manifest.root, location), version,
                              Maintain(decls, storage_options=manifest.storage_options, rebuild_stale=False,
                                       column_of=columns_of(namespace_md)),
                              manifest.storage_options,
                              f"partition table {location} (index)", prepared=prepared)
    except (OSError, ValueError, RuntimeError, CommitConflictError) as e:
        if is_not_found(e):
            raise  # the version is gone (a cleanup): the caller rebases
        log.warning("partition table %s: declared indexes not updated on version %d, published without them "
                    "(%s: %s)", object_id, version, type(e).__name__, e)
        return version


def keep_indexes(manifest: Manifest, created: Sequence[TableChange], decls: Sequence[IndexDeclaration],
                 indexed: dict[str, int], prepared: PreparedCache | None = None,
                 namespace_md: Mapping[str, str] | None = None) -> None:
    """Bring the declared indexes ``decls`` up to date on the tables this write created (each
    one's ``created`` version becomes the version that carries them), once per table; below a
    declaration's ``min_rows`` a table stays unindexed. Docs: docs/indexes.md."""
    todo = [w for w in created if w.object_id not in indexed]

    def one(w: TableChange) -> int:
        return index_or_warn(manifest, w.object_id, w.location, w.created, decls, prepared, namespace_md)

    for w, version in zip(todo, map_threads(one, todo), strict=True):
        indexed[w.object_id] = w.created
        w.created = version


def fragments_from_json(items: Sequence[str | Mapping]) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_json(i if isinstance(i, str) else json.dumps(i)) for i in items]
