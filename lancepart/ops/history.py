"""History and time travel over ``__manifest`` versions (docs/history.md).

Every publish is one ``__manifest`` commit, so a ``__manifest`` version *is* a snapshot of the
whole namespace: its rows pin each partition table's ``read_version``. Cleanup keeps every
retained ``__manifest`` version fully readable (docs/retention.md), so time travel reaches back
to the oldest version a cleanup left, and no further.

* :func:`history` lists the retained versions, newest first, with what each commit did: the
  operation lancepart recorded in the commit's Lance transaction (``lancepart.operation``;
  commits made before it was recorded, or by other tools, show Lance's own operation name), the
  batch id, and for writes the rows and partition tables they published.
* :func:`snapshot_at` finds the snapshot for ``PartitionedNamespace.open(root, version=N)`` or
  ``open(root, as_of=datetime)``: a read-only handle on that version.

>>> first_write = ns.history()[1]
>>> first_write.operation, first_write.batch_id, first_write.rows_written
('append', '2025-12-10', 4)
>>> PartitionedNamespace.open(ns.root, as_of=first_write.timestamp).to_table().num_rows
4
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import lance

from lancepart.errors import InvalidArgumentError, NamespaceNotFoundError, SnapshotExpiredError
from lancepart.model.ids import SPEC_KEY_PREFIX
from lancepart.storage.manifest import (
    BATCH_ID_PROPERTY,
    OPERATION_PROPERTY,
    PARTITIONS_PROPERTY,
    ROWS_PROPERTY,
    ROWS_REMOVED_PROPERTY,
    Manifest,
    ManifestSnapshot,
)

# Lance operations on __manifest that lancepart makes without a label of its own
# Lance's own operations on __manifest, named for what they are there: a Merge is Lance's add_columns
# (a spec evolution adding its partition columns: Lance takes no label with it), not a merge of rows
_LANCE_OPERATIONS = {"CreateIndex": "index", "UpdateConfig": "properties", "Merge": "add columns"}


@dataclass(frozen=True)
class HistoryEntry:
    """One retained ``__manifest`` version: a snapshot of the namespace and the commit that made it."""

    version: int
    timestamp: datetime  # UTC, the committing writer's clock as Lance recorded it
    # "create", "append", "overwrite", "compaction publish", "evolve to v2", "drop_partitions",
    # "partition reservation", "index" (an index update of __manifest), "properties", ...
    operation: str
    batch_id: str | None = None
    rows_written: int | None = None  # a publish's rows (None when the commit did not record it)
    partitions_touched: int | None = None
    rows_removed: int | None = None  # of a delete (None when the commit did not record it)
    properties: dict[str, str] = field(default_factory=dict)  # every transaction property

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["timestamp"] = self.timestamp.isoformat()
        return d


def _utc(ts: datetime) -> datetime:
    """Lance reports version times as naive UTC datetimes; a naive ``as_of`` is taken as UTC too."""
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def retained_versions(ds: lance.LanceDataset) -> list[tuple[int, datetime]]:
    """``(version, UTC time)`` of every retained version of ``__manifest`` (``ds``), oldest first."""
    return sorted((int(v["version"]), _utc(v["timestamp"])) for v in ds.versions())


def history(manifest: Manifest, limit: int | None = None) -> list[HistoryEntry]:
    """The retained ``__manifest`` versions, newest first (at most ``limit``)."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InvalidArgumentError(f"limit must be a positive integer, got {limit!r}")
    ds = manifest.dataset()
    out = []
    for version, ts in retained_versions(ds)[::-1][:limit]:
        try:
            tx = ds.read_transaction(version)
        except (OSError, ValueError):  # a transaction file another tool removed: the version stays listed
            tx = None
        props = dict(tx.transaction_properties or {}) if tx is not None else {}
        if OPERATION_PROPERTY in props:
            op = props[OPERATION_PROPERTY]
        elif version == 1:
            op = "create"
        elif tx is not None:  # commits lancepart did not label: Lance's operation, named for what it is here
            name = type(tx.operation).__name__
            op = _LANCE_OPERATIONS.get(name, name.lower())
        else:
            op = "unknown"
        out.append(HistoryEntry(version=version, timestamp=ts, operation=op, batch_id=props.get(BATCH_ID_PROPERTY),
                                rows_written=_int(props.get(ROWS_PROPERTY)),
                                partitions_touched=_int(props.get(PARTITIONS_PROPERTY)),
                                rows_removed=_int(props.get(ROWS_REMOVED_PROPERTY)), properties=props))
    return out


def snapshot_at(manifest: Manifest, *, version: int | None = None, as_of: datetime | None = None
                ) -> ManifestSnapshot:
    """The ``__manifest`` snapshot at ``version``, or the latest one committed at or before
    ``as_of``. A version beyond the latest is :class:`InvalidArgumentError`; one a cleanup
    removed (or a time before the oldest retained version) is :class:`SnapshotExpiredError`
    saying how far back time travel reaches."""
    if (version is None) == (as_of is None):
        raise InvalidArgumentError("give exactly one of version= and as_of=")
    if isinstance(version, int) and not isinstance(version, bool) and version >= 1:
        try:  # a version that is there needs no listing of every retained one (one read per version)
            return _partitioned(manifest, manifest.snapshot(version), f"version={version}")
        except NamespaceNotFoundError:  # beyond the latest, or removed by a cleanup: the checks below say which
            pass
    retained = retained_versions(manifest.dataset())
    oldest, newest = retained[0], retained[-1]
    reach = (f"time travel reaches back to __manifest version {oldest[0]} ({oldest[1].isoformat()}); "
             f"cleanup removed older versions")
    if version is not None:
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InvalidArgumentError(f"version must be a positive integer, got {version!r}")
        if version > newest[0]:
            raise InvalidArgumentError(f"version={version}: the latest __manifest version of {manifest.root} is "
                                       f"{newest[0]}")
        if version not in {v for v, _ in retained}:
            raise SnapshotExpiredError(f"version={version} of {manifest.root} is gone: {reach}")
        return _partitioned(manifest, manifest.snapshot(version), f"version={version}")
    if not isinstance(as_of, datetime):
        raise InvalidArgumentError(f"as_of must be a datetime, got {type(as_of).__name__}")
    at = _utc(as_of)
    before = [v for v, ts in retained if ts <= at]
    if not before:
        raise SnapshotExpiredError(f"as_of={at.isoformat()} of {manifest.root} is before every retained "
                                   f"version: {reach}")
    return _partitioned(manifest, manifest.snapshot(before[-1]), f"as_of={at.isoformat()}")


def _partitioned(manifest: Manifest, snap: ManifestSnapshot, asked: str) -> ManifestSnapshot:
    """``snap``, unless it is one of the versions that created ``__manifest`` before the namespace's
    schema and specs were recorded in it (its first versions)."""
    if not any(k.startswith(SPEC_KEY_PREFIX) for k in snap.metadata):
        raise InvalidArgumentError(f"{asked}: __manifest version {snap.version} of {manifest.root} precedes the "
                                   f"namespace's schema and partition spec (it is one of the versions that "
                                   f"created it); choose a later version")
    return snap
