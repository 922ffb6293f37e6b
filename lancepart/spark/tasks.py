"""Plumbing every Spark front end shares: storage options shipped to the executors, the typed
errors of failed tasks brought back to the driver, and the per-table fan-out of every operation
that works table by table (:func:`run_on_executors`).

Example::

    answers = run_on_executors(spark, ns.storage_options, [json.dumps(t) for t in todo], task, phases)

How many tasks share the tables (:func:`task_count`) is decided without Spark: about four per core.

>>> task_count(512, parallelism=8), task_count(3, parallelism=8)
(32, 3)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lancepart.spark.workers import check_workers
from lancepart.storage import lance_env
from lancepart.storage.error_mapping import task_error
from lancepart.storage.manifest import ManifestConflict

# What runs on an executor for one table: its item (JSON) and the storage options in, a JSON answer out.
Task = Callable[[str, dict[str, str] | None], str]


def ship_options(spark, storage_options: Mapping[str, str] | None) -> Any:
    """What a task function carries for the storage options: a Spark broadcast, so credentials
    never travel inside the pickled task function (py4j logs it at DEBUG); the options
    themselves where there is no SparkContext (Spark Connect); None without options. First
    checks, once per SparkContext, that the Python workers can run lancepart at all."""
    check_workers(spark)
    if not storage_options:
        return None
    try:
        return spark.sparkContext.broadcast(dict(storage_options))
    except Exception:  # Spark Connect has no SparkContext: the task carries them itself
        return dict(storage_options)


def options_value(shipped: Any) -> dict[str, str] | None:
    """On an executor: the storage options from what :func:`ship_options` returned."""
    options = getattr(shipped, "value", shipped)
    return dict(options) if options else None


def release(shipped: Any) -> None:
    """Drop a broadcast made by :func:`ship_options` once no task needs it any more."""
    if hasattr(shipped, "destroy"):
        shipped.destroy()


@contextmanager
def spark_action(spark, storage_options: Mapping[str, str] | None) -> Iterator[Any]:
    """Around one eager Spark action: ship the storage options, re-raise a lancepart error a task
    raised as the same typed error, and release the broadcast afterwards. Lazy DataFrames
    (reads, joins) use :func:`ship_options` alone: their tasks run after this returns."""
    lance_env.ship_to_executors(spark)  # Lance's settings (no "No existing dataset" warning per fragment)
    shipped = ship_options(spark, storage_options)
    try:
        yield shipped
    except Exception as e:
        typed = task_error(e)
        if typed is None:
            raise
        raise typed from e
    finally:
        release(shipped)


# how many of a task's tables one Spark task works on at once (Lance releases the GIL; on an
# object store each table is a few round trips, which a task would otherwise wait out in turn)
TABLES_IN_FLIGHT = 8


def _with_options(task: Task, shipped: Any) -> Callable[[Iterator[str]], list[str]]:
    """The function Spark maps over each partition of the items: ``task`` with the storage
    options :func:`ship_options` shipped (a closure over plain values: ``task`` and the broadcast
    are pickled, nothing else), on up to :data:`TABLES_IN_FLIGHT` tables at once, answers in
    order."""

    def run(items: Iterator[str]) -> list[str]:
        from lancepart.util.parallel import map_threads

        options = options_value(shipped)
        return map_threads(lambda item: task(item, options), list(items), max_workers=TABLES_IN_FLIGHT)

    return run


def task_count(items: int, parallelism: int, tasks_per_core: int = 4, items_per_task: int | None = None) -> int:
    """How many Spark tasks share ``items`` tables: groups of ``items_per_task`` tables, by default
    as many per group as needed for about ``tasks_per_core`` tasks per core (``parallelism``);
    never more tasks than tables. A task costs tens of milliseconds of scheduling, which dominates
    when the tables are small (benchmarks/compact.py)."""
    if items_per_task is None:
        items_per_task = max(1, -(-items // (tasks_per_core * parallelism)))
    return -(-items // items_per_task)


def run_on_executors(spark, storage_options: Mapping[str, str] | None, items: Sequence[str], task: Task,
                     phases: dict[str, Any] | None = None, *, tasks_per_core: int = 4,
                     items_per_task: int | None = None) -> list[Any]:
    """Run ``task`` on every item (one partition table's work, as JSON) in one Spark job and
    return the parsed answers in the order of ``items``.

    The items are spread over :func:`task_count` tasks; the job runs inside :func:`spark_action`
    (storage options shipped as a broadcast, a lancepart error of a task re-raised as itself).
    An answer ``{"conflict": message}`` (:func:`commit_or_conflict`: the published version a
    table commit built on was removed by a cleanup and ``__manifest`` moved on) raises
    :class:`~lancepart.storage.manifest.ManifestConflict`, so the driver rebases. ``phases`` counts the
    job in ``spark_jobs``, its tasks in ``spark_tasks`` and its wall time in ``tables_s``.
    No items: no job, no answers.

    Example::

        run_on_executors(spark, ns.storage_options, ['["v1$a", "3f9a_v1$a", 4]'], task, phases)

    >>> run_on_executors(None, None, [], task=None)  # no items: no Spark job
    []
    """
    if not items:
        return []
    started = time.monotonic()
    sc = spark.sparkContext
    tasks = task_count(len(items), sc.defaultParallelism, tasks_per_core, items_per_task)
    with spark_action(spark, storage_options) as shipped:
        out = sc.parallelize(list(items), tasks).mapPartitions(_with_options(task, shipped)).collect()
    if phases is not None:
        phases["spark_jobs"] = phases.get("spark_jobs", 0) + 1
        phases["spark_tasks"] = phases.get("spark_tasks", 0) + tasks
        phases["tables_s"] = round(phases.get("tables_s", 0.0) + time.monotonic() - started, 3)
    answers = [json.loads(o) for o in out]
    conflicts = [a["conflict"] for a in answers if isinstance(a, dict) and "conflict" in a]
    if conflicts:  # a published version was removed by a cleanup and __manifest moved on: rebase
        raise ManifestConflict(conflicts[0])
    return answers


def commit_or_conflict(root: str, storage_options: Mapping[str, str] | None, snapshot_version: int,
                       object_id: str, location: str, base: int, commit: Callable[[], Any],
                       answer: Callable[[Any], str]) -> str:
    """On an executor: ``commit`` one table on its published version ``base`` through
    :func:`lancepart.write.guard.commit_on_published` and return ``answer`` of what it returned;
    ``{"conflict": message}`` instead when the driver must rebase (:func:`run_on_executors`
    raises it there as :class:`~lancepart.storage.manifest.ManifestConflict`)."""
    from lancepart.storage.manifest import Manifest
    from lancepart.write.guard import commit_on_published

    try:
        done = commit_on_published(Manifest(root, storage_options), snapshot_version, object_id, location, base,
                                   commit)
    except ManifestConflict as e:
        return json.dumps({"conflict": str(e)})
    return answer(done)
