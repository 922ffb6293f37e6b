"""The ``__manifest`` Lance table: read a snapshot, evolve its columns, commit atomically.

Spec: spec/directory-namespace.md "V2: Manifest" and spec/partitioning.md "Manifest Table
Schema" / "Transaction"; docs/design.md §6, §7, §8.

A lancepart commit is one Lance ``Update`` against the version of the snapshot it was
computed from. Rows it changes are deleted where they are through deletion files and its
new rows go into one new fragment; it always touches the fragment the previous commit wrote
(the *tail*: rewritten with the new rows while small, else listed as updated;
:meth:`Manifest.commit_changes`). Two commits from one snapshot therefore touch the same
fragment and conflict in Lance's resolver, which makes the manifest a linearizable
register: a commit lands only if nothing else committed rows since its snapshot, and the
loser reloads and rebases (:meth:`Manifest.update`). What a commit reads and writes is the
rows it changes plus a small tail, found through the ``object_id`` BTREE index, not the
whole table; past :data:`MAX_FRAGMENTS` fragments one commit rewrites the whole table
(:meth:`Manifest.commit`), the way every commit did before. docs/design.md, "The
``__manifest`` commit".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation

# Lance's commit conflict lives in a submodule that `import lance` does not load: until it is
# loaded, an `except lance.commit.CommitConflictError` clause fails on any other error reaching it.
from lance.commit import CommitConflictError as LanceCommitConflictError

from lancepart.errors import (
    CommitConflictError,
    CorruptNamespaceError,
    LancepartError,
    NamespaceNotFoundError,
    SnapshotExpiredError,
)
from lancepart.redact import register as register_secrets

# the classifiers live in lancepart.storage.error_mapping; imported from here by the commit loops too
from lancepart.storage.error_mapping import (
    is_commit_conflict,
    is_not_found,
    note_commit,
    storage_problem,
    typed_error,
)
from lancepart.storage.lance_io import open_table

MANIFEST_DIR = "__manifest"

# The five columns exactly as lance.namespace.DirectoryNamespace creates them.
STANDARD_FIELDS: tuple[pa.Field, ...] = (
    pa.field("object_id", pa.utf8(), nullable=False,
             metadata={"lance-schema:unenforced-primary-key:position": "0"}),
    pa.field("object_type", pa.utf8(), nullable=False),
    pa.field("location", pa.utf8()),
    pa.field("metadata", pa.utf8()),
    pa.field("base_objects", pa.list_(pa.field("object_id", pa.utf8()))),
)
# docs/design.md §7: the transaction columns follow the standard ones.
VERSION_FIELDS: tuple[pa.Field, ...] = (
    pa.field("read_version", pa.uint64()),
    pa.field("read_branch", pa.utf8()),
    pa.field("read_tag", pa.utf8()),
)
# Lance's directory namespace (``lance.namespace.DirectoryNamespace``) refuses to modify a
# ``__manifest`` whose table metadata holds a writer feature flag it does not understand; it
# rewrites the table with its five standard columns otherwise, dropping every column above.
# Only that namespace implementation reads the key: plain Lance datasets (lancepart's own
# commits) ignore it, and reading through DirectoryNamespace still works. Bit 62 is far above
# the bits Lance assigns (from bit 0 upwards). docs/foreign-writers.md.
_LOG = logging.getLogger("lancepart.manifest")
NAMESPACE_WRITER_FLAGS_KEY = "lance.namespace.manifest.writer_feature_flags"
LANCEPART_WRITER_FLAG = 1 << 62
INDEXES: tuple[tuple[str, str], ...] = (("object_id", "BTREE"), ("object_type", "BITMAP"),
                                        ("base_objects", "LABEL_LIST"))

T = TypeVar("T")


def join_uri(root: str, *parts: str) -> str:
    """Join a root (local path or URI) with relative parts using '/'."""
    return "/".join([root.rstrip("/"), *parts])


# Storage option naming a local directory for commit locks (docs/object-storage.md). Lance
# ignores keys it does not know, so it travels with the other storage options.
COMMIT_LOCK_DIR_OPTION = "lancepart_commit_lock_dir"


def commit_lock(uri: str, storage_options: Mapping[str, str] | None) -> Callable[[int], Any] | None:
    """A Lance ``commit_lock`` for the table at ``uri`` if ``storage_options`` names a lock
    directory, else None (the store's atomic put-if-absent decides, which is the default).

    For object stores that do not enforce ``If-None-Match: *``: every commit to ``uri`` takes
    an exclusive ``flock`` on ``<dir>/<sha256(uri)>.lock``; Lance then checks that the version
    does not exist yet and writes it. It serialises writers that share the directory (one
    host, or a file system with working ``flock``), nothing else.
    """
    lock_dir = (storage_options or {}).get(COMMIT_LOCK_DIR_OPTION)
    if not lock_dir:
        return None
    path = os.path.join(lock_dir, hashlib.sha256(uri.encode()).hexdigest()[:32] + ".lock")

    @contextlib.contextmanager
    def lock(version: int) -> Iterator[None]:
        os.makedirs(lock_dir, exist_ok=True)
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    return lock


def normalize_root(root: str | os.PathLike[str]) -> str:
    """Absolute local path for a local root (relative ones resolve against the cwd); URIs as given."""
    root = os.fspath(root)
    if "://" in root:
        return root.rstrip("/") if not root.endswith(":///") else root
    return os.path.abspath(os.path.expanduser(root))


def manifest_schema(partition_fields: Sequence[pa.Field] = ()) -> pa.Schema:
    return pa.schema([*STANDARD_FIELDS, *VERSION_FIELDS, *partition_fields])


def backoff(attempt: int, base_delay: float = 0.05, max_delay: float = 2.0) -> None:
    """Sleep before retry ``attempt`` (0-based): exponential backoff with full jitter."""
    time.sleep(random.uniform(0, min(max_delay, base_delay * 2**attempt)))


class ManifestConflict(Exception):
    """Internal: someone else committed to __manifest since our snapshot."""


class SnapshotGone(ManifestConflict, SnapshotExpiredError):
    """A snapshot's version was removed before its rows were read: a conflict to a commit (it
    rebases on the latest version), a typed error to a reader."""


#: Transaction property of every commit made through :meth:`Manifest.update`: what it did.
OPERATION_PROPERTY = "lancepart.operation"
ROWS_PROPERTY = "lancepart.rows"  # of a publish: the rows it published
PARTITIONS_PROPERTY = "lancepart.partitions"  # of a publish: the partition tables it touched
BATCH_ID_PROPERTY = "lancepart.batch_id"  # of the publishing commit of a batch id
MERGE_KEYS_PROPERTY = "lancepart.merge_on"  # of a merge: its keys (JSON), which pair an update's two images
ROWS_REMOVED_PROPERTY = "lancepart.rows_removed"  # of a delete (or merge): the rows it removed

# An incremental commit rewrites the fragment the previous commit wrote (the *tail*) with its
# changes while the tail has at most this many rows; a longer tail is left in place (touched,
# never rewritten) and a new tail starts.
TAIL_ROWS = 4096
# More fragments than this after an incremental commit: that commit rewrites the whole table
# instead (amortised over the commits that made them).
MAX_FRAGMENTS = 32
# Batches a whole scan of ``__manifest`` decodes ahead. Lance's default is the number of cores,
# which on a small machine (2 cores: an Airflow worker, a CI runner) leaves the decode of the
# 200 000 short rows of 100 000 partitions waiting on itself: there the scan of the pins takes
# 21 ms at the default and 10 ms at 16 (docs/benchmarks.md, "Namespace size"). Never fewer than
# Lance would use.
SCAN_READAHEAD = max(16, os.cpu_count() or 1)
# The Lance file format of a new __manifest (docs/design.md §7): every open scans the pin columns
# of all its rows, which 2.0 decodes in about two thirds of 2.2's time; nothing in it is a struct,
# the one kind of value 2.0 cannot hold as NULL. Lance keeps a table's format for every later
# commit, so a __manifest made in another version stays in it.
MANIFEST_STORAGE_VERSION = "2.0"
# Touching more rows than this in one commit: read the whole snapshot instead of looking rows up.
LOOKUP_LIMIT = 2048
# Rows outside the object_id index after a commit beyond which that commit brings the indexes
# up to date (lookups scan unindexed rows).
UNINDEXED_ROWS = 8192


def sql_string(value: str) -> str:
    """``value`` as a SQL string literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def object_id_filter(object_ids: Sequence[str]) -> str:
    """A Lance filter selecting the rows whose ``object_id`` is one of ``object_ids``."""
    return "object_id IN (" + ", ".join(sql_string(o) for o in object_ids) + ")"


