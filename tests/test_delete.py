"""``ns.delete`` / ``lancepart delete`` (issue 14 item 2, conflict rules of item 6): the rows a
filter matches get Lance deletions on each partition table's *published* version, then ONE
``__manifest`` commit moves every changed ``read_version`` (spec "Transaction / Commit
Behavior"). A concurrent publish to the same partitions makes the delete re-apply on the new
published version: never a lost update, never a deleted row resurrected. Real Lance tables,
real processes; the oracle reads what is published with plain pylance."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import InvalidFilterError
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from tests.conftest import assert_read_versions_only_increase, copy_ns, create_events_ns, manifest_version
from tests.procs import rival_publishes_first, run_cli, wait_for_unpublished_versions, write_rows

HERE = Path(__file__).resolve().parent
DAY1 = "event_date = DATE '2025-12-01'"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("delete") / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(600, seed=1, days=3))
    ns.write(demo_events(300, seed=2, start_id=1_000, days=3))  # two fragments per partition table
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def published_rows(root: str) -> pa.Table:
    """Every row published in the latest __manifest: each table read with plain pylance at its
    read_version."""
    rows = lance.dataset(join_uri(root, "__manifest")).to_table().to_pylist()
    parts = [lance.dataset(join_uri(root, r["location"]), version=r["read_version"]).to_table()
             for r in rows if r["object_type"] == "table" and r["read_version"] is not None]
    return pa.concat_tables(parts).sort_by("id")


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def test_delete_across_partitions_in_one_publish(ns):
    """A filter on a non-partition column touches every partition holding a match; one
    __manifest version; the published rows are exactly the others."""
    before = published_rows(ns.root)
    v0 = manifest_version(ns.root)
    f = "amount > 50 AND country = 'US'"
    expected = before.filter(pc.invert(pc.fill_null(pc.and_(pc.greater(before["amount"], 50),
                                                            pc.equal(before["country"], "US")), False)))
    assert expected.num_rows < before.num_rows
    result = ns.delete(f)
    assert manifest_version(ns.root) == v0 + 1 == result.manifest_version
    assert result.rows_written == 0 and result.details["rows_deleted"] == before.num_rows - expected.num_rows
    touched = {p.object_id for p in ns.partitions()
               if any(t["object_id"] == p.object_id for t in result.details["tables"])}
    assert result.partitions_touched == len(touched) > 1
    assert ids(published_rows(ns.root)) == ids(expected)
    assert ids(ns.to_table()) == ids(expected)
    assert ns.to_table(f).num_rows == 0
    assert_read_versions_only_increase(ns)
    assert ns.verify().ok


def test_the_filter_is_evaluated_once_for_many_tables_and_rows_go_by_offset(ns, monkeypatch):
    """One DataFusion evaluation of the filter for all the tables (each table's filter columns
    scanned, then evaluated together), not one per table; the matching rows get deletion files
    by their offsets, no predicate scanned again by Lance. The rows left are exactly the others,
    in tables holding two fragments each."""
    from lancepart.read import snapshot

    evaluations, by_predicate = [], []
    real_apply = snapshot.apply_filter
    monkeypatch.setattr(snapshot, "apply_filter", lambda t, f: evaluations.append(t.num_rows) or real_apply(t, f))
    real_delete = lance.fragment.LanceFragment.delete
    monkeypatch.setattr(lance.fragment.LanceFragment, "delete",
                        lambda self, p: by_predicate.append(p) or real_delete(self, p))
    before = published_rows(ns.root)
    result = ns.delete("user_id % 3 = 1")
    tables = len(result.details["tables"])
    assert tables == len(ns.partitions()) > 5
    assert len(evaluations) == 1 and evaluations[0] == before.num_rows
    assert by_predicate == []
    kept = before.filter(pc.not_equal(pc.remainder(before["user_id"], 3), 1))
    assert ids(published_rows(ns.root)) == ids(kept)
    assert result.details["rows_deleted"] == before.num_rows - kept.num_rows
    assert ns.verify().ok


def test_the_tables_are_scanned_on_one_pool_a_window_ahead(ns, monkeypatch):
    """The filter columns of many tables are scanned on one thread pool, at most a window of
    scans ahead of the evaluation (lancepart.util.parallel.stream_in_order), not a pool per group of
    32 tables that waits for its slowest scan (docs/benchmarks.md, "Delete": 0.53 -> 0.41 s for
    the scans of 1 000 tables). The window is a bound (memory holds about that many scanned
    tables), results come in order, and the first error stops the calls not started yet."""
    import threading

    from lancepart.util import parallel
    from lancepart.write import deletions

    pools = []
    real_pool = parallel.ThreadPoolExecutor

    class Counting(real_pool):
        def __init__(self, *a, **kw):
            pools.append(threading.current_thread().name)
            super().__init__(*a, **kw)

    monkeypatch.setattr(parallel, "ThreadPoolExecutor", Counting)
    monkeypatch.setattr(deletions, "_SCANS_AHEAD", 4)
    result = ns.delete("user_id % 3 = 1")
    tables = len(result.details["tables"])
    assert tables > 2 * 4
    assert len(pools) == 2  # one for the scans of every table, one for the table commits

    started, consumed = [], []
    lock = threading.Lock()

    def slow(i):
        with lock:
            started.append(i)
        time.sleep(0.02 * (i % 3))
        if i == 13:
            raise ValueError("table 13 cannot be read")
        return i * 10

    with pytest.raises(ValueError, match="table 13"):
        for out in parallel.stream_in_order(lambda i: (slow(i),), range(40), window=5, buffered=1):
            consumed.append(out)
            assert max(started) < len(consumed) + 5  # never more than the window ahead
    assert consumed == [i * 10 for i in range(13)]
    assert max(started) < 13 + 5 and len(started) < 40


def test_a_partition_filter_and_a_whole_table_delete(ns):
    """Every row of the day-1 tables matches: their versions hold no row; other days keep theirs."""
    before = published_rows(ns.root)
    result = ns.delete(DAY1)
    assert result.partitions_touched == len(ns.partitions(DAY1)) == 4
    assert ns.to_table(DAY1).num_rows == 0
    left = published_rows(ns.root)
    assert left.num_rows == before.num_rows - result.details["rows_deleted"] > 0
    assert ns.verify().ok


def test_no_matching_row_publishes_nothing(ns):
    v0 = manifest_version(ns.root)
    tables = {p.object_id: lance.dataset(join_uri(ns.root, p.location)).version for p in ns.partitions()}
    for f in ("id < 0", "event_date = DATE '2030-01-01'"):
        result = ns.delete(f)
        assert result.partitions_touched == 0 and result.details["rows_deleted"] == 0
    assert manifest_version(ns.root) == v0
    assert tables == {p.object_id: lance.dataset(join_uri(ns.root, p.location)).version for p in ns.partitions()}


def test_a_bad_filter_is_a_typed_error_and_nothing_is_published(ns):
    v0 = manifest_version(ns.root)
    for f in ("no_such_column = 1", "id = = 3", ""):
        with pytest.raises(InvalidFilterError) as e:
            ns.delete(f)
        if f.startswith("no_such"):
            assert "no_such_column" in str(e.value)
    assert manifest_version(ns.root) == v0


def test_versions_beyond_read_version_do_not_leak_into_the_delete(ns):
    """An unpublished append (a table commit whose __manifest commit never came) stays out of the
    version the delete publishes (docs/design.md §8 hazard 2)."""
    p = ns.partitions(DAY1)[0]
    uri = join_uri(ns.root, p.location)
    lance.write_dataset(demo_events(10, seed=7, start_id=500_000, days=1), uri, mode="append")
    ns.delete("id % 2 = 0")
    ids_now = ids(published_rows(ns.root))
    assert not [i for i in ids_now if i >= 500_000]
    assert all(i % 2 for i in ids_now)


def _run_delete(root: str, filter: str, fault: str | None = None, max_retries: int = 20) -> subprocess.Popen:
    return run_cli("delete", root, "--filter", filter, "--max-retries", str(max_retries), fault=fault)


def _write(root: str, start: int) -> None:
    write_rows(root, start)


def _wait_for_unpublished_versions(ns: PartitionedNamespace, proc: subprocess.Popen) -> None:
    wait_for_unpublished_versions(ns, proc, DAY1)


def test_an_append_published_first_is_seen_by_the_delete(ns):
    """Item 6: the delete has its table versions committed and waits before its __manifest
    commit; a real writer process appends to the same partitions and publishes first. The
    delete's commit conflicts, it re-applies on the new published versions: the appended rows
    that match are deleted too, the others are present, none of the old deleted rows is back."""
    before = published_rows(ns.root)
    go = ns.root + ".go"
    proc = _run_delete(ns.root, "id % 2 = 0", fault=f"before_manifest_commit:wait:{go}")
    _wait_for_unpublished_versions(ns, proc)
    _write(ns.root, 70_000)  # day 1: same partitions; published while the delete waits
    Path(go).touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["retries"] >= 1, "the delete did not have to rebase: the test did not exercise the conflict"
    appended = list(range(70_000, 70_300))
    expected = [i for i in ids(before) + appended if i % 2]
    assert ids(published_rows(ns.root)) == expected
    assert result["details"]["rows_deleted"] == len(ids(before)) + 300 - len(expected)
    ns.refresh()
    assert_read_versions_only_increase(ns)
    # an append published after the delete keeps every row, the deleted ones stay deleted
    _write(ns.root, 80_000)
    assert ids(published_rows(ns.root)) == sorted(expected + list(range(80_000, 80_300)))
    assert ns.refresh().verify().ok


def test_a_delete_out_of_retries_publishes_nothing(ns):
    """max_retries=0 and a concurrent publish: CommitConflictError (exit 75), only the writer's
    rows changed what is published."""
    before = published_rows(ns.root)
    go = ns.root + ".go"
    proc = _run_delete(ns.root, "id % 2 = 0", fault=f"before_manifest_commit:wait:{go}", max_retries=0)
    _wait_for_unpublished_versions(ns, proc)
    _write(ns.root, 70_000)
    Path(go).touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, (out, err)
    assert json.loads(out)["error"] == "CommitConflictError"
    assert ids(published_rows(ns.root)) == sorted(ids(before) + list(range(70_000, 70_300)))


def test_kill_before_the_manifest_commit_changes_nothing_visible(ns):
    """kill -9 (os._exit) of the delete after its table commits, before __manifest: nothing
    published changed; a rerun deletes exactly the matching rows."""
    before = published_rows(ns.root)
    v0 = manifest_version(ns.root)
    proc = _run_delete(ns.root, "id % 3 = 0", fault="before_manifest_commit:exit")
    proc.communicate(timeout=120)
    assert proc.returncode == 77
    assert manifest_version(ns.root) == v0
    assert published_rows(ns.root).equals(before)
    assert any(lance.dataset(join_uri(ns.root, p.location)).version > p.read_version
               for p in ns.refresh().partitions()), "the process died before committing any table version"
    result = ns.delete("id % 3 = 0")
    assert ids(published_rows(ns.root)) == [i for i in ids(before) if i % 3]
    assert result.manifest_version == v0 + 1
    assert ns.verify().ok


def test_cli_delete(ns, capsys):
    before = published_rows(ns.root)
    user = before["user_id"][0].as_py()
    assert main(["delete", ns.root, "--filter", f"user_id = {user}", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    n = before.filter(pc.equal(before["user_id"], user)).num_rows
    assert n > 0 and out["details"]["rows_deleted"] == n and out["rows_written"] == 0
    assert published_rows(ns.root).num_rows == before.num_rows - n
    assert main(["delete", ns.root, "--filter", "no_such_column = 1", "--json", "-q"]) == 2
    assert "no_such_column" in json.loads(capsys.readouterr().out)["message"]
    assert main(["delete", ns.root, "-q"]) == 64  # --filter is required


def test_compact_after_delete_keeps_the_rows_deleted(ns):
    """docs/delete.md: compact materialises the deletions; the deleted rows stay deleted."""
    before = published_rows(ns.root)
    ns.delete("id % 2 = 0")
    ns.compact(None)
    expected = [i for i in ids(before) if i % 2]
    assert ids(published_rows(ns.root)) == expected
    for p in ns.partitions():
        ds = lance.dataset(join_uri(ns.root, p.location), version=p.read_version)
        assert all(f.metadata.deletion_file is None for f in ds.get_fragments())


def test_address_predicate_selects_exactly_those_rows(tmp_path):
    """Runs of consecutive row addresses become BETWEEN ranges, the rest an IN list: a real
    Lance fragment deletes exactly the chosen rows."""
    import numpy as np

    from lancepart.write.deletions import address_predicate

    uri = str(tmp_path / "t")
    ds = lance.write_dataset(pa.table({"x": np.arange(1000)}), uri)
    pick = np.sort(np.concatenate([np.arange(10, 20), [25, 27], np.arange(500, 900), [999]])).astype(np.uint64)
    pred = address_predicate(pick)
    assert pred.count("BETWEEN") == 2
    md = ds.get_fragment(0).delete(pred)
    new = lance.LanceDataset.commit(uri, lance.LanceOperation.Update(updated_fragments=[md]), read_version=ds.version)
    assert sorted(new.to_table()["x"].to_pylist()) == sorted(set(range(1000)) - set(pick.tolist()))


def test_two_concurrent_deletes_both_take_effect(ns):
    """Item 6: two delete processes on the same partitions race (no pause); whichever publishes
    second re-applies on the first's versions, so both deletions hold (no lost update)."""
    before = published_rows(ns.root)
    a, b = _run_delete(ns.root, "id % 2 = 0"), _run_delete(ns.root, "id % 3 = 0")
    for proc in (a, b):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert ids(published_rows(ns.root)) == [i for i in ids(before) if i % 2 and i % 3]
    assert_read_versions_only_increase(ns.refresh())
    assert ns.verify().ok


