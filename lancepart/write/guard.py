"""What a publish checks against a cleanup that ran during the write.

A cleanup with a retention shorter than a write job (``allow_short_retention=True``) can
delete the job's fragments before its table commit references them, or a table version it
committed before its ``__manifest`` commit publishes it. Lance commits a version that names
missing files without complaint, so the publish would succeed and the partition would be
unreadable from then on, earlier rows included. Two guards, both before anything is
published (docs/retention.md):

* :func:`check_files_present` right before the ``__manifest`` commit: every table version
  about to be published still exists, and every data file the job wrote exists (one
  existence check per file, on the bounded thread pool); else
  :class:`~lancepart.errors.DataFilesMissingError` naming the table and the file. The data
  files are looked at only once no cleanup is deleting unreferenced files of their table
  (:class:`DeletionMark`, below): a cleanup checks that a file is unreferenced and then
  deletes it, and a table commit naming the file can land between the two; the file check
  that follows that commit must not run before the delete.
* :func:`commit_on_published` around each table commit: when the published version the commit
  builds on is gone, the job rebases on the newer ``__manifest`` if there is one (a cleanup
  removed a version that is no longer published), else fails with a typed error naming the
  table; any other storage or decoding error of the table (a full disk, a truncated data file)
  becomes its typed error naming the table and the file (:func:`lancepart.storage.error_mapping.table_error`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata

from lancepart.errors import CommitConflictError, DataFilesMissingError
from lancepart.storage.error_mapping import table_error
from lancepart.storage.lance_io import local_path, open_table
from lancepart.storage.manifest import Manifest, ManifestConflict, is_not_found, join_uri
from lancepart.storage.table_commit import file_path
from lancepart.util import faults
from lancepart.util.parallel import map_threads

# A cleanup deleting unreferenced files of a partition table that are younger than the retention
# floor (allow_short_retention) marks the table with a file in this directory of the namespace
# root while it checks and deletes them (DeletionMark); a publish waits until no fresh mark names
# one of its tables before it looks at its data files.
DELETING_DIR = "_lancepart_deleting"
DELETING_EXPIRY_S = 600.0  # a mark older than this is ignored (its cleanup died); deletes only in its first half
DELETING_WAIT_S = 30.0  # the longest a publish waits for a cleanup's deletions in one of its tables
_POLL_S = 0.02


def check_files_present(
    root: str,
    tables: Sequence[tuple[str, str, int, Sequence[FragmentMetadata]]],
    storage_options: Mapping[str, str] | None = None,
    *,
    versions: bool = True,
) -> None:
    """Raise :class:`DataFilesMissingError` unless, for each ``(object_id, location, version,
    fragments)`` of a table this write committed to, ``version`` still exists (not asked when
    ``versions`` is false) and every data file of ``fragments`` is on storage. Nothing is
    published yet when this runs, so nothing is.

    What needs no asking (docs/retention.md):

    * the tables this write created (not passed): their directory is referenced by no
      ``__manifest`` version until this write publishes it, and cleanup leaves such a
      directory, files and all, for the retention floor;
    * with ``versions=False`` (the first ``__manifest`` commit attempt, on the snapshot the
      versions were committed against), the versions: each is newer than every version a
      retained snapshot pins, which cleanup leaves for the floor; a cleanup may remove one
      only after a newer ``__manifest`` pins a newer version of that table, and then this
      commit, conditional on its snapshot being the latest, fails and goes again with the
      versions asked for.

    >>> import os
    >>> from lancepart.storage.table_commit import commit_table
    >>> from lancepart.write.upgrade import append_fragments
    >>> p = ns.partitions()[0]
    >>> rows = pa.Table.from_pylist([{"id": 7, "event_date": p.values["event_date"]}], schema=ns.schema)
    >>> frags = append_fragments(ns.manifest, p.object_id, p.location, rows, ns.schema, published=p.read_version)
    >>> version = commit_table(ns.root, p.location, p.read_version, frags)
    >>> check_files_present(ns.root, [(p.object_id, p.location, version, frags)])     # all there
    >>> os.remove(f"{ns.root}/{p.location}/data/{frags[0].files[0].path}")
    >>> check_files_present(ns.root, [(p.object_id, p.location, version, frags)])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.DataFilesMissingError: partition table v1$...: data file ... written by this write is gone ...
    """
    so = dict(storage_options) if storage_options else None
    if versions:
        _check_versions(root, tables, so)
    _wait_for_deletions(root, [location for _, location, _, fragments in tables if fragments], so)
    _check_data_files(root, tables, so)


def _check_versions(root: str, tables: Sequence[tuple[str, str, int, Sequence[FragmentMetadata]]],
                    so: dict[str, str] | None) -> None:
    """Each table's ``version`` still exists (one open per table, on the thread pool)."""

    def version_gone(item: tuple[str, str, int, Sequence[FragmentMetadata]]) -> bool:
        try:
            open_table(join_uri(root, item[1]), version=item[2], storage_options=so)
        except (OSError, ValueError, RuntimeError) as e:
            if not is_not_found(e):
                raise
            return True
        return False

    for (oid, location, version, _), gone in zip(tables, map_threads(version_gone, tables), strict=True):
        if gone:
            raise DataFilesMissingError(
                f"partition table {oid} at {join_uri(root, location)}: version {version}, committed by this write, "
                f"was removed before it was published (a cleanup with a retention shorter than the write); nothing "
                f"was published, run the write again")


