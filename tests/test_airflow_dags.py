"""airflow_dags/ in a real Airflow: a DagBag, and ``dag.test()`` runs that call the real
``./spark-submit.sh jobs/*.py`` and ``lancepart`` commands (docs/guide.md "Command line":
the DAGs call exactly those commands).

Airflow runs in a subprocess (tests/airflow_proc.py) with AIRFLOW_HOME and its sqlite database
in a temporary directory, so no Airflow state reaches this process or the repository. It is ONE
process for the whole module (the ``airflow`` fixture): every run is prepared first, then
Airflow starts, parses the DAGs and starts its execution API once and makes every run one after
the other; each test asserts on its own runs' results and log.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.airflow_proc import RUN_MARK

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "airflow_dags"
PROC = Path(__file__).with_name("airflow_proc.py")
LOGICAL_DATE = "2025-03-04T00:00:00+00:00"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("airflow") is None,
                       reason="apache-airflow is not installed (it comes with the 'test' extra: make setup)"),
    # long: first in the order of tests/conftest.py long_work_first, so one xdist worker starts
    # the whole module (its `airflow` fixture makes the runs once)
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory) -> tuple[dict[str, str], Path]:
    home = tmp_path_factory.mktemp("airflow_home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LANCEPART_FAULT"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ in airflow_dags/
    })
    before, repo_before = set(os.listdir(DAGS)), set(os.listdir(REPO))
    yield env, home
    assert set(os.listdir(DAGS)) == before, "Airflow left files in airflow_dags/"
    new = set(os.listdir(REPO)) - repo_before
    assert not [n for n in new if n.startswith("airflow") or n in ("logs", "webserver_config.py")], \
        f"Airflow left state in the repository: {sorted(new)}"


def _demo_config(tmp_path: Path, root: Path, file: str = "ingest.yaml", **extra) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["namespace"]["root"] = str(root)
    cfg["namespace"]["spec"]["fields"] = cfg["namespace"]["spec"]["fields"][:1]  # event_date: few tables, fast
    cfg["source"] = {"kind": "generate", "rows": 2000, "seed": 7}
    cfg["spark"]["conf"] = {"spark.sql.shuffle.partitions": "2"}
    cfg.pop("expectations")
    cfg.pop("batch_id")
    cfg.update(extra)
    path = tmp_path / file
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cli(*argv: str) -> str:
    """``lancepart ARGV`` in this process (the console script's own ``main``): its stdout."""
    from lancepart.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    assert code == 0, (argv, out.getvalue())
    return out.getvalue()


def _run_date(i: int) -> str:
    """A logical date per run of one DAG in the process (``dag.test()`` replaces a run of the same date)."""
    return (datetime.fromisoformat(LOGICAL_DATE) + timedelta(days=i)).isoformat()


# --------------------------------------------------------------------------- the runs, prepared
def _prepare_retry(tmp: Path) -> tuple[list[dict], dict]:
    """test_ingest_dag_publishes_once_across_a_retry: a config named ``ventes-été.yaml`` without
    ``batch_id``, and a Spark driver Python that sets the fault in the first attempt only."""
    root, marker = tmp / "ns", tmp / "first-attempt-done"
    config = _demo_config(tmp, root).rename(tmp / "ventes-été.yaml")
    driver = tmp / "driver-python"  # the Spark driver of the first attempt only dies after publishing
    driver.write_text(f'#!/bin/sh\nif [ ! -e "{marker}" ]; then touch "{marker}"; '
                      f'export LANCEPART_FAULT=after_manifest_commit:exit; fi\nexec "{sys.executable}" "$@"\n')
    driver.chmod(0o755)
    run = {"name": "ingest retry", "dag_id": "lancepart_ingest", "logical_date": LOGICAL_DATE,
           "conf": {"config": str(config)},
           "env": {"PYSPARK_DRIVER_PYTHON": str(driver),
                   "LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2] --conf spark.ui.enabled=false"}}
    return [run], {"root": root, "marker": marker, "config": config}


def _prepare_maintenance(tmp: Path) -> tuple[list[dict], dict]:
    """test_maintenance_dag_compacts_then_cleans_up: a namespace made by ``lancepart create`` and
    three ``lancepart ingest`` (the console script's ``main``, in this process) of 500 rows each."""
    import pyarrow.parquet as pq

    from lancepart.util.sample import demo_events

    root = tmp / "ns"
    config = _demo_config(tmp, root, compact={"target_rows_per_fragment": 100_000})
    _cli("-q", "create", "--config", str(config))
    for i in range(3):
        pq.write_table(demo_events(500, start_id=i * 500, days=2), tmp / f"part{i}.parquet")
        _cli("-q", "ingest", str(root), str(tmp / f"part{i}.parquet"))
    run = {"name": "maintenance", "dag_id": "lancepart_maintenance", "logical_date": LOGICAL_DATE,
           "conf": {"config": str(config), "older_than": "1h"},
           "env": {"LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2]"}}
    return [run], {"root": root, "before": json.loads(_cli("-q", "--json", "describe", str(root)))}


# Each refusal: DAG, the run's conf beside its config ("{config}": the path of a valid config),
# the task that refuses, what it logs. Every value is also checked by the DAGs' own functions in
# test_run_parameter_checks_refuse_every_bad_value.
REFUSALS = {
    "ingest spark_args with a trailing newline": (
        "lancepart_ingest", {"spark_args": "--master local[2]\n"}, "ingest", "are not accepted"),
    "ingest spark_args with --master and --conf": (
        "lancepart_ingest", {"spark_args": "--master spark://203.0.113.9:7077 --conf spark.pyspark.python=/tmp/evil"},
        "ingest", "are not accepted"),
    "ingest master key": ("lancepart_ingest", {"master": "spark://203.0.113.9:7077"}, "ingest", "are not accepted"),
    "ingest config with a newline": ("lancepart_ingest", {"config": "{config}\n"}, "ingest", "control character"),
    "maintenance older_than 0": ("lancepart_maintenance", {"older_than": "0"}, "compact", "below the retention floor"),
    "maintenance older_than 59m": (
        "lancepart_maintenance", {"older_than": "59m"}, "compact", "below the retention floor"),
    "maintenance older_than 0h": (
        "lancepart_maintenance", {"older_than": "0h"}, "compact", "below the retention floor"),
    "maintenance older_than 7d and a newline": (
        "lancepart_maintenance", {"older_than": "7d\n"}, "compact", "must be a duration"),
    "maintenance spark_args": (
        "lancepart_maintenance", {"older_than": "7d", "spark_args": "--master local[2]"}, "compact",
        "are not accepted"),
}


def _prepare_refusals(tmp: Path) -> tuple[list[dict], dict]:
    """test_dags_refuse_bad_run_parameters_before_anything_runs: a valid config per run whose
    namespace root must never be created."""
    runs, roots = [], {}
    for i, (name, (dag_id, conf, _, _)) in enumerate(REFUSALS.items()):
        roots[name] = tmp / f"ns{i}"
        config = str(_demo_config(tmp, roots[name], file=f"refusal{i}.yaml"))
        conf = {k: v.replace("{config}", config) if k == "config" else v for k, v in conf.items()}
        if dag_id == "lancepart_maintenance":
            conf.setdefault("older_than", "7d")
        # dates after LOGICAL_DATE, which the retry and the maintenance run use
        runs.append({"name": name, "dag_id": dag_id, "logical_date": _run_date(1 + i),
                     "conf": {"config": config, **conf}})
    return runs, {"roots": roots}


def _prepare_batch_ids(tmp: Path) -> tuple[list[dict], dict]:
    """test_ingest_dag_runs_use_the_batch_id_the_job_chooses: ``make demo``'s ingest (here in
    this process, on the shared Spark session) and a write under a hostile batch id publish first;
    then three runs, one per way the id reaches the job."""
    from lancepart import PartitionedNamespace
    from lancepart.config import JobConfig
    from lancepart.job_runner import run_ingest
    from lancepart.util.sample import demo_events
    from tests.test_batch_ids import published_rows

    root, marker = tmp / "ns", tmp / "shell-ran"
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    assert cfg["batch_id"] == "demo-{logical_date}" and str(cfg["logical_date"]) == "2025-12-01"
    cfg["namespace"]["root"] = str(root)
    cfg["namespace"]["spec"]["fields"] = cfg["namespace"]["spec"]["fields"][:1]  # event_date: few tables, fast
    cfg["source"]["rows"] = 3_000
    cfg["spark"]["conf"] = {"spark.sql.shuffle.partitions": "2"}
    demo = tmp / "demo.yaml"
    demo.write_text(yaml.safe_dump(cfg))
    del cfg["logical_date"]
    cfg["batch_id"] = "demo-2025-12-01"  # a literal id: the same id in a run for any date
    literal = tmp / "literal.yaml"
    literal.write_text(yaml.safe_dump(cfg))

    first = run_ingest(JobConfig.load(demo))  # what `make demo` runs
    batch = f"-nightly;$(touch${{IFS}}{marker})*"
    ns = PartitionedNamespace.open(str(root))
    hostile = ns.write(demo_events(50, start_id=100_000, days=1), batch_id=batch)
    before = published_rows(str(root))

    env = {"LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2] --conf spark.ui.enabled=false"}
    expected = {"the demo's date": ("2025-12-01T00:00:00+00:00", {"config": str(demo)}, "demo-2025-12-01"),
                "a literal id, another date": ("2025-12-02T00:00:00+00:00", {"config": str(literal)},
                                               "demo-2025-12-01"),
                "the run's batch_id": ("2025-12-03T00:00:00+00:00", {"config": str(demo), "batch_id": batch}, batch)}
    runs = [{"name": name, "dag_id": "lancepart_ingest", "logical_date": date, "conf": conf, "env": env}
            for name, (date, conf, _) in expected.items()]
    return runs, {"root": root, "marker": marker, "first": first, "hostile_skipped": hostile.skipped,
                  "published_before": before, "batch_ids": {name: b for name, (_, _, b) in expected.items()}}


# The Param pattern the DAGs had for spark_args (issue 11 item 3), kept to show why a pattern is not enough.
OLD_SPARK_ARGS_PATTERN = r"^[A-Za-z0-9_.,:=/@+\-\[\]\* ]*$"
PARAMS = [({"type": "string", "pattern": OLD_SPARK_ARGS_PATTERN}, "--master local[2]\n"),
          ({"type": "string", "pattern": OLD_SPARK_ARGS_PATTERN}, "--master x;y")]


@pytest.fixture(scope="module")
def airflow(airflow_env, spark, tmp_path_factory) -> dict:
    """Every run of the module prepared, then ONE Airflow process (``airflow_proc.py batch``):
    its database, the DagBag, the ``Param`` checks of PARAMS and every ``dag.test()`` run, one
    after the other. Returns ``{"dagbag", "params", "runs": name -> (result, its part of the
    log), "prepared": test -> what its preparation left}``."""
    env, home = airflow_env
    prepared = {name: prepare(tmp_path_factory.mktemp(name)) for name, prepare in (
        ("refusals", _prepare_refusals), ("retry", _prepare_retry), ("maintenance", _prepare_maintenance),
        ("batch_ids", _prepare_batch_ids))}
    runs = [run for runs, _ in prepared.values() for run in runs]
    out, log = home / "result.json", home / "airflow.log"
    spec = json.dumps({"params": PARAMS, "runs": runs})
    with open(log, "ab") as f:
        proc = subprocess.run([sys.executable, str(PROC), "batch", str(DAGS), spec, "1", str(out)], env=env,
                              cwd=home, stdout=f, stderr=subprocess.STDOUT, timeout=1800)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"airflow_proc exited {proc.returncode}:\n{log.read_text()[-4000:]}")
    result = json.loads(out.read_text())
    parts = dict(part.split("\n", 1) for part in log.read_text().split(RUN_MARK)[1:])
    assert set(result["runs"]) == set(parts) == {r["name"] for r in runs}, (sorted(result["runs"]), sorted(parts))
    result["runs"] = {name: (result["runs"][name], parts[name]) for name in result["runs"]}
    result["prepared"] = {name: context for name, (_, context) in prepared.items()}
    return result


