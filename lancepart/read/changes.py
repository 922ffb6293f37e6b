"""The change feed: the rows each ``__manifest`` commit inserted and deleted (docs/reading.md).

Derived from what the spec already records, commit by commit: ``__manifest`` version ``v`` pins
each partition table's ``read_version`` (or branch/tag), so what commit ``v`` changed is the
difference between the tables pinned at ``v - 1`` and at ``v``:

* a table pinned at ``v`` only: its rows are inserts; pinned at ``v - 1`` only: deletes;
* a table whose pin moved: its fragments at the two versions are compared. A fragment only in the
  new version (new data files) holds inserts, one only in the old version holds deletes; a fragment
  in both whose deletion file changed holds, as deletes, the rows alive in the old version and
  deleted in the new one (and as inserts the reverse, which only a rollback produces).

Fragments are told apart by id *and* data file (an overwrite may reuse a fragment id). Lance's
own row-version metadata (``_row_created_at_version``) is not used: it exists only in tables with
stable row ids, which partition tables do not enable, and it would say which *table* version
made a row, not which ``__manifest`` commit published it (a table version can be published
later, or never).

Commits that change no row are skipped without reading anything: compaction, index builds and
drops, schema upgrades, spec evolution, properties. A merge records its keys in its commit; an
old and a new row of the same partition table with the same key in one merge commit are an
``update_preimage`` and an ``update_postimage`` (keys are unique per table in a merge, so the pair
is exact). A row moved to another partition is a delete and an insert of the same commit.

With a filter, the feed is the change feed of the filtered rows: an updated row whose new image no
longer matches shows only its old image, as a delete (and the reverse as an insert). Rows are in
the namespace schema of ``end_version`` (a renamed column under its new name, a dropped one left
out) with ``_change_type``, ``_commit_version`` and ``_commit_timestamp``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.arguments import check_filter, check_int
from lancepart.errors import (
    CorruptTableError,
    DataFilesMissingError,
    InvalidArgumentError,
    LancepartError,
    SnapshotExpiredError,
)
from lancepart.results import PartitionInfo
from lancepart.storage.manifest import MERGE_KEYS_PROPERTY, OPERATION_PROPERTY, Manifest, join_uri
from lancepart.util import faults

CHANGE_COLUMNS = [
    pa.field("_change_type", pa.utf8(), nullable=False),
    pa.field("_commit_version", pa.int64(), nullable=False),
    pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
]

# lancepart.operation values of commits that change no row
_NO_ROW_CHANGE = ("compaction publish", "upgrade table schema", "update_schema", "index maintenance",
                  "create_index ", "drop_index ", "evolve to v", "partition columns of v", "publish partition_spec",
                  "set ", "partition reservation", "V1 to V2 migration")


def is_rollback(operation: str | None) -> bool:
    """True for the operation of a rollback's commit."""
    return (operation or "").startswith("rollback")


def changes_nothing(operation: str | None) -> bool:
    """Whether a commit labelled ``operation`` changes no row (compaction, index, schema, spec and
    property commits).

    >>> changes_nothing("compaction publish"), changes_nothing("merge")
    (True, False)
    """
    return operation is not None and operation.startswith(_NO_ROW_CHANGE)


@dataclass
class Commit:
    version: int
    timestamp: datetime
    operation: str | None
    merge_on: list[str] | None


def _commits(manifest: Manifest, start: int, end: int) -> list[Commit]:
    """The commits after ``start`` up to ``end``, checked to be retained."""
    from lancepart.ops.history import retained_versions

    ds = manifest.dataset()
    retained = dict(retained_versions(ds))
    oldest = min(retained)
    latest = max(retained)
    if end > latest:
        raise InvalidArgumentError(f"end_version={end}: the latest __manifest version of {manifest.root} is {latest}")
    gone = [v for v in range(max(start, 1), end + 1) if v not in retained]
    if gone:
        raise SnapshotExpiredError(
            f"changes from version {start} of {manifest.root}: __manifest version {gone[0]} is gone (a cleanup "
            f"removed it); the change feed reaches back to version {oldest}: start from version {oldest} or later")
    out = []
    for v in range(start + 1, end + 1):
        try:
            props = dict(ds.read_transaction(v).transaction_properties or {})
        except (OSError, ValueError, AttributeError):
            props = {}
        on = props.get(MERGE_KEYS_PROPERTY)
        out.append(Commit(v, retained[v], props.get(OPERATION_PROPERTY), json.loads(on) if on else None))
    return out