def _check_data_files(root: str, tables: Sequence[tuple[str, str, int, Sequence[FragmentMetadata]]],
                      so: dict[str, str] | None) -> None:
    """Every data file of the tables' fragments is on storage (one existence check per file, on
    the thread pool)."""
    checks = [(oid, join_uri(root, location), f"data/{file_path(df)}")
              for oid, location, _, fragments in tables for f in fragments for df in f.files]
    sessions: dict[str, LanceFileSession] = {}

    def exists(item: tuple[str, str, str]) -> bool:
        _, uri, path = item
        local = local_path(uri)
        if local is not None:
            return os.path.exists(os.path.join(local, path))
        session = sessions.get(uri)
        if session is None:  # one per table, shared by its threads (a race makes a spare one)
            session = sessions[uri] = LanceFileSession(uri, storage_options=so)
        return session.contains(path)

    missing = [item for item, ok in zip(checks, map_threads(exists, checks), strict=True) if not ok]
    if missing:
        oid, uri, path = missing[0]
        raise DataFilesMissingError(
            f"partition table {oid}: data file {uri}/{path} written by this write is gone from storage "
            f"({len(missing)} of its {len(checks)} data files missing; a cleanup with a retention shorter than the "
            f"write removed them); nothing was published, run the write again")


def _mark_key(location: str) -> str:
    """The part of a :class:`DeletionMark`'s name that says which table it marks."""
    return hashlib.sha1(location.encode()).hexdigest()[:16]


# tries at making a mark while other marks' exits remove the emptied directory
_MARK_ATTEMPTS = 50


