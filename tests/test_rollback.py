"""``ns.rollback(N)`` / ``lancepart rollback`` (issue 14 item 5, conflict rules of item 6): the
partition tables of ``__manifest`` version N published again as a new version, in ONE commit
(spec "Transaction / Read Behavior": a ``__manifest`` version pins every table's
``read_version``), with ``read_version`` only ever moving forward. Batch ids published after N
are undone, so a rerun publishes them again; ids N had are skipped. Real Lance tables, real
processes; the oracle reads what is published with plain pylance."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import InvalidArgumentError
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from lancepart.write import batches
from tests.conftest import assert_read_versions_only_increase, copy_ns, create_events_ns, manifest_version
from tests.procs import run_cli, wait_for_unpublished_versions, write_rows

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("rollback") / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(400, seed=1, days=2), batch_id="b1")
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def published_ids(root: str, version: int | None = None) -> list[int]:
    """The ids every partition table pinned by __manifest ``version`` holds, read with plain pylance."""
    rows = lance.dataset(join_uri(root, "__manifest"), version=version).to_table().to_pylist()
    out: list[int] = []
    for r in rows:
        if r["object_type"] == "table" and r["read_version"] is not None:
            out += lance.dataset(join_uri(root, r["location"]), version=r["read_version"]).to_table(
                columns=["id"]).column("id").to_pylist()
    return sorted(out)


def test_rollback_publishes_the_old_snapshot_as_a_new_version(ns):
    """Appends to existing partitions, new partitions and a delete after N; rollback(N) reads
    exactly as N did, in one new __manifest version, every read_version moved forward."""
    n = manifest_version(ns.root)
    at_n = published_ids(ns.root)
    ns.write(demo_events(300, seed=2, start_id=10_000, days=4), batch_id="b2")  # 2 new days: new partitions
    ns.delete("id % 2 = 0")
    before = {p.object_id: p.read_version for p in ns.refresh().partitions()}
    result = ns.rollback(n)
    assert result.manifest_version == manifest_version(ns.root) == n + 3
    assert published_ids(ns.root) == at_n
    assert ns.to_table().num_rows == len(at_n)
    assert len(result.details["removed"]) > 0, "new partitions after N must leave __manifest"
    assert set(result.details["restored"]) == {p.object_id for p in PartitionedNamespace.open(ns.root, version=n)
                                              .partitions()}
    after = {p.object_id: p.read_version for p in ns.partitions()}
    assert set(after) == set(PartitionedNamespace.open(ns.root, version=n).partitions()[i].object_id
                             for i in range(len(after)))
    assert all(after[o] > before[o] for o in after), "read_version must move forward to a copy of N's version"
    assert_read_versions_only_increase(ns)
    assert result.details["undone_batch_ids"] == ["b2"]
    assert ns.history(limit=1)[0].operation == f"rollback to {n}"
    assert ns.verify().ok
    # the namespace keeps working: an append after the rollback adds to N's rows
    ns.write(demo_events(50, seed=3, start_id=20_000, days=1))
    assert published_ids(ns.root) == sorted(at_n + list(range(20_000, 20_050)))


def test_a_rolled_back_batch_id_publishes_again_and_an_older_one_is_still_skipped(ns):
    """The hazard: b2 published after N; the rollback removes its rows, so a rerun of b2 must
    publish (else its rows are lost), and b1 (in N) must still be skipped (else doubled)."""
    n = manifest_version(ns.root)
    ns.write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2")
    ns.rollback(n)
    rerun = ns.write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2")
    assert not rerun.skipped and rerun.rows_written == 100
    assert ns.write(demo_events(400, seed=1, days=2), batch_id="b1").skipped
    ids_now = published_ids(ns.root)
    assert len(ids_now) == len(set(ids_now)) == 500
    # once published again, b2 is skipped again
    assert ns.write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2").skipped


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "transactions"])
def test_rolling_forward_again_redoes_the_batch_ids_it_brings_back(ns, indexed):
    """rollback(N) undoes b2; rollback(M), M the version that published b2, brings b2's rows
    back, so b2 is skipped again. Looked up through the batch index, and through the commits'
    transactions alone (an index behind, as after a writer killed before indexing)."""
    n = manifest_version(ns.root)
    m = ns.write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2").manifest_version
    ns.rollback(n)
    if not indexed:
        import shutil
        shutil.rmtree(join_uri(ns.root, batches.INDEX_DIR))
    result = ns.rollback(m)
    assert result.details["redone_batch_ids"] == ["b2"]
    assert published_ids(ns.root) == published_ids(ns.root, m)
    if not indexed:
        shutil.rmtree(join_uri(ns.root, batches.INDEX_DIR))
    assert ns.write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2").skipped
    assert len(published_ids(ns.root)) == 500


def test_an_index_made_before_rollbacks_gains_the_undone_column(ns):
    """The batch index of an older release has no ``undone`` column: appends that undo nothing go
    in without it; the first rollback that undoes an id adds it."""
    uri = join_uri(ns.root, batches.INDEX_DIR)
    old = lance.dataset(uri).to_table().drop_columns(["undone"])
    lance.write_dataset(old, uri, mode="overwrite", schema=old.schema)
    n = manifest_version(ns.root)
    batches.index_batches(ns.manifest)  # nothing new to add: the old index stays as it is
    ns.write(demo_events(10, seed=2, start_id=10_000, days=1), batch_id="b2")
    assert "undone" not in lance.dataset(uri).schema.names
    ns.rollback(n)
    assert "undone" in lance.dataset(uri).schema.names
    assert not ns.write(demo_events(10, seed=2, start_id=10_000, days=1), batch_id="b2").skipped


def test_dropped_partitions_come_back(ns):
    n = manifest_version(ns.root)
    at_n = published_ids(ns.root)
    ns.drop_partitions("event_date = DATE '2025-12-01'")
    assert len(published_ids(ns.root)) < len(at_n)
    result = ns.rollback(n)
    assert result.details["brought_back"]
    assert published_ids(ns.root) == at_n
    assert {p.object_id for p in ns.partitions()} == {p.object_id for p in
                                                     PartitionedNamespace.open(ns.root, version=n).partitions()}
    assert ns.verify().ok


def test_rollback_to_the_current_state_publishes_nothing(ns):
    v = manifest_version(ns.root)
    result = ns.rollback(v)
    assert result.partitions_touched == 0 and manifest_version(ns.root) == v


def test_a_rollback_to_the_snapshot_already_read_publishes_nothing(ns):
    """Issue 21 item 6: after rollback(N), the namespace reads as N did, through copies of N's
    table versions; rollback(N) again (or to the version the first rollback made) published a
    new __manifest version touching every partition. It publishes nothing (docs/history.md)."""
    n = manifest_version(ns.root)
    ns.write(demo_events(100, seed=2, start_id=10_000, days=2), batch_id="b2")
    first = ns.rollback(n)
    assert first.partitions_touched > 0
    v = manifest_version(ns.root)
    pins = {p.object_id: p.read_version for p in ns.partitions()}
    for target in (n, first.manifest_version):
        again = ns.rollback(target)
        assert (again.partitions_touched, again.details["restored"], again.details["removed"]) == (0, [], []), target
        assert again.manifest_version == manifest_version(ns.root) == v
    assert {p.object_id: p.read_version for p in ns.refresh().partitions()} == pins
    assert published_ids(ns.root) == published_ids(ns.root, n)
    # a table whose published version differs from N's in content is still restored
    ns.delete("id % 2 = 0")
    assert ns.rollback(n).partitions_touched > 0 and published_ids(ns.root) == published_ids(ns.root, n)


def test_refused_versions_and_read_only_handles_publish_nothing(ns):
    v = manifest_version(ns.root)
    with pytest.raises(InvalidArgumentError, match="latest"):
        ns.rollback(v + 5)
    with pytest.raises(InvalidArgumentError, match="positive integer"):
        ns.rollback(0)
    with pytest.raises(InvalidArgumentError, match="cannot commit"):
        PartitionedNamespace.open(ns.root, version=v).rollback(v)
    assert manifest_version(ns.root) == v


def _cli(root: str, *args: str, fault: str | None = None) -> subprocess.Popen:
    return run_cli(*args, root, fault=fault)


def _write(root: str, start: int, batch_id: str) -> dict:
    return write_rows(root, start, rows=100, batch_id=batch_id)


def test_a_publish_that_lands_first_is_rolled_back_too_and_its_batch_id_undone(ns):
    """Item 6: the rollback has its table versions committed and waits before its __manifest
    commit; a real writer process publishes b3 first. The rollback's commit conflicts and is
    recomputed: the result reads as N, and b3 is undone, so its rerun publishes (no row lost)."""
    n = manifest_version(ns.root)
    at_n = published_ids(ns.root)
    ns.write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2")
    go = ns.root + ".go"
    proc = _cli(ns.root, "rollback", "--version", str(n), fault=f"before_manifest_commit:wait:{go}")
    wait_for_unpublished_versions(ns, proc)
    _write(ns.root, 30_000, "b3")
    Path(go).touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["retries"] >= 1, "the rollback did not have to rebase: the test did not exercise the conflict"
    assert published_ids(ns.root) == at_n
    assert result["details"]["undone_batch_ids"] == ["b2", "b3"]
    assert not _write(ns.root, 30_000, "b3")["skipped"]
    assert published_ids(ns.root) == sorted(at_n + list(range(30_000, 30_100)))
    assert_read_versions_only_increase(ns.refresh())


def test_kill_before_the_manifest_commit_changes_nothing_visible(ns):
    """kill -9 (os._exit) after the table commits, before __manifest: nothing published changed,
    b2 is still skipped; a rerun of the rollback does it."""
    n = manifest_version(ns.root)
    at_n = published_ids(ns.root)
    ns.write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2")
    v, now = manifest_version(ns.root), published_ids(ns.root)
    proc = _cli(ns.root, "rollback", "--version", str(n), fault="before_manifest_commit:exit")
    proc.communicate(timeout=120)
    assert proc.returncode == 77
    assert manifest_version(ns.root) == v and published_ids(ns.root) == now
    assert ns.refresh().write(demo_events(100, seed=2, start_id=10_000, days=1), batch_id="b2").skipped
    assert ns.rollback(n).manifest_version == v + 1
    assert published_ids(ns.root) == at_n


def test_cli_rollback(ns, capsys):
    n = manifest_version(ns.root)
    ns.write(demo_events(50, seed=2, start_id=10_000, days=1))
    assert main(["rollback", ns.root, "--version", str(n), "-q"]) == 0
    out = capsys.readouterr().out
    assert f"rolled {ns.root} back to version {n}" in out
    assert main(["--json", "history", ns.root, "--limit", "1"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["operation"] == f"rollback to {n}"
    assert main(["rollback", ns.root, "--version", "999"]) == 2


def test_new_partition_columns_from_an_evolution_are_null_in_rows_brought_back(ns):
    """A spec evolution after N adds __manifest columns; a table dropped after N comes back with
    them NULL, and the evolved spec stays (specs only grow)."""
    n = manifest_version(ns.root)
    ns.evolve([{"source_ids": [3], "transform": {"type": "identity"}, "result_type": {"type": "utf8"},
                "field_id": "country"}])
    ns.drop_partitions("event_date = DATE '2025-12-01'")
    ns.rollback(n)
    assert published_ids(ns.root) == published_ids(ns.root, n)
    assert len(ns.refresh().specs) == 2
    ns.write(demo_events(20, seed=4, start_id=40_000, days=1))
    assert len(published_ids(ns.root)) == 420
    assert ns.verify().ok


def test_rows_of_other_tables_in_the_root_are_left_alone(ns):
    """A foreign tool's root-level table (a directory namespace table, not a partition) is not
    the rollback's to remove."""
    from lancepart.storage.manifest import ManifestChanges, rows_from_records

    n = manifest_version(ns.root)
    lance.write_dataset(pa.table({"a": [1]}), join_uri(ns.root, "foreign_tbl.lance"))

    def add_foreign(snap):  # after N: a rollback removing every table N lacked would take it
        row = rows_from_records(snap.schema, [{"object_id": "foreign_tbl", "object_type": "table",
                                               "location": "foreign_tbl.lance"}])
        return ManifestChanges(upserts=row), None

    ns.manifest.update(add_foreign, what="foreign table")
    ns.write(demo_events(20, seed=2, start_id=10_000, days=1))
    ns.rollback(n)
    rows = lance.dataset(join_uri(ns.root, "__manifest")).to_table().to_pylist()
    assert "foreign_tbl" in {r["object_id"] for r in rows}
    assert published_ids(ns.root) == published_ids(ns.root, n)