def test_spark_delete_matches_ns_delete_and_rebases_through_spark(template, tmp_path, spark, monkeypatch):
    """lps.delete (table deletes in Spark tasks, publish on the driver) == ns.delete; and with an
    append published while it waits before its __manifest commit, it re-applies (a second Spark
    job) on the new published versions (issue 14 items 2 and 6)."""
    import shutil

    from lancepart import spark as lps

    shutil.copytree(template, tmp_path / "a")
    shutil.copytree(template, tmp_path / "b")
    a, b = PartitionedNamespace.open(str(tmp_path / "a")), PartitionedNamespace.open(str(tmp_path / "b"))
    f = "amount > 50 OR user_id = 3"
    ra, rb = a.delete(f), lps.delete(spark, b.root, f)
    assert (rb.details["rows_deleted"], rb.partitions_touched, rb.manifest_version) == \
        (ra.details["rows_deleted"], ra.partitions_touched, ra.manifest_version)
    assert published_rows(b.root).equals(published_rows(a.root))

    before = published_rows(b.root)
    go = str(tmp_path / "go")
    monkeypatch.setenv("LANCEPART_FAULT", f"before_manifest_commit:wait:{go}")
    with rival_publishes_first(go, lambda: _write(b.root, 70_000)):
        result = lps.delete(spark, b.root, "id % 2 = 0")
    assert result.retries >= 1 and result.details["spark_jobs"] >= 2
    assert ids(published_rows(b.root)) == [i for i in ids(before) + list(range(70_000, 70_300)) if i % 2]
    assert_read_versions_only_increase(b.refresh())


