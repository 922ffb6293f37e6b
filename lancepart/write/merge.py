"""Merge (upsert) and replace-where: rows removed from published partition tables and rows
written, in ONE ``__manifest`` commit (docs/merge.md).

Both are a *change*: evaluated on one ``__manifest`` snapshot, it is

* the deletions, per partition table, on its published ``read_version`` (Lance deletion
  files, as :mod:`lancepart.maintenance.delete` makes them): the old versions of the merged
  keys, or the rows the replace-where filter matches;
* the rows to write (the new versions of matched keys and the inserts, or the replace-where
  input), planned, partitioned and written as fragments by the write path
  (:mod:`lancepart.write.plan`, :mod:`lancepart.write.create`) into their partitions, which may
  be other partitions than the old rows' (a merge that changes a partition source moves the
  row) or new ones;
* the *candidates*: every partition table the evaluation read (merge: the tables that can hold
  one of its keys, :class:`KeyPruner`; replace-where: those the pruner keeps for the filter),
  with the version it read. They are computed again on every newer snapshot, so a table that
  appears where a key could be is a candidate that appeared.

Each touched table then gets ONE Lance version (``LanceOperation.Update`` with the updated
fragments, the fragments whose every row goes removed, and the new fragments) on top of its
published version, built by :func:`lancepart.storage.table_commit.commit_exactly` like every table
commit, and one ``__manifest`` commit moves every ``read_version`` and adds the new partitions.

Conflicts: the ``__manifest`` commit is optimistic. When it conflicts, the new snapshot is
compared with the candidates: if one of them moved (a concurrent append, delete, merge or
compaction published first) or a new table appeared among them, the WHOLE change is evaluated
again on the new snapshot, so a key inserted and published concurrently is updated rather than
inserted twice, a row deleted concurrently is not resurrected, and an update published first is
not lost: it is the one this merge overwrites (last publish wins, as in a serial run). When no
candidate moved, only the tables the change appends to and nobody read are committed again on
their new published version (an append commutes). After ``max_retries`` redos,
:class:`~lancepart.errors.CommitConflictError` and nothing published.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from lancepart.errors import (
    AmbiguousMatchError,
    DuplicateKeyError,
    InvalidArgumentError,
    InvalidFilterError,
    LancepartError,
    PartitionPinnedError,
    RowsOutsideFilterError,
    SchemaChangedError,
)
from lancepart.evolution.file_format import data_storage_version
from lancepart.model import ids as _ids
from lancepart.model import transforms
from lancepart.model.constraints import constraints as declared
from lancepart.model.constraints import constraints_json
from lancepart.model.ids import check_location
from lancepart.model.keys import comparable_keys as comparable_keys  # re-exported
from lancepart.model.keys import key_values as key_values  # re-exported
from lancepart.model.spec import PartitionField, PartitionSpec, field_id_of
from lancepart.results import CommitResult
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import (
    MERGE_KEYS_PROPERTY,
    OPERATION_PROPERTY,
    PARTITIONS_PROPERTY,
    ROWS_PROPERTY,
    ROWS_REMOVED_PROPERTY,
    Manifest,
    ManifestChanges,
    ManifestConflict,
    ManifestSnapshot,
    join_uri,
)
from lancepart.storage.table_commit import _ident, check_fields, commit_exactly
from lancepart.util import faults
from lancepart.util.parallel import map_threads
from lancepart.write import batches
from lancepart.write.constraints import check_rows
from lancepart.write.create import NewTables, create_table_with
from lancepart.write.guard import commit_on_published
from lancepart.write.plan import check_schema, conform, group_rows, partition_values
from lancepart.write.publish import ADDS_NO_ROWS, CommitProducer, Made, TableChange, already_published
from lancepart.write.reserve import remove_table_dir, reserve_partitions
from lancepart.write.upgrade import append_fragments

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.write")
_ADDR = "_rowaddr"
_ROW = "__lancepart_merge_row"
WHEN_MATCHED = ("update", "ignore")
WHEN_NOT_MATCHED = ("insert", "ignore")

# object_id -> (location, read_version, read_branch, read_tag) of the tables an evaluation read
Candidates = dict[str, tuple[str, int | None, str | None, str | None]]


@dataclass
class Deletions:
    """Rows removed from one partition table's published version ``base``, not committed yet:
    ``updated`` fragments carry their new deletion file, ``removed`` fragments lose every row."""

    object_id: str
    location: str
    base: int
    updated: list[FragmentMetadata] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    rows: int = 0
    # the identity (data files, deletion file) in ``base`` of each fragment this removes rows from:
    # the deletions hold on a newer published version where those fragments are unchanged
    base_idents: dict[int, Any] = field(default_factory=dict)
    valid_on: set[int] = field(default_factory=set)  # published versions besides ``base`` they hold on

    def touched(self) -> set[int]:
        return {f.id for f in self.updated} | set(self.removed)


def _idents(ds: lance.LanceDataset, d: Deletions) -> Deletions:
    wanted = d.touched()
    d.base_idents = {f.fragment_id: _ident(f.metadata) for f in ds.get_fragments() if f.fragment_id in wanted}
    return d


def commutes(old: Evaluation, new: Evaluation) -> bool:
    """Whether the change evaluated as ``old`` is the same change on the newer snapshot that
    ``new`` was evaluated on: the same input keys matched, and the same rows of the same
    unchanged fragments removed from every table. Then a concurrent publish in between (an
    append of other keys, a compaction of other fragments) commutes with it: the rows it
    writes and its deletion files are still right, and only its table commits are made again on
    the new published versions. A new row matching the change, a fragment it removes rows from
    changed, or a table gone makes it evaluate again."""
    if (old.matched is None) != (new.matched is None) or (old.matched is not None and not
                                                            old.matched.equals(new.matched)):
        return False
    mine = {o: d for o, d in old.deletions.items() if d.updated or d.removed}
    theirs = {o: d for o, d in new.deletions.items() if d.updated or d.removed}
    if set(mine) != set(theirs):
        return False
    for oid, d in mine.items():
        n = theirs[oid]
        if (d.location != n.location or d.rows != n.rows or sorted(f.id for f in d.updated) != sorted(
                f.id for f in n.updated) or sorted(d.removed) != sorted(n.removed)):
            return False
        if any(d.base_idents.get(fid) is None or d.base_idents.get(fid) != n.base_idents.get(fid)
               for fid in d.touched()):
            return False
    return True


@dataclass
class Evaluation:
    """A change evaluated on one snapshot (see the module docstring)."""

    candidates: Candidates
    deletions: dict[str, Deletions]
    rows: pa.Table | None  # conformed to the namespace schema; None: written elsewhere (Spark tasks)
    details: dict[str, Any]
    matched: pa.Table | None = None  # merge: the input keys that matched a published row


def commit_change(uri: str, base_version: int | None, updated: Sequence[FragmentMetadata], removed_ids: Sequence[int],
                  new_fragments: Sequence[FragmentMetadata], storage_options: Mapping[str, str] | None = None,
                  max_attempts: int = 40) -> int:
    """Commit, on top of ``base_version``, ONE version whose fragments are the base's with
    ``updated`` (same ids, a new deletion file) in their place, without ``removed_ids``, plus
    ``new_fragments``; return it. The loop and its guarantees are
    :func:`lancepart.storage.table_commit.commit_exactly`'s (foreign fragments removed, the base restored
    first when an unpublished commit altered it, the version made checked to be exactly that).

    >>> from lancepart.write.upgrade import append_fragments
    >>> p = ns.partitions()[0]
    >>> uri = f"{ns.root}/{p.location}"
    >>> rows = pa.Table.from_pylist([{"id": 7, "event_date": p.values["event_date"]}], schema=ns.schema)
    >>> new_frags = append_fragments(ns.manifest, p.object_id, p.location, rows, ns.schema, published=p.read_version)
    >>> commit_change(uri, p.read_version, [], [0], new_frags)      # fragment 0 out, the new rows in
    2
    >>> open_table(uri, version=2).to_table(columns=["id"]).to_pylist()
    [{'id': 7}]
    """
    so = dict(storage_options) if storage_options else None
    published = open_table(uri, version=base_version, storage_options=so)
    check_fields(published, new_fragments, uri)  # written under the schema of this version
    base = {_ident(f.metadata): f.fragment_id for f in published.get_fragments()}
    changed = {f.id for f in updated} | set(removed_ids)
    mine = {_ident(f) for f in new_fragments}
    wanted = ({ident for ident, fid in base.items() if fid not in changed} | {_ident(f) for f in updated} | mine)

    def update(have: Mapping[Any, int]) -> LanceOperation.Update:
        remove = [fid for ident, fid in have.items()
                  if ident not in wanted and (fid in removed_ids or fid not in changed)]
        return LanceOperation.Update(removed_fragment_ids=remove,
                                     updated_fragments=[f for f in updated if _ident(f) not in have],
                                     new_fragments=[f for f in new_fragments if _ident(f) not in have])

    return commit_exactly(uri, base_version, set(base), wanted, update, so, f"partition table {uri} (merge)",
                          max_attempts=max_attempts)


def partition_tables(snap: ManifestSnapshot, object_ids: set[str] | None = None) -> Candidates:
    """The partition tables of ``snap`` (those in ``object_ids`` only, when given) as candidates."""
    from lancepart.model.ids import partition_spec_id

    pins = snap.table_pins().select(["object_id", "location", "read_version", "read_branch", "read_tag"])
    return {r["object_id"]: (r["location"], r["read_version"], r["read_branch"], r["read_tag"])
            for r in pins.to_pylist()
            if partition_spec_id(r["object_id"]) is not None and (object_ids is None or r["object_id"] in object_ids)}


def snap_partition_tables(snap: ManifestSnapshot) -> int:
    """How many partition tables ``snap`` has."""
    from lancepart.model.ids import partition_spec_id

    return sum(1 for oid in snap.table_pins().column("object_id").to_pylist() if partition_spec_id(oid) is not None)


def _check_main(candidates: Candidates, what: str) -> None:
    for oid, (_, version, branch, tag) in candidates.items():
        if branch is not None or tag is not None:
            raise PartitionPinnedError(
                f"partition table {oid} may hold rows the {what} changes but is pinned to branch={branch!r} "
                f"tag={tag!r}; lancepart changes main only; unpin it first; nothing was published")
        if version is None:
            raise InvalidArgumentError(f"partition table {oid} is declared without a read_version; nothing was "
                                       f"published")


def write_rows(manifest: Manifest, ns_spec: Any, schema: pa.Schema, rows: pa.Table, max_rows_per_file: int,
               max_retries: int, metadata: Mapping[str, str] | None = None, what: str = "write"
               ) -> tuple[list[TableChange], int]:
    """``rows`` written as fragments into their partitions, as :mod:`lancepart.write.local`
    writes a table in one pass: into the partition's table, or a new table created with them
    (published by :class:`NewTables`); ``(writes, reservation retries)``. The rows are checked
    first against the CHECK constraints of ``metadata`` (the root properties of the snapshot
    the change was evaluated on), before anything is reserved or written."""
    if not rows.num_rows:
        return [], 0
    cons = declared(metadata or {})
    if cons:
        check_rows(rows, cons, what)
    checked = constraints_json(metadata or {})
    so = manifest.storage_options
    groups = group_rows(partition_values(rows, ns_spec, schema), ns_spec.id)
    oids = groups.table_object_ids
    res = reserve_partitions(manifest, ns_spec, list(groups.key_arrays), schema, max_retries=max_retries,
                             create_missing=False)
    file_version = data_storage_version(res.snapshot.metadata)  # of the tables this merge creates
    writes = [TableChange(oid, _ids.table_location(oid), keys=groups.keys.slice(i, 1), checked=checked) if ref is None
              else TableChange(ref.object_id, ref.location, published=ref.read_version, checked=checked)
              for i, (oid, ref) in enumerate(zip(oids, res.tables, strict=True))]

    def one(item: tuple[TableChange, pa.Table]) -> list[FragmentMetadata]:
        w, part = item
        if w.keys is not None:
            frags, w.created = create_table_with(part, manifest.root, w.location, schema, max_rows_per_file, so,
                                                 data_storage_version=file_version)
        else:
            frags = append_fragments(manifest, w.object_id, w.location, part, schema, published=w.published,
                                     max_rows_per_file=max_rows_per_file)
        faults.checkpoint("after_fragments")
        return frags

    items = list(zip(writes, groups.rows(rows), strict=True))
    for (w, part), frags in zip(items, map_threads(one, items), strict=True):
        w.fragments, w.rows = list(frags), part.num_rows
    return writes, res.retries


# writes the rows of an evaluation (taken on the snapshot given): (table writes, reservation retries)
WriteRows = Callable[[Evaluation, ManifestSnapshot], tuple[list[TableChange], int]]


class ChangeProducer(CommitProducer):
    """The commit producer of a change (see the module docstring): its :meth:`changes` hook
    evaluates the change on the attempt's snapshot and writes its rows, and on a later attempt
    keeps them while the candidates did not move, or moved in a way the change commutes with
    (:func:`commutes`); otherwise it evaluates again, rows written again included (the tables the
    stale evaluation created are removed: nothing refers to them). A concurrent schema change
    met while writing or committing does the same: the rows are converted on the next attempt.

    ``write`` writes the rows elsewhere (``lancepart.spark.merge``: in Spark tasks); default
    :func:`write_rows` on local threads. ``fixed_writes``: ``write`` returns the same writes on
    every attempt (rows written once, before the change: the data source's replaceWhere), so
    the tables they created are kept for the next attempt (adopted there if needed), and a
    schema change is the caller's to handle. ``properties`` go with the ``__manifest`` commit
    (a merge records its keys: the change feed pairs an updated row's old and new images by
    them). Every attempt counts against the one bound, ``max_retries``."""

    def __init__(self, ns: NamespaceHandle, evaluate: Callable[[ManifestSnapshot], Evaluation],
                 candidates: Callable[[ManifestSnapshot], Candidates], *, what: str, batch_id: str | None,
                 max_retries: int, max_rows_per_file: int, write: WriteRows | None, fixed_writes: bool,
                 properties: Mapping[str, str] | None) -> None:
        super().__init__(ns.manifest, what=what, batch_id=batch_id, max_retries=max_retries, index_on_write=True,
                         new_tables=NewTables(ns.manifest, ns.current_spec, ns.schema))
        self.ns, self.evaluate, self.candidates = ns, evaluate, candidates
        self.extra_properties = dict(properties or {})
        self.write = write if write is not None else (lambda ev, snap: write_rows(
            ns.manifest, ns.current_spec, ns.schema, ev.rows, max_rows_per_file, max_retries, snap.metadata, what))
        self.fixed_writes = fixed_writes
        self.ev: Evaluation | None = None
        self.writes: list[TableChange] = []
        self.deletions: dict[str, Deletions] = {}
        self.evaluations = 0
        self.reserve_retries = 0
        self.evaluate_s = self.write_s = 0.0

    # ------------------------------------------------------------------------------ hooks
    def changes(self, snap: ManifestSnapshot) -> Sequence[TableChange] | None:
        again = None
        if self.ev is not None:
            now = self.candidates(snap)
            if now == self.ev.candidates:
                return None  # nothing it read moved: rebase the same change
            moved = sorted(o for o in set(now) | set(self.ev.candidates) if now.get(o) != self.ev.candidates.get(o))
            t = time.monotonic()
            again = self.evaluate(snap)
            self.evaluate_s = time.monotonic() - t
            if commutes(self.ev, again):  # the same change on this snapshot: only its table commits are redone
                self.ev.candidates = again.candidates
                for oid, d in self.deletions.items():
                    d.valid_on.add(again.candidates[oid][1])
                return None
            log.info("%s: %d partition table(s) it read changed, e.g. %s; evaluating again on the new snapshot",
                     self.what, len(moved), moved[0])
            self.discard()
        return self.evaluate_and_write(snap, again)

    def properties_of(self, made: Sequence[Made]) -> Mapping[str, str]:
        return {OPERATION_PROPERTY: self.what, ROWS_PROPERTY: str(sum(w.rows for w in self.writes)),
                PARTITIONS_PROPERTY: str(len({w.object_id for w in self.writes} | set(self.deletions))),
                ROWS_REMOVED_PROPERTY: str(sum(d.rows for d in self.deletions.values())), **self.extra_properties}

    def plan(self, snap: ManifestSnapshot) -> bool:
        super().plan(snap)
        return bool(self.by_oid)  # a change that changes nothing publishes nothing, its batch id included

    def attempt(self, snap: ManifestSnapshot) -> tuple[ManifestChanges | None, list[Made]]:
        try:
            return super().attempt(snap)
        except SchemaChangedError as e:
            if self.fixed_writes:
                raise  # rows written once, before the change (the data source's tasks): the caller writes again
            log.info("%s: %s; converting the rows on the new schema", self.what, e)
            self.discard()
            raise ManifestConflict(f"the namespace schema changed while the {self.what} ran: {e}") from None

    # ------------------------------------------------------------------------------ steps of its own
    def evaluate_and_write(self, snap: ManifestSnapshot, ev: Evaluation | None) -> list[TableChange]:
        """Evaluate the change on ``snap`` (unless done: ``ev``), write its rows; its changes."""
        if ev is None:
            t = time.monotonic()
            ev = self.evaluate(snap)  # ManifestConflict: a published version it read was cleaned up; rebase
            self.evaluate_s = time.monotonic() - t
        self.ev, self.evaluations = ev, self.evaluations + 1
        faults.checkpoint("after_plan")
        t = time.monotonic()
        self.writes, reserve_retries = self.write(ev, snap)
        self.write_s, self.reserve_retries = time.monotonic() - t, self.reserve_retries + reserve_retries
        self.forget()
        self.deletions = {oid: d for oid, d in ev.deletions.items() if d.updated or d.removed}
        by_oid = {w.object_id: w for w in self.writes}
        return [self._change(o, self.deletions.get(o), by_oid.get(o))
                for o in sorted(set(by_oid) | set(self.deletions))]

    def _change(self, oid: str, d: Deletions | None, w: TableChange | None) -> TableChange:
        if w is not None and w.created is not None:
            return w  # a table this change created, published by adding its row
        manifest = self.manifest

        def commit(published: int | None, location: str) -> int:
            if d is not None and d.base != published and published not in d.valid_on:  # cannot happen
                raise LancepartError(f"{oid}: deletions evaluated on version {d.base}, published is {published}")
            return commit_change(join_uri(manifest.root, location), published, d.updated if d else [],
                                 d.removed if d else [], w.fragments if w else [], manifest.storage_options)

        # the rows the table gains are w's fragments (checked when written); deletions gain none
        return TableChange(oid, w.location if w else None, list(w.fragments) if w else [], w.rows if w else 0,
                           commit=commit, checked=w.checked if w else ADDS_NO_ROWS)

    def discard(self) -> None:
        """Forget the evaluation; remove the tables it created (referenced by nothing), and the
        index builds made for them: a table written again under the same name starts at version
        1 again, and an index prepared on the removed files must never be committed onto it."""
        for w in [] if self.fixed_writes else self.writes:
            if w.created is not None:
                remove_table_dir(self.manifest.root, w.location, self.manifest.storage_options)
        self.ev, self.writes, self.deletions, self.by_oid = None, [], {}, {}
        self.indexed.clear()
        self.prepared.clear()
        self.forget()


def apply_change(ns: NamespaceHandle, evaluate: Callable[[ManifestSnapshot], Evaluation],
                 candidates: Callable[[ManifestSnapshot], Candidates], *, what: str, batch_id: str | None = None,
                 max_retries: int = 20, max_rows_per_file: int = 1_048_576, write: WriteRows | None = None,
                 fixed_writes: bool = False, started: float | None = None, phases: dict[str, Any] | None = None,
                 properties: Mapping[str, str] | None = None) -> CommitResult:
    """Evaluate a change on the latest snapshot, write its rows, commit each touched table and
    publish everything in one ``__manifest`` commit, by a :class:`ChangeProducer`."""
    started = time.monotonic() if started is None else started
    manifest = ns.manifest
    if batch_id is not None:
        batches.check_batch_id(batch_id)
        if (done := already_published(manifest, manifest.snapshot(), batch_id, started)) is not None:
            return done
    producer = ChangeProducer(ns, evaluate, candidates, what=what, batch_id=batch_id, max_retries=max_retries,
                              max_rows_per_file=max_rows_per_file, write=write, fixed_writes=fixed_writes,
                              properties=properties)
    pub = producer.publish()
    snap2, skip, retries = pub.snapshot, pub.skipped, pub.retries + producer.reserve_retries
    if skip is not None:  # the tables it created were removed by the publish
        return CommitResult(manifest_version=max(snap2.version, skip.manifest_version), batch_id=batch_id,
                            skipped=True, seconds=round(time.monotonic() - started, 3),
                            details=batches.result_details(skip, batches.batch_id_retention(snap2.metadata)))
    ev, deletions = producer.ev, producer.deletions
    by_oid = {c.object_id: c for c in pub.changes if c.fragments}
    touched = set(by_oid) | set(deletions)
    result = CommitResult(
        manifest_version=snap2.version, rows_written=sum(w.rows for w in by_oid.values()),
        partitions_touched=len(touched),
        partitions_created=sum(1 for w in producer.writes if w.created is not None),
        retries=retries, batch_id=batch_id, seconds=round(time.monotonic() - started, 3),
        details={**(ev.details if ev is not None else {}), "rows_deleted": sum(d.rows for d in deletions.values()),
                 "evaluate_s": round(producer.evaluate_s, 3), "write_s": round(producer.write_s, 3),
                 "evaluations": producer.evaluations, **(phases or {})},
    )
    if batch_id is not None:
        result.details.update(batches.result_details(None, batches.batch_id_retention(snap2.metadata)))
    log.info("%s published %d rows, removed %d, %d partitions (manifest version %d)", what, result.rows_written,
             result.details["rows_deleted"], len(touched), snap2.version)
    return result


# ---------------------------------------------------------------------------------------- merge
def merge_properties(on: Sequence[str]) -> dict[str, str]:
    """The ``__manifest`` commit properties of a merge on ``on``: its keys (JSON)."""
    return {MERGE_KEYS_PROPERTY: json.dumps(list(on))}


def _read_input(data: Any, schema: pa.Schema) -> pa.Table:
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif isinstance(data, pa.RecordBatchReader):
        data = data.read_all()
    if not isinstance(data, pa.Table):
        raise InvalidArgumentError(f"data must be a pa.Table, pa.RecordBatch or pa.RecordBatchReader, "
                                   f"got {type(data).__name__}")
    check_schema(data.schema, schema)  # before any byte is written
    return conform(data, schema)


def _show(table: pa.Table, i: int, columns: Sequence[str]) -> str:
    row = table.select(list(columns)).slice(i, 1).to_pylist()[0]
    return ", ".join(f"{c}={v!r}" for c, v in row.items())


def check_keys(rows: pa.Table, on: Sequence[str]) -> None:
    """Refuse NULL keys and keys present twice in ``rows`` (typed, naming one key)."""
    for c in on:
        nulls = rows.column(c).null_count
        if nulls:
            raise InvalidArgumentError(f"merge key column {c!r} is NULL in {nulls} input row(s) (first at row "
                                       f"{pc.index(pc.is_null(rows.column(c)), True).as_py()}); a NULL key matches "
                                       f"nothing; nothing was published")
    counts = comparable_keys(rows.select(list(on)), on).group_by(list(on)).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        raise DuplicateKeyError(f"merge input holds {dup.num_rows} key(s) of {list(on)} more than once, e.g. "
                                f"({_show(dup, 0, on)}) {dup.column('count_all')[0].as_py()} times; one row per key "
                                f"expected; nothing was published")


class KeyLookup:
    """A merge's input keys (``on`` as :func:`comparable_keys` makes them, and the input row
    number ``_ROW``) prepared once for the lookups of every table: one key column of a type
    numpy orders (integers, floats, booleans, dates, times, timestamps, durations) is sorted once
    and each table's keys are found by binary search; any other key is matched by Arrow per
    table (a set lookup or a hash join), which builds its hash table of the input keys again for
    every table."""

    def __init__(self, keys: pa.Table, on: Sequence[str]) -> None:
        self.keys, self.on = keys, list(on)
        self.sorted: np.ndarray | None = None
        if len(self.on) == 1:
            values = _orderable(keys.column(self.on[0]))
            if values is not None:  # input keys are never NULL (check_keys)
                order = np.argsort(values, kind="stable")
                self.sorted, self.rows = values[order], keys.column(_ROW).to_numpy()[order]

    def find(self, published: pa.Table) -> pa.Table:
        """The rows of ``published`` (comparable keys ``on`` and ``_rowaddr``) whose key is an
        input key, with that input row's number: ``(on..., _rowaddr, _ROW)``."""
        on = self.on
        if self.sorted is not None:
            col = published.column(on[0])
            values = _orderable(col)
            if values is not None:
                pos = np.minimum(np.searchsorted(self.sorted, values), max(len(self.sorted) - 1, 0))
                hit = (self.sorted[pos] == values) if len(self.sorted) else np.zeros(len(values), dtype=bool)
                if col.null_count:  # a NULL published key matches nothing
                    hit &= col.is_valid().to_numpy(zero_copy_only=False)
                return published.filter(pa.array(hit)).append_column(_ROW, pa.array(self.rows[pos[hit]]))
        if len(on) == 1:  # one column: a set lookup, then the input row numbers by index_in
            keys = self.keys.column(on[0])
            hit = published.filter(pc.fill_null(pc.is_in(published.column(on[0]), value_set=keys), False))
            rownum = pc.take(self.keys.column(_ROW), pc.index_in(hit.column(on[0]), value_set=keys))
            return hit.append_column(_ROW, rownum)
        return published.join(self.keys, keys=on, join_type="inner").select([*on, _ADDR, _ROW])


