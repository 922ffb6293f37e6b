"""ns.cleanup: old versions and unreferenced files go, what a snapshot pins stays.

Spec: spec/partitioning.md "Transaction / Read Behavior" (a partition table is read at its
``read_version`` / ``read_tag`` / ``read_branch``, so cleanup must never remove those) and
spec/storage-layout.md (``data/``, ``_versions/``, ``_transactions/`` of a table);
docs/design.md §8 (what a dead job leaves: fragments never committed, versions beyond
``read_version``). Real Lance tables on disk, real writer processes killed at protocol steps
(lancepart/util/faults.py), and an S3-compatible store for the object-store path.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from datetime import timedelta

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError
from lancepart.maintenance.cleanup import cleanup
from lancepart.model import ids
from lancepart.read.snapshot import scan
from lancepart.results import PartitionInfo
from lancepart.spark.write import job_location
from lancepart.storage.manifest import join_uri
from lancepart.write.reserve import create_empty_table
from tests.conftest import EVENTS_SPEC
from tests.crash_proc import Batch, finish, launch

ZERO = timedelta(0)
NO_NAMES = ("removed", "seconds", "dry_run")


def disk(root: str) -> dict[str, int]:
    """Every file under ``root``: relative path -> size."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out


def versions(uri: str) -> list[int]:
    return [v["version"] for v in lance.dataset(uri).versions()]


def tracked(uri: str) -> set[str]:
    return set(lance.dataset(uri).tracked_files().read_all().column("path").to_pylist())


def data_files(uri: str) -> set[str]:
    """Data files of a table, without Lance's hidden temporary files (a write in progress, or of a
    killed job: kept for the retention floor even under allow_short_retention)."""
    d = os.path.join(uri, "data")
    return {f"data/{f}" for f in os.listdir(d) if not f.startswith(".")} if os.path.isdir(d) else set()


def counts(stats) -> dict:
    return {k: v for k, v in stats.to_dict().items() if k not in NO_NAMES}


def backdate(path: str, seconds: float) -> None:
    """Set the modification time of ``path`` (a file, or a directory: every file and directory
    under it, itself included) ``seconds`` back."""
    t = time.time() - seconds
    if os.path.isfile(path):
        os.utime(path, (t, t))
        return
    for d, _, names in os.walk(path, topdown=False):
        for n in names:
            os.utime(os.path.join(d, n), (t, t))
        os.utime(d, (t, t))


def later(monkeypatch, hours: float = 2) -> None:
    """Cleanups from here on run ``hours`` later than now (their cut-off and floor move; the
    versions' and files' times do not): past the retention floor of one hour, what only the
    floor kept goes."""
    import lancepart.maintenance.cleanup as module

    monkeypatch.setattr(module, "_clock", lambda: time.time() + hours * 3600)


def batch(k: int, rows: int = 120, days: int = 2) -> Batch:
    return Batch(f"b{k}", k * 1_000_000, rows, seed=k, days=days)


def run_killed(root: str, b: Batch, fault: str) -> None:
    code, records, err = finish(launch(root, [b.op(fault=fault)]))
    assert code == 77 and not records, err[-3000:]