def test_partitions_the_filter_covers_entirely_go_without_being_read(ns):
    """Issue 14 item 2: a partition the strict projection proves entirely matched is emptied
    without reading it: with its data files deleted from disk (a read would fail), the delete
    still removes it; a filter that needs reading does read (and fails on the missing file)."""
    before = published_rows(ns.root)
    day1 = ns.partitions(DAY1)
    for p in day1:
        for f in lance.dataset(join_uri(ns.root, p.location), version=p.read_version).get_fragments():
            for df in f.metadata.files:
                os.remove(join_uri(ns.root, p.location) + "/data/" + df.path)
    v0 = manifest_version(ns.root)
    with pytest.raises(Exception):  # noqa: B017 - whichever typed error a missing data file becomes
        ns.delete(f"{DAY1} AND amount > 50")
    assert manifest_version(ns.root) == v0
    result = ns.delete(DAY1)
    assert result.partitions_touched == 4 and manifest_version(ns.root) == v0 + 1
    n1 = sum(1 for d in before["event_date"].to_pylist() if str(d) == "2025-12-01")
    assert result.details["rows_deleted"] == n1
    for p in ns.partitions(DAY1):
        assert lance.dataset(join_uri(ns.root, p.location), version=p.read_version).count_rows() == 0
    assert published_rows(ns.root).num_rows == before.num_rows - n1


