"""Compaction of partition tables (docs/guide.md "Compaction", ``ns.compact``): spec/partitioning.md "Transaction"
(every table read and rewritten at its published ``read_version`` / ``read_tag``; ONE atomic
``__manifest`` commit; rebase-or-fail on conflict) and docs/design.md §8 (versions beyond
``read_version`` are never published by someone else), with real Lance tables, real processes
and real Spark."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import lance
import pyarrow as pa
import pytest
import yaml

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError
from lancepart.maintenance.compact import finish_compaction, plan_compaction, rewrite_table
from lancepart.util.sample import demo_events
from tests.conftest import assert_read_versions_only_increase, create_events_ns, expected_keys
from tests.procs import release, wait_until_reached

HERE = Path(__file__).resolve().parent
APPENDS, ROWS, DAYS = 20, 200, 3  # 20 small appends into 3 days x 4 buckets = 12 partitions


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[str, pa.Table]:
    """A namespace built by 20 small appends (20 fragments in each of 12 partition tables) and its rows."""
    root = str(tmp_path_factory.mktemp("compact") / "ns")
    ns = create_events_ns(root)
    for i in range(APPENDS):
        ns.write(demo_events(ROWS, seed=i, start_id=i * ROWS, days=DAYS))
    return root, ns.to_table().sort_by("id")


@pytest.fixture
def small(template, tmp_path) -> tuple[PartitionedNamespace, pa.Table]:
    """A private copy of the template namespace (locations are relative, so a copy is a namespace)."""
    src, rows = template
    shutil.copytree(src, tmp_path / "ns")
    return PartitionedNamespace.open(str(tmp_path / "ns")), rows


def table_uri(ns: PartitionedNamespace, location: str) -> str:
    return os.path.join(ns.root, location)


def published_fragments(ns: PartitionedNamespace) -> dict[str, list]:
    """object_id -> fragment metadata of the table at its published version (read_tag if pinned)."""
    ns.refresh()
    return {p.object_id: [f.metadata for f in lance.dataset(table_uri(ns, p.location),
                                                           version=p.read_tag or p.read_version).get_fragments()]
            for p in ns.partitions()}


def data_files(frags) -> set[str]:
    return {df.path for f in frags for df in f.files}


def latest_versions(ns: PartitionedNamespace) -> dict[str, int]:
    return {p.object_id: lance.dataset(table_uri(ns, p.location)).version for p in ns.refresh().partitions()}


def files_on_disk(ns: PartitionedNamespace) -> dict[str, set[str]]:
    return {p.object_id: set(os.listdir(os.path.join(table_uri(ns, p.location), "data"))) for p in ns.partitions()}


def sorted_rows(ns: PartitionedNamespace) -> pa.Table:
    return ns.refresh().to_table().sort_by("id")


def set_manifest(ns: PartitionedNamespace, column: str, values: dict[str, object], type_: pa.DataType) -> None:
    """Publish ``column`` = value for some tables, as another engine would (one __manifest commit)."""
    def mutate(snap):
        col = snap.rows.column(column).to_pylist()
        for oid, v in values.items():
            col[snap.row_index()[oid]] = v
        j = snap.rows.schema.get_field_index(column)
        return snap.rows.set_column(j, snap.rows.schema.field(j), pa.array(col, type_)), None

    ns.manifest.update(mutate)
    ns.refresh()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def spawn(script: str, *args: str, fault: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("LANCEPART_FAULT", None)
    if fault:
        env["LANCEPART_FAULT"] = fault
    return subprocess.Popen([sys.executable, str(HERE / script), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 120):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, json.loads(out.strip().splitlines()[-1]) if out.strip() else None, err


# --------------------------------------------------------------------------- single process
def test_small_appends_compact_with_identical_data(small):
    """Every table is rewritten at its published version into one fragment and published in ONE
    __manifest commit (spec "Transaction / Commit Behavior"); the snapshot's rows are unchanged."""
    ns, expected = small
    before = {p.object_id: p.read_version for p in ns.partitions()}
    assert [len(f) for f in published_fragments(ns).values()] == [APPENDS] * 12
    v0 = ns.manifest_version
    r = ns.compact()
    d = r.details
    assert (r.partitions_touched, r.rows_written, r.retries) == (12, APPENDS * ROWS, 0)
    assert (d["fragments_before"], d["fragments_after"], d["tables_planned"]) == (12 * APPENDS, 12, 12)
    assert 0 < d["bytes_after"] < d["bytes_before"]
    assert d["published_version"] == v0 + 1  # one publishing commit, then the __manifest index update
    assert d["manifest"]["unindexed_rows_after"] == 0 and r.manifest_version == ns.manifest_version
    frags = published_fragments(ns)
    assert all(len(f) <= 2 for f in frags.values()) and sum(map(len, frags.values())) == d["fragments_after"]
    assert sum(df.file_size_bytes for fs in frags.values() for f in fs for df in f.files) == d["bytes_after"]
    assert sorted_rows(ns).equals(expected)
    assert all(p.read_version > before[p.object_id] for p in ns.partitions())
    assert_read_versions_only_increase(ns)


