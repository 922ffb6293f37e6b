"""Ingest a job config's source into its namespace with Spark, exactly once per logical date.

One task: ``./spark-submit.sh jobs/ingest.py --config <config> [spark args] -- --batch-id <id>``
in the project directory. The batch id defaults to ``lancepart_ingest:<config>:<logical
date>`` (the run id when a run has no logical date), so every retry of a run, and every
rerun of the same logical date, reuses it: a job that published and then died is retried as
a no-op (``"skipped": true``), never as a duplicate.

    airflow dags trigger lancepart_ingest --conf '{"config": "configs/demo.yaml"}'

Parse-time cost: standard library and Airflow only; lancepart is imported by the job.
"""

from __future__ import annotations

import os
import shlex
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
# Shell words a trigger may pass through to spark-submit (--master yarn --conf k=v ...): no ; | & $ ` quotes.
SPARK_ARGS_PATTERN = r"^[A-Za-z0-9_.,:=/@+\-\[\]\* ]*$"

BATCH_ID = (
    "{% set batch = params.batch_id or (dag.dag_id ~ ':' ~ params.config ~ ':' ~ "
    "(logical_date.isoformat() if logical_date is defined and logical_date else run_id)) %}"
)

with DAG(
    dag_id="lancepart_ingest",
    description="jobs/ingest.py through ./spark-submit.sh; exactly once per logical date (batch id)",
    schedule=None,  # triggered per config (a file landing, an upstream DAG, by hand)
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    default_args={
        "retries": 3,
        "retry_delay": timedelta(minutes=2),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
        # cleanup keeps versions for 7 days by default; a job must end well within that
        "execution_timeout": timedelta(hours=6),
    },
    params={
        "config": Param("configs/demo.yaml", type="string", minLength=1,
                        description="job config YAML, relative to the project directory or absolute"),
        "batch_id": Param(None, type=["null", "string"],
                          description="exactly-once id; default lancepart_ingest:<config>:<logical date>"),
        "spark_args": Param("", type="string", pattern=SPARK_ARGS_PATTERN,
                            description="extra spark-submit options, e.g. --master yarn --conf k=v"),
    },
    user_defined_filters={"sh": shlex.quote},
    tags=["lancepart"],
) as dag:
    BashOperator(
        task_id="ingest",
        bash_command=BATCH_ID + (
            "set -f; ./spark-submit.sh jobs/ingest.py --config {{ params.config | sh }} {{ params.spark_args }} "
            "-- --batch-id {{ batch | sh }}"
        ),
        cwd=PROJECT_DIR,
        do_xcom_push=False,
    )