def test_killed_jobs_and_old_versions_go_snapshot_and_tag_stay(ns, monkeypatch):
    """A job killed after writing fragments (never committed) and one killed after its first
    table commit (a version beyond read_version, then superseded by a later writer) leave files
    and versions that cleanup removes once the later writer's commit is older than the retention
    floor (until then its writer could have been alive, about to put its fragments back); the
    published snapshot and a tagged version stay readable; what is left is exactly what the
    remaining versions reference. A dry run before removes nothing and reports the counts and
    bytes the real run then removes (spec "Transaction"; docs/design.md §8)."""
    root = ns.root
    ns.write(batch(1).table(), batch_id="b1")
    first = ns.partitions()[0]
    uri = join_uri(root, first.location)
    lance.dataset(uri).tags.create("audit", first.read_version)
    audited = lance.dataset(uri, version="audit").to_table()
    ns.write(batch(2).table(), batch_id="b2")
    run_killed(root, batch(3), "after_fragments:exit")
    run_killed(root, batch(4), "after_table_commit:exit")
    ns.refresh()
    dead_versions = {p.location: lance.dataset(join_uri(root, p.location)).version for p in ns.partitions()
                     if lance.dataset(join_uri(root, p.location)).version > p.read_version}
    assert dead_versions, "the job killed after a table commit left a version beyond read_version"
    ns.write(batch(5).table(), batch_id="b5")  # a later writer supersedes the dead version
    orphans = {p.location: data_files(join_uri(root, p.location)) - tracked(join_uri(root, p.location))
               for p in ns.partitions()}
    assert any(orphans.values()), "the job killed after writing fragments left unreferenced data files"
    before = ns.to_table().sort_by("id")
    later(monkeypatch)
    on_disk = disk(root)

    dry = ns.cleanup(ZERO, dry_run=True, allow_short_retention=True)
    assert disk(root) == on_disk, "a dry run removed something"
    assert dry.dry_run and dry.versions_removed > 0 and dry.orphan_files_removed > 0 and not dry.errors

    stats = ns.cleanup(ZERO, allow_short_retention=True)
    assert counts(stats) == counts(dry) and stats.removed == dry.removed
    after = disk(root)
    assert len(on_disk) - len(after) == stats.files_removed
    assert sum(on_disk.values()) - sum(after.values()) == stats.bytes_removed

    assert PartitionedNamespace.open(root).to_table().sort_by("id").equals(before)
    assert lance.dataset(uri, version="audit").to_table().equals(audited)
    assert versions(join_uri(root, "__manifest")) == [ns.manifest_version]
    assert stats.manifest_versions_removed == ns.manifest_version - 1
    for p in ns.partitions():
        t = join_uri(root, p.location)
        ds = lance.dataset(t)
        keep = {p.read_version, ds.latest_version} | {v["version"] for v in ds.tags.list().values()}
        assert set(versions(t)) == keep, p.location
        assert data_files(t) == {f for f in tracked(t) if f.startswith("data/")}, p.location
        assert not orphans[p.location] & data_files(t)
        assert f"{p.location}@v{dead_versions.get(p.location, 0)}" in stats.removed or p.location not in dead_versions
    assert stats.tables_scanned == len(ns.partitions())


def test_old_read_version_stays_when_newer_unpublished_versions_exist(ns, tmp_path, monkeypatch):
    """A partition whose published read_version is older than the retention while jobs committed
    newer versions they never published: Lance's own cleanup would delete the read_version (it
    keeps only the latest and tagged versions); ns.cleanup keeps it, keeps the newer
    unpublished versions while they are younger than the retention floor (a write may be about to
    publish them). A later publish supersedes them and drops their fragments: the last of them
    stays while that publish is younger than the floor (its writer, if alive, would put its
    fragments back), the rest go at once, and all of them go once the floor has passed (spec
    "Transaction / Read Behavior")."""
    ns.write(batch(1).table(), batch_id="b1")
    p = ns.partitions()[0]
    uri = join_uri(ns.root, p.location)
    extra = lance.dataset(uri, version=p.read_version).to_table().slice(0, 1)
    for _ in range(2):  # two jobs that committed and died before publishing
        lance.write_dataset(extra, uri, mode="append")
    unpublished = [p.read_version + 1, p.read_version + 2]
    assert versions(uri)[-2:] == unpublished
    pinned = lance.dataset(uri, version=p.read_version).to_table()
    before = ns.to_table().sort_by("id")

    plain = str(tmp_path / "plain")  # what Lance alone would do to the same table
    shutil.copytree(uri, plain)
    lance.dataset(plain).cleanup_old_versions(older_than=ZERO)
    assert p.read_version not in versions(plain)

    stats = ns.cleanup(ZERO, allow_short_retention=True)
    # newer than the published version and younger than the floor: a write may be publishing them
    assert versions(uri) == [p.read_version, *unpublished]
    assert lance.dataset(uri, version=p.read_version).to_table().equals(pinned)

    ns.write(batch(2).table(), batch_id="b2")  # a publish beyond them: now they are superseded history
    top = next(q.read_version for q in ns.refresh().partitions() if q.object_id == p.object_id)
    before = ns.to_table().sort_by("id")
    stats = ns.cleanup(ZERO, allow_short_retention=True)
    assert versions(uri) == [top - 1, top] and top - 1 >= unpublished[-1]  # the one before the drop stays
    later(monkeypatch)
    stats2 = ns.cleanup(ZERO, allow_short_retention=True)
    assert versions(uri) == [top]
    assert {f"{p.location}@v{v}" for v in (p.read_version, *unpublished)} <= {*stats.removed, *stats2.removed}
    assert ns.to_table().sort_by("id").equals(before)


