"""Nightly maintenance of a namespace: compaction on Spark, then cleanup of old versions.

Two tasks in the project directory, both reading one job config:

1. ``compact``: ``./spark-submit.sh jobs/compact.py --config <config> [spark args]`` rewrites
   small fragments and publishes them in one ``__manifest`` commit (safe beside live writers);
2. ``cleanup``: ``lancepart cleanup --config <config> --older-than <older_than>`` removes
   versions superseded longer ago than that and files no version references, never what a
   published ``read_version``/``read_tag``/``read_branch`` pins.

Both are idempotent, so retries are safe. ``older_than`` must exceed the longest write job
(ingest tasks time out after 6 hours; the default is 7 days).

Parse-time cost: standard library and Airflow only; lancepart is imported by the commands.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from datetime import timedelta
from pathlib import Path

import pendulum

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.models.param import Param
    from airflow.operators.bash import BashOperator

# The checkout holding spark-submit.sh, jobs/ and configs/: $LANCEPART_HOME, else this file's parent folder.
PROJECT_DIR = os.environ.get("LANCEPART_HOME") or str(Path(__file__).resolve().parents[1])
# The `lancepart` console script: $LANCEPART_CLI, else the one installed beside this Python, else PATH.
_beside = Path(sys.executable).with_name("lancepart")
LANCEPART_CLI = (os.environ.get("LANCEPART_CLI") or (str(_beside) if _beside.exists() else None)
                 or shutil.which("lancepart") or "lancepart")
SPARK_ARGS_PATTERN = r"^[A-Za-z0-9_.,:=/@+\-\[\]\* ]*$"

with DAG(
    dag_id="lancepart_maintenance",
    description="compaction (jobs/compact.py on Spark), then lancepart cleanup",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={
        "retries": 2,
        "retry_delay": timedelta(minutes=5),
        "retry_exponential_backoff": True,
        "execution_timeout": timedelta(hours=6),
    },
    params={
        "config": Param("configs/compact-demo.yaml", type="string", minLength=1,
                        description="job config YAML with namespace.root and a compact: section"),
        "older_than": Param("7d", type="string", pattern=r"^(0|([0-9]+[wdhms])+)$",
                            description="cleanup retention: 7d, 36h, 1d12h, ..."),
        "spark_args": Param("", type="string", pattern=SPARK_ARGS_PATTERN,
                            description="extra spark-submit options, e.g. --master yarn --conf k=v"),
    },
    user_defined_filters={"sh": shlex.quote},
    tags=["lancepart"],
) as dag:
    compact = BashOperator(
        task_id="compact",
        # set -f: spark_args such as --master local[2] are not file globs
        bash_command="set -f; ./spark-submit.sh jobs/compact.py --config {{ params.config | sh }} "
                     "{{ params.spark_args }}",
        cwd=PROJECT_DIR,
        do_xcom_push=False,
    )
    cleanup = BashOperator(
        task_id="cleanup",
        bash_command=(shlex.quote(LANCEPART_CLI) + " cleanup --config {{ params.config | sh }} "
                      "--older-than {{ params.older_than | sh }}"),
        cwd=PROJECT_DIR,
        do_xcom_push=False,
    )
    compact >> cleanup
