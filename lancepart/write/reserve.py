"""Find a write's partitions in ``__manifest``, and reserve the ones a write cannot create with
its data (docs/design.md §8).

A write finds its existing partitions here (:func:`reserve_partitions` with
``create_missing=False``: by lancepart's deterministic ids through the ``object_id`` index, else
by partition values, as another spec-following writer names them with random ids); the new
ones are born with their data and published by the write itself (:mod:`lancepart.write.create`).
Reserving (``create_missing=True``) is what remains for the rows of a write whose new partition
another writer published first (:func:`lancepart.write.create.adopt`), and for declared tables:
a partition gets its namespace rows (one per level), its table row with a fresh
``<hash>_<object_id>`` location and an empty Lance table whose version is pinned as
``read_version`` (never NULL), all in one ``__manifest`` commit; the empty table is created
*before* the commit so a published row never points at nothing. Object ids are deterministic
(docs/design.md §4): two writers reserving the same partition collide on ``object_id``; the
loser's commit conflicts, it reloads, finds the winner's row, adopts it and deletes its own
unused empty table.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import CorruptTableError
from lancepart.evolution.file_format import data_storage_version
from lancepart.model import ids as _ids
from lancepart.model.spec import PartitionSpec
from lancepart.storage import lance_io
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import (
    LOOKUP_LIMIT,
    Manifest,
    ManifestChanges,
    ManifestSnapshot,
    commit_lock,
    is_not_found,
    join_uri,
    metadata_json,
)
from lancepart.util.parallel import map_threads


@dataclass(frozen=True)
class TableRef:
    """Where a partition table lives and which version of it is published."""

    object_id: str
    location: str
    read_version: int | None
    read_branch: str | None = None
    read_tag: str | None = None


@dataclass(frozen=True)
class Reservation:
    tables: list[TableRef | None]  # one per input partition, in input order (None: missing, create_missing=False)
    created: int  # partitions this call added to __manifest
    snapshot: ManifestSnapshot
    retries: int


def create_empty_table(root: str, location: str, schema: pa.Schema,
                       storage_options: Mapping[str, str] | None, *, data_storage_version: str | None = None) -> int:
    """Create an empty partition table and return its version. Its file format version is
    ``data_storage_version`` (the namespace's, read from the caller's snapshot; None: Lance's
    own): the rows appended to it later are written in it."""
    uri = join_uri(root, location)
    so = dict(storage_options) if storage_options else None
    from lancepart.evolution.schema_evolution import table_schema

    # empty: its rows come in small appends, written uncompressed
    target = table_schema(schema, 0)
    ds = lance_io.write_dataset(target.empty_table(), uri, mode="create", storage_options=so,
                                commit_lock=commit_lock(uri, so), data_storage_version=data_storage_version)
    return ds.version


def remove_table_dir(root: str, location: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Best-effort removal of an unused table directory that only this writer knows of.

    Local roots: ``shutil.rmtree``. URIs (``s3://`` ...): Lance deletes every object under the
    table with the same storage options (``LanceDataset.drop``, which only accepts a directory
    holding a Lance table, so a wrong location cannot take anything else with it). A failure
    is logged, not raised: the directory is unreferenced and cleanup collects it.
    """
    uri = join_uri(root, location)
    if "://" not in root:
        shutil.rmtree(uri, ignore_errors=True)
        return
    try:
        lance.LanceDataset.drop(uri, storage_options=dict(storage_options) if storage_options else None,
                                ignore_not_found=True)
    except Exception as e:  # best effort: never fail a write over a leftover directory
        logging.getLogger("lancepart.write").warning("could not remove unused table directory %s (%s); "
                                                     "cleanup will collect it", uri, type(e).__name__)


