"""Declared indexes: one Lance index kept on every published partition table (docs/indexes.md).

A declaration (:class:`IndexDeclaration`) is a root property of the namespace, stored in the
``__manifest`` table metadata under ``lancepart.index.<name>`` as JSON ``{column, index_type,
params, min_rows}`` (spec partitioning.md "Metadata Definition": root properties live there).
Every partition table with at least ``min_rows`` rows at its published ``read_version`` carries
a Lance index of that name; smaller tables stay unindexed (a search over them is a flat scan).

Table versions: Lance commits an index build, ``optimize_indices`` and ``drop_index`` on the
*latest* version of a table, whatever version the dataset was opened at, so a build on the
published version would carry another job's unpublished fragments along. :func:`apply_on_exact`
therefore makes the latest version hold exactly the published fragments first (the table
commit loop of :func:`lancepart.table_commit.commit_exactly`), runs the index operation on it,
and keeps the version made only if its fragments are still exactly those (else goes round).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import lance
import pyarrow as pa
from lance import LanceOperation

from lancepart.errors import CommitConflictError, InvalidArgumentError, SchemaMismatchError
from lancepart.lance_io import open_table
from lancepart.manifest import LanceCommitConflictError, backoff, is_commit_conflict
from lancepart.table_commit import _ident, commit_exactly

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

PROPERTY_PREFIX = "lancepart.index."
#: Tables with fewer rows than this at their published version are left unindexed (default).
DEFAULT_MIN_ROWS = 10_000
VECTOR_TYPES = frozenset({"IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_RQ", "IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ"})
TEXT_TYPES = frozenset({"INVERTED"})
SCALAR_TYPES = frozenset({"BTREE", "BITMAP", "LABEL_LIST"})
INDEX_TYPES = VECTOR_TYPES | TEXT_TYPES | SCALAR_TYPES
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True)
class IndexDeclaration:
    """One declared index: Lance index ``name`` of ``index_type`` on ``column`` built with
    ``params`` on every partition table of at least ``min_rows`` rows."""

    name: str
    column: str
    index_type: str
    params: dict[str, Any] = field(default_factory=dict)
    min_rows: int = DEFAULT_MIN_ROWS

    @property
    def key(self) -> str:
        return PROPERTY_PREFIX + self.name

    @property
    def is_vector(self) -> bool:
        return self.index_type in VECTOR_TYPES

    def to_json(self) -> str:
        return json.dumps({"column": self.column, "index_type": self.index_type, "params": self.params,
                           "min_rows": self.min_rows}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_property(cls, key: str, value: str) -> IndexDeclaration:
        obj = json.loads(value)
        return cls(key[len(PROPERTY_PREFIX):], obj["column"], obj["index_type"], dict(obj.get("params") or {}),
                   int(obj.get("min_rows", DEFAULT_MIN_ROWS)))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "column": self.column, "index_type": self.index_type, "params": self.params,
                "min_rows": self.min_rows}


def declarations(metadata: Mapping[str, str]) -> list[IndexDeclaration]:
    """The declarations among ``__manifest`` table metadata, by name (cheap: a scan of its keys).
    An unparsable one is skipped here and reported by ``verify``."""
    out = []
    for k in sorted(metadata):
        if k.startswith(PROPERTY_PREFIX):
            try:
                out.append(IndexDeclaration.from_property(k, metadata[k]))
            except (ValueError, TypeError, KeyError):
                continue
    return out


def declared_indexes(ns: NamespaceHandle) -> list[IndexDeclaration]:
    """The indexes declared in the snapshot ``ns`` reads (a read-only handle: as of its version)."""
    return declarations(ns.snapshot().metadata)


def _params(index_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
    try:
        out = json.loads(json.dumps(dict(params)))
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"index params for {index_type} must be JSON values: {e}") from None
    return out


def make_declaration(schema: pa.Schema, column: str, index_type: str, name: str | None, min_rows: int | None,
                     params: Mapping[str, Any]) -> IndexDeclaration:
    """Validate and build a declaration: the column exists and its type suits the index
    (vector: ``fixed_size_list<float>``; INVERTED: a string; LABEL_LIST: a list), typed errors
    naming the column and the types."""
    if not isinstance(index_type, str) or index_type.upper() not in INDEX_TYPES:
        raise InvalidArgumentError(f"index_type {index_type!r} is not one lancepart builds; choose one of "
                                   f"{', '.join(sorted(INDEX_TYPES))}")
    index_type = index_type.upper()
    if column not in schema.names:
        raise SchemaMismatchError(f"cannot index column {column!r}: the namespace schema has no such column "
                                  f"(columns: {', '.join(schema.names)})")
    t = schema.field(column).type
    if index_type in VECTOR_TYPES:
        ok = pa.types.is_fixed_size_list(t) and pa.types.is_floating(t.value_type)
        need = "fixed_size_list<float16|float32|float64>"
    elif index_type in TEXT_TYPES:
        ok = pa.types.is_string(t) or pa.types.is_large_string(t)
        need = "string"
    elif index_type == "LABEL_LIST":
        ok = pa.types.is_list(t) or pa.types.is_large_list(t)
        need = "list<...>"
    else:
        ok = not (pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t))
        need = "a primitive (number, string, date, timestamp, boolean)"
    if not ok:
        raise SchemaMismatchError(f"cannot build a {index_type} index on column {column!r} of type {t}: "
                                  f"{index_type} needs {need}")
    name = name or f"{column}_{index_type.lower()}"
    if not _NAME.match(name):
        raise InvalidArgumentError(f"index name {name!r}: use letters, digits and '_' (at most 64, not starting "
                                   f"with a digit)")
    min_rows = DEFAULT_MIN_ROWS if min_rows is None else min_rows
    if not isinstance(min_rows, int) or isinstance(min_rows, bool) or min_rows < 0:
        raise InvalidArgumentError(f"min_rows must be an integer >= 0, got {min_rows!r}")
    return IndexDeclaration(name, column, index_type, _params(index_type, params), min_rows)


# --------------------------------------------------------------------------- one table
def _fragment_ids(ds: lance.LanceDataset) -> set[int]:
    return {f.fragment_id for f in ds.get_fragments()}


def index_state(ds: lance.LanceDataset, decl: IndexDeclaration) -> str:
    """``missing`` (no index ``decl.name`` on ``ds``), ``stale`` (it names fragments ``ds`` no
    longer has: a compaction or overwrite replaced them, so it is rebuilt), ``partial`` (some
    fragments are outside it) or ``ok``."""
    found = [i for i in ds.describe_indices() if i.name == decl.name]
    if not found:
        return "missing"
    covered = {f for i in found for seg in i.segments for f in seg.fragment_ids}
    live = _fragment_ids(ds)
    if covered - live:
        return "stale"
    return "partial" if live - covered else "ok"


def _stale_on_write(ds: lance.LanceDataset, decl: IndexDeclaration) -> str:
    covered = {f for i in ds.describe_indices() if i.name == decl.name for seg in i.segments for f in seg.fragment_ids}
    live = _fragment_ids(ds)
    if not covered & live:
        return "stale"
    return "partial" if live - covered else "ok"


def build(ds: lance.LanceDataset, decl: IndexDeclaration) -> None:
    """Build (or rebuild) ``decl`` on ``ds``; Lance commits it on the table's latest version."""
    if decl.is_vector:
        ds.create_index(decl.column, decl.index_type, name=decl.name, replace=True, **decl.params)
    else:
        ds.create_scalar_index(decl.column, decl.index_type, name=decl.name, replace=True, **decl.params)