def _orderable(col: pa.ChunkedArray | pa.Array) -> np.ndarray | None:
    """``col`` as int64 values equal exactly where the keys are equal (a float's -0.0 is 0.0 and
    every NaN one NaN already, :func:`key_values`; a NULL becomes 0 and is masked by the caller),
    or None for a type numpy does not hold so."""
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t)):
        return None
    if pa.types.is_float16(t) or (pa.types.is_temporal(t) and t.bit_width not in (32, 64)):
        return None
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_temporal(t):  # its integer storage
        col = col.view(pa.int32() if t.bit_width == 32 else pa.int64())
    elif pa.types.is_boolean(t):
        col = col.cast(pa.int8())
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(0, col.type))
    if pa.types.is_floating(t):
        values = col.to_numpy(zero_copy_only=False).astype(np.float64)
        values = np.where(np.isnan(values), np.nan, values)  # one NaN bit pattern
        return values.view(np.int64)
    if pa.types.is_unsigned_integer(col.type):
        return col.cast(pa.uint64()).to_numpy().view(np.int64)
    return col.cast(pa.int64()).to_numpy()


def match_table(ds: lance.LanceDataset, keys: pa.Table | KeyLookup, on: Sequence[str], schema: pa.Schema
                ) -> pa.Table:
    """The rows of ``ds`` (a partition table at its published version) whose key is in ``keys``
    (the input keys with their input row number ``_ROW``, or their :class:`KeyLookup`):
    ``(on..., _rowaddr, _ROW)``. Only the key columns are read."""
    empty = pa.table({**{c: pa.array([], schema.field(c).type) for c in on}, _ADDR: pa.array([], pa.uint64()),
                      _ROW: pa.array([], pa.int64())})
    from lancepart.evolution.schema_evolution import read_columns

    # by field id: the table may be in an older form of the schema (a key renamed or widened since)
    published = comparable_keys(read_columns(ds, schema, on, with_row_address=True), on)
    if not published.num_rows:
        return empty
    lookup = keys if isinstance(keys, KeyLookup) else KeyLookup(keys, on)
    return lookup.find(published)


