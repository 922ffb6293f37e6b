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
    # lancepart's Lance settings for every Python worker, unless the config or spark-submit --conf sets them
    from pyspark import SparkConf

    from lancepart import lance_env

    for name in lance_env.DEFAULTS:
        key = f"spark.executorEnv.{name}"
        if key not in (conf or {}) and not SparkConf().contains(key):
            builder = builder.config(key, lance_env.value(name))
    spark = builder.getOrCreate()
    if not master and spark.sparkContext.master is None:  # pragma: no cover - spark always sets one
        raise RuntimeError("no Spark master")
    return spark
