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
from collections.abc import Mapping, Sequence
from typing import Any

from lancepart.arguments import CommitOptions, commit_settings
from lancepart.deprecation import keyword_only
from lancepart.evolution.schema_evolution import with_legacy_ids
from lancepart.maintenance.delete import delete as _delete
from lancepart.model.spec import schema_to_json
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.spark.registry import register
from lancepart.spark.tasks import Task, commit_or_conflict, run_on_executors
from lancepart.storage.error_mapping import public_operation
from lancepart.write.deletions import TableDelete, TableTodo

log = logging.getLogger("lancepart.spark")


def _delete_task(root: str, schema_json: str, filter: str, scan_filter: str | None,
                 snapshot_version: int) -> Task:
    """The executor function: one table's ``[object_id, location, base, whole]`` in, its
    :class:`TableDelete` JSON out (or ``{"conflict": ...}`` when the driver must rebase)."""

    def run(item: str, options: dict[str, str] | None) -> str:
        from lancepart.model.spec import schema_from_json
        from lancepart.write.deletions import delete_in_table

        oid, location, base, whole = json.loads(item)
        schema = schema_from_json(schema_json)
        return commit_or_conflict(root, options, snapshot_version, oid, location, base,
                                  lambda: delete_in_table(root, oid, location, base, schema, filter, scan_filter,
                                                          options, whole=whole),
                                  lambda done: done.to_json())

    return run


@keyword_only("storage_options")
@public_operation("lps.delete", root_arg=1)
def delete(spark, root: str, filter: str, *, storage_options: Mapping[str, str] | None = None,
           commit: CommitOptions | None = None, max_retries: int | None = None) -> CommitResult:
    """Delete every published row of ``root`` matching ``filter``, the partition tables that may
    hold one spread over Spark tasks (about four per core), published in one ``__manifest`` commit (same result as
    ``ns.delete``).

    Example::

        from lancepart import spark as lps
        lps.delete(spark, "/data/events", "user_id = 42")
    """
    register(spark, strict=False)
    retries, props = commit_settings(commit, max_retries)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    phases: dict[str, Any] = {"spark_jobs": 0, "spark_tasks": 0, "tables_s": 0.0}

    def apply(snapshot_version: int, todo: Sequence[TableTodo], scan_filter: str | None) -> list[TableDelete]:
        schema_json = json.dumps(schema_to_json(with_legacy_ids(ns.schema, ns.snapshot().metadata)),
                                 separators=(",", ":"))
        answers = run_on_executors(spark, ns.storage_options, [json.dumps(list(item)) for item in todo],
                                   _delete_task(ns.root, schema_json, filter, scan_filter, snapshot_version), phases)
        return [TableDelete(**d) for d in answers]

    result = _delete(ns, filter, max_retries=retries, apply_tables=apply, phases=phases, properties=props)
    log.info("spark delete on %s: %d rows from %d tables", ns.root, result.details["rows_deleted"],
             result.partitions_touched)
    return result
