"""Airflow in its own process, for tests/test_airflow_dags.py (Airflow configures logging and a
database at import, which must not leak into the test process or the repository).

    python tests/airflow_proc.py batch DAG_FOLDER SPEC_JSON RETRY_DELAY_S OUT

One Airflow process does everything the module asks of Airflow, so Airflow starts, parses the
DAGs and starts its in-process execution API once: it creates the database, describes the
DagBag, checks each ``[schema, value]`` of ``SPEC_JSON["params"]`` with Airflow's ``Param``, and
makes the ``dag.test()`` runs of ``SPEC_JSON["runs"]`` one after the other (each a
``{"name", "dag_id", "logical_date", "conf"}``, plus ``"env"``: variables set for that run only,
as a worker's environment). It prints ``RUN_MARK + name`` before each run, so a test can cut the
log per run, and writes one JSON document to OUT: ``{"dagbag", "params", "runs": name -> result}``.

AIRFLOW_HOME and the rest of Airflow's configuration come from the environment.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta


def _dagbag(folder: str):
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow >= 3.1
    except ImportError:
        from airflow.models.dagbag import DagBag
    try:
        return DagBag(dag_folder=folder, include_examples=False)
    except TypeError:  # Airflow 3 takes examples from [core] load_examples only
        return DagBag(dag_folder=folder)


def describe(bag) -> dict:
    dags = {}
    for dag_id, dag in bag.dags.items():
        dags[dag_id] = {
            "fileloc": dag.fileloc,
            "schedule": getattr(dag, "schedule", None) if isinstance(getattr(dag, "schedule", None), str) else None,
            "params": {k: dag.params.get_param(k).value for k in dag.params},
            "tasks": {t.task_id: {"retries": t.retries, "retry_delay_s": t.retry_delay.total_seconds(),
                                  "operator": type(t).__name__, "bash_command": getattr(t, "bash_command", None),
                                  "cwd": getattr(t, "cwd", None), "upstream": sorted(t.upstream_task_ids)}
                      for t in dag.tasks},
        }
    return {"import_errors": {str(k): str(v) for k, v in bag.import_errors.items()}, "dags": dags}


RUN_MARK = "@@airflow_proc run "


def run_test(dag, logical_date: str, conf: dict, retry_delay_s: float) -> dict:
    for task in dag.tasks:  # same DAG, shorter wait between attempts
        task.retry_delay = timedelta(seconds=retry_delay_s)
        task.retry_exponential_backoff = False
    try:
        run = dag.test(logical_date=datetime.fromisoformat(logical_date), run_conf=conf)
    except Exception as e:  # a run refused before it started (e.g. a Param that does not validate)
        return {"state": "not started", "error": f"{type(e).__name__}: {e}", "tasks": {}}
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag.dag_id,
                                                 TaskInstance.run_id == run.run_id).all()
        tasks = {ti.task_id: {"state": str(ti.state), "try_number": ti.try_number} for ti in tis}
    return {"state": str(run.state), "run_id": run.run_id, "tasks": tasks}


def check_param(schema: dict, value):
    """Does Airflow's Param accept ``value`` under ``schema`` (type, pattern, ...)?"""
    try:
        from airflow.sdk import Param
    except ImportError:
        from airflow.models.param import Param
    try:
        return {"accepted": True, "value": Param(value, **schema).resolve()}
    except Exception as e:
        return {"accepted": False, "error": f"{type(e).__name__}: {e}"}


def run_with_env(dag, run: dict, retry_delay_s: float) -> dict:
    """One ``dag.test()`` run with ``run["env"]`` set in this process's environment (which the
    tasks' commands inherit) for its duration only."""
    saved = {k: os.environ.get(k) for k in run.get("env", {})}
    os.environ.update(run.get("env", {}))
    try:
        return run_test(dag, run["logical_date"], run["conf"], retry_delay_s)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: list[str]) -> int:
    cmd, *rest = argv
    if cmd != "batch":
        raise SystemExit(f"unknown command {cmd!r}")
    folder, spec, delay, out = rest
    spec = json.loads(spec)
    from airflow.utils import db

    db.initdb()
    bag = _dagbag(folder)
    result = {"dagbag": describe(bag), "params": [check_param(schema, value) for schema, value in spec["params"]],
              "runs": {}}
    dags = bag.dags  # the runs shorten their retry delays: described above as the DAGs declare them
    for run in spec["runs"]:
        print(RUN_MARK + run["name"], flush=True)
        result["runs"][run["name"]] = run_with_env(dags[run["dag_id"]], run, float(delay))
    with open(out, "w") as f:
        json.dump(result, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
