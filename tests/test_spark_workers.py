"""Spark's Python workers (docs/deployment.md "Which Python the workers run"): a driver whose
workers run a Python without lancepart's dependencies gets a typed WorkerEnvironmentError
naming the module and the Python, before anything is written; ``get_session`` started from the
venv's interpreter with a clean environment runs its workers on that interpreter.

Every case runs in its own process: which Python the workers run is fixed when the process
starts its SparkContext, and the shared ``spark`` fixture already has one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a Spark driver process per test

REPO = Path(__file__).resolve().parent.parent
BARE_PYTHON = "/usr/bin/python3"  # the system interpreter: no pyarrow, no lance


def _bare_python_lacks_pyarrow() -> bool:
    if not os.path.exists(BARE_PYTHON):
        return False
    return subprocess.run([BARE_PYTHON, "-c", "import pyarrow"], capture_output=True).returncode != 0


def _run(script: str, env: dict[str, str], tmp_path: Path) -> dict:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(script))
    p = subprocess.run([sys.executable, str(path)], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def _clean_env(**extra: str) -> dict[str, str]:
    """No PYSPARK_* variables, a PATH with neither the venv nor pyenv: `python3` is the system one."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
    for jvm in ("JAVA_HOME", "SPARK_SUBMIT_OPTS"):  # which Java and its options (tests/conftest.py), not Python
        if jvm in os.environ:
            env[jvm] = os.environ[jvm]
    env.update(extra)
    return env


@pytest.mark.skipif(not _bare_python_lacks_pyarrow(), reason=f"needs {BARE_PYTHON} without pyarrow")
def test_write_on_workers_without_pyarrow_raises_worker_environment_error(tmp_path):
    """Issue 13 item 4: a plain ``SparkSession.builder`` whose workers run the system Python
    (``PYSPARK_PYTHON`` and ``spark.pyspark.python`` = /usr/bin/python3). ``lps.write`` raises
    WorkerEnvironmentError naming pyarrow and /usr/bin/python3, with the quality gate on too
    (it used to report every expectation as failed), and publishes nothing;
    ``spark.lancepart.checkWorkers=false`` skips the check (the raw failure comes back)."""
    out = _run(f"""
        import json
        from pyspark.sql import SparkSession
        from lancepart import spark as lps
        from lancepart.errors import MissingDependencyError, WorkerEnvironmentError
        from lancepart.spark.sample import generated_events
        from tests.conftest import create_events_ns

        ns = create_events_ns("ns")
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.pyspark.python", "{BARE_PYTHON}").getOrCreate())
        df = generated_events(spark, 1000, slices=1)
        res = {{}}
        for case, kwargs in (("gate", {{"expectations": [{{"type": "not_null", "column": "id"}},
                                                        {{"type": "row_count", "min": 1}}]}}),
                             ("plain", {{}})):
            try:
                lps.write(df, ns.root, **kwargs)
                res[case] = None
            except Exception as e:
                res[case] = {{"type": type(e).__name__, "message": str(e),
                              "missing": isinstance(e, MissingDependencyError)}}
        spark.conf.set("spark.lancepart.checkWorkers", "false")
        try:
            lps.write(df, ns.root)
            res["skipped"] = None
        except Exception as e:
            res["skipped"] = {{"type": type(e).__name__}}
        ns.refresh()
        res["partitions"] = len(ns.partitions())
        print(json.dumps(res))
    """, _clean_env(PYSPARK_PYTHON=BARE_PYTHON), tmp_path)
    for case in ("gate", "plain"):
        err = out[case]
        assert err is not None, f"{case}: the write succeeded on workers without pyarrow"
        assert err["type"] == "WorkerEnvironmentError", err
        assert err["missing"], err
        assert "cannot import pyarrow" in err["message"] and BARE_PYTHON in err["message"], err["message"]
        assert "PYSPARK_PYTHON" in err["message"] and "spark.lancepart.checkWorkers" in err["message"]
    assert out["skipped"] is not None and out["skipped"]["type"] != "WorkerEnvironmentError", out["skipped"]
    assert out["partitions"] == 0  # nothing published


def test_get_session_runs_workers_on_the_drivers_python_with_a_clean_env(tmp_path):
    """Issue 13 item 4: ``.venv/bin/python job.py`` without an activated venv (no PYSPARK_PYTHON,
    PATH without the venv, so ``python3`` is the system one): ``get_session`` points the workers
    at ``sys.executable`` and the write and read work. The check runs once per SparkContext."""
    out = _run("""
        import json, sys, time
        from lancepart import spark as lps
        from lancepart.spark.sample import generated_events
        from lancepart.spark.session import get_session
        from lancepart.spark.workers import check_workers
        from tests.conftest import create_events_ns

        ns = create_events_ns("ns")
        spark = get_session("workers-test", {"spark.ui.enabled": "false"}, master="local[1]")
        r = lps.write(generated_events(spark, 2000, slices=2), ns.root)
        first = check_workers(spark)
        t = time.monotonic()
        again = check_workers(spark)
        cached_ms = (time.monotonic() - t) * 1000
        probes = spark.sparkContext.statusTracker().getJobIdsForGroup("lancepart-worker-check")
        print(json.dumps({"rows": r.rows_written, "read": lps.read(spark, ns.root).count(),
                          "worker_python": first["python"], "driver_python": sys.executable,
                          "check_ms": first["check_ms"], "cached": again is first,
                          "cached_ms": cached_ms, "probe_jobs": len(probes),
                          "conf": spark.conf.get("spark.pyspark.python")}))
    """, _clean_env(), tmp_path)
    assert out["rows"] == out["read"] == 2000
    assert os.path.realpath(out["worker_python"]) == os.path.realpath(out["driver_python"])
    assert out["conf"] == out["driver_python"]
    assert out["cached"] and out["probe_jobs"] == 1  # the write probed the workers; the later calls ran no job
    print(f"worker check: {out['check_ms']} ms first, {out['cached_ms']:.3f} ms cached")


@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java")
def test_get_session_keeps_the_users_pyspark_python(tmp_path):
    """A ``PYSPARK_PYTHON`` the user set wins over ``sys.executable`` (here: the system Python,
    so the first lps call raises the typed error naming it)."""
    if not _bare_python_lacks_pyarrow():
        pytest.skip(f"needs {BARE_PYTHON} without pyarrow")
    out = _run("""
        import json
        from lancepart.errors import WorkerEnvironmentError
        from lancepart.spark.session import get_session
        from lancepart.spark.workers import check_workers

        spark = get_session("workers-test", {"spark.ui.enabled": "false"}, master="local[1]")
        try:
            check_workers(spark)
            print(json.dumps({"error": None}))
        except WorkerEnvironmentError as e:
            print(json.dumps({"error": str(e)}))
    """, _clean_env(PYSPARK_PYTHON=BARE_PYTHON), tmp_path)
    assert out["error"] and BARE_PYTHON in out["error"] and "pyarrow" in out["error"]
