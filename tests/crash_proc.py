"""Worker process and invariant checker for tests/test_concurrency.py and tests/test_crash.py.

As a script it is one writer (local ``ns.write`` or a Spark driver running
``lancepart.spark.write`` on ``local[2]``) that runs a list of write operations, or a reader
that keeps taking published snapshots::

    crash_proc.py ROOT --engine local|spark --ops JSON [--start-at T] [--barrier DIR --writer W --writers N]
    crash_proc.py ROOT --reader OUT --stop FILE

Each op is ``{"batch_id", "start", "rows", "seed", "days", "mode"}`` plus optional
``"barrier"`` (a name: wait until ``"barrier_n"`` writers, default N, reached it), ``"ready"`` (print ``@@READY``
first, so the parent can time a ``kill -9``) and ``"fault"`` (a ``LANCEPART_FAULT`` spec put
into this process's environment just before the op; faults.checkpoint reads it on every
call). Every op prints one ``@@{json}`` line: the CommitResult or the error.

As a module it holds the data generator shared by the writers and the tests, and
:func:`check_history`, which walks every ``__manifest`` version and checks it against the
serial application of the committed batches in commit order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT_DIR = Path(__file__).resolve().parent.parent
if str(ROOT_DIR) not in sys.path:  # `python tests/crash_proc.py` puts tests/ first, not the project
    sys.path.insert(0, str(ROOT_DIR))

BLOCK = 1_000_000  # every batch owns the ids [k * BLOCK, k * BLOCK + rows)
SLICES = 2  # the Spark job generates its input in this many tasks; the local writer makes the same rows
MARK = "@@"


# --------------------------------------------------------------------------- data

@dataclass(frozen=True)
class Batch:
    """One input batch: demo rows with ids [start, start + rows), made in SLICES slices."""

    batch_id: str
    start: int
    rows: int
    seed: int = 1
    days: int = 3
    mode: str = "append"

    def op(self, **extra: Any) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "start": self.start, "rows": self.rows, "seed": self.seed,
                "days": self.days, "mode": self.mode, **extra}

    @classmethod
    def from_op(cls, op: Mapping[str, Any]) -> Batch:
        return cls(op["batch_id"], op["start"], op["rows"], op.get("seed", 1), op.get("days", 3),
                   op.get("mode", "append"))

    def table(self):
        return batch_table(self.start, self.rows, self.seed, self.days)


def slice_bounds(rows: int) -> list[tuple[int, int]]:
    per = -(-rows // SLICES)
    return [(s * per, max(0, min(per, rows - s * per))) for s in range(SLICES)]


def batch_table(start: int, rows: int, seed: int, days: int):
    import pyarrow as pa

    from lancepart.util.sample import demo_events

    parts = [demo_events(n, seed=seed, start_id=start + off, days=days) for off, n in slice_bounds(rows) if n]
    return pa.concat_tables(parts)


def spark_frame(spark, b: Batch):
    """The same rows as ``b.table()``, generated on the executors (one task per slice)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from lancepart.util.sample import demo_events

    bounds = slice_bounds(b.rows)
    start, seed, days = b.start, b.seed, b.days

    def make(batches):
        from lancepart.util.sample import demo_events as events

        for batch in batches:
            for s in batch.column(0).to_pylist():
                off, n = bounds[s]
                if n:
                    yield from events(n, seed=seed, start_id=start + off, days=days).to_batches()

    return spark.range(0, SLICES, numPartitions=SLICES).mapInArrow(make, from_arrow_schema(demo_events(1).schema))


# --------------------------------------------------------------------------- processes

