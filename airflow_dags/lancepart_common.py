"""What the lancepart DAGs share: the project directory, the deployment's settings, the checks
of a run's parameters and the operator that builds each command when its task runs.

Not a DAG file (``.airflowignore`` keeps Airflow from parsing it as one): the DAG files
beside it import it (``from lancepart_common import ...``). Parse-time cost: standard library
and Airflow only; lancepart is imported by the commands the DAGs run.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG, Param
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # Airflow 2.x
    from airflow import DAG
    from airflow.exceptions import AirflowFailException
    from airflow.models.param import Param
    from airflow.operators.bash import BashOperator

__all__ = ["CONFIG_DIR_ENV", "DAG", "PROJECT_DIR", "SPARK_SUBMIT_ARGS_ENV", "LancepartCommand", "Param",
           "check_config", "check_run_conf", "deployment_spark_args", "refuse", "with_deployment_spark_args"]

# The checkout holding spark-submit.sh, jobs/ and configs/: $LANCEPART_HOME, else this file's parent folder.
PROJECT_DIR = os.environ.get("LANCEPART_HOME") or str(Path(__file__).resolve().parents[1])
# spark-submit options of the deployment (shell words), read on the worker when the task runs.
SPARK_SUBMIT_ARGS_ENV = "LANCEPART_SPARK_SUBMIT_ARGS"
# When set, a run's config must be a file inside this directory (symlinks resolved).
CONFIG_DIR_ENV = "LANCEPART_CONFIG_DIR"


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


def with_deployment_spark_args(command: str) -> str:
    """``command`` followed by the deployment's spark-submit options, each quoted for the shell."""
    return " ".join([command, *map(shlex.quote, deployment_spark_args())])


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


class LancepartCommand(BashOperator):
    """A BashOperator whose command is built when the task runs, from validated run parameters.
    Nothing a run chooses is rendered as a template or parsed by the shell: ``build(context)``
    returns the command (fixed text plus the deployment's quoted words) and the environment
    variables that carry the run's values. Runs in the project directory; pushes no XCom.
    ``bash_command`` is only what the UI shows until the task runs."""

    template_fields = ()

    def __init__(self, *, build, **kwargs) -> None:
        kwargs.setdefault("cwd", PROJECT_DIR)
        kwargs.setdefault("do_xcom_push", False)
        super().__init__(append_env=True, **kwargs)
        self.build = build

    def execute(self, context):
        self.bash_command, self.env = self.build(context)
        return super().execute(context)
