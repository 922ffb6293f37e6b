"""Restore a ``__manifest`` that a foreign writer stripped of lancepart's columns.

Spec: spec/directory-namespace.md "V2: Manifest" (the five standard columns) and
spec/partitioning.md "Manifest Table Schema" / "Transaction" (``read_version``, ``read_branch``,
``read_tag`` and one ``partition_field_<field_id>`` column per partition field).

A tool that knows only the directory namespace (``lance.namespace.DirectoryNamespace`` before
lancepart set its writer flag, or any other) rewrites ``__manifest`` with the five standard
columns. Its earlier versions still hold the rest. :func:`repair` finds the newest version that
has every column the namespace needs, takes from it the lancepart columns of each row that is
still there (matched on ``object_id``), keeps the rows the foreign writer added (NULL in those
columns: a table it declared reads as empty until a writer creates it) and drops the rows it
removed, keeps the latest table metadata, and publishes the result as one ``__manifest`` commit
that fails rather than overwrite a concurrent one. docs/foreign-writers.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import CommitConflictError, CorruptNamespaceError
from lancepart.storage.manifest import (
    NAMESPACE_WRITER_FLAGS_KEY,
    STANDARD_FIELDS,
    Manifest,
    ManifestConflict,
    ManifestSnapshot,
    backoff,
    check_columns,
    missing_columns,
    normalize_root,
    writer_flags_to_set,
)

log = logging.getLogger("lancepart.repair")


@dataclass(frozen=True)
class RepairReport:
    """What :func:`repair` did (or, with ``dry_run``, would do).

    ``needed`` is False when ``__manifest`` has every column it needs. ``from_version`` is the
    ``__manifest`` version the lancepart columns were taken from, ``current_version`` the
    stripped one, ``new_version`` the restored commit (None in a dry run or when nothing was
    needed). ``rows_restored`` counts rows that got their values back, ``rows_carried_over``
    names the rows the foreign writer added (kept, NULL in the restored columns) and
    ``rows_removed`` those it removed (left out). ``writer_flag_added``: the flag that makes
    Lance's DirectoryNamespace refuse to rewrite ``__manifest`` was (or would be) set.
    """

    needed: bool
    dry_run: bool
    current_version: int
    from_version: int | None = None
    new_version: int | None = None
    columns_restored: tuple[str, ...] = ()
    rows_restored: int = 0
    rows_carried_over: tuple[str, ...] = ()
    rows_removed: tuple[str, ...] = ()
    writer_flag_added: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ensure_intact(root: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Raise :class:`CorruptNamespaceError` if the latest ``__manifest`` at ``root`` lacks columns
    a partitioned namespace needs. Cleanup calls it first: cleaning a stripped namespace would
    delete the ``__manifest`` versions a repair restores from."""
    manifest = Manifest(normalize_root(root), storage_options)
    ds = manifest.dataset()
    check_columns(ds.schema, ds.metadata, manifest.uri, ds.version)


def _find_source(manifest: Manifest, current: lance.LanceDataset, metadata: Mapping[str, str]
                 ) -> tuple[int, ManifestSnapshot]:
    """The newest earlier ``__manifest`` version with every column the namespace needs."""
    unreadable = []
    for v in sorted((int(x["version"]) for x in current.versions()), reverse=True):
        if v >= current.version:
            continue
        try:
            old = manifest.dataset(v)
        except (CorruptNamespaceError, OSError, ValueError) as e:
            unreadable.append(f"v{v} ({type(e).__name__})")
            continue
        merged = {**old.metadata, **metadata}
        if missing_columns(old.schema, merged) or not any(k.startswith("partition_spec_v") for k in old.metadata):
            continue
        try:
            return v, manifest.snapshot(v, check=False)
        except CorruptNamespaceError as e:
            unreadable.append(f"v{v} ({e})")
    raise CorruptNamespaceError(
        f"__manifest at {manifest.uri}: no earlier version still has the columns "
        f"{', '.join(missing_columns(current.schema, metadata))} (versions {current.version - 1} and older were "
        f"removed or unreadable{': ' + ', '.join(unreadable[:5]) if unreadable else ''}); it cannot be restored "
        f"from history")