def merge_in_table(root: str, object_id: str, location: str, base: int, keys: pa.Table | KeyLookup,
                   on: Sequence[str], schema: pa.Schema, storage_options: Mapping[str, str] | None, delete: bool
                   ) -> tuple[Deletions, np.ndarray]:
    """One partition table's part of a merge on its published version ``base``: the input row
    numbers whose key it holds and, with ``delete``, those rows' deletion files (not committed).
    The same function runs on local threads and in Spark tasks."""
    from lancepart.write.deletions import deletion_files

    ds = open_table(join_uri(root, check_location(location, object_id, root)), version=base,
                    storage_options=storage_options)
    m = match_table(ds, keys, on, schema)
    d = Deletions(object_id, location, base)
    if m.num_rows and delete:
        d.updated, d.removed = deletion_files(ds, m.column(_ADDR).to_numpy().astype(np.uint64))
        d.rows = m.num_rows
        _idents(ds, d)
    return d, m.column(_ROW).to_numpy().astype(np.int64)


# runs merge_in_table for each (object_id, location, base) of a snapshot (its version given): local
# threads, or Spark tasks
MatchTables = Callable[[int, Sequence[tuple[str, str, int]]], list[tuple[Deletions, np.ndarray]]]


def check_merge_args(schema: pa.Schema, on: Sequence[str] | str, when_matched: str, when_not_matched: str,
                     input_names: Sequence[str] | None) -> list[str]:
    """The key columns, once each; typed errors for unknown modes and key columns."""
    on = [on] if isinstance(on, str) else list(dict.fromkeys(on or []))
    if not on:
        raise InvalidArgumentError("merge needs the key columns: on=['id', ...]")
    if when_matched not in WHEN_MATCHED:
        raise InvalidArgumentError(f"when_matched must be one of {WHEN_MATCHED}, got {when_matched!r}")
    if when_not_matched not in WHEN_NOT_MATCHED:
        raise InvalidArgumentError(f"when_not_matched must be one of {WHEN_NOT_MATCHED}, got {when_not_matched!r}")
    missing = [c for c in on if c not in schema.names]
    if missing:
        raise InvalidArgumentError(f"merge key column(s) {missing} are not in the namespace schema "
                                   f"({schema.names}); nothing was published")
    if input_names is not None and (absent := [c for c in on if c not in input_names]):
        raise InvalidArgumentError(f"merge key column(s) {absent} are not in the input; nothing was published")
    return on


