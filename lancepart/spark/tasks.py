"""Plumbing every Spark front end shares: storage options shipped to the executors, and the
typed errors of failed tasks brought back to the driver.

>>> # with spark_action(spark, ns.storage_options) as shipped:
>>> #     rdd.map(task_using(options_value(shipped))).collect()
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lancepart import lance_env
from lancepart.error_mapping import task_error
from lancepart.spark.workers import check_workers


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