def test_second_compaction_is_a_noop(small):
    """A namespace with nothing to compact gets no commit at all: no __manifest version, no table version."""
    ns, expected = small
    ns.compact()
    v, tables = ns.manifest_version, latest_versions(ns)
    r = ns.compact()
    assert (r.partitions_touched, r.rows_written, r.manifest_version) == (0, 0, v)
    assert r.details["tables_already_compact"] == 12 and r.details["published_version"] is None
    assert r.details["manifest"]["commits"] == 0
    assert ns.refresh().manifest_version == v and latest_versions(ns) == tables
    assert sorted_rows(ns).equals(expected)


def test_deleted_rows_are_materialised(tmp_path):
    """Deleted rows of the published version (deletion files) are dropped from the rewritten
    fragments; the published snapshot reads the same rows (spec "Transaction / Read Behavior")."""
    ns = create_events_ns(str(tmp_path / "ns"))
    ns.write(demo_events(2_000, days=1))  # 4 tables, one fragment each
    deleted = {}
    for p in ns.partitions():
        ds = lance.dataset(table_uri(ns, p.location))
        ds.delete("id % 3 = 0")
        deleted[p.object_id] = ds.version
    set_manifest(ns, "read_version", deleted, pa.uint64())  # the deletes are published
    expected = sorted_rows(ns)
    assert all(f[0].deletion_file is not None for f in published_fragments(ns).values())
    r = ns.compact()
    assert r.partitions_touched == 4 and r.rows_written == expected.num_rows
    assert r.details["deleted_rows_materialized"] == 2_000 - expected.num_rows > 0
    frags = published_fragments(ns)
    assert all(f.deletion_file is None for fs in frags.values() for f in fs)
    assert sum(f.physical_rows for fs in frags.values() for f in fs) == expected.num_rows
    assert sorted_rows(ns).equals(expected)


def test_pinned_tables_are_skipped(small):
    """A table pinned by read_tag is read at the tag (spec "Transaction / Read Behavior"); compaction
    leaves it untouched and says so."""
    ns, expected = small
    pinned = ns.partitions()[0]
    lance.dataset(table_uri(ns, pinned.location)).tags.create("keep", pinned.read_version)
    set_manifest(ns, "read_tag", {pinned.object_id: "keep"}, pa.utf8())
    latest = lance.dataset(table_uri(ns, pinned.location)).version
    r = ns.compact()
    assert r.partitions_touched == 11
    assert r.details["tables_skipped"] == [{"object_id": pinned.object_id, "reason": "pinned to read_tag 'keep'"}]
    assert lance.dataset(table_uri(ns, pinned.location)).version == latest  # not even an unpublished version
    assert len(published_fragments(ns)[pinned.object_id]) == APPENDS
    assert sorted_rows(ns).equals(expected)


def test_filter_selects_only_some_partitions(small):
    """The filter is pruned through __manifest (spec "Partition Pruning"): only the tables of that day."""
    ns, expected = small
    day = ns.partitions()[0].values["event_date"]
    r = ns.compact(f"event_date = DATE '{day.isoformat()}'")
    assert r.partitions_touched == 4 and r.details["tables_examined"] == 4
    frags = published_fragments(ns)
    assert sorted(len(frags[p.object_id]) for p in ns.partitions() if p.values["event_date"] == day) == [1] * 4
    assert sorted(len(frags[p.object_id]) for p in ns.partitions() if p.values["event_date"] != day) == [APPENDS] * 8
    assert sorted_rows(ns).equals(expected)