def _uuids(ds: lance.LanceDataset, name: str) -> frozenset[str]:
    return frozenset(seg.uuid for i in ds.describe_indices() if i.name == name for seg in i.segments)


class Maintain:
    """The index work one table version needs for ``decls`` (tables of at least ``min_rows``
    rows): build a missing index (if ``build_missing``), rebuild a stale one, ``optimize_indices``
    a partial one; ``rebuild`` names indexes to build again even if present (a replaced
    declaration): those whose segments are still the ones of ``base``. ``rebuild_stale=False``
    (a write): an index that still covers live fragments is only extended (a delete that removed
    whole fragments leaves it naming them; Lance skips those, and the next compaction rebuilds
    it), so a write never retrains a big index; one covering no live fragment (an overwrite)
    is rebuilt."""

    def __init__(self, decls: Iterable[IndexDeclaration], *, build_missing: bool = True,
                 rebuild: Iterable[str] = (), base: lance.LanceDataset | None = None,
                 storage_options: Mapping[str, str] | None = None, rebuild_stale: bool = True) -> None:
        self.decls = list(decls)
        self.rebuild_stale = rebuild_stale
        self.storage_options = dict(storage_options) if storage_options else None
        self.build_missing = build_missing
        self.rebuild = {n: _uuids(base, n) for n in rebuild} if base is not None else {}

    def todo(self, ds: lance.LanceDataset) -> list[tuple[IndexDeclaration, str]]:
        out = []
        rows = None
        for d in self.decls:
            state = index_state(ds, d)
            if d.name in self.rebuild and state != "missing" and _uuids(ds, d.name) == self.rebuild[d.name]:
                state = "stale"
            elif state == "stale" and not self.rebuild_stale:
                state = _stale_on_write(ds, d)
            if state == "ok" or (state == "missing" and not self.build_missing):
                continue
            rows = ds.count_rows() if rows is None else rows
            if rows < d.min_rows:
                continue
            out.append((d, state))
        return out

    def needed(self, ds: lance.LanceDataset) -> bool:
        return bool(self.todo(ds))

    def run(self, ds: lance.LanceDataset) -> None:
        for d, state in self.todo(ds):
            if state == "partial":
                ds.optimize.optimize_indices(index_names=[d.name])
            else:
                if any(i.name == d.name and list(i.field_names) != [d.column] for i in ds.describe_indices()):
                    ds.drop_index(d.name)  # a replaced declaration on another column: Lance will not replace it
                    ds = open_table(ds.uri, storage_options=self.storage_options)
                build(ds, d)
            ds = open_table(ds.uri, storage_options=self.storage_options)


