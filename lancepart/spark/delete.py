"""Spark front end of row-level delete (:mod:`lancepart.maintenance.delete`).

The driver prunes on the published ``__manifest``; each partition table's delete (read its
published version, write the deletion files, commit the table version) runs in a Spark task,
which returns each :class:`TableDelete` as JSON; the driver publishes every changed table in ONE
``__manifest`` commit with the same code as ``ns.delete``. On a conflict the tables whose
published version moved are deleted from again, in a new Spark job, and the publish retries.
A task that finds its published version removed by a cleanup reports it, and the driver rebases
on the newer ``__manifest`` exactly as in-process. Any other failed task publishes nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lancepart.deprecation import keyword_only
from lancepart.error_mapping import public_operation
from lancepart.maintenance.delete import delete as _delete
from lancepart.manifest import ManifestConflict
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.schema_evolution import with_legacy_ids
from lancepart.spark.datasource import register
from lancepart.spark.tasks import options_value, spark_action
from lancepart.spec import schema_to_json
from lancepart.write.deletions import TableDelete, TableTodo

log = logging.getLogger("lancepart.spark")


def _delete_task(root: str, schema_json: str, filter: str, scan_filter: str | None, snapshot_version: int,
                 storage_options: Any) -> Callable[[str], str]:
    """The executor function: one table's ``[object_id, location, base, whole]`` in, its
    :class:`TableDelete` JSON out (or ``{"conflict": ...}`` when the driver must rebase)."""

    def run(item: str) -> str:
        from lancepart.manifest import Manifest
        from lancepart.spec import schema_from_json
        from lancepart.write.deletions import delete_in_table
        from lancepart.write.guard import commit_on_published

        oid, location, base, whole = json.loads(item)
        options = options_value(storage_options)
        schema = schema_from_json(schema_json)
        try:
            done = commit_on_published(Manifest(root, options), snapshot_version, oid, location, base,
                                       lambda: delete_in_table(root, oid, location, base, schema, filter,
                                                               scan_filter, options, whole=whole))
        except ManifestConflict as e:
            return json.dumps({"conflict": str(e)})
        return done.to_json()

    return run


@keyword_only("storage_options")
@public_operation("lps.delete", root_arg=1)
def delete(spark, root: str, filter: str, *, storage_options: Mapping[str, str] | None = None,
           max_retries: int = 20) -> CommitResult:
    """Delete every published row of ``root`` matching ``filter``, the partition tables that may
    hold one spread over Spark tasks (about four per core), published in one ``__manifest`` commit (same result as
    ``ns.delete``).

    >>> # from lancepart import spark as lps; lps.delete(spark, "/data/events", "user_id = 42")
    """
    register(spark, strict=False)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    phases: dict[str, Any] = {"spark_jobs": 0, "spark_tasks": 0, "tables_s": 0.0}

    def apply(snapshot_version: int, todo: Sequence[TableTodo], scan_filter: str | None) -> list[TableDelete]:
        t = time.monotonic()
        sc = spark.sparkContext
        items = [json.dumps(list(item)) for item in todo]
        schema_json = json.dumps(schema_to_json(with_legacy_ids(ns.schema, ns.snapshot().metadata)),
                                 separators=(",", ":"))
        tasks = min(len(items), 4 * sc.defaultParallelism)  # a task per table costs scheduling time
        with spark_action(spark, ns.storage_options) as shipped:
            out = sc.parallelize(items, tasks).map(
                _delete_task(ns.root, schema_json, filter, scan_filter, snapshot_version, shipped)).collect()
        phases["spark_jobs"] += 1
        phases["spark_tasks"] += tasks
        phases["tables_s"] = round(phases["tables_s"] + time.monotonic() - t, 3)
        parsed = [json.loads(o) for o in out]
        conflicts = [d["conflict"] for d in parsed if "conflict" in d]
        if conflicts:  # a published version was removed by a cleanup and __manifest moved on: rebase
            raise ManifestConflict(conflicts[0])
        return [TableDelete(**d) for d in parsed]

    result = _delete(ns, filter, max_retries=max_retries, apply_tables=apply, phases=phases)
    log.info("spark delete on %s: %d rows from %d tables", ns.root, result.details["rows_deleted"],
             result.partitions_touched)
    return result
