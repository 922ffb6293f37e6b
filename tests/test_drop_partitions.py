"""``ns.drop_partitions`` / ``lancepart drop-partitions`` (issue "Safety at the boundaries", item
10): one ``__manifest`` publish removes the partitions a filter selects entirely (spec
"Transaction / Commit Behavior"), and the namespace rows left without children; data stays for
cleanup. Real Lance tables, a real concurrent writer process, plain pylance to read what is
published."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import InvalidFilterError, LancepartError
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from tests.conftest import copy_ns, create_events_ns
from tests.procs import release, wait_until_reached

HERE = Path(__file__).resolve().parent
DAY1 = "event_date = DATE '2025-12-01'"




@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("drop") / "ns")
    create_events_ns(root).write(demo_events(600, seed=1, days=3))
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def published(root: str) -> list[dict]:
    """The __manifest rows as plain pylance reads them."""
    return lance.dataset(join_uri(root, "__manifest")).to_table().to_pylist()


def assert_no_dangling_read_version(root: str) -> None:
    """Every table row with a read_version opens at it with plain pylance."""
    for r in published(root):
        if r["object_type"] == "table" and r["read_version"] is not None:
            lance.dataset(join_uri(root, r["location"]), version=r["read_version"]).count_rows()


def test_drop_removes_the_partitions_and_their_namespace_rows_in_one_publish(ns):
    before = ns.manifest_version
    all_rows = ns.to_table()
    gone = ns.partitions(DAY1)
    assert len(gone) == 4
    result = ns.drop_partitions(DAY1)
    assert result.manifest_version == before + 1 and result.partitions_touched == 4
    assert sorted(d["object_id"] for d in result.details["dropped"]) == sorted(p.object_id for p in gone)
    rows = published(ns.root)
    oids = {r["object_id"] for r in rows}
    assert not oids & {p.object_id for p in gone}
    date_ns = gone[0].object_id.split("$")[:2]
    assert not [o for o in oids if o.startswith("$".join(date_ns))], "namespace rows of the dropped date remain"
    assert result.details["namespaces_removed"] == 5  # the date level and its four bucket levels
    assert "v1" in oids  # the spec version row stays
    remaining = ns.to_table()
    expected = all_rows.filter(pc.not_equal(all_rows.column("event_date"), dt.date(2025, 12, 1)))
    assert remaining.sort_by("id").equals(expected.sort_by("id"))
    for p in gone:  # data stays for cleanup
        assert os.path.isdir(join_uri(ns.root, p.location))
    assert ns.verify().ok


def test_dry_run_publishes_nothing_and_the_cli_lists_what_would_go(ns, capsys):
    before = ns.manifest_version
    assert main(["drop-partitions", ns.root, "--filter", DAY1, "--dry-run", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["details"]["dropped"]) == 4 and out["details"]["dry_run"] is True
    assert PartitionedNamespace.open(ns.root).manifest_version == before
    assert main(["drop-partitions", ns.root, "--filter", DAY1, "-q"]) == 0
    assert not PartitionedNamespace.open(ns.root).partitions(DAY1)


def test_a_filter_on_a_column_that_is_not_identity_partitioned_is_refused_and_nothing_is_published(ns):
    before = ns.manifest_version
    for f in ("user_id = 3", "country = 'US'", f"{DAY1} AND amount > 10", f"{DAY1} OR user_id = 7"):
        with pytest.raises(InvalidFilterError) as e:
            ns.drop_partitions(f)
        column = "user_id" if "user_id" in f else "country" if "country" in f else "amount"
        assert repr(column) in str(e.value)
    with pytest.raises(InvalidFilterError):
        ns.drop_partitions("")
    assert PartitionedNamespace.open(ns.root).manifest_version == before
    # partitions that cannot hold a matching row need no decision: nothing to drop, nothing published
    assert ns.drop_partitions("event_date = DATE '2030-01-01'").partitions_touched == 0
    assert PartitionedNamespace.open(ns.root).manifest_version == before


def test_ranges_and_null_on_identity_columns(ns):
    """NULL partition values follow SQL: ``event_date IS NULL`` drops the NULL partitions, and
    ``event_date >= ...`` never drops them (the filter is NULL there, not TRUE)."""
    nulls = demo_events(20, seed=9, start_id=10_000, days=1)
    ns.write(nulls.set_column(1, "event_date", pa.nulls(20, pa.date32())))
    n_null = len([p for p in ns.partitions() if p.values["event_date"] is None])
    assert n_null > 0
    n = len([p for p in ns.partitions() if p.values["event_date"] is not None
             and p.values["event_date"] >= dt.date(2025, 12, 2)])
    assert ns.drop_partitions("event_date BETWEEN DATE '2025-12-02' AND DATE '2025-12-31'").partitions_touched == n
    assert len([p for p in ns.partitions() if p.values["event_date"] is None]) == n_null
    assert ns.drop_partitions("event_date IS NULL").partitions_touched == n_null
    assert {p.values["event_date"] for p in ns.partitions()} == {dt.date(2025, 12, 1)}


def test_a_partition_whose_directory_was_deleted_can_be_dropped_and_written_again(ns):
    """Issue item 10: a deleted partition directory makes every write to it fail and there is no
    supported way out. drop_partitions is the way out: the next write creates a fresh table."""
    victim = ns.partitions(DAY1)
    for p in victim:
        shutil.rmtree(join_uri(ns.root, p.location))
    day1 = demo_events(200, seed=5, start_id=50_000, days=1)  # all on 2025-12-01
    with pytest.raises((LancepartError, OSError, ValueError)):
        ns.write(day1)
    ns.drop_partitions(DAY1)
    result = ns.write(day1)
    assert result.rows_written == 200
    fresh = ns.partitions(DAY1)
    assert {p.location for p in fresh}.isdisjoint({p.location for p in victim})
    assert ns.to_table(DAY1).num_rows == 200
    assert_no_dangling_read_version(ns.root)
    assert ns.verify(deep=True).ok


def writer(root: str, start: int, fault: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    env.pop("LANCEPART_FAULT", None)
    if fault:
        env["LANCEPART_FAULT"] = fault
    return subprocess.Popen([sys.executable, str(HERE / "writer_proc.py"), root, "--start", str(start),
                             "--rows", "300", "--days", "1"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_writer_that_published_before_the_drop_loses_its_rows_with_the_partition(ns):
    proc = writer(ns.root, 70_000)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    ns.refresh()
    assert ns.drop_partitions(DAY1).partitions_touched == 4
    assert ns.to_table(DAY1).num_rows == 0
    assert_no_dangling_read_version(ns.root)


def test_a_writer_whose_publish_comes_after_the_drop_publishes_nothing_and_its_rerun_gets_fresh_tables(ns):
    """The writer's tables are committed (its fragments written) and it sleeps before its
    __manifest commit; the drop lands meanwhile. Its publish must not move a read_version into a
    dropped table: it fails with nothing published, and the rerun reserves fresh tables."""
    old = {p.object_id: p.location for p in ns.partitions(DAY1)}
    go = ns.root + ".go"
    proc = writer(ns.root, 80_000, fault=f"after_table_commits:wait:{go}")
    wait_until_reached(go, proc)  # its table commits exist beyond the published versions
    assert any(lance.dataset(join_uri(ns.root, p.location)).version > p.read_version for p in ns.partitions(DAY1))
    ns.drop_partitions(DAY1)
    release(go)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "dropped" in (out + err) and "nothing was published" in (out + err)
    ns.refresh()
    assert ns.to_table(DAY1).num_rows == 0
    assert_no_dangling_read_version(ns.root)
    rerun = writer(ns.root, 80_000)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    ns.refresh()
    assert ns.to_table(DAY1).num_rows == 300
    assert {p.location for p in ns.partitions(DAY1)}.isdisjoint(old.values())
    assert_no_dangling_read_version(ns.root)
    assert ns.verify().ok


def test_a_stale_handle_drops_partitions_of_a_spec_evolved_since(ns):
    """drop_partitions works on the latest __manifest: partitions of a spec version added after
    the handle was opened are dropped too when the filter selects them entirely."""
    stale = PartitionedNamespace.open(ns.root)
    ns.evolve([{"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"},
                "result_type": {"type": "date32"}}])
    ns.write(demo_events(50, seed=4, start_id=90_000, days=1))
    assert {p.spec_id for p in ns.refresh().partitions(DAY1)} == {1, 2}
    stale.drop_partitions(DAY1)
    assert not ns.refresh().partitions(DAY1)
