"""A parent process that forks writers, for tests/test_fork.py: a process that used Lance (or not)
starts 3 concurrent children with multiprocessing's 'fork' start method, each writing its own
rows into ROOT, and prints one JSON line saying how each child ended.

``used``: the parent creates the namespace at ROOT, writes PARENT_ROWS rows and reads them back
before it forks (Lance's runtime runs in it); then, the fix the refusal names, the same 3 writers
start with the 'spawn' start method. ``fresh``: the namespace exists; the parent only imports
lancepart before it forks. ``lock-held``: as ``fresh``, but the fork lands while another thread of
the parent holds the lock under which the process's Lance session is made.

Every wait is bounded: a child that has not ended ``--timeout`` seconds after the start is killed
and reported with ``"hung": true`` (its exit code is then None). Storage options come as JSON in
``LANCEPART_STORAGE_OPTIONS`` (never on the command line)."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import threading
import time

from lancepart import PartitionedNamespace
from lancepart.errors import LancepartError
from lancepart.util.sample import demo_events

CHILDREN = 3
PARENT_ROWS = 500
CHILD_ROWS = 200


def lance_threads() -> int:
    """How many threads of Lance's runtime ("lance_background_thread", 15 characters kept) this
    process has: the test's premise, read without lancepart."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                n += f.read().startswith(b"lance_backgroun")
        except OSError:
            continue
    return n


def child_start(i: int) -> int:
    """The first id of child ``i``'s rows (``CHILD_ROWS`` of them)."""
    return (i + 1) * 100_000


def write_own_rows(root: str, so: dict[str, str] | None, i: int, results, ns: PartitionedNamespace | None = None
                   ) -> None:
    """Child ``i``: write its rows (through ``ns`` when given: the handle the parent used), read the
    namespace back, and report the outcome; a lancepart error is reported, not raised."""
    started = time.monotonic()
    report = {"child": i, "pid": os.getpid()}
    try:
        handle = ns if ns is not None else PartitionedNamespace.open(root, storage_options=so)
        handle.write(demo_events(CHILD_ROWS, seed=i, start_id=child_start(i), days=2))
        report.update(outcome="written", rows_read=handle.refresh().to_table(columns=["id"]).num_rows)
    except LancepartError as e:
        report.update(outcome=type(e).__name__, message=str(e))
    report["seconds"] = round(time.monotonic() - started, 3)
    results.put(report)


def run_children(method: str, root: str, so: dict[str, str] | None, timeout: float,
                 ns: PartitionedNamespace | None = None) -> list[dict]:
    """Start the writers together with start method ``method``, wait for them (bounded), and say
    how each ended: its report, exit code, and whether it had to be killed."""
    ctx = mp.get_context(method)
    results = ctx.Queue()
    procs = [ctx.Process(target=write_own_rows, args=(root, so, i, results, ns if i == 0 else None))
             for i in range(CHILDREN)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    reports: dict[int, dict] = {}
    while len(reports) < CHILDREN and time.monotonic() < deadline:
        try:
            r = results.get(timeout=0.5)
        except queue.Empty:
            if all(p.exitcode is not None for p in procs) and results.empty():
                break  # every child ended; those that crashed reported nothing
            continue
        reports[r["child"]] = r
    out = []
    for i, p in enumerate(procs):
        p.join(max(0.1, deadline - time.monotonic()))
        hung = p.is_alive()
        if hung:
            p.kill()
            p.join(10)
        out.append({**reports.get(i, {"child": i}), "exitcode": None if hung else p.exitcode, "hung": hung})
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["used", "fresh", "lock-held"])
    p.add_argument("root")
    p.add_argument("--timeout", type=float, default=120.0)
    a = p.parse_args()
    raw = os.environ.get("LANCEPART_STORAGE_OPTIONS")
    so = json.loads(raw) if raw else None
    out: dict = {"parent": os.getpid()}
    if a.mode == "used":
        from tests.conftest import EVENTS_SPEC

        schema = demo_events(1).schema
        ns = PartitionedNamespace.create(a.root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC,
                                         storage_options=so)
        ns.write(demo_events(PARENT_ROWS, seed=99, days=2))
        out["parent_read"] = ns.to_table(columns=["id"]).num_rows
        out["lance_threads"] = lance_threads()
        out["fork"] = run_children("fork", a.root, so, a.timeout, ns)
        out["spawn"] = run_children("spawn", a.root, so, a.timeout)
    else:
        out["lance_threads"] = lance_threads()
        held, release = threading.Event(), threading.Event()
        if a.mode == "lock-held":
            from lancepart.storage import lance_io

            def hold() -> None:  # what a thread making the session does for a moment
                with lance_io._lock:
                    held.set()
                    release.wait(a.timeout)

            threading.Thread(target=hold, daemon=True).start()
            held.wait(10)
        out["fork"] = run_children("fork", a.root, so, a.timeout)
        release.set()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
