"""Concurrency proof of the write protocol (spec/partitioning.md "Transaction", docs/design.md §8).

N real writer processes (N in 2, 4, 8) append AND overwrite overlapping partitions in
lock-step (a wall-clock start, then a file barrier before every batch), all of them creating
the same new partitions at the same moment (every batch reaches one day further), all of them
submitting one shared batch id at once, then re-submitting their first batch. With N >= 4 one
writer dies (``os._exit``) after committing its partition tables, in the middle of the race.
A reader process keeps taking published snapshots throughout. After every round the whole
``__manifest`` history is checked by :func:`tests.crash_proc.check_history`: at every version
the published rows are exactly the serial application of the committed batches in commit
order (no row lost, doubled or foreign), one table per partition, ``read_version`` never
decreasing, no data file left unpublished by an earlier round ever published; every reader
snapshot is the published state of the version it read; and every committed batch was
reported by exactly one writer. ``--stress`` runs more rounds, batches and rows, makes one of
four writers a Spark driver on ``local[2]``, and adds a storm on four hot partitions.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.crash_proc import BLOCK, Batch, check_history, check_reader, data_files_on_disk, finish, launch

pytestmark = pytest.mark.slow

STATS: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    s = STATS
    print(f"\n[test_concurrency] runs={s['runs']} writers={s['writers']} (max N={s['max_n']}) "
          f"batches={s['batches']} committed={s['committed']} skipped={s['skipped']} conflicts={s['conflicts']} "
          f"retries={s['retries']} kills={s['kills']} inputs={s['inputs']} manifest_versions={s['versions']} "
          f"reader_snapshots={s['snapshots']} dead_files_forbidden={s['dead_files']} "
          f"rows_checked={s['rows_checked']} rows_lost={s['rows_lost']}")


def params(stress: bool) -> dict:
    return {"rounds": 3, "batches": 4, "rows": 400} if stress else {"rounds": 1, "batches": 2, "rows": 120}


CRASH_FAULT = "after_table_commits:exit"


def plan_round(r: int, n: int, nb: int, rows: int, first_block: int, hot: bool = False
               ) -> tuple[list[list[dict]], dict[str, Batch]]:
    """Ops per writer for round ``r`` and every batch they may commit. With N >= 4 the last
    writer dies (``after_table_commits:exit``) in the middle of the last lock-step batch, so the
    others publish over its unpublished table versions while they race each other."""
    batches: dict[str, Batch] = {}
    block = first_block
    day0 = 2 + r * (nb + 1)
    days = (lambda j: 1) if hot else (lambda j: day0 + j)  # hot: every batch hits the same 4 partitions
    ops: list[list[dict]] = [[] for _ in range(n)]
    crasher = n - 1 if n >= 4 else None
    for w in range(n):
        for j in range(nb):
            mode = "overwrite" if (w + j) % 3 == 1 else "append"
            b = Batch(f"r{r}-w{w}-b{j}", block * BLOCK, rows, seed=w, days=days(j), mode=mode)
            block += 1
            batches[b.batch_id] = b
            fault = {"fault": CRASH_FAULT} if w == crasher and j == nb - 1 else {}
            ops[w].append(b.op(barrier=f"r{r}-b{j}", **fault))
    shared = Batch(f"r{r}-shared", block * BLOCK, rows, seed=99, days=days(nb))
    batches[shared.batch_id] = shared
    live = n - (crasher is not None)
    for w in range(live):
        ops[w].append(shared.op(barrier=f"r{r}-shared", barrier_n=live))
        ops[w].append(batches[f"r{r}-w{w}-b0"].op(barrier=f"r{r}-rerun", barrier_n=live))  # the same batch again
    return ops, batches


@pytest.mark.parametrize("n", [2, 4, 8])
def test_concurrent_writers_and_reader(ns, tmp_path: Path, stress: bool, n: int):
    run_rounds(ns, tmp_path, n, params(stress), spark_writer=stress and n == 4)


@pytest.mark.stress
def test_hot_partitions_storm(ns, tmp_path: Path):
    """Eight writers, every batch on the same four partitions: the most contended case, where
    each publish has to redo its table commits over the others' (liveness and exactness)."""
    run_rounds(ns, tmp_path, 8, {"rounds": 2, "batches": 6, "rows": 200}, hot=True)


def test_writers_that_give_up_publish_nothing(ns, tmp_path: Path):
    """No retries (``max_retries=0``) on four hot partitions: most writes fail with
    CommitConflictError. They publish nothing, and no later writer (the second round) ever
    publishes the fragments and table versions they left behind."""
    assert run_rounds(ns, tmp_path, 3, {"rounds": 2, "batches": 2, "rows": 100}, hot=True, max_retries=0) > 0


