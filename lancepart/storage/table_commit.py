"""Commit new fragments to one partition table on top of its *published* version.

docs/design.md §8 hazard 2: versions beyond ``read_version`` belong to jobs that died or
have not published yet. A commit therefore produces a version whose fragments are
exactly ``published ∪ ours`` (append), ``ours`` (overwrite) or ``(published − removed) ∪ ours``
(a compaction's rewrite). Each round:

1. if a published fragment is missing from the latest version, or carries a deletion
   file the published version does not (a writer with an older base removed it, or an
   unpublished delete touched it), or the latest version's schema is not the published one
   (an unpublished rollback restored an older schema: our fragments were written with the
   published field ids), commit ``Restore(published)`` first;
2. commit an ``Update`` that removes every foreign fragment and adds ours;
3. Lance may have rebased that ``Update`` over a concurrent commit, smuggling in someone
   else's unpublished fragments; versions are immutable, so only the version we made has
   to be exact. If it is not, back off with jitter and go round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lance
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from lancepart.errors import CommitConflictError, FragmentsGoneError, SchemaChangedError
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import LanceCommitConflictError, backoff, commit_lock, is_commit_conflict, join_uri

Ident = tuple[frozenset[str], tuple[int, int] | None]

# The commit message of a commit that drops fragments nobody published (another writer's
# commits beyond the published version): a Restore(published), or an Update removing
# fragments that are not the base's. That writer may still put the same files back in a
# version it is about to publish, so cleanup keeps the version before such a commit for the
# retention floor (lancepart.maintenance.cleanup: "dropped unpublished fragments").
DROPS_UNPUBLISHED = "lancepart: drops unpublished fragments"


def file_path(data_file: Any) -> str:
    """A data file's path (pylance's ``DataFile.path`` property builds a class on every call: a
    commit loop over a table of many fragments spent most of its time there)."""
    path = getattr(data_file, "_path", None)
    return path if isinstance(path, str) else data_file.path


def _ident(frag: FragmentMetadata) -> Ident:
    """A fragment's identity: its data files plus its deletion file, if any."""
    df = frag.deletion_file
    return frozenset(file_path(f) for f in frag.files), None if df is None else (df.read_version, df.id)


def schema_signature(ds: lance.LanceDataset) -> tuple:
    """A table version's columns as Lance stores them: name, field id and type of every field,
    nested ones included (two versions with the same names and types can still differ in ids),
    and the schema's metadata (lancepart's field-id record of the table)."""
    def walk(fields) -> tuple:
        return tuple((f.name(), f.id(), str(f.to_arrow().type), walk(f.children())) for f in fields)

    return walk(ds.lance_schema.fields()), tuple(sorted((ds.schema.metadata or {}).items()))


def rows_held(ds: lance.LanceDataset) -> dict[int, tuple[int | None, tuple[int, int] | None]]:
    """Which rows a table version holds, whatever its columns: per fragment id, its physical row
    count and its deletion file. A schema change (columns dropped, altered, added) keeps it; an
    append, a delete, a merge or a compaction changes it. Fragment ids alone would miss a
    concurrent delete, which changes only deletion files."""
    out = {}
    for f in ds.get_fragments():
        m = f.metadata
        df = m.deletion_file
        out[f.fragment_id] = (m.physical_rows, None if df is None else (df.read_version, df.id))
    return out


def commit_table(
    root: str,
    location: str,
    base_version: int | None,
    fragments: Sequence[FragmentMetadata],
    *,
    overwrite: bool = False,
    remove: Sequence[FragmentMetadata] = (),
    storage_options: Mapping[str, str] | None = None,
    max_attempts: int = 40,
) -> int:
    """Commit ``fragments`` to the table at ``location`` on top of ``base_version``; return
    the new version, whose fragments are exactly the base's (unless ``overwrite``) minus
    ``remove`` plus ours.

    ``remove`` (fragments of ``base_version``, as its manifest describes them) is what a
    compaction rewrote into ``fragments``; :class:`FragmentsGoneError` if one of them is not in
    ``base_version`` (an overwrite or another rewrite replaced it; committing would lose or
    double rows).

    >>> from lancepart.write.upgrade import append_fragments
    >>> p = ns.partitions()[0]
    >>> rows = pa.Table.from_pylist([{"id": 7, "event_date": p.values["event_date"]}], schema=ns.schema)
    >>> new_fragments = append_fragments(ns.manifest, p.object_id, p.location, rows, ns.schema,
    ...                                  published=p.read_version)
    >>> commit_table(ns.root, p.location, p.read_version, new_fragments)
    2
    >>> ns.to_table(columns=["id"]).num_rows        # committed to the table, not published
    6
    """
    if overwrite and remove:
        raise ValueError("commit_table: overwrite replaces every fragment; 'remove' makes no sense with it")
    uri = join_uri(root, location)
    so = dict(storage_options) if storage_options else None
    base: set[Ident] = set()
    published = None
    if not overwrite:
        published = open_table(uri, version=base_version, storage_options=so, reuse=True)
        base = {_ident(f.metadata) for f in published.get_fragments()}
        check_fields(published, fragments, location)
    removed = {_ident(f) for f in remove}
    if gone := removed - base:
        raise FragmentsGoneError(
            f"partition table {location}: {len(gone)} fragment(s) to replace are not in version {base_version} "
            f"(e.g. {sorted(next(iter(gone))[0])}); nothing committed")
    mine = {_ident(f) for f in fragments}
    wanted = (base - removed) | mine
    def update(have: Mapping[Ident, int]) -> LanceOperation.Update:
        remove = [fid for ident, fid in have.items() if ident not in wanted]
        return LanceOperation.Update(removed_fragment_ids=remove,
                                     new_fragments=[f for f in fragments if _ident(f) not in have])

    return commit_exactly(uri, base_version, base, wanted, update, so, f"partition table {location}",
                          max_attempts=max_attempts, published=published)


