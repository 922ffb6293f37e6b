"""Drop whole partitions from ``__manifest`` in one publish (data left for cleanup).

Which partitions a filter selects *entirely* is a strict question: a partition may be dropped
only when every row it holds matches. lancepart answers it exactly, and only where the answer
is certain, by the strict projection of :func:`lancepart.model.projection.matching_tables`: every
column the filter names must be the source of an **identity** partition field of the spec
version. Then each row of a partition carries the partition's value in that column
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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lancepart.errors import InvalidFilterError
from lancepart.model import ids as _ids
from lancepart.read.manifest_query import matching_tables
from lancepart.results import CommitResult
from lancepart.storage.manifest import ManifestSnapshot

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

# matching_tables (the strict projection) lives in lancepart.model.projection; importable from here too
__all__ = ["drop_partitions", "matching_tables"]

log = logging.getLogger("lancepart.maintenance")


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


def drop_partitions(ns: NamespaceHandle, filter: str, *, dry_run: bool = False, max_retries: int = 20,
                    properties: Mapping[str, str] | None = None) -> CommitResult:
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

    snap, what, retries = ns.manifest.update(mutate, max_retries=max_retries, what="drop_partitions",
                                             transaction_properties=properties)
    result = CommitResult(
        manifest_version=snap.version, partitions_touched=len(what["dropped"]), retries=retries,
        seconds=round(time.monotonic() - started, 3),
        details={**what, "filter": filter, "dry_run": dry_run},
    )
    log.info("%s %d partitions of %s where %s (manifest version %d)", "would drop" if dry_run else "dropped",
             len(what["dropped"]), ns.root, filter, snap.version)
    return result
