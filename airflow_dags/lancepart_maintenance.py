"""Nightly maintenance of a namespace: compaction on Spark, then cleanup of old versions.

Two tasks in the project directory, both reading one job config:

1. ``compact``: ``./spark-submit.sh jobs/compact.py --config=<config> [deployment spark-submit
   options]`` rewrites small fragments and publishes them in one ``__manifest`` commit (safe
   beside live writers);
2. ``cleanup``: ``lancepart cleanup --config=<config> --older-than=<older_than>`` removes
   versions superseded longer ago than that and files no version references, never what a
   published ``read_version``/``read_tag``/``read_branch`` pins.

Both are idempotent, so retries are safe. ``older_than`` must exceed the longest write job
(ingest tasks time out after 6 hours; the default is 7 days) and is never below the
retention floor of 1 hour: a smaller value (``0`` included) fails the run before anything
runs, and the DAG never passes ``--allow-short-retention``. A run chooses only ``config``
and ``older_than``; the Spark master and confs come from the deployment
(``$LANCEPART_SPARK_SUBMIT_ARGS`` on the worker, the job config's ``spark:`` section).

Parse-time cost: standard library and Airflow only; lancepart is imported by the commands.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
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
# The `lancepart` console script: $LANCEPART_CLI, else the one installed beside this Python, else PATH.
_beside = Path(sys.executable).with_name("lancepart")
LANCEPART_CLI = (os.environ.get("LANCEPART_CLI") or (str(_beside) if _beside.exists() else None)
                 or shutil.which("lancepart") or "lancepart")
# spark-submit options of the deployment (shell words), read on the worker when the task runs.
SPARK_SUBMIT_ARGS_ENV = "LANCEPART_SPARK_SUBMIT_ARGS"
# When set, a run's config must be a file inside this directory (symlinks resolved).
CONFIG_DIR_ENV = "LANCEPART_CONFIG_DIR"
RUN_PARAMS = ("config", "older_than")
# The smallest cleanup retention this DAG asks for (lancepart's own floor is the same by default).
MIN_RETENTION = timedelta(hours=1)
_DURATION = re.compile(r"(\d+)([wdhms])")
_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
COMPACT = 'exec ./spark-submit.sh jobs/compact.py --config="$LANCEPART_RUN_CONFIG"'
CLEANUP = (shlex.quote(LANCEPART_CLI) + ' cleanup --config="$LANCEPART_RUN_CONFIG" '
           '--older-than="$LANCEPART_RUN_OLDER_THAN"')


def refuse(message: str):
    """Fail the task now, before any command runs, and without retries (a bad run parameter
    stays bad on every attempt)."""
    raise AirflowFailException(message)


def deployment_spark_args() -> list[str]:
    """``$LANCEPART_SPARK_SUBMIT_ARGS`` split into shell words (never from a run parameter)."""
    try:
        return shlex.split(os.environ.get(SPARK_SUBMIT_ARGS_ENV, ""))
    except ValueError as e:
        refuse(f"${SPARK_SUBMIT_ARGS_ENV} is not a list of shell words: {e}")
    return []  # not reached


def check_run_conf(context, allowed: tuple[str, ...]) -> None:
    """Refuse run parameters other than ``allowed`` (``spark_args``, ``master``, ...)."""
    conf = getattr(context.get("dag_run"), "conf", None) or {}
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


def check_older_than(value) -> str:
    """``older_than``: whole units (``7d``, ``36h``, ``1d12h``, ``90m``), at least 1 hour.
    Matched in full here (a JSON-schema ``pattern`` is a search, and ``$`` matches before a
    final newline), so ``0``, ``30m`` or ``7d\\n`` never reach the command."""
    if isinstance(value, (str, int)) and str(value).strip() in ("0", "0.0"):
        total = timedelta(0)
    elif not isinstance(value, str) or not value or _DURATION.sub("", value):
        refuse(f"older_than must be a duration like 7d, 36h or 1d12h, got {value!r}")
    else:
        total = sum((timedelta(**{_UNITS[u]: int(n)}) for n, u in _DURATION.findall(value)), timedelta(0))
    if total < MIN_RETENTION:
        refuse(f"older_than {value!r} is below the retention floor of 1h: cleanup would delete files that live "
               f"writers and readers still need; this DAG never asks for less")
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


def _run_values(context) -> dict[str, str]:
    check_run_conf(context, RUN_PARAMS)
    params = context["params"]
    return {"LANCEPART_RUN_CONFIG": check_config(params.get("config")),
            "LANCEPART_RUN_OLDER_THAN": check_older_than(params.get("older_than"))}


def compact_command(context) -> tuple[str, dict[str, str]]:
    env = _run_values(context)  # older_than too: a run that cleanup would refuse does not compact either
    return " ".join([COMPACT, *map(shlex.quote, deployment_spark_args())]), env


def cleanup_command(context) -> tuple[str, dict[str, str]]:
    return CLEANUP, _run_values(context)


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
        "older_than": Param("7d", type="string", minLength=1,
                            description="cleanup retention, at least 1h: 7d, 36h, 1d12h, ..."),
    },
    tags=["lancepart"],
) as dag:
    compact = LancepartCommand(
        task_id="compact",
        build=compact_command,
        bash_command=COMPACT + f" ${SPARK_SUBMIT_ARGS_ENV}",  # shown in the UI; the real one is built at run time
        cwd=PROJECT_DIR,
        do_xcom_push=False,
    )
    cleanup = LancepartCommand(
        task_id="cleanup",
        build=cleanup_command,
        bash_command=CLEANUP,
        cwd=PROJECT_DIR,
        do_xcom_push=False,
    )
    compact >> cleanup
