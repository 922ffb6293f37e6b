"""Compaction of partition tables, published in ONE ``__manifest`` commit (spec "Transaction /
Commit Behavior"; docs/design.md §8; docs/layout.md "How commits stay atomic").

Before it plans, tables created small whose strings are stored uncompressed and that have grown
large get Lance's string compression back (:func:`reencode_grown`, one ``__manifest`` commit, no
rows changed), so that what the rewrite writes is compressed. Then three phases, engine-agnostic
(Spark runs the middle one on executors, :mod:`lancepart.spark.compact`):

1. **plan** (driver): the partition tables ``ns.partitions(filter)`` keeps (pruned through
   ``__manifest``), minus those pinned by ``read_tag`` / ``read_branch``. Each is opened at its
   *published* ``read_version``; one that holds at least ``min_small_fragments`` fragments
   under ``target_rows_per_fragment`` rows, or a fragment whose deleted rows reach
   ``materialize_deletions_threshold``, gets a Lance compaction plan
   (:meth:`lance.optimize.Compaction.plan`) made on that version;
2. **rewrite** (anywhere): the plan's tasks run against the table checked out at
   ``read_version`` and write new fragments (deleted rows materialised). Nothing is committed,
   so a rewrite that dies leaves only unreferenced files;
3. **commit + publish** (driver): each table gets one new version whose fragments are exactly
   ``(published − rewritten) ∪ new`` (:func:`lancepart.storage.table_commit.commit_table`), and one
   ``__manifest`` commit moves all their ``read_version``. Versions beyond ``read_version``
   (fragments of a live or dead writer) are never published by a compaction.

Safe beside live writers: when a table's ``read_version`` moved during the compaction (a
writer published an append), the commit is redone on top of the new published version if
every rewritten fragment is still in it; if not (an overwrite or another compaction replaced
them), the table is dropped from this compaction and reported. A writer whose table commit
predates the compaction's publish notices at its own publish and re-applies its fragments on
top of the compacted version (:mod:`lancepart.write.publish`).

Finally ``__manifest`` itself: every lancepart commit rewrites it as one fragment, so it is
compacted only when it holds several (a foreign writer appended to it), and its indexes are
brought up to date (``optimize_indices``), because each commit leaves its new rows unindexed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import lance
from lance.fragment import FragmentMetadata
from lance.optimize import Compaction, CompactionOptions, CompactionTask

from lancepart.errors import CommitConflictError, FragmentsGoneError, InvalidArgumentError, LancepartError
from lancepart.evolution.schema_evolution import columns_of
from lancepart.index import IndexDeclaration, Maintain, PreparedCache, apply_on_exact, declarations, index_state
from lancepart.model.ids import check_location
from lancepart.read.snapshot import open_partition
from lancepart.results import CommitResult, PartitionInfo
from lancepart.storage.error_mapping import table_failure as describe_failure
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import Manifest, ManifestSnapshot, join_uri
from lancepart.storage.table_commit import _ident, commit_table
from lancepart.util import faults
from lancepart.util.parallel import map_threads
from lancepart.write.publish import LeaveOut, Made, TableChange, publish_changes

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.maintenance")

DEFAULT_TARGET_ROWS = 1_048_576
DEFAULT_MIN_SMALL_FRAGMENTS = 2
DEFAULT_DELETIONS_THRESHOLD = 0.1


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class FragmentStats:
    """The fragments of one table version, summed up."""

    fragments: int = 0
    small: int = 0  # fragments with fewer live rows than the target
    deletion_heavy: int = 0  # fragments whose deleted share reaches the threshold
    rows: int = 0  # live rows
    deleted_rows: int = 0
    bytes: int = 0  # data files

    @classmethod
    def of(cls, frags: Sequence[FragmentMetadata], target_rows: int = DEFAULT_TARGET_ROWS,
           deletions_threshold: float = DEFAULT_DELETIONS_THRESHOLD) -> FragmentStats:
        physical = [f.physical_rows or 0 for f in frags]
        deleted = [f.num_deletions or 0 for f in frags]
        return cls(
            fragments=len(frags),
            small=sum(p - d < target_rows for p, d in zip(physical, deleted, strict=True)),
            deletion_heavy=sum(d > 0 and d >= deletions_threshold * p for p, d in zip(physical, deleted, strict=True)),
            rows=sum(physical) - sum(deleted),
            deleted_rows=sum(deleted),
            bytes=sum(df.file_size_bytes or 0 for f in frags for df in f.files),
        )

    def __add__(self, other: FragmentStats) -> FragmentStats:
        return FragmentStats(*(a + b for a, b in zip(asdict(self).values(), asdict(other).values(), strict=True)))


@dataclass(frozen=True)
class TablePlan:
    """The Lance compaction tasks of one partition table, all made on its published ``read_version``."""

    object_id: str
    location: str
    read_version: int
    tasks: list[str]  # lance.optimize.CompactionTask JSON
    before: FragmentStats = field(default_factory=FragmentStats)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "before": asdict(self.before)})

    @classmethod
    def from_json(cls, text: str) -> TablePlan:
        d = json.loads(text)
        return cls(**{**d, "before": FragmentStats(**d["before"])})


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction will rewrite, decided on one ``__manifest`` snapshot."""

    manifest_version: int
    tables: list[TablePlan]  # tables to rewrite
    examined: FragmentStats  # every selected, unpinned table at its read_version
    tables_examined: int
    tables_already_compact: int
    tables_skipped: list[dict[str, str]]  # {"object_id", "reason"}: pinned or unpublished tables
    target_rows_per_fragment: int
    failures: dict[str, str] = field(default_factory=dict)  # object_id -> why it could not be planned


