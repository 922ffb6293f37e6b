"""The maintenance race: writers, a compactor and a cleaner at once, with random kill -9.

Three writer processes append batches under batch ids while a compactor process compacts and a
cleaner process cleans with a retention a few seconds long (``allow_short_retention=True``, but
longer than any single write here, which is what the retention guarantee asks). Every second or
two one of the five processes, chosen at random, is killed with SIGKILL and restarted; a killed
writer's unfinished batches are handed, under the same batch ids, to its successor, so a batch
that was published just before the kill must be skipped, never written twice.

Afterwards, with plain pylance only (no lancepart code): every table ``__manifest`` publishes
opens at its ``read_version`` and reads in full, in the latest ``__manifest`` version and in
every version cleanup kept; the published rows are exactly the union of the batches, each id
once. Spec "Transaction" (one atomic ``__manifest`` commit, snapshots readers can rely on);
issue "Safety at the boundaries", acceptance: the maintenance race.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import lance
import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
BLOCK = 1_000_000  # ids of batch k: [k * BLOCK, k * BLOCK + rows)
ROWS = 150
BATCHES_PER_WRITER = 4
RETENTION_S = 8.0


def _launch(root: str, role: str, *args: str, fault: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("LANCEPART_FAULT", None)
    if fault:
        env["LANCEPART_FAULT"] = fault
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, str(HERE / "maintenance_proc.py"), root, role, *args], env=env,
                            stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    proc.errfile = err
    proc.role = role
    return proc


def _stderr(proc: subprocess.Popen) -> str:
    proc.errfile.seek(0)
    return proc.errfile.read()[-4000:]


def _journal(proc: subprocess.Popen) -> list[dict]:
    out = proc.stdout.read() if proc.stdout else ""
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _published_ids(root: str, manifest_version: int | None = None) -> list[int]:
    """Every id the ``__manifest`` version publishes, read with plain pylance."""
    manifest = lance.dataset(f"{root}/__manifest", version=manifest_version)
    rows = manifest.to_table(columns=["object_type", "location", "read_version"]).to_pylist()
    ids: list[int] = []
    for r in rows:
        if r["object_type"] != "table":
            continue
        assert r["read_version"] is not None, r
        table = lance.dataset(f"{root}/{r['location']}", version=r["read_version"])
        ids += table.to_table(columns=["id"]).column("id").to_pylist()
    return ids


def test_writers_compactor_cleaner_and_kill9(ns, tmp_path: Path, stress: bool):
    root = ns.root
    duration = 300.0 if stress else 20.0
    rng = random.Random(11)
    stop = tmp_path / "stop"
    next_batch = 0
    batches: dict[str, int] = {}  # batch id -> first id
    queue: list[list] = []  # [batch_id, start, rows] handed to a writer once more (its writer was killed)

    def new_batches() -> list[list]:
        nonlocal next_batch
        out = []
        while queue and len(out) < BATCHES_PER_WRITER:
            out.append(queue.pop(0))
        while len(out) < BATCHES_PER_WRITER:
            bid = f"race-{next_batch:05d}-été"  # not plain ASCII on purpose (issue item 1)
            batches[bid] = next_batch * BLOCK
            out.append([bid, next_batch * BLOCK, ROWS])
            next_batch += 1
        return out

    def writer() -> subprocess.Popen:
        # one writer in three dies right after publishing its second batch, before it can say so:
        # the rerun of that batch under the same id must be a no-op
        todo = new_batches()
        fault = "after_manifest_commit:exit:2" if rng.random() < 1 / 3 else None
        proc = _launch(root, "writer", "--batches", json.dumps(todo), fault=fault)
        proc.todo = todo
        return proc

    def requeue(proc: subprocess.Popen) -> None:
        """A writer that died: its batches it did not report go to its successor, same ids."""
        got = _journal(proc)
        journals.extend(got)
        seen = {j["batch_id"] for j in got}
        queue[:0] = [b for b in proc.todo if b[0] not in seen]

    loops = {"compactor": [], "cleaner": ["--older-than", str(RETENTION_S)]}
    procs = [writer() for _ in range(3)] + [_launch(root, r, "--stop", str(stop), *a) for r, a in loops.items()]
    journals: list[dict] = []
    kills: Counter = Counter()
    runs: Counter = Counter()
    deadline = time.monotonic() + duration
    next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        for i, proc in enumerate(procs):
            if proc.poll() is None:
                continue
            # a writer that finished its list gets a new one; loopers only stop on the stop file
            if proc.role == "writer" and proc.returncode == 77:  # the injected death after publishing
                requeue(proc)
                kills["writer_after_publish"] += 1
            else:
                assert proc.returncode == 0, f"{proc.role} failed:\n{_stderr(proc)}"
                journals += _journal(proc)
            runs[proc.role] += 1
            procs[i] = writer() if proc.role == "writer" else _launch(root, proc.role, "--stop", str(stop),
                                                                       *loops[proc.role])
        if time.monotonic() >= next_kill:
            i = rng.randrange(len(procs))
            victim = procs[i]
            _kill(victim)
            kills[victim.role] += 1
            if victim.role == "writer":
                requeue(victim)
                procs[i] = writer()
            else:
                journals += _journal(victim)
                procs[i] = _launch(root, victim.role, "--stop", str(stop), *loops[victim.role])
            next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
    stop.touch()
    for proc in procs:
        code = proc.wait(timeout=600)
        if proc.role == "writer" and code == 77:
            requeue(proc)
            continue
        assert code == 0, f"{proc.role} failed:\n{_stderr(proc)}"
        journals += _journal(proc)
    # batches whose writer was killed, and never rerun: publish them now (or skip them, if they were)
    while queue:
        proc = _launch(root, "writer", "--batches", json.dumps(queue[:BATCHES_PER_WRITER]))
        del queue[:BATCHES_PER_WRITER]
        assert proc.wait(timeout=600) == 0, _stderr(proc)
        journals += _journal(proc)

    ids = _published_ids(root)
    counts = Counter(ids)
    doubled = {i: c for i, c in counts.items() if c > 1}
    assert not doubled, f"{len(doubled)} ids published more than once, e.g. {list(doubled.items())[:5]}"
    expected = {start + k for start in batches.values() for k in range(ROWS)}
    assert set(counts) == expected, (f"missing {len(expected - set(counts))} ids, "
                                     f"foreign {len(set(counts) - expected)}")
    writes = [j for j in journals if "batch_id" in j]
    published = Counter(j["batch_id"] for j in writes if not j["skipped"])
    assert set(published) <= set(batches) and max(published.values()) == 1, published.most_common(3)
    maintenance = [j for j in journals if "batch_id" not in j]

    # every __manifest version cleanup kept is still a readable snapshot (nothing it pins is gone)
    manifest = lance.dataset(f"{root}/__manifest")
    kept = [int(v["version"]) for v in manifest.versions()]
    checked = 0
    for v in kept[-40:]:  # the newest ones: where a too-eager cleanup would strike
        got = Counter(_published_ids(root, v))
        assert max(got.values(), default=1) == 1, f"__manifest version {v} publishes an id twice"
        checked += 1
    print(f"\n[maintenance race] {duration:.0f}s: batches={len(batches)} rows={len(ids)} "
          f"kills={dict(kills)} writes={len(writes)} maintenance_runs={len(maintenance)} "
          f"versions_removed={sum(j.get('versions_removed', 0) for j in maintenance)} "
          f"compactions={sum(j.get('compacted', 0) for j in maintenance)} manifest_versions={manifest.version} "
          f"kept_versions={len(kept)} snapshots_checked={checked}")
    assert sum(kills.values()) >= 5