def test_rebase_over_append_and_drop_over_overwrite(small):
    """Between the rewrite and the publish a writer appends to every table and another overwrites
    one day: appended tables are re-committed on the new published version ((published − rewritten)
    ∪ ours), overwritten ones are dropped from the compaction (spec "Transaction": rebase or fail)."""
    ns, old = small
    started = time.monotonic()
    plan = plan_compaction(ns)
    rewrites = [rewrite_table(ns.root, tp) for tp in plan.tables]
    append = demo_events(300, seed=77, start_id=100_000, days=DAYS)
    over = demo_events(40, seed=78, start_id=200_000, days=1)
    ns.write(append)
    ns.write(over, mode="overwrite")
    gone = set(expected_keys(over))
    r = finish_compaction(ns.manifest, plan, rewrites, started=started, phases={})
    by_key = {(p.values["event_date"], p.values["user_bucket"]): p.object_id for p in ns.refresh().partitions()}
    dropped = {d["object_id"] for d in r.details["tables_dropped_on_conflict"]}
    assert dropped == {by_key[k] for k in gone} and len(dropped) == 4
    assert r.partitions_touched == r.details["tables_rebased"] == 8
    frags = published_fragments(ns)
    assert all(len(frags[o]) == (1 if o in dropped else 2) for o in frags)  # overwrite's / ours + the append's
    kept = pa.concat_tables([old, append.cast(old.schema)])
    mask = pa.array([k not in gone for k in expected_keys(kept)])
    expected = pa.concat_tables([kept.filter(mask), over.cast(old.schema)]).sort_by("id")
    assert sorted_rows(ns).equals(expected)
    assert_read_versions_only_increase(ns)


# --------------------------------------------------------------------------- real processes
@pytest.mark.parametrize("step", ["after_fragments", "before_manifest_commit"])
def test_writer_publishing_during_compaction_loses_nothing(small, step):
    """A compaction process is held after its rewrite (or after its table commits); meanwhile this
    process appends to every table and publishes. The compaction must rebase onto the writer's
    published versions: nothing lost, nothing doubled, read_version only increases (docs/design.md §8)."""
    ns, old = small
    published = {p.object_id: p.read_version for p in ns.partitions()}
    on_disk = files_on_disk(ns)
    go = ns.root + ".go"
    proc = spawn("compact_proc.py", ns.root, fault=f"{step}:wait:{go}")
    wait_until_reached(go, proc)
    if step == "after_fragments":
        wait_for(lambda: any(now[o] - on_disk[o] for now in [files_on_disk(ns)] for o in on_disk),
                 "the compaction's rewrite")
    else:
        assert all(v > published[o] for o, v in latest_versions(ns).items()), "its table commits"
    new = demo_events(600, seed=5, start_id=50_000, days=DAYS)
    w = ns.write(new)
    assert w.partitions_touched == 12
    release(go)
    code, r, err = finish(proc)
    assert code == 0, err
    assert r["partitions_touched"] == 12 and r["details"]["tables_rebased"] == 12
    assert r["retries"] >= (1 if step == "before_manifest_commit" else 0)
    assert sorted_rows(ns).equals(pa.concat_tables([old, new.cast(old.schema)]).sort_by("id"))
    assert all(len(f) == 2 for f in published_fragments(ns).values())  # ours + the writer's
    assert_read_versions_only_increase(ns)


def test_writer_holding_an_older_base_loses_nothing(small):
    """A writer process commits its tables on the pre-compaction version and stalls before its
    __manifest commit; the compaction publishes first. The writer must notice at its publish and
    re-apply its fragments on top of the compacted version (docs/design.md §8 hazard 2b)."""
    ns, old = small
    published = {p.object_id: p.read_version for p in ns.partitions()}
    go = ns.root + ".go"
    proc = spawn("writer_proc.py", ns.root, "--start", "50000", "--rows", "600", "--days", str(DAYS),
                 fault=f"before_manifest_commit:wait:{go}")
    wait_until_reached(go, proc)
    assert all(v > published[o] for o, v in latest_versions(ns).items()), "the writer's table commits"
    r = ns.compact()
    assert r.partitions_touched == 12 and r.details["tables_rebased"] == 0
    assert sorted_rows(ns).equals(old)  # the writer has not published yet
    release(go)
    code, w, err = finish(proc)
    assert code == 0, err
    assert w["retries"] >= 1 and w["rows_written"] == 600
    new = demo_events(600, seed=50_000, start_id=50_000, days=DAYS)
    assert sorted_rows(ns).equals(pa.concat_tables([old, new.cast(old.schema)]).sort_by("id"))
    assert all(len(f) == 2 for f in published_fragments(ns).values())  # ours + the writer's
    assert_read_versions_only_increase(ns)


