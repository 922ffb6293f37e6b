"""Ingest a job config's source into its namespace with Spark, exactly once per logical date.

One task: ``./spark-submit.sh jobs/ingest.py --config=<config> --batch-id=<run's batch_id>
--logical-date=<YYYY-MM-DD> --default-batch-id=<id> [deployment spark-submit options]`` in the
project directory. The batch id follows the job's one rule (jobs/ingest.py): the run's
``batch_id`` when it gives one; else the config's ``batch_id``, its ``{logical_date}`` rendered
as the run's logical date (``YYYY-MM-DD``; a run without one: the config's own
``logical_date``) and a literal id used as written; else ``lancepart_ingest:<config>:<logical
date>`` (the run id when a run has no logical date). So ``make demo`` and a run for the demo's
date publish under one id, and every retry of a run, and every rerun of the same logical date,
reuses its id: a job that published and then died is retried as a no-op (``"skipped": true``),
never as a duplicate.

    airflow dags test lancepart_ingest 2025-12-01        # one run, in this process

A run chooses only ``config`` and ``batch_id``. Where Spark runs (``--master``, ``--conf``,
``--archives`` ...) belongs to the deployment: ``$LANCEPART_SPARK_SUBMIT_ARGS`` on the worker
and the job config's ``spark:`` section. Any other run parameter (``spark_args`` included)
fails the task before anything runs, without retries. The run's values reach the command
through environment variables, never through the shell text or a template.

Parse-time cost: standard library and Airflow only; lancepart is imported by the job. What both
lancepart DAGs share is in ``lancepart_common.py`` beside this file.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pendulum

# lancepart_common.py is beside this file. Airflow's own parsers (DAG processor, task runner, `airflow dags
# test`) put the DAGs folder on sys.path, but a plain DagBag (`airflow dags list --local`, a DAG test suite)
# and a bundle rooted above this folder do not: add it here, at the end of sys.path.
if (_dags_folder := str(Path(__file__).resolve().parent)) not in sys.path:
    sys.path.append(_dags_folder)

from lancepart_common import (
    DAG,
    SPARK_SUBMIT_ARGS_ENV,
    LancepartCommand,
    Param,
    check_config,
    check_run_conf,
    refuse,
    with_deployment_spark_args,
)

RUN_PARAMS = ("config", "batch_id")
COMMAND = ('exec ./spark-submit.sh jobs/ingest.py --config="$LANCEPART_RUN_CONFIG" '
           '--batch-id="$LANCEPART_RUN_BATCH_ID" --logical-date="$LANCEPART_RUN_LOGICAL_DATE" '
           '--default-batch-id="$LANCEPART_RUN_DEFAULT_BATCH_ID"')


def check_batch_id(value) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        refuse(f"batch_id must be a string, got {type(value).__name__} {value!r}")
    if "\0" in value:
        refuse("batch_id must not contain a NUL character")
    return value


def batch_id_inputs(context, config: str) -> dict[str, str]:
    """What the job needs to choose the run's batch id (the rule is the job's, in one place):
    the run's own ``batch_id`` (empty: none), the run's logical date as ``YYYY-MM-DD`` for the
    config's ``{logical_date}`` (empty for a run without one: the config's own date applies)
    and the id for a config without ``batch_id``."""
    batch = check_batch_id(context["params"].get("batch_id"))
    logical_date = context.get("logical_date")
    when = logical_date.isoformat() if logical_date else context["run_id"]
    return {"LANCEPART_RUN_BATCH_ID": batch or "",
            "LANCEPART_RUN_LOGICAL_DATE": logical_date.strftime("%Y-%m-%d") if logical_date else "",
            "LANCEPART_RUN_DEFAULT_BATCH_ID": f"lancepart_ingest:{config}:{when}"}


def ingest_command(context) -> tuple[str, dict[str, str]]:
    check_run_conf(context, RUN_PARAMS)
    config = check_config(context["params"].get("config"))
    return with_deployment_spark_args(COMMAND), {"LANCEPART_RUN_CONFIG": config, **batch_id_inputs(context, config)}


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
                          description="exactly-once id; default: the config's batch_id ({logical_date} is "
                                      "the run's date), else lancepart_ingest:<config>:<logical date>"),
    },
    tags=["lancepart"],
) as dag:
    LancepartCommand(
        task_id="ingest",
        build=ingest_command,
        bash_command=COMMAND + f" ${SPARK_SUBMIT_ARGS_ENV}",  # shown in the UI; the real one is built at run time
    )