@dataclass(frozen=True)
class ManifestChanges:
    """What one commit changes in ``__manifest``: rows to add or replace (matched by
    ``object_id``) and object ids to remove; or root properties to set (None removes one); or
    new all-NULL columns (a partition spec's ``partition_field_*``). One kind per commit: Lance
    commits rows, table metadata and schema with different operations. ``touch``: a row commit
    that changes no row, which every row commit built on an older snapshot conflicts with (a
    constraint's seal, lancepart.write.constraints)."""

    upserts: pa.Table | None = None
    deletes: tuple[str, ...] = ()
    metadata: Mapping[str, str | None] | None = None
    columns: tuple[pa.Field, ...] = ()
    touch: bool = False  # a row commit even when no row changes: a conflict point for older snapshots

    @property
    def rows_change(self) -> bool:
        return self.upserts is not None or bool(self.deletes) or self.touch

    def object_ids(self) -> list[str]:
        ids = self.upserts.column("object_id").to_pylist() if self.upserts is not None else []
        return list(dict.fromkeys([*ids, *self.deletes]))

    def apply(self, rows: pa.Table) -> pa.Table:
        """``rows`` with these changes applied (the whole table a full rewrite commits)."""
        gone = self.object_ids()
        if gone:
            rows = rows.filter(pc.invert(pc.is_in(rows.column("object_id"), pa.array(gone, pa.utf8()))))
        if self.upserts is not None and self.upserts.num_rows:
            rows = pa.concat_tables([rows, self.upserts.select(rows.schema.names).cast(rows.schema)])
        return rows


