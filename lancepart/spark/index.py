"""Spark front end of declared indexes (:mod:`lancepart.maintenance.indexes`).

The driver declares the index and plans on the published ``__manifest``; each partition table's
index build (on its published version, :func:`lancepart.maintenance.indexes.index_table`) runs in a Spark
task, the tables spread over about four tasks per core (one task per group of tables); the
driver publishes every changed table in ONE ``__manifest`` commit with the same code as
``ns.create_index``. On a conflict the tables whose published version moved are indexed again,
in a new Spark job. A task that finds its published version removed by a cleanup reports it and
the driver rebases; any other failed task publishes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lancepart.arguments import CommitOptions, commit_settings
from lancepart.deprecation import keyword_only
from lancepart.maintenance.indexes import ApplyTables, TableTodo
from lancepart.maintenance.indexes import create_index as _create_index
from lancepart.maintenance.indexes import drop_index as _drop_index
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.spark.tasks import Task, commit_or_conflict, run_on_executors
from lancepart.storage.error_mapping import public_operation

log = logging.getLogger("lancepart.spark")


def _index_task(root: str, op_json: str, snapshot_version: int) -> Task:
    """The executor function: one table's ``[object_id, location, base, builds]`` in,
    ``[object_id, base, version, builds]`` out (or ``{"conflict": ...}`` when the driver must
    rebase). ``builds`` (index name -> :meth:`Prepared.to_blob`) are the uncommitted index builds
    of the table's earlier attempts, handed back so that a rebase commits them instead of
    building again."""

    def run(item: str, options: dict[str, str] | None) -> str:
        from lancepart.index import Prepared
        from lancepart.maintenance.indexes import index_table

        oid, location, base, builds = json.loads(item)
        prepared = {(uri, name): Prepared.from_blob(blob) for name, (uri, blob) in builds.items()}

        def answer(version: int) -> str:
            return json.dumps([oid, base, version, {name: (uri, p.to_blob()) for (uri, name), p in prepared.items()}])

        return commit_or_conflict(root, options, snapshot_version, oid, location, base,
                                  lambda: index_table(root, oid, location, base, op_json, options, prepared), answer)

    return run


def _on_executors(spark, ns: PartitionedNamespace, phases: dict[str, Any]) -> Callable[[str], ApplyTables]:
    def for_op(op_json: str) -> ApplyTables:
        builds: dict[str, dict[str, Any]] = {}  # object_id -> the builds its tasks made, over attempts

        def apply(snapshot_version: int, todo: Sequence[TableTodo]) -> list[tuple[str, int, int]]:
            items = [json.dumps([*item, builds.get(item[0], {})]) for item in todo]
            answers = run_on_executors(spark, ns.storage_options, items,
                                       _index_task(ns.root, op_json, snapshot_version), phases)
            for oid, _, _, made in answers:
                builds[oid] = made
            return [(oid, base, version) for oid, base, version, _ in answers]

        return apply

    return for_op


@keyword_only("storage_options")
@public_operation("lps.create_index", root_arg=1)
def create_index(spark, root: str, column: str, index_type: str, *, name: str | None = None, replace: bool = False,
                 min_rows: int | None = None, storage_options: Mapping[str, str] | None = None,
                 commit: CommitOptions | None = None, max_retries: int | None = None, **params: Any) -> CommitResult:
    """Declare an index and build it on every published partition table of ``root`` on the
    executors, published in one ``__manifest`` commit (same result as ``ns.create_index``).

    Example::

        from lancepart import spark as lps
        lps.create_index(spark, "/data/docs", "embedding", "IVF_PQ", num_partitions=256, num_sub_vectors=16)
    """
    retries, props = commit_settings(commit, max_retries)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    phases: dict[str, Any] = {"spark_jobs": 0, "spark_tasks": 0, "tables_s": 0.0}
    result = _create_index(ns, column, index_type, name=name, replace=replace, min_rows=min_rows,
                           max_retries=retries, apply_tables=_on_executors(spark, ns, phases), properties=props,
                           **params)
    result.details.update(phases)
    log.info("spark create_index on %s: %d tables changed", ns.root, result.partitions_touched)
    return result


@keyword_only("storage_options")
@public_operation("lps.drop_index", root_arg=1)
def drop_index(spark, root: str, name: str, *, storage_options: Mapping[str, str] | None = None,
               commit: CommitOptions | None = None, max_retries: int | None = None) -> CommitResult:
    """Remove the declared index ``name`` and drop it from every partition table on the executors,
    in one publish (same result as ``ns.drop_index``)."""
    retries, props = commit_settings(commit, max_retries)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    phases: dict[str, Any] = {"spark_jobs": 0, "spark_tasks": 0, "tables_s": 0.0}
    result = _drop_index(ns, name, max_retries=retries, apply_tables=_on_executors(spark, ns, phases),
                         properties=props)
    result.details.update(phases)
    return result
