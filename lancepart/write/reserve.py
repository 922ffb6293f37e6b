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

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import lance
import pyarrow as pa

from lancepart import ids as _ids
from lancepart.manifest import Manifest, ManifestSnapshot, join_uri, metadata_json
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
    ds = lance.write_dataset(schema.empty_table(), join_uri(root, location), mode="create",
                             storage_options=dict(storage_options) if storage_options else None)
    return ds.version


def remove_table_dir(root: str, location: str) -> None:
    """Best-effort removal of an unused empty table directory (local roots only; cleanup
    collects it elsewhere)."""
    if "://" not in root:
        shutil.rmtree(join_uri(root, location), ignore_errors=True)


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
    # python values per partition, for the partition_field_* columns
    pyvalues = [v.to_pylist() for v in values]
    made: dict[str, tuple[str, int]] = dict(prepared or {})  # table object_id -> (location, empty version)

    def mutate(snap: ManifestSnapshot):
        missing = [i for i in range(n) if not snap.has(table_oids[i])]
        if not missing:
            return None, 0
        fresh = list(dict.fromkeys(table_oids[i] for i in missing if table_oids[i] not in made))
        locations = [_ids.table_location(oid) for oid in fresh]
        versions = map_threads(lambda loc: create_empty_table(manifest.root, loc, table_schema,
                                                              manifest.storage_options), locations)
        made.update({oid: (loc, v) for oid, loc, v in zip(fresh, locations, versions, strict=True)})
        records: list[dict] = []
        seen: set[str] = set()
        for i in dict.fromkeys(missing):  # partitions, not rows
            oid = table_oids[i]
            if oid in seen:
                continue
            seen.add(oid)
            for level in range(len(spec.fields)):
                ns_oid = _ids.namespace_object_id(spec.id, level_ids[i][: level + 1])
                if ns_oid in seen or snap.has(ns_oid):
                    continue
                seen.add(ns_oid)
                records.append({
                    "object_id": ns_oid, "object_type": "namespace", "metadata": metadata_json({}),
                    **{f.column_name: pyvalues[k][i] for k, f in enumerate(spec.fields[: level + 1])},
                })
            location, version = made[oid]
            records.append({
                "object_id": oid, "object_type": "table", "location": location, "read_version": version,
                **{f.column_name: pyvalues[k][i] for k, f in enumerate(spec.fields)},
            })
        new_rows = pa.Table.from_pylist(records, schema=snap.rows.schema)
        return pa.concat_tables([snap.rows, new_rows]), len({r["object_id"] for r in records
                                                             if r["object_type"] == "table"})

    snap, created, retries = manifest.update(mutate, max_retries=max_retries, what="partition reservation")
    # Adopt rows that concurrent writers created; drop our own tables that lost the race.
    index = snap.row_index()
    picked = snap.rows.take(pa.array([index[oid] for oid in table_oids], pa.int64()))
    cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
    refs = [TableRef(**r) for r in picked.select(cols).to_pylist()]
    published = {r.location for r in refs}
    for oid, (location, _) in made.items():
        if location not in published and oid not in (prepared or {}):
            remove_table_dir(manifest.root, location)
    return Reservation(tables=refs, created=created, snapshot=snap, retries=retries)