@dataclass
class TableRewrite:
    """What a rewrite produced for one table: the fragments it replaces and the new ones."""

    object_id: str
    location: str
    read_version: int
    removed: list[FragmentMetadata]
    added: list[FragmentMetadata]
    rows: int
    before: FragmentStats = field(default_factory=FragmentStats)

    def to_json(self) -> str:
        return json.dumps({"object_id": self.object_id, "location": self.location,
                           "read_version": self.read_version, "rows": self.rows, "before": asdict(self.before),
                           "removed": [f.to_json() for f in self.removed], "added": [f.to_json() for f in self.added]})

    @classmethod
    def from_json(cls, text: str) -> TableRewrite:
        d = json.loads(text)
        frags = {k: [FragmentMetadata.from_json(json.dumps(f)) for f in d[k]] for k in ("removed", "added")}
        return cls(d["object_id"], d["location"], d["read_version"], frags["removed"], frags["added"], d["rows"],
                   FragmentStats(**d["before"]))


# --------------------------------------------------------------------------- per-table isolation
def table_failure(e: BaseException, root: str, object_id: str, location: str) -> str:
    """Why one table could not be compacted, naming it (and the file when the error says which):
    one table that cannot be read must not stop the others."""
    return describe_failure(e, join_uri(root, location), object_id)


@dataclass(frozen=True)
class RewriteFailure:
    """A table whose rewrite failed (it is left as it is; the others are published)."""

    object_id: str
    message: str

    def to_json(self) -> str:
        return json.dumps({"failed": True, "object_id": self.object_id, "message": self.message})


def rewrite_or_failure(root: str, plan: TablePlan, storage_options: Mapping[str, str] | None = None
                       ) -> TableRewrite | RewriteFailure:
    """:func:`rewrite_table`, or the :class:`RewriteFailure` that names the table when it fails."""
    try:
        return rewrite_table(root, plan, storage_options)
    except faults.InjectedFault:
        raise
    except Exception as e:
        log.warning("compaction of %s failed; left as it is", plan.object_id)
        return RewriteFailure(plan.object_id, table_failure(e, root, plan.object_id, plan.location))


