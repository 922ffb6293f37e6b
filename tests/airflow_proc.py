"""Airflow in its own process, for tests/test_airflow_dags.py (Airflow configures logging and a
database at import, which must not leak into the test process or the repository).

    python tests/airflow_proc.py initdb OUT
    python tests/airflow_proc.py dagbag DAG_FOLDER OUT
    python tests/airflow_proc.py test DAG_FOLDER DAG_ID LOGICAL_DATE CONF_JSON RETRY_DELAY_S OUT
    python tests/airflow_proc.py runs DAG_FOLDER RUNS_JSON RETRY_DELAY_S OUT
    python tests/airflow_proc.py param SCHEMA_JSON VALUE_JSON OUT

AIRFLOW_HOME and the rest of Airflow's configuration come from the environment. Each command
writes one JSON document to OUT. ``runs`` makes several ``dag.test()`` runs one after the other
in this one process (RUNS_JSON: a list of ``{"name", "dag_id", "logical_date", "conf"}``; OUT:
name -> result) and prints ``RUN_MARK + name`` before each, so a test can cut the log per run.
"""

from __future__ import annotations

import json
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


def describe(folder: str) -> dict:
    bag = _dagbag(folder)
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


def run_test(folder: str, dag_id: str, logical_date: str, conf: dict, retry_delay_s: float, dag=None) -> dict:
    dag = dag if dag is not None else _dagbag(folder).dags[dag_id]
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
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id,
                                                 TaskInstance.run_id == run.run_id).all()
        tasks = {ti.task_id: {"state": str(ti.state), "try_number": ti.try_number} for ti in tis}
    return {"state": str(run.state), "run_id": run.run_id, "tasks": tasks}


def main(argv: list[str]) -> int:
    cmd, *rest = argv
    if cmd == "initdb":
        from airflow.utils import db

        db.initdb()
        out, result = rest[0], {"ok": True}
    elif cmd == "dagbag":
        out, result = rest[1], describe(rest[0])
    elif cmd == "test":
        folder, dag_id, logical_date, conf, delay, out = rest
        result = run_test(folder, dag_id, logical_date, json.loads(conf), float(delay))
    elif cmd == "runs":  # one Airflow process, one DagBag, several runs
        folder, runs, delay, out = rest
        dags = _dagbag(folder).dags
        result = {}
        for run in json.loads(runs):
            print(RUN_MARK + run["name"], flush=True)
            result[run["name"]] = run_test(folder, run["dag_id"], run["logical_date"], run["conf"], float(delay),
                                           dag=dags[run["dag_id"]])
    elif cmd == "param":  # does Airflow's Param accept VALUE under SCHEMA (type, pattern, ...)?
        try:
            from airflow.sdk import Param
        except ImportError:
            from airflow.models.param import Param
        schema, value, out = json.loads(rest[0]), json.loads(rest[1]), rest[2]
        try:
            result = {"accepted": True, "value": Param(value, **schema).resolve()}
        except Exception as e:
            result = {"accepted": False, "error": f"{type(e).__name__}: {e}"}
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    with open(out, "w") as f:
        json.dump(result, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
