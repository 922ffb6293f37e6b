"""A Spark standalone cluster on 127.0.0.1 (a master and N workers started from pyspark's own
``spark-class``), for tests/test_cluster.py and benchmarks/request_counts.py ``--cluster``.

Every process is started in its own process group and stopped (SIGTERM, then SIGKILL) when the
context exits, also when the body fails. Nothing listens on another interface."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Wait until ``text`` appears in the log ``path`` of ``proc``; AssertionError with the log's
    tail when it does not within ``timeout`` or the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    log = path.read_text(errors="replace")[-3000:] if path.exists() else ""
    raise AssertionError(f"{' '.join(proc.args[:2])}: no {text!r} in {path} within {timeout}s\n{log}")


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group (the JVM and anything it forked), SIGKILL what is left."""
    for p in reversed(procs):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for p in reversed(procs):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


@contextmanager
def standalone_cluster(base: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                       env: dict[str, str] | None = None) -> Iterator[dict]:
    """A master and ``workers`` workers (``cores`` cores and ``memory`` each), logs and work
    directories under ``base``; yields ``{"master": "spark://127.0.0.1:PORT", "work_dirs": [...]}``.
    ``env``: extra environment for the daemons (and so for the executors they start)."""
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    base.mkdir(parents=True, exist_ok=True)
    daemon_env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    daemon_env.update(SPARK_HOME=spark_home, SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
                      SPARK_LOG_DIR=str(base / "logs"), SPARK_NO_DAEMONIZE="1", **(env or {}))
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = base / f"{name}.log"
        with open(log, "w") as out:
            procs.append(subprocess.Popen([spark_class, *args], env=daemon_env, stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, cwd=base))
        return procs[-1], log

    try:
        port = free_port()
        master = f"spark://127.0.0.1:{port}"
        proc, log = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(port), "--webui-port", str(free_port()))
        wait_for(log, "I have been elected leader", proc)
        work_dirs = []
        for i in range(1, workers + 1):
            work = base / f"worker{i}"
            work.mkdir(exist_ok=True)
            work_dirs.append(work)
            proc, log = start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                              "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                              "--work-dir", str(work))
            wait_for(log, "Successfully registered with master", proc)
        yield {"master": master, "work_dirs": work_dirs}
    finally:
        stop(procs)