def split_rewrites(results: Sequence[TableRewrite | RewriteFailure]) -> tuple[list[TableRewrite], dict[str, str]]:
    rewrites = [r for r in results if isinstance(r, TableRewrite)]
    return rewrites, {r.object_id: r.message for r in results if isinstance(r, RewriteFailure)}


# --------------------------------------------------------------------------- phase 1: plan
def check_options(target_rows_per_fragment: int, min_small_fragments: int, materialize_deletions_threshold: float
                  ) -> None:
    if not isinstance(target_rows_per_fragment, int) or target_rows_per_fragment < 1:
        raise InvalidArgumentError(f"target_rows_per_fragment must be a positive integer, "
                                   f"got {target_rows_per_fragment!r}")
    if not isinstance(min_small_fragments, int) or min_small_fragments < 2:
        raise InvalidArgumentError(f"min_small_fragments must be an integer >= 2 (one small fragment has nothing "
                                   f"to merge with), got {min_small_fragments!r}")
    if not 0 < materialize_deletions_threshold <= 1:
        raise InvalidArgumentError(f"materialize_deletions_threshold must be in (0, 1], "
                                   f"got {materialize_deletions_threshold!r}")


def _skip_reason(p: PartitionInfo) -> str | None:
    if p.read_tag is not None:
        return f"pinned to read_tag {p.read_tag!r}"
    if p.read_branch is not None:
        return f"pinned to read_branch {p.read_branch!r}"
    if p.read_version is None:
        return "read_version is NULL (reads follow the latest version; nothing is published to compact)"
    return None


def plan_compaction(
    ns: NamespaceHandle,
    filter: str | None = None,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    *,
    min_small_fragments: int = DEFAULT_MIN_SMALL_FRAGMENTS,
    materialize_deletions_threshold: float = DEFAULT_DELETIONS_THRESHOLD,
) -> CompactionPlan:
    """Decide which partition tables to rewrite, on the namespace's current snapshot.

    >>> _ = ns.write(pa.table({"id": [7], "event_date": [date(2025, 12, 10)], "country": ["US"]}))  # 2nd fragment
    >>> plan = plan_compaction(ns, "event_date <= DATE '2025-12-10'")
    >>> [(t.read_version, t.before.fragments) for t in plan.tables], plan.tables_already_compact
    ([(2, 2)], 1)
    """
    check_options(target_rows_per_fragment, min_small_fragments, materialize_deletions_threshold)
    parts = ns.partitions(filter)
    skipped = [{"object_id": p.object_id, "reason": r} for p in parts if (r := _skip_reason(p)) is not None]
    candidates = [p for p in parts if _skip_reason(p) is None]
    options = CompactionOptions(target_rows_per_fragment=target_rows_per_fragment, materialize_deletions=True,
                                materialize_deletions_threshold=materialize_deletions_threshold)

    failures: dict[str, str] = {}

    def plan_one(p: PartitionInfo) -> tuple[TablePlan | None, FragmentStats]:
        try:
            return plan_table(p)
        except Exception as e:
            failures[p.object_id] = table_failure(e, ns.root, p.object_id, p.location)
            return None, FragmentStats()

    def plan_table(p: PartitionInfo) -> tuple[TablePlan | None, FragmentStats]:
        ds = open_partition(ns.root, p, ns.storage_options)  # the published version, never the latest
        stats = FragmentStats.of([f.metadata for f in ds.get_fragments()], target_rows_per_fragment,
                                 materialize_deletions_threshold)
        if stats.small < min_small_fragments and not stats.deletion_heavy:
            return None, stats
        plan = Compaction.plan(ds, options)
        if plan.num_tasks() == 0:  # e.g. small fragments that are not adjacent
            return None, stats
        return TablePlan(p.object_id, p.location, p.read_version, [t.json() for t in plan.tasks], stats), stats

    results = map_threads(plan_one, candidates)
    tables = [t for t, _ in results if t is not None]
    examined = sum((s for _, s in results), FragmentStats())
    return CompactionPlan(
        manifest_version=ns.manifest_version,
        tables=tables,
        examined=examined,
        tables_examined=len(candidates),
        tables_already_compact=len(candidates) - len(tables) - len(failures),
        tables_skipped=skipped,
        target_rows_per_fragment=target_rows_per_fragment,
        failures=dict(sorted(failures.items())),
    )