class KeyPruner:
    """Which partition tables of a snapshot can hold one of a merge's keys (spec partitioning.md
    "Query Optimization / Partition Pruning": a partition table holds only rows whose partition
    values are its ``partition_field_*`` values).

    A partition field whose source columns are all key columns has, for an input key, exactly
    one value: its transform of the key (the writer's code, :func:`lancepart.model.transforms.apply`,
    on the namespace schema). A table can then hold the key only if its value of every such
    field is one of the input's values; tables of a spec version none of whose fields is over
    the key columns are all read. Each spec version is evaluated with its own fields, so the
    tables of older specs are pruned by their own transforms. Compared as the writer names
    partitions (:func:`lancepart.model.ids.partition_ids`: canonical bytes, where -0.0 is 0.0, every
    NaN is one value and NULL a value of its own), the way merge compares keys
    (:func:`lancepart.model.keys.key_values`).

    Where a transform's value could depend on the type the column had when a row was written,
    the field does not prune: expression fields, and bucket fields over decimals (widening a
    decimal may change its scale, hence its hashed unscaled integer). Identity and truncate
    (their result type is the source's, so their source is never widened), time transforms
    (their sources are not widenable) and bucket over integers, floats, strings, binary, dates
    and timestamps (hashed the same in every width) prune. Anything unexpected (a spec not in
    the snapshot's properties, a transform that fails on the keys, a ``__manifest`` column of
    another type) reads every table of that spec version: a merge never misses a match."""

    def __init__(self, keys: pa.Table, on: Sequence[str], schema: pa.Schema) -> None:
        self.keys, self.schema = keys.select(list(on)), schema
        self.key_ids = {fid for c in on if (fid := field_id_of(schema.field(c))) is not None}
        # spec JSON -> (pruning fields, partition ids of the keys' values of those fields) or None
        self._wanted: dict[str, tuple[list[PartitionField], set[str]] | None] = {}
        self._specs: dict[str, PartitionSpec | None] = {}

    def fields(self, spec: PartitionSpec) -> list[PartitionField]:
        """The fields of ``spec`` that prune: over key columns only, with a transform whose value
        does not depend on the width the source column had."""
        types = {field_id_of(f): f.type for f in self.schema}
        out = []
        for f in spec.fields:
            if f.expression is not None or not f.source_ids or not set(f.source_ids) <= self.key_ids:
                continue
            tf = transforms.transform_for(f)
            if (isinstance(tf, (transforms.BucketTransform, transforms.MultiBucketTransform))
                    and any(pa.types.is_decimal(types[s]) for s in f.source_ids)):
                continue
            out.append(f)
        return out

    def wanted(self, spec: PartitionSpec) -> tuple[list[PartitionField], set[str]] | None:
        """The pruning fields of ``spec`` and the partition ids (over those fields, in that order)
        of the keys' values; None: every table of the spec is read."""
        k = spec.to_json_string()
        if k not in self._wanted:
            self._wanted[k] = None
            fields = self.fields(spec)
            if fields:
                try:
                    values = pa.Table.from_arrays([transforms.apply(f, self.keys, self.schema) for f in fields],
                                                  names=[f.column_name for f in fields])
                    distinct = group_rows(values, spec.id).key_arrays
                    self._wanted[k] = fields, {ids[-1] for ids in _ids.partition_ids(spec.id, distinct)}
                except Exception as e:  # any failure: read the whole spec version
                    log.info("merge: partition values of v%d over the keys failed (%s); reading all its tables",
                             spec.id, e)
        return self._wanted[k]

    def _spec(self, raw: str | None) -> PartitionSpec | None:
        if raw is None:
            return None
        if raw not in self._specs:
            try:
                self._specs[raw] = PartitionSpec.from_json(raw)
            except LancepartError:
                self._specs[raw] = None
        return self._specs[raw]

    def candidates(self, snap: ManifestSnapshot) -> Candidates:
        """The partition tables of ``snap`` that can hold an input key (see the class docstring);
        a table that appears in a partition of the keys is one of them, so a merge whose
        ``__manifest`` commit conflicts with its creation evaluates again."""
        cands = partition_tables(snap)
        by_spec: dict[int, list[str]] = {}
        for oid in cands:
            by_spec.setdefault(_ids.partition_spec_id(oid), []).append(oid)  # type: ignore[arg-type]
        keep: set[str] = set()
        pins = None
        for spec_id, oids in by_spec.items():
            spec = self._spec(snap.metadata.get(f"{_ids.SPEC_KEY_PREFIX}{spec_id}"))
            wanted = self.wanted(spec) if spec is not None and spec.id == spec_id else None
            if wanted is None:
                keep.update(oids)
                continue
            fields, ids = wanted
            if pins is None:
                pins = snap.table_pins()
            rows = pins.filter(pc.is_in(pins.column("object_id"), value_set=pa.array(oids, pa.utf8())))
            try:
                values = [rows.column(f.column_name).cast(f.result_type).combine_chunks() for f in fields]
                have = _ids.partition_ids(spec_id, values)
            except Exception as e:  # a column missing or of another type
                log.info("merge: cannot compare the partition values of v%d tables (%s); reading all of them",
                         spec_id, e)
                keep.update(oids)
                continue
            keep.update(oid for oid, tid in zip(rows.column("object_id").to_pylist(), have, strict=True)
                        if tid[-1] in ids)
        return {oid: c for oid, c in cands.items() if oid in keep}


