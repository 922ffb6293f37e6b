"""Building the SparkSession a job runs in (embedded ``local[*]`` unless spark-submit says otherwise)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

PYTHON_CONF = "spark.pyspark.python"
DRIVER_PYTHON_CONF = "spark.pyspark.driver.python"


def _local_python(builder, master: str | None, conf: Mapping[str, Any]):
    """For a local master started from this process, run the Python workers on this process's
    interpreter (``sys.executable``) instead of the first ``python3`` on the PATH, which for
    ``.venv/bin/python job.py`` without an activated venv lacks pyarrow. Leaves alone what the
    user chose (``PYSPARK_PYTHON``, ``spark.pyspark.python``), a JVM spark-submit started (it
    chose the Python) and a SparkContext that already exists. A plain PySpark driver reads only
    the environment variable when it starts its context, so that is what is set; a
    ``spark.pyspark.python`` given in ``conf`` is honoured the same way."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return builder
    effective = master or conf.get("spark.master") or "local[*]"
    if not str(effective).startswith("local"):
        return builder
    chosen = os.environ.get("PYSPARK_PYTHON") or conf.get(PYTHON_CONF)
    python = str(chosen) if chosen else sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", python)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if PYTHON_CONF not in conf:
        builder = builder.config(PYTHON_CONF, os.environ["PYSPARK_PYTHON"])
    if DRIVER_PYTHON_CONF not in conf:
        builder = builder.config(DRIVER_PYTHON_CONF, os.environ["PYSPARK_DRIVER_PYTHON"])
    return builder


def get_session(app_name: str = "lancepart", conf: Mapping[str, Any] | None = None, master: str | None = None):
    """The active SparkSession or a new one; ``master`` defaults to what spark-submit set, else ``local[*]``.

    On a local master started here, Spark's Python workers run ``sys.executable`` unless
    ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` says otherwise.

    Example::

        spark = get_session("nightly-ingest", {"spark.sql.shuffle.partitions": "8"})
    """
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

    from lancepart.storage import lance_env

    for name in lance_env.DEFAULTS:
        key = f"spark.executorEnv.{name}"
        if key not in (conf or {}) and not SparkConf().contains(key):
            builder = builder.config(key, lance_env.value(name))
    builder = _local_python(builder, master, dict(conf or {}))
    spark = builder.getOrCreate()
    if not master and spark.sparkContext.master is None:  # pragma: no cover - spark always sets one
        raise RuntimeError("no Spark master")
    return spark