def test_retention_window_and_large_older_than(ns):
    """``older_than`` large keeps everything. Otherwise a version goes only once it has been
    superseded for longer than ``older_than``: b1's published versions (superseded by b2 before
    the cut-off) go, b2's (superseded by b3 after it) stay, as does the __manifest version that
    pinned them, so the snapshot a job read before b3 published is still readable."""
    ns.write(batch(1).table(), batch_id="b1")
    v1 = {p.location: p.read_version for p in ns.partitions()}
    ns.write(batch(2).table(), batch_id="b2")
    v2 = {p.location: p.read_version for p in ns.partitions()}
    m2 = ns.manifest_version
    snapshot_b2 = ns.to_table().sort_by("id")
    time.sleep(1.2)
    cut = time.time()
    time.sleep(0.3)
    ns.write(batch(3).table(), batch_id="b3")
    on_disk = disk(ns.root)

    nothing = ns.cleanup(timedelta(days=3650))
    assert (nothing.versions_removed, nothing.files_removed, nothing.bytes_removed, nothing.removed) == (0, 0, 0, ())
    assert disk(ns.root) == on_disk

    stats = ns.cleanup(timedelta(seconds=time.time() - cut), allow_short_retention=True)
    assert stats.versions_removed > 0 and not stats.errors
    for loc, v in v1.items():
        if v2.get(loc) != v:
            with pytest.raises(ValueError):
                lance.dataset(join_uri(ns.root, loc), version=v)
    for loc, v in v2.items():
        assert v in versions(join_uri(ns.root, loc)), loc
    assert m2 in versions(join_uri(ns.root, "__manifest")) and m2 - 1 not in versions(join_uri(ns.root, "__manifest"))
    old = ns.manifest.snapshot(m2).tables().to_pylist()  # the snapshot a job read before b3
    infos = [PartitionInfo(r["object_id"], r["location"], 1, {}, r["read_version"]) for r in old]
    assert scan(ns.root, infos, ns.schema).sort_by("id").equals(snapshot_b2)


def test_unreferenced_directories_and_files_by_age(ns):
    """Table directories __manifest does not reference (a Spark job's own directory of a job that
    died before reserving it, a reservation loser's empty table) go once every file in them is
    older than ``older_than``; a recent one (a job may still be writing it), referenced tables,
    ``__manifest``, a V1 ``<name>.lance`` table and foreign directories stay. The same age rule
    for uncommitted fragments inside a referenced table (directory-namespace.md "Manifest Table
    Directory"; docs/design.md §5)."""
    root = ns.root
    ns.write(batch(1).table(), batch_id="b1")
    data = batch(1).table().cast(ns.schema)
    new_ids = ids.partition_ids(1, [pa.array([12345], pa.date32()), pa.array([3], pa.int32())])
    oid = ids.table_object_id(1, new_ids[0])
    spark_dir = job_location(uuid.uuid4().hex, oid)  # a dead Spark job's directory: data files only
    lance.fragment.write_fragments(data, join_uri(root, spark_dir), schema=ns.schema)
    loser = ids.table_location(oid)  # a reservation loser's empty table
    create_empty_table(root, loser, ns.schema, None)
    fresh = job_location(uuid.uuid4().hex, oid)  # a live job's directory
    lance.fragment.write_fragments(data, join_uri(root, fresh), schema=ns.schema)
    lance.write_dataset(data, join_uri(root, "legacy.lance"))
    os.makedirs(join_uri(root, "notes"))
    with open(join_uri(root, "notes", "readme.txt"), "w") as f:
        f.write("not a table")
    p = ns.partitions()[0]
    table = join_uri(root, p.location)
    old_frag = lance.fragment.write_fragments(data.slice(0, 5), table, schema=ns.schema)[0].files[0].path
    new_frag = lance.fragment.write_fragments(data.slice(5, 5), table, schema=ns.schema)[0].files[0].path
    two_hours = 7200
    for path in (spark_dir, loser, "legacy.lance", "notes", p.location):
        backdate(join_uri(root, path), two_hours)
    backdate(join_uri(root, "__manifest"), two_hours)
    backdate(join_uri(table, "data", new_frag), 0)
    before = ns.to_table().sort_by("id")
    on_disk = disk(root)

    dry = ns.cleanup(timedelta(hours=1), dry_run=True)
    assert disk(root) == on_disk
    stats = ns.cleanup(timedelta(hours=1))
    assert counts(stats) == counts(dry) and stats.removed == dry.removed
    assert stats.orphan_dirs_removed == 2 and stats.orphan_files_removed == 1 and stats.versions_removed == 0
    assert set(stats.removed) == {spark_dir + "/", loser + "/", f"{p.location}/data/{old_frag}"}
    left = set(os.listdir(root))
    assert spark_dir not in left and loser not in left
    assert {fresh, "legacy.lance", "notes", "__manifest", *(q.location for q in ns.partitions())} <= left
    assert os.path.exists(join_uri(table, "data", new_frag))
    assert sum(on_disk.values()) - sum(disk(root).values()) == stats.bytes_removed
    assert ns.to_table().sort_by("id").equals(before)