# --------------------------------------------------------------------------- the tests
def test_dagbag_loads_both_dags(airflow):
    """Both DAGs parse in a real DagBag, with retries, and call exactly the contract commands."""
    bag = airflow["dagbag"]
    assert bag["import_errors"] == {}
    assert set(bag["dags"]) == {"lancepart_ingest", "lancepart_maintenance"}

    ingest = bag["dags"]["lancepart_ingest"]
    assert set(ingest["tasks"]) == {"ingest"}
    task = ingest["tasks"]["ingest"]
    assert task["retries"] >= 2 and task["retry_delay_s"] > 0
    assert task["bash_command"].startswith("exec ./spark-submit.sh jobs/ingest.py --config=")
    assert "--batch-id=" in task["bash_command"]
    assert task["cwd"] == str(REPO)
    assert ingest["params"] == {"config": "configs/demo.yaml", "batch_id": None}  # no spark_args any more

    maint = bag["dags"]["lancepart_maintenance"]
    assert maint["schedule"] == "@daily"
    assert set(maint["tasks"]) == {"compact", "cleanup"}
    assert maint["tasks"]["cleanup"]["upstream"] == ["compact"]
    assert maint["tasks"]["compact"]["bash_command"].startswith("exec ./spark-submit.sh jobs/compact.py --config=")
    assert Path(maint["tasks"]["cleanup"]["bash_command"].split()[0]).name == "lancepart"
    assert " cleanup --config=" in maint["tasks"]["cleanup"]["bash_command"]
    assert "allow-short-retention" not in maint["tasks"]["cleanup"]["bash_command"]
    assert maint["params"] == {"config": "configs/compact-demo.yaml", "older_than": "7d"}
    assert all(t["retries"] >= 2 for t in maint["tasks"].values())
    assert (REPO / maint["params"]["config"]).is_file() and (REPO / ingest["params"]["config"]).is_file()


