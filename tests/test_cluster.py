"""Cluster deployment (docs/deployment.md): ``make dist`` packs the runtime environment and
``./spark-submit.sh --master spark://...`` ships it to a real Spark standalone cluster (master +
2 workers started from pyspark's own ``spark-class`` on 127.0.0.1), whose executors run the
ingest job on the archive's Python. Opt-in: ``pytest --cluster`` (builds the archive if it is
missing or older than the sources, ~1 min, then ~1-2 min for the cluster and the job); the
check of a missing archive runs in the default suite.

The cluster's processes are started in their own process groups and killed on every path
(fixture finalizer), also when the job fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.spark_cluster import standalone_cluster

REPO = Path(__file__).resolve().parent.parent
ARCHIVE = REPO / "build" / "lancepart-env.tar.gz"


@pytest.fixture(scope="module")
def archive() -> Path:
    """The packed environment, as ``make dist`` builds it (a no-op when it is up to date)."""
    t = time.monotonic()
    subprocess.run(["make", "-s", "dist"], cwd=REPO, check=True, timeout=900,
                   env={k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "MAKE"))})
    print(f"make dist: {time.monotonic() - t:.1f} s, {ARCHIVE.stat().st_size / 1e6:.0f} MB")
    return ARCHIVE


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[dict]:
    """A Spark standalone master and two workers (1 core, 1 GiB each) on 127.0.0.1."""
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster


@pytest.mark.cluster
@pytest.mark.spark
def test_spark_submit_ships_the_packed_environment_to_a_standalone_cluster(archive, standalone, tmp_path):
    """Issue 13 item 2: ``./spark-submit.sh jobs/ingest.py --config ... --master spark://...``
    ships ``build/lancepart-env.tar.gz#environment`` with ``--archives`` and runs the Python
    workers on ``./environment/bin/python``, with nothing else set by the caller: no SPARK_HOME,
    no PYSPARK_PYTHON. The job publishes every generated row, written by executors on both
    workers, each of which unpacked the environment into its working directory. (The workers'
    ``python3`` on the PATH has no pyarrow: on any other Python the job's worker check fails.)"""
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    root = tmp_path / "ns"  # a local path every executor sees: they all run on this machine
    cfg["namespace"]["root"] = str(root)
    cfg["source"]["rows"] = 20_000
    cfg["batch_id"] = "cluster-1"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(LANCEPART_PYTHON=sys.executable, PYTHONPATH=str(REPO))
    t = time.monotonic()
    p = subprocess.run(
        ["./spark-submit.sh", "jobs/ingest.py", "--config", str(tmp_path / "job.yaml"),
         "--master", standalone["master"], "--conf", "spark.driver.host=127.0.0.1",
         "--conf", "spark.driver.bindAddress=127.0.0.1", "--executor-memory", "512m",
         "--conf", "spark.executor.cores=1", "--total-executor-cores", "2",
         "--conf", "spark.sql.shuffle.partitions=4"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - t
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-8000:]}"
    out = p.stdout.strip()
    summary = json.loads(out[out.rfind("\n{") + 1:])  # the job prints its summary last, indented
    assert summary["rows_written"] == 20_000, summary

    from lancepart import PartitionedNamespace

    ns = PartitionedNamespace.open(str(root))
    assert ns.to_table().num_rows == 20_000
    assert sorted(ns.to_table(columns=["id"]).column("id").to_pylist()) == list(range(20_000))

    # every worker ran an executor of this app, which unpacked the environment and ran its Python
    pythons, sizes = [], []
    for work in standalone["work_dirs"]:
        apps = sorted(work.glob("app-*/*"))
        assert apps, f"no executor ran on {work}"
        for executor in apps:
            env_dir = executor / "environment"
            assert (env_dir / "bin" / "python").exists(), sorted(os.listdir(executor))
            sizes.append(int(subprocess.run(["du", "-sm", str(env_dir) + "/"], capture_output=True, text=True)
                             .stdout.split()[0]))
            pythons.append(str(env_dir / "bin" / "python"))
    assert len(pythons) >= 2
    print(f"cluster job: {elapsed:.1f} s; unpacked environment per executor: {sizes} MB")


def test_spark_submit_without_the_archive_says_how_to_build_it(tmp_path):
    """Issue 13 item 2: a non-local ``--master`` without the packed environment stops before
    submitting anything (no JVM is started) and says to run ``make dist``; ``local[...]`` needs
    no archive (tests/test_ingest_job.py runs it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(LANCEPART_PYTHON=sys.executable, LANCEPART_ARCHIVE=str(tmp_path / "missing.tar.gz"))
    p = subprocess.run(["./spark-submit.sh", "jobs/ingest.py", "--config", "configs/demo.yaml",
                        "--master", "spark://127.0.0.1:7077"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "make dist" in p.stderr and str(tmp_path / "missing.tar.gz") in p.stderr, p.stderr
    assert "LANCEPART_ARCHIVE" in p.stderr and "docs/deployment.md" in p.stderr