def run_rounds(ns, tmp_path: Path, n: int, p: dict, *, spark_writer: bool = False, hot: bool = False,
               max_retries: int = 20) -> int:
    """Run the rounds, check everything; returns the number of writes that gave up (CommitConflictError)."""
    batches: dict[str, Batch] = {}
    outputs: list[tuple[int, int, list[dict]]] = []  # (round, writer, records)
    snapshots: list[dict] = []
    forbidden: list[tuple[int, set[str]]] = []
    cache: dict = {}
    block = 1
    kills = 0
    for r in range(p["rounds"]):
        ops, round_batches = plan_round(r, n, p["batches"], p["rows"], block, hot=hot)
        block += len(round_batches)
        batches.update(round_batches)
        barrier = tmp_path / f"barrier-{r}"
        barrier.mkdir()
        stop, snaps = tmp_path / f"stop-{r}", tmp_path / f"reader-{r}.jsonl"
        reader = launch(ns.root, reader=str(snaps), stop=str(stop))
        start_at = time.time() + 2.0 + 0.25 * n  # every writer has imported lance by then
        # under --stress one of the four writers is a Spark driver (its reservations race the others')
        engines = ["spark" if spark_writer and w == 0 else "local" for w in range(n)]
        procs = [launch(ns.root, ops[w], engine=engines[w], writer=w, writers=n, barrier=str(barrier),
                        start_at=start_at, max_retries=max_retries) for w in range(n)]
        for w, proc in enumerate(procs):
            code, records, err = finish(proc)
            crashed = any(op.get("fault") for op in ops[w])
            assert (code, len(records)) == ((77, len(ops[w]) - 1) if crashed else (0, len(ops[w]))), err[-3000:]
            kills += crashed
            outputs.append((r, w, records))
        stop.touch()
        code, _, err = finish(reader)
        assert code == 0, err[-3000:]
        snapshots += [json.loads(line) for line in snaps.read_text().splitlines()]
        h = check_history(ns.root, batches, forbidden=forbidden, cache=cache)
        # no writer is left: a data file unpublished now (a dead writer's, or a skipped duplicate's) never will be
        forbidden.append((h.versions + 1, data_files_on_disk(ns.root) - h.published_files))

    reader_rows = check_reader(h, snapshots)

    # what the writers saw agrees with the history: every committed batch was published by exactly
    # one write that reported it (a failed or skipped write published nothing), at the version it names
    created = conflicts = 0
    publishers: Counter = Counter()
    for _, _, records in outputs:
        for rec in records:
            bid = rec["batch_id"]
            if "error" in rec:
                assert rec["error"] == "CommitConflictError", rec
                conflicts += 1
                continue
            res = rec["result"]
            STATS["retries"] += res["retries"]
            created += res["partitions_created"]
            if res["skipped"]:
                STATS["skipped"] += 1
                assert bid in h.commit_version and res["manifest_version"] >= h.commit_version[bid], rec
                continue
            publishers[bid] += 1
            assert res["manifest_version"] == h.commit_version[bid], rec
            assert res["rows_written"] == batches[bid].rows
    assert set(publishers) == set(h.commit_version) and set(publishers.values()) <= {1}, publishers
    if n >= 4:
        for r in range(p["rounds"]):
            assert f"r{r}-w{n - 1}-b{p['batches'] - 1}" not in h.commit_version  # the dead writer's batch
    if max_retries >= 20:
        # liveness: under this contention the retries must get every batch through (a bounded failure
        # publishes nothing, which the history check covers, but a protocol that keeps failing is broken)
        assert conflicts == 0, f"{conflicts} writes gave up with CommitConflictError"
    tables = len(ns.refresh().partitions())
    # every partition created exactly once, by one writer (a dead or failed writer may have created some too)
    assert created == tables if not (kills or conflicts) else created <= tables
    assert h.rows_lost == 0
    committed_rows = sum(batches[b].rows for b in h.order)
    STATS.update(runs=1, writers=n * p["rounds"], batches=sum(len(recs) for _, _, recs in outputs) + kills,
                 committed=len(h.order), conflicts=conflicts, kills=kills, inputs=committed_rows,
                 versions=h.versions, snapshots=len(snapshots), rows_checked=h.rows_checked + reader_rows,
                 rows_lost=h.rows_lost, dead_files=sum(len(f) for _, f in forbidden))
    STATS["max_n"] = max(STATS["max_n"], n)
    assert len(snapshots) >= 2
    return conflicts