class MergePlan:
    """A merge's evaluation on a snapshot (:meth:`evaluate`), with the per-table results of
    earlier attempts kept: a re-evaluation reads again only the tables whose version moved."""

    def __init__(self, keys: pa.Table, on: Sequence[str], when_matched: str, when_not_matched: str,
                 match_tables: MatchTables, rows: pa.Table | None = None, schema: pa.Schema | None = None) -> None:
        # the tables it reads: those that can hold a key when the schema is given, else all of them
        self.candidates: Callable[[ManifestSnapshot], Candidates] = (
            partition_tables if schema is None else KeyPruner(keys, on, schema).candidates)
        self.keys = comparable_keys(keys.select(list(on)), on).append_column(
            _ROW, pa.array(np.arange(keys.num_rows, dtype=np.int64)))
        self.lookup = KeyLookup(self.keys, on)  # prepared once for every table's lookup
        self.on, self.when_matched, self.when_not_matched = list(on), when_matched, when_not_matched
        self.match_tables, self.rows = match_tables, rows
        self.cache: dict[tuple[str, int], tuple[Deletions, np.ndarray]] = {}

    def evaluate(self, snap: ManifestSnapshot) -> Evaluation:
        cands = self.candidates(snap)
        _check_main(cands, "merge")
        todo = [(oid, loc, v) for oid, (loc, v, _, _) in cands.items() if (oid, v) not in self.cache]
        for (oid, _, v), out in zip(todo, self.match_tables(snap.version, todo) if todo else [], strict=True):
            self.cache[(oid, v)] = out
        per_table = {oid: self.cache[(oid, v)] for oid, (_, v, _, _) in cands.items() if len(self.cache[(oid, v)][1])}
        n = self.keys.num_rows
        matched = np.zeros(n, dtype=bool)
        if per_table:
            all_rows = np.concatenate([r for _, r in per_table.values()])
            counts = np.bincount(all_rows, minlength=n)
            if (counts > 1).any():
                i = int(np.flatnonzero(counts > 1)[0])
                where = sorted(oid for oid, (_, r) in per_table.items() if (r == i).any())
                raise AmbiguousMatchError(
                    f"merge key ({_show(self.keys, i, self.on)}) matches {int(counts[i])} published rows (partition "
                    f"tables {where}); {int((counts > 1).sum())} key(s) match several rows; a key must identify at "
                    f"most one row; nothing was published")
            matched[all_rows] = True
        update, insert = self.when_matched == "update", self.when_not_matched == "insert"
        take = (matched if update else np.zeros(n, dtype=bool)) | (~matched if insert else np.zeros(n, dtype=bool))
        deletions = {oid: d for oid, (d, _) in per_table.items() if update}
        n_matched = int(matched.sum())
        details = {"on": self.on, "rows_matched": n_matched, "rows_updated": n_matched if update else 0,
                   "rows_inserted": n - n_matched if insert else 0,
                   # partition tables whose keys this evaluation used, and those it left unread
                   "tables_read": len(cands), "tables_skipped": snap_partition_tables(snap) - len(cands)}
        rows = self.rows.filter(pa.array(take)) if self.rows is not None else None
        return Evaluation(cands, deletions, rows, details, matched=self.keys.select(self.on).filter(pa.array(matched)))


