"""V1 tables beside a partitioned namespace: listing, configuration properties, migration to V2.

Spec: spec/directory-namespace.md "V1: Directory Listing" (table directories ``<name>.lance``,
"Table Existence", "Marker Files"), "Compatibility Mode"; spec/directory-namespace-configuration.md
"Configuration", "Compatibility Mode", "Migration from V1 to V2";
spec/directory-namespace-v1-original.md "Table Existence"; docs/design.md §5.

A partitioned namespace is a V2 namespace: its partitions live in child namespaces ``v<N>``,
where the spec allows V2 behaviour only (compatibility mode, rule 5), so lancepart never
looks for partitions by listing directories. V1 tables of the same root are root-level
tables; they are listed here, and :func:`migrate` registers them in ``__manifest``.

The configuration properties (directory-namespace-configuration.md "Configuration"), as
:class:`CompatConfig` reads them:

=======================  ====================================================================
``root``                 applies: URI, absolute or relative path (against the cwd).
``storage.*``            applies: passed to Lance's object store without the prefix.
``manifest_enabled``     applies: a partitioned namespace exists only in ``__manifest``, so
                         ``false`` cannot open one (:func:`open_namespace` raises
                         :class:`ConfigError`); :func:`list_root_tables` then lists V1
                         directories only, as a V1-only namespace would.
``dir_listing_enabled``  applies to root-level listing (:func:`list_root_tables`): ``true``
                         merges the V1 directories with the manifest's root-level tables,
                         manifest entries taking precedence (deduplicated by name and by
                         location); ``false`` lists manifest tables only. It has no effect on
                         partitions (always V2, rule 5).
=======================  ====================================================================

What does not apply to lancepart, which writes partition tables only: creating a root-level
table with V1 ``<name>.lance`` naming (rule 3) and renaming a root-level table to the V2 path
(rule 4). Opening a namespace (:meth:`PartitionedNamespace.open`) reads ``__manifest`` only,
so V1 tables beside it change nothing there; root-level rows in ``__manifest`` (migrated V1
tables) are not partitions: ``ns.partitions()``, pruning, writes and cleanup leave them alone.

Markers: a directory with ``.lance-deregistered`` is not a table (excluded from listings, not
migrated); one with ``.lance-reserved`` and no table version yet is reserved, not created
(excluded unless ``include_reserved=True``; Lance's own ``DirectoryNamespace`` does list
declared tables). A ``<name>.lance`` prefix with no file is no table (V1 "Table Existence").

>>> import lance
>>> _ = lance.write_dataset(pa.table({"id": [1, 2]}), f"{ns.root}/clicks.lance")   # a V1 table beside ns
>>> list_root_tables({"root": ns.root}), list_root_tables({"root": ns.root, "dir_listing_enabled": "false"})
(['clicks'], [])
>>> migrate(ns.root)["registered"]
{'clicks': 1}
>>> list_root_tables({"root": ns.root, "dir_listing_enabled": "false"})
['clicks']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lance.file import LanceFileSession

from lancepart.errors import ConfigError, CorruptNamespaceError
from lancepart.model import ids as _ids
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import (
    Manifest,
    ManifestChanges,
    ManifestSnapshot,
    join_uri,
    normalize_root,
    rows_from_records,
)
from lancepart.write.publish import CommitProducer, TableChange

V1_SUFFIX = ".lance"
RESERVED_MARKER = ".lance-reserved"
DEREGISTERED_MARKER = ".lance-deregistered"
STORAGE_PREFIX = "storage."
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class CompatConfig:
    """The directory namespace configuration properties that apply to lancepart.

    >>> CompatConfig.from_properties({"root": "/data/lake", "dir_listing_enabled": "false"}).dir_listing_enabled
    False
    """

    root: str
    manifest_enabled: bool = True
    dir_listing_enabled: bool = True
    storage_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> CompatConfig:
        """Read ``root``, ``manifest_enabled``, ``dir_listing_enabled`` and ``storage.*``;
        :class:`ConfigError` naming any other property or a value that is not ``true``/``false``."""
        if "root" not in properties or not str(properties["root"]).strip():
            raise ConfigError("directory namespace property 'root' is required")
        flags = {}
        for key in ("manifest_enabled", "dir_listing_enabled"):
            raw = properties.get(key, "true")
            value = _BOOLEANS.get(str(raw).strip().lower()) if not isinstance(raw, bool) else raw
            if value is None:
                raise ConfigError(f"directory namespace property {key!r} must be 'true' or 'false', got {raw!r}")
            flags[key] = value
        unknown = sorted(k for k in properties if k not in ("root", *flags) and not k.startswith(STORAGE_PREFIX))
        if unknown:
            raise ConfigError(f"unknown directory namespace properties {unknown}: expected root, manifest_enabled, "
                              f"dir_listing_enabled and storage.*")
        storage = {k[len(STORAGE_PREFIX):]: str(v) for k, v in properties.items() if k.startswith(STORAGE_PREFIX)}
        return cls(root=normalize_root(str(properties["root"])), storage_options=storage, **flags)


def open_namespace(properties: Mapping[str, str]):
    """Open the partitioned namespace the properties describe.

    >>> open_namespace({"root": ns.root}).current_spec.id
    1

    On S3: ``open_namespace({"root": "s3://bucket/lake", "storage.region": "us-west-2"})``.
    """
    from lancepart.namespace import PartitionedNamespace

    cfg = CompatConfig.from_properties(properties)
    if not cfg.manifest_enabled:
        raise ConfigError(f"manifest_enabled=false: {cfg.root} can only be a V1 directory listing, and a "
                          f"partitioned namespace lives in __manifest")
    return PartitionedNamespace.open(cfg.root, storage_options=cfg.storage_options or None)


# --------------------------------------------------------------------------- V1 listing

@dataclass(frozen=True)
class V1Table:
    """One ``<name>.lance`` directory of a root and its V1 state."""

    name: str
    location: str
    state: str  # "table", "reserved" or "deregistered"


def _so(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None


def _local(root: str) -> str | None:
    if "://" not in root:
        return root
    return root[len("file://"):] if root.startswith("file://") else None


def v1_tables(root: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None) -> list[V1Table]:
    """Every ``<name>.lance`` table directory of ``root`` that exists (holds at least one file),
    with its state from the marker files, sorted by name.

    >>> import lance, os
    >>> _ = lance.write_dataset(pa.table({"id": [1, 2]}), f"{tmp}/clicks.lance")
    >>> os.makedirs(f"{tmp}/users.lance"); open(f"{tmp}/users.lance/.lance-reserved", "w").close()
    >>> [(t.name, t.state) for t in v1_tables(tmp)]
    [('clicks', 'table'), ('users', 'reserved')]
    """
    root_s = normalize_root(root)
    local = _local(root_s)
    out = []
    if local is not None:
        if not os.path.isdir(local):
            return []
        for entry in sorted(os.scandir(local), key=lambda e: e.name):
            if not entry.name.endswith(V1_SUFFIX) or not entry.is_dir() or len(entry.name) == len(V1_SUFFIX):
                continue
            files = [os.path.relpath(os.path.join(d, n), entry.path) for d, _, ns in os.walk(entry.path) for n in ns]
            if files:
                out.append(_state(entry.name, files))
        return out
    session = LanceFileSession(root_s, storage_options=_so(storage_options))
    for prefix in sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in session.list_with_delimiter().common_prefixes):
        if prefix.endswith(V1_SUFFIX) and len(prefix) > len(V1_SUFFIX):
            top = session.list_with_delimiter(prefix)
            names = [o.rsplit("/", 1)[-1] for o in top.objects]
            names += [p.rstrip("/").rsplit("/", 1)[-1] + "/" for p in top.common_prefixes]
            versions = [] if "_versions/" not in names else session.list(prefix + "/_versions")
            out.append(_state(prefix, names + [v[len(prefix) + 1:] for v in versions]))
    return out


def _state(location: str, files: list[str]) -> V1Table:
    has_version = any(f.startswith("_versions/") and f.endswith(".manifest") for f in files)
    if DEREGISTERED_MARKER in files:
        state = "deregistered"
    elif RESERVED_MARKER in files and not has_version:
        state = "reserved"
    else:
        state = "table"
    return V1Table(name=location[: -len(V1_SUFFIX)], location=location, state=state)


def list_v1_tables(root: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None, *,
                   include_reserved: bool = False) -> list[str]:
    """Names of the V1 tables of ``root`` (``<name>.lance`` directories), without deregistered
    ones and, unless ``include_reserved``, without reserved ones that have no version yet.

    >>> import lance, os
    >>> _ = lance.write_dataset(pa.table({"id": [1, 2]}), f"{tmp}/clicks.lance")
    >>> os.makedirs(f"{tmp}/users.lance"); open(f"{tmp}/users.lance/.lance-reserved", "w").close()
    >>> list_v1_tables(tmp), list_v1_tables(tmp, include_reserved=True)
    (['clicks'], ['clicks', 'users'])
    """
    wanted = {"table", "reserved"} if include_reserved else {"table"}
    return [t.name for t in v1_tables(root, storage_options) if t.state in wanted]


def _root_table_rows(snap: ManifestSnapshot) -> dict[str, str]:
    """Root-level tables of ``__manifest`` (object_id without a namespace): name -> location."""
    tables = snap.tables()
    return {oid: loc for oid, loc in zip(tables.column("object_id").to_pylist(),
                                         tables.column("location").to_pylist(), strict=True)
            if _ids.DELIMITER not in oid}


def list_root_tables(properties: Mapping[str, str]) -> list[str]:
    """Root-level tables as the configured directory namespace lists them (compatibility mode:
    manifest tables merged with V1 directories, manifest first, deduplicated by name and
    location; either side switched off by ``manifest_enabled`` / ``dir_listing_enabled``).

    >>> import lance
    >>> _ = lance.write_dataset(pa.table({"id": [1, 2]}), f"{ns.root}/clicks.lance")   # not registered yet
    >>> list_root_tables({"root": ns.root}), list_root_tables({"root": ns.root, "dir_listing_enabled": "false"})
    (['clicks'], [])
    """
    cfg = CompatConfig.from_properties(properties)
    names: dict[str, str] = {}
    if cfg.manifest_enabled:
        manifest = Manifest(cfg.root, cfg.storage_options or None)
        if manifest.exists():
            names.update(_root_table_rows(manifest.snapshot()))
    if cfg.dir_listing_enabled:
        locations = set(names.values())
        for t in v1_tables(cfg.root, cfg.storage_options or None):
            if t.state == "table" and t.name not in names and t.location not in locations:
                names[t.name] = t.location
    return sorted(names)


# --------------------------------------------------------------------------- migration

class _Migration(CommitProducer):
    """:func:`migrate` through the one commit producer: a registered table whose latest version
    moved past its ``read_version`` is a table change (its version made elsewhere, by the V1
    writer), an unregistered one a row added; both worked out on each attempt's snapshot."""

    def __init__(self, manifest: Manifest, found: Mapping[str, tuple[str, int]], skipped: Mapping[str, str], *,
                 dry_run: bool, max_retries: int) -> None:
        super().__init__(manifest, what="V1 to V2 migration", max_retries=max_retries, check_constraints=False)
        self.found, self.skipped_tables, self.dry_run = found, skipped, dry_run
        self.out: dict[str, Any] = {}
        self.new: list[dict[str, Any]] = []
        self.snapshot_version = -1

    def changes(self, snap: ManifestSnapshot) -> list[TableChange]:
        index = snap.row_index()
        out: dict[str, Any] = {"registered": {}, "refreshed": {}, "already_registered": [],
                               "skipped": dict(self.skipped_tables)}
        rows = snap.rows
        read_version, location = rows.column("read_version").to_pylist(), rows.column("location").to_pylist()
        kind = rows.column("object_type").to_pylist()
        branch, tag = rows.column("read_branch").to_pylist(), rows.column("read_tag").to_pylist()
        taken = {loc: oid for oid, loc in _root_table_rows(snap).items()}
        self.new, changes = [], []
        for name, (loc, version) in sorted(self.found.items()):
            i = index.get(name)
            if i is None:
                if loc in taken:
                    out["skipped"][name] = f"{loc} is already registered as {taken[loc]!r}"
                    continue
                self.new.append({"object_id": name, "object_type": "table", "location": loc,
                                 "read_version": version})
                out["registered"][name] = version
            elif kind[i] != "table" or location[i] != loc:
                out["skipped"][name] = (f"__manifest already has {kind[i]} {name!r}"
                                        + (f" at {location[i]!r}" if kind[i] == "table" else ""))
            else:
                out["already_registered"].append(name)
                if (read_version[i] is not None and branch[i] is None and tag[i] is None
                        and version > read_version[i]):
                    out["refreshed"][name] = [read_version[i], version]
                    changes.append(TableChange(name, loc, commit=lambda published, where, v=version: v))
        self.out = out
        return [] if self.dry_run else changes

    def plan(self, snap: ManifestSnapshot) -> bool:
        super().plan(snap)
        return bool(self.by_oid) or bool(self.new and not self.dry_run)

    def row_changes(self, snap: ManifestSnapshot) -> ManifestChanges | None:
        if not self.new or self.dry_run:
            return None
        return ManifestChanges(upserts=rows_from_records(snap.rows.schema, self.new))

    def publish_report(self) -> dict[str, Any]:
        pub = self.publish()
        self.snapshot_version = pub.snapshot.version
        return self.out