class ManifestSnapshot:
    """One version of ``__manifest``: its table metadata and fragments, and its rows, read when
    first needed (:attr:`rows`) or looked up by ``object_id`` through the BTREE index
    (:meth:`lookup`), so that a commit touching a few rows never reads all of them."""

    def __init__(self, version: int, metadata: Mapping[str, str], fragment_ids: Sequence[int], *,
                 rows: pa.Table | None = None, dataset: lance.LanceDataset | None = None,
                 uri: str | None = None, latest: Callable[[], int] | None = None) -> None:
        if rows is None and dataset is None:
            raise ValueError("a snapshot needs its rows or its dataset")
        self.version = version
        self.metadata = dict(metadata)
        self.fragment_ids = tuple(fragment_ids)
        self._rows = rows
        self._dataset = dataset
        self._uri = uri or "__manifest"
        self._latest = latest  # the latest version of the table, to tell a cleaned-up version from damage
        self._index: dict[str, int] = {}
        self._pin_rows: pa.Table | None = None  # every row without _ROW_ONLY_COLUMNS (pin_rows)
        self._pins: pa.Table | None = None  # the table rows of those (table_pins)

    def __repr__(self) -> str:
        return f"ManifestSnapshot(version={self.version}, fragments={len(self.fragment_ids)})"

    @property
    def schema(self) -> pa.Schema:
        return self._rows.schema if self._rows is not None else self._dataset.schema

    @property
    def dataset(self) -> lance.LanceDataset | None:
        """The Lance dataset at this version (None for a snapshot built from rows alone)."""
        return self._dataset

    @property
    def rows(self) -> pa.Table:
        """Every row of this version (read once, on first use)."""
        if self._rows is None:
            self._rows = self._read(lambda ds: ds.to_table(batch_readahead=SCAN_READAHEAD))
        return self._rows

    def _read(self, read: Callable[[lance.LanceDataset], pa.Table]) -> pa.Table:
        try:
            return read(self._dataset)
        except (OSError, ValueError) as e:
            if is_not_found(e) and self._superseded():
                # a cleanup with a short retention removed this version after it was superseded
                raise SnapshotGone(f"__manifest version {self.version} at {self._uri} was removed (superseded and "
                                   f"cleaned up) before it was read; refresh the handle") from e
            raise CorruptNamespaceError(f"cannot read __manifest at {self._uri} version {self.version}: {e}") from e

    def _superseded(self) -> bool:
        """Whether ``__manifest`` has a version newer than this one (else a file of the latest
        version is missing: damage, not a cleanup)."""
        if self._latest is None:
            return False
        try:
            return self._latest() > self.version
        except (LancepartError, OSError, ValueError):
            return False

    def lookup(self, object_ids: Sequence[str]) -> pa.Table:
        """The rows whose ``object_id`` is in ``object_ids`` (any order; absent ids are absent)."""
        object_ids = list(dict.fromkeys(object_ids))
        if not object_ids:
            return self.schema.empty_table()
        if self._rows is not None or len(object_ids) > LOOKUP_LIMIT:
            index = self.row_index()
            take = sorted(index[o] for o in object_ids if o in index)
            return self.rows.take(pa.array(take, pa.int64()))
        return self._read(lambda ds: ds.to_table(filter=object_id_filter(object_ids)))

    def row_index(self) -> dict[str, int]:
        """object_id -> row number in :attr:`rows` (built once per snapshot)."""
        if not self._index and self.rows.num_rows:
            self._index.update({oid: i for i, oid in enumerate(self.rows.column("object_id").to_pylist())})
        return self._index

    def row(self, object_id: str) -> dict[str, Any] | None:
        found = self.lookup([object_id]).to_pylist()
        return found[0] if found else None

    def tables(self) -> pa.Table:
        """The table rows (``object_type = 'table'``), every column."""
        return _table_rows(self.rows)

    def pin_rows(self) -> pa.Table:
        """Every row (namespace rows too) without ``metadata`` and ``base_objects``: what
        locating, pinning and pruning partitions needs, read alone (a full scan of those columns:
        faster than the Bitmap index's random reads) while the other columns are not needed.
        :func:`lancepart.read.manifest_query.prune` takes these as they are (its query keeps
        tables only), so an open and a pruned lookup never copy the table rows out."""
        if self._pin_rows is None:
            if self._rows is not None:
                rows = self._rows
            else:
                cols = [c for c in self._dataset.schema.names if c not in _ROW_ONLY_COLUMNS]
                rows = self._read(lambda ds: ds.to_table(columns=cols, batch_readahead=SCAN_READAHEAD))
            self._pin_rows = rows.drop_columns([c for c in _ROW_ONLY_COLUMNS if c in rows.column_names])
        return self._pin_rows

    def table_pins(self) -> pa.Table:
        """The table rows (``object_type = 'table'``) of :meth:`pin_rows`, filtered once."""
        if self._pins is None:
            self._pins = _table_rows(self.pin_rows())
        return self._pins

    def with_read_versions(self, versions: Mapping[str, int]) -> pa.Table:
        """The rows with the ``read_version`` of each table in ``versions`` (object_id -> table
        version) replaced: what a publishing commit writes."""
        return set_read_versions(self.rows, versions)

    def read_version_changes(self, versions: Mapping[str, int]) -> ManifestChanges:
        """The commit that moves the ``read_version`` of each table in ``versions``: its rows,
        looked up, with the new versions."""
        return ManifestChanges(upserts=set_read_versions(self.lookup(list(versions)), versions))


# Columns table_pins() leaves out: free text and lineage, never needed to find or prune a table.
_ROW_ONLY_COLUMNS = ("metadata", "base_objects")


