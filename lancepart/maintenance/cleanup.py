"""Remove old table versions and files nothing references; never what a snapshot pins.

Spec: spec/partitioning.md "Transaction" (``read_version`` / ``read_branch`` / ``read_tag``),
spec/storage-layout.md (what a table directory holds); docs/retention.md (the floor and its guards).

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
  partition tables (``<8 hex>_v<N>$<id>...$dataset``: new partition tables of a job that died
  before publishing them, or whose partition another writer published first), and only when every
  file in them is older than the cut-off and no retained snapshot references them.
  ``__manifest``, V1 ``<name>.lance`` tables and anything else are never touched. Root-level
  tables registered in ``__manifest`` (for example migrated V1 tables,
  :mod:`lancepart.v1_tables`) belong to whoever writes them: their versions are not cleaned.

"Superseded before the cut-off" rather than "created before the cut-off" (the rule of
Delta's VACUUM rather than of Lance's cleanup): a version a job opened as *latest* or a
snapshot a job read stays until ``older_than`` after it stopped being current, so a job that
runs for less than ``older_than`` never finds its base gone.

The retention floor (docs/retention.md). Nothing younger than the floor is removed unless
the caller asks for it: ``older_than`` below the floor raises
:class:`~lancepart.errors.UnsafeRetentionError` (a dry run too) unless
``allow_short_retention=True`` (CLI ``--allow-short-retention``). The floor is
:data:`DEFAULT_RETENTION_FLOOR` (one hour); the ``__manifest`` table metadata key
:data:`RETENTION_FLOOR_KEY` (``lancepart.retention_floor``: seconds, or a duration such as
``6h``, ``2d``; :func:`set_retention_floor` writes it) raises it for one namespace and can
never lower it below the default.

Guards that hold for every deletion, whatever ``older_than`` and the override say:

* no file modified after the cut-off is deleted, by any path: a version whose removal would
  delete such a file is kept for a later cleanup (version timestamps come from the writer's
  clock, file times from the store's: when they disagree, a version can look superseded
  long ago while its files are fresh); an unreferenced file
  is looked at again right before its own delete (versions committed since the listing are
  read, and its modification time), and while files younger than the floor are looked at and
  deleted the table is marked (:class:`~lancepart.write.guard.DeletionMark`: a write's table
  commit naming one can land between the look and the delete, so its file check waits for
  the mark to go and then finds the file gone); an unreferenced directory is listed again
  right before its removal, and its age is that of its newest file and of its directories
  themselves (a table being made has directories before its first file);
* right before a table's versions are removed, the latest ``__manifest`` is read again and
  what it pins is kept: the latest ``__manifest`` version and everything it or any retained
  snapshot pins are never "old";
* two things always obey the floor, even under the override, because removing them could
  break a *published* snapshot rather than a running write: ``__manifest``'s own
  unreferenced files (the rows of a ``__manifest`` commit between their write and the
  commit) and unreferenced table directories (a reservation creates a partition's table just
  before the ``__manifest`` commit that publishes it). Lance's hidden temporary files
  (``.tmp*``, a write in progress) obey the floor too. So does a partition table version
  newer than every version a retained snapshot pins: a write may be about to publish it
  (it has checked that its files exist and its ``__manifest`` commit is a moment away);
  under a short retention such versions of killed jobs go once they are older than the
  floor, or as soon as a later publish supersedes them. And so does the version right
  before a commit that dropped fragments nobody published (a concurrent writer's commit on
  the published version, :data:`~lancepart.storage.table_commit.DROPS_UNPUBLISHED`): their writer
  puts the same files back when it goes again on the newer ``__manifest``.

Races with live writers, and why they are safe when ``older_than`` exceeds the longest
write job (the default is 7 days; at least the floor):

1. *A writer publishes a newer ``read_version`` while cleanup runs.* The new version was
   committed by that writer during its run, so it is younger than the cut-off and not a
   candidate; besides, the latest ``__manifest`` is re-read right before each table's
   versions are removed and its pins are added. The version it replaces stays too: the
   snapshot that pinned it was current until just now, so it is a retained snapshot.
2. *A writer still holds an older snapshot* (it planned on ``read_version`` 3 while another
   job published 4) and opens version 3 to rebase. Version 3 is pinned by that snapshot,
   which stays retained for ``older_than`` after it was superseded.
3. *A writer committed a table version and has not published it yet.* It is the latest
   version (kept), or it was superseded by a concurrent writer's commit less than
   ``older_than`` ago (kept), or its files are younger than the cut-off (kept).
4. *A writer has written fragments (or a Spark job a new table directory) but not committed
   them.* Their files are younger than the cut-off (kept). Each unreferenced file is checked
   again right before its delete.

What ``allow_short_retention`` can still break (an ``older_than`` shorter than a running
job): that job's uncommitted fragments, or versions it committed and a concurrent job
superseded, can be removed. The job then fails before publishing anything: its publish
checks that every data file it wrote and every table version it is about to publish still
exist (:mod:`lancepart.write.guard`, :class:`~lancepart.errors.DataFilesMissingError`), and
a commit whose ``__manifest`` base or published ``read_version`` a cleanup removed rebases
on the latest ``__manifest``. The check leaves a window of milliseconds before the
``__manifest`` commit; the versions a job may be publishing in it (newer than everything
published) obey the floor, so the window is closed for any job that publishes within the
floor of its table commits. Still, the override is for a namespace no job writes to (tests,
a quiet namespace). A write that starts after cleanup finished is never affected.

What a cleanup reports: counts and :attr:`CleanupStats.removed` name only what really went
(a dry run: what would go, computed with the same rules); :attr:`CleanupStats.skipped` names
what could not be examined or removed (an unreadable ``__manifest`` version, a version
still present after Lance's removal, a file whose delete failed, a table that cannot be
opened) and :attr:`CleanupStats.errors` says why; the rest goes on, and the CLI exits 3. An
unreadable retained ``__manifest`` version (a truncated manifest file, a deleted data file,
or a read error) is left as it is; since what it pins is unknown, that run removes no table
version and no unreferenced directory, and still removes the other ``__manifest`` versions
and every table's unreferenced files. When Lance cannot list ``__manifest``'s versions at
all, no ``__manifest`` version is removed either until it is repaired.

Object stores (``s3://`` ...): everything goes through Lance (``cleanup_old_versions``,
``all_files``, ``tracked_files``, ``LanceFileSession``); nothing calls ``os`` on a URI. One
thing cannot be done there: telling the age of an unreferenced directory that holds no Lance
version (a Spark job's directory with data files only), because Lance's file listing has no
modification time. Such directories are left and named in :attr:`CleanupStats.errors`.

>>> cleanup(ns.root, timedelta(days=7), dry_run=True).bytes_removed    # nothing is a week old yet
0
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
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta, timezone
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.file import LanceFileSession

from lancepart.errors import (
    ConfigError,
    InvalidArgumentError,
    LancepartError,
    NamespaceNotFoundError,
    UnsafeRetentionError,
    without_source_locations,
)
from lancepart.model.ids import check_location
from lancepart.ops.repair import ensure_intact
from lancepart.results import CleanupStats
from lancepart.storage.error_mapping import table_failure
from lancepart.storage.lance_io import local_path, open_table
from lancepart.storage.manifest import MANIFEST_DIR, Manifest, ManifestChanges, join_uri, normalize_root
from lancepart.storage.table_commit import DROPS_UNPUBLISHED
from lancepart.util import faults
from lancepart.util.durations import parse_duration
from lancepart.util.parallel import map_threads
from lancepart.write.batches import prepare_for_cleanup
from lancepart.write.guard import DeletionMark

log = logging.getLogger("lancepart.cleanup")

DEFAULT_OLDER_THAN = timedelta(days=7)
# Nothing younger than this is removed unless the caller says allow_short_retention=True.
DEFAULT_RETENTION_FLOOR = timedelta(hours=1)
# __manifest table metadata key that raises the floor of one namespace (never lowers it): a
# number of seconds or a duration such as "6h", "2d", "1d12h".
RETENTION_FLOOR_KEY = "lancepart.retention_floor"
# Directory names lancepart gives partition tables: ids.table_location and spark.write.job_location.
PARTITION_DIR = re.compile(r"^[0-9a-f]{8}_v[0-9]+(\$[0-9a-z]{16})+\$dataset$")
PARTITION_TABLE_ID = re.compile(r"^v[0-9]+(\$[0-9a-z]{16})+\$dataset$")
# Table sub-directories whose files are collected when no version references them.
FILE_DIRS = ("data/", "_deletions/", "_transactions/", "_indices/")
_PIN_COLUMNS = ("read_version", "read_branch", "read_tag")
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
    skipped: list[str] = field(default_factory=list)

    def add(self, other: _Tally) -> None:
        for name in ("versions", "manifest_versions", "files", "bytes", "orphan_files", "orphan_dirs", "tables"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.removed.extend(other.removed)
        self.errors.extend(other.errors)
        self.skipped.extend(other.skipped)

    def skip(self, name: str, why: str) -> None:
        """``name`` (a version, file, table or directory) was to be examined or removed and was not."""
        self.skipped.append(name)
        self.errors.append(f"{name}: {without_source_locations(why)}")


def parse_retention(value: Any) -> timedelta:
    """The retention floor property as a timedelta (:func:`lancepart.util.durations.parse_duration`);
    :class:`ConfigError` naming the key when it cannot be read.

    >>> parse_retention("1d12h")
    datetime.timedelta(days=1, seconds=43200)
    """
    try:
        return parse_duration(value)
    except ValueError as e:
        raise ConfigError(f"{RETENTION_FLOOR_KEY}: {e}") from None


def retention_floor(metadata: Mapping[str, str]) -> timedelta:
    """The retention floor of a namespace whose ``__manifest`` table metadata is ``metadata``:
    :data:`DEFAULT_RETENTION_FLOOR`, raised (never lowered) by :data:`RETENTION_FLOOR_KEY`.

    >>> retention_floor({"lancepart.retention_floor": "6h"})
    datetime.timedelta(seconds=21600)
    """
    value = metadata.get(RETENTION_FLOOR_KEY)
    return DEFAULT_RETENTION_FLOOR if value is None else max(DEFAULT_RETENTION_FLOOR, parse_retention(value))


def _epoch(version: Mapping[str, Any]) -> float:
    # pylance gives a naive local datetime (datetime.fromtimestamp); .timestamp() undoes it exactly
    return version["timestamp"].timestamp()


def _removable(versions: Sequence[Mapping[str, Any]], cutoff: float, keep: Iterable[int]) -> list[int]:
    """Versions superseded before ``cutoff`` (the next version is older), minus ``keep``; never the latest."""
    ordered = sorted((int(v["version"]), _epoch(v)) for v in versions)
    keep = set(keep)
    return [v for (v, _), (_, next_ts) in itertools.pairwise(ordered) if next_ts < cutoff and v not in keep]


_clock = time.time  # the time a cleanup runs at (a test runs one "two hours later")


def _drops_unpublished(ds: lance.LanceDataset, version: int) -> bool:
    """Whether version ``version`` of the table is a commit that dropped fragments nobody
    published (:data:`~lancepart.storage.table_commit.DROPS_UNPUBLISHED`); True when its transaction
    cannot be read (keeping a version a moment longer is the safe side)."""
    try:
        tx = ds.read_transaction(version)
    except (OSError, ValueError, RuntimeError):
        return True
    props = (tx.transaction_properties or {}) if tx is not None else {}
    return props.get("__lance_commit_message") == DROPS_UNPUBLISHED


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


def _unreferenced(files: pa.Table, tracked: pa.Table, cutoff: float, exclude: set[str],
                  tmp_cutoff: float | None = None) -> pa.Table:
    """Rows of ``files`` (``all_files``) in a collectable directory, modified before ``cutoff``,
    that no row of ``tracked`` (``tracked_files``) references and that are not in ``exclude``;
    hidden temporary files only when also modified before ``tmp_cutoff``."""
    if files.num_rows == 0:
        return files
    paths, index_dirs = _referenced(tracked)
    before = pc.less(files.column("last_modified"), pa.scalar(int(cutoff * 1e6), pa.timestamp("us", tz="UTC")))
    files = files.filter(before)
    keep = [(_is_collectable(p) and p not in paths and p not in exclude
             and (_index_dir(p) is None or _index_dir(p) not in index_dirs))
            for p in files.column("path").to_pylist()]  # per file name, not per data row
    if tmp_cutoff is not None:  # Lance's temporary files (".tmp...") are a write in progress
        young = pc.greater_equal(files.column("last_modified"), pa.scalar(int(tmp_cutoff * 1e6),
                                                                          pa.timestamp("us", tz="UTC")))
        keep = [k and not (y and p.rsplit("/", 1)[-1].startswith(".")) for k, y, p in
                zip(keep, young.to_pylist(), files.column("path").to_pylist(), strict=True)]
    return files.filter(pa.array(keep, pa.bool_()))


def set_retention_floor(root: str | os.PathLike[str], floor: timedelta,
                        storage_options: Mapping[str, str] | None = None) -> None:
    """Raise the retention floor of the namespace at ``root`` to ``floor`` (stored as whole
    seconds under the ``__manifest`` table metadata key :data:`RETENTION_FLOOR_KEY`; a metadata
    commit that concurrent publishes keep). A floor below :data:`DEFAULT_RETENTION_FLOOR` is
    refused: the default always holds.

    >>> set_retention_floor(ns.root, timedelta(hours=6))
    >>> cleanup(ns.root, timedelta(hours=2))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.UnsafeRetentionError: cleanup of ... is below the retention floor 6:00:00 of this namespace ...
    """
    if not isinstance(floor, timedelta) or floor < DEFAULT_RETENTION_FLOOR:
        raise InvalidArgumentError(f"floor must be a datetime.timedelta of at least {DEFAULT_RETENTION_FLOOR}, "
                                   f"got {floor!r}")
    value = str(int(floor.total_seconds()))
    Manifest(normalize_root(root), storage_options).update(
        lambda snap: (ManifestChanges(metadata={RETENTION_FLOOR_KEY: value}), None), what="set retention floor")


class _Run:
    """One cleanup pass over a namespace root."""

    def __init__(self, root: str, older_than: timedelta, floor: timedelta, dry_run: bool,
                 storage_options: Mapping[str, str] | None) -> None:
        self.root = root
        self.so = dict(storage_options) if storage_options else None
        self.dry_run = dry_run
        now = _clock()
        self.cutoff = now - older_than.total_seconds()
        # Two things obey the floor even under allow_short_retention: __manifest's own unreferenced
        # files (a writer's rows between their write and its commit) and unreferenced table
        # directories (a reservation creates a partition's table just before the commit that
        # publishes it). Removing either in that moment would break a published snapshot.
        self.manifest_file_cutoff = self.dir_cutoff = min(self.cutoff, now - floor.total_seconds())
        # and a third: table versions beyond every published one (see _removable_table_versions)
        self.in_flight_cutoff = self.dir_cutoff
        self.manifest = Manifest(root, self.so)
        self.local = "://" not in root or root.startswith("file://")
        self.pins: dict[str, _Pins] = {}  # location -> pins of every retained snapshot
        self.other_locations: set[str] = set()  # referenced tables that are not partition tables
        self.seen_manifest_versions: set[int] = set()
        self.manifest_ds: lance.LanceDataset | None = None
        self.manifest_removable: list[int] = []
        self.refreshed = 0.0  # monotonic time of the last look at the latest __manifest
        self.lock = threading.Lock()  # tables are cleaned on threads; the pins grow as __manifest moves
        self.notes = _Tally()  # what planning had to skip (unreadable __manifest versions)
        self.pins_unknown = False  # a retained __manifest version could not be read

    # ------------------------------------------------------------------ what retained snapshots pin
    def _version_pins(self, v: int) -> pa.Table | None:
        """The table rows (object_id, location, read_*) of ``__manifest`` version ``v``; None when
        the version is gone (an earlier cleanup) or cannot be read (reported as skipped)."""
        cols = ["object_id", "location", *_PIN_COLUMNS]
        try:
            ds = self.manifest.dataset(v)
            rows = ds.to_table(columns=["object_type", *[c for c in cols if c in ds.schema.names]])
        except NamespaceNotFoundError:
            return None
        except (OSError, ValueError, RuntimeError, LancepartError) as e:
            # what it pins is unknown: no table version and no directory is removed in this run
            self.pins_unknown = True
            self.notes.skip(f"{MANIFEST_DIR}@v{v}", f"cannot be read ({type(e).__name__}: {e}); left as it is, "
                                                    f"and no table version or directory it may pin is removed")
            return None
        rows = rows.filter(pc.equal(rows.column("object_type"), "table"))
        for c in cols:  # a plain DirectoryNamespace manifest has no read_* columns: nothing pinned
            if c not in rows.column_names:
                rows = rows.append_column(c, pa.nulls(rows.num_rows, pa.uint64() if c == "read_version" else
                                                      pa.utf8()))
        return rows.select(cols).cast(pa.schema([(c, pa.uint64() if c == "read_version" else pa.utf8())
                                                 for c in cols]))

    def _read_pins(self, versions: Iterable[int]) -> None:
        todo = sorted(set(versions) - self.seen_manifest_versions)
        cols = ["object_id", "location", *_PIN_COLUMNS]
        parts = [t for v in todo if (t := self._version_pins(v)) is not None]
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
        10^4 tables on the object store's latency; deletions force it)."""
        with self.lock:
            if not force and time.monotonic() - self.refreshed < _REFRESH_EVERY:
                return
            self.refreshed = time.monotonic()
            latest = self.manifest.dataset()
            newer = [v for v in range(max(self.seen_manifest_versions, default=0) + 1, latest.version + 1)]
            if newer:
                self._read_pins(newer)

    def plan_manifest(self) -> None:
        ds = self.manifest.dataset()
        self.manifest_ds = ds
        try:
            versions = ds.versions()
        except (OSError, ValueError, RuntimeError) as e:
            # a corrupt version manifest: Lance can neither list nor clean the versions of __manifest;
            # keep them all, honour the pins of every one that still reads, clean the tables
            self.notes.skip(MANIFEST_DIR, f"its versions cannot be listed ({type(e).__name__}: {e}); no __manifest "
                                          f"version is removed until it is repaired")
            self._read_pins(range(1, ds.version + 1))
            return
        self.manifest_removable = _removable(versions, self.cutoff, _tag_versions(ds).values())
        gone = set(self.manifest_removable)
        self.manifest_left = sorted((int(v["version"]), v["timestamp"]) for v in versions
                                    if int(v["version"]) not in gone)
        self._read_pins(int(v["version"]) for v in versions if int(v["version"]) not in gone)

    def time_travel_reach(self) -> dict[str, Any]:
        """The oldest ``__manifest`` version left (a dry run: that would be left) and its time."""
        left = getattr(self, "manifest_left", None)
        if not self.dry_run:
            try:
                left = sorted((int(v["version"]), v["timestamp"]) for v in self.manifest.dataset().versions())
            except (OSError, ValueError, RuntimeError):
                left = None
        if not left:
            return {}
        version, ts = left[0]
        ts = ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)
        return {"time_travel_from_version": version, "time_travel_from": ts.isoformat()}

    # ------------------------------------------------------------------ one table
    def _file_cutoff(self, location: str) -> float:
        return self.manifest_file_cutoff if location == MANIFEST_DIR else self.cutoff

    def _defer_young(self, ds: lance.LanceDataset, location: str, removable: list[int]) -> list[int]:
        """``removable`` minus every version that references a file modified after the cut-off
        (the version's timestamp, from its writer's clock, says it is old; the store's clock
        says its files are young: no file younger than the retention in force is deleted)."""
        if not removable:
            return removable
        files = ds.all_files().read_all()
        stamp = pa.scalar(int(self.cutoff * 1e6), pa.timestamp("us", tz="UTC"))
        young = files.filter(pc.greater_equal(files.column("last_modified"), stamp)).column("path")
        if len(young) == 0:
            return removable
        tracked = ds.tracked_files().read_all()
        holding = set(tracked.filter(pc.is_in(tracked.column("path"), young)).column("version").to_pylist())
        kept = [v for v in removable if v not in holding]
        if len(kept) < len(removable):
            log.info("%s: versions %s reference files younger than the retention; kept for a later cleanup",
                     location, sorted(set(removable) - set(kept)))
        return kept

    def _lance_call(self, ds: lance.LanceDataset, location: str, removable: list[int], tally: _Tally,
                    call: Any) -> list[tuple[list[int], Any]]:
        """``call(versions)`` for all of ``removable`` at once, or (when that fails: a corrupt
        version) for each version alone; the ones that still fail are skipped."""
        try:
            return [(removable, call(removable))]
        except (OSError, ValueError, RuntimeError) as e:
            if len(removable) == 1:
                tally.skip(f"{location}@v{removable[0]}", f"cannot be removed ({type(e).__name__}: {e})")
                return []
        out = []
        for v in removable:
            try:
                out.append(([v], call([v])))
            except (OSError, ValueError, RuntimeError) as e:
                tally.skip(f"{location}@v{v}", f"cannot be removed ({type(e).__name__}: {e})")
        return out

    def _lance_cleanup(self, uri: str, ds: lance.LanceDataset, location: str, removable: list[int],
                       tally: _Tally) -> tuple[list[int], set[str]]:
        """Remove ``removable`` versions (or explain it, in a dry run); (the versions removed,
        the files it removes)."""
        if not self.dry_run and location != MANIFEST_DIR and removable:
            # right before the delete: the pins of the latest __manifest (a writer may have just
            # published one of these versions)
            self._refresh_pins(force=True)
            with self.lock:
                pinned = set(self.pins[location].versions)
            removable = [v for v in removable if v not in pinned]
        removable = self._defer_young(ds, location, removable)
        if not removable:
            return [], set()
        gone: set[str] = set()
        done: list[int] = []
        if self.dry_run:
            def explain(vs: list[int]) -> Any:
                return ds.explain_cleanup_old_versions(versions=vs, error_if_tagged_old_versions=False,
                                                       include_files=True, max_files=1 << 40)
            for vs, ex in self._lance_call(ds, location, removable, tally, explain):
                stats = ex.stats
                gone |= {_rel(c.path, location) for c in ex.candidate_files}
                done += vs
                self._count_versions(stats, tally)
        else:
            def clean(vs: list[int]) -> Any:
                return ds.cleanup_old_versions(versions=vs, error_if_tagged_old_versions=False)
            for vs, stats in self._lance_call(ds, location, removable, tally, clean):
                if stats.failed_deletes:
                    tally.skip(f"{location}", f"{stats.failed_deletes} files could not be deleted; "
                                              f"the next cleanup retries them")
                done += vs
                self._count_versions(stats, tally)
            try:  # report what really went, not what was asked for
                left = set(done) & {int(v["version"]) for v in open_table(uri, storage_options=self.so).versions()}
            except (OSError, ValueError, RuntimeError):
                left = set()
            for v in sorted(left):
                tally.skip(f"{location}@v{v}", "still present after its removal")
            done = [v for v in done if v not in left]
        tally.versions += len(done)
        tally.removed.extend(f"{location}@v{v}" for v in done)
        return done, gone

    @staticmethod
    def _count_versions(stats: Any, tally: _Tally) -> None:
        tally.files += (stats.old_versions + stats.data_files_removed + stats.transaction_files_removed
                        + stats.index_files_removed + stats.deletion_files_removed)
        tally.bytes += stats.bytes_removed

    def _still_unreferenced(self, uri: str, path: str, state: dict[str, Any]) -> bool:
        """Right before a delete: no version committed since ``state["seen"]`` references
        ``path``, and (local stores) the file was not modified after the cut-off."""
        latest = open_table(uri, storage_options=self.so)
        if latest.version > state["seen"]:
            late = latest.tracked_files(min_version=state["seen"] + 1).read_all()
            paths, dirs = _referenced(late)
            state["paths"] |= paths
            state["dirs"] |= dirs
            state["seen"] = latest.version
        if path in state["paths"] or _index_dir(path) in state["dirs"]:
            return False
        if (base := local_path(uri)) is not None:
            try:
                return os.stat(os.path.join(base, path)).st_mtime < state["cutoff"]
            except FileNotFoundError:
                return False
        return True

    def _collect_files(self, uri: str, location: str, ds: lance.LanceDataset, removable: list[int],
                       gone: set[str], tally: _Tally) -> None:
        """Delete (or count) the files of a table that no version references."""
        if ds.branches.list():
            return  # branch manifests reference main's files; tracked_files does not list them
        cutoff = self._file_cutoff(location)
        if self.dry_run:
            tracked = ds.tracked_files().read_all()
            if removable:  # as if the versions were gone already
                mask = pc.invert(pc.is_in(tracked.column("version"), pa.array(removable, pa.int64())))
                tracked = tracked.filter(mask)
            files = ds.all_files().read_all()
        else:
            ds = open_table(uri, storage_options=self.so)
            seen = ds.version
            files = ds.all_files().read_all()
            tracked = ds.tracked_files().read_all()
        orphans = _unreferenced(files, tracked, cutoff, gone, self.dir_cutoff)
        if orphans.num_rows and not self.dry_run:
            # each file is looked at again right before its delete: versions committed since we
            # listed may reference it, and it may have been rewritten
            state: dict[str, Any] = {"seen": seen, "paths": set(), "dirs": set(), "cutoff": cutoff}
            session = LanceFileSession(uri, storage_options=self.so)
            deleted = []
            # a file younger than the floor may be a running write's: its table commit can land
            # between our look and our delete, and its file check right after it still find the
            # file. Under the mark, that check waits for our deletes (lancepart.write.guard.DeletionMark)
            young = pc.any(pc.greater_equal(orphans.column("last_modified"), pa.scalar(
                int(self.in_flight_cutoff * 1e6), pa.timestamp("us", tz="UTC")))).as_py()
            with DeletionMark(self.root, location, self.so) if young else nullcontext() as mark:
                for path in orphans.column("path").to_pylist():
                    if mark is not None and not mark.fresh():
                        tally.skip(f"{location}/{path}", "not deleted: this cleanup's mark on the table is too old; "
                                                         "the next cleanup retries it")
                        continue
                    if not self._still_unreferenced(uri, path, state):
                        continue
                    faults.checkpoint("before_unreferenced_delete")
                    try:
                        session.delete_file(path)
                    except OSError as e:
                        if session.contains(path):
                            tally.skip(f"{location}/{path}", f"cannot be deleted ({e})")
                            continue
                    deleted.append(path)
            orphans = orphans.filter(pc.is_in(orphans.column("path"), pa.array(deleted, pa.utf8())))
        tally.orphan_files += orphans.num_rows
        tally.files += orphans.num_rows
        tally.bytes += int(pc.sum(orphans.column("size_bytes")).as_py() or 0)
        tally.removed.extend(f"{location}/{p}" for p in orphans.column("path").to_pylist())

    def _removable_table_versions(self, ds: lance.LanceDataset, versions: Sequence[Mapping[str, Any]],
                                  keep: set[int], location: str) -> list[int]:
        """:func:`_removable` at the cut-off, except for two kinds of version that obey the floor,
        because a running write may be about to publish what they hold:

        * a version newer than everything a retained snapshot pins: a write's commit whose
          ``__manifest`` publish is a moment away (a version one writer committed is superseded
          at once by a concurrent writer's, and the publish check of its files runs before the
          commit);
        * the version right before a commit that dropped fragments nobody published
          (:data:`~lancepart.storage.table_commit.DROPS_UNPUBLISHED`: a concurrent writer's commit on
          the published version removes them): their writer puts the same files back when it
          goes again on the newer ``__manifest``, and its file check can pass a moment before
          this cleanup deletes them."""
        removable = _removable(versions, self.cutoff, keep)
        if not removable or self.in_flight_cutoff >= self.cutoff:
            return removable
        top = max(keep, default=0)
        settled = set(_removable(versions, self.in_flight_cutoff, keep))
        kept = [v for v in removable if v > top and v not in settled]
        if kept:
            log.info("%s: versions %s are newer than every published one and younger than the retention floor "
                     "(a write may be publishing them); kept for a later cleanup", location, kept)
        removable = [v for v in removable if v <= top or v in settled]
        # only a cleanup shorter than the floor gets here with versions whose successor is young:
        # one transaction read for each
        ordered = sorted((int(v["version"]), _epoch(v)) for v in versions)
        after = {v: (nxt, ts) for (v, _), (nxt, ts) in itertools.pairwise(ordered)}
        before_drops = [v for v in removable if after[v][1] >= self.in_flight_cutoff
                        and _drops_unpublished(ds, after[v][0])]
        if before_drops:
            log.info("%s: versions %s hold fragments a commit younger than the retention floor dropped unpublished "
                     "(their write may be putting them back); kept for a later cleanup", location, before_drops)
        return [v for v in removable if v not in before_drops]

    def clean_table(self, location: str) -> _Tally:
        tally = _Tally(tables=1)
        uri = join_uri(self.root, location)
        try:
            ds = open_table(uri, storage_options=self.so)
            tags = _tag_versions(ds)
            if not self.dry_run:
                self._refresh_pins()  # race 1 of the module docstring
            with self.lock:
                pins = self.pins[location]
                pinned_versions, pinned_tags = set(pins.versions), set(pins.tags)
            missing = pinned_tags - set(tags)
            if missing:
                tally.skip(location, f"({pins.object_id}): read_tag {sorted(missing)} does not exist; left untouched")
                return tally
            keep = pinned_versions | {tags[t] for t in pinned_tags} | set(tags.values())
            removable = [] if self.pins_unknown else self._removable_table_versions(ds, ds.versions(), keep, location)
            removable, gone = self._lance_cleanup(uri, ds, location, removable, tally)
            self._collect_files(uri, location, ds, removable, gone, tally)
        except (OSError, ValueError, RuntimeError, LancepartError) as e:  # typed, naming the table and its path
            oid = self.pins[location].object_id
            tally.skip(location, f"({oid}): {table_failure(e, uri, oid)}")
        return tally

    def clean_manifest(self) -> _Tally:
        tally = _Tally()
        ds = self.manifest_ds
        assert ds is not None
        removable, gone = self._lance_cleanup(self.manifest.uri, ds, MANIFEST_DIR, self.manifest_removable, tally)
        tally.manifest_versions = tally.versions
        try:
            self._collect_files(self.manifest.uri, MANIFEST_DIR, ds, removable, gone, tally)
        except (OSError, ValueError, RuntimeError) as e:
            tally.skip(MANIFEST_DIR, f"unreferenced files not examined: {type(e).__name__}: {e}")
        return tally

    # ------------------------------------------------------------------ unreferenced directories
    def _directories(self) -> list[str]:
        if (base := local_path(self.root)) is not None:
            return sorted(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False))
        listing = LanceFileSession(self.root, storage_options=self.so).list_with_delimiter()
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listing.common_prefixes)

    def _dir_files(self, name: str) -> tuple[list[tuple[str, int, float]] | None, str | None, float]:
        """``([(path, size, mtime)] of every file under the directory, None, newest)``, or
        ``(None, why not, 0.0)``. ``newest`` is the latest time of those files and, on a local
        store, of the directories themselves: a job creating a table makes its directories before
        its first file (Lance makes ``data/``, then a temporary file in it), so a directory with
        no file yet is young by its own time, not old for having no file (an object store has no
        directories, only keys with their own times)."""
        uri = join_uri(self.root, name)
        if (base := local_path(uri)) is not None:
            out, newest = [], 0.0
            for d, _, names in os.walk(base):
                try:
                    newest = max(newest, os.lstat(d).st_mtime)
                except FileNotFoundError:
                    continue
                for n in names:
                    try:
                        st = os.lstat(os.path.join(d, n))
                    except FileNotFoundError:
                        continue
                    out.append((os.path.relpath(os.path.join(d, n), base), st.st_size, st.st_mtime))
                    newest = max(newest, st.st_mtime)
            return out, None, newest
        try:
            files = open_table(uri, storage_options=self.so).all_files().read_all()
        except (OSError, ValueError):
            if not LanceFileSession(uri, storage_options=self.so).list():
                return [], None, 0.0  # no object at all: a prefix some stores list after its objects went
            return None, ("holds no Lance table version, and the object store listing has no modification "
                          "times: its age cannot be told; remove it by hand once no job can be writing it"), 0.0
        mtimes = pc.divide(files.column("last_modified").cast(pa.int64()), 1e6).to_pylist()
        return (list(zip(files.column("path").to_pylist(), files.column("size_bytes").to_pylist(), mtimes,
                         strict=True)), None, max(mtimes, default=0.0))

    def _remove_dir(self, name: str) -> bool:
        """Remove the directory; whether nothing of it is left."""
        uri = join_uri(self.root, name)
        if (path := local_path(uri)) is not None:
            shutil.rmtree(path)
            return not os.path.exists(path)
        session = LanceFileSession(uri, storage_options=self.so)
        for path in session.list():
            session.delete_file(path[len(name) + 1:] if path.startswith(name + "/") else path)
        return not list(session.list())

    def collect_directories(self) -> _Tally:
        tally = _Tally()
        if self.pins_unknown:
            return tally  # an unreadable retained snapshot may reference any of them
        referenced = set(self.pins) | self.other_locations
        for name in self._directories():
            if name == MANIFEST_DIR or name in referenced or not PARTITION_DIR.match(name):
                continue
            files, why, newest = self._dir_files(name)
            if files is None:
                tally.skip(join_uri(self.root, name), f"not referenced by __manifest but {why}")
                continue
            if not files and not self.local:
                continue  # nothing to remove: SeaweedFS lists an emptied directory for ~2 minutes
            if newest >= self.dir_cutoff:
                continue  # a job may still be writing it, or reserving it
            if not self.dry_run:
                self._refresh_pins(force=True)  # a job may have reserved it since
                if name in self.pins or name in self.other_locations:
                    continue
                files, _, newest = self._dir_files(name)  # and written into it since we listed
                if files is None or newest >= self.dir_cutoff:
                    continue
                try:
                    if not self._remove_dir(name):
                        tally.skip(name + "/", "still present after its removal")
                        continue
                except OSError as e:
                    tally.skip(name + "/", f"cannot be removed ({e})")
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
    allow_short_retention: bool = False,
) -> CleanupStats:
    """Remove what no retained snapshot of the namespace at ``root`` needs (see the module
    docstring for the rules): partition table versions and ``__manifest`` versions superseded
    more than ``older_than`` ago, files no version references, and unreferenced partition table
    directories, all older than ``older_than``. Never anything a ``read_version``,
    ``read_tag`` or ``read_branch`` of a retained ``__manifest`` version pins.

    ``older_than`` below the namespace's retention floor (:func:`retention_floor`: one hour, or
    more if the ``__manifest`` table metadata key ``lancepart.retention_floor`` says so) raises
    :class:`~lancepart.errors.UnsafeRetentionError`, also for a dry run, unless
    ``allow_short_retention=True`` (for a namespace no job writes to; see the module docstring
    for what it can break).

    ``dry_run=True`` removes nothing and reports what would go (:attr:`CleanupStats.removed`)
    with the same counts and bytes. Counts name only what really went. What could not be
    examined or removed is named in :attr:`CleanupStats.skipped` (why: in
    :attr:`CleanupStats.errors`); the rest goes on.

    1. check ``older_than`` against the retention floor (:func:`_check_retention`);
    2. read what every retained ``__manifest`` version pins (:meth:`_Run.plan_manifest`);
    3. remove ``__manifest``'s old versions and files first, then each partition table's, on
       ``max_workers`` threads, then unreferenced table directories (:func:`_clean`);
    4. the stats, logged.

    >>> cleanup(ns.root, timedelta(minutes=5))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.UnsafeRetentionError: cleanup of ... with older_than=0:05:00 is below the retention floor ...
    >>> _ = ns.delete("id = 1")                  # supersedes the first version of one table
    >>> stats = cleanup(ns.root, timedelta(0), allow_short_retention=True)   # nothing writes to ns
    >>> stats.versions_removed, stats.manifest_versions_removed     # 1 table version, 7 of __manifest
    (8, 7)
    >>> PartitionedNamespace.open(ns.root).to_table().num_rows
    5
    """
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise InvalidArgumentError(f"older_than must be a non-negative datetime.timedelta, got {older_than!r}")
    root_s = normalize_root(root)
    ensure_intact(root_s, storage_options)  # a stripped __manifest: refuse (lancepart.ops.repair)
    floor = retention_floor(Manifest(root_s, storage_options).dataset().metadata)
    _check_retention(root_s, older_than, floor, allow_short_retention=allow_short_retention, dry_run=dry_run)
    started = time.monotonic()
    run = _Run(root_s, older_than, floor, dry_run, storage_options)
    run.plan_manifest()
    total = _clean(run, dry_run=dry_run, max_workers=max_workers)
    stats = CleanupStats(
        versions_removed=total.versions, files_removed=total.files, bytes_removed=total.bytes,
        tables_scanned=total.tables, dry_run=dry_run, manifest_versions_removed=total.manifest_versions,
        orphan_files_removed=total.orphan_files, orphan_dirs_removed=total.orphan_dirs,
        removed=tuple(sorted(total.removed)), errors=tuple(total.errors),
        seconds=round(time.monotonic() - started, 3), skipped=tuple(sorted(set(total.skipped))),
        **run.time_travel_reach(),
    )
    log.info("cleanup %s%s: %d versions, %d files, %d bytes, %d tables, %d unreferenced directories%s",
             root_s, " (dry run)" if dry_run else "", stats.versions_removed, stats.files_removed,
             stats.bytes_removed, stats.tables_scanned, stats.orphan_dirs_removed,
             f"; {len(stats.skipped)} skipped" if stats.skipped else "")
    return stats