class DeletionMark:
    """Held by a cleanup while it checks and deletes unreferenced files of the partition table at
    ``location`` that are younger than the retention floor (``with DeletionMark(root, location)
    as mark:``): a file ``<root>/_lancepart_deleting/<milliseconds>-<table key>-<uuid>`` from
    before its first check to after its last delete. :class:`OSError` when it cannot be made:
    then nothing young is deleted.

    Why (docs/retention.md): a cleanup looks at a file (no version references it), then deletes
    it. A writer's table commit naming that file can land in between, and the writer's file check
    right after it can still find the file; the delete then lands and the write publishes a
    version whose file is gone. With the mark, the writer's check (after its table commits) first
    waits until no fresh mark names one of its tables (:func:`check_files_present`: one listing
    of the namespace's mark directory per publish attempt, whatever the number of tables). A mark
    made after the writer looked comes before the cleanup's own look, which then sees the commit
    and keeps the file; a mark the writer saw removed was removed after the delete, so the
    writer's check finds the file gone (:class:`DataFilesMissingError`, nothing published).

    A mark expires :data:`DELETING_EXPIRY_S` after it was made (by the cleanup's clock): a killed
    cleanup holds no writer up for longer. The cleanup deletes only while :meth:`fresh` (the
    first half of that), so the clocks of cleanup and writers may disagree by minutes."""

    def __init__(self, root: str, location: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.root, self.so = root, dict(storage_options) if storage_options else None
        self.name = f"{int(time.time() * 1000)}-{_mark_key(location)}-{uuid.uuid4().hex}"
        self.made = 0.0

    def __enter__(self) -> DeletionMark:
        local = local_path(self.root)
        if local is not None:
            directory = os.path.join(local, DELETING_DIR)
            # another mark's exit (of this cleanup's other tables, or of another cleanup) removes
            # the directory once empty: it may go between makedirs' mkdir and its own check
            # (FileExistsError), or before the mark is made in it (FileNotFoundError). Try again.
            for _ in range(_MARK_ATTEMPTS):
                try:
                    os.makedirs(directory, exist_ok=True)
                    with open(os.path.join(directory, self.name), "x"):
                        break
                except (FileNotFoundError, FileExistsError):
                    continue
            else:
                raise OSError(f"cannot mark {self.root} as being cleaned: {directory} keeps disappearing")
        else:
            with tempfile.NamedTemporaryFile() as empty:
                LanceFileSession(self.root, storage_options=self.so).upload_file(empty.name,
                                                                                 f"{DELETING_DIR}/{self.name}")
        self.made = time.monotonic()
        return self

    def fresh(self) -> bool:
        """Whether a delete may still be made under this mark (well before writers ignore it)."""
        return time.monotonic() - self.made < DELETING_EXPIRY_S / 2

    def __exit__(self, *exc: object) -> None:
        local = local_path(self.root)
        try:
            if local is not None:
                os.remove(os.path.join(local, DELETING_DIR, self.name))
                try:
                    os.rmdir(os.path.join(local, DELETING_DIR))
                except OSError:
                    pass  # another cleanup's mark is in it
            else:
                LanceFileSession(self.root, storage_options=self.so).delete_file(f"{DELETING_DIR}/{self.name}")
        except OSError:
            pass  # it expires; writers wait for it at most DELETING_WAIT_S meanwhile


def _tables_being_deleted(root: str, so: dict[str, str] | None) -> set[str]:
    """The keys of the tables a fresh :class:`DeletionMark` of the namespace at ``root`` names."""
    local = local_path(root)
    if local is not None:
        try:
            names = os.listdir(os.path.join(local, DELETING_DIR))
        except FileNotFoundError:
            return set()
    else:
        names = [p.rsplit("/", 1)[-1] for p in LanceFileSession(root, storage_options=so).list(DELETING_DIR)]
    now_ms = time.time() * 1000
    keys = set()
    for name in names:
        made, _, rest = name.partition("-")
        if made.isdigit() and now_ms - int(made) < DELETING_EXPIRY_S * 1000:
            keys.add(rest.partition("-")[0])
    return keys


def _wait_for_deletions(root: str, locations: Sequence[str], so: dict[str, str] | None) -> None:
    """Until no cleanup is deleting unreferenced files of the tables at ``locations`` (no fresh
    :class:`DeletionMark` names one: one listing of the namespace's mark directory a round); then
    their data files can be looked at. :class:`CommitConflictError` after :data:`DELETING_WAIT_S`."""
    keys = {_mark_key(location): location for location in locations}
    deadline = time.monotonic() + DELETING_WAIT_S
    waited = False
    while keys:
        pending = sorted(keys[k] for k in _tables_being_deleted(root, so) if k in keys)
        if not pending:
            return
        if not waited:
            faults.checkpoint("waiting_for_cleanup")
            waited = True
        if time.monotonic() > deadline:
            raise CommitConflictError(
                f"partition table at {join_uri(root, pending[0])}: a cleanup has been deleting its unreferenced files "
                f"for more than {DELETING_WAIT_S:.0f} s (a mark in {join_uri(root, DELETING_DIR)}/); nothing was "
                f"published, run the write again")
        time.sleep(_POLL_S)


def commit_on_published(manifest: Manifest, snapshot_version: int, object_id: str, location: str,
                        published: int | None, commit: Callable[[], Any]) -> Any:
    """``commit()`` (a table commit on top of the ``published`` read_version of the snapshot
    ``snapshot_version``); when it fails because that version is gone from storage, raise
    :class:`ManifestConflict` if ``__manifest`` moved on since the snapshot (the caller's
    ``Manifest.update`` rebases on the newer one) or :class:`DataFilesMissingError` naming the
    table if the version is still the published one."""
    try:
        return commit()
    except (OSError, ValueError, RuntimeError) as e:
        if not is_not_found(e):  # full, forbidden, a data file that cannot be decoded: named with the table
            typed = table_error(e, manifest.root, object_id, location, version=published,
                                storage_options=manifest.storage_options)
            if typed is None:
                raise
            raise typed from e
        latest = manifest.dataset().version
        if latest != snapshot_version:
            raise ManifestConflict(f"{object_id}: published version {published} removed by a cleanup; "
                                   f"__manifest moved from {snapshot_version} to {latest}") from e
        raise DataFilesMissingError(
            f"partition table {object_id} at {join_uri(manifest.root, location)}: its published read_version "
            f"{published} is gone from storage ({e}); nothing was published") from e