def test_killed_writer_fragments_are_never_published(small):
    """A writer killed after its table commits leaves versions beyond read_version (docs/design.md §8
    hazard 2). Compaction works on the published version and never publishes those fragments."""
    ns, old = small
    published = published_fragments(ns)
    code, _, _ = finish(spawn("writer_proc.py", ns.root, "--start", "50000", "--rows", "600", "--days", str(DAYS),
                              fault="after_table_commits:exit"))
    assert code == 77
    dead = {p.object_id: data_files([f.metadata for f in lance.dataset(table_uri(ns, p.location)).get_fragments()])
            - data_files(published[p.object_id]) for p in ns.partitions()}
    assert all(dead.values())
    r = ns.compact()
    assert r.partitions_touched == 12 and r.rows_written == APPENDS * ROWS
    assert sorted_rows(ns).equals(old)
    assert not any(data_files(f) & dead[o] for o, f in published_fragments(ns).items())
    more = demo_events(100, seed=9, start_id=90_000, days=DAYS)
    ns.write(more)
    ns.compact()
    assert sorted_rows(ns).equals(pa.concat_tables([old, more.cast(old.schema)]).sort_by("id"))
    assert not any(data_files(f) & dead[o] for o, f in published_fragments(ns).items())


# --------------------------------------------------------------------------- one bad table
def break_two_tables(ns: PartitionedNamespace) -> tuple[str, str]:
    """Delete one data file of one partition table and truncate one of another, on disk."""
    parts = ns.partitions()
    gone, cut = parts[1], parts[6]
    frags = published_fragments(ns)
    os.remove(os.path.join(table_uri(ns, gone.location), "data", sorted(data_files(frags[gone.object_id]))[0]))
    os.truncate(os.path.join(table_uri(ns, cut.location), "data", sorted(data_files(frags[cut.object_id]))[0]), 40)
    return gone.object_id, cut.object_id


def assert_isolated(ns: PartitionedNamespace, result, broken: tuple[str, str], before: dict[str, int],
                    manifest_before: int) -> None:
    assert set(result.failures) == set(broken), result.failures
    for oid in broken:
        assert oid in result.failures[oid]  # the message names the table
    assert result.partitions_touched == 10
    # plain pylance: the ten good tables moved to one fragment each in ONE __manifest commit; the broken kept theirs
    ds = lance.dataset(os.path.join(ns.root, "__manifest"))
    assert result.details["published_version"] == manifest_before + 1
    rows = {r["object_id"]: r for r in ds.checkout_version(manifest_before + 1).to_table().to_pylist()}
    for oid, v in before.items():
        if oid in broken:
            assert rows[oid]["read_version"] == v
        else:
            assert rows[oid]["read_version"] > v
            assert len(lance.dataset(table_uri(ns, rows[oid]["location"]), version=rows[oid]["read_version"])
                       .get_fragments()) == 1


def test_one_corrupt_table_does_not_stop_the_others(small):
    """Issue item 11: a data file deleted in one partition table and truncated in another aborted
    the whole compaction with a raw OSError naming nothing. The other ten are compacted and
    published in one commit; CommitResult.failures names the two, which are left as they were."""
    ns, _ = small
    before = {p.object_id: p.read_version for p in ns.partitions()}
    manifest_before = ns.manifest_version
    broken = break_two_tables(ns)
    result = ns.compact()
    assert_isolated(ns, result, broken, before, manifest_before)
    assert "DataFilesMissingError" in result.failures[broken[0]] or "Not found" in result.failures[broken[0]]


