"""jobs/ingest.py end to end: config -> namespace -> Spark write -> one publish (README
"Ways in", docs/guide.md "Command line"). Runs the job function in-process on the shared local[2] session,
and the real ./spark-submit.sh once."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
import yaml

from lancepart import PartitionedNamespace
from lancepart.config import JobConfig
from lancepart.job_runner import run_ingest
from lancepart.util.sample import demo_events
from tests.procs import run_job_probe

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[1]


def config(tmp_path: Path, **overrides) -> JobConfig:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["namespace"]["root"] = str(tmp_path / "ns")
    cfg.update(overrides)
    return JobConfig.from_dict(cfg)


def test_parquet_source_with_batch_id(spark, tmp_path):
    data = demo_events(5_000, seed=21)
    pq.write_table(data, tmp_path / "in.parquet")
    cfg = config(tmp_path, source={"kind": "parquet", "path": str(tmp_path / "in.parquet")}, batch_id="p-1")
    first = run_ingest(cfg)
    assert first["namespace_created"] and first["rows_written"] == 5_000 and not first["skipped"]
    assert first["partitions_created"] == first["partitions_touched"] > 0
    again = run_ingest(cfg)
    assert again["skipped"] and again["manifest_version"] == first["manifest_version"]
    ns = PartitionedNamespace.open(cfg.namespace.root)
    assert sorted(ns.to_table(columns=["id"]).column("id").to_pylist()) == list(range(5_000))


def test_csv_source_needs_types_that_fit(spark, tmp_path):
    data = demo_events(300, seed=22).drop_columns(["event_ts"])  # a CSV without the timestamp column
    pcsv.write_csv(data, tmp_path / "in.csv")
    cfg = config(tmp_path, source={"kind": "csv", "path": str(tmp_path / "in.csv"),
                                   "options": {"header": "true", "inferSchema": "true"}})
    out = run_ingest(cfg)
    assert out["rows_written"] == 300
    ns = PartitionedNamespace.open(cfg.namespace.root)
    got = ns.to_table(columns=["id", "event_ts"])
    assert got.column("event_ts").null_count == 300  # absent nullable column is NULL


@pytest.mark.slow
def test_spark_submit_wrapper_runs_the_job(tmp_path):
    """The README's main command path: ./spark-submit.sh jobs/ingest.py --config ... on local[*]."""
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["namespace"]["root"] = str(tmp_path / "ns")
    cfg["source"]["rows"] = 20_000
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK") and k != "LANCE_LOG"}
    proc = subprocess.run([str(REPO / "spark-submit.sh"), "jobs/ingest.py", "--config", str(path), "--master",
                           "local[2]"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["rows_written"] == 20_000 and summary["partitions_touched"] == 140
    assert summary["batch_id"] == "demo-2025-12-01"  # demo-{logical_date} with the config's logical_date
    # issue 12 item 5: no Lance "No existing dataset ..., it will be created" warning per fragment
    assert "No existing dataset" not in proc.stderr, proc.stderr[-2000:]
    # every phase is timed, the quality gate's too
    details = summary["details"]
    for key in ("expectations_s", "write_s", "reserve_s", "commit_tables_s", "manifest_commit_s", "publish_s"):
        assert details[key] >= 0, (key, details)


def test_a_rerun_of_a_published_batch_does_not_start_spark(spark, tmp_path):
    """``make demo`` run again: the config's batch id is published already, so the job prints
    the skipped summary and exits 0 before it creates a SparkSession (on a cluster: before
    every executor copies and unpacks the shipped environment). The same with the id given
    as --batch-id."""
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["namespace"]["root"] = str(tmp_path / "ns")
    cfg["source"]["rows"] = 3_000
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    first = run_ingest(JobConfig.load(str(path)))
    assert first["rows_written"] == 3_000 and not first["skipped"]

    summary, probe = run_job_probe("ingest", "--config", str(path))
    assert probe == {"exit": 0, "spark_context": False, "jvm": False}, (probe, summary)
    assert summary["skipped"] is True and summary["batch_id"] == first["batch_id"] == "demo-2025-12-01"
    assert summary["manifest_version"] == first["manifest_version"] and summary["rows_written"] == 0
    assert summary["namespace_created"] is False and summary["spec_id"] == first["spec_id"]
    assert summary["details"]["batch_id_published_in"] == first["manifest_version"]
    assert set(summary) == set(first) | {"job_seconds"}  # the summary a skipped Spark write prints

    del cfg["batch_id"]
    path.write_text(yaml.safe_dump(cfg))
    summary, probe = run_job_probe("ingest", "--config", str(path), "--batch-id", first["batch_id"])
    assert probe == {"exit": 0, "spark_context": False, "jvm": False} and summary["skipped"] is True


def test_job_exit_code_on_bad_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("namespace: {root: /nonexistent/x}\nmode: upsert\n")
    import sys

    proc = subprocess.run([sys.executable, str(REPO / "jobs" / "ingest.py"), "--config", str(bad)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "mode must be 'append' or 'overwrite'" in proc.stderr
