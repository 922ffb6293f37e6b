"""Row-level delete: remove the rows matching a filter from every partition, in one publish.

For each partition table the pruner keeps, the rows of its *published* ``read_version`` for
which the filter is TRUE (evaluated exactly, by DataFusion, as reads evaluate it) get Lance
deletion files; the table version committed for it holds exactly the published fragments, the
touched ones with their new deletion file and the ones left with no row removed. Versions
beyond ``read_version`` belong to other jobs' unpublished work and never leak into ours (the
same rule as a write's table commit, :mod:`lancepart.write.tables`). Then ONE ``__manifest``
commit moves ``read_version`` of every changed table: all partitions or none.

A partition the filter covers entirely, as the strict projection of drop_partitions proves it
(the filter names only identity-partitioned columns and is TRUE on the partition's values), is
emptied without reading a row: every fragment of its published version is removed. It stays in
``__manifest`` with an empty version (``drop_partitions`` removes partitions themselves).

Conflicts (docs/delete.md): the ``__manifest`` commit is optimistic. On a conflict the
mutation runs again on the new snapshot; a table whose published version moved meanwhile (a
concurrent append, delete or compaction published first) has the delete evaluated again on the
new published version, so rows appended and published first that match are deleted too, and
rows another delete removed stay removed. A table whose published version did not move keeps
the version already committed for it. No matching row anywhere: nothing is committed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import lance
import numpy as np
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from lancepart.errors import (
    InvalidArgumentError,
    InvalidFilterError,
    LancepartError,
    PartitionPinnedError,
)
from lancepart.ids import check_location
from lancepart.manifest import (
    PARTITIONS_PROPERTY,
    ROWS_REMOVED_PROPERTY,
    ManifestSnapshot,
    join_uri,
)
from lancepart.results import CommitResult
from lancepart.spec import PartitionSpec
from lancepart.write.publish import Made, TableChange, TableWork, publish_changes
from lancepart.write.tables import _ident, commit_exactly

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.maintenance")
_ADDR = "_rowaddr"


@dataclass(frozen=True)
class TableDelete:
    """The delete applied to one partition table: on ``base`` (its published version then),
    ``rows`` rows removed by committing ``version`` (None: no row matched, nothing committed)."""

    object_id: str
    location: str
    base: int | None
    version: int | None
    rows: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TableDelete:
        return cls(**json.loads(text))


# (object_id, location, published read_version, every row matches) of each table to delete from
TableTodo = tuple[str, str, int, bool]
# applies the delete to each table of a snapshot's todo list; the default runs them on local threads
ApplyTables = Callable[[int, Sequence[TableTodo], str | None], list[TableDelete]]


def matching_addresses(ds: lance.LanceDataset, schema: pa.Schema, filter: str, scan_filter: str | None
                       ) -> np.ndarray:
    """Row addresses (``_rowaddr``) of the rows of ``ds`` for which ``filter`` is TRUE: the
    columns it names are read (``scan_filter`` pushed into the scan), then ``filter`` is applied
    exactly by DataFusion, as :meth:`NamespaceHandle.to_table` applies it."""
    from lancepart.read.predicates import filter_columns
    from lancepart.read.snapshot import apply_filter
    from lancepart.schema_evolution import read_columns

    cols = filter_columns(filter, schema)
    # by field id: a table in an older form of the schema names or types a column differently
    view = read_columns(ds, schema, cols, filter=scan_filter, with_row_address=True)
    try:
        matched = apply_filter(view, filter)
    except InvalidArgumentError as e:
        raise InvalidFilterError(str(e)) from None
    return matched.column(_ADDR).to_numpy().astype(np.uint64)


def address_predicate(addr: np.ndarray) -> str:
    """A Lance predicate selecting exactly the sorted row addresses ``addr``: each run of
    consecutive addresses as one ``BETWEEN`` (a clustered delete stays a short predicate), the
    runs found with numpy."""
    breaks = np.flatnonzero(np.diff(addr) != 1) + 1
    lo = addr[np.concatenate(([0], breaks))]
    hi = addr[np.concatenate((breaks - 1, [len(addr) - 1]))]
    single = lo == hi
    terms = []
    if single.any():
        terms.append(f"{_ADDR} IN ({', '.join(lo[single].astype(str).tolist())})")
    terms.extend(f"({_ADDR} BETWEEN {a} AND {b})" for a, b in zip(lo[~single].tolist(), hi[~single].tolist(),
                                                                   strict=True))
    return " OR ".join(terms)


def deletion_files(ds: lance.LanceDataset, addr: np.ndarray) -> tuple[list[FragmentMetadata], list[int]]:
    """Delete the rows at the addresses ``addr`` from the fragments of ``ds`` without committing:
    ``(fragments with their new deletion file, ids of fragments whose every row goes)``, what
    :func:`commit_deletions` (or a commit that also appends, :mod:`lancepart.write.merge`) takes."""
    addr = np.sort(addr)
    frag_of = (addr >> np.uint64(32)).astype(np.int64)
    frag_ids, starts, counts = np.unique(frag_of, return_index=True, return_counts=True)
    updated: list[FragmentMetadata] = []
    removed: list[int] = []
    for frag_id, start, count in zip(frag_ids.tolist(), starts.tolist(), counts.tolist(), strict=True):
        fragment = ds.get_fragment(frag_id)
        if count == fragment.count_rows():  # every live row matches: the fragment goes, no deletion file
            removed.append(frag_id)
            continue
        md = fragment.delete(address_predicate(addr[start:start + count]))
        if md is None:
            removed.append(frag_id)
        else:
            updated.append(md)
    return updated, removed


def commit_deletions(uri: str, base_version: int, updated: Sequence[FragmentMetadata], removed_ids: Sequence[int],
                     storage_options: Mapping[str, str] | None = None, max_attempts: int = 40) -> int:
    """Commit, on top of ``base_version``, the version whose fragments are exactly the base's with
    ``updated`` (same ids, a new deletion file) in place of theirs and without ``removed_ids``
    (every row deleted); return it. Like :func:`lancepart.write.tables.commit_table`: a base
    fragment missing or altered in the latest version is restored first, foreign fragments are
    removed, and the version made is checked to be exactly that."""
    so = dict(storage_options) if storage_options else None
    base = {_ident(f.metadata): f.fragment_id for f in lance.dataset(uri, version=base_version,
                                                                      storage_options=so).get_fragments()}
    changed = {f.id for f in updated} | set(removed_ids)
    wanted = {ident for ident, fid in base.items() if fid not in changed} | {_ident(f) for f in updated}

    def update(have: Mapping[Any, int]) -> LanceOperation.Update:
        remove = [fid for ident, fid in have.items()
                  if ident not in wanted and (fid in removed_ids or fid not in changed)]
        return LanceOperation.Update(removed_fragment_ids=remove, updated_fragments=list(updated))

    return commit_exactly(uri, base_version, set(base), wanted, update, so, f"partition table {uri} (delete)",
                          max_attempts=max_attempts)


def delete_in_table(root: str, object_id: str, location: str, base: int, schema: pa.Schema, filter: str,
                    scan_filter: str | None, storage_options: Mapping[str, str] | None = None, *,
                    whole: bool = False) -> TableDelete:
    """Delete the rows matching ``filter`` from version ``base`` of one partition table and commit
    the result (nothing when no row matches). ``whole``: the strict projection proved that every
    row matches (:func:`entire_tables`); every fragment goes without reading a row."""
    so = dict(storage_options) if storage_options else None
    uri = join_uri(root, check_location(location, object_id, root))
    ds = lance.dataset(uri, version=base, storage_options=so)
    if whole:
        fragments = ds.get_fragments()
        rows = sum(f.count_rows() for f in fragments)  # from the fragment metadata
        if not fragments:
            return TableDelete(object_id, location, base, None, 0)
        version = commit_deletions(uri, base, [], [f.fragment_id for f in fragments], so)
        return TableDelete(object_id, location, base, version, rows)
    addr = matching_addresses(ds, schema, filter, scan_filter)
    if not len(addr):
        return TableDelete(object_id, location, base, None, 0)
    updated, removed = deletion_files(ds, addr)
    version = commit_deletions(uri, base, updated, removed, so)
    if version <= base:
        raise LancepartError(f"{object_id}: table version {version} would move read_version {base} backwards")
    return TableDelete(object_id, location, base, version, len(addr))


def entire_tables(filter: str, schema: pa.Schema, specs: Mapping[int, PartitionSpec], pins: pa.Table) -> set[str]:
    """The partition tables whose every row matches ``filter``, by the strict projection
    drop_partitions uses (:func:`lancepart.maintenance.drop.matching_tables`: the filter names only
    identity-partitioned columns and is TRUE on the partition values); empty where that cannot be
    decided (those tables are read)."""
    from lancepart.read.manifest_query import matching_tables

    try:
        picked = matching_tables(filter, schema, dict(specs), pins)
    except InvalidFilterError:  # a column that is not identity-partitioned: decided row by row instead
        return set()
    return set(pins.column("object_id").take(pa.array(picked, pa.int64())).to_pylist()) if picked else set()


def delete(ns: NamespaceHandle, filter: str, *, max_retries: int = 20,
           apply_tables: ApplyTables | None = None, phases: dict[str, Any] | None = None) -> CommitResult:
    """Delete every published row matching ``filter`` (SQL over source columns) in one publish.
    ``apply_tables`` runs the per-table deletes elsewhere (``lancepart.spark.delete``: on the
    executors); the ``__manifest`` commit and its rebase stay here.

    >>> # delete(ns, "user_id = 42").details["rows_deleted"]
    """
    from lancepart.ids import partition_spec_id
    from lancepart.read.prune import prune

    if not isinstance(filter, str) or not filter.strip():
        raise InvalidFilterError("delete needs a filter (a SQL boolean expression over the namespace's columns); "
                                 "to delete every row say so: filter='TRUE'")
    started = time.monotonic()
    ns.refresh()  # a stale handle must not miss partitions of a spec version evolved since it was opened
    from lancepart.schema_evolution import with_legacy_ids

    # the legacy ids place the columns of tables written before the first schema change
    manifest, schema, specs = ns.manifest, with_legacy_ids(ns.schema, ns.snapshot().metadata), ns.specs
    scan: dict[str, Any] = {}  # the scan filter of the snapshot being published
    whole: dict[str, bool] = {}  # object_id -> every row of the table matches

    def change(oid: str) -> TableChange:
        def commit(published: int | None, location: str) -> Made:
            d = delete_in_table(manifest.root, oid, location, published, schema, filter, scan["filter"],
                                manifest.storage_options, whole=whole[oid])
            return Made(oid, published, d.version, info=d)

        return TableChange(oid, commit=commit)

    def plan(snap: ManifestSnapshot) -> list[TableChange]:
        try:
            pruned = prune(filter, schema, specs, snap.table_pins())
        except InvalidArgumentError as e:
            raise InvalidFilterError(str(e)) from None
        cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
        rows = [r for r in pruned.kept.select(cols).to_pylist() if partition_spec_id(r["object_id"]) is not None]
        entire = entire_tables(filter, schema, specs, snap.table_pins())
        for r in rows:
            if r["read_branch"] is not None or r["read_tag"] is not None:
                raise PartitionPinnedError(
                    f"partition table {r['object_id']} may hold rows matching {filter!r} but is pinned to "
                    f"branch={r['read_branch']!r} tag={r['read_tag']!r}; lancepart deletes on main only; unpin it "
                    f"first or narrow the filter; nothing was published")
            whole[r["object_id"]] = r["object_id"] in entire
        scan["filter"] = pruned.scan_filter
        return [change(r["object_id"]) for r in rows]

    def run(snapshot_version: int, works: Sequence[TableWork]) -> list[Made]:
        todo = [(w.change.object_id, w.location, w.published, whole[w.change.object_id]) for w in works]
        return [Made(d.object_id, d.base, d.version, info=d) for d in apply_tables(snapshot_version, todo,
                                                                                   scan["filter"])]

    pub = publish_changes(
        manifest, plan, what="delete", run=run if apply_tables is not None else None, max_retries=max_retries,
        properties_of=lambda made: {ROWS_REMOVED_PROPERTY: str(sum(m.info.rows for m in made)),
                                    PARTITIONS_PROPERTY: str(len(made))})
    snap = pub.snapshot
    applied = [m.info for _, m in sorted(pub.made.items())]
    retries = pub.retries
    rows_deleted = sum(d.rows for d in applied)
    result = CommitResult(
        manifest_version=snap.version, rows_written=0, partitions_touched=len(applied), retries=retries,
        seconds=round(time.monotonic() - started, 3),
        details={"rows_deleted": rows_deleted, "filter": filter,
                 "tables": [{"object_id": d.object_id, "from_version": d.base, "read_version": d.version,
                             "rows_deleted": d.rows} for d in applied], **(phases or {})},
    )
    log.info("deleted %d rows from %d partitions of %s where %s (manifest version %d)", rows_deleted, len(applied),
             ns.root, filter, snap.version)
    return result
