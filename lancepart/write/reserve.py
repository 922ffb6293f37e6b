"""Reserve partitions: namespace rows, table rows and empty tables (DESIGN-NOTES §8, step 2).

A new partition gets its namespace rows (one per level), its table row with a fresh
``<hash>_<object_id>`` location and an empty Lance table whose version is pinned as
``read_version`` (never NULL), all in one ``__manifest`` commit. The empty table is
created *before* the commit so a published row never points at nothing. Object ids are
deterministic (DESIGN-NOTES §4): two writers reserving the same partition collide on
``object_id``; the loser's commit conflicts, it reloads, finds the winner's row, adopts
it and deletes its own unused empty table.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import lance
import pyarrow as pa

from lancepart import ids as _ids
from lancepart.manifest import Manifest, ManifestSnapshot, commit_lock, join_uri, metadata_json
from lancepart.parallel import map_threads
from lancepart.spec import PartitionSpec


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
    tables: list[TableRef]  # one per input partition, in input order
    created: int  # partitions this call added to __manifest
    snapshot: ManifestSnapshot
    retries: int


def create_empty_table(root: str, location: str, schema: pa.Schema,
                       storage_options: Mapping[str, str] | None) -> int:
    """Create an empty partition table and return its version."""
    uri = join_uri(root, location)
    so = dict(storage_options) if storage_options else None
    ds = lance.write_dataset(schema.empty_table(), uri, mode="create", storage_options=so,
                             commit_lock=commit_lock(uri, so))
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
) -> Reservation:
    """Make sure every partition in ``values`` (one array per spec field, one entry per
    distinct partition) has its namespace and table rows; return their table refs.

    ``prepared`` maps table object ids to ``(location, version)`` of empty tables the caller
    already created (and may have written fragments next to); they are used instead of new
    ones and never removed here, even when a concurrent writer's row wins."""
    if len(values) != len(spec.fields):
        raise ValueError(f"expected {len(spec.fields)} partition value arrays, got {len(values)}")
    n = len(values[0]) if values else 0
    level_ids = _ids.partition_ids(spec.id, values)
    table_oids = [_ids.table_object_id(spec.id, row) for row in level_ids]
    made: dict[str, tuple[str, int]] = dict(prepared or {})  # table object_id -> (location, empty version)

    def mutate(snap: ManifestSnapshot):
        index = snap.row_index()
        missing = [i for i in range(n) if table_oids[i] not in index]
        if len(missing) < n:  # partitions that exist: refuse an unsafe location before committing anything
            location = snap.rows.column("location")
            for oid in {table_oids[i] for i in range(n)} - {table_oids[i] for i in missing}:
                _ids.check_location(location[index[oid]].as_py(), oid, manifest.root)
        if not missing:
            return None, 0
        fresh = list(dict.fromkeys(table_oids[i] for i in missing if table_oids[i] not in made))
        locations = [_ids.table_location(oid) for oid in fresh]
        versions = map_threads(lambda loc: create_empty_table(manifest.root, loc, table_schema,
                                                              manifest.storage_options), locations)
        made.update({oid: (loc, v) for oid, loc, v in zip(fresh, locations, versions, strict=True)})
        # New rows, built column-wise in Arrow: the partition values never go through Python
        # objects (a timestamp[ns] would become pandas' NaT, a date beyond year 9999 overflow).
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
                ns_oid = _ids.namespace_object_id(spec.id, level_ids[i][: level + 1])
                if ns_oid not in seen and ns_oid not in index:
                    add(ns_oid, False, i, level + 1)
            add(oid, True, i, len(spec.fields))
        new_rows = _manifest_rows(snap.rows.schema, spec, values, oids, tables, source, depth,
                                  [made[o][0] if t else None for o, t in zip(oids, tables, strict=True)],
                                  [made[o][1] if t else None for o, t in zip(oids, tables, strict=True)])
        return pa.concat_tables([snap.rows, new_rows]), sum(tables)

    snap, created, retries = manifest.update(mutate, max_retries=max_retries, what="partition reservation")
    # Adopt rows that concurrent writers created; drop our own tables that lost the race.
    index = snap.row_index()
    picked = snap.rows.take(pa.array([index[oid] for oid in table_oids], pa.int64()))
    cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
    refs = [TableRef(**r) for r in picked.select(cols).to_pylist()]
    for ref in refs:  # rows a concurrent writer made are checked like our own
        _ids.check_location(ref.location, ref.object_id, manifest.root)
    published = {r.location for r in refs}
    for oid, (location, _) in made.items():
        if location not in published and oid not in (prepared or {}):
            remove_table_dir(manifest.root, location, manifest.storage_options)
    return Reservation(tables=refs, created=created, snapshot=snap, retries=retries)


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
