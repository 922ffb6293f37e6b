"""Crash proof of the write protocol (docs/design.md §8 hazard 2; spec/partitioning.md "Transaction").

A writer process (local ``ns.write``, or a Spark driver running ``lancepart.spark.write`` on
``local[2]``) is killed (a) deterministically at every protocol step with
``LANCEPART_FAULT=<step>:exit`` (``os._exit(77)``, no cleanup) and (b) with a real
``kill -9`` at seeded random instants while it writes. Each crash is one cycle of a campaign
on one namespace; the next process first runs a *different* batch over the same partitions
(the later writer), then reruns the dead batch id twice, then is itself crashed. After every
crash the whole ``__manifest`` history is checked (:func:`tests.crash_proc.check_history`):
every version publishes exactly the serial application of the committed batches (so the
snapshot is the old one or the new one, never a mix), and no data file a dead job left
unpublished is ever published later; the later writers move ``read_version`` past every table
version the dead job left beyond it. The reruns publish exactly once: the first publishes iff
the dead job had not, the second is always skipped. A Spark driver costs a JVM start, so by
default the Spark driver dies only at the two steps that leave Spark-specific debris (one
driver each); ``--stress`` runs both modes at every step, 50 random kills of the local writer
and 10 random kills of the Spark driver.
"""

from __future__ import annotations

import random
import statistics
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import lance
import pytest

from lancepart.util.faults import STEPS
from tests.conftest import EVENTS_SPEC
from tests.crash_proc import BLOCK, Batch, check_history, data_files_on_disk, finish, kill_after_ready, launch

pytestmark = pytest.mark.slow

SPARK_STEPS = tuple(s for s in STEPS if s != "after_plan")  # after_plan is not a driver step of the Spark path
LEAVES_VERSIONS = {"after_table_commit", "after_table_commits", "before_manifest_commit"}
LEAVES_FILES = {"after_fragments", *LEAVES_VERSIONS}
STATS: Counter = Counter()
_STATS_LOCK = threading.Lock()


def count(**amounts: int) -> None:
    with _STATS_LOCK:  # campaigns may run on threads
        STATS.update({k: int(v) for k, v in amounts.items()})


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    s = STATS
    print(f"\n[test_crash] writers={s['writers']} batches={s['batches']} kills={s['kills']} "
          f"(fault exits={s['exits']}, kill -9 during a write={s['kill9']} [local {s['kill9_local']}, "
          f"Spark {s['kill9_spark']}]: {s['kill9_published']} after the "
          f"publish, {s['kill9_versions']} leaving table versions beyond read_version; "
          f"{s['kill9_late']} more landed after the write returned) reruns={s['reruns']} "
          f"dead_files_forbidden={s['dead_files']} dead_versions_superseded={s['superseded']} "
          f"inputs={s['inputs']} manifest_versions={s['versions']} rows_checked={s['rows_checked']} "
          f"rows_lost={s['rows_lost']}")