def merge(ns: NamespaceHandle, data: Any, on: Sequence[str], when_matched: str = "update",
          when_not_matched: str = "insert", *, batch_id: str | None = None, max_retries: int = 20,
          max_rows_per_file: int = 1_048_576, properties: Mapping[str, str] | None = None) -> CommitResult:
    """Upsert ``data`` by the key columns ``on`` in one publish: a published row whose key is in
    the input is replaced by the input row (``when_matched="update"``; ``"ignore"`` keeps it and
    drops the input row), even when the new row belongs to another partition; an input row
    whose key is not published is inserted (``when_not_matched="insert"``; ``"ignore"`` drops
    it). ``details``: ``rows_updated``, ``rows_inserted``.

    >>> changes = pa.Table.from_pylist([{"id": 1, "event_date": date(2025, 12, 9), "amount": 99.0},
    ...                                 {"id": 7, "event_date": date(2025, 12, 12)}], schema=ns.schema)
    >>> details = merge(ns, changes, on=["id"], when_matched="ignore").details
    >>> details["rows_matched"], details["rows_updated"], details["rows_inserted"]
    (1, 0, 1)
    """
    from lancepart.evolution.schema_evolution import with_legacy_ids

    ns.refresh()
    schema, manifest = ns.schema, ns.manifest
    read_schema = with_legacy_ids(schema, ns.snapshot().metadata)  # places the columns of the oldest tables
    names = data.schema.names if isinstance(data, pa.Table | pa.RecordBatch) else None
    on = check_merge_args(schema, on, when_matched, when_not_matched, names)
    rows = _read_input(data, schema)
    check_keys(rows, on)

    def match_tables(snapshot_version: int, todo: Sequence[tuple[str, str, int]]
                     ) -> list[tuple[Deletions, np.ndarray]]:
        def one(t: tuple[str, str, int]) -> tuple[Deletions, np.ndarray]:
            return commit_on_published(manifest, snapshot_version, t[0], t[1], t[2], lambda: merge_in_table(
                manifest.root, t[0], t[1], t[2], plan.lookup, on, read_schema, manifest.storage_options,
                when_matched == "update"))

        return map_threads(one, list(todo))

    plan = MergePlan(rows, on, when_matched, when_not_matched, match_tables, rows=rows, schema=schema)
    return apply_change(ns, plan.evaluate, plan.candidates, what="merge", batch_id=batch_id, max_retries=max_retries,
                        max_rows_per_file=max_rows_per_file, properties={**(properties or {}), **merge_properties(on)})