def test_rollback_unpins_a_table_a_foreign_tool_pinned_to_a_tag_since(ns):
    """Rollback (docs/history.md) makes the namespace read as snapshot N did. A table N pinned at a
    main version that a foreign tool has pinned to a Lance tag since (spec "Read Behavior":
    read_tag wins over read_version) gets N's row back: pinned to N's version, tag cleared; the
    tag must not survive beside the restored read_version and keep readers on the tag."""
    import pyarrow.compute as pc

    n = manifest_version(ns.root)
    then = ns.to_table()
    before = {p.object_id for p in ns.partitions()}
    ns.write(demo_events(500, seed=11, start_id=50_000, days=3))
    moved = [p for p in ns.partitions() if p.object_id in before]
    part = sorted(moved, key=lambda p: p.object_id)[0]
    uri = join_uri(ns.root, part.location)
    lance.dataset(uri).tags.create("later", part.read_version)

    def pin_tag(snap):
        rows = snap.rows
        i = rows.schema.get_field_index("read_tag")
        hit = pc.equal(rows.column("object_id"), part.object_id)
        return rows.set_column(i, rows.schema.field(i), pc.if_else(hit, pa.scalar("later"), rows.column(i))), None

    ns.manifest.update(pin_tag)
    ns.refresh()
    ns.rollback(n)
    now = PartitionedNamespace.open(ns.root)
    row = {p.object_id: p for p in now.partitions()}[part.object_id]
    assert row.read_tag is None and row.read_branch is None
    assert sorted(now.to_table().column("id").to_pylist()) == sorted(then.column("id").to_pylist())