def reserve_partitions(
    manifest: Manifest,
    spec: PartitionSpec,
    values: Sequence[pa.Array],
    table_schema: pa.Schema,
    *,
    max_retries: int = 20,
    prepared: Mapping[str, tuple[str, int]] | None = None,
    create_missing: bool = True,
) -> Reservation:
    """Make sure every partition in ``values`` (one array per spec field, one entry per
    distinct partition) has its namespace and table rows; return their table refs.

    ``prepared`` maps table object ids to ``(location, version)`` of empty tables the caller
    already created (and may have written fragments next to); they are used instead of new
    ones and never removed here, even when a concurrent writer's row wins.

    ``create_missing=False`` only looks partitions up: one that has no table row gets ``None``
    in :attr:`Reservation.tables` and nothing is created for it (the caller creates its table
    with its data and publishes it: :mod:`lancepart.write.create`); declared tables are still
    pinned.

    1. on each snapshot the ``__manifest`` commit works on: resolve the partitions' object ids,
       pin declared tables, create an empty table for each missing partition and add its rows
       (:meth:`_Reserving.mutate`);
    2. after the commit: adopt the rows that stand (a concurrent writer's too) and remove our
       empty tables that lost the race (:meth:`_Reserving.adopt`)."""
    if len(values) != len(spec.fields):
        raise ValueError(f"expected {len(spec.fields)} partition value arrays, got {len(values)}")
    op = _Reserving(manifest, spec, values, table_schema, prepared=prepared, create_missing=create_missing)
    snap, created, retries = manifest.update(op.mutate, max_retries=max_retries, what="partition reservation")
    return Reservation(tables=op.adopt(snap), created=created, snapshot=snap, retries=retries)


class _Reserving:
    """One :func:`reserve_partitions` call: the empty tables it made (or was given) and the table
    object ids the last snapshot resolved, kept across the attempts of its commit."""

    def __init__(self, manifest: Manifest, spec: PartitionSpec, values: Sequence[pa.Array], table_schema: pa.Schema,
                 *, prepared: Mapping[str, tuple[str, int]] | None, create_missing: bool) -> None:
        self.manifest, self.spec, self.values, self.table_schema = manifest, spec, values, table_schema
        self.prepared, self.create_missing = prepared or {}, create_missing
        self.n = len(values[0]) if values else 0
        self.level_ids = _ids.partition_ids(spec.id, values)
        self.made: dict[str, tuple[str, int]] = dict(self.prepared)  # table object_id -> (location, empty version)
        self.resolved: dict[str, list] = {}  # the object ids the last snapshot resolved (see mutate)

    def mutate(self, snap: ManifestSnapshot) -> tuple[ManifestChanges | None, int]:
        """The rows to commit on ``snap`` (pins of declared tables, rows of missing partitions) and
        how many tables they add."""
        manifest = self.manifest
        # Existing partitions are found by their partition values (another spec-following writer
        # names them with random ids); the deterministic ids name only what is new.
        ns_oids, table_oids = resolve_object_ids(snap, self.spec, self.values, self.level_ids)
        self.resolved["tables"] = table_oids
        existing = dict(zip(*snap.lookup(table_oids).select(["object_id", "location"]).to_pydict().values(),
                            strict=True))
        missing = [i for i in range(self.n) if table_oids[i] not in existing]
        for oid, location in existing.items():  # refuse an unsafe location before committing anything
            _ids.check_location(location, oid, manifest.root)
        declared = _pin_declared(manifest, snap, set(existing), self.table_schema, self.made)
        if not self.create_missing:
            missing = []
        if not missing and not declared:
            return None, 0
        pinned = snap.read_version_changes(declared).upserts if declared else snap.schema.empty_table()
        if not missing:
            return ManifestChanges(upserts=pinned), 0
        new_rows = self._add_missing(snap, ns_oids, table_oids, missing)
        tables = int(pc.sum(pc.equal(new_rows.column("object_type"), "table")).as_py())
        return ManifestChanges(upserts=pa.concat_tables([pinned, new_rows])), tables

    def _add_missing(self, snap: ManifestSnapshot, ns_oids: Sequence[Sequence[str] | None], table_oids: Sequence[str],
                     missing: Sequence[int]) -> pa.Table:
        """An empty table for each partition ``missing`` that has none of ours yet (created before
        the commit: a published row never points at nothing), and the rows that add them."""
        manifest = self.manifest
        fresh = list(dict.fromkeys(table_oids[i] for i in missing if table_oids[i] not in self.made))
        locations = [_ids.table_location(oid) for oid in fresh]
        file_version = data_storage_version(snap.metadata)
        versions = map_threads(lambda loc: create_empty_table(manifest.root, loc, self.table_schema,
                                                              manifest.storage_options,
                                                              data_storage_version=file_version), locations)
        self.made.update({oid: (loc, v) for oid, loc, v in zip(fresh, locations, versions, strict=True)})
        return partition_rows(snap, self.spec, self.values, ns_oids, table_oids, missing, self.made)

    def adopt(self, snap: ManifestSnapshot) -> list[TableRef | None]:
        """The table refs under the committed ``snap``; our own empty tables that lost the race removed."""
        manifest = self.manifest
        # Adopt rows that concurrent writers created; drop our own tables that lost the race.
        cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
        picked = {r["object_id"]: r for r in snap.lookup(self.resolved["tables"]).select(cols).to_pylist()}
        # all of them unless create_missing=False
        refs: list[TableRef | None] = [TableRef(**picked[oid]) if oid in picked else None
                                       for oid in self.resolved["tables"]]
        for ref in refs:  # rows a concurrent writer made are checked like our own
            if ref is not None:
                _ids.check_location(ref.location, ref.object_id, manifest.root)
        published = {r.location for r in refs if r is not None}
        for oid, (location, _) in self.made.items():
            if location not in published and oid not in self.prepared:
                remove_table_dir(manifest.root, location, manifest.storage_options)
        return refs