def _restored_rows(current: ManifestSnapshot, source: ManifestSnapshot) -> tuple[pa.Table, dict[str, Any]]:
    """``current``'s rows with ``source``'s extra columns, matched on ``object_id`` (vectorised)."""
    cur, src = current.rows, source.rows
    # the columns of the restored table: those of the current version, then those only the source has
    extra = [f for f in src.schema if f.name not in cur.schema.names]
    pos = pc.index_in(cur.column("object_id"), value_set=src.column("object_id"))
    cols = list(cur.columns)
    fields = list(cur.schema)
    for f in extra:
        cols.append(src.column(f.name).take(pos))
        fields.append(f)
    rows = pa.Table.from_arrays(cols, schema=pa.schema(fields))
    matched = pc.is_valid(pos)
    carried = cur.column("object_id").filter(pc.invert(matched)).to_pylist()
    kept = pc.is_in(src.column("object_id"), value_set=cur.column("object_id"))
    removed = src.column("object_id").filter(pc.invert(kept)).to_pylist()
    return rows, {"columns": [f.name for f in extra], "restored": int(pc.sum(matched).as_py() or 0),
                  "carried": carried, "removed": removed}


def repair(manifest: Manifest, *, dry_run: bool = False, max_retries: int = 20,
           properties: Mapping[str, str] | None = None) -> RepairReport:
    """Restore the lancepart columns of ``__manifest`` from its history (module docstring) and
    make sure Lance's DirectoryNamespace refuses to rewrite it again."""
    for attempt in range(max_retries + 1):
        ds = manifest.dataset()
        metadata = dict(ds.metadata)
        flags = writer_flags_to_set(metadata)
        current = manifest.snapshot(ds.version, check=False)
        missing = missing_columns(ds.schema, metadata)
        if not missing and any(k.startswith("partition_spec_v") for k in metadata):
            if not dry_run:  # also finishes a repair killed after its commit
                if flags is not None:
                    ds.update_metadata({NAMESPACE_WRITER_FLAGS_KEY: str(flags)})
                manifest.ensure_indexes()
            return RepairReport(needed=False, dry_run=dry_run, current_version=ds.version,
                                writer_flag_added=flags is not None)
        from_version, source = _find_source(manifest, ds, metadata)
        rows, what = _restored_rows(current, source)
        std = {f.name: f.type for f in STANDARD_FIELDS}
        odd = [f"{n}: {rows.schema.field(n).type}" for n in std if n in rows.schema.names
               and rows.schema.field(n).type != std[n]]
        if odd:
            raise CorruptNamespaceError(f"__manifest at {manifest.uri} version {ds.version}: standard columns of "
                                        f"unexpected types ({', '.join(odd)}); not repairing it automatically")
        # the latest table metadata, plus any root property the foreign writer dropped
        lost = {k: v for k, v in source.metadata.items() if k not in metadata}
        report = dict(needed=True, dry_run=dry_run, current_version=ds.version, from_version=from_version,
                      columns_restored=tuple(what["columns"]), rows_restored=what["restored"],
                      rows_carried_over=tuple(what["carried"]), rows_removed=tuple(what["removed"]),
                      writer_flag_added=flags is not None, details={"metadata_restored": sorted(lost)})
        if dry_run:
            return RepairReport(**report)
        try:
            new = manifest.restore(current, rows, properties)
        except ManifestConflict:
            backoff(attempt)
            continue
        updates = dict(lost)
        if flags is not None:
            updates[NAMESPACE_WRITER_FLAGS_KEY] = str(flags)
        if updates:
            manifest.dataset().update_metadata(updates)
        manifest.ensure_indexes()  # an overwrite starts without the manifest indexes
        log.warning("__manifest at %s restored from version %d as version %d: columns %s, %d rows restored, "
                    "%d carried over, %d removed", manifest.uri, from_version, new.version,
                    ", ".join(what["columns"]), what["restored"], len(what["carried"]), len(what["removed"]))
        return RepairReport(**{**report, "new_version": new.version})
    raise CommitConflictError(f"repair of {manifest.uri}: {max_retries + 1} attempts conflicted with concurrent "
                              f"commits; nothing was published")


def repair_root(root: str, storage_options: Mapping[str, str] | None = None, *, dry_run: bool = False
                ) -> RepairReport:
    """:func:`repair` of the namespace at ``root``, which cannot be opened while it is stripped.

    >>> report = repair_root(ns.root, dry_run=True)     # an intact namespace: nothing to restore
    >>> report.needed, report.columns_restored
    (False, ())
    """
    return repair(Manifest(normalize_root(root), storage_options), dry_run=dry_run)
