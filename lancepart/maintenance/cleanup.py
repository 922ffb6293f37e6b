"""Remove old table versions and files nothing references; never what a snapshot pins.

Spec: spec/partitioning.md "Transaction" (``read_version`` / ``read_branch`` / ``read_tag``),
spec/storage-layout.md (what a table directory holds); DESIGN-NOTES §5, §8.

What goes, for a retention ``older_than`` (cut-off ``now - older_than``):

* **``__manifest`` versions** superseded before the cut-off (the next version is older than
  it), unless tagged; the latest always stays. The versions that stay are the *retained
  snapshots* of the namespace: every one of them stays fully readable.
* **Partition table versions** superseded before the cut-off, unless a retained snapshot pins
  them (``read_version``, the version of ``read_tag``) or a Lance tag or branch holds them;
  the latest always stays. Lance's own ``cleanup_old_versions(older_than=...)`` is *not*
  enough: it keeps the latest and tagged versions but would delete an older published
  ``read_version`` whenever a job committed versions beyond it and has not published yet
  (or died). So the removable versions are computed here and handed to Lance explicitly
  (``cleanup_old_versions(versions=[...])``), which then deletes the version manifests and
  every data, deletion, index and transaction file that only those versions referenced.
  Versions on branches are never touched (Lance keeps a branch's parent version itself).
* **Files no version references** (fragments of killed jobs, files of failed commits) in a
  table's ``data/``, ``_deletions/``, ``_transactions/`` and ``_indices/<uuid>/``, once their
  last modification is before the cut-off. Tables with branches are skipped (their branch
  manifests reference main's files and are not listed by ``tracked_files``).
* **Table directories ``__manifest`` does not reference**: only names lancepart makes for
  partition tables (``<8 hex>_v<N>$<id>...$dataset``: a Spark job's own directories of a job
  that died before reserving them, reservation losers' empty tables), and only when every
  file in them is older than the cut-off and no retained snapshot references them.
  ``__manifest``, V1 ``<name>.lance`` tables and anything else are never touched. Root-level
  tables registered in ``__manifest`` (for example migrated V1 tables,
  :mod:`lancepart.compat`) belong to whoever writes them: their versions are not cleaned.

"Superseded before the cut-off" rather than "created before the cut-off" (the rule of
Delta's VACUUM rather than of Lance's cleanup): a version a job opened as *latest* or a
snapshot a job read stays until ``older_than`` after it stopped being current, so a job that
runs for less than ``older_than`` never finds its base gone.

Races with live writers, and why they are safe when ``older_than`` exceeds the longest
write job (the default is 7 days):

1. *A writer publishes a newer ``read_version`` while cleanup runs.* The new version was
   committed by that writer during its run, so it is younger than the cut-off and not a
   candidate; besides, the latest ``__manifest`` is re-read right before each table is cleaned
   and its pins are added. The version it replaces stays too: the snapshot that pinned it was
   current until just now, so it is a retained snapshot.
2. *A writer still holds an older snapshot* (it planned on ``read_version`` 3 while another
   job published 4) and opens version 3 to rebase. Version 3 is pinned by that snapshot,
   which stays retained for ``older_than`` after it was superseded.
3. *A writer committed a table version and has not published it yet.* It is the latest
   version (kept), or it was superseded by a concurrent writer's commit less than
   ``older_than`` ago (kept).
4. *A writer has written fragments (or a Spark job a new table directory) but not committed
   them.* Their files are younger than the cut-off (kept). Before a table's unreferenced
   files are deleted, the versions committed since they were listed are read again.

What can go wrong with an ``older_than`` shorter than a running job (``timedelta(0)`` is for
a namespace no one writes to, for example in tests): that job's uncommitted fragments or new
table directories can be deleted, after which its commit publishes a version whose files are
missing; and a version it committed but has not published yet can be removed when a
concurrent job committed after it. A write that starts after cleanup finished is never
affected. A short ``older_than`` is therefore logged as a warning.

Object stores (``s3://`` ...): everything goes through Lance (``cleanup_old_versions``,
``all_files``, ``tracked_files``, ``LanceFileSession``); nothing calls ``os`` on a URI. One
thing cannot be done there: telling the age of an unreferenced directory that holds no Lance
version (a Spark job's directory with data files only), because Lance's file listing has no
modification time. Such directories are left and named in :attr:`CleanupStats.errors`.

>>> # cleanup("/data/events", timedelta(days=7), dry_run=True).bytes_removed
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.file import LanceFileSession

from lancepart.errors import InvalidArgumentError, LancepartError
from lancepart.ids import check_location
from lancepart.manifest import MANIFEST_DIR, Manifest, join_uri, normalize_root
from lancepart.parallel import map_threads
from lancepart.results import CleanupStats
from lancepart.write.batches import prepare_for_cleanup

log = logging.getLogger("lancepart.cleanup")

DEFAULT_OLDER_THAN = timedelta(days=7)
# Directory names lancepart gives partition tables: ids.table_location and spark.write.job_location.
PARTITION_DIR = re.compile(r"^[0-9a-f]{8}_v[0-9]+(\$[0-9a-z]{16})+\$dataset$")
PARTITION_TABLE_ID = re.compile(r"^v[0-9]+(\$[0-9a-z]{16})+\$dataset$")
# Table sub-directories whose files are collected when no version references them.
FILE_DIRS = ("data/", "_deletions/", "_transactions/", "_indices/")
_PIN_COLUMNS = ("read_version", "read_branch", "read_tag")
_WARN_BELOW = timedelta(hours=1)
_REFRESH_EVERY = 0.5  # seconds between two looks at the latest __manifest while tables are cleaned


@dataclass
class _Pins:
    """What the retained snapshots of ``__manifest`` pin in one table."""

    object_id: str
    versions: set[int] = field(default_factory=set)
    tags: set[str] = field(default_factory=set)
    branches: set[str] = field(default_factory=set)


@dataclass
class _Tally:
    versions: int = 0
    manifest_versions: int = 0
    files: int = 0
    bytes: int = 0
    orphan_files: int = 0
    orphan_dirs: int = 0
    tables: int = 0
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, other: _Tally) -> None:
        for name in ("versions", "manifest_versions", "files", "bytes", "orphan_files", "orphan_dirs", "tables"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.removed.extend(other.removed)
        self.errors.extend(other.errors)


def _epoch(version: Mapping[str, Any]) -> float:
    # pylance gives a naive local datetime (datetime.fromtimestamp); .timestamp() undoes it exactly
    return version["timestamp"].timestamp()


def _removable(versions: Sequence[Mapping[str, Any]], cutoff: float, keep: Iterable[int]) -> list[int]:
    """Versions superseded before ``cutoff`` (the next version is older), minus ``keep``; never the latest."""
    ordered = sorted((int(v["version"]), _epoch(v)) for v in versions)
    keep = set(keep)
    return [v for (v, _), (_, next_ts) in itertools.pairwise(ordered) if next_ts < cutoff and v not in keep]


def _tag_versions(ds: lance.LanceDataset) -> dict[str, int]:
    return {name: int(t["version"]) for name, t in ds.tags.list().items() if t.get("version") is not None}


def _rel(path: str, location: str) -> str:
    """A path Lance reports for a file of the table at ``location`` (a store key such as
    ``tmp/ns/<location>/data/x.lance``), relative to the table directory."""
    i = path.rfind(location + "/")
    return path[i + len(location) + 1:] if i >= 0 else path


def _is_collectable(rel: str) -> bool:
    return rel.startswith(FILE_DIRS)


def _index_dir(rel: str) -> str | None:
    parts = rel.split("/")
    return "/".join(parts[:2]) if parts[0] == "_indices" and len(parts) > 2 else None


def _referenced(tracked: pa.Table) -> tuple[set[str], set[str]]:
    """(referenced file paths, referenced ``_indices/<uuid>`` directories) of a ``tracked_files`` table."""
    paths = set(tracked.column("path").to_pylist())
    return paths, {d for p in paths if (d := _index_dir(p)) is not None}


def _unreferenced(files: pa.Table, tracked: pa.Table, cutoff: float, exclude: set[str]) -> pa.Table:
    """Rows of ``files`` (``all_files``) in a collectable directory, modified before ``cutoff``,
    that no row of ``tracked`` (``tracked_files``) references and that are not in ``exclude``."""
    if files.num_rows == 0:
        return files
    paths, index_dirs = _referenced(tracked)
    before = pc.less(files.column("last_modified"), pa.scalar(int(cutoff * 1e6), pa.timestamp("us", tz="UTC")))
    files = files.filter(before)
    keep = [(_is_collectable(p) and p not in paths and p not in exclude
             and (_index_dir(p) is None or _index_dir(p) not in index_dirs))
            for p in files.column("path").to_pylist()]  # per file name, not per data row
    return files.filter(pa.array(keep, pa.bool_()))


class _Run:
    """One cleanup pass over a namespace root."""

    def __init__(self, root: str, older_than: timedelta, dry_run: bool,
                 storage_options: Mapping[str, str] | None) -> None:
        self.root = root
        self.so = dict(storage_options) if storage_options else None
        self.dry_run = dry_run
        self.cutoff = time.time() - older_than.total_seconds()
        self.manifest = Manifest(root, self.so)
        self.local = "://" not in root or root.startswith("file://")
        self.pins: dict[str, _Pins] = {}  # location -> pins of every retained snapshot
        self.other_locations: set[str] = set()  # referenced tables that are not partition tables
        self.seen_manifest_versions: set[int] = set()
        self.manifest_ds: lance.LanceDataset | None = None
        self.manifest_removable: list[int] = []
        self.refreshed = 0.0  # monotonic time of the last look at the latest __manifest
        self.lock = threading.Lock()  # tables are cleaned on threads; the pins grow as __manifest moves

    # ------------------------------------------------------------------ what retained snapshots pin
    def _read_pins(self, versions: Iterable[int]) -> None:
        todo = sorted(set(versions) - self.seen_manifest_versions)
        cols = ["object_id", "location", *_PIN_COLUMNS]
        parts = []
        for v in todo:
            ds = self.manifest.dataset(v)
            rows = ds.to_table(columns=["object_type", *[c for c in cols if c in ds.schema.names]])
            rows = rows.filter(pc.equal(rows.column("object_type"), "table"))
            for c in cols:  # a plain DirectoryNamespace manifest has no read_* columns: nothing pinned
                if c not in rows.column_names:
                    rows = rows.append_column(c, pa.nulls(rows.num_rows, pa.uint64() if c == "read_version" else
                                                          pa.utf8()))
            parts.append(rows.select(cols).cast(pa.schema([(c, pa.uint64() if c == "read_version" else pa.utf8())
                                                           for c in cols])))
        if parts:
            # the same pins repeat in every version: one row per distinct (table, pin) from here on
            distinct = pa.concat_tables(parts).group_by(cols, use_threads=False).aggregate([])
            for r in distinct.to_pylist():
                oid, loc = r["object_id"], r["location"]
                check_location(loc, oid, self.root)
                if not PARTITION_TABLE_ID.match(oid):
                    self.other_locations.add(loc)
                    continue
                p = self.pins.setdefault(loc, _Pins(oid))
                if r["read_tag"] is not None:
                    p.tags.add(r["read_tag"])
                elif r["read_branch"] is not None:
                    p.branches.add(r["read_branch"])
                elif r["read_version"] is not None:  # all NULL reads the latest, which always stays
                    p.versions.add(int(r["read_version"]))
        self.seen_manifest_versions.update(todo)

    def _refresh_pins(self, force: bool = False) -> None:
        """Add the pins of ``__manifest`` versions committed since we last looked (at most every
        ``_REFRESH_EVERY`` seconds unless ``force``: one look per table would serialise a cleanup of
        10^4 tables on the object store's latency)."""
        with self.lock:
            if not force and time.monotonic() - self.refreshed < _REFRESH_EVERY:
                return
            self.refreshed = time.monotonic()
            latest = self.manifest.dataset()
            newer = [v for v in range(max(self.seen_manifest_versions) + 1, latest.version + 1)]
            if newer:
                self._read_pins(newer)

    def plan_manifest(self) -> None:
        ds = self.manifest.dataset()
        self.manifest_ds = ds
        versions = ds.versions()
        self.manifest_removable = _removable(versions, self.cutoff, _tag_versions(ds).values())
        gone = set(self.manifest_removable)
        self._read_pins(int(v["version"]) for v in versions if int(v["version"]) not in gone)

    # ------------------------------------------------------------------ one table
    def _lance_cleanup(self, ds: lance.LanceDataset, location: str, removable: list[int],
                       tally: _Tally) -> set[str]:
        """Remove ``removable`` versions (or explain it, in a dry run); the files it removes."""
        if not removable:
            return set()
        if self.dry_run:
            ex = ds.explain_cleanup_old_versions(versions=removable, error_if_tagged_old_versions=False,
                                                 include_files=True, max_files=1 << 40)
            stats, gone = ex.stats, {_rel(c.path, location) for c in ex.candidate_files}
        else:
            stats, gone = ds.cleanup_old_versions(versions=removable, error_if_tagged_old_versions=False), set()
            if stats.failed_deletes:
                tally.errors.append(f"{location}: {stats.failed_deletes} files could not be deleted; "
                                    f"the next cleanup retries them")
        tally.versions += stats.old_versions
        tally.files += (stats.old_versions + stats.data_files_removed + stats.transaction_files_removed
                        + stats.index_files_removed + stats.deletion_files_removed)
        tally.bytes += stats.bytes_removed
        tally.removed.extend(f"{location}@v{v}" for v in removable)
        return gone

    def _collect_files(self, uri: str, location: str, ds: lance.LanceDataset, removable: list[int],
                       gone: set[str], tally: _Tally) -> None:
        """Delete (or count) the files of a table that no version references."""
        if ds.branches.list():
            return  # branch manifests reference main's files; tracked_files does not list them
        if self.dry_run:
            tracked = ds.tracked_files().read_all()
            if removable:  # as if the versions were gone already
                mask = pc.invert(pc.is_in(tracked.column("version"), pa.array(removable, pa.int64())))
                tracked = tracked.filter(mask)
            files = ds.all_files().read_all()
        else:
            ds = lance.dataset(uri, storage_options=self.so)
            seen = ds.version
            files = ds.all_files().read_all()
            tracked = ds.tracked_files().read_all()
        orphans = _unreferenced(files, tracked, self.cutoff, gone)
        if orphans.num_rows and not self.dry_run:
            # versions committed since we listed may reference a file we took for an orphan
            late = lance.dataset(uri, storage_options=self.so).tracked_files(min_version=seen + 1).read_all()
            if late.num_rows:
                orphans = _unreferenced(orphans, late, self.cutoff, set())
            session = LanceFileSession(uri, storage_options=self.so)
            for path in orphans.column("path").to_pylist():
                try:
                    session.delete_file(path)
                except OSError as e:
                    if session.contains(path):
                        tally.errors.append(f"{location}/{path}: {e}")
                        orphans = orphans.filter(pc.not_equal(orphans.column("path"), path))
        tally.orphan_files += orphans.num_rows
        tally.files += orphans.num_rows
        tally.bytes += int(pc.sum(orphans.column("size_bytes")).as_py() or 0)
        tally.removed.extend(f"{location}/{p}" for p in orphans.column("path").to_pylist())

    def clean_table(self, location: str) -> _Tally:
        tally = _Tally(tables=1)
        uri = join_uri(self.root, location)
        try:
            ds = lance.dataset(uri, storage_options=self.so)
            tags = _tag_versions(ds)
            if not self.dry_run:
                self._refresh_pins()  # race 1 of the module docstring
            with self.lock:
                pins = self.pins[location]
                pinned_versions, pinned_tags = set(pins.versions), set(pins.tags)
            missing = pinned_tags - set(tags)
            if missing:
                tally.errors.append(f"{location} ({pins.object_id}): read_tag {sorted(missing)} does not exist; "
                                    f"left untouched")
                return tally
            keep = pinned_versions | {tags[t] for t in pinned_tags} | set(tags.values())
            removable = _removable(ds.versions(), self.cutoff, keep)
            gone = self._lance_cleanup(ds, location, removable, tally)
            self._collect_files(uri, location, ds, removable, gone, tally)
        except (OSError, ValueError, LancepartError) as e:
            tally.errors.append(f"{location} ({self.pins[location].object_id}): {type(e).__name__}: {e}")
        return tally

    def clean_manifest(self) -> _Tally:
        tally = _Tally()
        ds = self.manifest_ds
        assert ds is not None
        gone = self._lance_cleanup(ds, MANIFEST_DIR, self.manifest_removable, tally)
        tally.manifest_versions = tally.versions
        self._collect_files(self.manifest.uri, MANIFEST_DIR, ds, self.manifest_removable, gone, tally)
        return tally

    # ------------------------------------------------------------------ unreferenced directories
    def _directories(self) -> list[str]:
        if self.local:
            base = self.root[len("file://"):] if self.root.startswith("file://") else self.root
            return sorted(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False))
        listing = LanceFileSession(self.root, storage_options=self.so).list_with_delimiter()
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listing.common_prefixes)

    def _dir_files(self, name: str) -> tuple[list[tuple[str, int, float]] | None, str | None]:
        """``[(path, size, mtime)]`` of every file under the directory, or (None, why not)."""
        uri = join_uri(self.root, name)
        if self.local:
            base = uri[len("file://"):] if uri.startswith("file://") else uri
            out = []
            for d, _, names in os.walk(base):
                for n in names:
                    st = os.lstat(os.path.join(d, n))
                    out.append((os.path.relpath(os.path.join(d, n), base), st.st_size, st.st_mtime))
            return out, None
        try:
            files = lance.dataset(uri, storage_options=self.so).all_files().read_all()
        except (OSError, ValueError):
            return None, ("holds no Lance table version, and the object store listing has no modification "
                          "times: its age cannot be told; remove it by hand once no job can be writing it")
        mtimes = pc.divide(files.column("last_modified").cast(pa.int64()), 1e6).to_pylist()
        return list(zip(files.column("path").to_pylist(), files.column("size_bytes").to_pylist(), mtimes,
                        strict=True)), None

    def _remove_dir(self, name: str, files: Sequence[tuple[str, int, float]]) -> None:
        uri = join_uri(self.root, name)
        if self.local:
            shutil.rmtree(uri[len("file://"):] if uri.startswith("file://") else uri)
            return
        session = LanceFileSession(uri, storage_options=self.so)
        for path in session.list():
            session.delete_file(path[len(name) + 1:] if path.startswith(name + "/") else path)

    def collect_directories(self) -> _Tally:
        tally = _Tally()
        referenced = set(self.pins) | self.other_locations
        for name in self._directories():
            if name == MANIFEST_DIR or name in referenced or not PARTITION_DIR.match(name):
                continue
            files, why = self._dir_files(name)
            if files is None:
                tally.errors.append(f"{join_uri(self.root, name)}: not referenced by __manifest but {why}")
                continue
            if any(mtime >= self.cutoff for _, _, mtime in files):
                continue  # a job may still be writing it
            if not self.dry_run:
                self._refresh_pins(force=True)  # a job may have reserved it since
                if name in self.pins or name in self.other_locations:
                    continue
                try:
                    self._remove_dir(name, files)
                except OSError as e:
                    tally.errors.append(f"{join_uri(self.root, name)}: {e}")
                    continue
            tally.orphan_dirs += 1
            tally.files += len(files)
            tally.bytes += sum(size for _, size, _ in files)
            tally.removed.append(name + "/")
        return tally