@pytest.mark.spark
def test_ingest_dag_publishes_once_across_a_retry(airflow):
    """The ingest DAG end to end with ``dag.test()``: the first attempt publishes and then dies
    (``LANCEPART_FAULT=after_manifest_commit:exit`` in the Spark driver), Airflow retries the
    task, and the retry finds its batch id published and writes nothing (spec "Transaction";
    docs/guide.md "Writing": batch_id). The config is named ``ventes-été.yaml`` and has no
    ``batch_id``: the DAG's default id ``lancepart_ingest:<config>:<logical date>`` holds the
    non-ASCII name, and the retry finds it (issue 11 item 1: such an id was never found, and
    every rerun of the date published again). The deployment's spark-submit options (several
    words) come from ``$LANCEPART_SPARK_SUBMIT_ARGS``."""
    from lancepart import PartitionedNamespace
    from lancepart.write.batches import find_batch

    prepared = airflow["prepared"]["retry"]
    root, marker, config = prepared["root"], prepared["marker"], prepared["config"]
    assert yaml.safe_load(config.read_text())["namespace"]["root"] == str(root)
    run, log = airflow["runs"]["ingest retry"]

    assert marker.exists(), "the first attempt never started the Spark driver"
    assert run["state"] == "success", run
    assert run["tasks"]["ingest"] == {"state": "success", "try_number": 2}, run
    # dag.test() runs the attempts in its own process and logs them there, one after the other
    attempts = log.split("[DAG TEST] starting task_id=ingest")[1:]
    assert len(attempts) == 2
    assert "Command exited with return code 77" in attempts[0]  # the driver died after the publish
    assert '"skipped": true' in attempts[1] and "return code 0" in attempts[1]  # the retry found it published
    assert '"skipped": false' not in attempts[0] + attempts[1]  # the first attempt died before its summary

    ns = PartitionedNamespace.open(root)
    ids = ns.to_table(columns=["id"]).column("id")
    assert len(ids) == 2000 and sorted(ids.to_pylist()) == list(range(2000))  # published exactly once
    batch_id = f"lancepart_ingest:{config}:{LOGICAL_DATE}"
    assert "ventes-été.yaml" in batch_id and find_batch(ns.manifest, batch_id, ns.snapshot()) is not None