def _lance_field_ids(fields) -> set[int]:
    out: set[int] = set()
    for f in fields:
        out.add(f.id())
        out |= _lance_field_ids(f.children())
    return out


def check_fields(published: lance.LanceDataset, fragments: Sequence[FragmentMetadata], location: str) -> None:
    """:class:`SchemaChangedError` when ``fragments`` hold columns the table's published version
    does not have (its schema changed after they were written: a widened column is a new Lance
    field, and their values would read as NULL). Nothing is committed; the write is rerun."""
    known = _lance_field_ids(published.lance_schema.fields())
    stray = {fid for f in fragments for df in f.files for fid in df.fields if fid >= 0} - known
    if stray:
        raise SchemaChangedError(
            f"partition table {location}: its schema changed (version {published.version}) after this write's "
            f"fragments were written (Lance field ids {sorted(stray)} are gone); nothing was committed: run the "
            f"write again")


def foreign_versions(ds: lance.LanceDataset, published: int) -> tuple[list[int], int]:
    """The versions of the table ``ds`` (its latest version) beyond ``published`` that another
    writer than lancepart made to add rows, and how many rows they add: work nobody published,
    which the next lancepart commit on this table leaves out. lancepart changes an existing
    partition table only with ``Update`` and ``Restore`` commits (and schema and index
    operations), so an ``Append`` or ``Overwrite`` there is another writer's (``write_dataset``,
    Lance's directory namespace)."""
    versions, rows = [], 0
    for v in range(published + 1, ds.version + 1):
        tx = ds.read_transaction(v)
        if tx is None:
            continue
        op = tx.operation
        added = list(getattr(op, "fragments", None) or [])
        if isinstance(op, LanceOperation.Append | LanceOperation.Overwrite) and added:
            versions.append(v)
            rows += sum(f.physical_rows or 0 for f in added)
    return versions, rows


def commit_exactly(uri: str, base_version: int | None, base: set[Ident], wanted: set[Ident],
                   update: Callable[[Mapping[Ident, int]], LanceOperation.BaseOperation],
                   storage_options: Mapping[str, str] | None, what: str, *, max_attempts: int = 40,
                   published: lance.LanceDataset | None = None) -> int:
    """The commit loop of every change to a partition table (a write, a compaction, a delete):
    on the latest version, restore ``base_version`` first if one of its fragments (``base``) is
    missing or altered there, then commit ``update(fragments of the latest version by ident)``;
    return the version made once its fragments are exactly ``wanted`` (Lance may rebase the
    commit over a concurrent one: then it is redone). :class:`CommitConflictError` naming
    ``what`` after ``max_attempts``, with nothing of ours in a published version.

    ``published`` (``base_version`` already open, on the shared session) is where the first
    attempt commits: the latest version is almost always the published one, and when it is
    not, Lance rebases the commit over the newer ones and the result is not exact, so the
    next attempt looks at the latest (one listing of ``_versions/`` saved per table)."""
    lock = commit_lock(uri, storage_options)  # None unless the store needs one (docs/object-storage.md)
    base_schema: tuple | None = None
    for attempt in range(max_attempts):
        if attempt == 0 and published is not None and published.version == base_version:
            latest = published
        else:
            latest = open_table(uri, storage_options=storage_options)
        schema_moved = False
        if base_version is not None and latest.version != base_version:
            if base_schema is None:  # opened only when the table moved beyond the base
                base_schema = schema_signature(published if published is not None and published.version ==
                                               base_version else open_table(uri, version=base_version,
                                                                            storage_options=storage_options))
            schema_moved = schema_signature(latest) != base_schema
        fragments = latest.get_fragments()
        have = {_ident(f.metadata): f.fragment_id for f in fragments}
        try:
            if not base <= set(have) or schema_moved:
                lance.LanceDataset.commit(latest, LanceOperation.Restore(base_version),
                                          read_version=latest.version, commit_lock=lock,
                                          commit_message=DROPS_UNPUBLISHED)
                continue
            if len(have) < len(fragments):
                # a fragment twice (a rebased commit added ours again): keep the first of each
                seen: set[Ident] = set()
                twice = [f.fragment_id for f in fragments if _ident(f.metadata) in seen or seen.add(_ident(f.metadata))]
                lance.LanceDataset.commit(latest, LanceOperation.Update(removed_fragment_ids=twice),
                                          read_version=latest.version, commit_lock=lock,
                                          commit_message=DROPS_UNPUBLISHED)
                continue
            foreign = any(ident not in base and ident not in wanted for ident in have)
            ours = lance.LanceDataset.commit(latest, update(have), read_version=latest.version, commit_lock=lock,
                                             commit_message=DROPS_UNPUBLISHED if foreign else None)
        except (LanceCommitConflictError, OSError) as e:
            if not is_commit_conflict(e):  # Lance's own conflicts, also when it gave up retrying them
                raise
            backoff(attempt, 0.01, 1.0)
            continue
        # exactly: each wanted fragment once (Lance's rebase of a commit made on an older version
        # can add a fragment the newer one already holds: a set would not see it twice)
        if Counter(_ident(f.metadata) for f in ours.get_fragments()) == Counter(wanted):
            return ours.version
        backoff(attempt, 0.01, 1.0)
    raise CommitConflictError(f"{what}: {max_attempts} commits conflicted; nothing published")
