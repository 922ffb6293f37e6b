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

The publish goes through the one commit producer (:class:`lancepart.write.publish.CommitProducer`),
with no table commit: the rows to remove are found on each attempt's snapshot, so on a conflict
with a concurrent commit they are recomputed on the new one. A writer that published into a dropped partition
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
from lancepart.storage.manifest import ManifestChanges, ManifestSnapshot
from lancepart.write.publish import CommitProducer

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

# matching_tables (the strict projection) lives in lancepart.model.projection; importable from here too
__all__ = ["drop_partitions", "matching_tables"]

log = logging.getLogger("lancepart.maintenance")


def _gone(snap: ManifestSnapshot, drop: Sequence[int]) -> tuple[list[str], list[int]]:
    """The object ids :func:`_without` removes (the rows ``drop`` and the namespace rows they
    leave childless), and those namespace rows."""
    kept, namespaces = _without(snap, drop)
    left = set(kept.column("object_id").to_pylist())
    return [o for o in snap.rows.column("object_id").to_pylist() if o not in left], namespaces


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


class _Drop(CommitProducer):
    """drop_partitions through the one commit producer: no table commit, only rows removed
    (:meth:`row_changes`), recomputed on each attempt's snapshot."""

    def __init__(self, manifest: Any, filter: str, schema: pa.Schema, specs: Any, *, dry_run: bool,
                 max_retries: int, properties: Mapping[str, str] | None = None) -> None:
        super().__init__(manifest, what="drop_partitions", max_retries=max_retries, properties=properties,
                         check_constraints=False)
        self.filter, self.schema, self.specs, self.dry_run = filter, schema, specs, dry_run
        self.info: dict[str, Any] = {"dropped": [], "namespaces_removed": 0}

    def plan(self, snap: ManifestSnapshot) -> bool:
        return True  # what goes is found on each snapshot, by row_changes

    def row_changes(self, snap: ManifestSnapshot) -> ManifestChanges | None:
        drop = matching_tables(self.filter, self.schema, self.specs, snap.rows)
        if not drop:
            self.info = {"dropped": [], "namespaces_removed": 0}
            return None
        gone, namespaces = _gone(snap, drop)
        picked = snap.rows.take(pa.array(drop, pa.int64()))
        dropped = [{"object_id": r["object_id"], "location": r["location"], "read_version": r["read_version"]}
                   for r in picked.select(["object_id", "location", "read_version"]).to_pylist()]
        self.info = {"dropped": dropped, "namespaces_removed": len(namespaces)}
        return None if self.dry_run else ManifestChanges(deletes=tuple(gone))


def drop_partitions(ns: NamespaceHandle, filter: str, *, dry_run: bool = False, max_retries: int = 20,
                    properties: Mapping[str, str] | None = None) -> CommitResult:
    """Remove from ``__manifest``, in one publish, every partition table ``filter`` selects
    entirely (and the namespace rows left without children). The tables' files stay until a
    cleanup collects them. ``dry_run`` reports what would go and publishes nothing.

    >>> result = drop_partitions(ns, "event_date < DATE '2025-12-10'", dry_run=True)
    >>> [d["read_version"] for d in result.details["dropped"]], result.details["namespaces_removed"]
    ([1], 1)
    """
    if not isinstance(filter, str) or not filter.strip():
        raise InvalidFilterError("drop_partitions needs a filter (a SQL boolean expression over identity-"
                                 "partitioned columns); to drop everything say so: filter='TRUE'")
    started = time.monotonic()
    ns.refresh()  # a stale handle must not miss partitions of a spec version evolved since it was opened
    schema, specs = ns.schema, ns.specs

    producer = _Drop(ns.manifest, filter, schema, specs, dry_run=dry_run, max_retries=max_retries,
                     properties=properties)
    pub = producer.publish()
    snap, what, retries = pub.snapshot, producer.info, pub.retries
    result = CommitResult(
        manifest_version=snap.version, partitions_touched=len(what["dropped"]), retries=retries,
        seconds=round(time.monotonic() - started, 3),
        details={**what, "filter": filter, "dry_run": dry_run},
    )
    log.info("%s %d partitions of %s where %s (manifest version %d)", "would drop" if dry_run else "dropped",
             len(what["dropped"]), ns.root, filter, snap.version)
    return result