def partition_rows(snap: ManifestSnapshot, spec: PartitionSpec, values: Sequence[pa.Array],
                   ns_oids: Sequence[Sequence[str] | None], table_oids: Sequence[str], missing: Sequence[int],
                   made: Mapping[str, tuple[str, int]]) -> pa.Table:
    """The ``__manifest`` rows that add partitions ``missing`` (indexes into ``values``, as
    :func:`resolve_object_ids` resolved them under ``snap``): the namespace rows ``snap`` lacks
    and one table row each, whose ``location`` and ``read_version`` come from ``made``
    (table object id -> ``(location, version)``)."""
    # Built column-wise in Arrow: the partition values never go through Python objects (a
    # timestamp[ns] would become pandas' NaT, a date beyond year 9999 overflow).
    known = set(snap.lookup([o for i in missing for o in (ns_oids[i] or ())]).column("object_id").to_pylist())
    oids: list[str] = []
    tables: list[bool] = []
    source: list[int] = []  # the partition each row describes
    depth: list[int] = []  # how many partition fields the row carries (its level + 1)
    seen: set[str] = set()

    def add(object_id: str, table: bool, i: int, fields: int) -> None:
        seen.add(object_id)
        oids.append(object_id)
        tables.append(table)
        source.append(i)
        depth.append(fields)

    for i in missing:
        oid = table_oids[i]
        if oid in seen:
            continue
        for level in range(len(spec.fields)):
            ns_oid = ns_oids[i][level]
            if ns_oid not in seen and ns_oid not in known:
                add(ns_oid, False, i, level + 1)
        add(oid, True, i, len(spec.fields))
    return _manifest_rows(snap.schema, spec, values, oids, tables, source, depth,
                          [made[o][0] if t else None for o, t in zip(oids, tables, strict=True)],
                          [made[o][1] if t else None for o, t in zip(oids, tables, strict=True)])


