"""Exactly-once batch ids: where they are recorded, how they are found, how long they are kept.

Spec: spec/partitioning.md "Transaction" (one ``__manifest`` commit publishes a write); the
design and its hazards are in docs/exactly-once.md.

* **The record** is part of the publishing commit itself: the ``__manifest`` commit that moves
  ``read_version`` carries ``lancepart.batch_id`` (and ``lancepart.committed_at``) in Lance's
  *transaction properties*, so an id is recorded if and only if its rows are published. It is
  not a namespace property: ``describe_namespace`` never shows it.
* **The index** ``<root>/_lancepart_batches`` is a small Lance table (``batch_id``,
  ``manifest_version``, ``committed_at``) with a watermark in its table metadata: every
  ``__manifest`` version up to ``lancepart.indexed_through`` is in it. It is derived data:
  a lookup at ``__manifest`` version S reads the index (exact equality on ``batch_id``) and the
  transaction properties of the versions after the watermark up to S, so an index that is
  behind (a writer killed between its publish and its index append) or missing is never
  wrong, only slower. Its name has no ``.lance`` suffix and is not a partition table name,
  so neither a directory namespace listing nor cleanup's directory collection takes it for
  a table.
* **Retention** is explicit and time-based (like Delta's ``setTransactionRetentionDuration``):
  ids older than ``lancepart.batch_id_retention`` (a root property; default 30 days) are
  removed from the index by cleanup. Before cleanup removes ``__manifest`` versions (and with
  them their transaction files) it brings the index up to date
  (:func:`prepare_for_cleanup`), so no id younger than the retention is ever forgotten,
  whatever ``older_than`` cleanup runs with.
* **Legacy records**: namespaces written before this design hold ids as
  ``lancepart.batch.<id>`` properties of the ``v<N>`` row; they are still recognised (JSON
  parsed, keys compared exactly) and never added again.

>>> check_batch_id("ventes-été-2025-12-01")
'ventes-été-2025-12-01'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import lance
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import CorruptNamespaceError, InvalidArgumentError
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import BATCH_ID_PROPERTY as BATCH_ID_PROPERTY  # re-exported
from lancepart.storage.manifest import (
    Manifest,
    ManifestChanges,
    ManifestSnapshot,
    backoff,
    commit_lock,
    is_commit_conflict,
    is_not_found,
    join_uri,
)
from lancepart.util.durations import parse_duration
from lancepart.util.parallel import map_threads

log = logging.getLogger("lancepart.write")
T = TypeVar("T")

COMMITTED_AT_PROPERTY = "lancepart.committed_at"  # ISO 8601 UTC, the writer's clock at publish
RETENTION_PROPERTY = "lancepart.batch_id_retention"  # root property (__manifest table metadata)
DEFAULT_RETENTION = timedelta(days=30)
MAX_BATCH_ID_BYTES = 4096  # a path (Linux PATH_MAX) plus a date fits: the DAG's default ids are built from them
INDEX_DIR = "_lancepart_batches"
WATERMARK_KEY = "lancepart.indexed_through"  # index table metadata: every __manifest version <= N is indexed
LEGACY_PREFIX = "lancepart.batch."  # ids recorded before the index existed (v<N> row properties)
# transaction properties of a rollback commit (lancepart.maintenance.rollback): JSON lists of the ids
# whose rows it removed (published before it, not in the snapshot it restored) and of the ids whose
# rows it brought back (in that snapshot, undone since)
UNDONE_PROPERTY = "lancepart.undone_batch_ids"
REDONE_PROPERTY = "lancepart.redone_batch_ids"
INDEX_SCHEMA = pa.schema([
    pa.field("batch_id", pa.utf8(), nullable=False),
    pa.field("manifest_version", pa.uint64(), nullable=False),
    pa.field("committed_at", pa.timestamp("us", tz="UTC")),
    # True: a rollback at manifest_version removed the id's rows (NULL/False: published there)
    pa.field("undone", pa.bool_()),
])
COMPACT_AT_FRAGMENTS = 16  # the index is compacted (and its BTREE refreshed) beyond this many fragments
_PARALLEL_READS = 8  # transaction files read on threads beyond this many



@dataclass(frozen=True)
class BatchRecord:
    """Where a batch id was published: its ``__manifest`` version and when. ``undone``: the
    record of a rollback at that version that removed the id's rows (the id counts as not
    published until a later record says otherwise)."""

    batch_id: str
    manifest_version: int
    committed_at: datetime | None  # UTC; None for a legacy record without a time
    source: str  # "index", "transaction" or "legacy"
    undone: bool = False


def check_batch_id(batch_id: Any) -> str:
    """``batch_id`` if it is usable, else :class:`InvalidArgumentError` naming the rule: a
    non-empty ``str`` that encodes as UTF-8 (no lone surrogates) in at most
    :data:`MAX_BATCH_ID_BYTES` bytes. Any other Unicode (quotes, backslashes, newlines, tabs,
    control characters, emoji) is an id of its own, compared exactly.

    >>> check_batch_id("批次-7")
    '批次-7'
    """
    if not isinstance(batch_id, str):
        raise InvalidArgumentError(f"batch_id must be a str, got {type(batch_id).__name__} {batch_id!r}")
    if not batch_id:
        raise InvalidArgumentError("batch_id must not be empty")
    try:
        size = len(batch_id.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"batch_id must be encodable as UTF-8; it holds a lone surrogate {batch_id[e.start]!r} at "
            f"index {e.start} (undecodable bytes from a file name or argv?)") from None
    if size > MAX_BATCH_ID_BYTES:
        raise InvalidArgumentError(f"batch_id must be at most {MAX_BATCH_ID_BYTES} bytes in UTF-8, got {size} "
                                   f"(starts {batch_id[:40]!r})")
    return batch_id


def transaction_properties(batch_id: str, now: datetime | None = None) -> dict[str, str]:
    """The transaction properties of the ``__manifest`` commit that publishes ``batch_id``."""
    now = now or datetime.now(UTC)
    return {BATCH_ID_PROPERTY: batch_id, COMMITTED_AT_PROPERTY: now.isoformat()}


# ---------------------------------------------------------------------------- retention
def parse_retention(value: str) -> timedelta:
    """``"30 days"``, ``"12h"``, ``"90 minutes"`` or a number of seconds, as a timedelta.

    >>> parse_retention("30 days")
    datetime.timedelta(days=30)
    """
    try:
        return parse_duration(value)
    except ValueError as e:
        raise InvalidArgumentError(f"{RETENTION_PROPERTY}: {e}") from None


def batch_id_retention(root_properties: Mapping[str, str]) -> timedelta:
    """How long batch ids are remembered: the root property ``lancepart.batch_id_retention``,
    else :data:`DEFAULT_RETENTION`."""
    value = root_properties.get(RETENTION_PROPERTY)
    if value is None:
        return DEFAULT_RETENTION
    try:
        return parse_retention(value)
    except InvalidArgumentError as e:
        raise CorruptNamespaceError(f"root property {RETENTION_PROPERTY}: {e}") from None


def set_batch_id_retention(manifest: Manifest, retention: timedelta) -> None:
    """Set the root property ``lancepart.batch_id_retention`` (whole seconds).

    >>> set_batch_id_retention(ns.manifest, timedelta(days=90))
    >>> batch_id_retention(ns.refresh().snapshot().metadata)
    datetime.timedelta(days=90)
    """
    if not isinstance(retention, timedelta) or retention <= timedelta(0):
        raise InvalidArgumentError(f"batch id retention must be a positive datetime.timedelta, got {retention!r}")
    value = str(int(retention.total_seconds()))
    manifest.update(lambda snap: (ManifestChanges(metadata={RETENTION_PROPERTY: value}), None),
                    what="set batch id retention")


def result_details(record: BatchRecord | None, retention: timedelta, now: datetime | None = None) -> dict[str, Any]:
    """``CommitResult.details`` entries for a write with a batch id: how far back ids are
    remembered, and where an already published id was found (warning when it is older than
    the retention: cleanup may forget it any time, and a rerun then publishes again)."""
    now = now or datetime.now(UTC)
    out: dict[str, Any] = {"batch_id_retention_s": int(retention.total_seconds()),
                           "batch_ids_remembered_since": (now - retention).isoformat()}
    if record is None:
        return out
    out["batch_id_published_in"] = record.manifest_version
    if record.committed_at is not None:
        out["batch_id_published_at"] = record.committed_at.isoformat()
        if record.committed_at < now - retention:
            out["batch_id_older_than_retention"] = True
            log.warning("batch id %r was published at %s (__manifest version %d), longer ago than the batch id "
                        "retention (%s): skipped, but cleanup may forget it at any time and a rerun would then "
                        "publish again", record.batch_id, record.committed_at.isoformat(), record.manifest_version,
                        retention)
    return out


# ---------------------------------------------------------------------------- lookup
def index_uri(manifest: Manifest) -> str:
    return join_uri(manifest.root, INDEX_DIR)


def _open_index(manifest: Manifest) -> lance.LanceDataset | None:
    uri = index_uri(manifest)
    try:
        return open_table(uri, storage_options=manifest.storage_options,
                             commit_lock=commit_lock(uri, manifest.storage_options))
    except ValueError as e:
        if is_not_found(e):
            return None
        raise


def index_exists(manifest: Manifest) -> bool:
    return _open_index(manifest) is not None


def _watermark(ds: lance.LanceDataset | None) -> int:
    return int(ds.metadata.get(WATERMARK_KEY, 0)) if ds is not None else 0


def _parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def _legacy(snap: ManifestSnapshot, batch_id: str) -> BatchRecord | None:
    """An id recorded as ``lancepart.batch.<id>`` in a ``v<N>`` row (before the index existed)."""
    specs = [k[len("partition_spec_"):] for k in snap.metadata if k.startswith("partition_spec_v")]
    rows = snap.lookup(specs)  # the v<N> rows alone: a publish never reads all of __manifest
    ns_rows = rows.filter(pc.equal(rows.column("object_type"), "namespace"))
    key = LEGACY_PREFIX + batch_id
    for md in ns_rows.column("metadata").to_pylist():
        if not md or '"' + LEGACY_PREFIX not in md:  # the prefix is ASCII, escaped the same in any JSON
            continue
        value = json.loads(md).get(key)
        if value is not None:
            try:
                rec = json.loads(value)
                at = rec.get("committed_at")
                return BatchRecord(batch_id, int(rec.get("manifest_version") or 0),
                                   datetime.fromtimestamp(float(at), UTC) if at is not None else None, "legacy")
            except (TypeError, ValueError, AttributeError):
                return BatchRecord(batch_id, 0, None, "legacy")
    return None


def _transactions(manifest: Manifest, first: int, last: int) -> list[tuple[int, dict[str, str]]]:
    """``(version, transaction properties)`` of the ``__manifest`` versions ``first..last`` that
    carry a batch id. Versions older than the oldest one left were removed by a cleanup, which
    indexes every version before removing it."""
    if first > last:
        return []
    mds = manifest.dataset()

    def read(v: int, ds: lance.LanceDataset = mds) -> tuple[int, dict[str, str]]:
        try:
            tx = ds.read_transaction(v)
        except (OSError, ValueError) as e:
            raise CorruptNamespaceError(f"cannot read the transaction of {manifest.uri} version {v} to look for "
                                        f"batch ids: {e}") from e
        return v, dict(tx.transaction_properties or {}) if tx is not None else {}

    try:
        got = [read(first)]
        first += 1
    except CorruptNamespaceError:  # removed by a cleanup? then start at the oldest version left
        oldest = min(int(x["version"]) for x in mds.versions())
        if first >= oldest:
            raise
        got, first = [], oldest
    versions = range(first, last + 1)
    if len(versions) <= _PARALLEL_READS:
        got += [read(v) for v in versions]
    else:  # one dataset handle per thread: a handle cannot be used by two threads at once
        chunks = [versions[i::_PARALLEL_READS] for i in range(_PARALLEL_READS)]
        for part in map_threads(lambda vs: [read(v, manifest.dataset()) for v in vs], chunks):
            got += part
    return [(v, p) for v, p in got if BATCH_ID_PROPERTY in p or UNDONE_PROPERTY in p or REDONE_PROPERTY in p]


def _records(version: int, props: Mapping[str, str]) -> list[BatchRecord]:
    """The batch id records of one ``__manifest`` commit: the id a publish published, or the ids
    a rollback undid and redid."""
    at = _parse_time(props.get(COMMITTED_AT_PROPERTY))
    out = []
    if BATCH_ID_PROPERTY in props:
        out.append(BatchRecord(props[BATCH_ID_PROPERTY], version, at, "transaction"))
    for key, undone in ((UNDONE_PROPERTY, True), (REDONE_PROPERTY, False)):
        if key in props:
            try:
                listed = json.loads(props[key])
            except ValueError as e:
                raise CorruptNamespaceError(f"__manifest version {version}: transaction property {key} is not a "
                                            f"JSON list: {e}") from None
            out.extend(BatchRecord(b, version, at, "transaction", undone) for b in listed)
    return out


def _index_records(ds: lance.LanceDataset, filter: Any = None) -> list[BatchRecord]:
    cols = ["batch_id", "manifest_version", "committed_at"] + (["undone"] if "undone" in ds.schema.names else [])
    rows = ds.to_table(columns=cols, filter=filter).to_pylist()
    return [BatchRecord(r["batch_id"], int(r["manifest_version"]), r["committed_at"], "index", bool(r.get("undone")))
            for r in rows]


def all_records(manifest: Manifest, upto: int) -> list[BatchRecord]:
    """Every batch id record (publishes, and rollbacks' undo and redo) of the ``__manifest``
    versions up to ``upto`` that the index or the transactions after its watermark hold."""
    ds = _open_index(manifest)
    found = [r for r in _index_records(ds) if r.manifest_version <= upto] if ds is not None else []
    for v, props in _transactions(manifest, _watermark(ds) + 1, upto):
        found.extend(_records(v, props))
    return found


def published_at(records: list[BatchRecord], version: int) -> dict[str, BatchRecord]:
    """batch id -> its record, for the ids published in the namespace as of ``__manifest``
    version ``version`` (the latest record of each up to it is not an undo)."""
    latest: dict[str, BatchRecord] = {}
    for r in records:
        if r.manifest_version <= version:
            have = latest.get(r.batch_id)
            if have is None or r.manifest_version > have.manifest_version:
                latest[r.batch_id] = r
    return {b: r for b, r in latest.items() if not r.undone}


def find_batch(manifest: Manifest, batch_id: str, snap: ManifestSnapshot) -> BatchRecord | None:
    """Where ``batch_id`` was published, if any ``__manifest`` version up to ``snap.version``
    (or a later one already indexed) published it; else None. Exact: any Unicode id matches
    only itself (spec "Transaction": the id is part of the publishing commit).

    >>> _ = ns.write(pa.table({"id": [7], "event_date": [date(2025, 12, 12)]}), batch_id="批次-7")
    >>> record = find_batch(ns.manifest, "批次-7", ns.manifest.snapshot())
    >>> record.manifest_version == ns.manifest_version, record.undone
    (True, False)
    >>> print(find_batch(ns.manifest, "批次-8", ns.manifest.snapshot()))
    None
    """
    check_batch_id(batch_id)
    found: list[BatchRecord] = []
    ds = _open_index(manifest)
    if ds is not None:
        found += _index_records(ds, pc.field("batch_id") == batch_id)
    # also when the index knows the id: a rollback after the watermark may have undone it
    found += [r for v, props in _transactions(manifest, _watermark(ds) + 1, snap.version)
              for r in _records(v, props) if r.batch_id == batch_id]
    if not found and (legacy := _legacy(snap, batch_id)) is not None:
        found.append(legacy)
    if not found:
        return None
    latest = max(found, key=lambda r: r.manifest_version)
    return None if latest.undone else latest


# ---------------------------------------------------------------------------- index maintenance
def index_batches(manifest: Manifest, upto: int | None = None) -> int:
    """Bring the index up to ``__manifest`` version ``upto`` (default: the latest): append a row
    per batch id published after the watermark, then move the watermark. Returns the watermark.

    Rows first, watermark second: a process killed in between leaves rows that the next run
    appends again (a duplicate row changes no lookup) and never a watermark ahead of its rows.
    Concurrent indexers may both append the same rows, for the same reason harmless.
    """
    ds = _open_index(manifest)
    have = _watermark(ds)
    if upto is None:
        upto = manifest.dataset().version
    if have >= upto:
        return have
    found = [r for v, props in _transactions(manifest, have + 1, upto) for r in _records(v, props)]
    rows = pa.table({
        "batch_id": pa.array([r.batch_id for r in found], pa.utf8()),
        "manifest_version": pa.array([r.manifest_version for r in found], pa.uint64()),
        "committed_at": pa.array([r.committed_at for r in found], pa.timestamp("us", tz="UTC")),
        "undone": pa.array([r.undone for r in found], pa.bool_()),
    }, schema=INDEX_SCHEMA)
    uri, so = index_uri(manifest), manifest.storage_options
    lock = commit_lock(uri, so)
    if ds is None and not rows.num_rows:
        return upto  # no id was ever published: nothing to remember, no index to create
    if ds is None:
        try:
            ds = lance.write_dataset(rows, uri, schema=INDEX_SCHEMA, mode="create", storage_options=so,
                                     commit_lock=lock)
        except (OSError, ValueError) as e:
            if "exist" not in str(e).lower() or (ds := _open_index(manifest)) is None:
                raise
            if rows.num_rows:
                ds = _append(manifest, ds, rows)
    elif rows.num_rows:
        ds = _append(manifest, ds, rows)

    def move_watermark() -> lance.LanceDataset | None:
        latest = _open_index(manifest)
        if latest is not None and _watermark(latest) < upto:  # another indexer may have gone further meanwhile
            latest.update_metadata({WATERMARK_KEY: str(upto)})
        return latest

    latest = _on_conflict_retry(move_watermark)  # every publish moves it: concurrent moves are the rule
    if latest is not None and len(latest.get_fragments()) > COMPACT_AT_FRAGMENTS:
        _compact(latest)
    return upto


def _append(manifest: Manifest, ds: lance.LanceDataset, rows: pa.Table) -> lance.LanceDataset:
    """Append index rows. An index made before rollbacks existed has no ``undone`` column: rows
    that undo nothing go in without it (Lance fills NULL); the first undo adds the column."""
    uri, so = index_uri(manifest), manifest.storage_options
    if "undone" not in ds.schema.names:
        if not pc.any(rows.column("undone")).as_py():
            rows = rows.drop_columns(["undone"])
        else:
            def add() -> lance.LanceDataset:
                latest = _open_index(manifest) or ds
                if "undone" not in latest.schema.names:
                    latest.add_columns(INDEX_SCHEMA.field("undone"))
                return _open_index(manifest) or latest
            ds = _on_conflict_retry(add)
    return lance.write_dataset(rows, ds, mode="append", storage_options=so, commit_lock=commit_lock(uri, so))


def _on_conflict_retry(fn: Callable[[], T], attempts: int = 20) -> T:
    """``fn()``, again (after a backoff, on a fresh handle it opens itself) while Lance refuses its
    commit for a concurrent one; the last conflict is raised."""
    for attempt in range(attempts):
        try:
            return fn()
        except (OSError, ValueError) as e:
            if not is_commit_conflict(e) or attempt == attempts - 1:
                raise
            backoff(attempt, 0.01, 0.5)
    raise AssertionError("not reached")


def index_quietly(manifest: Manifest, upto: int) -> None:
    """:func:`index_batches` after a publish, never failing it: a lookup reads the transactions
    the index has not caught up with, so a failure here only costs the next lookup time."""
    try:
        index_batches(manifest, upto)
    except Exception as e:  # bookkeeping must never fail a published write
        log.warning("batch id index of %s not updated (lookups read __manifest transactions instead until the "
                    "next publish or cleanup catches up): %s: %s", manifest.root, type(e).__name__, e)


def _compact(ds: lance.LanceDataset) -> None:
    """Merge the index's small fragments and keep a BTREE on ``batch_id`` current (best effort:
    a concurrent indexer or cleanup may win the commit; the next one compacts)."""
    try:
        ds.optimize.compact_files()
        if ds.count_rows():
            if any(tuple(i.field_names) == ("batch_id",) for i in ds.describe_indices()):
                ds.optimize.optimize_indices()
            else:
                ds.create_scalar_index("batch_id", "BTREE", name="batch_id_idx")
    except (OSError, ValueError) as e:
        if not is_commit_conflict(e):
            raise


def prepare_for_cleanup(manifest: Manifest, *, dry_run: bool = False, now: datetime | None = None) -> int:
    """Called by cleanup before it removes ``__manifest`` versions (and their transaction files):
    index every version, so no batch id younger than the retention is forgotten, then remove
    the ids older than the retention from the index. Raises if the index cannot be brought up
    to date, so cleanup stops before removing a version whose ids are not indexed. Returns
    the number of expired ids removed (0 in a dry run, which changes nothing)."""
    if dry_run:
        return 0
    index_batches(manifest)
    ds = _open_index(manifest)
    if ds is None:
        return 0
    now = now or datetime.now(UTC)
    cutoff = pa.scalar(now - batch_id_retention(manifest.dataset().metadata), pa.timestamp("us", tz="UTC"))
    expired = pc.field("committed_at") < cutoff
    n = ds.count_rows(filter=expired)
    if n:
        _on_conflict_retry(lambda: (_open_index(manifest) or ds).delete(expired))  # beside publishes' appends
        log.info("batch id index of %s: %d ids older than the retention removed", manifest.root, n)
        _compact(_open_index(manifest) or ds)
    return n
