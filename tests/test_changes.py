"""The change feed (``ns.changes``, ``lancepart changes``) over a history of every kind of commit.

The oracle is time travel (spec "Transaction / Read Behavior": a ``__manifest`` version pins every
table's ``read_version``, so it is a snapshot): for each commit ``v``, the snapshot at ``v - 1``
minus the rows the feed says were deleted plus those it says were inserted is exactly the
snapshot at ``v``, and every deleted row was in the snapshot at ``v - 1``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from datetime import timedelta

import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import InvalidArgumentError, SnapshotExpiredError
from lancepart.util.sample import demo_events
from tests.conftest import create_events_ns

COLS = ["id", "event_date", "country", "user_id", "amount"]
DELETED = ("delete", "update_preimage")
INSERTED = ("insert", "update_postimage")


def as_rows(t: pa.Table, cols=COLS) -> Counter:
    return Counter(tuple(r[c] for c in cols) for r in t.select(cols).to_pylist())


def snapshot(root: str, v: int, flt: str | None = None) -> Counter:
    return as_rows(PartitionedNamespace.open(root, version=v).to_table(flt))


def check_commit(root: str, v: int, feed: pa.Table, flt: str | None = None) -> None:
    """The feed's rows of commit ``v`` turn the snapshot at ``v - 1`` into the one at ``v``."""
    mine = feed.filter(pa.compute.equal(feed.column("_commit_version"), v))
    before, after = snapshot(root, v - 1, flt), snapshot(root, v, flt)
    kinds = mine.column("_change_type").to_pylist()
    deleted = as_rows(mine.filter(pa.array([k in DELETED for k in kinds], pa.bool_())))
    inserted = as_rows(mine.filter(pa.array([k in INSERTED for k in kinds], pa.bool_())))
    assert not deleted - before, f"commit {v}: deleted rows that were not published: {deleted - before}"
    assert before - deleted + inserted == after, f"commit {v}: the feed does not turn v-1 into v"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A namespace with one commit of each kind; returns (root, {operation: version})."""
    root = str(tmp_path_factory.mktemp("changes") / "ns")
    ns = create_events_ns(root)
    at: dict[str, int] = {"start": ns.manifest_version}
    data = demo_events(6_000, seed=11)
    at["append"] = ns.write(data.slice(0, 3_000)).manifest_version
    at["append2"] = ns.write(data.slice(3_000)).manifest_version
    at["delete"] = ns.delete("country = 'FR' AND amount > 20").manifest_version
    # merge: 40 existing ids move to another day (another partition), 40 get a new amount, 10 are new
    t = data.slice(0, 80).to_pylist()
    for r in t[:40]:
        r["event_date"] = dt.date(2025, 12, 20)
    for r in t[40:]:
        r["amount"] = 999.0
    t += [{**r, "id": 1_000_000 + i} for i, r in enumerate(data.slice(100, 10).to_pylist())]
    at["merge"] = ns.merge(pa.Table.from_pylist(t, schema=data.schema), on=["id"]).manifest_version
    day = "event_date = DATE '2025-12-03'"
    rw = demo_events(500, seed=12, start_id=2_000_000)
    rw = rw.set_column(1, "event_date", pa.array([dt.date(2025, 12, 3)] * rw.num_rows, pa.date32()))
    at["replace_where"] = ns.write(rw, mode="overwrite", where=day).manifest_version
    at["compact"] = ns.compact().manifest_version
    at["update_schema"] = ns.update_schema(add=[pa.field("note", pa.utf8())]).manifest_version
    ns = PartitionedNamespace.open(root)
    extra = demo_events(300, seed=13, start_id=3_000_000).append_column("note", pa.array(["n"] * 300))
    at["append3"] = ns.write(extra).manifest_version
    at["drop"] = ns.drop_partitions("event_date = DATE '2025-12-01'").manifest_version
    at["rollback"] = ns.rollback(at["merge"]).manifest_version
    at["overwrite"] = ns.write(demo_events(700, seed=14, start_id=4_000_000), mode="overwrite").manifest_version
    return root, at


def test_every_commit_of_the_history_turns_its_parent_into_itself(history):
    root, at = history
    ns = PartitionedNamespace.open(root)
    feed = ns.changes(at["start"]).read_all()
    assert feed.schema.names == [*ns.schema.names, "_change_type", "_commit_version", "_commit_timestamp"]
    assert set(feed.column("_commit_version").to_pylist()) <= set(range(at["start"] + 1, ns.manifest_version + 1))
    for v in range(at["append"], ns.manifest_version + 1):
        check_commit(root, v, feed)


def test_kinds_of_change_per_operation(history):
    root, at = history
    ns = PartitionedNamespace.open(root)
    feed = ns.changes(at["start"]).read_all().to_pylist()

    def kinds(op: str) -> Counter:
        return Counter(r["_change_type"] for r in feed if r["_commit_version"] == at[op])

    assert kinds("append") == Counter(insert=3_000)
    assert set(kinds("delete")) == {"delete"}
    merge = kinds("merge")
    # amounts changed in place: pre/post images; moved to another day: delete + insert; new ids (and
    # ids the delete removed): insert
    rows = demo_events(6_000, seed=11).slice(0, 80).to_pylist()
    alive = [not (r["country"] == "FR" and r["amount"] > 20) for r in rows]
    assert merge["update_preimage"] == merge["update_postimage"] == sum(alive[40:])
    assert merge["delete"] == sum(alive[:40])
    assert merge["insert"] == 80 - sum(alive[40:]) + 10
    pre = {r["id"]: r for r in feed if r["_commit_version"] == at["merge"] and r["_change_type"] == "update_preimage"}
    post = {r["id"]: r for r in feed if r["_commit_version"] == at["merge"] and r["_change_type"] == "update_postimage"}
    assert pre.keys() == post.keys() and all(post[i]["amount"] == 999.0 != pre[i]["amount"] for i in pre)
    for op in ("compact", "update_schema"):
        assert kinds(op) == Counter(), f"{op} changes no row"
    assert set(kinds("replace_where")) == {"delete", "insert"}
    assert set(kinds("drop")) == {"delete"}
    assert kinds("rollback")["insert"] > 0 and kinds("rollback")["delete"] > 0
    times = {r["_commit_version"]: r["_commit_timestamp"] for r in feed}
    hist = {e.version: e.timestamp for e in ns.history()}
    assert all(times[v] == hist[v] for v in times)


def test_ranges_compose_and_end_version_bounds(history):
    root, at = history
    ns = PartitionedNamespace.open(root)
    whole = ns.changes(at["start"]).read_all()
    parts = [ns.changes(a, b).read_all() for a, b in [(at["start"], at["merge"]), (at["merge"], ns.manifest_version)]]
    assert sorted(map(str, whole.to_pylist())) == sorted(map(str, pa.concat_tables(parts).to_pylist()))
    assert ns.changes(at["merge"], at["merge"]).read_all().num_rows == 0
    with pytest.raises(InvalidArgumentError, match="after end_version"):
        ns.changes(at["merge"], at["append"])
    with pytest.raises(InvalidArgumentError, match="latest"):
        ns.changes(at["start"], ns.manifest_version + 5)


@pytest.mark.parametrize("flt", ["country = 'US'", "event_date = DATE '2025-12-03'", "amount > 500"])
def test_filtered_feed_is_the_feed_of_the_filtered_rows(history, flt):
    root, at = history
    ns = PartitionedNamespace.open(root)
    feed = ns.changes(at["start"], filter=flt, columns=COLS).read_all()
    assert feed.schema.names == [*COLS, "_change_type", "_commit_version", "_commit_timestamp"]
    for v in range(at["append"], ns.manifest_version + 1):
        if v == at["update_schema"] + 1 or v == at["update_schema"]:
            continue  # time travel before/after a column was added reads other columns; COLS are common
        check_commit(root, v, feed, flt)


def test_cleanup_cut_range_is_snapshot_expired_naming_the_oldest(tmp_path, monkeypatch):
    from tests.test_cleanup import later

    ns = create_events_ns(str(tmp_path / "ns"))
    first = ns.manifest_version
    for i in range(3):
        ns.write(demo_events(200, seed=i, start_id=i * 1_000))
    later(monkeypatch)
    ns.cleanup(older_than=timedelta(0), allow_short_retention=True)
    ns = PartitionedNamespace.open(ns.root)
    oldest = min(e.version for e in ns.history())
    with pytest.raises(SnapshotExpiredError, match=f"reaches back to version {oldest}"):
        ns.changes(first)
    assert ns.changes(oldest).read_all().num_rows == 0  # nothing after the latest, the only one left


def test_feed_planned_then_cut_by_a_cleanup_is_snapshot_expired_naming_the_oldest(tmp_path, monkeypatch):
    """issue 30 item 7: ns.changes plans from __manifest and reads as the reader is consumed. A
    cleanup in between removed the versions it was about to read and the table versions they
    pinned: SnapshotExpiredError naming the oldest version, as for a range cut before planning (it
    was CorruptTableError, "partition table ... cannot be opened")."""
    from tests.test_cleanup import later

    ns = create_events_ns(str(tmp_path / "ns"))
    ns.write(demo_events(300, seed=1))
    first = ns.manifest_version
    for i in range(3):
        ns.write(demo_events(100, seed=i + 2, start_id=(i + 1) * 1_000))
    reader = ns.changes(first)  # planned now, read below
    ns.write(demo_events(100, seed=9, start_id=9_000))
    later(monkeypatch)
    ns.cleanup(older_than=timedelta(0), allow_short_retention=True)
    oldest = min(e.version for e in PartitionedNamespace.open(ns.root).history())
    assert oldest > first + 1
    with pytest.raises(SnapshotExpiredError, match=f"is gone .*reaches back to version {oldest}: start from "):
        reader.read_all()


def test_cli_changes_prints_json_lines(history, capsys):
    root, at = history
    assert main(["changes", root, "--from", str(at["append2"]), "--to", str(at["delete"])]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert lines and all(x["_commit_version"] == at["delete"] and x["_change_type"] == "delete" for x in lines)


def test_cli_output_piped_into_head_ends_quietly(history):
    """`lancepart changes ROOT --from N | head -1`: the reader stops early; the command exits 0
    without a BrokenPipeError."""
    import os
    import subprocess
    import sys

    root, at = history
    lancepart = os.path.join(os.path.dirname(sys.executable), "lancepart")
    run = subprocess.run(["bash", "-c", f"set -o pipefail; '{lancepart}' changes '{root}' --from {at['start']} "
                                        f"| head -1"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 1 and "BrokenPipe" not in run.stderr


def test_a_rollback_that_moves_rows_back_between_tables_reports_only_real_changes(root):
    """A merge under a newer spec rewrites the rows it updates into tables of that spec (here with
    the same values); a rollback to before it moves them back into the tables they left. The feed
    of the rollback compares whole rows across every table it changed: rows it republishes
    unchanged are no change, only the merge's real updates come back as changes (the rows were
    deleted from one table and inserted into another: a per-table comparison reported both)."""
    ns = create_events_ns(root)
    data = demo_events(200, seed=21)
    ns.write(data)
    before = ns.manifest_version
    ns.update_spec([{"source_ids": [1], "transform": {"type": "identity"}, "result_type": {"type": "date32"}}])
    same = data.slice(0, 30)  # updated to the values they hold
    changed = data.slice(30, 5).set_column(data.schema.get_field_index("amount"), "amount",
                                           pa.array([12345.0] * 5))
    ns.merge(pa.concat_tables([same, changed]), on=["id"])
    moved = {p.object_id for p in ns.partitions() if p.spec_id == 2}
    assert moved, "the merge wrote into tables of the new spec"
    v = ns.rollback(before).manifest_version
    feed = ns.changes(v - 1).read_all().to_pylist()
    assert {r["_commit_version"] for r in feed} == {v}
    deleted = sorted((r["id"], r["amount"]) for r in feed if r["_change_type"] == "delete")
    inserted = sorted((r["id"], r["amount"]) for r in feed if r["_change_type"] == "insert")
    assert deleted == sorted((r["id"], 12345.0) for r in changed.to_pylist())
    assert inserted == sorted((r["id"], r["amount"]) for r in data.slice(30, 5).to_pylist())
    assert sorted(ns.to_table().column("id").to_pylist()) == sorted(data.column("id").to_pylist())


@pytest.fixture
def deleted_twice(tmp_path):
    """A namespace with a sparse delete (array deletion files) then a dense one (bitmap files:
    Lance writes one from about 5 000 deleted rows in a fragment)."""
    root = str(tmp_path / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(40_000, seed=21, days=1))  # 4 tables of about 10 000 rows
    ns.delete("id % 50 = 3")
    ns.delete("id % 3 <> 0")
    return root


def test_deletes_are_read_from_the_deletion_files_and_taken_not_scanned(deleted_twice, monkeypatch):
    """The rows a delete removed come from comparing the fragments' deletion files (array and
    bitmap) at the two versions, then one take per table of those rows: no fragment is scanned."""
    import lance

    scans, takes = [], []
    real_scanner, real_take = lance.LanceDataset.scanner, lance.LanceDataset._take_rows
    monkeypatch.setattr(lance.LanceDataset, "scanner", lambda self, *a, **k: scans.append(self.uri)
                        or real_scanner(self, *a, **k))
    monkeypatch.setattr(lance.LanceDataset, "_take_rows", lambda self, *a, **k: takes.append(self.uri)
                        or real_take(self, *a, **k))
    ns = PartitionedNamespace.open(deleted_twice)
    kinds = {f.metadata.deletion_file.file_type for p in ns.partitions()
             for f in lance.dataset(f"{ns.root}/{p.location}", version=p.read_version).get_fragments()}
    assert kinds == {"bitmap"}
    kinds_before = {f.metadata.deletion_file.file_type for p in PartitionedNamespace.open(
        deleted_twice, version=ns.manifest_version - 1).partitions()
        for f in lance.dataset(f"{ns.root}/{p.location}", version=p.read_version).get_fragments()}
    assert kinds_before == {"array"}
    scans.clear()
    feed = ns.changes(ns.manifest_version - 2).read_all()
    tables = [u for u in scans if not u.endswith("__manifest")]
    assert tables == [] and len(takes) == 2 * len(ns.partitions())
    for v in (ns.manifest_version - 1, ns.manifest_version):
        check_commit(deleted_twice, v, feed)
    left = ns.to_table(columns=["id"]).num_rows
    assert Counter(feed.column("_change_type").to_pylist()) == Counter(delete=40_000 - left)


def test_a_deletion_file_lancepart_does_not_read_is_compared_through_lance(deleted_twice, monkeypatch):
    from lancepart.storage import deletion_files

    ns = PartitionedNamespace.open(deleted_twice)
    read_by_lancepart = ns.changes(ns.manifest_version - 2).read_all()
    monkeypatch.setattr(deletion_files, "deleted_offsets", lambda *a, **k: None)
    through_lance = ns.changes(ns.manifest_version - 2).read_all()
    assert as_rows(through_lance) == as_rows(read_by_lancepart)
    for v in (ns.manifest_version - 1, ns.manifest_version):
        check_commit(deleted_twice, v, through_lance)


@pytest.mark.parametrize("on", [["x"], ["x", "p"]])
def test_merge_on_float_keys_pairs_images_as_the_merge_compared_them(tmp_path, on):
    """-0.0 and 0.0 are one key and NaN equals NaN, as the merge compares keys (docs/merge.md): an
    updated row is an update_preimage and an update_postimage, whether one key column (paired by
    hash lookups) or several (by a join)."""
    schema = pa.schema([pa.field("x", pa.float64(), nullable=False), pa.field("p", pa.int64(), nullable=False),
                        pa.field("v", pa.int64())])
    spec = {"id": 1, "fields": [{"field_id": "p", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int64"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "floats"), schema, spec)
    ns.write(pa.table({"x": [-0.0, 1.0, float("nan"), 2.5], "p": [1, 1, 1, 1], "v": [1, 2, 3, 4]}, schema=schema))
    ns.merge(pa.table({"x": [0.0, float("nan"), 3.0], "p": [1, 1, 1], "v": [10, 30, 50]}, schema=schema), on=on)
    feed = ns.changes(ns.manifest_version - 1).read_all()
    got = Counter((r["_change_type"], r["v"]) for r in feed.to_pylist())
    assert got == Counter({("update_preimage", 1): 1, ("update_postimage", 10): 1, ("update_preimage", 3): 1,
                           ("update_postimage", 30): 1, ("insert", 50): 1})
