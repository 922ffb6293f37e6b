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
commit loop of :func:`lancepart.storage.table_commit.commit_exactly`), runs the index operation on it,
and keeps the version made only if its fragments are still exactly those (else goes round).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.dataset import Index

from lancepart.errors import CommitConflictError, InvalidArgumentError, SchemaMismatchError
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import LanceCommitConflictError, backoff, commit_lock, is_commit_conflict
from lancepart.storage.table_commit import _ident, commit_exactly, file_path

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


def _field_id(ds: lance.LanceDataset, column: str) -> int | None:
    """The Lance field id of the top-level column ``column`` in ``ds`` (None: no such column)."""
    return next((f.id() for f in ds.lance_schema.fields() if f.name() == column), None)


def _files_by_id(ds: lance.LanceDataset) -> dict[int, frozenset[str]]:
    return {f.fragment_id: frozenset(file_path(df) for df in f.metadata.files) for f in ds.get_fragments()}


@dataclass
class Prepared:
    """One declared index built on one table version and *not committed*
    (``create_index_uncommitted``): the expensive part of a build, done once per operation. It is
    committed later, with a cheap ``CreateIndex`` commit, on whichever version the publish needs:
    restricted to the fragments that version still holds unchanged (same id, same data files;
    rows deleted since are masked by Lance at query time), the rest brought in by
    ``optimize_indices`` (a delta over the new fragments only). So a table whose published version
    moves while its index is built (a writer appends and publishes) costs a commit, not a second
    build."""

    definition: str  # the declaration's JSON it was built for
    field_id: int
    segment: Any  # lance.dataset.Index
    covers: dict[int, frozenset[str]]  # fragment id -> its data files when built
    rows: int

    def usable_on(self, ds: lance.LanceDataset) -> set[int]:
        """The fragment ids of ``ds`` this build indexes as they are there."""
        return {fid for fid, files in _files_by_id(ds).items() if self.covers.get(fid) == files}

    def worth_using(self, ds: lance.LanceDataset, decl: IndexDeclaration, column: str | None = None) -> bool:
        """Built for this definition on this column (``column``: its name in ``ds``), and covering
        at least half of ``ds``'s rows (else the delta would be the bigger part: build anew)."""
        if self.definition != decl.to_json() or _field_id(ds, column or decl.column) != self.field_id:
            return False
        ids = self.usable_on(ds)
        covered = sum(f.metadata.physical_rows or 0 for f in ds.get_fragments() if f.fragment_id in ids)
        return bool(ids) and 2 * covered >= ds.count_rows()

    def to_blob(self) -> str:
        """Text to carry it between processes (a Spark task and the driver)."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def from_blob(blob: str) -> Prepared:
        return pickle.loads(base64.b64decode(blob))


#: Builds kept across the attempts of one operation: (table uri, index name) -> Prepared
PreparedCache = dict[tuple[str, str], Prepared]


def prepare(ds: lance.LanceDataset, decl: IndexDeclaration, column: str | None = None) -> Prepared:
    """Build ``decl`` over every fragment of the version ``ds`` is open at, without committing
    it (a segment under ``_indices/`` that no version names yet). ``column``: the declared
    column's name in this table (default the declared name)."""
    column = column or decl.column
    frags = [f.fragment_id for f in ds.get_fragments()]
    fid = _field_id(ds, column)
    if fid is None:
        raise SchemaMismatchError(f"cannot index column {decl.column!r}: table {ds.uri} version {ds.version} has "
                                  f"no such column")
    # Lance refuses a build under a name taken on another column (a redeclared index): build it
    # under a free name; the name lives only in the segment's metadata, set when it is committed
    taken = any(i.name == decl.name and list(i.fields) != [fid] for i in ds.describe_indices())
    seg = ds.create_index_uncommitted(column, decl.index_type, name=decl.name + "__lp_rebuild" if taken
                                      else decl.name, replace=True, fragment_ids=frags, **decl.params)
    if not decl.is_vector:  # scalar segments are staged: merged into their final files before a commit
        seg = ds.merge_existing_index_segments([seg])
    seg = dataclasses.replace(seg, name=decl.name)
    return Prepared(decl.to_json(), fid, seg, _files_by_id(ds), ds.count_rows())