@pytest.mark.spark
def test_maintenance_dag_compacts_then_cleans_up(airflow):
    """The maintenance DAG end to end: jobs/compact.py on Spark merges the small fragments of
    three local ingests, then ``lancepart cleanup --older-than 1h`` (the smallest retention the
    DAG asks for) keeps the versions that are younger than that; the published rows are
    unchanged (spec "Transaction"; docs/guide.md "Compaction" and "Cleanup"; issue 11 item 4)."""
    from lancepart import PartitionedNamespace

    prepared = airflow["prepared"]["maintenance"]
    root, before = prepared["root"], prepared["before"]
    run, _ = airflow["runs"]["maintenance"]

    assert run["state"] == "success", run
    assert {t: s["state"] for t, s in run["tasks"].items()} == {"compact": "success", "cleanup": "success"}
    after = json.loads(_cli("-q", "--json", "describe", str(root)))
    assert after["rows"] == before["rows"] == 1500
    assert after["manifest_version"] > before["manifest_version"]  # compaction published
    assert all(t["versions"] >= 2 for t in after["tables"])  # nothing is an hour old: cleanup kept it all
    ns = PartitionedNamespace.open(root)
    assert sorted(ns.to_table(columns=["id"]).column("id").to_pylist()) == list(range(1500))
    frags = [len(lance_ds.get_fragments()) for lance_ds in _published(ns)]
    assert max(frags) == 1  # every partition rewritten into one fragment