def _pins(manifest: Manifest, version: int, ns: Any, filter: str | None) -> dict[str, PartitionInfo]:
    """The partition tables ``__manifest`` version ``version`` publishes that may hold rows
    matching ``filter`` (none before the namespace's spec was recorded)."""
    from lancepart.model.ids import SPEC_KEY_PREFIX

    if version < 1:
        return {}
    snap = manifest.snapshot(version)
    if not any(k.startswith(SPEC_KEY_PREFIX) for k in snap.metadata):
        return {}
    tables = snap.table_pins()
    if filter:
        from lancepart.read.manifest_query import prune

        tables = prune(filter, ns.schema, ns.specs, tables).kept
    return {p.object_id: p for p in ns._partition_infos(tables)}


def _same_pin(a: PartitionInfo, b: PartitionInfo) -> bool:
    return (a.location, a.read_version, a.read_branch, a.read_tag) == (b.location, b.read_version, b.read_branch,
                                                                        b.read_tag)


def _key(frag: Any) -> tuple[int, str]:
    md = frag.metadata
    files = md.files
    return md.id, files[0].path if files else ""


def _deletion(frag: Any) -> Any:
    d = frag.metadata.deletion_file
    return None if d is None else (d.id, d.read_version, d.file_type)


def _live_addresses(ds: lance.LanceDataset, frag: Any) -> np.ndarray:
    t = ds.scanner(columns=[], with_row_address=True, fragments=[frag]).to_table()
    return t.column("_rowaddr").to_numpy().astype(np.uint64)


def _deleted_rows(frag: Any) -> int:
    d = frag.metadata.deletion_file
    return 0 if d is None else (d.num_deleted_rows or 0)


class _TableReader:
    """Rows of one partition table at one version, in the feed's read schema."""

    def __init__(self, root: str, info: PartitionInfo, schema: pa.Schema, read_schema: pa.Schema,
                 namespace_md: Mapping[str, str], so: Mapping[str, str] | None) -> None:
        from lancepart.evolution.schema_evolution import is_current, source_columns
        from lancepart.read.snapshot import open_published

        self.info = info
        self.read_schema = read_schema
        self.ds = open_published(root, info, so)
        self.mapping = None
        if self.ds is not None and not is_current(self.ds.schema, namespace_md, schema):
            self.mapping = source_columns(self.ds.schema, namespace_md, schema, read_schema.names)
        self.uri = join_uri(root, info.location)
        self.so = so

    def deleted(self, frag: Any) -> np.ndarray | None:
        """The row addresses ``frag`` marks deleted in this version, sorted, from its deletion
        file (no column read); None when that file is not one lancepart reads itself."""
        from lancepart.storage.deletion_files import deleted_offsets
        from lancepart.storage.error_mapping import storage_errors

        with storage_errors(self.uri, table=self.info.object_id, reading=True):
            offsets = deleted_offsets(self.uri, frag.metadata, self.so)
        if offsets is None:
            return None
        return (np.uint64(frag.fragment_id) << np.uint64(32)) | offsets.astype(np.uint64)

    def fragments(self) -> dict[tuple[int, str], Any]:
        return {} if self.ds is None else {_key(f): f for f in self.ds.get_fragments()}

    def take(self, frags: Sequence[Any], addresses: pa.Array) -> pa.Table:
        """The rows of ``frags`` at row ``addresses`` (live in this version): a take of those rows
        only, or a scan of the fragments when the table's row ids are not its addresses."""
        if self.ds is None or self.ds.has_stable_row_ids or not self.read_schema.names:
            return self.read(frags, only=addresses)
        from lancepart.evolution.schema_evolution import conform
        from lancepart.storage.error_mapping import storage_errors

        cols = self.read_schema.names if self.mapping is None else [c for c in self.mapping.values() if c is not None]
        with storage_errors(self.uri, table=self.info.object_id, reading=True):
            t = self.ds._take_rows(addresses, columns=cols)
        if self.mapping is not None:
            return conform(t, self.mapping, self.read_schema)
        return t.select(self.read_schema.names).cast(self.read_schema)

    def read(self, frags: Sequence[Any] | None = None, *, only: pa.Array | None = None,
             without: pa.Array | None = None) -> pa.Table:
        """The live rows of ``frags`` (all when None); with ``only``, those at these row
        addresses; with ``without``, those not at these."""
        from lancepart.evolution.schema_evolution import conform
        from lancepart.storage.error_mapping import storage_errors

        if self.ds is None or (frags is not None and not frags):
            return self.read_schema.empty_table()
        cols = (self.read_schema.names if self.mapping is None
                else [c for c in self.mapping.values() if c is not None])
        by_address = only is not None or without is not None
        with storage_errors(self.uri, table=self.info.object_id, reading=True):
            t = self.ds.scanner(columns=cols, fragments=list(frags) if frags is not None else None,
                                with_row_address=by_address).to_table()
        if by_address:
            hit = pc.is_in(t.column("_rowaddr"), value_set=only if only is not None else without)
            t = t.filter(hit if only is not None else pc.invert(hit)).drop_columns(["_rowaddr"])
        if not self.read_schema.names:  # an empty projection: the rows, no columns (cast would drop them)
            return t.select([])
        if self.mapping is not None:
            return conform(t, self.mapping, self.read_schema)
        return t.select(self.read_schema.names).cast(self.read_schema)