def _value_keys(arrays: Sequence[pa.Array | pa.ChunkedArray]) -> dict[str, pa.Array]:
    """Join keys for partition values, two per field: the canonical bytes of the value (the
    encoding the deterministic ids hash: NaN is one value, -0.0 equals 0.0) and a NULL flag,
    so NULL matches NULL and nothing else."""
    from lancepart.model.murmur3 import canonical_bytes

    keys: dict[str, pa.Array] = {}
    for j, a in enumerate(arrays):
        b = canonical_bytes(a)
        keys[f"__k{j}"] = pc.fill_null(b, pa.scalar(b"", pa.large_binary()))
        keys[f"__n{j}"] = pc.is_null(b).cast(pa.int8())
    return keys


def _first_match(left: pa.Table, right: pa.Table, keys: list[str], preferred: pa.Array) -> dict[int, str]:
    """``left.__i`` -> the ``object_id`` of a ``right`` row with equal ``keys``; with several, the
    ``preferred`` one (lancepart's deterministic id for that partition), else the smallest."""
    if not left.num_rows or not right.num_rows:
        return {}
    j = left.join(right, keys=keys, join_type="inner")
    if not j.num_rows:
        return {}
    i = j.column("__i")
    pref = pc.not_equal(j.column("__oid"), preferred.take(i)).cast(pa.int8())
    j = pa.table({"__i": i, "__pref": pref, "__oid": j.column("__oid")}).sort_by(
        [("__i", "ascending"), ("__pref", "ascending"), ("__oid", "ascending")])
    idx = j.column("__i").to_numpy()
    first = np.r_[True, idx[1:] != idx[:-1]] if len(idx) else np.zeros(0, bool)
    return dict(zip(idx[first].tolist(), j.column("__oid").filter(pa.array(first)).to_pylist(), strict=True))


def resolve_object_ids(snap: ManifestSnapshot, spec: PartitionSpec, values: Sequence[pa.Array],
                       level_ids: Sequence[Sequence[str]]) -> tuple[list[list[str] | None], list[str]]:
    """The ``__manifest`` object ids of each partition in ``values`` under ``snap``: per partition
    its namespace ids (one per level; None when its table exists) and its table id.

    Spec "Namespace Naming": partition namespace ids are random, so an existing partition is found
    by its ``partition_field_*`` values for this spec version (NULL-aware), never by recomputing an
    id: first the table rows, then, for a partition that has no table yet, level by level the
    namespace rows under the parent found so far (another writer may have made the ``2025``
    namespace and lancepart adds ``US`` under it). Only what does not exist gets lancepart's
    deterministic id, which is what two lancepart writers then collide on. Vectorised: one hash
    join per level over the spec's rows of ``__manifest`` (:class:`_SpecRows`).
    """
    n = len(values[0]) if values else 0
    k = len(spec.fields)
    own_tables = [_ids.table_object_id(spec.id, ids) for ids in level_ids]
    if n and len(own_tables) <= LOOKUP_LIMIT and _own_tables_exist(snap, own_tables):
        return [None] * n, own_tables
    rows = snap.rows
    names = set(rows.column_names)
    if not n or not rows.num_rows or any(f.column_name not in names for f in spec.fields):
        return [[_ids.namespace_object_id(spec.id, ids[: lv + 1]) for lv in range(k)] for ids in level_ids], own_tables
    spec_rows = _SpecRows(rows, spec, values)
    found = spec_rows.match_tables(own_tables)
    table_oids = [found.get(i, own_tables[i]) for i in range(n)]
    ns_oids: list[list[str] | None] = [None] * n
    todo = np.array([i for i in range(n) if i not in found], np.int64)
    if not len(todo):
        return ns_oids, table_oids
    for i, (chain, parent) in spec_rows.match_namespaces(todo, level_ids).items():
        ns_oids[i] = chain
        table_oids[i] = f"{parent}{_ids.DELIMITER}{_ids.TABLE_NAME}"
    return ns_oids, table_oids


