"""History and time travel (issue 14 item 5; spec "Transaction / Read Behavior": a ``__manifest``
version pins every partition table's ``read_version``, so it is a snapshot of the namespace).

The oracle is plain pylance: the ``__manifest`` rows of a version, each table row's ``location``
opened at its ``read_version``.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import InvalidArgumentError, SnapshotExpiredError
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from tests.conftest import copy_ns, create_events_ns


def ids_at(root: str, version: int) -> list[int]:
    """Every id published by ``__manifest`` version ``version``, read with plain pylance."""
    out: list[int] = []
    for r in lance.dataset(join_uri(root, "__manifest"), version=version).to_table().to_pylist():
        if r["object_type"] == "table":
            t = lance.dataset(join_uri(root, r["location"]), version=r["read_version"])
            out += t.to_table(columns=["id"]).column("id").to_pylist()
    return sorted(out)


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


@pytest.fixture(scope="module")
def written_template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("history") / "ns")
    ns = create_events_ns(root)
    a = demo_events(300, seed=1, days=3)
    ns.write(a, batch_id="b1")
    ns.write(demo_events(200, seed=2, start_id=10_000, days=3))
    ns.write(demo_events(50, seed=3, start_id=20_000, days=1), mode="overwrite")
    ns.compact()
    return root


@pytest.fixture
def written(written_template, tmp_path):
    """A namespace with four publishes: append (batch b1), append, overwrite of one day, compact
    (a copy of the module's)."""
    return copy_ns(written_template, tmp_path / "ns")


def test_history_lists_every_commit_newest_first_with_what_it_did(written):
    h = written.history()
    assert [e.version for e in h] == sorted((e.version for e in h), reverse=True)
    assert h[0].version == written.manifest_version and h[-1].version == 1
    assert h[-1].operation == "create"
    done = [e.operation for e in h if e.operation not in ("index", "properties")]  # index/property upkeep
    assert done == ["compaction publish", "overwrite", "append", "append", "create"]
    writes = [e for e in h if e.operation in ("append", "overwrite")]
    assert [e.batch_id for e in writes] == [None, None, "b1"]
    assert [e.rows_written for e in writes] == [50, 200, 300]
    assert all(e.partitions_touched and e.partitions_touched > 0 for e in writes)
    assert all(e.timestamp.tzinfo is not None for e in h)
    assert [e.version for e in written.history(limit=2)] == [e.version for e in h[:2]]
    with pytest.raises(InvalidArgumentError, match="limit must be a positive integer"):
        written.history(limit=0)


def test_a_delete_records_the_rows_it_removed(written, capsys):
    """Issue item 5: history shows rows added and removed; a delete's commit records its count."""
    result = written.delete("id % 2 = 0")
    top = written.history(limit=1)[0]
    assert top.operation == "delete" and top.version == result.manifest_version
    assert top.rows_removed == result.details["rows_deleted"] > 0
    assert top.partitions_touched == result.partitions_touched
    assert main(["history", written.root, "--limit", "1"]) == 0
    assert f"delete rows_removed={top.rows_removed} partitions={top.partitions_touched}" in capsys.readouterr().out


def test_open_version_reads_that_snapshot_like_plain_pylance(written):
    """Each retained version, opened read-only, reads exactly what that ``__manifest`` version
    pins, also after later commits (a time-travel handle is not moved by writers)."""
    root = written.root
    with pytest.raises(InvalidArgumentError, match=r"version=1: __manifest version 1 of .* precedes the namespace's "
                                                   r"schema and partition spec"):
        PartitionedNamespace.open(root, version=1)
    for e in written.history():
        if e.version == 1:
            continue
        old = PartitionedNamespace.open(root, version=e.version)
        assert old.read_only and old.manifest_version == e.version
        assert ids(old.to_table(columns=["id"])) == ids_at(root, e.version), e
    v_append = next(e.version for e in written.history() if e.batch_id == "b1")
    old = PartitionedNamespace.open(root, version=v_append)
    written.write(demo_events(10, seed=9, start_id=90_000, days=1))  # a later publish
    assert ids(old.refresh().to_table(columns=["id"])) == ids(demo_events(300, seed=1, days=3))
    assert old.manifest_version == v_append
    assert len(ids(PartitionedNamespace.open(root).to_table(columns=["id"]))) > 300
    # its partitions are that version's table rows, with that version's read_version
    rows = lance.dataset(join_uri(root, "__manifest"), version=v_append).to_table().to_pylist()
    pins = {r["object_id"]: r["read_version"] for r in rows if r["object_type"] == "table"}
    assert {p.object_id: p.read_version for p in old.partitions()} == pins


def test_as_of_picks_the_latest_version_committed_at_or_before_it(root):
    ns = create_events_ns(root)
    ns.write(demo_events(100, seed=1, days=2))
    v1 = ns.manifest_version
    time.sleep(0.05)
    between = datetime.now(timezone.utc)
    time.sleep(0.05)
    ns.write(demo_events(100, seed=2, start_id=1_000, days=2))
    assert PartitionedNamespace.open(root, as_of=between).manifest_version == v1
    naive = between.replace(tzinfo=None)  # naive = UTC
    assert PartitionedNamespace.open(root, as_of=naive).manifest_version == v1
    assert PartitionedNamespace.open(root, as_of=datetime.now(timezone.utc)).manifest_version == ns.manifest_version
    with pytest.raises(SnapshotExpiredError, match="before every retained version: time travel reaches back to "
                                                   "__manifest version 1"):
        PartitionedNamespace.open(root, as_of=between - timedelta(days=1))


def test_bad_version_arguments_are_typed_errors(written):
    root, latest = written.root, written.manifest_version
    with pytest.raises(InvalidArgumentError, match=f"version={latest + 1}: the latest __manifest version of .* is "
                                                   f"{latest}"):
        PartitionedNamespace.open(root, version=latest + 1)
    for bad in (0, -1, "3", True):
        with pytest.raises(InvalidArgumentError, match="version must be a positive integer"):
            PartitionedNamespace.open(root, version=bad)
    with pytest.raises(InvalidArgumentError, match="exactly one of version= and as_of="):
        PartitionedNamespace.open(root, version=1, as_of=datetime.now(timezone.utc))
    with pytest.raises(InvalidArgumentError, match="as_of must be a datetime"):
        PartitionedNamespace.open(root, as_of="2025-01-01")


def test_a_time_travel_handle_cannot_commit(written):
    """Nothing a read-only handle is asked to do is published."""
    root = written.root
    v = written.history()[-2].version
    old = PartitionedNamespace.open(root, version=v)
    before = PartitionedNamespace.open(root).manifest_version
    calls = {
        "write": lambda: old.write(demo_events(5, seed=4, start_id=70_000)),
        "compact": old.compact,
        "cleanup": old.cleanup,
        "drop_partitions": lambda: old.drop_partitions("event_date IS NOT NULL"),
        "repair": old.repair,
        "evolve": lambda: old.evolve(old.current_spec.fields),
        "delete": lambda: old.delete("id >= 0"),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidArgumentError, match=f"{name}: this handle reads __manifest version {v} .* "
                                                       f"cannot commit"):
            call()
    assert PartitionedNamespace.open(root).manifest_version == before


def test_cleanup_sets_how_far_back_time_travel_reaches(written):
    """Versions a cleanup removed are a SnapshotExpiredError that says which version is the
    oldest left; every version history still lists opens and reads like plain pylance."""
    root = written.root
    dry = written.cleanup(older_than=timedelta(0), dry_run=True, allow_short_retention=True)
    stats = written.cleanup(older_than=timedelta(0), allow_short_retention=True)
    left = written.history()
    oldest = left[-1].version
    assert oldest > 1
    # the cleanup says how far back time travel reaches now (the dry run: would reach)
    assert stats.time_travel_from_version == dry.time_travel_from_version == oldest
    assert stats.time_travel_from == left[-1].timestamp.isoformat()
    with pytest.raises(SnapshotExpiredError, match=f"version=1 of .* is gone: time travel reaches back to "
                                                   f"__manifest version {oldest} "):
        PartitionedNamespace.open(root, version=1)
    for e in left:
        assert ids(PartitionedNamespace.open(root, version=e.version).to_table(columns=["id"])) == ids_at(root,
                                                                                                          e.version)


def test_cli_history(written, capsys):
    capsys.readouterr()
    assert main(["--json", "history", written.root, "--limit", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [e["version"] for e in out] == [e.version for e in written.history(limit=3)]
    assert out[0]["operation"] == written.history(limit=1)[0].operation and out[0]["timestamp"].endswith("+00:00")
    assert main(["history", written.root]) == 0
    text = capsys.readouterr().out
    assert "append batch_id=b1 rows=300" in text and text.splitlines()[-1].split()[-1] == "create"