def _table_rows(rows: pa.Table) -> pa.Table:
    """The rows of ``rows`` that are tables. Column by column: a column with no value (the
    branch and tag pins, as lancepart leaves them) and ``object_type`` itself are made, not
    filtered (at 100 000 partitions this halves the cost of every open's filter)."""
    mask = pc.fill_null(pc.equal(rows.column("object_type"), "table"), False)
    kept = pc.sum(mask).as_py() or 0
    columns = []
    for name, column in zip(rows.column_names, rows.columns, strict=True):
        if name == "object_type":
            columns.append(pa.repeat(pa.scalar("table", column.type), kept))
        elif column.null_count == len(column):
            columns.append(pa.nulls(kept, column.type))
        else:
            columns.append(column.filter(mask))
    return pa.Table.from_arrays(columns, schema=rows.schema)


def set_read_versions(rows: pa.Table, versions: Mapping[str, int]) -> pa.Table:
    """``rows`` with ``read_version`` replaced for the object ids in ``versions``."""
    oids = rows.column("object_id").to_pylist()
    missing = set(versions) - set(oids)
    if missing:
        raise KeyError(f"not in __manifest: {sorted(missing)[:5]}")
    values = rows.column("read_version").to_pylist()
    for i, oid in enumerate(oids):
        if oid in versions:
            values[i] = versions[oid]
    j = rows.schema.get_field_index("read_version")
    return rows.set_column(j, rows.schema.field(j), pa.array(values, pa.uint64()))


_WARNED_LOCAL_OPTIONS: set[tuple[str, tuple[str, ...]]] = set()


def warn_ignored_storage_options(root: str, storage_options: Mapping[str, str] | None) -> None:
    """Log the storage options a local ``root`` ignores (every key but lancepart's own
    ``lancepart_*``), once per root and keys in a process: nothing given is silently dropped."""
    if not storage_options or ("://" in root and not root.startswith("file://")):
        return
    ignored = sorted(k for k in storage_options if not k.startswith("lancepart_"))
    if ignored and (root, tuple(ignored)) not in _WARNED_LOCAL_OPTIONS:
        _WARNED_LOCAL_OPTIONS.add((root, tuple(ignored)))
        _LOG.warning("storage options %s are ignored: %s is a local path (they apply to object-store roots such "
                     "as s3://, gs://, az://)", ", ".join(ignored), root)