def _own_tables_exist(snap: ManifestSnapshot, own_tables: list[str]) -> bool:
    """Whether every partition has its table row under lancepart's own id: the one preferred among
    several rows with its values, so nothing else needs reading."""
    own = snap.lookup(own_tables)
    return set(own.filter(pc.equal(own.column("object_type"), "table")).column("object_id").to_pylist()) \
        >= set(own_tables)


def _join_keys(fields: int) -> list[str]:
    return [f"__{c}{j}" for j in range(fields) for c in ("k", "n")]


class _SpecRows:
    """The rows of ``__manifest`` joined with a spec version's partition values by value: a table
    of candidate rows (:meth:`candidates`) against a table of input partitions (:meth:`inputs`)."""

    def __init__(self, rows: pa.Table, spec: PartitionSpec, values: Sequence[pa.Array]) -> None:
        self.spec, self.values = spec, values
        self.n = len(values[0]) if values else 0
        self.oid = rows.column("object_id")
        self.in_spec = pc.starts_with(self.oid, spec.namespace + _ids.DELIMITER)
        self.depth = pc.count_substring(self.oid, _ids.DELIMITER)
        self.kind = rows.column("object_type")
        try:
            self.part = [rows.column(f.column_name).cast(f.result_type) for f in spec.fields]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            self.part = None  # a column of another type: nothing can match by value

    def candidates(self, mask: pa.Array, fields: int) -> pa.Table:
        if self.part is None:
            return pa.table({"__oid": pa.array([], pa.utf8())})
        mask = pc.fill_null(mask, False)
        cols = {"__oid": self.oid.filter(mask).combine_chunks(),
                **_value_keys([c.filter(mask).combine_chunks() for c in self.part[:fields]])}
        return pa.table(cols)

    def inputs(self, sel: np.ndarray, fields: int) -> pa.Table:
        take = pa.array(sel, pa.int64())
        return pa.table({"__i": take, **_value_keys([v.take(take) for v in self.values[:fields]])})

    def match_tables(self, own_tables: list[str]) -> dict[int, str]:
        """Input partition -> the object id of its table row, for the partitions that have one."""
        k = len(self.spec.fields)
        table_rows = self.candidates(pc.and_(pc.and_(self.in_spec, pc.equal(self.kind, "table")),
                                             pc.and_(pc.equal(self.depth, k + 1),
                                                     pc.ends_with(self.oid, _ids.DELIMITER + _ids.TABLE_NAME))), k)
        return _first_match(self.inputs(np.arange(self.n), k), table_rows, _join_keys(k),
                            pa.array(own_tables, pa.utf8()))

    def match_namespaces(self, todo: np.ndarray, level_ids: Sequence[Sequence[str]]
                         ) -> dict[int, tuple[list[str], str]]:
        """Input partitions ``todo`` (without a table row) -> their namespace ids, level by level the
        row under the parent found so far, else lancepart's own id, and the last level's id."""
        parents = {int(i): self.spec.namespace for i in todo}
        chains: dict[int, list[str]] = {int(i): [] for i in todo}
        for level in range(len(self.spec.fields)):
            mask = pc.and_(pc.and_(self.in_spec, pc.equal(self.kind, "namespace")), pc.equal(self.depth, level + 1))
            right = self.candidates(mask, level + 1)
            right = right.append_column("__parent", pc.replace_substring_regex(right.column("__oid"), r"\$[^$]*$", ""))
            left = self.inputs(todo, level + 1).append_column("__parent",
                                                              pa.array([parents[int(i)] for i in todo], pa.utf8()))
            own = [f"{parents[int(i)]}{_ids.DELIMITER}{level_ids[int(i)][level]}" for i in todo]
            preferred = pa.array([None] * self.n, pa.utf8()).to_pylist()
            for i, o in zip(todo.tolist(), own, strict=True):
                preferred[i] = o
            hit = _first_match(left, right, [*_join_keys(level + 1), "__parent"], pa.array(preferred, pa.utf8()))
            for i, o in zip(todo.tolist(), own, strict=True):
                chosen = hit.get(i, o)
                chains[i].append(chosen)
                parents[i] = chosen
        return {i: (chains[i], parents[i]) for i in todo.tolist()}