def migrate(root: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None,
            dry_run: bool = False, *, max_retries: int = 20) -> dict[str, Any]:
    """Register the V1 tables of ``root`` in its ``__manifest`` (spec "Migration from V1 to V2"):
    one row per table, ``object_type='table'``, ``location`` its existing ``<name>.lance``
    directory and ``read_version`` its current version, so V1 writes made later stay invisible
    to readers of ``__manifest`` until ``migrate`` runs again, which then moves ``read_version``
    of those rows forward. Everything in ONE ``__manifest`` commit; nothing to do, nothing
    committed (a second run registers nothing). ``dry_run`` commits nothing and reports what
    would be done.

    Raises :class:`NamespaceNotFoundError` when ``root`` has no ``__manifest`` (create the
    namespace first). Returns ``{"registered": {name: version}, "refreshed": {name: [old, new]},
    "already_registered": [names], "skipped": {name: reason}, "manifest_version": int,
    "dry_run": bool}``. Deregistered and reserved tables are not migrated; a table whose name
    holds ``$`` or is already a namespace id, or that Lance cannot open, is skipped with the
    reason.

    >>> import lance
    >>> _ = lance.write_dataset(pa.table({"id": [1, 2]}), f"{ns.root}/clicks.lance")
    >>> migrate(ns.root, dry_run=True)["registered"]            # reports, commits nothing
    {'clicks': 1}
    >>> migrate(ns.root)["registered"]
    {'clicks': 1}
    >>> migrate(ns.root)["already_registered"]                  # a second run registers nothing
    ['clicks']
    """
    root_s = normalize_root(root)
    so = _so(storage_options)
    manifest = Manifest(root_s, so)
    if "read_version" not in manifest.dataset().schema.names:
        raise CorruptNamespaceError(f"{manifest.uri} has no read_version column: migrate needs a __manifest "
                                    f"lancepart created (PartitionedNamespace.create)")
    found: dict[str, tuple[str, int]] = {}
    skipped: dict[str, str] = {}
    for t in v1_tables(root_s, so):
        if t.state != "table":
            skipped[t.name] = f"{t.state} (marker file in {t.location})"
            continue
        if _ids.DELIMITER in t.name:
            skipped[t.name] = f"the name holds the namespace delimiter {_ids.DELIMITER!r}"
            continue
        _ids.check_location(t.location, t.name, root_s)
        try:
            found[t.name] = (t.location, open_table(join_uri(root_s, t.location), storage_options=so).version)
        except (OSError, ValueError) as e:
            skipped[t.name] = f"not a readable Lance table: {type(e).__name__}: {str(e)[:200]}"

    producer = _Migration(manifest, found, skipped, dry_run=dry_run, max_retries=max_retries)
    out = producer.publish_report()
    out["manifest_version"] = producer.snapshot_version
    out["dry_run"] = dry_run
    return out