def cleanup(
    root: str | os.PathLike[str],
    older_than: timedelta = DEFAULT_OLDER_THAN,
    *,
    dry_run: bool = False,
    storage_options: Mapping[str, str] | None = None,
    max_workers: int = 8,
) -> CleanupStats:
    """Remove what no retained snapshot of the namespace at ``root`` needs (see the module
    docstring for the rules): partition table versions and ``__manifest`` versions superseded
    more than ``older_than`` ago, files no version references, and unreferenced partition table
    directories, all older than ``older_than``. Never anything a ``read_version``,
    ``read_tag`` or ``read_branch`` of a retained ``__manifest`` version pins.

    ``dry_run=True`` removes nothing and reports what would go (:attr:`CleanupStats.removed`)
    with the same counts and bytes. Failures on single tables or files are reported in
    :attr:`CleanupStats.errors`; the rest goes on.

    >>> # cleanup("/data/events", timedelta(days=7)).bytes_removed
    """
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise InvalidArgumentError(f"older_than must be a non-negative datetime.timedelta, got {older_than!r}")
    root_s = normalize_root(root)
    if older_than < _WARN_BELOW and not dry_run:
        log.warning("cleanup of %s with older_than=%s: files and versions of write jobs running longer than that "
                    "can be removed (see lancepart.maintenance.cleanup)", root_s, older_than)
    started = time.monotonic()
    run = _Run(root_s, older_than, dry_run, storage_options)
    run.plan_manifest()
    total = _Tally()
    prepare_for_cleanup(run.manifest, dry_run=dry_run)  # batch ids of the versions about to go: into the index
    # __manifest first: a cleanup that dies half way then leaves table versions no snapshot
    # needs (the next run takes them), never a retained snapshot whose table versions are gone
    total.add(run.clean_manifest())
    for t in map_threads(run.clean_table, sorted(run.pins), max_workers=max_workers):
        total.add(t)
    total.add(run.collect_directories())
    stats = CleanupStats(
        versions_removed=total.versions, files_removed=total.files, bytes_removed=total.bytes,
        tables_scanned=total.tables, dry_run=dry_run, manifest_versions_removed=total.manifest_versions,
        orphan_files_removed=total.orphan_files, orphan_dirs_removed=total.orphan_dirs,
        removed=tuple(sorted(total.removed)), errors=tuple(total.errors),
        seconds=round(time.monotonic() - started, 3),
    )
    log.info("cleanup %s%s: %d versions, %d files, %d bytes, %d tables, %d unreferenced directories",
             root_s, " (dry run)" if dry_run else "", stats.versions_removed, stats.files_removed,
             stats.bytes_removed, stats.tables_scanned, stats.orphan_dirs_removed)
    return stats