# --------------------------------------------------------------------------- phase 2: rewrite
def rewrite_table(root: str, plan: TablePlan, storage_options: Mapping[str, str] | None = None) -> TableRewrite:
    """Run one table's compaction tasks on its published version and return the fragments they
    replace and write. Commits nothing (runs on executors too).

    >>> _ = ns.write(pa.table({"id": [7], "event_date": [date(2025, 12, 10)], "country": ["US"]}))  # 2nd fragment
    >>> plan = plan_compaction(ns, "event_date = DATE '2025-12-10'")
    >>> rewrite = rewrite_table(ns.root, plan.tables[0])
    >>> len(rewrite.removed), len(rewrite.added)
    (2, 1)
    """
    so = dict(storage_options) if storage_options else None
    uri = join_uri(root, check_location(plan.location, plan.object_id, root))
    ds = open_table(uri, version=plan.read_version, storage_options=so)
    removed: list[FragmentMetadata] = []
    added: list[FragmentMetadata] = []
    for text in plan.tasks:
        task = CompactionTask.from_json(text)
        if task.read_version != plan.read_version:
            raise LancepartError(f"partition table {plan.object_id}: compaction task made on version "
                                 f"{task.read_version}, expected the published {plan.read_version}")
        result = task.execute(ds)
        removed.extend(result.original_fragments)
        added.extend(result.new_fragments)
    faults.checkpoint("after_fragments")
    live_before = FragmentStats.of(removed).rows
    rows = sum(f.physical_rows or 0 for f in added)
    if rows != live_before:  # never commit a rewrite that lost or invented rows
        raise LancepartError(f"partition table {plan.object_id} ({uri}): compaction wrote {rows} rows for "
                             f"{live_before} live rows of version {plan.read_version}; nothing committed")
    return TableRewrite(plan.object_id, plan.location, plan.read_version, removed, added, rows, plan.before)


# --------------------------------------------------------------------------- phase 3: commit + publish
@dataclass
class Published:
    snapshot: ManifestSnapshot
    committed: bool  # a __manifest commit landed
    tables: dict[str, tuple[int, FragmentStats]]  # object_id -> (published version, stats of its base version)
    dropped: dict[str, str]  # object_id -> why it was left out
    rebased: set[str]
    retries: int
    failures: dict[str, str] = field(default_factory=dict)  # object_id -> the error that left it out


def keep_fragment_ids(rw: TableRewrite, committed: lance.LanceDataset) -> None:
    """Give the rewritten fragments the ids they got in ``committed`` (a version holding them), so
    that committing the rewrite again on a newer published version (a rebase) keeps them: an index
    built on the first version then still indexes them. Lance never hands out a fragment id twice
    in a table's history, so an id once taken cannot collide."""
    ids = {_ident(f.metadata): f.fragment_id for f in committed.get_fragments()}
    for f in rw.added:
        f.id = ids.get(_ident(f), f.id)


