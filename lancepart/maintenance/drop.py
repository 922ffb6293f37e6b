"""Drop whole partitions from ``__manifest`` in one publish (data left for cleanup).

Which partitions a filter selects *entirely* is a strict question: a partition may be dropped
only when every row it holds matches. lancepart answers it exactly, and only where the answer
is certain: every column the filter names must be the source of an **identity** partition field
of the spec version. Then each row of a partition carries the partition's value in that column
(NULL-aware), so evaluating the filter, with DataFusion, on the partition values alone gives the
filter's result for every row of it: TRUE drops the partition, FALSE or NULL keeps it.

A spec version where a filter column is not identity-partitioned (a ``year``, ``bucket`` or
``truncate`` field, or no field at all) makes the call fail with :class:`InvalidFilterError`
naming the column, unless the inclusive pruner proves that no partition of that version can hold
a matching row (then it has nothing to drop). Nothing is published on any failure.

The publish is one :meth:`Manifest.update` with a pure mutation: on a conflict with a concurrent
commit it is recomputed on the new snapshot. A writer that published into a dropped partition
before the drop landed loses those rows with the partition; a writer whose reservation predates
the drop but whose publish comes after fails (its table row is gone; nothing of it is published)
and its rerun reserves a fresh table. ``read_version`` never points into a dropped table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart import ids as _ids
from lancepart.errors import InvalidArgumentError, InvalidFilterError
from lancepart.manifest import ManifestSnapshot
from lancepart.results import CommitResult
from lancepart.spec import PartitionField, PartitionSpec, field_id_of

if TYPE_CHECKING:
    from lancepart.namespace import PartitionedNamespace

log = logging.getLogger("lancepart.maintenance")
_ROW = "__lancepart_manifest_row"


def _identity_sources(spec: PartitionSpec, schema: pa.Schema) -> dict[str, PartitionField]:
    """Source column name -> the identity field of ``spec`` that partitions on it."""
    by_id = {field_id_of(f): f.name for f in schema}
    out: dict[str, PartitionField] = {}
    for f in spec.fields:
        if f.transform is not None and f.transform.to_json().get("type") == "identity" and len(f.source_ids) == 1:
            name = by_id.get(f.source_ids[0])
            if name is not None:
                out.setdefault(name, f)
    return out


def _spec_rows(rows: pa.Table, spec_id: int) -> np.ndarray:
    """Row numbers of the partition table rows of spec version ``spec_id``."""
    is_table = pc.equal(rows.column("object_type"), "table")
    prefix = pc.starts_with(rows.column("object_id"), f"v{spec_id}{_ids.DELIMITER}")
    suffix = pc.ends_with(rows.column("object_id"), f"{_ids.DELIMITER}{_ids.TABLE_NAME}")
    mask = pc.and_(pc.and_(is_table, prefix), suffix)
    return np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))


def matching_tables(filter: str, schema: pa.Schema, specs: dict[int, PartitionSpec], rows: pa.Table) -> list[int]:
    """Row numbers of the partition tables of ``rows`` (``__manifest`` rows) that ``filter``
    selects entirely; :class:`InvalidFilterError` where that cannot be decided (module docstring)."""
    from lancepart.read.prune import filter_columns, prune
    from lancepart.read.snapshot import apply_filter

    inclusive = prune(filter, schema, specs, rows)  # validates the filter; names unknown columns
    kept = set(inclusive.object_ids)
    columns = filter_columns(filter, schema)
    object_ids = rows.column("object_id")
    out: list[int] = []
    for spec_id, spec in sorted(specs.items()):
        idx = _spec_rows(rows, spec_id)
        if not len(idx):
            continue
        identity = _identity_sources(spec, schema)
        other = [c for c in columns if c not in identity]
        if other:
            maybe = [i for i in idx.tolist() if object_ids[i].as_py() in kept]
            if maybe:
                raise InvalidFilterError(
                    f"filter {filter!r}: column {other[0]!r} is not an identity partition field of spec v{spec_id}, "
                    f"so whether {len(maybe)} of its partitions match entirely cannot be decided; drop_partitions "
                    f"takes filters over identity-partitioned columns only "
                    f"({sorted(identity) or 'spec v' + str(spec_id) + ' has none'})")
            continue
        sub = rows.take(pa.array(idx, pa.int64()))
        cols = [pa.array(idx, pa.int64())]
        fields = [pa.field(_ROW, pa.int64())]
        for name in columns:
            f = identity[name]
            src = schema.field(name)
            value = sub.column(f.column_name) if f.column_name in sub.column_names else pa.nulls(len(idx), src.type)
            cols.append(value.cast(src.type))
            fields.append(pa.field(name, src.type))
        table = pa.Table.from_arrays(cols, schema=pa.schema(fields))
        try:
            out.extend(apply_filter(table, filter).column(_ROW).to_pylist())
        except InvalidArgumentError as e:
            raise InvalidFilterError(str(e)) from None
    return sorted(out)


def _without(snap: ManifestSnapshot, drop: Sequence[int]) -> tuple[pa.Table, list[int]]:
    """``snap``'s rows minus the table rows ``drop`` and the partition namespace rows they leave
    childless (never a spec version's ``v<N>`` row); also returns the namespace rows removed."""
    rows = snap.rows
    oids = rows.column("object_id").to_pylist()
    types = rows.column("object_type").to_pylist()
    gone = set(drop)
    candidates: set[str] = set()
    for i in drop:
        parts = oids[i].split(_ids.DELIMITER)
        for k in range(2, len(parts)):  # v1$a, v1$a$b for v1$a$b$dataset
            candidates.add(_ids.DELIMITER.join(parts[:k]))
    # a candidate stays while a row that is neither dropped nor a candidate descends from it (a
    # kept candidate's ancestors are then kept through the same row)
    busy: set[str] = set()
    for j, o in enumerate(oids):
        if j not in gone and o not in candidates:
            parts = o.split(_ids.DELIMITER)
            busy.update(_ids.DELIMITER.join(parts[:k]) for k in range(1, len(parts)))
    namespaces = [j for j, o in enumerate(oids) if o in candidates and o not in busy and types[j] == "namespace"]
    gone.update(namespaces)
    keep = np.ones(len(oids), dtype=bool)
    keep[list(gone)] = False
    return rows.filter(pa.array(keep)), namespaces


def drop_partitions(ns: PartitionedNamespace, filter: str, *, dry_run: bool = False, max_retries: int = 20
                    ) -> CommitResult:
    """Remove from ``__manifest``, in one publish, every partition table ``filter`` selects
    entirely (and the namespace rows left without children). The tables' files stay until a
    cleanup collects them. ``dry_run`` reports what would go and publishes nothing.

    >>> # drop_partitions(ns, "event_date < DATE '2025-01-01'").details["dropped"]
    """
    if not isinstance(filter, str) or not filter.strip():
        raise InvalidFilterError("drop_partitions needs a filter (a SQL boolean expression over identity-"
                                 "partitioned columns); to drop everything say so: filter='TRUE'")
    started = time.monotonic()
    ns.refresh()  # a stale handle must not miss partitions of a spec version evolved since it was opened
    schema, specs = ns.schema, ns.specs

    def mutate(snap: ManifestSnapshot) -> tuple[pa.Table | None, dict[str, Any]]:
        drop = matching_tables(filter, schema, specs, snap.rows)
        if not drop:
            return None, {"dropped": [], "namespaces_removed": 0}
        rows, namespaces = _without(snap, drop)
        picked = snap.rows.take(pa.array(drop, pa.int64()))
        dropped = [{"object_id": r["object_id"], "location": r["location"], "read_version": r["read_version"]}
                   for r in picked.select(["object_id", "location", "read_version"]).to_pylist()]
        return (None if dry_run else rows), {"dropped": dropped, "namespaces_removed": len(namespaces)}

    snap, what, retries = ns.manifest.update(mutate, max_retries=max_retries, what="drop_partitions")
    result = CommitResult(
        manifest_version=snap.version, partitions_touched=len(what["dropped"]), retries=retries,
        seconds=round(time.monotonic() - started, 3),
        details={**what, "filter": filter, "dry_run": dry_run},
    )
    log.info("%s %d partitions of %s where %s (manifest version %d)", "would drop" if dry_run else "dropped",
             len(what["dropped"]), ns.root, filter, snap.version)
    return result