def _changed_addresses(old: _TableReader, was: Any, new: _TableReader, now: Any) -> tuple[np.ndarray, np.ndarray]:
    """The row addresses of one fragment (same data files in both versions) deleted in ``now``
    and live in ``was``, and the reverse: from the two deletion files, or, where lancepart does
    not read one itself, from the live row addresses Lance lists."""
    before, after = old.deleted(was), new.deleted(now)
    if before is not None and after is not None:
        return np.setdiff1d(after, before, assume_unique=True), np.setdiff1d(before, after, assume_unique=True)
    live_after, live_before = _live_addresses(new.ds, now), _live_addresses(old.ds, was)
    return (np.setdiff1d(live_before, live_after, assume_unique=True),
            np.setdiff1d(live_after, live_before, assume_unique=True))


# rows read at once by the feed of one table: fragments are read together up to this many physical
# rows, and the changed rows of many fragments are taken together in takes of at most this many
_PIECE_ROWS = 131_072


def _groups(frags: Iterable[Any]) -> Iterator[list[Any]]:
    """``frags`` in runs of at most :data:`_PIECE_ROWS` physical rows (a larger fragment alone):
    small fragments are read in one Lance scan, and memory still holds about one piece."""
    group: list[Any] = []
    rows = 0
    for f in frags:
        n = f.metadata.physical_rows or 0
        if group and rows + n > _PIECE_ROWS:
            yield group
            group, rows = [], 0
        group.append(f)
        rows += n
    if group:
        yield group


def _taken(reader: _TableReader, frags: list[Any], addresses: list[np.ndarray]) -> Iterator[pa.Table]:
    """The rows at ``addresses`` (of ``frags``, live in ``reader``'s version), in takes of at most
    :data:`_PIECE_ROWS` rows."""
    if not addresses:
        return
    every = np.concatenate(addresses)
    for start in range(0, len(every), _PIECE_ROWS):
        yield reader.take(frags, pa.array(every[start:start + _PIECE_ROWS]))