def test_a_table_directory_being_made_is_not_removed_before_its_first_file(ns):
    """A job creating a new partition table makes its directories before its first file (Lance
    makes ``data/``, then a temporary file in it). A cleanup that finds such a directory with no
    file in it judges its age by the directories' own times: recent, it stays, even at a retention
    of 2 s (unreferenced directories obey the floor). On the code before it was removed at once,
    having no file younger than the cut-off; the maintenance race's writer then failed with "No
    such file or directory ... $dataset/data/.tmp..." (a run under ``-n 4``). Once its
    directories are older than the floor too, it goes."""
    root = ns.root
    ns.write(batch(1).table(), batch_id="b1")
    oid = ids.table_object_id(1, ids.partition_ids(1, [pa.array([12345], pa.date32()), pa.array([3], pa.int32())])[0])
    making = ids.table_location(oid)
    os.makedirs(join_uri(root, making, "data"))
    stats = ns.cleanup(timedelta(seconds=2), allow_short_retention=True)
    assert making not in {r.rstrip("/") for r in stats.removed} and os.path.isdir(join_uri(root, making, "data"))
    backdate(join_uri(root, making), 7200)  # past the floor, which unreferenced directories obey
    stats = ns.cleanup(timedelta(seconds=2), allow_short_retention=True)
    assert making + "/" in stats.removed and not os.path.exists(join_uri(root, making))
    assert ns.to_table().num_rows == batch(1).rows


def test_invalid_older_than(ns):
    with pytest.raises(InvalidArgumentError, match="older_than"):
        ns.cleanup(timedelta(seconds=-1))
    with pytest.raises(InvalidArgumentError, match="older_than"):
        cleanup(ns.root, 7)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- object store

@pytest.fixture(scope="module")
def s3():
    from tests.s3_server import moto_s3

    with moto_s3(atomic=True) as server:
        yield server


def test_cleanup_on_an_object_store(s3):
    """The same cleanup on ``s3://`` through Lance's object store only: old versions and an
    uncommitted fragment go, the snapshot stays; a reservation loser's empty table younger than
    the retention floor stays even under ``allow_short_retention`` (a reservation creates a
    table just before publishing it, docs/retention.md); a directory without any Lance version
    cannot be dated there and is reported, not removed."""
    from lancepart.util.sample import demo_events

    root, so = s3.new_root(), s3.storage_options()
    schema = demo_events(1).schema
    ns = PartitionedNamespace.create(root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC,
                                     storage_options=so)
    ns.write(batch(1, rows=40, days=1).table(), batch_id="b1")
    ns.write(batch(2, rows=40, days=1).table(), batch_id="b2")
    data = batch(1, rows=40, days=1).table().cast(ns.schema)
    p = ns.partitions()[0]
    frag = lance.fragment.write_fragments(data.slice(0, 3), join_uri(root, p.location), schema=ns.schema,
                                          storage_options=so)[0].files[0].path
    oid = ids.table_object_id(1, ids.partition_ids(1, [pa.array([54321], pa.date32()), pa.array([1], pa.int32())])[0])
    loser = ids.table_location(oid)
    create_empty_table(root, loser, ns.schema, so)
    spark_dir = job_location("dead-job", oid)
    lance.fragment.write_fragments(data, join_uri(root, spark_dir), schema=ns.schema, storage_options=so)
    before = ns.to_table().sort_by("id")

    dry = ns.cleanup(ZERO, dry_run=True, allow_short_retention=True)
    stats = ns.cleanup(ZERO, allow_short_retention=True)
    assert counts(stats) == counts(dry)
    assert stats.versions_removed > 0 and stats.orphan_files_removed >= 1 and stats.orphan_dirs_removed == 0
    assert loser + "/" not in stats.removed and f"{p.location}/data/{frag}" in stats.removed
    assert len(stats.errors) == 1 and spark_dir in stats.errors[0] and "age cannot be told" in stats.errors[0]
    assert stats.skipped == (join_uri(root, spark_dir),)
    assert ns.to_table().sort_by("id").equals(before)
    m = lance.dataset(join_uri(root, "__manifest"), storage_options=so)
    assert [v["version"] for v in m.versions()] == [m.version]


