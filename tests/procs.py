"""Real processes for the conflict and crash tests of the operations that change published
data (delete, merge, rollback): the ``lancepart`` command in a child process, optionally
paused or killed at a protocol step (``LANCEPART_FAULT``, :mod:`lancepart.util.faults`), and a
rival writer process (tests/writer_proc.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import lance

from lancepart.storage.manifest import join_uri

HERE = Path(__file__).resolve().parent


def child_env(fault: str | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    env.pop("LANCEPART_FAULT", None)
    if fault:
        env["LANCEPART_FAULT"] = fault
    return env


def wait_until_reached(go: str, proc=None, timeout: float = 120.0) -> None:
    """Until a ``<step>:wait:<go>`` fault stands at its step (it created ``<go>.reached``);
    ``proc`` (a Popen or a Thread), when given, must not end before it gets there."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(str(go) + ".reached"):
        if proc is not None:
            ended = proc.poll() is not None if hasattr(proc, "poll") else not proc.is_alive()
            why = proc.communicate()[1] if ended and hasattr(proc, "communicate") else ""
            assert not ended, f"the process ended before it reached its fault: {(why or '')[-2000:]}"
        assert time.monotonic() < deadline, "the process did not reach its fault in time"
        time.sleep(0.05)


def release(go: str) -> None:
    """Let a process standing at its ``wait:<go>`` fault go on."""
    Path(go).touch()


def run_cli(*args: str, fault: str | None = None) -> subprocess.Popen:
    """``lancepart ARGS --json -q`` in a child process (stdout: the JSON result)."""
    code = "import sys; from lancepart.cli.commands import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen([sys.executable, "-c", code, *args, "--json", "-q"], env=child_env(fault),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def write_rows(root: str, start: int, rows: int = 300, days: int = 1, batch_id: str | None = None) -> dict:
    """Demo rows with ids ``start..start+rows`` written and published by a writer process; its result."""
    cmd = [sys.executable, str(HERE / "writer_proc.py"), root, "--start", str(start), "--rows", str(rows),
           "--days", str(days)] + (["--batch-id", batch_id] if batch_id is not None else [])
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def wait_for_unpublished_versions(ns, proc: subprocess.Popen, filter: str | None = None) -> None:
    """Until ``proc`` has committed a table version beyond the published read_version of a
    partition ``filter`` selects (it is then between its table commits and its publish)."""
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if _has_unpublished_versions(ns, filter):
            return
        time.sleep(0.05)
    raise AssertionError(f"the process committed no table version: {proc.communicate()}")


def _has_unpublished_versions(ns, filter: str | None) -> bool:
    return any(lance.dataset(join_uri(ns.root, p.location)).version > p.read_version
               for p in ns.refresh().partitions(filter))


@contextmanager
def rival_publishes_first(go: str, publish: Callable[[], object]) -> Iterator[None]:
    """For an operation run in the body of the ``with`` in this process (Spark's driver), paused
    before its ``__manifest`` commit by ``LANCEPART_FAULT=before_manifest_commit:wait:<go>``: a
    thread waits until the operation stands there (its table versions committed), runs
    ``publish`` (a rival that publishes first), then creates ``go`` so the operation goes on."""
    errors: list[BaseException] = []

    def rival() -> None:
        try:
            wait_until_reached(go)
            publish()
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            Path(go).touch()

    th = threading.Thread(target=rival)
    th.start()
    try:
        yield
    finally:
        th.join()
    assert not errors, errors


# a jobs/*.py entry point run as `python jobs/<job>.py --config ...`, then: did it start Spark?
_PROBE = """
import json, runpy, sys
job, args = sys.argv[1], sys.argv[2:]
sys.argv = [job, *args]
try:
    runpy.run_path(job, run_name="__main__")
    code = 0
except SystemExit as e:
    code = e.code
from pyspark import SparkContext
print(json.dumps({"exit": code, "spark_context": SparkContext._active_spark_context is not None,
                  "jvm": SparkContext._gateway is not None}), file=sys.stderr)
"""


def run_job_probe(job: str, *args: str) -> tuple[dict, dict]:
    """(the job's JSON summary, {"exit", "spark_context", "jvm"}) of ``jobs/<job>.py`` run in a
    fresh Python process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK")}
    env["PYTHONPATH"] = str(HERE.parent)
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(HERE.parent / "jobs" / f"{job}.py"), *args],
                          cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=300)
    probe = json.loads(proc.stderr.strip().splitlines()[-1])
    return (json.loads(proc.stdout) if proc.stdout.strip() else {}), probe
