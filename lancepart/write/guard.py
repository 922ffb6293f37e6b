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
  :class:`~lancepart.errors.DataFilesMissingError` naming the table and the file.
* :func:`commit_on_published` around each table commit: when the published version the commit
  builds on is gone, the job rebases on the newer ``__manifest`` if there is one (a cleanup
  removed a version that is no longer published), else fails with a typed error naming the
  table; any other storage or decoding error of the table (a full disk, a truncated data file)
  becomes its typed error naming the table and the file (:func:`lancepart.storage.error_mapping.table_error`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata

from lancepart.errors import DataFilesMissingError
from lancepart.storage.error_mapping import table_error
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import Manifest, ManifestConflict, is_not_found, join_uri
from lancepart.storage.table_commit import file_path
from lancepart.util.parallel import map_threads


def _local_path(uri: str) -> str | None:
    if uri.startswith("file://"):
        return uri[len("file://"):]
    return None if "://" in uri else uri


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
        local = _local_path(uri)
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