def build(ds: lance.LanceDataset, decl: IndexDeclaration) -> None:
    """Build (or rebuild) ``decl`` on ``ds`` and commit it on the table's latest version
    (used where no concurrent writer can be: a table no ``__manifest`` row names yet)."""
    commit_prepared(ds, decl, prepare(ds, decl))


def _segments(ds: lance.LanceDataset, name: str) -> list[Index]:
    """The segments of index ``name`` in ``ds`` as Lance operations name them (to remove them)."""
    out = []
    for i in ds.describe_indices():
        if i.name == name:
            out += [Index(uuid=s.uuid, name=i.name, fields=list(i.fields), fragment_ids=s.fragment_ids,
                          dataset_version=s.dataset_version_at_last_update, index_version=s.index_version)
                    for s in i.segments]
    return out


def commit_prepared(ds: lance.LanceDataset, decl: IndexDeclaration, prep: Prepared,
                    storage_options: Mapping[str, str] | None = None) -> lance.LanceDataset:
    """Commit ``prep`` as index ``decl.name`` on ``ds`` (the version to build on), replacing the
    segments of that name ``ds`` has: one ``CreateIndex`` commit, no data read; the version made."""
    seg = dataclasses.replace(prep.segment, fragment_ids=sorted(prep.usable_on(ds)))
    op = LanceOperation.CreateIndex(new_indices=[seg], removed_indices=_segments(ds, decl.name))
    so = dict(storage_options) if storage_options else None
    return lance.LanceDataset.commit(ds, op, read_version=ds.version, commit_lock=commit_lock(ds.uri, so),
                                     storage_options=so)


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
    is rebuilt.

    Two steps (:func:`apply_on_exact`): :meth:`prepare` builds what must be built, uncommitted,
    on the table's published version (the expensive part, once: ``prepared`` keeps it across
    an operation's attempts); :meth:`commit` commits it on an exact version (cheap)."""

    def __init__(self, decls: Iterable[IndexDeclaration], *, build_missing: bool = True,
                 rebuild: Iterable[str] = (), base: lance.LanceDataset | None = None,
                 storage_options: Mapping[str, str] | None = None, rebuild_stale: bool = True,
                 column_of: Callable[[pa.Schema, str], str | None] | None = None) -> None:
        self.decls = list(decls)
        # a declared column's name in a table (a table keeps a renamed column's old name until it is
        # rewritten: lancepart.evolution.schema_evolution.table_column finds it by field id); default: the same name
        self.column_of = column_of or (lambda table, column: column if column in table.names else None)
        self.rebuild_stale = rebuild_stale
        self.storage_options = dict(storage_options) if storage_options else None
        self.build_missing = build_missing
        self.rebuild = {n: _uuids(base, n) for n in rebuild} if base is not None else {}

    def todo(self, ds: lance.LanceDataset) -> list[tuple[IndexDeclaration, str]]:
        out = []
        rows = None
        for d in self.decls:
            if self.column_of(ds.schema, d.column) is None:
                continue  # written before the column existed: nothing to index
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

    def prepare(self, published: lance.LanceDataset, prepared: PreparedCache) -> None:
        """Build, uncommitted, every index ``published`` needs built (missing, stale, to
        rebuild) unless ``prepared`` holds a build of it worth using there."""
        for d, state in self.todo(published):
            key = (published.uri, d.name)
            column = self.column_of(published.schema, d.column)
            if state != "partial" and not (key in prepared and prepared[key].worth_using(published, d, column)):
                prepared[key] = prepare(published, d, column)

    def commit(self, ds: lance.LanceDataset, prepared: PreparedCache) -> None:
        """On ``ds`` (a version holding exactly the published fragments): commit each prepared
        build that is due, then extend each index missing fragments (``optimize_indices``:
        only the fragments outside it are read)."""
        for d, state in self.todo(ds):
            if state != "partial":
                prep = prepared.get((ds.uri, d.name))
                column = self.column_of(ds.schema, d.column)
                if prep is None or not prep.worth_using(ds, d, column):
                    prep = prepared[(ds.uri, d.name)] = prepare(ds, d, column)
                ds = commit_prepared(ds, d, prep, self.storage_options)
                if index_state(ds, d) == "ok":
                    continue
            ds.optimize.optimize_indices(index_names=[d.name])
            ds = open_table(ds.uri, storage_options=self.storage_options)


