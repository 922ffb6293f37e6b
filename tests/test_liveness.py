"""Liveness: every maintenance operation finishes beside a writer that never stops.

A real writer process (tests/liveness_writer_proc.py) appends to the same partition tables as
fast as it can, one publish per batch, while one maintenance operation runs in this process:
create_index, the index maintenance of writes (a second writer), compaction, delete, merge,
update_schema, drop_partitions, rollback and cleanup, and on Spark ``lps.compact`` and
``lps.create_index``. Each must finish within its retry bound, and so must every batch of the
writer (its retries are bounded too: a starved write raises ``CommitConflictError``). Where the
*writer* is refused by design (a partition dropped, or the schema changed, under a write in
flight) the refusal must be the typed error, and the rows expected are exactly: the seed, minus
what the operation removed from what was published before it, plus every batch the writer was
told had published. The check reads with plain pylance, at each table's ``read_version``
(spec partitioning.md "Transaction / Commit Behavior": one atomic ``__manifest`` commit;
docs/design.md §8 hazards 2 and 3).

Run once each by default; ``--stress`` runs each 10 times. ``LANCEPART_LIVENESS_LOG=<file>``
appends one JSON line per run (operation, attempts, seconds, writer batches and retries).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.index import declared_indexes, index_state
from lancepart.storage.manifest import join_uri
from tests.test_indexes import SCHEMA, SPEC, rows

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SEED = 6000  # ids [0, 6000) over partitions a, b, c: 2 000 rows and 2 fragments per table
WRITER_START = 1_000_000
INSERTED = 50_000_000  # the ids a merge inserts


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("liveness") / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    ns.write(rows(4500))
    ns.write(rows(SEED - 4500, start=4500))
    return root


class Writer:
    """The writer process and its journal."""

    def __init__(self, root: str, stop: Path, start: int = WRITER_START) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent),
                                                             *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.stop = stop
        # stderr to a file: a pipe nobody reads while the writer logs would block it
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "liveness_writer_proc.py"), root, "--start",
                                      str(start), "--stop", str(stop)], stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, env=env)
        self.lines: list[dict] = []
        while True:  # up to its first publish
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the writer ended before its first publish: {self.stderr()}")
            if line.strip() == "started":
                break
            self.lines.append(json.loads(line))

    def finish(self, after_version: int, timeout: float = 240) -> None:
        """Let the writer publish at least twice more after ``after_version``, then stop it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(json.loads(line))
            if sum(1 for b in self.lines if b.get("version", 0) > after_version) >= 2:
                break
        self.stop.touch()
        # the rest through the same buffered reader: communicate() reads the pipe itself and loses
        # the lines readline() had buffered already
        self.proc.wait(timeout=timeout)
        self.lines += [json.loads(x) for x in self.proc.stdout.read().splitlines() if x.startswith("{")]
        assert self.proc.returncode == 0, self.stderr()

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()[-3000:]

    @property
    def published(self) -> list[dict]:
        return [b for b in self.lines if "version" in b]

    @property
    def refused(self) -> list[dict]:
        return [b for b in self.lines if "refused" in b]


def batch_ids(b: dict) -> np.ndarray:
    return np.arange(b["start"], b["start"] + b["rows"], dtype=np.int64)


def part_of(ids: np.ndarray) -> np.ndarray:
    return np.array(["a", "b", "c"])[ids % 3]


def published_rows(root: str, columns: list[str]) -> pa.Table:
    """Every row the latest ``__manifest`` version publishes, read with plain pylance."""
    m = lance.dataset(join_uri(root, "__manifest"))
    tables = []
    for r in m.to_table(filter="object_type = 'table'").to_pylist():
        if r["read_version"] is not None:
            ds = lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
            tables.append(ds.to_table(columns=[c for c in columns if c in ds.schema.names]))
    return pa.concat_tables(tables, promote_options="default").select(columns)


def tables_at(root: str, version: int | None = None) -> dict[str, lance.LanceDataset]:
    m = lance.dataset(join_uri(root, "__manifest"), version=version)
    return {r["object_id"]: lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
            for r in m.to_table(filter="object_type = 'table'").to_pylist() if r["read_version"] is not None}


