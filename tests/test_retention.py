"""Retention floor, cleanup beside live writers, and what a publish checks (issue "Safety at
the boundaries", items 4, 5, 11, 12 and 15; docs/retention.md).

Real Lance tables on disk, real writer processes (tests/crash_proc.py) paused or racing at
protocol steps (lancepart/util/faults.py), real files made undeletable (``chattr +i``),
truncated or deleted on disk, and plain pylance to check what is published: every table of
the latest ``__manifest`` opened at its ``read_version``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from datetime import timedelta

import lance
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import ConfigError, UnsafeRetentionError
from lancepart.maintenance.cleanup import (
    DEFAULT_RETENTION_FLOOR,
    RETENTION_FLOOR_KEY,
    cleanup,
    retention_floor,
    set_retention_floor,
)
from lancepart.storage.manifest import join_uri
from tests.crash_proc import BLOCK, Batch, finish, launch
from tests.procs import release, run_cli, wait_until_reached
from tests.test_cleanup import backdate, batch, data_files, disk, later, tracked, versions

ZERO = timedelta(0)


def published(root: str) -> list[int]:
    """Every id the latest ``__manifest`` publishes, read with plain pylance: each table row's
    ``location`` opened at its ``read_version`` (spec "Transaction / Read Behavior")."""
    ids: list[int] = []
    for r in lance.dataset(join_uri(root, "__manifest")).to_table().to_pylist():
        if r["object_type"] == "table":
            t = lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
            ids += t.to_table(columns=["id"]).column("id").to_pylist()
    return sorted(ids)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    from lancepart.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- item 4: the floor

def test_floor_refuses_short_retention_unless_allowed(ns, capsys):
    """Below the floor (1 hour) ``ns.cleanup`` raises UnsafeRetentionError naming the floor, for a
    dry run too, and removes nothing; the namespace property ``lancepart.retention_floor``
    raises the floor and can never lower it; ``allow_short_retention=True`` (CLI
    ``--allow-short-retention``) lets it through. Issue item 4: ``cleanup(older_than=0)`` used
    to run beside live writers and destroy the namespace."""
    ns.write(batch(1).table(), batch_id="b1")
    ns.write(batch(2).table(), batch_id="b2")
    on_disk = disk(ns.root)
    assert retention_floor({}) == DEFAULT_RETENTION_FLOOR == timedelta(hours=1)
    for short in (ZERO, timedelta(minutes=59)):
        for dry in (False, True):
            with pytest.raises(UnsafeRetentionError, match=r"retention floor 1:00:00"):
                ns.cleanup(short, dry_run=dry)
    with pytest.raises(UnsafeRetentionError):
        cleanup(ns.root, ZERO)
    assert disk(ns.root) == on_disk

    code, _, err = cli(capsys, "cleanup", ns.root, "--older-than", "0")
    assert code == 2 and "UnsafeRetentionError" in err and "--allow-short-retention" in err
    assert disk(ns.root) == on_disk
    assert ns.cleanup(timedelta(hours=1)).versions_removed == 0  # at the floor: allowed, nothing that young goes

    set_retention_floor(ns.root, timedelta(hours=6))
    assert lance.dataset(join_uri(ns.root, "__manifest")).metadata[RETENTION_FLOOR_KEY] == "21600"
    ns.write(batch(3).table(), batch_id="b3")  # a publish keeps the property
    with pytest.raises(UnsafeRetentionError, match=r"retention floor 6:00:00"):
        ns.cleanup(timedelta(hours=2))
    lance.dataset(join_uri(ns.root, "__manifest")).update_metadata({RETENTION_FLOOR_KEY: "10m"})
    with pytest.raises(UnsafeRetentionError, match=r"retention floor 1:00:00"):  # never below the default
        ns.cleanup(timedelta(minutes=30))
    lance.dataset(join_uri(ns.root, "__manifest")).update_metadata({RETENTION_FLOOR_KEY: "soon"})
    with pytest.raises(ConfigError, match=RETENTION_FLOOR_KEY):
        ns.cleanup(timedelta(days=7))
    lance.dataset(join_uri(ns.root, "__manifest")).update_metadata({RETENTION_FLOOR_KEY: "1d12h"})
    with pytest.raises(UnsafeRetentionError, match=r"1 day, 12:00:00"):
        ns.cleanup(timedelta(days=1))

    code, out, _ = cli(capsys, "--json", "cleanup", ns.root, "--older-than", "0", "--allow-short-retention")
    assert code == 0, out
    before = ns.to_table().sort_by("id")
    assert versions(join_uri(ns.root, "__manifest")) == [lance.dataset(join_uri(ns.root, "__manifest")).version]
    assert PartitionedNamespace.open(ns.root).to_table().sort_by("id").equals(before)


# --------------------------------------------------------------------------- item 4: live writers

def _race(root: str, seconds: float, writers: int = 3) -> tuple[list[dict], list, int]:
    """``writers`` writer processes publishing batches (each a fresh process every 4 batches)
    while a cleaner loops with allow_short_retention and an ``older_than`` cycling through
    0, 0.5 and 2 seconds, for ``seconds``. Returns (every writer record, cleanup errors, cleanups)."""
    deadline = time.time() + seconds
    records: list[dict] = []
    errors: list = []
    runs = [0]
    stop = threading.Event()

    def cleaner() -> None:
        retention = (ZERO, timedelta(seconds=0.5), timedelta(seconds=2))
        while not stop.is_set():
            try:
                s = cleanup(root, retention[runs[0] % 3], allow_short_retention=True)
                if s.errors:
                    errors.append(s.errors)
            except Exception as e:  # reported: the test fails on it
                errors.append(f"raised {type(e).__name__}: {e}")
            runs[0] += 1
            time.sleep(0.02)

    def writer(w: int) -> None:
        k = 0
        while time.time() < deadline:
            plan = [Batch(f"w{w}-{k + i}", (100 + w * 10_000 + k + i) * BLOCK, 150, seed=k + i, days=2)
                    for i in range(4)]
            k += 4
            code, recs, err = finish(launch(root, [b.op() for b in plan], writer=w, writers=writers))
            if code != 0 or len(recs) != len(plan):
                errors.append(f"writer {w} exited {code}: {err[-2000:]}")
                return
            for b, r in zip(plan, recs, strict=True):
                records.append({**r, "start": b.start, "rows": b.rows})

    t = threading.Thread(target=cleaner)
    t.start()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        stop.set()
        t.join()
    return records, errors, runs[0]


@pytest.mark.parametrize("seconds", [pytest.param(15, id="15s"),
                                     pytest.param(180, id="180s", marks=pytest.mark.stress)])
@pytest.mark.slow
def test_short_retention_cleanup_beside_live_writers(ns, seconds):
    """Three writer processes and a cleaner at ``allow_short_retention`` with ``older_than`` of 0
    to 2 s, no kill at all (issue item 4: this destroyed a namespace within seconds). A write may
    fail, with a typed error and nothing published (DataFilesMissingError: cleanup removed its
    files first; CommitConflictError); the namespace is never damaged: every table of the latest
    ``__manifest`` opens at its ``read_version`` with plain pylance, and the rows published are
    exactly those of the writes that reported success, each once."""
    ns.write(batch(1).table(), batch_id="b1")
    records, errors, runs = _race(ns.root, seconds)
    ok = [r for r in records if "error" not in r]
    failed = [r for r in records if "error" in r]
    assert {r["error"] for r in failed} <= {"DataFilesMissingError", "CommitConflictError"}, failed[:3]
    assert not [e for e in errors if isinstance(e, str)], errors[:3]
    want = sorted([*range(batch(1).start, batch(1).start + batch(1).rows),
                   *(i for r in ok for i in range(r["start"], r["start"] + r["rows"]))])
    assert sum(r["result"]["rows_written"] for r in ok) + batch(1).rows == len(want)
    got = published(ns.root)
    assert got == want, f"{len(got)} rows published, writers say {len(want)}"
    assert PartitionedNamespace.open(ns.root).to_table(columns=["id"]).num_rows == len(want)
    assert runs > 10 and len(ok) > 10, (runs, len(ok), len(failed))
    print(f"race {seconds}s: {runs} cleanups, {len(ok)} writes published, {len(failed)} failed typed "
          f"({sorted({r['error'] for r in failed})}), {len(got)} rows")


def test_version_a_write_is_about_to_publish_survives_zero_retention(ns):
    """The window a publish's file check cannot close: the job has committed its table
    versions and checked its files, and is paused right before its ``__manifest`` commit
    (``before_manifest_commit``); meanwhile another commit supersedes its version of one table
    (a job that then died) and a cleanup at ``older_than=0`` runs. The version is beyond
    everything published and younger than the floor, so the cleanup keeps it; the job
    publishes and every row reads with plain pylance at its ``read_version`` (on the code
    before, the cleanup removed the version and the publish made the partition unreadable)."""
    b1, b2 = batch(1, days=1), batch(2, days=1)
    ns.write(b1.table(), batch_id="b1")
    parts = ns.partitions()
    go = ns.root + ".go"
    proc = launch(ns.root, [b2.op(fault=f"before_manifest_commit:wait:{go}")])
    wait_until_reached(go, proc)  # past its file check: standing before the __manifest commit
    assert all(lance.dataset(join_uri(ns.root, p.location)).version > p.read_version for p in parts)
    uri = join_uri(ns.root, parts[0].location)
    theirs = lance.dataset(uri).version
    lance.write_dataset(lance.dataset(uri, version=parts[0].read_version).to_table().slice(0, 0), uri, mode="append")
    cleanup(ns.root, ZERO, allow_short_retention=True)
    assert theirs in versions(uri)
    release(go)
    code, records, err = finish(proc)
    assert code == 0 and len(records) == 1 and "error" not in records[0], (records, err[-3000:])
    want = sorted(i for b in (b1, b2) for i in range(b.start, b.start + b.rows))
    assert published(ns.root) == want


@pytest.mark.parametrize("pause", ["after_table_commits", "before_manifest_commit"])
def test_fragments_a_concurrent_commit_dropped_survive_zero_retention_until_their_writer_publishes(ns, pause):
    """Two writers append to the same partitions. The first has committed its table versions
    (and checked its files) and is paused (``pause``) before its ``__manifest`` commit; the second
    commits on the published versions (which drops the first's fragments from the tables:
    nobody published them) and publishes. A cleanup at ``older_than=0`` now sees the first
    writer's versions superseded by published ones. The first writer then goes again on the
    newer ``__manifest`` and puts the same data files back. On the code before, the cleanup
    deleted those files (the versions holding them looked old): the write failed, or, when
    the delete landed just after its file check, published versions whose files were gone
    (CI: "Not found ... .lance" reading a published table). Now the version before a commit
    that dropped unpublished fragments obeys the floor: the write publishes and every row
    reads with plain pylance at its ``read_version`` (it used to fail with
    DataFilesMissingError at best)."""
    b1, b2, b3 = batch(1, days=1), batch(2, days=1), batch(3, days=1)
    ns.write(b1.table(), batch_id="b1")
    parts = ns.partitions()
    before = {p.location: data_files(join_uri(ns.root, p.location)) for p in parts}
    go = ns.root + ".go"
    proc = launch(ns.root, [b2.op(fault=f"{pause}:wait:{go}")])
    wait_until_reached(go, proc)  # past its table commits (and file check): paused
    assert all(lance.dataset(join_uri(ns.root, p.location)).version > p.read_version for p in parts)
    theirs = {p.location: data_files(join_uri(ns.root, p.location)) - before[p.location] for p in parts}
    assert all(theirs.values())
    ns.write(b3.table(), batch_id="b3")  # drops the paused writer's fragments from every table
    for p in ns.refresh().partitions():
        assert not theirs[p.location] & tracked_at(join_uri(ns.root, p.location), p.read_version)
    cleanup(ns.root, ZERO, allow_short_retention=True)
    for loc, files in theirs.items():
        assert files <= data_files(join_uri(ns.root, loc)), loc
    release(go)
    code, records, err = finish(proc)
    assert code == 0 and len(records) == 1 and "error" not in records[0], (records, err[-3000:])
    want = sorted(i for b in (b1, b2, b3) for i in range(b.start, b.start + b.rows))
    assert published(ns.root) == want


def test_commit_between_cleanups_look_and_delete_of_its_fragments_publishes_nothing_missing(ns):
    """The window between a cleanup's last look at an unreferenced file and its delete. A writer
    has written its fragments and is paused (``after_fragments``); a cleanup process at
    ``older_than=0`` finds them unreferenced, looks at one again right before its delete (no
    version references it) and is paused there (``before_unreferenced_delete``). The writer then
    commits its table versions naming the files and checks its files, all still there. On the
    code before, it went on to ``before_manifest_commit``, the cleanup's deletes landed, and the
    writer published versions whose data files were gone ("Not found ... .lance" reading a
    published table; CI, once in six runs of test_short_retention_cleanup_beside_live_writers).
    Now the cleanup marks the table while it deletes files younger than the floor, and the
    writer's file check waits for the mark to go (``waiting_for_cleanup``): it finds the files
    gone and fails with DataFilesMissingError, nothing published, every published row readable
    with plain pylance."""
    b1, b2 = batch(1, days=1), batch(2, days=1)  # the same partitions: nothing to reserve
    ns.write(b1.table(), batch_id="b1")
    version, parts = ns.manifest_version, ns.partitions()
    before = {p.location: data_files(join_uri(ns.root, p.location)) for p in parts}
    go = {k: f"{ns.root}.{k}" for k in ("fragments", "delete", "check", "publish")}
    writer = launch(ns.root, [b2.op(fault=f"after_fragments:wait:{go['fragments']},"
                                          f"waiting_for_cleanup:wait:{go['check']},"
                                          f"before_manifest_commit:wait:{go['publish']}")])
    wait_until_reached(go["fragments"], writer)
    _wait_for(lambda: all(data_files(join_uri(ns.root, loc)) - old for loc, old in before.items()))
    cleaner = run_cli("cleanup", ns.root, "--older-than", "0", "--allow-short-retention",
                      fault=f"before_unreferenced_delete:wait:{go['delete']}")
    wait_until_reached(go["delete"], cleaner)  # looked at a fragment of the writer: unreferenced
    release(go["fragments"])
    _wait_for(lambda: writer.poll() is not None or any(os.path.exists(go[k] + ".reached")
                                                       for k in ("check", "publish")))
    assert all(lance.dataset(join_uri(ns.root, p.location)).version > p.read_version for p in parts)
    for k in ("delete", "check", "publish"):
        release(go[k])
    out, err = cleaner.communicate(timeout=120)
    assert cleaner.returncode == 0, (out, err[-3000:])
    code, records, err = finish(writer)
    assert code == 0 and len(records) == 1, err[-3000:]
    assert published(ns.root) == list(range(b1.start, b1.start + b1.rows))  # every published file is there
    assert records[0].get("error") == "DataFilesMissingError", records
    assert lance.dataset(join_uri(ns.root, "__manifest")).version == version  # nothing published
    assert not os.path.exists(join_uri(ns.root, "_lancepart_deleting"))  # the marks went


# --------------------------------------------------------------------------- item 5: slow write

def _wait_for(pred, timeout: float = 60) -> None:
    end = time.time() + timeout
    while not pred():
        assert time.time() < end, "timed out"
        time.sleep(0.05)


def test_deletion_marks_made_at_once_by_many_threads_never_fail(tmp_path):
    """A cleanup marks each table whose young files it deletes (DeletionMark), one thread per
    table, and a mark's exit removes the mark directory once it is empty. Another thread's mark
    could then fail to be made: the directory went between ``makedirs``' own mkdir and its check
    (FileExistsError), and that table was skipped with an error (found by
    test_slow_write_fails_when_cleanup_removed_its_fragments failing one run in about 40: a
    cleanup removed 3 of the 4 orphans). 8 threads making and removing marks 300 times each
    (about 30 failures on the code before), and the directory is gone after."""
    from lancepart.write.guard import DELETING_DIR, DeletionMark

    root = str(tmp_path / "ns")
    os.makedirs(root)
    errors: list[str] = []

    def marks(k: int) -> None:
        for _ in range(300):
            try:
                with DeletionMark(root, f"table-{k}"):
                    pass
            except OSError as e:
                errors.append(repr(e))

    threads = [threading.Thread(target=marks, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert not os.path.exists(os.path.join(root, DELETING_DIR))


def test_slow_write_fails_when_cleanup_removed_its_fragments(ns):
    """A write slower than the retention: its process has written its fragments and is paused
    (``after_fragments:wait``) when a cleanup at ``allow_short_retention`` removes them as
    unreferenced. The write then fails with DataFilesMissingError naming the table and a file,
    nothing is published, and every earlier row still reads with plain pylance at its
    ``read_version`` (issue item 5: the write used to succeed and publish versions whose files
    were gone, making the partition unreadable)."""
    b1 = batch(1, days=1)
    ns.write(b1.table(), batch_id="b1")
    version = ns.manifest_version
    tables = {p.location: set(data_files(join_uri(ns.root, p.location))) for p in ns.partitions()}
    slow = batch(2, days=1)  # the same partitions: nothing to reserve
    go = ns.root + ".go"
    # every table's thread stands at the step until the cleanup is done (a sleep there could end
    # first on a loaded machine, and the table commits referenced the files before their delete)
    proc = launch(ns.root, [slow.op(fault=f"after_fragments:wait:{go}")])

    def new_files() -> dict[str, set[str]]:
        return {loc: data_files(join_uri(ns.root, loc)) - old for loc, old in tables.items()}

    wait_until_reached(go, proc)
    _wait_for(lambda: all(new_files().values()))  # every table got its fragment
    stats = cleanup(ns.root, ZERO, allow_short_retention=True)
    assert stats.orphan_files_removed >= len(tables), stats
    release(go)
    code, records, err = finish(proc)
    assert code == 0 and len(records) == 1, err[-3000:]
    assert records[0]["error"] == "DataFilesMissingError", records
    assert "partition table v1$" in records[0]["message"] and ".lance" in records[0]["message"]
    assert lance.dataset(join_uri(ns.root, "__manifest")).version == version  # nothing published
    assert published(ns.root) == list(range(b1.start, b1.start + b1.rows))


# --------------------------------------------------------------------------- item 12: the base is gone

def test_commit_rebases_when_cleanup_removed_its_manifest_base(ns):
    """A writer took its ``__manifest`` snapshot and committed its tables (paused at
    ``before_manifest_commit``); meanwhile another job published into other partitions and a
    cleanup at ``allow_short_retention`` removed the ``__manifest`` version the writer's commit
    was based on. The commit rebases on the latest version and publishes (issue item 12: it
    failed with "no __manifest table")."""
    b1 = batch(1, days=1)
    ns.write(b1.table(), batch_id="b1")
    base = ns.manifest_version
    slow = batch(2, days=1)  # the partitions of b1
    go = ns.root + ".go"
    proc = launch(ns.root, [slow.op(fault=f"before_manifest_commit:wait:{go}")])
    wait_until_reached(go, proc)
    other = _publish_elsewhere_and_clean_up(ns, base)
    release(go)
    code, records, err = finish(proc)
    assert code == 0 and len(records) == 1 and "error" not in records[0], (records, err[-3000:])
    assert records[0]["result"]["retries"] >= 1
    want = sorted([*range(b1.start, b1.start + b1.rows),
                   *range(slow.start, slow.start + slow.rows), *range(other.start, other.start + other.rows)])
    assert published(ns.root) == want


def test_publish_whose_first_attempt_lost_its_snapshot_publishes_its_rows(ns):
    """A write's first publish attempt took its ``__manifest`` snapshot and is paused
    (``before_batch_check``) before reading it; meanwhile another job publishes and a cleanup
    at ``allow_short_retention`` removes that snapshot's version. The attempt ends when it looks
    for its batch id (SnapshotGone) and the next one rebases. On the code before, the next
    attempt found no changes to plan (the list was handed out on the first attempt only), and
    committed the batch id alone: the write reported success with ``rows_written`` 0, its rows
    were never published, and a rerun would have skipped the batch (CI:
    test_short_retention_cleanup_beside_live_writers, "rows_written ... == len(want)"). Now
    the rows are published."""
    b1 = batch(1, days=1)
    ns.write(b1.table(), batch_id="b1")
    base = ns.manifest_version
    before = {p.location: data_files(join_uri(ns.root, p.location)) for p in ns.partitions()}
    slow = batch(2, days=1)
    go = ns.root + ".go"
    proc = launch(ns.root, [slow.op(fault=f"before_batch_check:wait:{go}")])
    wait_until_reached(go, proc)
    # the write's fragments look younger than the cleanup's cut-off: it removes the snapshot, not them
    later_time = time.time() + 3600
    for loc, old in before.items():
        for f in data_files(join_uri(ns.root, loc)) - old:
            os.utime(os.path.join(join_uri(ns.root, loc), f), (later_time, later_time))
    other = _publish_elsewhere_and_clean_up(ns, base)
    release(go)
    code, records, err = finish(proc)
    assert code == 0 and len(records) == 1 and "error" not in records[0], (records, err[-3000:])
    assert records[0]["result"]["rows_written"] == slow.rows, records
    want = sorted(i for b in (b1, slow, other) for i in range(b.start, b.start + b.rows))
    assert published(ns.root) == want


def _publish_elsewhere_and_clean_up(ns, base: int) -> Batch:
    """Another job publishes into other partitions (another day), then a cleanup at zero
    retention removes ``__manifest`` version ``base``; returns that job's batch."""
    other = Batch("other", 7 * BLOCK, 100, seed=9, days=1)
    other_table = other.table()
    other_table = other_table.set_column(1, "event_date", pa_shift_days(other_table.column("event_date"), 30))
    ns.write(other_table, batch_id="other")
    stats = cleanup(ns.root, ZERO, allow_short_retention=True)
    assert f"__manifest@v{base}" in stats.removed
    return other