class Manifest:
    """Handle on ``<root>/__manifest``."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        register_secrets(storage_options)  # messages of this process never show them
        warn_ignored_storage_options(root, storage_options)
        self.root = root
        self.uri = join_uri(root, MANIFEST_DIR)
        self.storage_options = dict(storage_options) if storage_options else None
        self.commit_lock = commit_lock(self.uri, storage_options)

    # ------------------------------------------------------------------ reading
    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        try:
            return open_table(self.uri, version=version, storage_options=self.storage_options,
                                 commit_lock=self.commit_lock)
        except (ValueError, OSError) as e:
            if (problem := storage_problem(e, self.root)) is not None:
                raise problem from None
            if (typed := typed_error(e, self.root)) is not None:  # full, forbidden, a file for a root
                raise typed from e
            if isinstance(e, ValueError) and is_not_found(e):
                raise NamespaceNotFoundError(f"no __manifest table at {self.uri}") from None
            raise CorruptNamespaceError(f"cannot open __manifest at {self.uri}: {e}") from e

    def latest_version(self) -> int:
        return self.dataset().version

    def exists(self) -> bool:
        try:
            self.dataset()
        except NamespaceNotFoundError:
            return False
        return True

    def snapshot(self, version: int | None = None, *, check: bool = True) -> ManifestSnapshot:
        """``version`` (latest by default): its metadata and fragments now, its rows when first
        used (:class:`ManifestSnapshot`). With ``check``, a partitioned namespace whose
        ``__manifest`` lost columns it needs (a tool that knows only the five standard columns
        rewrote it) raises :class:`CorruptNamespaceError` naming them (:func:`check_columns`)."""
        ds = self.dataset(version)
        if check:
            check_columns(ds.schema, ds.metadata, self.uri, ds.version)
        try:
            fragment_ids = [f.fragment_id for f in ds.get_fragments()]
        except (OSError, ValueError) as e:
            raise CorruptNamespaceError(f"cannot read __manifest at {self.uri} version {ds.version}: {e}") from e
        return ManifestSnapshot(ds.version, ds.metadata, fragment_ids, dataset=ds, uri=self.uri,
                                latest=self.latest_version)

    # ------------------------------------------------------------------ writing
    def create(self, rows: pa.Table, metadata: Mapping[str, str]) -> ManifestSnapshot:
        """Create ``__manifest`` with its rows, then set its table metadata and indexes.

        The namespace counts as partitioned only once the metadata commit lands (spec
        "Metadata Definition"), so a create that dies half way leaves no partitioned namespace.
        """
        try:
            ds = lance.write_dataset(rows, self.uri, schema=rows.schema, mode="create",
                                     storage_options=self.storage_options, commit_lock=self.commit_lock,
                                     data_storage_version=MANIFEST_STORAGE_VERSION)
        except OSError as e:
            if (problem := storage_problem(e, self.root)) is not None:
                raise problem from None
            if (typed := typed_error(e, self.root)) is not None:
                raise typed from e
            raise
        # the writer flag keeps Lance's DirectoryNamespace from rewriting it (docs/foreign-writers.md)
        ds.update_metadata({**metadata, NAMESPACE_WRITER_FLAGS_KEY: str(LANCEPART_WRITER_FLAG)})
        self.ensure_indexes()
        return self.snapshot()

    def ensure_indexes(self) -> None:
        """BTREE on object_id, Bitmap on object_type, LabelList on base_objects (directory-namespace spec)."""
        ds = self.dataset()
        if ds.count_rows() == 0:
            return  # nothing to train an index on yet
        have = {tuple(i.field_names) for i in ds.describe_indices()}
        for column, kind in INDEXES:
            if (column,) not in have:
                ds.create_scalar_index(column, kind, name=f"{column}_idx")

    def commit(self, base: ManifestSnapshot, rows: pa.Table,
               transaction_properties: Mapping[str, str] | None = None) -> ManifestSnapshot:
        """Replace the rows of ``base`` by ``rows`` in one commit (every fragment of ``base``
        removed, ``rows`` written as new ones), or raise :class:`ManifestConflict` (also when a
        cleanup removed the version ``base`` read: it was superseded, so rebase).
        ``transaction_properties`` are stored in that commit's Lance transaction (a batch id)."""
        def build(ds: lance.LanceDataset) -> tuple[LanceOperation.BaseOperation, pa.Table]:
            table = rows.select(ds.schema.names).cast(ds.schema)
            frags = (lance.fragment.write_fragments(table, ds, storage_options=self.storage_options)
                     if table.num_rows else [])
            return LanceOperation.Update(removed_fragment_ids=list(base.fragment_ids), new_fragments=frags), table

        new, table = self._commit(base, build, transaction_properties)
        return ManifestSnapshot(new.version, new.metadata, [f.fragment_id for f in new.get_fragments()],
                                rows=table, dataset=new, uri=self.uri, latest=self.latest_version)

    def commit_changes(self, base: ManifestSnapshot, changes: ManifestChanges,
                       transaction_properties: Mapping[str, str] | None = None) -> ManifestSnapshot:
        """Apply ``changes`` to ``base`` in one commit whose cost does not grow with the table,
        or raise :class:`ManifestConflict` like :meth:`commit`.

        The changed rows are found through the ``object_id`` index and deleted where they are
        (a deletion file per fragment holding one); the new rows go into one new fragment. The
        *tail*, the fragment with the highest id (what the previous commit wrote), is always
        part of the commit: while it has at most :data:`TAIL_ROWS` rows it is removed and its
        other rows are written with the new ones (so a run of small commits keeps one small
        fragment); a larger tail is listed as updated (deletions or not) and the new rows start
        a new tail. Two commits from one snapshot therefore touch the same fragment and
        conflict in Lance's resolver, and a commit from an older snapshot conflicts with the
        newer ones: the same linearizable register as a whole rewrite. Past
        :data:`MAX_FRAGMENTS` fragments a commit rewrites the whole table (:meth:`commit`),
        which keeps reads and lookups fast; so does a commit changing more than
        :data:`LOOKUP_LIMIT` rows (one pass over the table beats a lookup that long).
        """
        if (not base.fragment_ids or len(base.fragment_ids) >= MAX_FRAGMENTS
                or len(changes.object_ids()) > LOOKUP_LIMIT):  # many rows: one pass over all of them is cheaper
            return self.commit(base, changes.apply(base.rows), transaction_properties)

        def build(ds: lance.LanceDataset) -> tuple[LanceOperation.BaseOperation, None]:
            keys = changes.object_ids()
            tail = max(base.fragment_ids)
            tail_fragment = ds.get_fragment(tail)
            rewrite_tail = tail_fragment.count_rows() <= TAIL_ROWS
            removed, updated, touched = [tail] if rewrite_tail else [], [], False
            if keys:
                found = ds.to_table(columns=["object_id"], filter=object_id_filter(keys), with_row_address=True)
                addr = found.column("_rowaddr").to_numpy().astype(np.uint64)
                frag_of = (addr >> np.uint64(32)).astype(np.int64)
                for frag_id in np.unique(frag_of).tolist():
                    if frag_id == tail and rewrite_tail:
                        continue
                    touched |= frag_id == tail
                    # by row address: Lance's _rowoffset filter does not name the physical row here
                    rows_at = ", ".join(map(str, addr[frag_of == frag_id].tolist()))
                    md = ds.get_fragment(frag_id).delete(f"_rowaddr IN ({rows_at})")
                    if md is None:
                        removed.append(frag_id)  # every row of it changed
                    else:
                        updated.append(md)
            if not rewrite_tail and not touched:
                updated.append(tail_fragment.metadata)  # unchanged, listed: the conflict point
            upserts = (changes.upserts.select(ds.schema.names).cast(ds.schema)
                       if changes.upserts is not None and changes.upserts.num_rows else ds.schema.empty_table())
            if rewrite_tail:
                kept = tail_fragment.to_table()
                if keys:
                    kept = kept.filter(pc.invert(pc.is_in(kept.column("object_id"), pa.array(keys, pa.utf8()))))
                upserts = pa.concat_tables([kept, upserts])
            new_fragments = (lance.fragment.write_fragments(upserts, ds, storage_options=self.storage_options)
                             if upserts.num_rows else [])
            op = LanceOperation.Update(removed_fragment_ids=removed, updated_fragments=updated,
                                       new_fragments=new_fragments)
            return op, None

        new, _ = self._commit(base, build, transaction_properties)
        return ManifestSnapshot(new.version, new.metadata, [f.fragment_id for f in new.get_fragments()],
                                dataset=new, uri=self.uri, latest=self.latest_version)

    def commit_config(self, base: ManifestSnapshot, changes: ManifestChanges,
                      transaction_properties: Mapping[str, str] | None = None) -> ManifestSnapshot:
        """Commit root-property changes (``changes.metadata``) or new all-NULL columns
        (``changes.columns``) on top of ``base``, or raise :class:`ManifestConflict`; the rows
        stay as they are, so Lance rebases it over a concurrent row commit."""
        if changes.metadata and changes.columns:
            raise ValueError("one commit sets root properties or adds columns, not both")
        if changes.columns:
            try:
                new = self.dataset(base.version)
                new.add_columns(list(changes.columns))  # the handle moves to the version it commits
            except OSError as e:  # Lance's commit conflicts are OSErrors
                if not is_commit_conflict(e):
                    raise
                raise ManifestConflict(str(e)) from e
            note_commit(new.version)
        else:
            def build(ds: lance.LanceDataset) -> tuple[LanceOperation.BaseOperation, None]:
                updates = LanceOperation.UpdateMap(dict(changes.metadata or {}), replace=False)
                return LanceOperation.UpdateConfig(table_metadata_updates=updates), None

            new, _ = self._commit(base, build, transaction_properties)
        return ManifestSnapshot(new.version, new.metadata, [f.fragment_id for f in new.get_fragments()],
                                dataset=new, uri=self.uri, latest=self.latest_version)

    def _commit(self, base: ManifestSnapshot, build: Callable[[lance.LanceDataset], tuple[Any, T]],
                transaction_properties: Mapping[str, str] | None) -> tuple[lance.LanceDataset, T]:
        """Commit the operation ``build(dataset at base)`` makes against ``base.version``."""
        try:
            ds = base.dataset if base.dataset is not None else self.dataset(base.version)
            op, value = build(ds)
            if transaction_properties:
                op = lance.Transaction(read_version=base.version, operation=op,
                                       transaction_properties=dict(transaction_properties))
            new = lance.LanceDataset.commit(self.uri, op, read_version=base.version,
                                            storage_options=self.storage_options, commit_lock=self.commit_lock)
        except LanceCommitConflictError as e:
            raise ManifestConflict(str(e)) from e
        except (NamespaceNotFoundError, CorruptNamespaceError, OSError, ValueError) as e:
            if isinstance(e, OSError) and is_commit_conflict(e):  # Lance gave up its own retries: rebase
                raise ManifestConflict(str(e)) from e
            if isinstance(e, SnapshotGone) or (not isinstance(e, NamespaceNotFoundError) and not is_not_found(e)):
                raise
            latest = self.dataset().version  # NamespaceNotFoundError here: the whole __manifest is gone
            if latest == base.version:
                raise CorruptNamespaceError(
                    f"__manifest at {self.uri}: its latest version {base.version} is gone from storage ({e}); "
                    f"nothing was committed") from e
            raise ManifestConflict(f"__manifest version {base.version} this commit was based on was removed by a "
                                   f"cleanup; the latest is {latest}") from e
        note_commit(new.version)
        return new, value

    def maintain_indexes(self, snap: ManifestSnapshot) -> bool:
        """Bring the ``__manifest`` indexes up to date when more than :data:`UNINDEXED_ROWS`
        rows of ``snap`` are outside the ``object_id`` index (a commit's lookups scan those);
        whether it did. Best effort: a concurrent commit that makes Lance refuse it, or any
        storage error, leaves it to the next commit (lookups stay correct, only slower)."""
        ds = snap.dataset
        if ds is None:
            return False
        try:
            covered = next(({f for seg in i.segments for f in seg.fragment_ids} for i in ds.describe_indices()
                            if i.name == "object_id_idx"), None)
            fragments = ds.get_fragments()
            if covered is None:
                if fragments:
                    self.ensure_indexes()
                    return True
                return False
            unindexed = sum(f.metadata.physical_rows for f in fragments if f.fragment_id not in covered)
            if unindexed <= UNINDEXED_ROWS:
                return False
            ds.optimize.optimize_indices()
        except (OSError, ValueError, RuntimeError) as e:
            logging.getLogger("lancepart.manifest").debug("__manifest indexes not updated (%s): %s",
                                                          type(e).__name__, e)
            return False
        return True

    def protect(self, metadata: Mapping[str, str]) -> bool:
        """Set lancepart's bit in the DirectoryNamespace writer flags of ``__manifest`` unless
        ``metadata`` (its table metadata) already has it; whether a commit was made. Namespaces
        created before the flag existed get it from their next publish or repair. Best effort: a
        concurrent metadata commit makes Lance refuse this one, and the next publish tries again."""
        flags = writer_flags_to_set(metadata)
        if flags is None:
            return False
        try:
            self.dataset().update_metadata({NAMESPACE_WRITER_FLAGS_KEY: str(flags)})
        except OSError as e:
            if not is_commit_conflict(e):
                raise
            return False
        return True

    def restore(self, base: ManifestSnapshot, rows: pa.Table,
                transaction_properties: Mapping[str, str] | None = None) -> ManifestSnapshot:
        """Replace the rows *and the schema* of ``base`` by ``rows`` in one commit (a Lance
        ``Overwrite``; the table metadata of ``base`` is kept), or raise :class:`ManifestConflict`
        if anything committed since ``base``: Lance may not rebase this commit over another.
        The repair of a stripped ``__manifest`` publishes through here (lancepart.ops.repair)."""
        frags = (lance.fragment.write_fragments(rows, self.uri, schema=rows.schema, mode="overwrite",
                                                storage_options=self.storage_options)
                 if rows.num_rows else [])
        op = LanceOperation.Overwrite(rows.schema, frags)
        if transaction_properties:
            op = lance.Transaction(read_version=base.version, operation=op,
                                   transaction_properties=dict(transaction_properties))
        try:
            new = lance.LanceDataset.commit(self.uri, op, read_version=base.version, max_retries=0,
                                            storage_options=self.storage_options, commit_lock=self.commit_lock)
        except (LanceCommitConflictError, OSError) as e:
            if not is_commit_conflict(e):
                raise
            raise ManifestConflict(str(e)) from e
        note_commit(new.version)
        return ManifestSnapshot(new.version, new.metadata, [f.fragment_id for f in new.get_fragments()],
                                rows=rows, dataset=new, uri=self.uri, latest=self.latest_version)

    def update(
        self,
        mutate: Callable[[ManifestSnapshot], tuple[pa.Table | ManifestChanges | None, T]],
        *,
        max_retries: int = 20,
        base_delay: float = 0.05,
        max_delay: float = 2.0,
        what: str = "__manifest commit",
        transaction_properties: Mapping[str, str] | None = None,
        properties_of: Callable[[T], Mapping[str, str]] | None = None,
    ) -> tuple[ManifestSnapshot, T, int]:
        """Optimistic read-modify-write: reload, ``mutate``, commit; on conflict back off and redo.

        ``mutate(snapshot)`` returns ``(new_rows, value)``: the whole new table
        (:meth:`commit`), the :class:`ManifestChanges` to apply (:meth:`commit_changes`) or None
        for nothing to commit. It must be a pure function of the snapshot so that it can be re-run on a
        newer one (this is the rebase). Exponential backoff with full jitter; after
        ``max_retries`` conflicts raises :class:`CommitConflictError` with nothing committed.
        Returns ``(snapshot after commit, value, retries)``. ``transaction_properties`` go with
        the commit (:meth:`commit`), with ``lancepart.operation`` = ``what`` unless they name one
        (``ns.history()`` shows it); ``properties_of(value)`` adds the ones that depend on what
        ``mutate`` found in the snapshot it ran on.
        """
        transaction_properties = {OPERATION_PROPERTY: what, **(transaction_properties or {})}
        lease = CommitLease(self, what)
        try:
            for attempt in range(max_retries + 1):
                snap = lease.wait_for_others(self.snapshot())
                try:
                    rows, value = mutate(snap)  # may raise ManifestConflict: what it built on is gone, rebase
                    if rows is None:
                        return snap, value, attempt
                    props = ({**transaction_properties, **properties_of(value)} if properties_of is not None
                             else transaction_properties)
                    if isinstance(rows, ManifestChanges) and not rows.rows_change:
                        new = self.commit_config(snap, rows, props)
                    elif isinstance(rows, ManifestChanges):
                        new = self.commit_changes(snap, rows, props)
                    else:
                        new = self.commit(snap, rows, props)
                    self.maintain_indexes(new)
                    return new, value, attempt
                except ManifestConflict:
                    if attempt == max_retries:
                        break
                    lease.lost(attempt)
                    backoff(attempt, base_delay, max_delay)
        finally:
            lease.release()
        raise CommitConflictError(
            f"{what}: {max_retries + 1} attempts conflicted with concurrent commits to {self.uri}; "
            f"nothing was published"
        )