def publish_compaction(manifest: Manifest, rewrites: Sequence[TableRewrite], *, max_retries: int = 20,
                       properties: Mapping[str, str] | None = None) -> Published:
    """Commit every rewritten table on top of its published version and move all their
    ``read_version`` in ONE ``__manifest`` commit, through the one publish path. A table whose
    rewritten fragments are gone from its published version (overwritten or compacted by someone
    else), or that was dropped, pinned or un-versioned meanwhile, is left out; so is one whose
    storage fails (its ``failures``), and the others are published."""
    todo = [r for r in rewrites if r.removed]
    if len({r.object_id for r in todo}) != len(todo):
        raise ValueError("one TableRewrite per partition table expected")
    if not todo:
        return Published(manifest.snapshot(), False, {}, {}, set(), 0)
    op = _CompactionPublish(manifest, todo)
    pub = publish_changes(manifest, op.plan, what="compaction publish", unpublishable="leave_out",
                          check_constraints=False, max_retries=max_retries, properties=properties)
    tables = {oid: (m.version, m.info) for oid, m in pub.made.items()}
    return Published(pub.snapshot, pub.committed, tables,
                     {o: r for o, r in pub.left_out.items() if o not in pub.failures}, op.rebased & set(tables),
                     pub.retries, dict(pub.failures))


class _CompactionPublish:
    """The table changes of :func:`publish_compaction` and what its attempts share: the tables
    rebased, the declared indexes and ``__manifest`` metadata of the snapshot being published,
    and the compacted tables' index builds (committed again on a rebase)."""

    def __init__(self, manifest: Manifest, todo: Sequence[TableRewrite]) -> None:
        self.manifest = manifest
        self.rebased: set[str] = set()
        self.decls: list[IndexDeclaration] = []
        self.namespace_md: dict[str, str] = {}
        self.prepared: PreparedCache = {}  # the compacted tables' index builds, committed again on a rebase
        self.changes = [self._change(r) for r in todo]

    def plan(self, snap: ManifestSnapshot) -> list[TableChange]:
        self.decls[:] = declarations(snap.metadata)
        self.namespace_md.clear()
        self.namespace_md.update(snap.metadata)
        return self.changes

    def _change(self, rw: TableRewrite) -> TableChange:
        manifest = self.manifest

        def commit(published: int | None, location: str) -> Made:
            try:
                return self._compact_on(rw, published, location)
            except (faults.InjectedFault, CommitConflictError, LeaveOut):
                raise
            except (OSError, ValueError) as e:  # this table's storage or files: leave it out, publish the others
                raise LeaveOut(table_failure(e, manifest.root, rw.object_id, location), failure=True) from e

        return TableChange(rw.object_id, rw.location, list(rw.added), rw.rows, commit=commit)

    def _compact_on(self, rw: TableRewrite, published: int | None, location: str) -> Made:
        """Commit the rewrite on the table's published version (rebased onto it if a writer published
        since the plan), then its declared indexes on the compacted version."""
        manifest = self.manifest
        base = rw.before
        uri = join_uri(manifest.root, location)
        if published != rw.read_version:  # a writer published since the plan: rebase onto its version
            self.rebased.add(rw.object_id)
            ds = open_table(uri, version=published, storage_options=manifest.storage_options)
            base = FragmentStats.of([f.metadata for f in ds.get_fragments()])
        try:
            version = commit_table(manifest.root, location, published, rw.added, remove=rw.removed,
                                   storage_options=manifest.storage_options)
        except FragmentsGoneError:
            raise LeaveOut(f"read_version moved from {rw.read_version} to {published} and the rewritten fragments "
                           f"are no longer in it (overwritten or compacted by someone else)") from None
        if self.decls:  # the index on the compacted version: never one naming the rewritten fragments
            version = self._index(rw, uri, location, version)
        return Made(rw.object_id, published, version, info=base)

    def _index(self, rw: TableRewrite, uri: str, location: str, version: int) -> int:
        """The declared indexes on the compacted ``version``; the version that has them. A failure
        leaves the table out when its indexes would name rewritten fragments, else is logged."""
        so = self.manifest.storage_options
        keep_fragment_ids(rw, open_table(uri, version=version, storage_options=so))
        try:
            version = apply_on_exact(uri, version, Maintain(self.decls, storage_options=so,
                                                            column_of=columns_of(self.namespace_md)),
                                     so, f"partition table {location} (index)", prepared=self.prepared)
        except (OSError, ValueError, RuntimeError, CommitConflictError) as e:
            compacted = open_table(uri, version=version, storage_options=so)
            if any(index_state(compacted, d) == "stale" for d in self.decls):  # it would name rewritten fragments
                raise LeaveOut(f"its declared indexes could not be rebuilt on the compacted version "
                               f"({type(e).__name__}: {e}); left uncompacted", failure=True) from e
            log.warning("partition table %s: declared indexes not updated on compacted version %d (%s: %s)",
                        rw.object_id, version, type(e).__name__, e)
        return version