def pa_shift_days(col, days: int):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.add(col.cast(pa.int32()), pa.scalar(days, pa.int32())).cast(pa.date32())


# --------------------------------------------------------------------------- items 15 and 11

def _chattr(flag: str, *paths: str) -> None:
    subprocess.run(["chattr", flag, *paths], check=True, capture_output=True)


@pytest.fixture
def immutable():
    """Make files undeletable on disk (``chattr +i``; even root cannot remove them), undone after."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr not available")
    made: list[str] = []

    def make(path: str) -> None:
        try:
            _chattr("+i", path)
        except subprocess.CalledProcessError as e:
            pytest.skip(f"chattr +i refused here: {e.stderr}")
        made.append(path)

    yield make
    if made:
        _chattr("-i", *made)


def test_cleanup_reports_only_what_it_removed(ns, immutable, capsys):
    """A version manifest and an unreferenced file that cannot be deleted (immutable on disk):
    the counts and ``removed`` name only what really went (they equal the bytes and files that
    left the disk), ``skipped`` names what was planned and left, and the CLI exits 3 (issue
    item 15: cleanup counted planned removals and exited 0)."""
    ns.write(batch(1).table(), batch_id="b1")
    ns.write(batch(2).table(), batch_id="b2")
    ns.write(batch(3).table(), batch_id="b3")
    p = ns.partitions()[0]
    uri = join_uri(ns.root, p.location)
    stuck_version = min(versions(uri))
    vdir = os.path.join(uri, "_versions")
    stuck_manifest = next(os.path.join(vdir, f) for f in os.listdir(vdir)
                          if f.endswith(".manifest") and f"{(1 << 64) - 1 - stuck_version:020d}" in f)
    immutable(stuck_manifest)
    frag = lance.fragment.write_fragments(batch(9).table().cast(ns.schema).slice(0, 3), uri,
                                          schema=ns.schema)[0].files[0].path
    immutable(os.path.join(uri, "data", frag))
    before, on_disk = ns.to_table().sort_by("id"), disk(ns.root)

    code, out, _ = cli(capsys, "--json", "cleanup", ns.root, "--older-than", "0", "--allow-short-retention")
    import json

    stats = json.loads(out)
    assert code == 3, out
    after = disk(ns.root)
    assert len(on_disk) - len(after) == stats["files_removed"]
    assert sum(on_disk.values()) - sum(after.values()) == stats["bytes_removed"]
    assert f"{p.location}@v{stuck_version}" not in stats["removed"]
    assert f"{p.location}@v{stuck_version}" in stats["skipped"]
    assert f"{p.location}/data/{frag}" in stats["skipped"] and f"{p.location}/data/{frag}" not in stats["removed"]
    assert stuck_version in versions(uri)
    assert PartitionedNamespace.open(ns.root).to_table().sort_by("id").equals(before)


def _manifest_version_with_own_file(root: str) -> tuple[int, str]:
    """An older ``__manifest`` version and a data file no other version references."""
    m = join_uri(root, "__manifest")
    ds = lance.dataset(m)
    files = {v: {df.path for f in ds.checkout_version(v).get_fragments() for df in f.data_files()}
             for v in range(1, ds.version + 1)}
    for v in range(ds.version - 1, 0, -1):
        own = files[v] - set().union(*(f for w, f in files.items() if w != v))
        if own:
            return v, sorted(own)[0]
    raise AssertionError("no __manifest version with a data file of its own")


@pytest.mark.parametrize("damage", ["truncated", "data_file_deleted"])
def test_corrupt_older_manifest_version_is_skipped_the_rest_cleaned(ns, damage, capsys):
    """An older ``__manifest`` version whose manifest file is truncated, or whose data file was
    deleted on disk: ``cleanup --dry-run`` and the real cleanup no longer fail; the partition
    tables are still cleaned (an old unreferenced fragment goes), CleanupStats.skipped names
    the damaged version, and the CLI exits 3 (issue item 11)."""
    ns.write(batch(1).table(), batch_id="b1")
    ns.write(batch(2).table(), batch_id="b2")
    m = join_uri(ns.root, "__manifest")
    v, own = _manifest_version_with_own_file(ns.root)
    if damage == "truncated":
        path = os.path.join(m, "_versions", f"{(1 << 64) - 1 - v:020d}.manifest")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    else:
        os.remove(os.path.join(m, "data", own))
    p = ns.partitions()[0]
    uri = join_uri(ns.root, p.location)
    frag = lance.fragment.write_fragments(batch(9).table().cast(ns.schema).slice(0, 3), uri,
                                          schema=ns.schema)[0].files[0].path
    backdate(os.path.join(uri, "data", frag), 7200)  # a dead job's fragment, two hours old
    before = ns.to_table().sort_by("id")

    code, out, _ = cli(capsys, "--json", "cleanup", ns.root, "--older-than", "1h", "--dry-run")
    import json

    dry = json.loads(out)
    assert code == 3 and f"__manifest@v{v}" in dry["skipped"], out
    assert f"{p.location}/data/{frag}" in dry["removed"]
    stats = ns.cleanup(timedelta(hours=1))
    assert f"__manifest@v{v}" in stats.skipped and any(f"__manifest@v{v}" in e for e in stats.errors)
    assert f"{p.location}/data/{frag}" in stats.removed and frag not in {f[5:] for f in data_files(uri)}
    assert f"data/{frag}" not in tracked(uri)
    assert PartitionedNamespace.open(ns.root).to_table().sort_by("id").equals(before)


def test_version_whose_files_are_young_is_kept(ns, monkeypatch):
    """A superseded, unpinned version whose data file the store dates after the cut-off (the
    writer's clock, which dated the version, is behind the store's): the version and its file
    stay, whatever ``older_than`` says, and go in a cleanup once the file is old (issue item 4:
    no file younger than the retention in force is deleted by any path). The cleanups run two
    hours later, past the floor that keeps the version before a commit that dropped
    unpublished fragments for its own reason."""
    ns.write(batch(1, days=1).table(), batch_id="b1")
    p = ns.partitions()[0]
    uri = join_uri(ns.root, p.location)
    extra = lance.dataset(uri, version=p.read_version).to_table().slice(0, 1)
    lance.write_dataset(extra, uri, mode="append")  # a job that committed and died before publishing
    dead = p.read_version + 1
    ns.write(batch(2, days=1).table(), batch_id="b2")  # its commit drops the dead job's fragment
    top = next(q.read_version for q in ns.refresh().partitions() if q.object_id == p.object_id)
    own = tracked_at(uri, dead) - tracked_at(uri, top)
    assert own, "the dead version has a file the published version does not"
    later(monkeypatch)
    future = time.time() + 3 * 3600  # after the cut-off of a cleanup two hours from now
    for f in own:
        os.utime(os.path.join(uri, f), (future, future))

    stats = ns.cleanup(timedelta(seconds=1), allow_short_retention=True)
    assert f"{p.location}@v{dead}" not in stats.removed and dead in versions(uri)
    assert all(os.path.exists(os.path.join(uri, f)) for f in own)
    for f in own:
        backdate(os.path.join(uri, f), 10)
    stats = ns.cleanup(timedelta(seconds=1), allow_short_retention=True)
    assert f"{p.location}@v{dead}" in stats.removed and dead not in versions(uri)
    assert not any(os.path.exists(os.path.join(uri, f)) for f in own)


def tracked_at(uri: str, version: int) -> set[str]:
    t = lance.dataset(uri).tracked_files().read_all()
    return {p for p, v in zip(t.column("path").to_pylist(), t.column("version").to_pylist(), strict=True)
            if v == version and p.startswith("data/")}