def test_airflow_param_pattern_lets_a_trailing_newline_through(airflow):
    """Why the DAGs no longer take free-form spark-submit options (issue 11 item 3): Airflow
    validates a Param with JSON schema, whose ``pattern`` is a Python ``re.search``, and ``$``
    also matches before a final newline. So ``--master local[2]\\n`` passed the old pattern, and
    the newline then ended the bash command before ``-- --batch-id ...``."""
    newline, semicolon = airflow["params"]  # PARAMS, checked by Airflow's Param
    assert newline == {"accepted": True, "value": "--master local[2]\n"}
    assert not semicolon["accepted"]  # the pattern works


def test_dags_refuse_bad_run_parameters_before_anything_runs(airflow):
    """Issue 11 items 3 and 4, in real ``dag.test()`` runs. A run chooses only ``config`` and
    ``batch_id`` (ingest) or ``config`` and ``older_than`` (maintenance): ``spark_args`` with a
    trailing newline (which used to cut ``--batch-id`` off the command: the task failed after
    publishing and each of the 3 retries published again), ``--master``/``--conf`` or a
    ``master`` key from a run (storage credentials shipped to any cluster), a config path with a
    control character, and an ``older_than`` below 1 hour (``0`` deleted published files beside
    live writers; the DAG never passes ``--allow-short-retention``) or that is not a whole
    duration each fail the DAG's first task before anything runs, without retries: the
    namespace is never created, and the maintenance DAG's cleanup never runs."""
    roots = airflow["prepared"]["refusals"]["roots"]
    for name, (dag_id, _, task, reason) in REFUSALS.items():
        run, log = airflow["runs"][name]
        assert run["state"] == "failed", (name, run)
        assert run["tasks"][task] == {"state": "failed", "try_number": 1}, (name, run)  # not retried
        assert reason in log, (name, log[-3000:])
        assert "Running command" not in log and "spark-submit" not in log, (name, log[-3000:])  # no command ran
        if dag_id == "lancepart_maintenance":
            assert run["tasks"]["cleanup"]["state"] == "upstream_failed", (name, run)
        assert not roots[name].exists(), name


