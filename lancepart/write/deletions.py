"""Deleting rows from one partition table on its published version: the rows a filter selects
(evaluated by DataFusion as reads evaluate it), their Lance deletion files, and the table commit
holding exactly the published fragments with those deletion files. A delete
(:mod:`lancepart.maintenance.delete`) and a merge (:mod:`lancepart.write.merge`) both remove
rows this way; the one publish path publishes the versions made.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from lancepart.errors import (
    InvalidArgumentError,
    InvalidFilterError,
    LancepartError,
)
from lancepart.model.ids import check_location
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import (
    join_uri,
)
from lancepart.storage.table_commit import _ident, commit_exactly

log = logging.getLogger("lancepart.maintenance")
_ADDR = "_rowaddr"


@dataclass(frozen=True)
class TableDelete:
    """The delete applied to one partition table: on ``base`` (its published version then),
    ``rows`` rows removed by committing ``version`` (None: no row matched, nothing committed)."""

    object_id: str
    location: str
    base: int | None
    version: int | None
    rows: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TableDelete:
        return cls(**json.loads(text))


# (object_id, location, published read_version, every row matches) of each table to delete from
TableTodo = tuple[str, str, int, bool]
# applies the delete to each table of a snapshot's todo list; the default runs them on local threads
ApplyTables = Callable[[int, Sequence[TableTodo], str | None], list[TableDelete]]


def matching_addresses(ds: lance.LanceDataset, schema: pa.Schema, filter: str, scan_filter: str | None,
                       fragments: Sequence[Any] | None = None) -> np.ndarray:
    """Row addresses (``_rowaddr``) of the rows of ``ds`` (of its ``fragments`` only, when given)
    for which ``filter`` is TRUE: the columns it names are read (``scan_filter`` pushed into the
    scan), then ``filter`` is applied exactly by DataFusion, as :meth:`NamespaceHandle.to_table`
    applies it."""
    from lancepart.evolution.schema_evolution import read_columns
    from lancepart.model.predicates import filter_columns

    cols = filter_columns(filter, schema)
    # by field id: a table in an older form of the schema names or types a column differently
    view = read_columns(ds, schema, cols, filter=scan_filter, with_row_address=True, fragments=fragments)
    return _matching(view, filter).column(_ADDR).to_numpy().astype(np.uint64)


def _matching(view: pa.Table, filter: str) -> pa.Table:
    """The rows of ``view`` for which ``filter`` is TRUE (DataFusion, as reads apply it)."""
    from lancepart.read.snapshot import apply_filter

    try:
        return apply_filter(view, filter)
    except InvalidArgumentError as e:
        raise InvalidFilterError(str(e)) from None


# rows of the scanned filter columns a delete evaluates in one DataFusion call, across tables
_MATCH_GROUP_ROWS = 1_000_000
# tables whose filter columns are being scanned, or scanned and not yet taken into a group
_SCANS_AHEAD = 32


def matching_addresses_of_tables(tables: Sequence[tuple[Hashable, Callable[[], lance.LanceDataset]]],
                                 schema: pa.Schema, filter: str, scan_filter: str | None
                                 ) -> dict[Hashable, np.ndarray]:
    """:func:`matching_addresses` of many tables (``(key, a function opening the table)``):
    each table's filter columns are read as there (on the thread pool), then ``filter`` is
    applied by DataFusion once per group of tables holding up to :data:`_MATCH_GROUP_ROWS`
    scanned rows, not once per table (a query costs about a millisecond however few its rows).
    Tables are opened a few dozen at a time and memory holds one group's scanned columns,
    whatever the number of tables."""
    from lancepart.evolution.schema_evolution import read_columns
    from lancepart.model.predicates import filter_columns
    from lancepart.util.parallel import stream_in_order

    cols = filter_columns(filter, schema)
    out: dict[Hashable, np.ndarray] = {}

    def scan(item: tuple[Hashable, Callable[[], lance.LanceDataset]]) -> pa.Table:
        return read_columns(item[1](), schema, cols, filter=scan_filter, with_row_address=True)

    owner_column = "__lp_table"
    while owner_column in schema.names:  # never the name of a column the filter may name
        owner_column += "_"

    def evaluate(keys: list[Hashable], views: list[pa.Table]) -> None:
        owner = np.repeat(np.arange(len(keys)), [v.num_rows for v in views])
        matched = _matching(pa.concat_tables(views).append_column(owner_column, pa.array(owner, pa.int64())), filter)
        which = matched.column(owner_column).to_numpy()
        addr = matched.column(_ADDR).to_numpy().astype(np.uint64)
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(len(keys) + 1))
        for i, key in enumerate(keys):
            out[key] = addr[order[bounds[i]:bounds[i + 1]]]

    keys: list[Hashable] = []
    views: list[pa.Table] = []
    rows = 0
    # one pool for every table, a few dozen scans ahead; views are evaluated once their rows add up
    scanned = stream_in_order(lambda item: (scan(item),), tables, window=_SCANS_AHEAD, buffered=1)
    for (key, _), view in zip(tables, scanned, strict=True):
        keys.append(key)
        views.append(view)
        rows += view.num_rows
        if rows >= _MATCH_GROUP_ROWS:
            evaluate(keys, views)
            keys, views, rows = [], [], 0
    if keys:
        evaluate(keys, views)
    return out


def address_predicate(addr: np.ndarray) -> str:
    """A Lance predicate selecting exactly the sorted row addresses ``addr``: each run of
    consecutive addresses as one ``BETWEEN`` (a clustered delete stays a short predicate), the
    runs found with numpy."""
    breaks = np.flatnonzero(np.diff(addr) != 1) + 1
    lo = addr[np.concatenate(([0], breaks))]
    hi = addr[np.concatenate((breaks - 1, [len(addr) - 1]))]
    single = lo == hi
    terms = []
    if single.any():
        terms.append(f"{_ADDR} IN ({', '.join(lo[single].astype(str).tolist())})")
    terms.extend(f"({_ADDR} BETWEEN {a} AND {b})" for a, b in zip(lo[~single].tolist(), hi[~single].tolist(),
                                                                   strict=True))
    return " OR ".join(terms)


def deletion_files(ds: lance.LanceDataset, addr: np.ndarray) -> tuple[list[FragmentMetadata], list[int]]:
    """Delete the rows at the addresses ``addr`` from the fragments of ``ds`` without committing:
    ``(fragments with their new deletion file, ids of fragments whose every row goes)``, what
    :func:`commit_deletions` (or a commit that also appends, :mod:`lancepart.write.merge`) takes."""
    addr = np.sort(addr)
    frag_of = (addr >> np.uint64(32)).astype(np.int64)
    frag_ids, starts, counts = np.unique(frag_of, return_index=True, return_counts=True)
    updated: list[FragmentMetadata] = []
    removed: list[int] = []
    for frag_id, start, count in zip(frag_ids.tolist(), starts.tolist(), counts.tolist(), strict=True):
        fragment = ds.get_fragment(frag_id)
        if count == fragment.count_rows():  # every live row matches: the fragment goes, no deletion file
            removed.append(frag_id)
            continue
        # by offset (Lance adds them to the fragment's deletion file): no predicate scanned over the fragment
        offsets = (addr[start:start + count] & np.uint64(0xFFFFFFFF)).tolist()
        md = fragment.delete_rows(offsets)
        if md is None:
            removed.append(frag_id)
        else:
            updated.append(md)
    return updated, removed


def commit_deletions(uri: str, base_version: int, updated: Sequence[FragmentMetadata], removed_ids: Sequence[int],
                     storage_options: Mapping[str, str] | None = None, max_attempts: int = 40) -> int:
    """Commit, on top of ``base_version``, the version whose fragments are exactly the base's with
    ``updated`` (same ids, a new deletion file) in place of theirs and without ``removed_ids``
    (every row deleted); return it. Like :func:`lancepart.storage.table_commit.commit_table`: a base
    fragment missing or altered in the latest version is restored first, foreign fragments are
    removed, and the version made is checked to be exactly that."""
    so = dict(storage_options) if storage_options else None
    published = open_table(uri, version=base_version, storage_options=so, reuse=True)
    base = {_ident(f.metadata): f.fragment_id for f in published.get_fragments()}
    changed = {f.id for f in updated} | set(removed_ids)
    wanted = {ident for ident, fid in base.items() if fid not in changed} | {_ident(f) for f in updated}

    def update(have: Mapping[Any, int]) -> LanceOperation.Update:
        remove = [fid for ident, fid in have.items()
                  if ident not in wanted and (fid in removed_ids or fid not in changed)]
        return LanceOperation.Update(removed_fragment_ids=remove, updated_fragments=list(updated))

    return commit_exactly(uri, base_version, set(base), wanted, update, so, f"partition table {uri} (delete)",
                          max_attempts=max_attempts, published=published)


@dataclass
class Evaluated:
    """What a delete found in one partition table version, kept for the next attempt of the same
    delete: each fragment's identity there, the matching rows' addresses, and the fragments with
    their deletion files (not committed). A rebase onto a newer published version evaluates only
    the fragments that are new or changed there (a concurrent append's, another delete's) and
    reuses the rest: the rows of an unchanged fragment match as they did."""

    idents: dict[int, Any]
    addr: np.ndarray
    updated: dict[int, FragmentMetadata]
    removed: set[int]


def _evaluate(ds: lance.LanceDataset, schema: pa.Schema, filter: str, scan_filter: str | None,
              prev: Evaluated | None, matched: np.ndarray | None = None) -> Evaluated:
    fragments = ds.get_fragments()
    idents = {f.fragment_id: _ident(f.metadata) for f in fragments}
    same = set() if prev is None else {fid for fid, ident in idents.items() if prev.idents.get(fid) == ident}
    other = [f for f in fragments if f.fragment_id not in same]
    addr = np.empty(0, dtype=np.uint64)
    if prev is None and matched is not None:  # found for this version with other tables' rows
        addr = np.asarray(matched, dtype=np.uint64)
    elif other:
        addr = matching_addresses(ds, schema, filter, scan_filter, None if prev is None else other)
    updated: dict[int, FragmentMetadata] = {}
    removed: set[int] = set()
    if len(addr):
        new_updated, new_removed = deletion_files(ds, addr)
        updated.update({f.id: f for f in new_updated})
        removed |= set(new_removed)
    if prev is not None and same:
        kept = prev.addr[np.isin((prev.addr >> np.uint64(32)).astype(np.int64), sorted(same))]
        addr = np.concatenate([kept, addr])
        updated.update({fid: f for fid, f in prev.updated.items() if fid in same})
        removed |= prev.removed & same
    return Evaluated(idents, addr, updated, removed)


def delete_in_table(root: str, object_id: str, location: str, base: int, schema: pa.Schema, filter: str,
                    scan_filter: str | None, storage_options: Mapping[str, str] | None = None, *,
                    whole: bool = False, cache: dict[str, Evaluated] | None = None,
                    matched: np.ndarray | None = None) -> TableDelete:
    """Delete the rows matching ``filter`` from version ``base`` of one partition table and commit
    the result (nothing when no row matches). ``whole``: the strict projection proved that every
    row matches (:func:`entire_tables`); every fragment goes without reading a row. ``cache``
    keeps what the earlier attempts of the same delete found (:class:`Evaluated`), so a rebase
    reads only the fragments a concurrent publish added or changed. ``matched``: the matching
    rows' addresses in version ``base``, already found (:func:`matching_addresses_of_tables`)."""
    so = dict(storage_options) if storage_options else None
    uri = join_uri(root, check_location(location, object_id, root))
    ds = open_table(uri, version=base, storage_options=so, reuse=True)
    if whole:
        fragments = ds.get_fragments()
        rows = sum(f.count_rows() for f in fragments)  # from the fragment metadata
        if not fragments:
            return TableDelete(object_id, location, base, None, 0)
        version = commit_deletions(uri, base, [], [f.fragment_id for f in fragments], so)
        return TableDelete(object_id, location, base, version, rows)
    key = f"{object_id}@{location}"
    found = _evaluate(ds, schema, filter, scan_filter, None if cache is None else cache.get(key), matched)
    if cache is not None:
        cache[key] = found
    if not len(found.addr):
        return TableDelete(object_id, location, base, None, 0)
    version = commit_deletions(uri, base, list(found.updated.values()), sorted(found.removed), so)
    if version <= base:
        raise LancepartError(f"{object_id}: table version {version} would move read_version {base} backwards")
    return TableDelete(object_id, location, base, version, len(found.addr))
