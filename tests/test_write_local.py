"""In-process write path: spec/partitioning.md "Transaction" (multi-partition commit, conflict
resolution) and docs/design.md §8 (write protocol and its hazards), with real Lance tables
and real concurrent processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import CommitConflictError, PartitionedNamespace, SchemaMismatchError
from lancepart.errors import InvalidArgumentError
from lancepart.util.faults import InjectedFault
from lancepart.util.sample import demo_events
from tests.conftest import assert_read_versions_only_increase, expected_keys
from tests.procs import release, wait_until_reached

HERE = Path(__file__).resolve().parent
def published_counts(ns: PartitionedNamespace) -> Counter:
    ns.refresh()
    out = Counter()
    for p in ns.partitions():
        n = lance.dataset(os.path.join(ns.root, p.location), version=p.read_version).count_rows()
        out[(p.values["event_date"], p.values["user_bucket"])] += n
    return out


def ids_of(ns: PartitionedNamespace) -> list[int]:
    return sorted(ns.refresh().to_table(columns=["id"]).column("id").to_pylist())


def test_append_publishes_exactly_the_input(ns):
    data = demo_events(30_000, seed=3)
    r = ns.write(data)
    assert (r.rows_written, r.partitions_created, r.partitions_touched, r.skipped) == (30_000, 28, 28, False)
    assert published_counts(ns) == Counter(expected_keys(data))
    oids = [p.object_id for p in ns.partitions()]
    assert len(oids) == len(set(oids)) == 28  # exactly one table per partition tuple
    got = ns.to_table().sort_by("id")
    assert got.equals(data.cast(ns.schema))
    # every table read at its read_version holds only rows of its own partition
    for p in ns.partitions():
        t = lance.dataset(os.path.join(ns.root, p.location), version=p.read_version).to_table()
        assert set(t.column("event_date").to_pylist()) == {p.values["event_date"]}


def test_one_manifest_commit_per_write(ns):
    """docs/design.md §8: a write that creates partitions publishes them, born with their data,
    in its one __manifest commit (no reservation commit, no empty first version); each new table
    holds one fragment per partition however the input is chunked, in 3 files (data file,
    transaction, version manifest: no version hint)."""
    v0 = ns.manifest_version
    r1 = ns.write(demo_events(5_000, seed=1), chunk_rows=1_000)
    assert r1.manifest_version == v0 + 1 and r1.partitions_created == r1.partitions_touched > 0
    for p in ns.partitions():
        ds = lance.dataset(os.path.join(ns.root, p.location))
        assert ds.version == p.read_version == 1 and len(ds.get_fragments()) == 1
        files = [os.path.relpath(os.path.join(d, f), ds.uri) for d, _, names in os.walk(ds.uri) for f in names]
        assert len(files) == 3, files
    r2 = ns.write(demo_events(5_000, seed=2, start_id=5_000))
    assert r2.manifest_version == r1.manifest_version + 1 and r2.partitions_created == 0
    assert ids_of(ns) == list(range(10_000))


def test_batch_id_rerun_is_skipped(ns):
    data = demo_events(2_000)
    first = ns.write(data, batch_id="2025-12-10T00")
    again = ns.write(data, batch_id="2025-12-10T00")
    assert not first.skipped and again.skipped and again.rows_written == 0
    assert again.manifest_version == first.manifest_version
    other = ns.write(demo_events(10, start_id=2_000), batch_id="2025-12-10T01")
    assert not other.skipped
    assert ids_of(ns) == list(range(2_010))


def test_overwrite_replaces_only_touched_partitions(ns):
    old = demo_events(10_000, seed=5)
    ns.write(old)
    before = published_counts(ns)
    new = demo_events(50, seed=9, start_id=100_000, days=1)  # one day only
    r = ns.write(new, mode="overwrite")
    touched = set(expected_keys(new))
    assert r.partitions_touched == len(touched)
    after = published_counts(ns)
    new_counts = Counter(expected_keys(new))
    for key in before:
        assert after[key] == (new_counts[key] if key in touched else before[key])
    got = ns.to_table()
    old_keys = zip(old.column("id").to_pylist(), expected_keys(old), strict=True)
    expected_ids = sorted([i for i, k in old_keys if k not in touched]
                          + new.column("id").to_pylist())
    assert sorted(got.column("id").to_pylist()) == expected_ids


def test_int32_promotes_into_int64_column(ns):
    data = demo_events(100)
    data = data.set_column(0, "id", pc.cast(data.column("id"), pa.int32()))
    assert ns.write(data).rows_written == 100


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.append_column("extra", pa.array([1] * t.num_rows)), "['extra'] are not in the namespace schema"),
        (lambda t: t.drop_columns(["id"]), "required (non-nullable) column(s) ['id']"),
        (lambda t: t.set_column(4, "user_id", pc.cast(t.column("user_id"), pa.utf8())),
         "column 'user_id' is string in the input but int64"),
        (lambda t: t.set_column(0, "id", pc.cast(t.column("id"), pa.float64())), "column 'id' is double"),
        (lambda t: t.rename_columns(["id", "event_date", "event_ts", "nation", "user_id", "amount"]), "['nation']"),
    ],
)
def test_schema_mismatch_publishes_nothing(ns, mutate, message):
    ns.write(demo_events(100))
    version, dirs = ns.manifest_version, sorted(os.listdir(ns.root))
    with pytest.raises(SchemaMismatchError) as exc:
        ns.write(mutate(demo_events(100, start_id=100)))
    assert message in str(exc.value)
    assert ns.refresh().manifest_version == version and sorted(os.listdir(ns.root)) == dirs
    assert ids_of(ns) == list(range(100))


def test_nulls_in_non_nullable_column(ns):
    data = demo_events(10)
    data = data.set_column(0, pa.field("id", pa.int64()), pa.array([None, *list(range(1, 10))], pa.int64()))
    with pytest.raises(SchemaMismatchError, match="'id' is non-nullable but the input has 1 NULLs"):
        ns.write(data)


def test_bad_mode(ns):
    with pytest.raises(InvalidArgumentError, match="mode must be one of"):
        ns.write(demo_events(1), mode="upsert")


def test_empty_input_publishes_nothing_but_records_batch(ns):
    v = ns.manifest_version
    assert ns.write(demo_events(1).slice(0, 0)).manifest_version == v
    assert ns.write(demo_events(1).slice(0, 0), batch_id="empty").manifest_version == v + 1
    assert ns.write(demo_events(5), batch_id="empty").skipped


def test_fault_mid_write_publishes_nothing(ns, monkeypatch):
    ns.write(demo_events(1_000))
    monkeypatch.setenv("LANCEPART_FAULT", "after_table_commit:raise:3")
    with pytest.raises(InjectedFault):
        ns.write(demo_events(1_000, start_id=1_000, seed=8))
    monkeypatch.delenv("LANCEPART_FAULT")
    assert ids_of(ns) == list(range(1_000))


# --------------------------------------------------------------------------- real processes

def run_writer(root: str, *args: str, fault: str | None = None, wait: bool = True):
    env = dict(os.environ)
    env.pop("LANCEPART_FAULT", None)
    if fault:
        env["LANCEPART_FAULT"] = fault
    cmd = [sys.executable, str(HERE / "writer_proc.py"), root, *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish(proc) if wait else proc


def finish(proc: subprocess.Popen, timeout: float = 180):
    out, err = proc.communicate(timeout=timeout)
    result = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    return proc.returncode, result, err


def table_versions_beyond_published(ns: PartitionedNamespace) -> int:
    ns.refresh()
    return sum(lance.dataset(os.path.join(ns.root, p.location)).version > p.read_version for p in ns.partitions())


def test_dead_job_fragments_are_never_published(ns):
    """§8 hazard 2: a job killed after committing its partition tables but before the
    __manifest commit leaves versions beyond read_version; a later writer must not publish them."""
    ns.write(demo_events(1_000))
    code, _, _ = run_writer(ns.root, "--start", "5000", "--rows", "1000", fault="after_table_commits:exit")
    assert code == 77
    assert ids_of(ns) == list(range(1_000))  # old snapshot
    assert table_versions_beyond_published(ns) > 0  # the dead job's table versions exist
    code, _r, err = run_writer(ns.root, "--start", "9000", "--rows", "1000")
    assert code == 0, err
    assert ids_of(ns) == list(range(1_000)) + list(range(9_000, 10_000))  # no 5000..5999


def test_live_writer_restored_away_reapplies_its_fragments(ns):
    """§8 hazard 2b: writer A commits its tables, then stalls; writer B publishes the same
    partitions (its table commits drop A's unpublished fragments); A must notice and re-apply."""
    ns.write(demo_events(300))
    go = ns.root + ".go"
    a = run_writer(ns.root, "--start", "1000", "--rows", "2000", fault=f"before_manifest_commit:wait:{go}",
                   wait=False)
    wait_until_reached(go, a)  # A committed its tables and stands before its publish (no guess of how long)
    code_b, _rb, err_b = run_writer(ns.root, "--start", "5000", "--rows", "2000")
    assert code_b == 0, err_b
    Path(go).touch()
    code_a, ra, err_a = finish(a)
    assert code_a == 0, err_a
    assert ra["retries"] >= 1
    assert ids_of(ns) == list(range(300)) + list(range(1_000, 3_000)) + list(range(5_000, 7_000))


def test_conflict_after_retry_bound_publishes_nothing(ns):
    """§8 hazard 3: after the retry bound the writer fails with CommitConflictError and publishes nothing."""
    ns.write(demo_events(100))
    go = ns.root + ".go"
    a = run_writer(ns.root, "--start", "1000", "--rows", "500", "--max-retries", "0",
                   fault=f"before_manifest_commit:wait:{go}", wait=False)
    wait_until_reached(go, a)
    assert run_writer(ns.root, "--start", "5000", "--rows", "500")[0] == 0
    Path(go).touch()
    code, r, _ = finish(a)
    assert code == 3 and r["error"] == "CommitConflictError" and "nothing was published" in r["message"]
    assert ids_of(ns) == list(range(100)) + list(range(5_000, 5_500))


def test_concurrent_writers_lose_and_double_nothing(ns):
    """Four processes append overlapping partitions at the same instant, two of them creating
    the same new partitions: every row exactly once, one table per partition, and every
    read_version only ever increases across __manifest versions."""
    start_at = time.time() + 3
    procs = [run_writer(ns.root, "--start", str(i * 10_000), "--rows", "3000", "--start-at", str(start_at),
                        wait=False) for i in range(4)]
    results = [finish(p) for p in procs]
    assert all(code == 0 for code, _, _ in results), [err for _, _, err in results]
    assert sum(r["partitions_created"] for _, r, _ in results) == 12  # 3 days x 4 buckets
    expected = sorted(i * 10_000 + j for i in range(4) for j in range(3000))
    assert ids_of(ns) == expected
    oids = [p.object_id for p in ns.partitions()]
    assert len(oids) == len(set(oids)) == 12
    assert_read_versions_only_increase(ns)


def test_partition_published_first_by_another_writer_is_adopted(ns, monkeypatch):
    """docs/design.md §8 hazard 1 with tables born with their data: this write plans 12 new
    partitions, and while it pauses (before writing anything) another process creates and
    publishes the same 12. The write still creates its own tables, then finds the partitions in
    __manifest when it publishes: it moves its rows into the standing tables and removes its own
    directories. One table per partition, every row of both writers exactly once."""
    import threading

    data = demo_events(2_000, seed=7, start_id=50_000, days=3)
    go = ns.root + ".go"
    monkeypatch.setenv("LANCEPART_FAULT", f"after_reserve:wait:{go}")  # this process only: the rival's env drops it
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(result=ns.write(data)))
    t.start()
    wait_until_reached(go, t)  # the write has looked its partitions up (all new) and stands still
    code, rival, err = run_writer(ns.root, "--start", "0", "--rows", "1000", "--days", "3")
    release(go)
    t.join()
    assert code == 0, err
    r = out["result"]
    assert rival["partitions_created"] == 12  # nothing of ours was in __manifest while we paused
    assert r.partitions_created == 0 and r.partitions_touched == 12 and r.rows_written == 2_000
    ns.refresh()
    oids = [p.object_id for p in ns.partitions()]
    assert len(oids) == len(set(oids)) == 12
    assert sorted(d for d in os.listdir(ns.root) if d != "__manifest") == sorted(p.location for p in ns.partitions())
    assert ids_of(ns) == list(range(1_000)) + list(range(50_000, 52_000))
    assert_read_versions_only_increase(ns)