class Drop:
    """Drop the indexes ``names`` from a table version."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)

    def needed(self, ds: lance.LanceDataset) -> bool:
        have = {i.name for i in ds.describe_indices()}
        return any(n in have for n in self.names)

    def prepare(self, published: lance.LanceDataset, prepared: PreparedCache) -> None:
        return None

    def commit(self, ds: lance.LanceDataset, prepared: PreparedCache) -> None:
        have = {i.name for i in ds.describe_indices()}
        for n in self.names:
            if n in have:
                ds.drop_index(n)


def apply_on_exact(uri: str, base_version: int, op: Maintain | Drop, storage_options: Mapping[str, str] | None,
                   what: str, *, max_attempts: int = 20, prepared: PreparedCache | None = None) -> int:
    """Make the index changes ``op`` names on version ``base_version`` of the table at ``uri``
    (its published version, or the version an operation is about to publish) and return the
    version holding them with exactly the fragments of ``base_version``; ``base_version`` when
    there is nothing to do.

    Lance commits an index operation on the table's *latest* version, which may hold another
    job's unpublished fragments (docs/design.md §8 hazard 2), and a writer may commit to the
    table at any moment. So the expensive part, building an index, is done once and
    uncommitted on ``base_version`` itself (:meth:`Maintain.prepare`; ``prepared`` keeps the
    builds across the attempts of one operation, so an operation whose published version moved
    does not build again: its build is committed on the new version, and only the new
    fragments are indexed as a delta). Each attempt is cheap: make the latest version hold
    exactly the base's fragments (:func:`commit_exactly`: a restore, or a commit taking foreign
    fragments out), commit the index on it, and keep the version made if it is still exact;
    a concurrent commit that slipped in between is taken out again with one more cheap commit.
    The number of attempts therefore does not grow with the build's length or a writer's
    rate."""
    so = dict(storage_options) if storage_options else None
    published = open_table(uri, version=base_version, storage_options=so)
    if not op.needed(published):
        return base_version
    prepared = {} if prepared is None else prepared
    op.prepare(published, prepared)
    base = {_ident(f.metadata) for f in published.get_fragments()}

    def update(have: Mapping[Any, int]) -> LanceOperation.Update:
        return LanceOperation.Update(removed_fragment_ids=[fid for ident, fid in have.items() if ident not in base])

    def exact() -> lance.LanceDataset:
        latest = open_table(uri, storage_options=so)
        # each fragment once: a fragment twice (Lance's rebase of a writer's commit can add one the
        # version already holds) doubles its rows though the set of fragments is the same
        if Counter(_ident(f.metadata) for f in latest.get_fragments()) == Counter(base):
            return latest
        return open_table(uri, version=commit_exactly(uri, base_version, base, base, update, so, what),
                          storage_options=so)

    for attempt in range(max_attempts):
        try:
            latest = exact()
            if op.needed(latest):
                op.commit(latest, prepared)
                latest = exact()  # a writer's table commit landed beside ours: take its fragments out again
        except (LanceCommitConflictError, OSError, RuntimeError) as e:
            if not is_commit_conflict(e) and "conflict" not in str(e).lower():
                raise
            backoff(attempt, 0.01, 0.5)  # a concurrent table commit won: go round on the new latest
            continue
        if not op.needed(latest):
            return latest.version
        backoff(attempt, 0.01, 0.5)
    raise CommitConflictError(f"{what}: {max_attempts} attempts lost to concurrent commits; nothing published")