def _pin_declared(manifest: Manifest, snap: ManifestSnapshot, oids: set[str], schema: pa.Schema,
                  made: dict[str, tuple[str, int]]) -> dict[str, int]:
    """Tables among ``oids`` that are declared only (row with ``read_version``, ``read_branch`` and
    ``read_tag`` NULL, no table in its directory yet, as Lance's ``declare_table`` leaves them):
    create each as an empty table in its directory and return ``object_id -> version`` to publish
    as its ``read_version`` with the reservation, so writes to it work like to any partition."""
    if not oids:
        return {}
    touched = snap.lookup(sorted(oids))
    unpinned = pc.and_(pc.and_(pc.is_null(touched.column("read_version")), pc.is_null(touched.column("read_branch"))),
                       pc.is_null(touched.column("read_tag")))
    pins = {}
    for row in touched.filter(unpinned).select(["object_id", "location"]).to_pylist():  # declared ones only
        oid = row["object_id"]
        location = _ids.check_location(row["location"], oid, manifest.root)
        if oid in made and made[oid][0] == location:
            pins[oid] = made[oid][1]
            continue
        if table_exists(manifest.root, location, manifest.storage_options):
            continue  # all NULL reads the latest version of a table that exists (spec "Read Behavior")
        try:
            version = create_empty_table(manifest.root, location, schema, manifest.storage_options,
                                         data_storage_version=data_storage_version(snap.metadata))
        except (OSError, ValueError) as e:
            if table_exists(manifest.root, location, manifest.storage_options):
                continue  # a concurrent writer created it first
            raise CorruptTableError(f"declared partition table {oid!r} at {location}: cannot create it: {e}") from e
        made[oid] = (location, version)
        pins[oid] = version
    return pins


def table_exists(root: str, location: str, storage_options: Mapping[str, str] | None) -> bool:
    """Whether a Lance table exists at ``location`` (its directory holds a version)."""
    try:
        open_table(join_uri(root, location), storage_options=dict(storage_options) if storage_options else None)
    except ValueError as e:
        if is_not_found(e):
            return False
        raise
    return True


def _manifest_rows(schema: pa.Schema, spec: PartitionSpec, values: Sequence[pa.Array], oids: Sequence[str],
                   tables: Sequence[bool], source: Sequence[int], depth: Sequence[int],
                   locations: Sequence[str | None], versions: Sequence[int | None]) -> pa.Table:
    """``__manifest`` rows of ``schema``: namespace rows (``metadata`` ``{}``) and table rows
    (``location``, ``read_version``); row ``r`` carries the values of partition ``source[r]``
    for the first ``depth[r]`` spec fields, NULL in every other partition column."""
    m = len(oids)
    by_column = {f.column_name: k for k, f in enumerate(spec.fields)}
    cols = []
    for f in schema:
        if f.name == "object_id":
            col = pa.array(oids, pa.utf8())
        elif f.name == "object_type":
            col = pa.array(["table" if t else "namespace" for t in tables], pa.utf8())
        elif f.name == "location":
            col = pa.array(locations, pa.utf8())
        elif f.name == "metadata":
            col = pa.array([None if t else metadata_json({}) for t in tables], pa.utf8())
        elif f.name == "read_version":
            col = pa.array(versions, pa.uint64())
        elif f.name in by_column:
            k = by_column[f.name]
            take = pa.array([i if d > k else None for i, d in zip(source, depth, strict=True)], pa.int64())
            col = values[k].take(take)
        else:
            col = pa.nulls(m, f.type)
        cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)
