"""Can Spark's Python workers run lancepart? Checked once per SparkContext (docs/deployment.md).

A driver started as ``.venv/bin/python job.py`` without the venv activated gets Python workers
on whatever ``python3`` is first on the PATH: they fail with a raw ``ModuleNotFoundError`` deep
in a task, or, under the quality gate, as "expectations failed" that say nothing about the
data. Before its first Spark job every ``lps.*`` entry point runs one one-partition job that
imports lancepart's dependencies on a worker and reports their versions; a missing module, or a
pyarrow/lance version different from the driver's, raises :class:`WorkerEnvironmentError`
naming the module and the worker's Python. The answer is cached on the SparkContext, so the
cost (one one-task job, 0.5-0.9 s on a running context, see docs/deployment.md) is paid
once. ``spark.lancepart.checkWorkers=false`` skips it.

Example::

    from lancepart.spark.workers import check_workers
    check_workers(spark)["pyarrow"]
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

from lancepart.errors import WorkerEnvironmentError

log = logging.getLogger("lancepart.spark")

CHECK_CONF = "spark.lancepart.checkWorkers"
MODULES = ("pyarrow", "lance", "mmh3", "lancepart")
VERSIONED = ("pyarrow", "lance")  # a different version on the workers is refused, not only a missing one
_CACHE_ATTR = "_lancepart_workers"

# Compiled into a function of a module that does not exist, so cloudpickle ships it by value:
# unpickling it on the worker must not need lancepart (whose absence is what it reports).
_PROBE_SOURCE = '''
def probe(_):
    import importlib, json, socket, sys
    out = {"python": sys.executable, "python_version": sys.version.split()[0], "host": socket.gethostname(),
           "versions": {}, "errors": {}}
    for name in MODULES:
        try:
            out["versions"][name] = getattr(importlib.import_module(name), "__version__", "?")
        except BaseException as e:
            out["errors"][name] = f"{type(e).__name__}: {e}"
    yield json.dumps(out)
'''
_HINT = ("point the workers at a Python that has lancepart's dependencies: for a local master set "
         "PYSPARK_PYTHON (spark.pyspark.python with spark-submit) to the driver's Python, or use "
         "lancepart.spark.session.get_session, which does; on a cluster ship the packed environment "
         "(make dist, then ./spark-submit.sh --master ... ships it); " + CHECK_CONF + "=false skips this check")


def _probe():
    scope: dict[str, Any] = {"__name__": "lancepart_worker_probe", "MODULES": MODULES}
    exec(compile(_PROBE_SOURCE, "<lancepart worker probe>", "exec"), scope)
    return scope["probe"]


def driver_versions() -> dict[str, str]:
    import lance
    import pyarrow

    return {"pyarrow": pyarrow.__version__, "lance": lance.__version__}


def _enabled(spark) -> bool:
    try:
        value = spark.conf.get(CHECK_CONF, "true")
    except Exception:  # pragma: no cover - a session without a runtime conf
        value = "true"
    return str(value).strip().lower() not in ("false", "0", "no", "off")


def _failure_detail(e: BaseException) -> str:
    """The line of a failed probe job that says why the worker could not run it."""
    text = str(e)
    for pattern in (r"(ModuleNotFoundError: [^\n]*)", r"(ImportError: [^\n]*)",
                    r"(Cannot run program [^\n]*)", r"(PySparkRuntimeError: [^\n]*)",
                    r"(Python in worker has different version[^\n]*)", r"(\w+(?:Error|Exception): [^\n]*)"):
        found = re.findall(pattern, text)
        if found:
            return found[-1].strip()[:500]
    return text.strip().splitlines()[0][:500] if text.strip() else type(e).__name__


def check_workers(spark) -> dict[str, Any] | None:
    """Run the worker probe once per SparkContext and raise :class:`WorkerEnvironmentError` if a
    worker cannot import lancepart's dependencies or has other pyarrow/lance versions than the
    driver. Returns what the worker reported (``python``, ``versions``, ``check_ms``), or None
    when skipped (``spark.lancepart.checkWorkers=false``, or Spark Connect without a SparkContext).
    """
    if not _enabled(spark):
        return None
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext, the server's workers are not ours to probe
        return None
    cached = getattr(sc, _CACHE_ATTR, None)
    if cached is not None:
        return cached
    configured = getattr(sc, "pythonExec", None) or "python3"
    t = time.monotonic()
    # its own job group, so the caller's job group (and what it counts) holds only the caller's jobs
    saved = {k: sc.getLocalProperty(k) for k in ("spark.jobGroup.id", "spark.job.description")}
    try:
        sc.setLocalProperty("spark.jobGroup.id", "lancepart-worker-check")
        sc.setLocalProperty("spark.job.description", "lancepart: check the Python workers")
        try:
            rows = sc.parallelize([0], 1).mapPartitions(_probe()).collect()
        finally:
            for k, v in saved.items():
                sc.setLocalProperty(k, v)
    except Exception as e:
        raise WorkerEnvironmentError(
            f"Spark's Python workers cannot run on python {configured!r}: {_failure_detail(e)} "
            f"(the driver runs {sys.executable}); {_HINT}") from e
    info = json.loads(rows[0])
    info["check_ms"] = round((time.monotonic() - t) * 1000, 1)
    where = f"python {info['python']} ({info['python_version']}) on host {info['host']}"
    if info["errors"]:
        name = next(m for m in MODULES if m in info["errors"])
        raise WorkerEnvironmentError(
            f"Spark's Python workers cannot import {name} ({info['errors'][name]}) on {where}, "
            f"configured as {configured!r}; the driver runs {sys.executable}; {_HINT}")
    driver = driver_versions()
    for name in VERSIONED:
        if info["versions"].get(name) != driver[name]:
            raise WorkerEnvironmentError(
                f"Spark's Python workers have {name} {info['versions'].get(name)} on {where}, the driver "
                f"{name} {driver[name]} ({sys.executable}): fragments written and read on both sides must "
                f"use one version; {_HINT}")
    log.info("Spark's Python workers checked in %.0f ms: %s, pyarrow %s, lance %s", info["check_ms"], where,
             info["versions"]["pyarrow"], info["versions"]["lance"])
    setattr(sc, _CACHE_ATTR, info)
    return info