def test_a_table_that_cannot_be_opened_is_skipped_at_planning(small):
    """A table whose published version no longer opens fails at planning: reported, the rest compacted."""
    ns, _ = small
    victim = ns.partitions()[4]
    shutil.rmtree(os.path.join(table_uri(ns, victim.location), "_versions"))
    result = ns.compact()
    assert list(result.failures) == [victim.object_id] and "CorruptTableError" in result.failures[victim.object_id]
    assert result.partitions_touched == 11


def test_compact_cli_exits_3_when_a_table_was_skipped(small, capsys):
    from lancepart.cli import main

    ns, _ = small
    broken = break_two_tables(ns)
    assert main(["compact", ns.root, "--json", "-q"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert set(out["failures"]) == set(broken) and out["partitions_touched"] == 10
    assert main(["compact", ns.root, "--json", "-q"]) == 3  # still broken, nothing else to do
    assert json.loads(capsys.readouterr().out)["partitions_touched"] == 0


def test_a_deleted_table_directory_after_a_schema_change_is_listed_and_the_cli_exits_3(small, capsys):
    """Issue 21 item 7: after update_schema, compaction first brings old tables up to the new
    schema; a partition table whose directory was deleted made that step raise a raw ValueError
    (`lancepart compact`: exit 1, "unexpected ValueError"). The table is now listed in the
    result's failures, the other eleven are compacted and published, and the CLI exits 3."""
    from lancepart.cli import main

    ns, _ = small
    ns.update_schema(add=[pa.field("note", pa.utf8())])
    victim = ns.partitions()[5]
    shutil.rmtree(table_uri(ns, victim.location))
    result = ns.compact()
    assert list(result.failures) == [victim.object_id], result.failures
    assert victim.object_id in result.failures[victim.object_id]
    assert result.partitions_touched == 11
    capsys.readouterr()
    assert main(["compact", ns.root, "--json", "-q"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert list(out["failures"]) == [victim.object_id] and out["partitions_touched"] == 0


def test_the_compaction_job_with_nothing_to_compact_does_not_start_spark(small, tmp_path):
    """jobs/compact.py plans on the driver first: a namespace with nothing to compact gets the
    usual summary (nothing touched, exit 0) without a SparkSession, so a nightly run on a quiet
    namespace does not make a cluster's executors fetch and unpack the shipped environment."""
    from tests.procs import run_job_probe

    ns, rows = small
    ns.compact()  # one fragment per table from here on
    version = ns.refresh().manifest_version
    cfg = yaml.safe_load((HERE.parent / "configs" / "compact-demo.yaml").read_text())
    cfg["namespace"]["root"] = ns.root
    (tmp_path / "compact.yaml").write_text(yaml.safe_dump(cfg))
    summary, probe = run_job_probe("compact", "--config", str(tmp_path / "compact.yaml"))
    assert probe == {"exit": 0, "spark_context": False, "jvm": False}, (probe, summary)
    assert summary["partitions_touched"] == 0 and summary["details"]["tables_planned"] == 0
    assert summary["details"]["tables_examined"] == len(ns.partitions()) and summary["failures"] == {}
    assert summary["manifest_version"] == version and summary["root"] == ns.root
    assert PartitionedNamespace.open(ns.root).to_table().sort_by("id").equals(rows)


@pytest.mark.spark
def test_spark_compaction_isolates_a_corrupt_table(small, spark, capsys):
    from lancepart import spark as lps

    ns, _ = small
    before = {p.object_id: p.read_version for p in ns.partitions()}
    manifest_before = ns.manifest_version
    broken = break_two_tables(ns)
    result = lps.compact(spark, ns.root, tables_per_task=1)
    assert_isolated(PartitionedNamespace.open(ns.root), result, broken, before, manifest_before)
    # the spark-submit job reports the skipped tables and exits 3
    cfg = yaml.safe_load((HERE.parent / "configs" / "compact-demo.yaml").read_text())
    cfg["namespace"]["root"] = ns.root
    cfg["compact"]["filter"] = None
    (Path(ns.root).parent / "compact.yaml").write_text(yaml.safe_dump(cfg))
    spec = importlib.util.spec_from_file_location("compact_job", HERE.parent / "jobs" / "compact.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    capsys.readouterr()
    assert job.main(["--config", str(Path(ns.root).parent / "compact.yaml")]) == 3
    assert set(json.loads(capsys.readouterr().out)["failures"]) == set(broken)


# --------------------------------------------------------------------------- Spark
@pytest.mark.spark
def test_spark_compaction_gives_the_same_result(template, tmp_path, spark):
    """lps.compact (one Spark task per table, commit + publish on the driver) == ns.compact."""
    from lancepart import spark as lps

    src, expected = template
    shutil.copytree(src, tmp_path / "a")
    shutil.copytree(src, tmp_path / "b")
    a = PartitionedNamespace.open(str(tmp_path / "a"))
    ra = a.compact()
    rb = lps.compact(spark, str(tmp_path / "b"), tables_per_task=1)  # one Spark task per table
    b = PartitionedNamespace.open(str(tmp_path / "b"))
    keys = ("fragments_before", "fragments_after", "tables_planned", "published_version")
    assert (rb.partitions_touched, rb.rows_written, rb.manifest_version) == \
        (ra.partitions_touched, ra.rows_written, ra.manifest_version) == (12, APPENDS * ROWS, ra.manifest_version)
    assert [rb.details[k] for k in keys] == [ra.details[k] for k in keys]
    fa, fb = published_fragments(a), published_fragments(b)
    assert {o: [f.physical_rows for f in fs] for o, fs in fa.items()} == \
        {o: [f.physical_rows for f in fs] for o, fs in fb.items()}
    assert sorted_rows(b).equals(expected) and sorted_rows(a).equals(expected)
    for p in b.partitions():  # each table holds exactly its own rows
        t = lance.dataset(table_uri(b, p.location), version=p.read_version).to_table()
        assert set(t.column("event_date").to_pylist()) == {p.values["event_date"]}


# --------------------------------------------------------------------------- job + config
@pytest.mark.parametrize(("section", "message"), [
    ({"bogus": 1}, "unknown key 'bogus' in compact"),
    ({"target_rows_per_fragment": 0}, "compact.target_rows_per_fragment must be a positive int"),
    ({"min_small_fragments": 2.5}, "compact.min_small_fragments must be a positive int"),
    ({"filter": 3}, "compact.filter must be a SQL string"),
])
def test_bad_compact_config_names_the_key(section, message):
    from lancepart.config import JobConfig
    from lancepart.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        JobConfig.from_dict({"namespace": {"root": "/tmp/x"}, "compact": section})


def test_bad_arguments_are_refused_before_anything_happens(small):
    ns, _ = small
    v = ns.manifest_version
    for kwargs, message in (({"target_rows_per_fragment": 0}, "target_rows_per_fragment"),
                            ({"min_small_fragments": 1}, "min_small_fragments"),
                            ({"materialize_deletions_threshold": 1.5}, "materialize_deletions_threshold")):
        with pytest.raises(InvalidArgumentError, match=message):
            ns.compact(**kwargs)
    assert ns.refresh().manifest_version == v


@pytest.mark.spark
def test_compact_job_runs_from_its_config(template, tmp_path, spark, capsys):
    """jobs/compact.py with configs/compact-demo.yaml (root and filter overridden) on the shared session."""
    src, expected = template
    shutil.copytree(src, tmp_path / "ns")
    cfg = yaml.safe_load((HERE.parent / "configs" / "compact-demo.yaml").read_text())
    cfg["namespace"]["root"] = str(tmp_path / "ns")
    cfg["compact"]["filter"] = "event_date >= DATE '2025-12-01'"  # every day
    (tmp_path / "compact.yaml").write_text(yaml.safe_dump(cfg))
    spec = importlib.util.spec_from_file_location("compact_job", HERE.parent / "jobs" / "compact.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    assert job.main(["--config", str(tmp_path / "compact.yaml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["partitions_touched"] == 12 and out["filter"] == cfg["compact"]["filter"]
    assert out["details"]["spark_tasks"] == 6  # default grouping: about 4 tasks per core of local[2], 2 tables each
    assert (out["details"]["fragments_before"], out["details"]["fragments_after"]) == (12 * APPENDS, 12)
    assert sorted_rows(PartitionedNamespace.open(str(tmp_path / "ns"))).equals(expected)