def set_root_property(manifest: Manifest, key: str, value: str | None, check: Callable[[str | None], bool],
                    max_retries: int = 20, properties: Mapping[str, str] | None = None) -> str | None:
    """Set (``value``) or remove (None) the root property ``key`` unless ``check(current)`` says
    it is as wanted already; the value it had. Retried over concurrent metadata commits."""

    def mutate(snap: ManifestSnapshot) -> tuple[ManifestChanges | None, str | None]:
        current = snap.metadata.get(key)
        return (None if check(current) else ManifestChanges(metadata={key: value})), current

    _, previous, _ = manifest.update(mutate, max_retries=max_retries, what=f"set {key}",
                                     transaction_properties=properties)
    return previous


#: Root property naming the commit that asked the others to wait (docs/design.md §8c).
LEASE_KEY = "lancepart.commit_lease"
LEASE_AFTER = 3  # conflicts lost before a commit asks the others to wait
LEASE_S = 5.0  # how long a lease holds at most (its holder dies: the others wait no longer)
MAX_WAIT_S = 30.0  # the longest one commit waits for others' leases, over all its attempts


class CommitLease:
    """Fairness between optimistic ``__manifest`` committers (docs/design.md §8c).

    Every commit rebases on a conflict, so one whose rebase takes longer than another
    process's whole cycle (a delete or an index build beside a writer appending as fast as it
    can) could lose every round. After :data:`LEASE_AFTER` lost rounds a commit takes a *lease*:
    the root property :data:`LEASE_KEY` (one metadata-only commit, which Lance rebases over row
    commits) names it and an expiry at most :data:`LEASE_S` away. Every other lancepart commit
    that reads a snapshot holding a live lease not its own waits until it is released or expires
    (at most :data:`MAX_WAIT_S` in all), so the holder's next round meets no competition. The
    lease is advisory: nothing depends on it for correctness (a commit that read its snapshot
    before the lease still commits, and the holder simply rebases once more), an expired one is
    ignored, and a holder killed with its lease held delays others by :data:`LEASE_S` at most.
    Costs nothing when no commit is losing: the property is read with the snapshot."""

    def __init__(self, manifest: Manifest, what: str) -> None:
        self.manifest, self.what = manifest, what
        self.token = f"{os.getpid()}-{random.getrandbits(48):012x}"
        self.held = False
        self.waited = 0.0

    @staticmethod
    def parse(metadata: Mapping[str, str]) -> dict[str, Any] | None:
        raw = metadata.get(LEASE_KEY)
        if not raw:
            return None
        try:
            lease = json.loads(raw)
            return lease if isinstance(lease, dict) and isinstance(lease.get("until"), int | float) else None
        except ValueError:
            return None

    def wait_for_others(self, snap: ManifestSnapshot) -> ManifestSnapshot:
        """``snap``, or a newer snapshot once another commit's live lease in it ended."""
        while self.waited < MAX_WAIT_S:
            lease = self.parse(snap.metadata)
            if lease is None or lease.get("token") == self.token:
                return snap
            left = min(float(lease["until"]) - time.time(), LEASE_S, MAX_WAIT_S - self.waited)
            if left <= 0:
                return snap
            step = min(left, 0.05)
            time.sleep(step)
            self.waited += step
            snap = self.manifest.snapshot()
        return snap

    def lost(self, attempt: int) -> None:
        """Called after lost round ``attempt`` (0-based): take the lease once enough were lost."""
        if attempt + 1 < LEASE_AFTER:
            return
        value = json.dumps({"token": self.token, "until": round(time.time() + LEASE_S, 3), "what": self.what})
        try:
            self._set(value)
            self.held = True
            _LOG.info("%s: lost %d rounds to concurrent commits; asked the others to wait (lease until +%.0f s)",
                     self.what, attempt + 1, LEASE_S)
        except (CommitConflictError, OSError) as e:  # best effort: the lease only helps
            _LOG.debug("%s: no lease taken (%s)", self.what, e)

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        try:
            snap = self.manifest.snapshot()
            if (self.parse(snap.metadata) or {}).get("token") == self.token:
                self._set(None)
        except (CommitConflictError, OSError) as e:  # it expires by itself
            _LOG.debug("%s: lease not released (%s); it expires", self.what, e)

    def _set(self, value: str | None) -> None:
        for attempt in range(5):
            snap = self.manifest.snapshot()
            try:
                self.manifest.commit_config(snap, ManifestChanges(metadata={LEASE_KEY: value}),
                                            {OPERATION_PROPERTY: "commit lease"})
                return
            except ManifestConflict:
                backoff(attempt, 0.01, 0.2)
        raise CommitConflictError("commit lease: 5 attempts conflicted")