def test_cleanup_beside_live_writers(ns, monkeypatch):
    """Cleanup in a loop (retention 3 s, longer than any one write job here) while two writer
    processes publish overlapping batches: no writer fails, every batch is published exactly
    once, and every __manifest version cleanup left is fully readable (spec "Transaction";
    the races of lancepart/maintenance/cleanup.py)."""
    import threading

    root = ns.root
    ns.write(batch(1).table(), batch_id="b1")
    plans = [[batch(10 + 10 * w + i, rows=80) for i in range(8)] for w in range(2)]
    procs = [launch(root, [b.op() for b in plan], writer=w, writers=2) for w, plan in enumerate(plans)]
    stop, runs, removed = threading.Event(), [], []

    def loop():
        while not stop.is_set():
            s = cleanup(root, timedelta(seconds=3), allow_short_retention=True)
            runs.append(s.errors)
            removed.append(s.versions_removed)
            time.sleep(0.3)

    t = threading.Thread(target=loop)
    t.start()
    try:
        results = [finish(p) for p in procs]
    finally:
        stop.set()
        t.join()
    for code, records, err in results:
        assert code == 0 and len(records) == 8 and all("error" not in r for r in records), err[-3000:]
    assert not any(runs), runs
    later(monkeypatch)  # the last cleanup runs past the 3 s retention of every superseded version
    assert cleanup(root, timedelta(seconds=3), allow_short_retention=True).versions_removed + sum(removed) > 0
    expected = sorted(i for b in [batch(1), *plans[0], *plans[1]] for i in range(b.start, b.start + b.rows))
    assert sorted(PartitionedNamespace.open(root).to_table(columns=["id"]).column("id").to_pylist()) == expected
    for v in versions(join_uri(root, "__manifest")):
        rows = ns.manifest.snapshot(v).tables().to_pylist()
        infos = [PartitionInfo(r["object_id"], r["location"], 1, {}, r["read_version"]) for r in rows]
        scan(root, infos, ns.schema, columns=["id"])


@pytest.mark.spark
def test_killed_spark_job_directories_go(ns, spark, monkeypatch):
    """A Spark driver that died after its executors wrote fragments for new partitions, before it
    reserved them: the job's own table directories (data files only, docs/design.md §5 names) are
    referenced by nothing and go; the published snapshot stays. The driver is this process, on
    the shared session: an injected fault raises at that step (``after_fragments``), and the
    write leaves what it wrote as it is, as a killed driver does (tests/test_crash.py kills Spark
    drivers with ``exit`` and ``kill -9``); the directories it left are checked first."""
    from lancepart import spark as lps
    from lancepart.util import faults
    from tests.crash_proc import spark_frame

    ns.write(batch(1, days=1).table(), batch_id="b1")
    before, tables = ns.to_table().sort_by("id"), {p.location for p in ns.partitions()}
    dead = batch(2, days=3)
    monkeypatch.setenv(faults.ENV, "after_fragments:raise")
    with pytest.raises(faults.InjectedFault, match="after_fragments"):
        lps.write(spark_frame(spark, dead), ns.root, mode=dead.mode, batch_id=dead.batch_id)
    monkeypatch.delenv(faults.ENV)
    faults.reset()
    job_dirs = set(os.listdir(ns.root)) - tables - {"__manifest", "_lancepart_batches"}
    assert job_dirs and all(not os.path.exists(join_uri(ns.root, d, "_versions")) for d in job_dirs)
    for d in job_dirs:  # unreferenced directories obey the retention floor even under allow_short_retention
        backdate(join_uri(ns.root, d), 7200)
    stats = ns.cleanup(ZERO, allow_short_retention=True)
    assert stats.orphan_dirs_removed == len(job_dirs) and {d + "/" for d in job_dirs} <= set(stats.removed)
    assert set(os.listdir(ns.root)) == tables | {"__manifest", "_lancepart_batches"}
    assert ns.to_table().sort_by("id").equals(before)