def test_run_parameter_checks_refuse_every_bad_value(airflow_env, tmp_path):
    """The DAGs' own checks and task callables, called directly (in a process with the Airflow
    environment): every bad ``older_than``, config path and Spark option from a run is refused,
    good values pass."""
    env, _ = airflow_env
    config = _demo_config(tmp_path, tmp_path / "ns")
    code = """
import json, sys
sys.path.insert(0, sys.argv[1])
from types import SimpleNamespace
from airflow.exceptions import AirflowFailException
import lancepart_common as common, lancepart_maintenance as m, lancepart_ingest as ingest
def refused(fn, *a):
    try:
        fn(*a)
        return None
    except AirflowFailException as e:
        return str(e)
ctx = lambda conf: {"dag_run": SimpleNamespace(conf=conf), "params": conf, "logical_date": None, "run_id": "manual"}
config = sys.argv[2]
out = {"older_than": {repr(v): refused(m.check_older_than, v)
                      for v in ["0", "59m", "7d\\n", "0h", "30m", "7d", "1d12h", 0, "", "7 d", None]},
       "conf": {k: refused(common.check_run_conf, ctx(c), ingest.RUN_PARAMS) for k, c in [
           ("trailing-newline", {"config": "x", "spark_args": "--master local[2]\\n"}),
           ("master-and-conf", {"config": "x", "spark_args": "--master spark://h:7077 --conf a=b"}),
           ("master-key", {"config": "x", "master": "spark://h:7077"}),
           ("allowed", {"config": "x", "batch_id": "b"})]},
       "config": {k: refused(common.check_config, v) for k, v in [
           ("newline", config + "\\n"), ("tab", config.replace("/", "/\\t", 1)), ("missing", config + ".missing"),
           ("empty", ""), ("good", config)]},
       "task": {k: refused(fn, ctx(c)) for k, fn, c in [
           ("ingest spark_args", ingest.ingest_command, {"config": config, "spark_args": "--master x"}),
           ("ingest config newline", ingest.ingest_command, {"config": config + "\\n"}),
           ("ingest good", ingest.ingest_command, {"config": config, "batch_id": "b"}),
           ("compact spark_args", m.compact_command,
            {"config": config, "older_than": "7d", "spark_args": "--master x"}),
           ("compact older_than 0", m.compact_command, {"config": config, "older_than": "0"}),
           ("cleanup older_than 0", m.cleanup_command, {"config": config, "older_than": "0"}),
           ("cleanup good", m.cleanup_command, {"config": config, "older_than": "7d"})]}}
print(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", code, str(DAGS), str(config)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    older = out["older_than"]
    for v in ("'0'", "'59m'", "'0h'", "'30m'", "0"):
        assert "below the retention floor" in older[v], (v, out)
    for v in ("'7d\\n'", "''", "'7 d'", "None"):
        assert "must be a duration" in older[v], (v, out)
    assert older["'7d'"] is None and older["'1d12h'"] is None
    for k in ("trailing-newline", "master-and-conf", "master-key"):
        assert "are not accepted" in out["conf"][k], (k, out)
    assert out["conf"]["allowed"] is None
    assert "control character" in out["config"]["newline"] and "control character" in out["config"]["tab"]
    assert "is not a file" in out["config"]["missing"] and "non-empty" in out["config"]["empty"]
    assert out["config"]["good"] is None
    task = out["task"]
    assert "are not accepted" in task["ingest spark_args"] and "are not accepted" in task["compact spark_args"]
    assert "control character" in task["ingest config newline"]
    assert "below the retention floor" in task["compact older_than 0"]
    assert "below the retention floor" in task["cleanup older_than 0"]
    assert task["ingest good"] is None and task["cleanup good"] is None


@pytest.mark.spark
def test_ingest_dag_runs_use_the_batch_id_the_job_chooses(airflow):
    """Three runs of the ingest DAG, each for a batch id published before it, so the job must
    skip each one (``"skipped": true``, nothing written): an id that reached the job any other
    way would publish the rows again.

    * Issue item 9: ``make demo`` (the ingest job with configs/demo.yaml, here in this process)
      and then a DAG run for the demo's date published the rows twice: the DAG's id
      ``lancepart_ingest:<config>:<date>`` replaced the config's ``demo-2025-12-01``. Now the
      config's ``batch_id: demo-{logical_date}`` is rendered by the job with the config's
      ``logical_date`` and by the DAG with the run's date: one id.
    * A literal ``batch_id`` in the config stays that id in a run for another date.
    * Issue 11 item 3: a run's own ``batch_id`` reaches the job exactly, whatever it holds: one
      that starts with ``-`` (``--batch-id -x`` was read by the job as a missing value: exit 2 on
      every retry) and holds shell syntax (it travels in an environment variable, never in the
      shell text)."""
    from tests.test_batch_ids import published_rows

    prepared = airflow["prepared"]["batch_ids"]
    first = prepared["first"]
    assert first["batch_id"] == "demo-2025-12-01" and first["rows_written"] == 3_000 and not first["skipped"]
    assert not prepared["hostile_skipped"] and prepared["published_before"] == 3_050
    for name, batch_id in prepared["batch_ids"].items():
        run, log = airflow["runs"][name]
        assert run["state"] == "success", (name, run)
        assert run["tasks"]["ingest"] == {"state": "success", "try_number": 1}, (name, run)
        assert '"skipped": true' in log and f'"batch_id": {json.dumps(batch_id)}' in log, (name, log[-3000:])
    assert not prepared["marker"].exists()
    assert published_rows(str(prepared["root"])) == 3_050


def _published(ns):
    from lancepart.read.snapshot import open_partition

    return [open_partition(ns.root, p, ns.storage_options) for p in ns.partitions()]