def writer_flags_to_set(metadata: Mapping[str, str]) -> int | None:
    """The DirectoryNamespace writer flags of ``metadata`` with lancepart's bit set, or None if it
    is set already."""
    raw = metadata.get(NAMESPACE_WRITER_FLAGS_KEY)
    try:
        current = int(raw) if raw is not None else 0
    except ValueError:
        current = 0  # unparsable: DirectoryNamespace refuses it already; replace with ours
    return None if current & LANCEPART_WRITER_FLAG else current | LANCEPART_WRITER_FLAG


def required_columns(metadata: Mapping[str, str]) -> list[str]:
    """The columns ``__manifest`` of a partitioned namespace must have beyond the standard five:
    ``read_version``, ``read_branch``, ``read_tag`` and the ``partition_field_*`` column of every
    field of every published spec (``partition_spec_v<N>`` in ``metadata``). Empty for a plain
    directory namespace (no spec published). A spec that cannot be parsed adds no column
    (opening the namespace reports it)."""
    spec_keys = sorted(k for k in metadata if k.startswith("partition_spec_v"))
    if not spec_keys:
        return []
    cols = [f.name for f in VERSION_FIELDS]
    for k in spec_keys:
        try:
            fields = json.loads(metadata[k]).get("fields") or []
            names = [f"partition_field_{f['field_id']}" for f in fields]
        except (ValueError, TypeError, AttributeError, KeyError):
            continue
        cols += [c for c in names if c not in cols]
    return cols


