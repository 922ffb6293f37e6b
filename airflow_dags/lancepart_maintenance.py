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

Parse-time cost: standard library and Airflow only; lancepart is imported by the commands. What
both lancepart DAGs share is in ``lancepart_common.py`` beside this file.
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

# The `lancepart` console script: $LANCEPART_CLI, else the one installed beside this Python, else PATH.
_beside = Path(sys.executable).with_name("lancepart")
LANCEPART_CLI = (os.environ.get("LANCEPART_CLI") or (str(_beside) if _beside.exists() else None)
                 or shutil.which("lancepart") or "lancepart")
RUN_PARAMS = ("config", "older_than")
# The smallest cleanup retention this DAG asks for (lancepart's own floor is the same by default).
MIN_RETENTION = timedelta(hours=1)
_DURATION = re.compile(r"(\d+)([wdhms])")
_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
COMPACT = 'exec ./spark-submit.sh jobs/compact.py --config="$LANCEPART_RUN_CONFIG"'
CLEANUP = (shlex.quote(LANCEPART_CLI) + ' cleanup --config="$LANCEPART_RUN_CONFIG" '
           '--older-than="$LANCEPART_RUN_OLDER_THAN"')


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


def _run_values(context) -> dict[str, str]:
    check_run_conf(context, RUN_PARAMS)
    params = context["params"]
    return {"LANCEPART_RUN_CONFIG": check_config(params.get("config")),
            "LANCEPART_RUN_OLDER_THAN": check_older_than(params.get("older_than"))}


def compact_command(context) -> tuple[str, dict[str, str]]:
    env = _run_values(context)  # older_than too: a run that cleanup would refuse does not compact either
    return with_deployment_spark_args(COMPACT), env


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
    )
    cleanup = LancepartCommand(
        task_id="cleanup",
        build=cleanup_command,
        bash_command=CLEANUP,
    )
    compact >> cleanup
