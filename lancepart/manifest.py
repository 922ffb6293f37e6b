"""The ``__manifest`` Lance table: read a snapshot, evolve its columns, commit atomically.

Spec: spec/directory-namespace.md "V2: Manifest" and spec/partitioning.md "Manifest Table
Schema" / "Transaction"; docs/decisions.md §6, §7, §8.

Every lancepart commit rewrites the whole table as one Lance ``Update`` that removes every
fragment of the snapshot it was computed from, against that snapshot's version. Two such
commits therefore always conflict in Lance's conflict resolver, which makes the manifest a
linearizable register: a commit lands only if nothing else committed rows since its
snapshot, and the loser reloads and rebases (:meth:`Manifest.update`). The manifest holds
one row per namespace/table, a few MB at 10^4 partitions, so the rewrite costs
milliseconds, and it keeps the table compact as a side effect.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation

# Lance's commit conflict lives in a submodule that `import lance` does not load: until it is
# loaded, an `except lance.commit.CommitConflictError` clause fails on any other error reaching it.
from lance.commit import CommitConflictError as LanceCommitConflictError

from lancepart.error_mapping import typed_error
from lancepart.errors import (
    CommitConflictError,
    CorruptNamespaceError,
    NamespaceNotFoundError,
    StorageUnavailableError,
)
from lancepart.redact import register as register_secrets

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
# docs/decisions.md §7: the transaction columns follow the standard ones.
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


_BUCKET = re.compile(r"<BucketName>([^<]+)</BucketName>")
_ENDPOINT = re.compile(r"(https?://[^/?\s]+)")
_STORE_PROBLEMS = (
    (("NoSuchBucket", "bucket does not exist"), "bucket {bucket} does not exist"),
    (("error sending request", "Connection refused", "dns error", "connection timed out", "operation timed out"),
     "the object store endpoint {endpoint} does not answer"),
    (("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403 Forbidden"),
     "the object store {endpoint} refused the credentials or the bucket policy denies access"),
)


def storage_problem(e: BaseException, uri: str) -> StorageUnavailableError | None:
    """A :class:`StorageUnavailableError` naming ``uri`` and what is wrong with its store, if
    ``e`` (an error from Lance's object store) says the bucket, endpoint or credentials fail;
    else None. Lance's messages carry the request URL, never the credentials."""
    text = str(e)
    for needles, template in _STORE_PROBLEMS:
        if any(n in text for n in needles):
            bucket = _BUCKET.search(text)
            endpoint = _ENDPOINT.search(text)
            what = template.format(bucket=repr(bucket.group(1)) if bucket else "(named in the root URI)",
                                   endpoint=endpoint.group(1) if endpoint else "(default AWS endpoint)")
            return StorageUnavailableError(f"{uri}: {what}")
    return None


def is_commit_conflict(e: BaseException) -> bool:
    """Whether Lance refused a commit because a concurrent one landed first: its
    ``CommitConflictError``, or the ``OSError`` it raises for two transactions it cannot rebase
    over each other (for example two concurrent metadata updates: "Incompatible transaction")."""
    if isinstance(e, LanceCommitConflictError):
        return True
    return isinstance(e, OSError) and any(w in str(e).lower() for w in ("incompatible transaction", "conflict"))


def is_not_found(e: BaseException) -> bool:
    """Whether a Lance or storage error says that a table, version manifest or file does not exist."""
    text = str(e).lower()
    return "not found" in text or "does not exist" in text or "no such file" in text


def backoff(attempt: int, base_delay: float = 0.05, max_delay: float = 2.0) -> None:
    """Sleep before retry ``attempt`` (0-based): exponential backoff with full jitter."""
    time.sleep(random.uniform(0, min(max_delay, base_delay * 2**attempt)))


class ManifestConflict(Exception):
    """Internal: someone else committed to __manifest since our snapshot."""


@dataclass(frozen=True)
class ManifestSnapshot:
    """One version of ``__manifest``: its rows, its table metadata and its fragments."""

    version: int
    rows: pa.Table
    metadata: dict[str, str]
    fragment_ids: tuple[int, ...]
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def row_index(self) -> dict[str, int]:
        """object_id -> row number (built once per snapshot)."""
        if not self._index and self.rows.num_rows:
            self._index.update({oid: i for i, oid in enumerate(self.rows.column("object_id").to_pylist())})
        return self._index

    def has(self, object_id: str) -> bool:
        return object_id in self.row_index()

    def row(self, object_id: str) -> dict[str, Any] | None:
        i = self.row_index().get(object_id)
        return None if i is None else self.rows.slice(i, 1).to_pylist()[0]

    def tables(self) -> pa.Table:
        return self.rows.filter(pc.equal(self.rows.column("object_type"), "table"))

    def with_read_versions(self, versions: Mapping[str, int]) -> pa.Table:
        """The rows with the ``read_version`` of each table in ``versions`` (object_id -> table
        version) replaced: what a publishing commit writes."""
        index = self.row_index()
        values = self.rows.column("read_version").to_pylist()
        for oid, version in versions.items():
            values[index[oid]] = version
        j = self.rows.schema.get_field_index("read_version")
        return self.rows.set_column(j, self.rows.schema.field(j), pa.array(values, pa.uint64()))


class Manifest:
    """Handle on ``<root>/__manifest``."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        register_secrets(storage_options)  # messages of this process never show them
        self.root = root
        self.uri = join_uri(root, MANIFEST_DIR)
        self.storage_options = dict(storage_options) if storage_options else None
        self.commit_lock = commit_lock(self.uri, storage_options)

    # ------------------------------------------------------------------ reading
    def dataset(self, version: int | None = None) -> lance.LanceDataset:
        try:
            return lance.dataset(self.uri, version=version, storage_options=self.storage_options,
                                 commit_lock=self.commit_lock)
        except (ValueError, OSError) as e:
            if (problem := storage_problem(e, self.root)) is not None:
                raise problem from None
            if (typed := typed_error(e, self.root)) is not None:  # full, forbidden, a file for a root
                raise typed from e
            if isinstance(e, ValueError) and is_not_found(e):
                raise NamespaceNotFoundError(f"no __manifest table at {self.uri}") from None
            raise CorruptNamespaceError(f"cannot open __manifest at {self.uri}: {e}") from e

    def exists(self) -> bool:
        try:
            self.dataset()
        except NamespaceNotFoundError:
            return False
        return True

    def snapshot(self, version: int | None = None, *, check: bool = True) -> ManifestSnapshot:
        """The rows, metadata and fragments of ``version`` (latest by default). With ``check``,
        a partitioned namespace whose ``__manifest`` lost columns it needs (a tool that knows
        only the five standard columns rewrote it) raises :class:`CorruptNamespaceError`
        naming them (:func:`check_columns`)."""
        for _ in range(20):
            ds = self.dataset(version)
            if check:
                check_columns(ds.schema, ds.metadata, self.uri, ds.version)
            try:
                rows = ds.to_table()
                break
            except (OSError, ValueError) as e:
                # the latest version was superseded and its files removed by a cleanup with a short
                # retention between our open and our read: read the newer one
                if version is None and is_not_found(e) and self.dataset().version != ds.version:
                    continue
                raise CorruptNamespaceError(f"cannot read __manifest at {self.uri} version {ds.version}: {e}") from e
        else:
            raise CorruptNamespaceError(f"cannot read __manifest at {self.uri}: its latest version kept vanishing")
        return ManifestSnapshot(
            version=ds.version,
            rows=rows,
            metadata=dict(ds.metadata),
            fragment_ids=tuple(f.fragment_id for f in ds.get_fragments()),
        )

    # ------------------------------------------------------------------ writing
    def create(self, rows: pa.Table, metadata: Mapping[str, str]) -> ManifestSnapshot:
        """Create ``__manifest`` with its rows, then set its table metadata and indexes.

        The namespace counts as partitioned only once the metadata commit lands (spec
        "Metadata Definition"), so a create that dies half way leaves no partitioned namespace.
        """
        try:
            ds = lance.write_dataset(rows, self.uri, schema=rows.schema, mode="create",
                                     storage_options=self.storage_options, commit_lock=self.commit_lock)
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
        """Replace the rows of ``base`` by ``rows`` in one commit, or raise :class:`ManifestConflict`
        (also when a cleanup removed the version ``base`` read: it was superseded, so rebase).
        ``transaction_properties`` are stored in that commit's Lance transaction (a batch id)."""
        try:
            ds = self.dataset(base.version)
            rows = rows.select(ds.schema.names).cast(ds.schema)
            frags = (lance.fragment.write_fragments(rows, ds, storage_options=self.storage_options)
                     if rows.num_rows else [])
            op = LanceOperation.Update(removed_fragment_ids=list(base.fragment_ids), new_fragments=frags)
            if transaction_properties:
                op = lance.Transaction(read_version=base.version, operation=op,
                                       transaction_properties=dict(transaction_properties))
            new = lance.LanceDataset.commit(self.uri, op, read_version=base.version,
                                            storage_options=self.storage_options, commit_lock=self.commit_lock)
        except LanceCommitConflictError as e:
            raise ManifestConflict(str(e)) from e
        except (NamespaceNotFoundError, CorruptNamespaceError, OSError, ValueError) as e:
            if not isinstance(e, NamespaceNotFoundError) and "not found" not in str(e).lower():
                raise
            latest = self.dataset().version  # NamespaceNotFoundError here: the whole __manifest is gone
            if latest == base.version:
                raise CorruptNamespaceError(
                    f"__manifest at {self.uri}: its latest version {base.version} is gone from storage ({e}); "
                    f"nothing was committed") from e
            raise ManifestConflict(f"__manifest version {base.version} this commit was based on was removed by a "
                                   f"cleanup; the latest is {latest}") from e
        return ManifestSnapshot(version=new.version, rows=rows, metadata=dict(new.metadata),
                                fragment_ids=tuple(f.fragment_id for f in new.get_fragments()))

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

    def restore(self, base: ManifestSnapshot, rows: pa.Table) -> ManifestSnapshot:
        """Replace the rows *and the schema* of ``base`` by ``rows`` in one commit (a Lance
        ``Overwrite``; the table metadata of ``base`` is kept), or raise :class:`ManifestConflict`
        if anything committed since ``base``: Lance may not rebase this commit over another.
        The repair of a stripped ``__manifest`` publishes through here (lancepart.repair)."""
        frags = (lance.fragment.write_fragments(rows, self.uri, schema=rows.schema, mode="overwrite",
                                                storage_options=self.storage_options)
                 if rows.num_rows else [])
        op = LanceOperation.Overwrite(rows.schema, frags)
        try:
            new = lance.LanceDataset.commit(self.uri, op, read_version=base.version, max_retries=0,
                                            storage_options=self.storage_options, commit_lock=self.commit_lock)
        except (LanceCommitConflictError, OSError) as e:
            if not is_commit_conflict(e):
                raise
            raise ManifestConflict(str(e)) from e
        return ManifestSnapshot(version=new.version, rows=rows, metadata=dict(new.metadata),
                                fragment_ids=tuple(f.fragment_id for f in new.get_fragments()))

    def update(
        self,
        mutate: Callable[[ManifestSnapshot], tuple[pa.Table | None, T]],
        *,
        max_retries: int = 20,
        base_delay: float = 0.05,
        max_delay: float = 2.0,
        what: str = "__manifest commit",
        transaction_properties: Mapping[str, str] | None = None,
    ) -> tuple[ManifestSnapshot, T, int]:
        """Optimistic read-modify-write: reload, ``mutate``, commit; on conflict back off and redo.

        ``mutate(snapshot)`` returns ``(new_rows or None, value)``; None means nothing to
        commit. It must be a pure function of the snapshot so that it can be re-run on a
        newer one (this is the rebase). Exponential backoff with full jitter; after
        ``max_retries`` conflicts raises :class:`CommitConflictError` with nothing committed.
        Returns ``(snapshot after commit, value, retries)``. ``transaction_properties`` go with
        the commit (:meth:`commit`).
        """
        for attempt in range(max_retries + 1):
            snap = self.snapshot()
            try:
                rows, value = mutate(snap)  # may raise ManifestConflict: what it built on is gone, rebase
                if rows is None:
                    return snap, value, attempt
                return self.commit(snap, rows, transaction_properties), value, attempt
            except ManifestConflict:
                if attempt == max_retries:
                    break
                backoff(attempt, base_delay, max_delay)
        raise CommitConflictError(
            f"{what}: {max_retries + 1} attempts conflicted with concurrent commits to {self.uri}; "
            f"nothing was published"
        )


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
            f"__manifest history with `lancepart repair ROOT` (or lancepart.repair.repair_root(ROOT)), "
            f"see docs/foreign-writers.md")


def rows_from_records(schema: pa.Schema, records: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Build manifest rows; absent keys are NULL."""
    return pa.Table.from_pylist([dict(r) for r in records], schema=schema)


def metadata_json(properties: Mapping[str, str] | None) -> str:
    return json.dumps(dict(properties or {}), separators=(",", ":"), sort_keys=True)