def missing_columns(schema: pa.Schema, metadata: Mapping[str, str]) -> list[str]:
    """:func:`required_columns` that ``schema`` lacks, in order."""
    have = set(schema.names)
    return [c for c in required_columns(metadata) if c not in have]


def check_columns(schema: pa.Schema, metadata: Mapping[str, str], uri: str, version: int | None = None) -> None:
    """Raise :class:`CorruptNamespaceError` naming the columns a partitioned ``__manifest`` lost
    (spec partitioning.md "Manifest Table Schema") and how to restore them."""
    missing = missing_columns(schema, metadata)
    if missing:
        at = f" version {version}" if version is not None else ""
        raise CorruptNamespaceError(
            f"__manifest at {uri}{at} lacks the columns {', '.join(missing)}: a tool that knows only the "
            f"five directory-namespace columns rewrote it. Nothing was read or written; restore them from "
            f"__manifest history with `lancepart repair ROOT` (or PartitionedNamespace.repair(ROOT)), "
            f"see docs/foreign-writers.md")


def rows_from_records(schema: pa.Schema, records: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build manifest rows; absent keys are NULL."""
    return pa.Table.from_pylist([dict(r) for r in records], schema=schema)


def metadata_json(properties: Mapping[str, str] | None) -> str:
    return json.dumps(dict(properties or {}), separators=(",", ":"), sort_keys=True)