# ------------------------------------------------------------------------------- replace-where
def rows_outside(rows: pa.Table, where: str) -> tuple[int, pa.Table]:
    """How many rows of ``rows`` the filter ``where`` is not TRUE for (DataFusion, as reads
    evaluate it), and the first of them."""
    from lancepart.read.snapshot import apply_filter

    try:
        inside = apply_filter(rows, where).num_rows
        outside = rows.num_rows - inside
        example = apply_filter(rows, f"NOT coalesce(({where}), false)").slice(0, 1) if outside else rows.slice(0, 0)
    except InvalidArgumentError as e:
        raise InvalidFilterError(str(e)) from None
    return outside, example


def check_inside(rows: pa.Table, where: str) -> None:
    """:class:`RowsOutsideFilterError` naming the count and one row unless ``where`` is TRUE for
    every row of ``rows`` (conformed to the namespace schema)."""
    outside, example = rows_outside(rows, where)
    if outside:
        row = ", ".join(f"{k}={v!r}" for k, v in example.to_pylist()[0].items())
        raise RowsOutsideFilterError(f"replace-where: {outside} of {rows.num_rows} input row(s) do not match "
                                     f"where={where!r}, e.g. ({row}); every input row must match the filter it "
                                     f"replaces; nothing was published")


def replace_where(ns: NamespaceHandle, data: Any, where: str, *, batch_id: str | None = None,
                  max_retries: int = 20, max_rows_per_file: int = 1_048_576, written: list[TableChange] | None = None,
                  started: float | None = None, phases: dict[str, Any] | None = None,
                  properties: Mapping[str, str] | None = None, **options: Any) -> CommitResult:
    """Replace the published rows matching ``where`` by ``data`` in one publish (Delta's
    replaceWhere): every input row must match ``where`` (else :class:`RowsOutsideFilterError`
    naming how many and one of them, nothing published). ``details["rows_deleted"]``.
    ``written``: the input is already written and checked (the Spark data source's tasks);
    ``data`` is then None.

    >>> day_rows = pa.Table.from_pylist([{"id": 10, "event_date": date(2025, 12, 10), "country": "US"}],
    ...                                 schema=ns.schema)
    >>> result = replace_where(ns, day_rows, "event_date = DATE '2025-12-10'")
    >>> result.details["rows_deleted"], result.rows_written
    (2, 1)
    >>> replace_where(ns, day_rows, "event_date = DATE '2025-12-11'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.RowsOutsideFilterError: replace-where: 1 of 1 input row(s) do not match where=...
    """
    from lancepart.read.manifest_query import entire_tables, prune
    from lancepart.storage.error_mapping import table_errors
    from lancepart.write.deletions import deletion_files, matching_addresses

    if options:
        raise InvalidArgumentError(f"write(mode='overwrite', where=...) does not take {sorted(options)}")
    if not isinstance(where, str) or not where.strip():
        raise InvalidFilterError("where must be a SQL boolean expression over the namespace's columns "
                                 "(to replace every row say so: where='TRUE')")
    from lancepart.evolution.schema_evolution import with_legacy_ids

    ns.refresh()
    schema, specs, manifest = ns.schema, ns.specs, ns.manifest
    read_schema = with_legacy_ids(schema, ns.snapshot().metadata)  # places the columns of the oldest tables
    rows = None
    if written is None:
        rows = _read_input(data, schema)
        check_inside(rows, where)
    scan: dict[str, str | None] = {}

    def candidates(snap: ManifestSnapshot) -> Candidates:
        try:
            pruned = prune(where, schema, specs, snap.table_pins())
        except InvalidArgumentError as e:
            raise InvalidFilterError(str(e)) from None
        scan["filter"] = pruned.scan_filter
        return partition_tables(snap, set(pruned.kept.column("object_id").to_pylist()))

    cache: dict[tuple[str, int], Deletions] = {}

    def evaluate(snap: ManifestSnapshot) -> Evaluation:
        cands = candidates(snap)
        _check_main(cands, "replace-where")
        entire = entire_tables(where, schema, specs, snap.table_pins())
        so = dict(manifest.storage_options) if manifest.storage_options else None

        def one(item: tuple[str, str, int]) -> Deletions:
            oid, loc, v = item
            if (oid, v) in cache:
                return cache[(oid, v)]
            ds = commit_on_published(manifest, snap.version, oid, loc, v, lambda: open_table(
                join_uri(manifest.root, check_location(loc, oid, manifest.root)), version=v, storage_options=so))
            if oid in entire:
                frags = ds.get_fragments()
                d = _idents(ds, Deletions(oid, loc, v, [], [f.fragment_id for f in frags],
                                          sum(f.count_rows() for f in frags)))
            else:
                with table_errors(manifest.root, oid, loc, version=v, storage_options=so):  # named: table, file
                    addr = matching_addresses(ds, read_schema, where, scan.get("filter"))
                    updated, removed = deletion_files(ds, addr) if len(addr) else ([], [])
                d = _idents(ds, Deletions(oid, loc, v, updated, removed, len(addr)))
            cache[(oid, v)] = d
            return d

        items = [(oid, loc, v) for oid, (loc, v, _, _) in cands.items()]
        deletions = {d.object_id: d for d in map_threads(one, items)}
        return Evaluation(cands, deletions, rows, {"where": where})

    return apply_change(ns, evaluate, candidates, what="replace_where", batch_id=batch_id, max_retries=max_retries,
                        max_rows_per_file=max_rows_per_file, started=started, phases=phases,
                        write=None if written is None else lambda ev, snap: (written, 0),
                        fixed_writes=written is not None, properties=properties)
