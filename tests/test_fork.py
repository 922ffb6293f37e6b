"""Processes that fork (issue 30 item 6): multiprocessing's default start method on Linux, a
pre-forking server or executor. A parent that created, wrote and read a namespace and then forked
3 writers saw them hang past 120 s or die with SIGSEGV, locally and on SeaweedFS.

Lance runs its I/O on a Tokio runtime made once per process; a fork copies only the thread that
forked, so in such a child that runtime has no threads and cannot be made again (plain pylance
hangs and crashes the same way). lancepart now refuses at once in a child forked after Lance ran
in its parent, with ForkedProcessError naming the fix, and the fix (the 'spawn' start method)
writes every row. A child forked before its parent ran Lance gets its own session and lock and
writes, also when the fork lands while another thread of the parent holds the session's lock.

Each parent is a process of its own (tests/fork_proc.py), so what the test process has run does
not decide the outcome; every wait is bounded, and a child that hangs is killed and fails the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lancepart import PartitionedNamespace
from lancepart.util.sample import demo_events
from tests.conftest import EVENTS_SPEC
from tests.fork_proc import CHILD_ROWS, CHILDREN, PARENT_ROWS, child_start

HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT = 120.0  # seconds a parent waits for its children (each start method) before killing them
REFUSED_WITHIN = 15.0  # seconds from a refused child's start to its error (it does no I/O)


@pytest.fixture(params=["local", "seaweedfs"])
def location(request, tmp_path) -> tuple[str, dict[str, str] | None]:
    """A fresh root and its storage options: a local directory, or a prefix on the run's SeaweedFS."""
    if request.param == "local":
        return str(tmp_path / "ns"), None
    server = request.getfixturevalue("seaweedfs")
    return server.new_root(), server.storage_options()


def run_parent(mode: str, root: str, so: dict[str, str] | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "LANCE_LOG": "error"}
    env.pop("LANCEPART_FAULT", None)
    if so:
        env["LANCEPART_STORAGE_OPTIONS"] = json.dumps(so)
    proc = subprocess.run([sys.executable, str(HERE / "fork_proc.py"), mode, root, "--timeout", str(CHILD_TIMEOUT)],
                          env=env, capture_output=True, text=True, timeout=3 * CHILD_TIMEOUT + 120)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ids(root: str, so: dict[str, str] | None) -> list[int]:
    return sorted(PartitionedNamespace.open(root, storage_options=so).to_table(columns=["id"]).column("id").to_pylist())


def child_ids(children: list[dict]) -> list[int]:
    return [x for c in children for x in range(child_start(c["child"]), child_start(c["child"]) + CHILD_ROWS)]


def assert_all_wrote(children: list[dict], what: str) -> None:
    for c in children:
        assert not c["hung"] and c["exitcode"] == 0, f"{what}: child {c['child']} hung or crashed: {c}"
        assert c.get("outcome") == "written", f"{what}: child {c['child']} did not write: {c}"


def test_children_forked_after_the_parent_used_lance_are_refused_at_once_and_spawn_writes(location):
    """The parent created, wrote and read, then forked 3 concurrent writers (child 0 writes through
    the parent's own handle): each exits 0 within seconds with ForkedProcessError naming the 'spawn'
    start method, and wrote nothing. The same 3 writers started with 'spawn' write every row once."""
    root, so = location
    out = run_parent("used", root, so)
    assert out["parent_read"] == PARENT_ROWS and out["lance_threads"] > 0
    for c in out["fork"]:
        assert not c["hung"] and c["exitcode"] == 0, f"forked child {c['child']} hung or crashed: {c}"
        assert c["outcome"] == "ForkedProcessError", c
        assert "'spawn'" in c["message"] and f"forked from process {out['parent']}" in c["message"], c["message"]
        assert c["seconds"] < REFUSED_WITHIN, c
    assert_all_wrote(out["spawn"], "spawn")
    assert ids(root, so) == sorted([*range(PARENT_ROWS), *child_ids(out["spawn"])])


@pytest.mark.parametrize("mode", ["fresh", "lock-held"])
def test_children_forked_before_the_parent_ran_lance_write(location, mode):
    """The namespace was made by another process; the parent only imported lancepart (its Lance
    runtime not started) and forked 3 concurrent writers: each writes its rows and reads the
    namespace, every child exits 0, and the rows are exactly the first ones and the children's.
    ``lock-held``: the fork lands while another thread of the parent holds the lock the session is
    made under (the child got the lock held by a thread it does not have and waited forever)."""
    root, so = location
    schema = demo_events(1).schema
    ns = PartitionedNamespace.create(root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC,
                                     storage_options=so)
    ns.write(demo_events(PARENT_ROWS, seed=99, days=2))
    out = run_parent(mode, root, so)
    assert out["lance_threads"] == 0
    assert_all_wrote(out["fork"], mode)
    assert all(c["rows_read"] >= PARENT_ROWS + CHILD_ROWS for c in out["fork"])
    assert ids(root, so) == sorted([*range(PARENT_ROWS), *child_ids(out["fork"])])
    assert len(out["fork"]) == CHILDREN


def test_a_stream_read_on_in_a_forked_child_raises_instead_of_waiting():
    """A read-ahead stream (lancepart.util.parallel.stream_in_order: to_batches, changes) started in the
    parent and read on in a forked child: its producer threads stayed in the parent, so the child
    waited forever for the next element; it now raises ForkedProcessError at once."""
    import select
    import time

    from lancepart.util.parallel import stream_in_order

    def produce(n: int):
        for k in range(50):
            time.sleep(0.01)
            yield n * 100 + k

    stream = stream_in_order(produce, range(4), window=2, buffered=1)
    assert next(stream) == 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what reading on does, and leave without running anything else
        try:
            next(stream)
            outcome = "read"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
        os.write(write, outcome.encode()[:4000])
        os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 60)
        outcome = os.read(read, 4096).decode() if ready else "no answer within 60 s"
    finally:
        os.close(read)
        if not ready:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        stream.close()
    assert outcome.startswith("ForkedProcessError") and "forked child" in outcome, outcome
