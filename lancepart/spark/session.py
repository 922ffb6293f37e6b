"""Building the SparkSession a job runs in (embedded ``local[*]`` unless spark-submit says otherwise)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def get_session(app_name: str = "lancepart", conf: Mapping[str, Any] | None = None, master: str | None = None):
    """The active SparkSession or a new one; ``master`` defaults to what spark-submit set, else ``local[*]``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for k, v in (conf or {}).items():
        builder = builder.config(k, str(v))
    # Arrow end to end between the JVM and Python workers
    builder = builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
    # Lance's log filter for every Python worker, unless the config or spark-submit --conf sets one
    from pyspark import SparkConf

    if "spark.executorEnv.LANCE_LOG" not in (conf or {}) and not SparkConf().contains("spark.executorEnv.LANCE_LOG"):
        from lancepart import _lance_log

        builder = builder.config("spark.executorEnv.LANCE_LOG", _lance_log.value())
    spark = builder.getOrCreate()
    if not master and spark.sparkContext.master is None:  # pragma: no cover - spark always sets one
        raise RuntimeError("no Spark master")
    return spark