def test_same_batch_id_in_two_processes_publishes_once(ns):
    start_at = time.time() + 3
    procs = [run_writer(ns.root, "--start", "0", "--rows", "2000", "--batch-id", "nightly-42",
                        "--start-at", str(start_at), wait=False) for _ in range(2)]
    results = [finish(p) for p in procs]
    assert all(code == 0 for code, _, _ in results), [err for _, _, err in results]
    assert sorted(r["skipped"] for _, r, _ in results) == [False, True]
    assert ids_of(ns) == list(range(2_000))


def test_conflict_error_type_is_exported():
    assert issubclass(CommitConflictError, Exception)


def test_local_write_runs_expectations(ns):
    from lancepart import ExpectationFailedError

    with pytest.raises(ExpectationFailedError, match=r"unique\(id\)"):
        ns.write(pa.concat_tables([demo_events(10), demo_events(10)]),
                 expectations=[{"type": "unique", "column": "id"}])
    assert ns.refresh().partitions() == []
    assert ns.write(demo_events(10), expectations=[{"type": "unique", "column": "id"}]).rows_written == 10


def test_record_batch_reader_in_chunks_publishes_once(ns):
    """A stream is consumed in chunks (bounded memory); the partitions it creates are born with
    every chunk's rows, and the whole input is published by one __manifest commit."""
    data = demo_events(20_000, seed=13)
    reader = pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=1_500))
    v0 = ns.manifest_version
    r = ns.write(reader, chunk_rows=4_000, batch_id="stream-1")
    assert r.rows_written == 20_000 and r.partitions_created == 28
    assert r.manifest_version == v0 + 1  # data became visible in exactly one commit
    assert ids_of(ns) == list(range(20_000))
    for p in ns.partitions():  # several chunks -> several fragments per table
        assert len(lance.dataset(os.path.join(ns.root, p.location), version=p.read_version).get_fragments()) >= 2
    with pytest.raises(InvalidArgumentError, match="got list"):
        ns.write([1, 2, 3])