def _clean(run: _Run, *, dry_run: bool, max_workers: int) -> _Tally:
    """Remove what ``run`` planned: ``__manifest`` first, then the partition tables on
    ``max_workers`` threads, then unreferenced table directories; everything tallied."""
    total = _Tally()
    prepare_for_cleanup(run.manifest, dry_run=dry_run)  # batch ids of the versions about to go: into the index
    # __manifest first: a cleanup that dies half way then leaves table versions no snapshot
    # needs (the next run takes them), never a retained snapshot whose table versions are gone
    total.add(run.clean_manifest())
    for t in map_threads(run.clean_table, sorted(run.pins), max_workers=max_workers):
        total.add(t)
    total.add(run.collect_directories())
    total.add(run.notes)
    return total


def _check_retention(root: str, older_than: timedelta, floor: timedelta, *, allow_short_retention: bool,
                     dry_run: bool) -> None:
    """``older_than`` below ``floor`` raises :class:`UnsafeRetentionError`, or, with
    ``allow_short_retention``, is logged as a warning (not for a dry run)."""
    if older_than >= floor:
        return
    if not allow_short_retention:
        raise UnsafeRetentionError(
            f"cleanup of {root} with older_than={older_than} is below the retention floor {floor} of this "
            f"namespace (at least {DEFAULT_RETENTION_FLOOR}; raised by the __manifest metadata key "
            f"{RETENTION_FLOOR_KEY!r}): files and versions of running write jobs would be removed. Use a "
            f"retention of at least {floor}, or pass allow_short_retention=True (CLI --allow-short-retention) "
            f"only when no job writes to the namespace")
    if not dry_run:
        log.warning("cleanup of %s with older_than=%s below the retention floor %s (allow_short_retention): "
                    "write jobs running longer than that can fail (see lancepart.maintenance.cleanup)",
                    root, older_than, floor)