class Campaign:
    """Crash cycles on one namespace, each verified against the whole __manifest history."""

    def __init__(self, root: str, engine: str) -> None:
        self.root, self.engine = root, engine
        self.batches: dict[str, Batch] = {}
        self.block = 1
        self.forbidden: list[tuple[int, set[str]]] = []
        self.cache: dict = {}
        self.pending: dict | None = None  # the last crash, to be followed up
        self.walls: list[float] = []
        self.cycles = 0

    def batch(self, mode: str, days: int, rows: int = 150) -> Batch:
        b = Batch(f"{self.engine}-{self.block}", self.block * BLOCK, rows, seed=self.block, days=days, mode=mode)
        self.block += 1
        self.batches[b.batch_id] = b
        return b

    def tables(self) -> dict[str, tuple[int, int]]:
        """location -> (read_version, latest version) of every published table."""
        snap = lance.dataset(f"{self.root}/__manifest").to_table(columns=["object_type", "location", "read_version"])
        return {r["location"]: (r["read_version"], lance.dataset(f"{self.root}/{r['location']}").version)
                for r in snap.to_pylist() if r["object_type"] == "table"}

    def follow_up_ops(self) -> list[dict]:
        if self.pending is None:  # the first process: a baseline (and a warm-up for Spark's Python workers)
            return [self.batch("append", days=3).op()]
        dead = self.pending["batch"]
        # on top of a dead job's table versions the later writer appends: the demanding case (an
        # overwrite drops every fragment anyway)
        mode = "append" if self.pending["beyond"] or self.block % 3 else "overwrite"
        later = self.batch(mode, days=dead.days)
        return [later.op(), dead.op(), dead.op()]

    def check_follow_up(self, records: list[dict], err: str) -> None:
        assert all("error" not in r for r in records), (records, err[-3000:])
        res = [r["result"] for r in records]
        # a process's first write also pays for lazy imports (and a Spark driver's Python workers)
        self.walls += [r["wall"] for r in records[1:] if not r["result"]["skipped"]]
        count(batches=len(records))
        if self.pending is None:
            assert len(res) == 1 and not res[0]["skipped"]
            return
        later, first, second = res
        assert not later["skipped"]
        # the rerun publishes exactly once: now iff the dead job had not published
        assert first["skipped"] == self.pending["published"], (self.pending, first)
        assert second["skipped"], second
        count(reruns=2)
        # the later writer and the rerun (which rewrites every partition of the dead batch)
        # superseded each of the dead job's table versions, and published none of its fragments
        now = self.tables()
        superseded = 0
        for loc, (old_rv, dead_version) in self.pending["beyond"].items():
            rv = now[loc][0]
            assert rv > dead_version, f"{loc}: read_version {rv} still behind the dead job's version {dead_version}"
            published = {f.path for fr in lance.dataset(f"{self.root}/{loc}", version=rv).get_fragments()
                         for f in fr.data_files()}
            dead = {f.path for fr in lance.dataset(f"{self.root}/{loc}", version=dead_version).get_fragments()
                    for f in fr.data_files()}
            base = {f.path for fr in lance.dataset(f"{self.root}/{loc}", version=old_rv).get_fragments()
                    for f in fr.data_files()}
            assert not (published & (dead - base)), f"{loc}@{rv} publishes fragments of the dead version {dead_version}"
            superseded += 1
        count(superseded=superseded)

    def cycle(self, mode: str, days: int, *, fault: str | None = None, kill_delay: float | None = None) -> dict:
        """Follow up the previous crash, then crash a new batch; returns what the crash left."""
        ops = self.follow_up_ops()
        crash = self.batch(mode, days)
        before = self.tables()
        proc = launch(self.root, [*ops, crash.op(ready=True, fault=fault)], engine=self.engine)
        count(writers=1)
        if kill_delay is None:
            code, records, err = finish(proc)
            killed = False
        else:
            code, records, err, killed = kill_after_ready(proc, kill_delay)
        assert len(records) >= len(ops), (code, records, err[-3000:])
        self.check_follow_up(records[: len(ops)], err)
        finished = records[len(ops):]
        count(batches=1)
        if fault is not None:
            assert code == 77 and not finished, (code, finished, err[-3000:])
            count(exits=1)
        else:
            assert code in (0, -9) and all("error" not in r for r in finished), (code, finished, err[-3000:])
            killed = killed and not finished  # else the kill landed after the write returned: no crash
            count(kill9=killed, kill9_late=not killed, **{f"kill9_{self.engine}": killed})
        h = self.verify()
        published = crash.batch_id in h.commit_version
        if finished:
            assert published and finished[0]["result"]["manifest_version"] == h.commit_version[crash.batch_id]
        dead = data_files_on_disk(self.root) - h.published_files
        known = set().union(*(f for _, f in self.forbidden)) if self.forbidden else set()
        new_dead = dead - known
        if new_dead:
            self.forbidden.append((1, new_dead))  # never published by any version, now or later
            count(dead_files=len(new_dead))
        after = self.tables()
        beyond = {loc: (rv, latest) for loc, (rv, latest) in after.items()
                  if latest > rv and before.get(loc) != (rv, latest)}
        if killed:
            count(kill9_published=published)
            count(kill9_versions=bool(beyond))
        count(kills=bool(fault) or killed)
        self.pending = {"batch": crash, "published": published, "beyond": beyond, "fault": fault}
        self.cycles += 1
        return {"published": published, "beyond": beyond, "dead": new_dead, "tables_before": len(before),
                "tables_after": len(after), "killed": killed}

    def verify(self):
        h = check_history(self.root, self.batches, forbidden=self.forbidden, cache=self.cache)
        assert h.rows_lost == 0
        return h

    def finish(self, engine: str = "local") -> None:
        """A last process follows up the last crash; every batch ends up published exactly once.
        It is a local writer by default: any later writer must cope with what a dead one left."""
        ops = self.follow_up_ops()
        code, records, err = finish(launch(self.root, ops, engine=engine))
        count(writers=1)
        assert code == 0 and len(records) == len(ops), err[-3000:]
        self.check_follow_up(records, err)
        h = self.verify()
        assert set(h.commit_version) == set(self.batches)  # every batch, dead ones included, published once
        count(inputs=sum(b.rows for b in self.batches.values()))
        count(versions=h.versions)
        count(rows_checked=h.rows_checked)
        count(rows_lost=h.rows_lost)

    def kill_delay(self, rng: random.Random) -> float:
        """A random instant inside a write: the last warm writes' median duration bounds it."""
        est = statistics.median(self.walls[-8:]) if self.walls else (2.0 if self.engine == "spark" else 0.3)
        return rng.uniform(0.0, 0.6 * est)


