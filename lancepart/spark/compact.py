"""Spark front end of compaction (:mod:`lancepart.maintenance.compact`).

The driver plans on the published versions, every partition table's rewrite runs as one
Spark task (Lance compaction tasks executed on the table checked out at its ``read_version``,
fragment metadata JSON back to the driver), and the driver commits the tables and publishes
them in ONE ``__manifest`` commit with the same engine-agnostic code as ``ns.compact``.
A table whose rewrite fails (a data file gone or corrupt) is reported by the task instead of
failing it: the other tables are published and the result's ``failures`` names the table. Any
other failed task publishes nothing; the files it wrote stay unreferenced until cleanup.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lancepart.arguments import CommitOptions, commit_settings
from lancepart.deprecation import keyword_only
from lancepart.errors import InvalidArgumentError
from lancepart.maintenance.compact import (
    DEFAULT_DELETIONS_THRESHOLD,
    DEFAULT_MIN_SMALL_FRAGMENTS,
    DEFAULT_TARGET_ROWS,
    TablePlan,
    TableRewrite,
    finish_compaction,
    plan_compaction,
    reencode_grown,
)
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.spark.registry import register
from lancepart.spark.tasks import Task, run_on_executors
from lancepart.storage.error_mapping import public_operation

log = logging.getLogger("lancepart.spark")


def _rewrite_task(root: str) -> Task:
    """The executor function: one table's plan JSON in, its rewrite (fragment metadata) JSON out."""

    def run(plan_json: str, options: dict[str, str] | None) -> str:
        from lancepart.maintenance.compact import rewrite_or_failure

        return rewrite_or_failure(root, TablePlan.from_json(plan_json), options).to_json()

    return run


@keyword_only("target_rows_per_fragment", "storage_options")
@public_operation("lps.compact", root_arg=1)
def compact(
    spark,
    root: str,
    filter: str | None = None,
    *,
    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
    min_small_fragments: int = DEFAULT_MIN_SMALL_FRAGMENTS,
    materialize_deletions_threshold: float = DEFAULT_DELETIONS_THRESHOLD,
    compact_manifest_table: bool = True,
    tables_per_task: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    commit: CommitOptions | None = None,
    max_retries: int | None = None,
) -> CommitResult:
    """Compact the partition tables of ``root`` that ``filter`` selects on the executors and
    publish them in one ``__manifest`` commit (same result as ``ns.compact``).

    Each Spark task rewrites ``tables_per_task`` tables (``1``: one task per table). The default
    groups them into about four tasks per core (``spark.default.parallelism``): a task costs
    tens of milliseconds of scheduling, which dominates when the tables are small
    (benchmarks/compact.py: 512 small tables in 25 s with one task per table, 4.3 s grouped).

    Example::

        from lancepart import spark as lps
        lps.compact(spark, "/data/events", target_rows_per_fragment=1 << 20)
    """
    register(spark, strict=False)  # the `lancepart` data source, for format("lancepart") in the same session
    retries, props = commit_settings(commit, max_retries)
    return _compact(lambda: spark, root, filter, target_rows_per_fragment, storage_options=storage_options,
                    min_small_fragments=min_small_fragments,
                    materialize_deletions_threshold=materialize_deletions_threshold,
                    compact_manifest_table=compact_manifest_table, max_retries=retries,
                    tables_per_task=tables_per_task, properties=props)


@public_operation("lps.compact", root_arg=1)
def compact_on_demand(session: Callable[[], Any], root: str, filter: str | None = None,
                      target_rows_per_fragment: int = DEFAULT_TARGET_ROWS, **options: Any) -> CommitResult:
    """:func:`compact` with the Spark session asked for (``session()``) only once the plan has a
    table to rewrite: when nothing needs compacting, no Spark starts at all (on a cluster, no
    executor fetches and unpacks the shipped environment) and the rest (index maintenance,
    ``__manifest`` compaction) runs on the driver as it would anyway. ``jobs/compact.py`` runs it.

    ``compact_on_demand(lambda: get_session("compact"), "/data/events")``; on a namespace whose
    tables are all compact the session is never asked for:

    >>> def no_spark():
    ...     raise AssertionError("Spark was started")
    >>> compact_on_demand(no_spark, ns.root).partitions_touched
    0
    """

    def spark() -> Any:
        s = session()
        register(s, strict=False)
        return s

    return _compact(spark, root, filter, target_rows_per_fragment, **options)


def _compact(session: Callable[[], Any], root: str, filter: str | None, target_rows_per_fragment: int, *,
             storage_options: Mapping[str, str] | None = None,
             min_small_fragments: int = DEFAULT_MIN_SMALL_FRAGMENTS,
             materialize_deletions_threshold: float = DEFAULT_DELETIONS_THRESHOLD,
             compact_manifest_table: bool = True, max_retries: int = 20,
             tables_per_task: int | None = None, properties: Mapping[str, str] | None = None) -> CommitResult:
    started = time.monotonic()
    if tables_per_task is not None and (not isinstance(tables_per_task, int) or tables_per_task < 1):
        raise InvalidArgumentError(f"tables_per_task must be a positive integer, got {tables_per_task!r}")
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    reencoded, reencode_failures = reencode_grown(ns, filter)  # on the driver: one __manifest commit, no rows
    if reencoded:
        ns.refresh()
    plan = plan_compaction(ns, filter, target_rows_per_fragment, min_small_fragments=min_small_fragments,
                           materialize_deletions_threshold=materialize_deletions_threshold)
    phases: dict[str, Any] = {"plan_s": round(time.monotonic() - started, 3)}
    t = time.monotonic()
    rewrites: list[TableRewrite] = []
    failures: dict[str, str] = {}
    if plan.tables:
        counts: dict[str, Any] = {}
        answers = run_on_executors(session(), ns.storage_options, [tp.to_json() for tp in plan.tables],
                                   _rewrite_task(ns.root), counts, items_per_task=tables_per_task)
        phases["spark_tasks"] = counts["spark_tasks"]
        rewrites = [TableRewrite.from_json(json.dumps(d)) for d in answers if not d.get("failed")]
        failures = {d["object_id"]: d["message"] for d in answers if d.get("failed")}
    phases["rewrite_s"] = round(time.monotonic() - t, 3)
    result = finish_compaction(ns.manifest, plan, rewrites, started=started, phases=phases, max_retries=max_retries,
                               compact_manifest_table=compact_manifest_table,
                               failures={**reencode_failures, **failures}, properties=properties)
    result.details["tables_reencoded"] = len(reencoded)
    log.info("spark compaction of %s: %d tables", ns.root, result.partitions_touched)
    return result
