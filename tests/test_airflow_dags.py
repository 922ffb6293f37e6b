"""airflow_dags/ in a real Airflow: a DagBag, and ``dag.test()`` runs that call the real
``./spark-submit.sh jobs/*.py`` and ``lancepart`` commands (docs/guide.md "Command line":
the DAGs call exactly those commands).

Airflow runs in subprocesses (tests/airflow_proc.py) with AIRFLOW_HOME and its sqlite
database in a temporary directory, so no Airflow state reaches this process or the repository.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "airflow_dags"
PROC = Path(__file__).with_name("airflow_proc.py")
LOGICAL_DATE = "2025-03-04T00:00:00+00:00"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("airflow") is None,
                                reason="apache-airflow is not installed (it comes with the 'test' extra: make setup)")


def _airflow(env: dict[str, str], tmp: Path, *args: str, timeout: float = 300) -> dict:
    out, log = tmp / f"result-{args[0]}.json", tmp / f"airflow-{args[0]}.log"
    with open(log, "ab") as f:
        proc = subprocess.run([sys.executable, str(PROC), *args, str(out)], env=env, cwd=tmp, stdout=f,
                              stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"airflow_proc {args[0]} exited {proc.returncode}:\n{log.read_text()[-4000:]}")
    return json.loads(out.read_text())


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
    _airflow(env, home, "initdb", timeout=120)
    yield env, home
    assert set(os.listdir(DAGS)) == before, "Airflow left files in airflow_dags/"
    new = set(os.listdir(REPO)) - repo_before
    assert not [n for n in new if n.startswith("airflow") or n in ("logs", "webserver_config.py")], \
        f"Airflow left state in the repository: {sorted(new)}"


def _demo_config(tmp_path: Path, root: Path, **extra) -> Path:
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    cfg["namespace"]["root"] = str(root)
    cfg["namespace"]["spec"]["fields"] = cfg["namespace"]["spec"]["fields"][:1]  # event_date: few tables, fast
    cfg["source"] = {"kind": "generate", "rows": 2000, "seed": 7}
    cfg["spark"]["conf"] = {"spark.sql.shuffle.partitions": "2"}
    cfg.pop("expectations")
    cfg.pop("batch_id")
    cfg.update(extra)
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_dagbag_loads_both_dags(airflow_env):
    """Both DAGs parse in a real DagBag, with retries, and call exactly the contract commands."""
    env, home = airflow_env
    bag = _airflow(env, home, "dagbag", str(DAGS))
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
def test_ingest_dag_publishes_once_across_a_retry(airflow_env, tmp_path):
    """The ingest DAG end to end with ``dag.test()``: the first attempt publishes and then dies
    (``LANCEPART_FAULT=after_manifest_commit:exit`` in the Spark driver), Airflow retries the
    task, and the retry finds its batch id published and writes nothing (spec "Transaction";
    docs/guide.md "Writing": batch_id)."""
    from lancepart import PartitionedNamespace
    from lancepart.write.batches import find_batch

    env, _ = airflow_env
    root, marker = tmp_path / "ns", tmp_path / "first-attempt-done"
    config = _demo_config(tmp_path, root)
    driver = tmp_path / "driver-python"  # the Spark driver of the first attempt only dies after publishing
    driver.write_text(f'#!/bin/sh\nif [ ! -e "{marker}" ]; then touch "{marker}"; '
                      f'export LANCEPART_FAULT=after_manifest_commit:exit; fi\nexec "{sys.executable}" "$@"\n')
    driver.chmod(0o755)
    run_env = {**env, "PYSPARK_DRIVER_PYTHON": str(driver), "LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2]"}
    conf = {"config": str(config)}

    run = _airflow(run_env, tmp_path, "test", str(DAGS), "lancepart_ingest", LOGICAL_DATE, json.dumps(conf), "1")

    assert marker.exists(), "the first attempt never started the Spark driver"
    assert run["state"] == "success", run
    assert run["tasks"]["ingest"] == {"state": "success", "try_number": 2}, run
    # dag.test() runs the attempts in its own process and logs them there, one after the other
    attempts = (tmp_path / "airflow-test.log").read_text().split("[DAG TEST] starting task_id=ingest")[1:]
    assert len(attempts) == 2
    assert "Command exited with return code 77" in attempts[0]  # the driver died after the publish
    assert '"skipped": true' in attempts[1] and "return code 0" in attempts[1]  # the retry found it published

    ns = PartitionedNamespace.open(root)
    ids = ns.to_table(columns=["id"]).column("id")
    assert len(ids) == 2000 and sorted(ids.to_pylist()) == list(range(2000))  # published exactly once
    assert find_batch(ns.manifest, f"lancepart_ingest:{config}:{LOGICAL_DATE}", ns.snapshot()) is not None


@pytest.mark.spark
def test_maintenance_dag_compacts_then_cleans_up(airflow_env, tmp_path):
    """The maintenance DAG end to end: jobs/compact.py on Spark merges the small fragments of
    three local ingests, then ``lancepart cleanup --older-than 1h`` (the smallest retention the
    DAG asks for) keeps the versions that are younger than that; the published rows are
    unchanged (spec "Transaction"; docs/guide.md "Compaction" and "Cleanup"; issue 11 item 4)."""
    import pyarrow.parquet as pq

    from lancepart import PartitionedNamespace
    from lancepart.util.sample import demo_events

    env, _ = airflow_env
    root = tmp_path / "ns"
    config = _demo_config(tmp_path, root, compact={"target_rows_per_fragment": 100_000})
    cli = Path(sys.executable).with_name("lancepart")
    subprocess.run([str(cli), "-q", "create", "--config", str(config)], check=True, capture_output=True)
    for i in range(3):
        pq.write_table(demo_events(500, start_id=i * 500, days=2), tmp_path / f"part{i}.parquet")
        subprocess.run([str(cli), "-q", "ingest", str(root), str(tmp_path / f"part{i}.parquet")], check=True,
                       capture_output=True)

    def describe() -> dict:
        out = subprocess.run([str(cli), "-q", "--json", "describe", str(root)], check=True, capture_output=True)
        return json.loads(out.stdout)

    before = describe()
    conf = {"config": str(config), "older_than": "1h"}
    run_env = {**env, "LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2]"}
    run = _airflow(run_env, tmp_path, "test", str(DAGS), "lancepart_maintenance", LOGICAL_DATE, json.dumps(conf),
                   "1")

    assert run["state"] == "success", run
    assert {t: s["state"] for t, s in run["tasks"].items()} == {"compact": "success", "cleanup": "success"}
    after = describe()
    assert after["rows"] == before["rows"] == 1500
    assert after["manifest_version"] > before["manifest_version"]  # compaction published
    assert all(t["versions"] >= 2 for t in after["tables"])  # nothing is an hour old: cleanup kept it all
    ns = PartitionedNamespace.open(root)
    assert sorted(ns.to_table(columns=["id"]).column("id").to_pylist()) == list(range(1500))
    frags = [len(lance_ds.get_fragments()) for lance_ds in _published(ns)]
    assert max(frags) == 1  # every partition rewritten into one fragment


# The Param pattern the DAGs had for spark_args (issue 11 item 3), kept to show why a pattern is not enough.
OLD_SPARK_ARGS_PATTERN = r"^[A-Za-z0-9_.,:=/@+\-\[\]\* ]*$"


def test_airflow_param_pattern_lets_a_trailing_newline_through(airflow_env):
    """Why the DAGs no longer take free-form spark-submit options (issue 11 item 3): Airflow
    validates a Param with JSON schema, whose ``pattern`` is a Python ``re.search``, and ``$``
    also matches before a final newline. So ``--master local[2]\\n`` passed the old pattern, and
    the newline then ended the bash command before ``-- --batch-id ...``."""
    env, home = airflow_env
    schema = json.dumps({"type": "string", "pattern": OLD_SPARK_ARGS_PATTERN})
    got = _airflow(env, home, "param", schema, json.dumps("--master local[2]\n"))
    assert got == {"accepted": True, "value": "--master local[2]\n"}
    assert not _airflow(env, home, "param", schema, json.dumps("--master x;y"))["accepted"]  # the pattern works


def _refused(run: dict, log: str, task: str, reason: str) -> None:
    assert run["state"] == "failed", run
    assert run["tasks"][task] == {"state": "failed", "try_number": 1}, run  # not retried
    assert reason in log, log[-3000:]


# Every value is checked by the DAGs' own functions in test_run_parameter_checks_refuse_every_bad_value;
# a whole Airflow run (about 20 s each) for one value per refusal, all of them with --stress.
FULL_RUN_VALUES = {"trailing-newline", "master-key", "0", "7d\n"}


@pytest.mark.parametrize("conf", [
    {"spark_args": "--master local[2]\n"},
    {"spark_args": "--master spark://203.0.113.9:7077 --conf spark.pyspark.python=/tmp/evil"},
    {"master": "spark://203.0.113.9:7077"},
], ids=["trailing-newline", "master-and-conf", "master-key"])
def test_ingest_dag_refuses_spark_options_from_a_run(airflow_env, tmp_path, conf, request, stress):
    """Issue 11 item 3: a run chooses only ``config`` and ``batch_id``. ``spark_args`` with a
    trailing newline (which used to cut ``--batch-id`` off the command: the task failed after
    publishing and each of the 3 retries published again) and ``--master``/``--conf`` from a run
    (storage credentials shipped to any cluster) fail the task before anything runs, without
    retries: the namespace is never created."""
    if not stress and request.node.callspec.id not in FULL_RUN_VALUES:
        pytest.skip("the same refusal as another value; a whole Airflow run per value with --stress")
    env, _ = airflow_env
    root = tmp_path / "ns"
    config = _demo_config(tmp_path, root)
    run = _airflow(env, tmp_path, "test", str(DAGS), "lancepart_ingest", LOGICAL_DATE,
                   json.dumps({"config": str(config), **conf}), "1")
    _refused(run, (tmp_path / "airflow-test.log").read_text(), "ingest", "are not accepted")
    assert not root.exists()


def test_ingest_dag_refuses_a_config_with_a_newline(airflow_env, tmp_path):
    """A config path with a control character or that is not a file fails before anything runs."""
    env, _ = airflow_env
    config = _demo_config(tmp_path, tmp_path / "ns")
    run = _airflow(env, tmp_path, "test", str(DAGS), "lancepart_ingest", LOGICAL_DATE,
                   json.dumps({"config": f"{config}\n"}), "1")
    _refused(run, (tmp_path / "airflow-test.log").read_text(), "ingest", "control character")


@pytest.mark.parametrize("older_than", ["0", "59m", "7d\n", "0h"])
def test_maintenance_dag_refuses_retention_below_the_floor(airflow_env, tmp_path, older_than, stress):
    """Issue 11 item 4 (the DAG side): ``older_than`` below 1 hour (``0`` deleted published files
    beside live writers) fails the run before compaction or cleanup runs, without retries; the
    DAG never passes ``--allow-short-retention``."""
    if not stress and older_than not in FULL_RUN_VALUES:
        pytest.skip("the same refusal as another value; a whole Airflow run per value with --stress")
    env, _ = airflow_env
    root = tmp_path / "ns"
    config = _demo_config(tmp_path, root)
    run = _airflow(env, tmp_path, "test", str(DAGS), "lancepart_maintenance", LOGICAL_DATE,
                   json.dumps({"config": str(config), "older_than": older_than}), "1")
    reason = "below the retention floor" if older_than in ("0", "59m", "0h") else "must be a duration"
    _refused(run, (tmp_path / "airflow-test.log").read_text(), "compact", reason)
    assert run["tasks"]["cleanup"]["state"] == "upstream_failed", run


def test_run_parameter_checks_refuse_every_bad_value(airflow_env, tmp_path):
    """The DAGs' own checks, called directly (in a process with the Airflow environment): every
    bad ``older_than`` and every Spark option from a run is refused, good values pass."""
    env, _ = airflow_env
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
ctx = lambda conf: {"dag_run": SimpleNamespace(conf=conf)}
out = {"older_than": {v: refused(m.check_older_than, v) for v in ["0", "59m", "7d\\n", "0h", "30m", "7d", "1d12h", 0]},
       "conf": {k: refused(common.check_run_conf, ctx(c), ingest.RUN_PARAMS) for k, c in [
           ("trailing-newline", {"config": "x", "spark_args": "--master local[2]\\n"}),
           ("master-and-conf", {"config": "x", "spark_args": "--master spark://h:7077 --conf a=b"}),
           ("master-key", {"config": "x", "master": "spark://h:7077"}),
           ("allowed", {"config": "x", "batch_id": "b"})]}}
print(json.dumps(out))
"""
    run = subprocess.run([sys.executable, "-c", code, str(DAGS)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    for v in ("0", "59m", "0h", "30m", "0"):
        assert "below the retention floor" in out["older_than"][v], (v, out)
    assert "must be a duration" in out["older_than"]["7d\n"]
    assert out["older_than"]["7d"] is None and out["older_than"]["1d12h"] is None
    for k in ("trailing-newline", "master-and-conf", "master-key"):
        assert "are not accepted" in out["conf"][k], (k, out)
    assert out["conf"]["allowed"] is None


def test_maintenance_dag_refuses_spark_args(airflow_env, tmp_path):
    """Issue 11 item 3: the maintenance DAG takes no spark-submit options from a run either."""
    env, _ = airflow_env
    config = _demo_config(tmp_path, tmp_path / "ns")
    run = _airflow(env, tmp_path, "test", str(DAGS), "lancepart_maintenance", LOGICAL_DATE,
                   json.dumps({"config": str(config), "older_than": "7d", "spark_args": "--master local[2]"}), "1")
    _refused(run, (tmp_path / "airflow-test.log").read_text(), "compact", "are not accepted")


@pytest.mark.spark
def test_ingest_dag_passes_any_batch_id_to_the_job_exactly(airflow_env, tmp_path):
    """Issue 11 item 3: the batch id always reaches the job, whatever it holds: one that starts
    with ``-`` (``--batch-id -x`` was read by the job as a missing value: exit 2 on every retry)
    or holds shell syntax (it travels in an environment variable, never in the shell text). The
    deployment's spark-submit options come from ``$LANCEPART_SPARK_SUBMIT_ARGS``."""
    from lancepart import PartitionedNamespace
    from lancepart.write.batches import find_batch

    env, _ = airflow_env
    root, marker = tmp_path / "ns", tmp_path / "shell-ran"
    config = _demo_config(tmp_path, root)
    batch = f"-nightly;$(touch${{IFS}}{marker})*"
    run_env = {**env, "LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2] --conf spark.ui.enabled=false"}
    run = _airflow(run_env, tmp_path, "test", str(DAGS), "lancepart_ingest", LOGICAL_DATE,
                   json.dumps({"config": str(config), "batch_id": batch}), "1")
    assert run["state"] == "success", run
    assert run["tasks"]["ingest"] == {"state": "success", "try_number": 1}, run
    assert not marker.exists()
    ns = PartitionedNamespace.open(root)
    assert ns.to_table(columns=["id"]).num_rows == 2000
    assert find_batch(ns.manifest, batch, ns.snapshot()) is not None


@pytest.mark.spark
def test_ingest_dag_with_a_non_ascii_config_name_publishes_once(airflow_env, tmp_path):
    """Issue 11 item 1; spec "Transaction": the ingest DAG run twice for one logical date with a
    config named ``ventes-été.yaml`` (its default batch id holds the name) publishes once."""
    from tests.test_batch_ids import published_rows

    env, _ = airflow_env
    root = tmp_path / "ns"
    config = _demo_config(tmp_path, root).rename(tmp_path / "ventes-été.yaml")
    assert yaml.safe_load(config.read_text())["namespace"]["root"] == str(root)
    run_env = {**env, "LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2] --conf spark.ui.enabled=false"}
    for attempt in range(2):
        run = _airflow(run_env, tmp_path, "test", str(DAGS), "lancepart_ingest", LOGICAL_DATE,
                       json.dumps({"config": str(config)}), "1")
        assert run["state"] == "success", run
        assert published_rows(str(root)) == 2000, f"after run {attempt + 1}"
    log_text = (tmp_path / "airflow-test.log").read_text()
    assert log_text.count('"skipped": true') == 1 and log_text.count('"skipped": false') == 1


_DAG_COMMAND = """
import json, sys
sys.path.insert(0, sys.argv[1])
from types import SimpleNamespace
import pendulum
import lancepart_ingest
config, date = sys.argv[2], sys.argv[3]
context = {"params": {"config": config, "batch_id": None}, "dag_run": SimpleNamespace(conf={"config": config}),
           "logical_date": pendulum.parse(date), "run_id": "manual__" + date}
command, env = lancepart_ingest.ingest_command(context)
print(json.dumps({"command": command, "env": env}))
"""


def _dag_task(env: dict[str, str], tmp_path: Path, config: Path, logical_date: str) -> dict:
    """The ingest task for ``logical_date`` as the DAG runs it: its own ``ingest_command`` builds
    the command and the run's environment (in a process with the Airflow environment), then the
    command runs with ``bash`` in the project directory, as ``LancepartCommand`` runs it."""
    built = subprocess.run([sys.executable, "-c", _DAG_COMMAND, str(DAGS), str(config), logical_date],
                           env={**env, "LANCEPART_SPARK_SUBMIT_ARGS": "--master local[2]"}, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    task = json.loads(built.stdout.strip().splitlines()[-1])
    job_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "AIRFLOW")) and k != "LANCE_LOG"}
    job_env.update(task["env"], LANCEPART_PYTHON=sys.executable)
    proc = subprocess.run(["bash", "-c", task["command"]], cwd=REPO, env=job_env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.spark
def test_demo_then_a_dag_run_for_its_date_publishes_once(airflow_env, spark, tmp_path):
    """Issue item 9: ``make demo`` (the ingest job with configs/demo.yaml) and then the ingest DAG
    for the demo's date published the rows twice: the DAG's id ``lancepart_ingest:<config>:<date>``
    replaced the config's ``demo-2025-12-01``. Now the config's ``batch_id: demo-{logical_date}``
    is rendered by the job with the config's ``logical_date`` and by the DAG with the run's date:
    one id, and the DAG's run is skipped. A literal ``batch_id`` stays that id in a DAG run for
    another date."""
    from lancepart.config import JobConfig
    from lancepart.job_runner import run_ingest
    from tests.test_batch_ids import published_rows

    env, _ = airflow_env
    root = tmp_path / "ns"
    cfg = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    assert cfg["batch_id"] == "demo-{logical_date}"
    cfg["namespace"]["root"] = str(root)
    cfg["namespace"]["spec"]["fields"] = cfg["namespace"]["spec"]["fields"][:1]  # event_date: few tables, fast
    cfg["source"]["rows"] = 3_000
    cfg["spark"]["conf"] = {"spark.sql.shuffle.partitions": "2"}
    demo = tmp_path / "demo.yaml"
    demo.write_text(yaml.safe_dump(cfg))

    first = run_ingest(JobConfig.load(demo))  # what `make demo` runs
    assert first["batch_id"] == "demo-2025-12-01" and first["rows_written"] == 3_000 and not first["skipped"]

    run = _dag_task(env, tmp_path, demo, "2025-12-01T00:00:00+00:00")
    assert run["skipped"] is True and run["batch_id"] == "demo-2025-12-01", run
    assert published_rows(str(root)) == 3_000

    del cfg["logical_date"]
    cfg["batch_id"] = "demo-2025-12-01"  # a literal id: the same id in a run for any date
    literal = tmp_path / "literal.yaml"
    literal.write_text(yaml.safe_dump(cfg))
    run = _dag_task(env, tmp_path, literal, "2025-12-02T00:00:00+00:00")
    assert run["skipped"] is True and run["batch_id"] == "demo-2025-12-01", run
    assert published_rows(str(root)) == 3_000


def _published(ns):
    from lancepart.read.snapshot import open_partition

    return [open_partition(ns.root, p, ns.storage_options) for p in ns.partitions()]