def step_matrix(steps, stress: bool) -> list[tuple[str, str]]:
    """(fault, mode): every step; both modes under --stress, else alternating."""
    out = []
    for i, step in enumerate(steps):
        modes = ("append", "overwrite") if stress else (("overwrite" if i % 2 else "append"),)
        out += [(f"{step}:exit", m) for m in modes]
    return out


def check_step_crash(c: dict, fault: str, engine: str, new_days: bool) -> None:
    step = fault.split(":")[0]
    assert c["published"] == (step == "after_manifest_commit"), c  # old snapshot, or new after the publish
    assert bool(c["beyond"]) == (step in LEAVES_VERSIONS), c  # dead table versions beyond read_version
    if step in LEAVES_FILES or (engine == "spark" and step == "after_reserve"):
        assert c["dead"], c  # the dead job left unpublished data files behind
    reserved = step != ("after_plan" if engine == "local" else "after_fragments")  # reservation precedes the step
    if new_days and reserved:
        assert c["tables_after"] > c["tables_before"], c  # its new partitions were reserved before it died


def run_campaign(root: str, engine: str, matrix: list[tuple[str, str]], kills: int, seed: int) -> None:
    """Crash at every (fault, mode) of ``matrix``, then ``kills`` random kill -9, on one namespace."""
    camp = Campaign(root, engine)
    for i, (fault, mode) in enumerate(matrix):
        c = camp.cycle(mode, days=3 + (i + 1) % 8, fault=fault)
        check_step_crash(c, fault, engine, new_days=i + 1 < 8)
    rng = random.Random(seed)
    landed, i = 0, len(matrix)
    while landed < kills and i < len(matrix) + 3 * kills:  # a kill that lands after the write returned is redone
        c = camp.cycle(rng.choice(("append", "append", "overwrite")), days=3 + (i + 1) % 8,
                       kill_delay=camp.kill_delay(rng))
        landed += c["killed"]
        i += 1
    camp.finish()


# --------------------------------------------------------------------------- local writer

def test_local_writer_killed_at_every_step(ns, stress):
    matrix = step_matrix(STEPS, stress)
    if stress:  # dying after the 2nd partition's fragments / the 3rd table commit, not the first
        matrix += [("after_fragments:exit:2", "append"), ("after_table_commit:exit:3", "overwrite")]
    run_campaign(ns.root, "local", matrix, kills=0, seed=0)


def test_local_writer_kill9_at_random_instants(ns, stress):
    run_campaign(ns.root, "local", [], kills=50 if stress else 5, seed=20251210)


# --------------------------------------------------------------------------- Spark driver

# Default run: the two crashes that leave Spark-specific debris, one Spark driver each: before
# any table commit (data files in a reserved job directory) and between the table commits and
# the __manifest commit (committed table versions of an overwrite). The third distinct point,
# after the __manifest commit, is the same publish path as the local writer's (every step above)
# and is where the Spark driver dies in tests/test_airflow_dags.py's retry run. Each Spark
# driver costs a JVM start, so the campaigns run on two namespaces side by side, and --stress
# does every step in both modes and 10 random kill -9 of the driver.
SPARK_DEFAULT = [("after_reserve:exit", "append"), ("after_table_commits:exit", "overwrite")]


def new_namespace(path) -> str:
    from lancepart import PartitionedNamespace
    from lancepart.util.sample import demo_events

    schema = demo_events(1).schema
    return PartitionedNamespace.create(str(path), schema.set(0, schema.field("id").with_nullable(False)),
                                       EVENTS_SPEC).root


@pytest.mark.spark
def test_spark_driver_crashes(ns, tmp_path, stress):
    matrix = step_matrix(SPARK_STEPS, True) if stress else SPARK_DEFAULT
    kills = 10 if stress else 0
    lanes = [(ns.root, matrix[0::2], kills // 2), (new_namespace(tmp_path / "ns2"), matrix[1::2], kills - kills // 2)]
    with ThreadPoolExecutor(len(lanes)) as pool:
        futures = [pool.submit(run_campaign, root, "spark", m, kills=k, seed=7 + i)
                   for i, (root, m, k) in enumerate(lanes)]
        for f in futures:
            f.result()