def _table_changes(old: _TableReader | None, new: _TableReader | None, *, forward: bool = True
                   ) -> Iterator[tuple[str, pa.Table]]:
    """``("delete" | "insert", rows)`` pieces between a table's old and new pinned versions, about
    :data:`_PIECE_ROWS` rows at a time (memory holds about one piece). Fragments only in one
    version are read whole; the changed rows of fragments in both are found from their deletion
    files and taken, all of a table's in one take. ``forward``: the new version descends from the
    old one (deletion files only grow); a rollback's does not, and each changed fragment is
    compared both ways."""
    if new is None:
        for group in _groups(old.fragments().values()):
            yield "delete", old.read(group)
        return
    if old is None:
        for group in _groups(new.fragments().values()):
            yield "insert", new.read(group)
        return
    was, now = old.fragments(), new.fragments()
    for group in _groups(f for k, f in was.items() if k not in now):
        yield "delete", old.read(group)
    gone: list[np.ndarray] = []
    back: list[np.ndarray] = []
    changed = [k for k in was.keys() & now.keys() if _deletion(was[k]) != _deletion(now[k])]
    for k in changed:
        # the rows that changed, from the two deletion files (no column read); only those rows are
        # taken: a delete of a few rows reads those rows, not the fragment
        g, b = _changed_addresses(old, was[k], new, now[k])
        if len(g):
            gone.append(g)
        if len(b) and (not forward or _deleted_rows(now[k]) < _deleted_rows(was[k])):
            back.append(b)
    for rows in _taken(old, [was[k] for k in changed], gone):
        yield "delete", rows
    for rows in _taken(new, [now[k] for k in changed], back):
        yield "insert", rows
    for group in _groups(f for k, f in now.items() if k not in was):
        yield "insert", new.read(group)


def _label(deleted: pa.Table, inserted: pa.Table, on: list[str] | None) -> list[tuple[pa.Table, str]]:
    """The deleted and inserted rows of one table in one commit, labelled; with merge keys ``on``,
    rows of a key both deleted and inserted are an update's pre- and post-image."""
    if not on or not deleted.num_rows or not inserted.num_rows or any(c not in deleted.column_names for c in on):
        return [(deleted, "delete"), (inserted, "insert")]
    from lancepart.model.keys import comparable_keys, key_values

    # a key both deleted and inserted, compared as the merge compared it (NULL keys never match): a
    # hash lookup each way for one key column of a flat type, a join for several
    if len(on) == 1 and not pa.types.is_nested(deleted.schema.field(on[0]).type):
        dk, ik = (key_values(t.column(on[0]).combine_chunks()) for t in (deleted, inserted))
        d_upd = pc.is_in(dk, value_set=ik, skip_nulls=True)
        i_upd = pc.is_in(ik, value_set=dk, skip_nulls=True)
    else:
        d_rows = pa.array(np.arange(deleted.num_rows, dtype=np.int64))
        i_rows = pa.array(np.arange(inserted.num_rows, dtype=np.int64))
        dk = comparable_keys(deleted.select(on), on).append_column("_d", d_rows)
        ik = comparable_keys(inserted.select(on), on).append_column("_i", i_rows)
        pairs = dk.join(ik, keys=list(on), join_type="inner")
        d_upd = pc.is_in(d_rows, value_set=pairs.column("_d").combine_chunks())
        i_upd = pc.is_in(i_rows, value_set=pairs.column("_i").combine_chunks())
    return [(deleted.filter(pc.invert(d_upd)), "delete"), (deleted.filter(d_upd), "update_preimage"),
            (inserted.filter(i_upd), "update_postimage"), (inserted.filter(pc.invert(i_upd)), "insert")]


def _row_keys(t: pa.Table) -> pa.Array:
    """One binary key per row of ``t``, equal for two rows exactly when every column holds the
    same value (NULL equal to NULL; floats by their shortest round-trip text, so -0.0 and NaN are
    themselves). Vectorised per column; a nested column (a list, a struct) is keyed from its
    Python value, which only a rollback's comparison pays."""
    parts = []
    for col in t.columns:
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        typ = col.type
        if pa.types.is_nested(typ) or pa.types.is_dictionary(typ):
            text = pa.array([repr(v) for v in col.to_pylist()], pa.string())
        elif pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(typ):
            text = col.cast(pa.binary())
        else:
            text = pc.cast(col, pa.string())
        text = text.cast(pa.binary())
        length = pc.cast(pc.binary_length(text), pa.string()).cast(pa.binary())
        part = pc.binary_join_element_wise(length, text, b":")
        parts.append(pc.if_else(pc.is_null(col), pa.scalar(b"-", pa.binary()), part))
    if not parts:
        return pa.array([b""] * t.num_rows, pa.binary())
    return pc.binary_join_element_wise(*parts, b"|")