# --------------------------------------------------------------------------- __manifest itself
def compact_manifest(manifest: Manifest, target_rows_per_fragment: int = DEFAULT_TARGET_ROWS) -> dict[str, Any]:
    """Compact ``__manifest`` if it holds more than one fragment, then bring its indexes up to
    date. Both commits leave its rows as they are, so they neither conflict with nor undo a
    concurrent lancepart commit (which rewrites every row anyway)."""
    ds = manifest.dataset()
    out: dict[str, Any] = {"fragments_before": len(ds.get_fragments()), "commits": 0}
    if out["fragments_before"] > 1:
        try:
            ds.optimize.compact_files(target_rows_per_fragment=target_rows_per_fragment, materialize_deletions=True)
            out["commits"] += 1
        except (OSError, ValueError) as e:  # a writer replaced those fragments (Lance's conflicts are OSErrors)
            out["compact_files"] = f"skipped: {type(e).__name__}"
        ds = manifest.dataset()
    out["fragments_after"] = len(ds.get_fragments())

    def unindexed(ds: lance.LanceDataset) -> int:
        return max((ds.stats.index_stats(i.name)["num_unindexed_rows"] for i in ds.describe_indices()), default=0)

    out["unindexed_rows_before"] = unindexed(ds)
    if out["unindexed_rows_before"]:
        ds.optimize.optimize_indices()
        out["commits"] += 1
    missing = len(manifest.dataset().describe_indices())
    manifest.ensure_indexes()
    ds = manifest.dataset()
    out["commits"] += len(ds.describe_indices()) - missing
    out["unindexed_rows_after"] = unindexed(ds)
    out["version"] = ds.version
    return out