class Drop:
    """Drop the indexes ``names`` from a table version."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)

    def needed(self, ds: lance.LanceDataset) -> bool:
        have = {i.name for i in ds.describe_indices()}
        return any(n in have for n in self.names)

    def run(self, ds: lance.LanceDataset) -> None:
        have = {i.name for i in ds.describe_indices()}
        for n in self.names:
            if n in have:
                ds.drop_index(n)


def apply_on_exact(uri: str, base_version: int, op: Maintain | Drop, storage_options: Mapping[str, str] | None,
                   what: str, *, max_attempts: int = 20) -> int:
    """Run ``op`` (index changes Lance commits on the latest version) so that the version it
    makes holds exactly the fragments of ``base_version``; return that version, or
    ``base_version`` when ``op`` has nothing to do there. Foreign fragments (another job's
    unpublished commit) in the latest version are removed first, and a missing base fragment
    restored (:func:`commit_exactly`); the version made is checked, and the work redone when a
    concurrent commit slipped in between."""
    so = dict(storage_options) if storage_options else None
    published = open_table(uri, version=base_version, storage_options=so)
    if not op.needed(published):
        return base_version
    base = {_ident(f.metadata) for f in published.get_fragments()}

    def update(have: Mapping[Any, int]) -> LanceOperation.Update:
        return LanceOperation.Update(removed_fragment_ids=[fid for ident, fid in have.items() if ident not in base])

    for attempt in range(max_attempts):
        latest = open_table(uri, storage_options=so)
        if {_ident(f.metadata) for f in latest.get_fragments()} != base:
            latest = open_table(uri, version=commit_exactly(uri, base_version, base, base, update, so, what),
                                   storage_options=so)
        if op.needed(latest):
            try:
                op.run(latest)
            except (LanceCommitConflictError, OSError, RuntimeError) as e:
                if not is_commit_conflict(e) and "conflict" not in str(e).lower():
                    raise
                backoff(attempt, 0.01, 1.0)  # a concurrent table commit won: go round on the new latest
                continue
            latest = open_table(uri, storage_options=so)
            if {_ident(f.metadata) for f in latest.get_fragments()} != base:
                # a writer's table commit landed beside ours: take its (unpublished) fragments out
                # again with a cheap commit rather than building the index again, which a writer
                # committing faster than the build takes could starve
                latest = open_table(uri, version=commit_exactly(uri, base_version, base, base, update, so, what),
                                       storage_options=so)
        if {_ident(f.metadata) for f in latest.get_fragments()} == base and not op.needed(latest):
            return latest.version
        backoff(attempt, 0.01, 1.0)
    raise CommitConflictError(f"{what}: {max_attempts} attempts lost to concurrent commits; nothing published")