def assert_read_versions_only_increase(root: str) -> None:
    """docs/design.md §8: across the ``__manifest`` versions that still exist (cleanup removes
    old ones), no table's ``read_version`` moves backwards. A table is its directory: a partition
    dropped and written again has the same object id and a new table."""
    m = lance.dataset(join_uri(root, "__manifest"))
    history: dict[tuple[str, str], list[int]] = {}
    for v in sorted(x["version"] for x in m.versions()):
        for r in m.checkout_version(v).to_table(columns=["object_id", "location", "read_version"]).to_pylist():
            if r["read_version"] is not None:
                history.setdefault((r["object_id"], r["location"]), []).append(r["read_version"])
    assert history
    backwards = {k: h for k, h in history.items() if h != sorted(h)}
    assert not backwards, backwards


def log_run(record: dict) -> None:
    path = os.environ.get("LANCEPART_LIVENESS_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


# -------------------------------------------------------------------------- the operations
# Each: (ns, spark) -> (CommitResult, the writer's refusals it may cause, expected ids(published batches, result))
def _seed_ids() -> np.ndarray:
    return np.arange(SEED, dtype=np.int64)


def _all(batches: list[dict]) -> np.ndarray:
    return np.concatenate([_seed_ids(), *[batch_ids(b) for b in batches]])


def _before(batches: list[dict], version: int) -> list[dict]:
    return [b for b in batches if b["version"] < version]


def _after(batches: list[dict], version: int) -> list[dict]:
    return [b for b in batches if b["version"] > version]


def op_create_index(ns, spark):
    r = ns.create_index("vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    return r, set(), lambda batches: _all(batches)


def op_spark_create_index(ns, spark):
    from lancepart import spark as lps

    r = lps.create_index(spark, ns.root, "vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    return r, set(), lambda batches: _all(batches)


def op_index_on_write(ns, spark):
    """A second writer beside the first, both keeping the declared index on every table they
    publish (the index maintenance of a write): it publishes once (``Writer``) and then at least
    twice more (``finish``) while the first one runs."""
    second = Writer(ns.root, Path(ns.root).parent / "stop2", start=WRITER_START * 3)
    second.finish(ns.refresh().manifest_version)
    assert not second.refused, second.refused
    r = type("R", (), {"manifest_version": second.published[-1]["version"],
                       "retries": max(b["retries"] for b in second.published)})()
    extra = second.published
    return r, set(), lambda batches: _all(batches + extra)


def op_compact(ns, spark):
    r = ns.compact(target_rows_per_fragment=100_000)
    return r, set(), lambda batches: _all(batches)


def op_spark_compact(ns, spark):
    from lancepart import spark as lps

    r = lps.compact(spark, ns.root, target_rows_per_fragment=100_000)
    return r, set(), lambda batches: _all(batches)


def op_delete(ns, spark):
    r = ns.delete("id % 7 = 0")

    def expected(batches):
        before = np.concatenate([_seed_ids(), *[batch_ids(b) for b in _before(batches, r.manifest_version)]])
        return np.concatenate([before[before % 7 != 0], *[batch_ids(b) for b in _after(batches, r.manifest_version)]])

    return r, set(), expected


def op_merge(ns, spark):
    src = pa.concat_tables([rows(600, start=0), rows(300, start=INSERTED)])
    src = src.set_column(src.schema.get_field_index("cat"), "cat", pa.array(["merged"] * src.num_rows))
    r = ns.merge(src, on=["id"])
    assert r.details["rows_updated"] == 600 and r.details["rows_inserted"] == 300, r.details
    return r, set(), lambda batches: np.concatenate([_all(batches), np.arange(INSERTED, INSERTED + 300)])


def op_update_schema(ns, spark):
    r = ns.update_schema(add=[pa.field("extra", pa.int32())])
    return r, {"SchemaChangedError"}, lambda batches: _all(batches)


def op_drop_partitions(ns, spark):
    r = ns.drop_partitions("part = 'c'")

    def expected(batches):
        before = np.concatenate([_seed_ids(), *[batch_ids(b) for b in _before(batches, r.manifest_version)]])
        return np.concatenate([before[part_of(before) != "c"],
                               *[batch_ids(b) for b in _after(batches, r.manifest_version)]])

    return r, {"CommitConflictError"}, expected


def op_rollback(ns, spark):
    r = ns.rollback(_template_version(ns))

    def expected(batches):
        return np.concatenate([_seed_ids(), *[batch_ids(b) for b in _after(batches, r.manifest_version)]])

    return r, {"CommitConflictError", "SchemaChangedError"}, expected


def _template_version(ns) -> int:
    return min(h.version for h in ns.history() if h.operation == "append" and h.rows_written == SEED - 4500)


def op_cleanup(ns, spark):
    stats = ns.cleanup(timedelta(seconds=1), allow_short_retention=True)
    r = type("R", (), {"manifest_version": ns.refresh().manifest_version, "retries": 0, "stats": stats})()
    return r, set(), lambda batches: _all(batches)


OPS = {"create_index": op_create_index, "index_on_write": op_index_on_write, "compact": op_compact,
       "delete": op_delete, "merge": op_merge, "update_schema": op_update_schema,
       "drop_partitions": op_drop_partitions, "rollback": op_rollback, "cleanup": op_cleanup}
SPARK_OPS = {"spark_compact": op_spark_compact, "spark_create_index": op_spark_create_index}


def run_once(name: str, op, template: str, dest: Path, spark=None) -> None:
    shutil.copytree(template, dest / "ns")
    ns = PartitionedNamespace.open(str(dest / "ns"))
    if name in ("index_on_write", "compact", "spark_compact"):  # a declared index the writes and compaction keep
        ns.create_index("vec", "IVF_PQ", min_rows=1000, num_partitions=4, num_sub_vectors=4)
    writer = Writer(ns.root, dest / "stop")
    time.sleep(0.3)  # the writer is mid-batch when the operation starts
    started = time.monotonic()
    result, may_refuse, expected = op(ns.refresh(), spark)
    seconds = time.monotonic() - started
    writer.finish(result.manifest_version)

    refused = {b["refused"] for b in writer.refused}
    assert refused <= may_refuse, writer.refused
    batches = writer.published
    assert _after(batches, result.manifest_version), "no writer publish landed after the operation"
    got = np.sort(published_rows(ns.root, ["id"]).column("id").to_numpy())
    want = np.sort(expected(batches))
    if not (len(got) == len(want) and np.array_equal(got, want)):
        ids, counts = np.unique(got, return_counts=True)
        extra = np.setdiff1d(got, want)
        missing = np.setdiff1d(want, got)
        raise AssertionError(f"{name}: {len(got)} rows published, {len(want)} expected; ids twice: "
                             f"{ids[counts > 1][:10].tolist()} ({int((counts > 1).sum())}); not expected: "
                             f"{extra[:10].tolist()} ({len(extra)}); missing: {missing[:10].tolist()} "
                             f"({len(missing)}); "
                             f"writer: {writer.lines}; result: {getattr(result, 'manifest_version', None)}")
    ns.refresh()
    assert_read_versions_only_increase(ns.root)
    report = ns.verify()
    assert report.ok, report.problems

    if name in ("create_index", "spark_create_index", "index_on_write", "compact", "spark_compact"):
        decl = declared_indexes(ns)[0]
        # every table the operation published carries the index over all its fragments, and so does
        # every table of every later publish (a write keeps it; a lost race may not hide behind a warning)
        for v in sorted({result.manifest_version, *[b["version"] for b in _after(batches, result.manifest_version)]}):
            for oid, ds in tables_at(ns.root, v).items():
                if ds.count_rows() >= decl.min_rows:
                    assert index_state(ds, decl) == "ok", (v, oid, index_state(ds, decl))
    if name == "merge":
        cats = published_rows(ns.root, ["id", "cat"]).to_pydict()
        merged = {i for i, c in zip(cats["id"], cats["cat"], strict=True) if c == "merged"}
        assert merged == set(range(600)) | set(range(INSERTED, INSERTED + 300))
    if name == "update_schema":
        extra = published_rows(ns.root, ["id", "extra"]).column("extra")
        assert extra.null_count == len(extra)

    log_run({"operation": name, "attempts": result.retries + 1, "seconds": round(seconds, 2),
             "writer_batches": len(batches), "writer_refused": len(writer.refused),
             "writer_max_retries": max(b["retries"] for b in batches),
             "writer_median_s": float(np.median([b["seconds"] for b in batches]))})


@pytest.mark.parametrize("name", list(OPS))
def test_operation_finishes_beside_a_busy_writer(name, template, tmp_path, stress):
    for run in range(10 if stress else 1):
        run_once(name, OPS[name], template, tmp_path / f"run{run}")


@pytest.mark.spark
@pytest.mark.parametrize("name", list(SPARK_OPS))
def test_spark_operation_finishes_beside_a_busy_writer(name, template, tmp_path, spark, stress):
    for run in range(10 if stress else 1):
        run_once(name, SPARK_OPS[name], template, tmp_path / f"run{run}", spark)