# --------------------------------------------------------------------------- the whole operation
def finish_compaction(
    manifest: Manifest,
    plan: CompactionPlan,
    rewrites: Sequence[TableRewrite],
    *,
    started: float,
    phases: dict[str, Any],
    max_retries: int = 20,
    compact_manifest_table: bool = True,
    failures: Mapping[str, str] | None = None,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Phase 3 and the ``__manifest`` maintenance; the :class:`CommitResult` of the compaction.
    ``failures`` (object_id -> message) are tables whose rewrite failed; with those the plan and
    the publish could not handle, they are the result's ``failures``.

    1. publish the rewritten tables (:func:`publish_compaction`);
    2. count what the compaction changed (:func:`_compaction_details`);
    3. bring the declared indexes up to date, if any are declared;
    4. compact ``__manifest`` (:func:`compact_manifest`), unless ``compact_manifest_table`` is False;
    5. the result, logged with every table left out."""
    t = time.monotonic()
    pub = publish_compaction(manifest, rewrites, max_retries=max_retries, properties=properties)
    phases["publish_s"] = round(time.monotonic() - t, 3)
    rewritten = {r.object_id: r for r in rewrites}
    details = _compaction_details(plan, pub, rewritten)
    version = pub.snapshot.version
    index_failures: dict[str, str] = {}
    indexed = _maintain_indexes(manifest, max_retries, phases) if declarations(pub.snapshot.metadata) else None
    if indexed is not None:
        details["index_maintenance"] = {"tables_changed": indexed.details["tables_changed"],
                                        "published_version": indexed.manifest_version}
        version = indexed.manifest_version
        index_failures = indexed.failures  # a table compaction could not read either, as a rule
    if compact_manifest_table:
        t = time.monotonic()
        details["manifest"] = compact_manifest(manifest, plan.target_rows_per_fragment)
        phases["manifest_s"] = round(time.monotonic() - t, 3)
        version = details["manifest"]["version"]
    details.update(phases)
    result = CommitResult(
        manifest_version=version,
        rows_written=sum(rewritten[o].rows for o in pub.tables),
        partitions_touched=len(pub.tables),
        retries=pub.retries,
        seconds=round(time.monotonic() - started, 3),
        details=details,
        failures=dict(sorted({**index_failures, **plan.failures, **(failures or {}), **pub.failures}.items())),
    )
    for oid, why in result.failures.items():
        log.warning("compaction skipped %s: %s", oid, why)
    log.info("compacted %s", json.dumps(result.to_dict(), default=str))
    return result


def _compaction_details(plan: CompactionPlan, pub: Published, rewritten: Mapping[str, TableRewrite]) -> dict[str, Any]:
    """The result's details: the tables planned, left out and rebased, and the fragments and bytes
    of the examined tables before and after."""
    before = plan.examined
    # the published tables after: their (possibly rebased) base minus what was rewritten plus the new fragments
    fragments_after, bytes_after = before.fragments, before.bytes
    for oid, (_, base) in pub.tables.items():
        rw = rewritten[oid]
        removed, added = FragmentStats.of(rw.removed), FragmentStats.of(rw.added)
        fragments_after += base.fragments - rw.before.fragments - removed.fragments + added.fragments
        bytes_after += base.bytes - rw.before.bytes - removed.bytes + added.bytes
    return {
        "tables_examined": plan.tables_examined,
        "tables_already_compact": plan.tables_already_compact,
        "tables_planned": len(plan.tables),
        "tables_skipped": plan.tables_skipped,
        "tables_dropped_on_conflict": [{"object_id": o, "reason": r} for o, r in sorted(pub.dropped.items())],
        "tables_rebased": len(pub.rebased),
        "fragments_before": before.fragments,
        "fragments_after": fragments_after,
        "bytes_before": before.bytes,
        "bytes_after": bytes_after,
        "deleted_rows_materialized": sum(FragmentStats.of(rewritten[o].removed).deleted_rows for o in pub.tables),
        "published_version": pub.snapshot.version if pub.committed else None,
        "target_rows_per_fragment": plan.target_rows_per_fragment,
    }


def _maintain_indexes(manifest: Manifest, max_retries: int, phases: dict[str, Any]) -> CommitResult | None:
    """The declared indexes of every table brought up to date after the publish
    (:func:`~lancepart.maintenance.indexes.maintain_all`); its seconds into ``phases``."""
    from lancepart.maintenance.indexes import maintain_all

    t = time.monotonic()
    indexed = maintain_all(manifest, max_retries=max_retries)
    phases["index_s"] = round(time.monotonic() - t, 3)
    return indexed


def upgrade_outdated(ns: NamespaceHandle, filter: str | None = None) -> tuple[int, dict[str, str]]:
    """Bring every partition table ``filter`` selects that is in an older form of the schema up
    to date (:func:`~lancepart.write.upgrade.upgrade_table`); ``(tables upgraded, {object_id:
    why it was skipped})``. Compaction runs this first: it rewrites old tables into the current
    schema."""
    from lancepart.evolution.schema_evolution import MAX_FIELD_ID_KEY, is_current
    from lancepart.read.snapshot import open_published
    from lancepart.write.upgrade import upgrade_table, upgrade_tables

    md = ns.snapshot().metadata
    if MAX_FIELD_ID_KEY not in md:  # the schema never changed: every table is current
        return 0, {}
    parts = [p for p in ns.partitions(filter) if p.read_branch is None and p.read_tag is None]
    batched = len(upgrade_tables(ns.manifest, [(p.object_id, p.location) for p in parts]))  # one commit for most
    if batched:
        ns.refresh()
        md = ns.snapshot().metadata
        parts = [p for p in ns.partitions(filter) if p.read_branch is None and p.read_tag is None]

    def one(p: PartitionInfo) -> bool | str:
        try:
            ds = open_published(ns.root, p, ns.storage_options)
            if ds is None or is_current(ds.schema, md, ns.schema):
                return False
            return upgrade_table(ns.manifest, p.object_id, p.location)[0] is not None
        except (LancepartError, OSError, ValueError) as e:  # a table that cannot be opened: typed, named
            return f"{type(e).__name__}: {e}"

    results = map_threads(one, parts)  # the ones a concurrent commit kept out of the batch, one by one
    failures = {p.object_id: r for p, r in zip(parts, results, strict=True) if isinstance(r, str)}
    return batched + sum(1 for r in results if r is True), failures


def reencode_grown(ns: NamespaceHandle, filter: str | None = None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Before a compaction plans: the tables ``filter`` selects that were created small and have
    grown get Lance's own string compression back, published in one ``__manifest`` commit
    (:func:`~lancepart.write.upgrade.reencode_grown_tables`), so that the files the compaction then
    rewrites, and every later append, are compressed. ``({object_id: columns}, {object_id: why})``."""
    from lancepart.write.upgrade import reencode_grown_tables

    parts = [p for p in ns.partitions(filter) if _skip_reason(p) is None]
    return reencode_grown_tables(ns.manifest, [(p.object_id, p.location) for p in parts])


def compact(
    ns: NamespaceHandle,
    filter: str | None = None,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    *,
    min_small_fragments: int = DEFAULT_MIN_SMALL_FRAGMENTS,
    materialize_deletions_threshold: float = DEFAULT_DELETIONS_THRESHOLD,
    compact_manifest_table: bool = True,
    max_retries: int = 20,
    properties: Mapping[str, str] | None = None,
) -> CommitResult:
    """Compact the partition tables ``filter`` selects, in-process, and publish them in one
    ``__manifest`` commit; ``partitions_touched`` is the number of tables compacted and
    ``rows_written`` the rows rewritten. Nothing to do: no ``__manifest`` commit at all.

    >>> _ = ns.write(pa.table({"id": [7], "event_date": [date(2025, 12, 10)], "country": ["US"]}))  # 2nd fragment
    >>> result = compact(ns, "event_date <= DATE '2025-12-10'")
    >>> result.partitions_touched, result.rows_written, result.details["fragments_after"]
    (1, 3, 2)
    >>> compact(ns).details["manifest"]["commits"]     # every table is compact now: no commit
    0
    """
    started = time.monotonic()
    ns.refresh()
    upgraded, upgrade_failures = upgrade_outdated(ns, filter)  # older tables into the current schema first
    if upgraded:
        ns.refresh()
    reencoded, reencode_failures = reencode_grown(ns, filter)  # grown small tables compressed again first
    if reencoded:
        ns.refresh()
    plan = plan_compaction(ns, filter, target_rows_per_fragment, min_small_fragments=min_small_fragments,
                           materialize_deletions_threshold=materialize_deletions_threshold)
    phases: dict[str, Any] = {"plan_s": round(time.monotonic() - started, 3)}
    t = time.monotonic()
    # one table per thread; Lance runs each rewrite in Rust without the GIL
    rewrites, failures = split_rewrites(
        map_threads(lambda tp: rewrite_or_failure(ns.root, tp, ns.storage_options), plan.tables))
    phases["rewrite_s"] = round(time.monotonic() - t, 3)
    result = finish_compaction(ns.manifest, plan, rewrites, started=started, phases=phases,
                               max_retries=max_retries, compact_manifest_table=compact_manifest_table,
                               failures={**upgrade_failures, **reencode_failures, **failures}, properties=properties)
    result.details["schema_upgraded"] = upgraded
    result.details["tables_reencoded"] = len(reencoded)
    return result