def republished_removed(deleted: pa.Table, inserted: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``deleted`` and ``inserted`` (whole rows of one table in one commit) without the rows that
    are in both, as many times as they are in both: a commit that publishes again a row the
    table held (a rollback to a version before a compaction rewrote it) changed nothing."""
    if not deleted.num_rows or not inserted.num_rows:
        return deleted, inserted
    keys = pc.dictionary_encode(pa.concat_arrays([_row_keys(deleted), _row_keys(inserted)]))
    codes = keys.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    d_codes, i_codes = codes[:deleted.num_rows], codes[deleted.num_rows:]

    def occurrence(c: np.ndarray) -> np.ndarray:  # k for the k-th row (0-based) holding its code
        order = np.argsort(c, kind="stable")
        sorted_c = c[order]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_c)) + 1]
        run = np.repeat(starts, np.diff(np.r_[starts, len(c)]))
        out = np.empty(len(c), dtype=np.int64)
        out[order] = np.arange(len(c)) - run
        return out

    n = len(keys.dictionary)
    d_count, i_count = np.bincount(d_codes, minlength=n), np.bincount(i_codes, minlength=n)
    both = np.minimum(d_count, i_count)
    keep_d = occurrence(d_codes) >= both[d_codes]
    keep_i = occurrence(i_codes) >= both[i_codes]
    return deleted.filter(pa.array(keep_d)), inserted.filter(pa.array(keep_i))


@dataclass
class ChangeTask:
    """The changes one commit made to one partition table: its pins before and after (None: not
    published there). Another process (a Spark executor) runs it from :meth:`to_json`."""

    version: int
    timestamp: datetime
    merge_on: list[str] | None
    old: PartitionInfo | None
    new: PartitionInfo | None
    operation: str | None = None
    # a rollback's task: the pins before and after of EVERY table it changed (old/new unused). A
    # rollback may move a row back to the table it left (a merge's update rewrote it into a table
    # of a newer spec): whole rows are compared across all of them, so a row the rollback
    # republishes unchanged is no change
    pairs: list[tuple[PartitionInfo | None, PartitionInfo | None]] | None = None

    def tables(self) -> list[tuple[PartitionInfo | None, PartitionInfo | None]]:
        """The (before, after) pins of every table of this task."""
        return list(self.pairs) if self.pairs is not None else [(self.old, self.new)]

    def to_json(self) -> dict[str, Any]:
        from lancepart.results import info_to_json

        def enc(p: PartitionInfo | None) -> dict[str, Any] | None:
            return info_to_json(p) if p else None

        return {"version": self.version, "timestamp": self.timestamp.isoformat(), "merge_on": self.merge_on,
                "operation": self.operation, "old": enc(self.old), "new": enc(self.new),
                "pairs": None if self.pairs is None else [[enc(a), enc(b)] for a, b in self.pairs]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ChangeTask:
        from lancepart.results import info_from_json

        def dec(p: Mapping[str, Any] | None) -> PartitionInfo | None:
            return info_from_json(p) if p else None

        pairs = d.get("pairs")
        return cls(d["version"], datetime.fromisoformat(d["timestamp"]), d["merge_on"], dec(d["old"]), dec(d["new"]),
                   d.get("operation"), None if pairs is None else [(dec(a), dec(b)) for a, b in pairs])


@dataclass
class ChangePlan:
    """What a change feed reads: the tasks in commit order and the schemas."""

    tasks: list[ChangeTask]
    schema: pa.Schema  # the namespace schema the rows are read in
    read_schema: pa.Schema  # columns read: the output, the filter's and the merge keys
    columns: list[str]
    filter: str | None
    namespace_md: dict[str, str]

    @property
    def out_schema(self) -> pa.Schema:
        return pa.schema([self.schema.field(c) for c in self.columns] + CHANGE_COLUMNS)

    def to_json(self) -> dict[str, Any]:
        """Everything but the tasks: what each task needs to run elsewhere."""
        import base64

        def enc(s: pa.Schema) -> str:
            return base64.b64encode(s.serialize().to_pybytes()).decode()

        return {"schema": enc(self.schema), "read_schema": enc(self.read_schema), "columns": self.columns,
                "filter": self.filter, "namespace_md": self.namespace_md}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ChangePlan:
        import base64

        def dec(text: str) -> pa.Schema:
            return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))

        return cls([], dec(d["schema"]), dec(d["read_schema"]), list(d["columns"]), d["filter"],
                   dict(d["namespace_md"]))


def _check_versions(start_version: Any, end_version: Any, latest: int) -> int:
    start_version = check_int("start_version", start_version)
    end_version = check_int("end_version", end_version, optional=True)
    end = latest if end_version is None else end_version
    if start_version > end:
        raise InvalidArgumentError(f"start_version={start_version} is after end_version={end}")
    return end


def plan_changes(ns: Any, start_version: int, end_version: int | None = None, *, filter: str | None = None,
                 columns: Sequence[str] | None = None, snapshot_at: int | None = None) -> ChangePlan:
    """The tasks of the change feed of ``ns`` after ``start_version`` up to ``end_version``
    (default: the handle's version), from ``__manifest`` alone (one read per commit; no partition
    table is opened). ``snapshot_at``: instead, every row published at that version as an
    insert of it (a stream's first micro-batch)."""
    from lancepart.read.snapshot import read_schema_for

    filter = check_filter(filter)
    schema = ns.schema
    cols, read_schema = read_schema_for(schema, filter, columns)
    if filter:
        ns.scan_plan(filter)  # a filter that cannot be used is refused now, not while the stream is read
    manifest = ns.manifest
    if snapshot_at is not None:
        from lancepart.ops.history import retained_versions

        ts = dict(retained_versions(manifest.dataset())).get(snapshot_at) or datetime.now(UTC)
        pins = _pins(manifest, snapshot_at, ns, filter)
        tasks = [ChangeTask(snapshot_at, ts, None, None, pins[o]) for o in sorted(pins)]
        return ChangePlan(tasks, schema, read_schema, cols, filter, dict(ns.snapshot().metadata))
    end = _check_versions(start_version, end_version, ns.manifest_version)
    commits = _commits(manifest, start_version, end)
    keys_needed = {c for commit in commits for c in (commit.merge_on or []) if c in schema.names}
    read_schema = pa.schema([f for f in schema if f.name in set(read_schema.names) | keys_needed])
    tasks: list[ChangeTask] = []
    prev: dict[str, PartitionInfo] | None = None
    prev_version = None
    for commit in commits:
        if changes_nothing(commit.operation):
            continue
        if prev is None or prev_version != commit.version - 1:
            prev = _pins(manifest, commit.version - 1, ns, filter)
        cur = _pins(manifest, commit.version, ns, filter)
        prev_version = commit.version
        touched = [o for o in sorted(prev.keys() | cur.keys())
                   if o not in prev or o not in cur or not _same_pin(prev[o], cur[o])]
        if is_rollback(commit.operation) and touched:  # one task: rows are compared across its tables
            tasks.append(ChangeTask(commit.version, commit.timestamp, commit.merge_on, None, None, commit.operation,
                                    [(prev.get(o), cur.get(o)) for o in touched]))
        else:
            tasks += [ChangeTask(commit.version, commit.timestamp, commit.merge_on, prev.get(o), cur.get(o),
                                 commit.operation) for o in touched]
        prev = cur
    return ChangePlan(tasks, schema, read_schema, cols, filter, dict(ns.snapshot().metadata))


def run_task(root: str, task: ChangeTask, plan: ChangePlan, storage_options: Mapping[str, str] | None = None
             ) -> Iterator[pa.RecordBatch]:
    """The change rows of one task, in ``plan.out_schema``. A task is planned from ``__manifest``
    and run later (by the reader of :func:`change_stream`, a Spark executor): when a cleanup has
    removed the ``__manifest`` versions it reads meanwhile, and with them the table versions they
    pinned, that is :class:`SnapshotExpiredError` naming the oldest version the change feed
    reaches back to (as for a range already cut when it is planned), not a damaged table."""
    faults.checkpoint("before_change_task")
    try:
        yield from _task_rows(root, task, plan, storage_options)
    except (CorruptTableError, DataFilesMissingError) as e:
        expired = _expired(root, task, storage_options)
        if expired is None:  # the versions are there: the table itself is damaged
            raise
        raise expired from e


def _expired(root: str, task: ChangeTask, storage_options: Mapping[str, str] | None) -> SnapshotExpiredError | None:
    """:class:`SnapshotExpiredError` when a ``__manifest`` version whose pins ``task`` reads is no
    longer retained; None when both are (or ``__manifest`` cannot tell)."""
    from lancepart.ops.history import retained_versions

    try:
        retained = [v for v, _ in retained_versions(Manifest(root, storage_options).dataset())]
    except (LancepartError, OSError, ValueError):
        return None
    pins = task.tables()
    pinned_at = (([task.version - 1] if any(old is not None for old, _ in pins) else [])
                 + ([task.version] if any(new is not None for _, new in pins) else []))
    gone = [v for v in pinned_at if v not in retained]
    if not gone or not retained:
        return None
    return SnapshotExpiredError(
        f"changes of __manifest version {task.version} of {root}: version {gone[0]} is gone (a cleanup removed it "
        f"after the change feed was planned, with the table versions it pinned); the change feed reaches back to "
        f"version {retained[0]}: start from version {retained[0]} or later")


def _deleted_inserted(pieces: Iterable[tuple[str, pa.Table]], schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
    """The deleted and the inserted rows of ``pieces`` (kind, rows), each in one table of ``schema``."""
    pieces = list(pieces)

    def rows_of(kind: str) -> pa.Table:
        return pa.concat_tables([t for k, t in pieces if k == kind] or [schema.empty_table()])

    return rows_of("delete"), rows_of("insert")


def _task_rows(root: str, task: ChangeTask, plan: ChangePlan, storage_options: Mapping[str, str] | None
               ) -> Iterator[pa.RecordBatch]:
    from lancepart.read.snapshot import apply_filter

    schema, read_schema, md = plan.schema, plan.read_schema, plan.namespace_md
    forward = not is_rollback(task.operation)
    if not forward:  # whole rows are compared: a rollback republishes rows a compaction rewrote
        read_schema = schema

    def reader(info: PartitionInfo | None) -> _TableReader | None:
        return _TableReader(root, info, schema, read_schema, md, storage_options) if info else None

    if forward:
        pieces = _table_changes(reader(task.old), reader(task.new), forward=True)
    else:  # every table of the rollback, compared together
        pieces = [p for old, new in task.tables() for p in _table_changes(reader(old), reader(new), forward=False)]
        deleted, inserted = republished_removed(*_deleted_inserted(pieces, read_schema))
        pieces = [("delete", deleted), ("insert", inserted)]
    if task.merge_on:  # an update's two images are paired over the whole table's changes
        deleted, inserted = _deleted_inserted(pieces, read_schema)
        if plan.filter:
            deleted, inserted = apply_filter(deleted, plan.filter), apply_filter(inserted, plan.filter)
        labelled = _label(deleted, inserted, task.merge_on)
    else:
        labelled = ((apply_filter(t, plan.filter) if plan.filter else t, kind) for kind, t in pieces)
    out_schema = plan.out_schema
    for rows_of, kind in labelled:
        n = rows_of.num_rows
        if not n:
            continue
        out = rows_of.select(plan.columns)
        for f, value in zip(CHANGE_COLUMNS, (kind, task.version, task.timestamp), strict=True):
            out = out.append_column(f, pa.repeat(pa.scalar(value, f.type), n))
        yield from out.cast(out_schema).to_batches()


def change_stream(ns: Any, start_version: int, end_version: int | None = None, *, filter: str | None = None,
                  columns: Sequence[str] | None = None) -> pa.RecordBatchReader:
    """The change feed of ``ns`` (a handle on the latest or any later version) after
    ``start_version`` up to ``end_version`` (default: the handle's version), planned now (errors
    about the range are raised here) and read as the stream is consumed, commit after commit,
    a few tables ahead on threads."""
    from lancepart.read.snapshot import TABLES_IN_FLIGHT
    from lancepart.util.parallel import stream_in_order

    plan = plan_changes(ns, start_version, end_version, filter=filter, columns=columns)
    root, so = ns.root, ns.storage_options
    stream = stream_in_order(lambda t: run_task(root, t, plan, so), plan.tasks, window=TABLES_IN_FLIGHT)
    return pa.RecordBatchReader.from_batches(plan.out_schema, stream)