def test_a_pinned_partition_that_may_match_refuses_the_delete(ns):
    """A table pinned by read_tag is read at the tag; a delete on main would not change what
    readers see there, so a delete that may touch it fails with nothing published (rather than
    reporting success while matching rows stay visible). A filter that prunes it away works."""
    from lancepart.errors import PartitionPinnedError

    pinned = ns.partitions(DAY1)[0]
    lance.dataset(join_uri(ns.root, pinned.location)).tags.create("keep", pinned.read_version)

    def pin(snap):
        rows = snap.rows
        i = rows.schema.get_field_index("read_tag")
        hit = pc.equal(rows.column("object_id"), pinned.object_id)
        return rows.set_column(i, rows.schema.field(i), pc.if_else(hit, pa.scalar("keep"), rows.column(i))), None

    ns.manifest.update(pin)
    v0 = manifest_version(ns.root)
    with pytest.raises(PartitionPinnedError) as e:
        ns.delete("id % 2 = 0")
    assert pinned.object_id in str(e.value) and manifest_version(ns.root) == v0
    assert ns.delete("event_date = DATE '2025-12-02'").partitions_touched == 4


def test_a_compaction_planned_before_the_delete_does_not_resurrect_rows(ns):
    """Item 6: a compaction rewrote the published fragments (deleted rows still in them), then a
    delete published, then the compaction publishes: its rewrite of the old fragments must not
    come back (the rows the delete removed stay removed)."""
    from lancepart.maintenance.compact import finish_compaction, plan_compaction, rewrite_or_failure, split_rewrites

    before = published_rows(ns.root)
    plan = plan_compaction(ns, None, 1_048_576, min_small_fragments=2, materialize_deletions_threshold=0.1)
    assert plan.tables
    rewrites, failures = split_rewrites([rewrite_or_failure(ns.root, tp) for tp in plan.tables])
    ns.delete("id % 2 = 0")
    finish_compaction(ns.manifest, plan, rewrites, started=time.monotonic(), phases={}, failures=failures)
    assert ids(published_rows(ns.root)) == [i for i in ids(before) if i % 2]
    assert_read_versions_only_increase(ns.refresh())


def test_a_column_named_like_the_owner_column_is_still_the_users(tmp_path):
    """Evaluating many tables together tags each scanned row with its table in a column of its
    own; a namespace column of that name is left to the filter that names it."""
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("__lp_table", pa.int64())])
    spec = {"id": 1, "fields": [{"field_id": "k", "source_ids": [0], "transform": {"type": "identity"},
                                 "result_type": {"type": "int64"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns.write(pa.table({"k": [1, 1, 2, 2, 3], "__lp_table": [7, 0, 7, 0, 7]}, schema=schema))
    result = ns.delete("__lp_table = 7")
    assert result.details["rows_deleted"] == 3
    assert sorted(ns.to_table().column("k").to_pylist()) == [1, 2]
