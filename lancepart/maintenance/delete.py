"""Row-level delete: remove the rows matching a filter from every partition, in one publish.

For each partition table the pruner keeps, the rows of its *published* ``read_version`` for
which the filter is TRUE (evaluated exactly, by DataFusion, as reads evaluate it) get Lance
deletion files; the table version committed for it holds exactly the published fragments, the
touched ones with their new deletion file and the ones left with no row removed. Versions
beyond ``read_version`` belong to other jobs' unpublished work and never leak into ours (the
same rule as a write's table commit, :mod:`lancepart.storage.table_commit`). Then ONE ``__manifest``
commit moves ``read_version`` of every changed table: all partitions or none.

A partition the filter covers entirely, as the strict projection of drop_partitions proves it
(the filter names only identity-partitioned columns and is TRUE on the partition's values), is
emptied without reading a row: every fragment of its published version is removed. It stays in
``__manifest`` with an empty version (``drop_partitions`` removes partitions themselves).

Conflicts (docs/delete.md): the ``__manifest`` commit is optimistic. On a conflict the
mutation runs again on the new snapshot; a table whose published version moved meanwhile (a
concurrent append, delete or compaction published first) has the delete evaluated again on the
new published version, so rows appended and published first that match are deleted too, and
rows another delete removed stay removed. A table whose published version did not move keeps
the version already committed for it. No matching row anywhere: nothing is committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lancepart.errors import (
    InvalidArgumentError,
    InvalidFilterError,
    PartitionPinnedError,
)
from lancepart.read.manifest_query import entire_tables
from lancepart.results import CommitResult
from lancepart.storage.manifest import (
    PARTITIONS_PROPERTY,
    ROWS_REMOVED_PROPERTY,
    ManifestSnapshot,
)
from lancepart.write.deletions import ApplyTables, delete_in_table, matching_addresses_of_tables
from lancepart.write.publish import Made, TableChange, TableWork, publish_changes

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.maintenance")


def delete(ns: NamespaceHandle, filter: str, *, max_retries: int = 20,
           apply_tables: ApplyTables | None = None, phases: dict[str, Any] | None = None,
           properties: Mapping[str, str] | None = None) -> CommitResult:
    """Delete every published row matching ``filter`` (SQL over source columns) in one publish.
    ``apply_tables`` runs the per-table deletes elsewhere (``lancepart.spark.delete``: on the
    executors); the ``__manifest`` commit and its rebase stay here.

    1. check the filter and refresh the handle;
    2. on each snapshot the publish works on: prune the tables not seen yet, refuse a kept table
       pinned to a branch or tag, one :class:`TableChange` per kept table (:meth:`_Delete.plan`);
    3. publish: each kept table's matching rows get deletion files (:func:`delete_in_table`, or
       ``apply_tables``), then ONE ``__manifest`` commit;
    4. the result, logged.

    >>> result = delete(ns, "amount < 10")
    >>> result.details["rows_deleted"], result.partitions_touched
    (2, 2)
    """
    if not isinstance(filter, str) or not filter.strip():
        raise InvalidFilterError("delete needs a filter (a SQL boolean expression over the namespace's columns); "
                                 "to delete every row say so: filter='TRUE'")
    started = time.monotonic()
    ns.refresh()  # a stale handle must not miss partitions of a spec version evolved since it was opened
    op = _Delete(ns, filter, apply_tables)
    pub = publish_changes(
        op.manifest, op.plan, what="delete", run=op.run if apply_tables is not None else None,
        max_retries=max_retries, properties=properties, check_constraints=False,  # removes rows only
        properties_of=lambda made: {ROWS_REMOVED_PROPERTY: str(sum(m.info.rows for m in made)),
                                    PARTITIONS_PROPERTY: str(len(made))})
    applied = [m.info for _, m in sorted(pub.made.items())]
    rows_deleted = sum(d.rows for d in applied)
    result = CommitResult(
        manifest_version=pub.snapshot.version, rows_written=0, partitions_touched=len(applied), retries=pub.retries,
        seconds=round(time.monotonic() - started, 3),
        details={"rows_deleted": rows_deleted, "filter": filter,
                 "tables": [{"object_id": d.object_id, "from_version": d.base, "read_version": d.version,
                             "rows_deleted": d.rows} for d in applied], **(phases or {})},
    )
    log.info("deleted %d rows from %d partitions of %s where %s (manifest version %d)", rows_deleted, len(applied),
             ns.root, filter, pub.snapshot.version)
    return result


class _Delete:
    """What one delete decided, kept across the attempts of its publish: per table whether the
    pruner keeps it and whether every row matches (a table's partition values never change), the
    scan filter, and what each table's last evaluation found (a rebase reads only what changed)."""

    def __init__(self, ns: NamespaceHandle, filter: str, apply_tables: ApplyTables | None) -> None:
        from lancepart.evolution.schema_evolution import with_legacy_ids

        self.filter, self.apply_tables = filter, apply_tables
        # the legacy ids place the columns of tables written before the first schema change
        self.manifest, self.specs = ns.manifest, ns.specs
        self.schema = with_legacy_ids(ns.schema, ns.snapshot().metadata)
        self.scan: dict[str, Any] = {}  # the scan filter of the snapshot being published
        self.whole: dict[str, bool] = {}  # object_id -> every row of the table matches
        self.evaluated: dict[str, Any] = {}  # per table, what the last attempt found: a rebase reads only what changed
        self.decided: dict[str, tuple[bool, bool]] = {}  # object_id -> (the pruner keeps it, every row matches)
        # (object_id, location, published version) -> addresses of its matching rows, found with other tables'
        self.matched: dict[tuple[str, str, int], Any] = {}

    def plan(self, snap: ManifestSnapshot) -> list[TableChange]:
        """One change per table of ``snap`` that may hold matching rows."""
        from lancepart.model.ids import partition_spec_id

        pins = snap.table_pins()
        self._decide(pins)
        cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
        rows = [r for r in pins.select(cols).to_pylist()
                if self.decided[r["object_id"]][0] and partition_spec_id(r["object_id"]) is not None]
        for r in rows:
            if r["read_branch"] is not None or r["read_tag"] is not None:
                raise PartitionPinnedError(
                    f"partition table {r['object_id']} may hold rows matching {self.filter!r} but is pinned to "
                    f"branch={r['read_branch']!r} tag={r['read_tag']!r}; lancepart deletes on main only; unpin it "
                    f"first or narrow the filter; nothing was published")
            self.whole[r["object_id"]] = self.decided[r["object_id"]][1]
        if self.apply_tables is None:
            self._match_together(rows)
        return [self._change(r["object_id"]) for r in rows]

    def _match_together(self, rows: list[dict[str, Any]]) -> None:
        """The matching rows of every table this delete has not evaluated yet, found with one
        DataFusion evaluation per group of tables (:func:`matching_addresses_of_tables`) rather
        than one per table; kept per (table, published version) for its table commit."""
        from lancepart.model.ids import check_location
        from lancepart.storage.lance_io import open_table
        from lancepart.storage.manifest import join_uri

        todo = [r for r in rows if not self.whole[r["object_id"]]
                and f"{r['object_id']}@{r['location']}" not in self.evaluated
                and (r["object_id"], r["location"], r["read_version"]) not in self.matched]
        if len(todo) < 2:
            return
        root, so = self.manifest.root, self.manifest.storage_options

        def opener(r: dict[str, Any]) -> Callable[[], Any]:
            uri = join_uri(root, check_location(r["location"], r["object_id"], root))
            return lambda: open_table(uri, version=r["read_version"], storage_options=so, reuse=True)

        try:
            tables = [((r["object_id"], r["location"], r["read_version"]), opener(r)) for r in todo]
            found = matching_addresses_of_tables(tables, self.schema, self.filter, self.scan["filter"])
        except Exception as e:  # an optimisation only: each table's commit evaluates it again and raises
            # what it finds there, typed and named as a delete's errors are
            log.debug("delete %r: evaluating the tables together failed (%s); one table at a time", self.filter, e)
            return
        self.matched.update(found)

    def _decide(self, pins: pa.Table) -> None:
        """Prune the tables of ``pins`` not decided yet: a table's partition values never change, so
        what the pruner decided for it holds on every later snapshot (cheap rebases)."""
        from lancepart.read.manifest_query import prune

        oids = pins.column("object_id").to_pylist()
        new = [i for i, o in enumerate(oids) if o not in self.decided]
        if not new and "filter" in self.scan:
            return
        fresh = pins.take(pa.array(new, pa.int64()))
        try:
            pruned = prune(self.filter, self.schema, self.specs, fresh)
        except InvalidArgumentError as e:
            raise InvalidFilterError(str(e)) from None
        kept = set(pruned.kept.column("object_id").to_pylist())
        entire = entire_tables(self.filter, self.schema, self.specs, fresh) if kept else set()
        self.decided.update({oids[i]: (oids[i] in kept, oids[i] in entire) for i in new})
        self.scan.setdefault("filter", pruned.scan_filter)

    def _change(self, oid: str) -> TableChange:
        manifest = self.manifest

        def commit(published: int | None, location: str) -> Made:
            d = delete_in_table(manifest.root, oid, location, published, self.schema, self.filter, self.scan["filter"],
                                manifest.storage_options, whole=self.whole[oid], cache=self.evaluated,
                                matched=self.matched.pop((oid, location, published), None))
            return Made(oid, published, d.version, info=d)

        return TableChange(oid, commit=commit)

    def run(self, snapshot_version: int, works: Sequence[TableWork]) -> list[Made]:
        """The per-table deletes through ``apply_tables``."""
        todo = [(w.change.object_id, w.location, w.published, self.whole[w.change.object_id]) for w in works]
        return [Made(d.object_id, d.base, d.version, info=d)
                for d in self.apply_tables(snapshot_version, todo, self.scan["filter"])]