def emit(obj: Mapping[str, Any]) -> None:
    sys.stdout.write(MARK + json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def parse_output(out: str) -> tuple[bool, list[dict]]:
    """(saw READY, op records) from a worker's stdout."""
    ready, records = False, []
    for line in out.splitlines():
        if line.startswith(MARK + "READY"):
            ready = True
        elif line.startswith(MARK):
            records.append(json.loads(line[len(MARK):]))
    return ready, records


def wait_barrier(directory: str, name: str, writer: int, writers: int, timeout: float = 300.0) -> None:
    Path(directory, f"{name}.{writer}").touch()
    deadline = time.time() + timeout
    while sum(1 for p in os.listdir(directory) if p.startswith(name + ".")) < writers and time.time() < deadline:
        time.sleep(0.005)


def spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # small jobs: a client JIT and serial GC start the driver JVM in about half the time
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                          "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("lancepart-crash")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_writer(a: argparse.Namespace) -> int:
    from lancepart import PartitionedNamespace
    from lancepart.errors import CommitConflictError

    ops = json.loads(a.ops)
    spark = spark_session() if a.engine == "spark" else None
    if spark is not None:
        from lancepart import spark as lps
    ns = PartitionedNamespace.open(a.root)
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    for i, op in enumerate(ops):
        b = Batch.from_op(op)
        data = b.table() if spark is None else spark_frame(spark, b)
        if op.get("barrier"):
            wait_barrier(a.barrier, op["barrier"], a.writer, op.get("barrier_n", a.writers))
        if op.get("fault"):
            os.environ["LANCEPART_FAULT"] = op["fault"]
        if op.get("ready"):
            sys.stdout.write(MARK + "READY\n")
            sys.stdout.flush()
        t = time.monotonic()
        try:
            if spark is None:
                r = ns.write(data, mode=b.mode, batch_id=b.batch_id, max_retries=a.max_retries)
            else:
                r = lps.write(data, a.root, mode=b.mode, batch_id=b.batch_id, max_retries=a.max_retries)
            emit({"i": i, "batch_id": b.batch_id, "result": r.to_dict(), "wall": time.monotonic() - t})
        except CommitConflictError as e:
            emit({"i": i, "batch_id": b.batch_id, "error": "CommitConflictError", "message": str(e)})
        except Exception as e:  # reported to the test, which fails on it
            emit({"i": i, "batch_id": b.batch_id, "error": type(e).__name__, "message": repr(e)})
    return 0


def launch(root: str, ops: Sequence[Mapping[str, Any]] = (), *, engine: str = "local", writer: int = 0,
           writers: int = 1, barrier: str | None = None, start_at: float = 0.0, reader: str | None = None,
           stop: str | None = None, max_retries: int = 20, env: Mapping[str, str] | None = None):
    """Start this script as a child process (its own session, so a kill can take its whole group)."""
    import subprocess

    cmd = [sys.executable, str(Path(__file__).resolve()), root, "--engine", engine, "--ops", json.dumps(list(ops)),
           "--writer", str(writer), "--writers", str(writers), "--max-retries", str(max_retries)]
    if barrier:
        cmd += ["--barrier", barrier]
    if start_at:
        cmd += ["--start-at", repr(start_at)]
    if reader:
        cmd += ["--reader", reader, "--stop", str(stop)]
    full_env = {k: v for k, v in os.environ.items() if k != "LANCEPART_FAULT"}
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    full_env.update(env or {})
    err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: Spark may log a lot while we read stdout
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    proc.errfile = err
    return proc


def stderr_of(proc) -> str:
    """The worker's stderr (call once, after it ended: closes the file)."""
    with proc.errfile as f:
        f.seek(0)
        return f.read()


def finish(proc, timeout: float = 600) -> tuple[int, list[dict], str]:
    """Wait for a worker; (exit code, its op records, stderr)."""
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, parse_output(out)[1], stderr_of(proc)


def kill_after_ready(proc, delay: float, timeout: float = 600) -> tuple[int, list[dict], str, bool]:
    """Wait for the worker's READY line, sleep ``delay``, ``kill -9`` it (then its process group:
    a Spark driver's JVM and Python workers). Returns (exit code, op records, stderr, killed)."""
    import signal

    lines = []
    for line in iter(proc.stdout.readline, ""):  # blocking reads: select() would miss lines already buffered
        lines.append(line)
        if line.startswith(MARK + "READY"):
            break
    killed = False
    if lines and lines[-1].startswith(MARK + "READY"):
        time.sleep(delay)
        try:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # our own child's group: JVM and workers of a Spark driver
    except (ProcessLookupError, PermissionError):
        pass
    out, _ = proc.communicate(timeout=timeout)
    code = proc.returncode
    return code, parse_output("".join(lines) + out)[1], stderr_of(proc), killed and code == -9


def ids_digest(ids: Iterable[int]) -> str:
    import numpy as np

    return hashlib.sha256(np.sort(np.fromiter(ids, dtype=np.int64)).tobytes()).hexdigest()[:32]


def run_reader(a: argparse.Namespace) -> int:
    """Keep taking published snapshots (``open(root).to_table()``) until the stop file appears."""
    from lancepart import PartitionedNamespace

    with open(a.reader, "w") as out:
        while True:
            stop = os.path.exists(a.stop)  # one more snapshot after the writers are done
            ns = PartitionedNamespace.open(a.root)
            ids = ns.to_table(columns=["id"]).column("id").to_numpy()
            blocks = Counter((ids // BLOCK).tolist())
            out.write(json.dumps({"v": ns.manifest_version, "n": len(ids), "digest": ids_digest(ids),
                                  "blocks": {str(k): n for k, n in blocks.items()}}) + "\n")
            out.flush()
            if stop:
                return 0
            time.sleep(0.02)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--engine", choices=("local", "spark"), default="local")
    p.add_argument("--ops", default="[]")
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to begin (lines writers up)")
    p.add_argument("--barrier")
    p.add_argument("--writer", type=int, default=0)
    p.add_argument("--writers", type=int, default=1)
    p.add_argument("--max-retries", type=int, default=20)
    p.add_argument("--reader")
    p.add_argument("--stop")
    a = p.parse_args()
    return run_reader(a) if a.reader else run_writer(a)


# --------------------------------------------------------------------------- checking

class InvariantError(AssertionError):
    pass


@dataclass
class History:
    """What :func:`check_history` established about a namespace."""

    versions: int = 0
    order: list[str] = field(default_factory=list)  # committed batch ids in __manifest commit order
    commit_version: dict[str, int] = field(default_factory=dict)  # batch id -> __manifest version
    digests: dict[int, str] = field(default_factory=dict)  # __manifest version -> digest of its published ids
    counts: dict[int, int] = field(default_factory=dict)  # __manifest version -> published rows
    rows_checked: int = 0
    rows_lost: int = 0
    final_ids: list[int] = field(default_factory=list)
    published_files: set[str] = field(default_factory=set)  # every data file any version ever published

    def state_versions(self, digest: str) -> list[int]:
        return [v for v, d in self.digests.items() if d == digest]


def _table_content(root: str, location: str, version: int, cache: dict) -> tuple[list[int], frozenset[str]]:
    import lance

    key = (root, location, version)
    if key not in cache:
        ds = lance.dataset(f"{root}/{location}", version=version)
        ids = ds.to_table(columns=["id"]).column("id").to_pylist()
        files = frozenset(f"{location}/data/{df.path}" for fr in ds.get_fragments() for df in fr.data_files())
        cache[key] = (ids, files)
    return cache[key]


def data_files_on_disk(root: str) -> set[str]:
    out = set()
    for d in os.listdir(root):
        data = os.path.join(root, d, "data")
        if d not in ("__manifest", "_lancepart_batches") and os.path.isdir(data):
            out.update(f"{d}/data/{f}" for f in os.listdir(data))
    return out


def check_history(root: str, batches: Mapping[str, Batch], *,
                  forbidden: Sequence[tuple[int, set[str]]] = (), cache: dict | None = None) -> History:
    """Walk every ``__manifest`` version of ``root`` and check, at each one:

    * one table row per partition value tuple, unique object ids and locations, ``read_version``
      never NULL and never decreasing, no table row ever vanishing;
    * each batch id is carried by the transaction properties (``lancepart.batch_id``) of
      exactly one ``__manifest`` version, the one that published it;
    * the published rows (every table at its ``read_version``) are exactly the serial
      application, in commit order, of the batches committed so far (append adds rows,
      overwrite replaces the partitions the batch touches): no row lost, doubled or foreign,
      and each row sits in the table of its own partition;
    * no data file of ``forbidden`` (``(from_version, files)``: files of dead jobs) is published
      at or after ``from_version``.
    """
    import lance

    from lancepart.write.batches import BATCH_ID_PROPERTY
    from tests.conftest import expected_keys

    cache = {} if cache is None else cache  # table versions and batches are immutable: reuse across calls
    key_of: dict[int, tuple] = {}
    content: dict[str, dict[tuple, list[int]]] = {}
    for bid, b in batches.items():
        if ("batch", b) not in cache:
            t = b.table()
            cache["batch", b] = (t.column("id").to_pylist(), expected_keys(t))
        ids, keys = cache["batch", b]
        per: dict[tuple, list[int]] = {}
        for i, k in zip(ids, keys, strict=True):
            if i in key_of and key_of[i] != k:
                raise InvariantError(f"test bug: id {i} has two partition keys")
            key_of[i] = k
            per.setdefault(k, []).append(i)
        content[bid] = per

    h = History()
    mds = lance.dataset(f"{root}/__manifest")
    latest = mds.version
    model: dict[tuple, list[int]] = {}
    prev_rv: dict[str, int] = {}
    records: dict[str, int] = {}
    for v in range(1, latest + 1):
        if ("manifest", root, v) not in cache:
            cache["manifest", root, v] = mds.checkout_version(v).to_table().to_pylist()
        rows = cache["manifest", root, v]
        where = f"__manifest version {v}"
        # batch records: the transaction of the publishing commit carries the id
        if ("tx", root, v) not in cache:
            tx = mds.read_transaction(v)
            cache["tx", root, v] = (tx.transaction_properties or {}).get(BATCH_ID_PROPERTY) if tx else None
        bid = cache["tx", root, v]
        if bid is not None:
            if bid in records:
                raise InvariantError(f"{where}: batch {bid} published again (first in version {records[bid]})")
            if bid not in batches:
                raise InvariantError(f"{where}: unknown batch {bid} committed")
            records[bid] = v
            h.order.append(bid)
            h.commit_version[bid] = v
            b = batches[bid]
            for k, ids in content[bid].items():
                model[k] = ([*model.get(k, []), *ids] if b.mode == "append" else list(ids))
        # table rows
        tables = [r for r in rows if r["object_type"] == "table"]
        pcols = sorted(c for c in (rows[0] if rows else {}) if c.startswith("partition_field_"))
        oids = [r["object_id"] for r in tables]
        locs = [r["location"] for r in tables]
        tuples = [tuple(r[c] for c in pcols) for r in tables]
        for what, vals in (("object_id", oids), ("location", locs), ("partition tuple", tuples)):
            dup = [x for x, n in Counter(vals).items() if n > 1]
            if dup:
                raise InvariantError(f"{where}: {what} not unique: {dup[:3]}")
        gone = set(prev_rv) - set(oids)
        if gone:
            raise InvariantError(f"{where}: table rows vanished: {sorted(gone)[:3]}")
        state: dict[tuple, list[int]] = {}
        published: set[str] = set()
        for r, key in zip(tables, tuples, strict=True):
            rv = r["read_version"]
            if rv is None:
                raise InvariantError(f"{where}: {r['object_id']} has read_version NULL")
            if rv < prev_rv.get(r["object_id"], 0):
                raise InvariantError(f"{where}: read_version of {r['object_id']} moved back "
                                     f"{prev_rv[r['object_id']]} -> {rv}")
            prev_rv[r["object_id"]] = rv
            ids, files = _table_content(root, r["location"], rv, cache)
            published |= files
            for i in ids:
                if i not in key_of:
                    raise InvariantError(f"{where}: row id {i} in {r['location']}@{rv} belongs to no known batch")
                if key_of[i] != key:
                    raise InvariantError(f"{where}: row id {i} of partition {key_of[i]} published in table of {key}")
            if ids:
                state[key] = sorted(ids)
        for start, files in forbidden:
            if v >= start and published & files:
                raise InvariantError(f"{where}: publishes {len(published & files)} data files of a dead job, "
                                     f"e.g. {sorted(published & files)[0]}")
        h.published_files |= published
        want = {k: sorted(ids) for k, ids in model.items() if ids}
        if state != want:
            got_ids = Counter(i for ids in state.values() for i in ids)
            want_ids = Counter(i for ids in want.values() for i in ids)
            lost = sorted((want_ids - got_ids).elements())
            extra = sorted((got_ids - want_ids).elements())
            blocks = Counter(i // BLOCK for i in extra)
            raise InvariantError(
                f"{where}: published rows differ from the serial application of {h.order}: "
                f"{len(lost)} lost (e.g. {lost[:5]}), {len(extra)} extra/doubled (e.g. {extra[:5]}, "
                f"per id block {dict(blocks)})")
        all_ids = [i for ids in state.values() for i in ids]
        h.digests[v] = ids_digest(all_ids)
        h.counts[v] = len(all_ids)
        h.rows_checked += len(all_ids)
        if v == latest:
            h.final_ids = sorted(all_ids)
    h.versions = latest
    want_final = Counter(i for ids in model.values() for i in ids)
    h.rows_lost = sum((want_final - Counter(h.final_ids)).values())
    return h


def check_reader(h: History, snapshots: Sequence[Mapping[str, Any]]) -> int:
    """Every reader snapshot equals the published state of the __manifest version it read
    (so it is SOME version's state: never a mix). Returns the rows checked."""
    rows = 0
    for s in snapshots:
        if h.digests.get(s["v"]) != s["digest"]:
            matches = h.state_versions(s["digest"])
            raise InvariantError(f"reader snapshot at __manifest v{s['v']} ({s['n']} rows, per id block "
                                 f"{s['blocks']}) is not the published state of v{s['v']} ({h.counts.get(s['v'])} "
                                 f"rows); equal to versions {matches}")
        rows += s["n"]
    return rows


if __name__ == "__main__":
    sys.exit(main())