def test_write_reports_phase_timings(ns):
    """Issue 12 item 5: ``CommitResult.details`` of ``ns.write`` carries the time of each phase
    (docs/guide.md promises phase timings): present, numbers, never negative. No thresholds."""
    data = demo_events(6_000, seed=5)
    r = ns.write(data.to_reader(max_chunksize=1_000), chunk_rows=3_000)
    d = r.details
    for key in ("read_s", "plan_s", "reserve_s", "write_s", "commit_tables_s", "manifest_commit_s", "publish_s"):
        assert isinstance(d[key], float) and d[key] >= 0, (key, d)
    assert "expectations_s" not in d
    assert d["chunks"] == 2 and d["fragments"] >= r.partitions_touched > 0
    gated = ns.write(demo_events(100, seed=6, start_id=10_000), expectations=[{"type": "not_null", "column": "id"}])
    assert gated.details["expectations_s"] >= 0 and gated.details["chunks"] == 1
    assert gated.details["commit_tables_s"] >= 0 and gated.details["publish_s"] >= 0


def test_group_rows_give_each_partition_its_rows_in_input_order():
    """Issue 12: a write takes each partition's rows as slices of one reordered copy of its
    input (not one ``take`` per partition over every chunk). On input made of many small
    batches, as Spark hands a task, with NULL and NaN partition values, every partition gets
    exactly its rows, in input order."""
    from lancepart.write.plan import group_rows

    n = 5_000
    key = pa.array([None if i % 97 == 0 else (float("nan") if i % 89 == 0 else float(i % 37)) for i in range(n)])
    table = pa.Table.from_batches(pa.table({"k": key, "i": pa.array(range(n))}).to_batches(max_chunksize=64))
    assert table.column("i").num_chunks > 50
    groups = group_rows(table.select(["k"]), spec_id=1)
    parts = groups.rows(table)
    assert len(parts) == len(groups.indices) == 37 + 2
    for idx, part in zip(groups.indices, parts, strict=True):
        assert part.schema == table.schema and part.num_rows == len(idx)
        assert part.column("i").to_pylist() == table.column("i").take(pa.array(idx)).to_pylist()  # the row ids
        assert part.column("i").to_pylist() == sorted(part.column("i").to_pylist())
    assert sorted(i for p in parts for i in p.column("i").to_pylist()) == list(range(n))
    assert group_rows(table.select(["k"]).slice(0, 0), spec_id=1).rows(table.slice(0, 0)) == []
