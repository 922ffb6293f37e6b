"""Ingest a job config's source into its namespace with Spark, exactly once per logical date.

One task: ``./spark-submit.sh jobs/ingest.py --config=<config> --batch-id=<id> [deployment
spark-submit options]`` in the project directory. The batch id defaults to
``lancepart_ingest:<config>:<logical date>`` (the run id when a run has no logical date), so
every retry of a run, and every rerun of the same logical date, reuses it: a job that
published and then died is retried as a no-op (``"skipped": true``), never as a duplicate.

    airflow dags trigger lancepart_ingest --conf '{"config": "configs/demo.yaml"}'

A run chooses only ``config`` and ``batch_id``. Where Spark runs (``--master``, ``--conf``,
``--archives`` ...) belongs to the deployment: ``$LANCEPART_SPARK_SUBMIT_ARGS`` on the worker
and the job config's ``spark:`` section. Any other run parameter (``spark_args`` included)
fails the task before anything runs, without retries. The run's values reach the command
through environment variables, never through the shell text or a template.

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
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.exceptions import AirflowFailException
    from airflow.models.param import Param
    from airflow.operators.bash import BashOperator

# The checkout holding spark-submit.sh, jobs/ and configs/: $LANCEPART_HOME, else this file's parent folder.
PROJECT_DIR = os.environ.get("LANCEPART_HOME") or str(Path(__file__).resolve().parents[1])
# spark-submit options of the deployment (shell words), read on the worker when the task runs.
SPARK_SUBMIT_ARGS_ENV = "LANCEPART_SPARK_SUBMIT_ARGS"
# When set, a run's config must be a file inside this directory (symlinks resolved).
CONFIG_DIR_ENV = "LANCEPART_CONFIG_DIR"
RUN_PARAMS = ("config", "batch_id")
COMMAND = ('exec ./spark-submit.sh jobs/ingest.py --config="$LANCEPART_RUN_CONFIG" '
           '--batch-id="$LANCEPART_RUN_BATCH_ID"')


def refuse(message: str):
    """Fail the task now, before any command runs, and without retries (a bad run parameter
    stays bad on every attempt)."""
    raise AirflowFailException(message)


def deployment_spark_args() -> list[str]:
    """``$LANCEPART_SPARK_SUBMIT_ARGS`` split into shell words (never from a run parameter)."""
    text = os.environ.get(SPARK_SUBMIT_ARGS_ENV, "")
    try:
        return shlex.split(text)
    except ValueError as e:
        refuse(f"${SPARK_SUBMIT_ARGS_ENV} is not a list of shell words: {e}")
    return []  # not reached


def check_run_conf(context, allowed: tuple[str, ...]) -> None:
    """Refuse run parameters other than ``allowed`` (``spark_args``, ``master``, ...)."""
    dag_run = context.get("dag_run")
    conf = getattr(dag_run, "conf", None) or {}
    if unknown := sorted(set(conf) - set(allowed)):
        refuse(f"run parameter(s) {unknown} are not accepted: a run chooses only {list(allowed)}; the Spark "
               f"master and confs come from the deployment (${SPARK_SUBMIT_ARGS_ENV} on the worker, the job "
               f"config's spark: section)")


def check_config(value) -> str:
    """The run's ``config``: a path (relative to the project directory) of an existing file,
    inside ``$LANCEPART_CONFIG_DIR`` when that is set. Returned as given."""
    if not isinstance(value, str) or not value.strip():
        refuse(f"config must be a non-empty path, got {value!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        refuse(f"config {value!r} contains a control character (a newline, tab, ...)")
    path = (Path(PROJECT_DIR) / value).resolve()
    if not path.is_file():
        refuse(f"config {value!r} is not a file (relative paths are taken from {PROJECT_DIR})")
    if config_dir := os.environ.get(CONFIG_DIR_ENV):
        if not path.is_relative_to(Path(config_dir).resolve()):
            refuse(f"config {value!r} is outside ${CONFIG_DIR_ENV} ({config_dir})")
    return value


def check_batch_id(value) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        refuse(f"batch_id must be a string, got {type(value).__name__} {value!r}")
    if "\0" in value:
        refuse("batch_id must not contain a NUL character")
    return value


class LancepartCommand(BashOperator):
    """A BashOperator whose command is built when the task runs, from validated run parameters.
    Nothing a run chooses is rendered as a template or parsed by the shell: ``build(context)``
    returns the command (fixed text plus the deployment's quoted words) and the environment
    variables that carry the run's values."""

    template_fields = ()

    def __init__(self, *, build, **kwargs) -> None:
        super().__init__(append_env=True, **kwargs)
        self.build = build

    def execute(self, context):
        self.bash_command, self.env = self.build(context)
        return super().execute(context)


def ingest_command(context) -> tuple[str, dict[str, str]]:
    check_run_conf(context, RUN_PARAMS)
    params = context["params"]
    config = check_config(params.get("config"))
    batch = check_batch_id(params.get("batch_id"))
    if batch is None:
        logical_date = context.get("logical_date")
        when = logical_date.isoformat() if logical_date else context["run_id"]
        batch = f"lancepart_ingest:{config}:{when}"
    command = " ".join([COMMAND, *map(shlex.quote, deployment_spark_args())])
    return command, {"LANCEPART_RUN_CONFIG": config, "LANCEPART_RUN_BATCH_ID": batch}


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
    },
    tags=["lancepart"],
) as dag:
    LancepartCommand(
        task_id="ingest",
        build=ingest_command,
        bash_command=COMMAND + f" ${SPARK_SUBMIT_ARGS_ENV}",  # shown in the UI; the real one is built at run time
        cwd=PROJECT_DIR,
        do_xcom_push=False,
    )
