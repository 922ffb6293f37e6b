"""Snapshot reads with pruning, end to end on real Lance tables (spec "Partition Pruning",
"Transaction / Read Behavior")."""

from __future__ import annotations

import datetime as dt
import json
import os

import datafusion
import lance
import pytest

from lancepart.cli.commands import EXIT_OK, main
from lancepart.util.sample import demo_events
from tests.conftest import copy_ns, create_events_ns

FILTERS = [
    "event_date = DATE '2025-12-03'",
    "event_date = DATE '2025-12-03' AND user_id = 12345",
    "event_date >= DATE '2025-12-02' AND event_date < DATE '2025-12-05' AND country = 'FR'",
    "user_id IN (1, 2, 3, 777777) OR country = 'JP'",
    "NOT (event_date = DATE '2025-12-01') AND amount > 50",
    "country LIKE 'D%'",
    "event_date IS NULL",
]


@pytest.fixture(scope="module")
def written_template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("read") / "ns")
    create_events_ns(root).write(demo_events(20_000, seed=17))
    return root


@pytest.fixture
def written(written_template, tmp_path):
    """A copy of the module's namespace of 20 000 demo events (28 partition tables), and the events."""
    return copy_ns(written_template, tmp_path / "ns"), demo_events(20_000, seed=17)


@pytest.mark.parametrize("flt", FILTERS)
def test_pruned_read_equals_brute_force(written, flt):
    ns, data = written
    ctx = datafusion.SessionContext()
    ctx.register_record_batches("t", [data.to_batches()])
    expected = sorted(ctx.sql(f"SELECT id FROM t WHERE {flt}").to_arrow_table().column("id").to_pylist())
    got = ns.to_table(flt, columns=["id"])
    assert sorted(got.column("id").to_pylist()) == expected
    assert got.schema.names == ["id"]


def test_point_lookup_prunes(written):
    ns, _ = written
    assert len(ns.partitions()) == 28
    assert len(ns.partitions("event_date = DATE '2025-12-03' AND user_id = 12345")) == 1
    assert len(ns.partitions("event_date = DATE '2025-12-03'")) == 4
    assert "kept 1 of 28" in ns.explain("event_date = DATE '2025-12-03' AND user_id = 12345")


def test_rows_behind_lancepart_s_back_stay_invisible(written):
    """Rows a table holds beyond its read_version (a direct write, a dead job) are never visible."""
    ns, data = written
    before = ns.to_table().num_rows
    p = ns.partitions()[0]
    intruders = data.slice(0, 5).cast(ns.schema)
    lance.write_dataset(intruders, os.path.join(ns.root, p.location), mode="append")
    assert lance.dataset(os.path.join(ns.root, p.location)).version > p.read_version
    assert ns.refresh().to_table().num_rows == before


def test_tag_and_branch_reads(written):
    """Read Behavior: read_tag reads the tagged version; read_branch + read_version that branch's version."""
    from lancepart.read.snapshot import open_partition
    from lancepart.results import PartitionInfo

    ns, _ = written
    p = ns.partitions()[0]
    uri = os.path.join(ns.root, p.location)
    ds = lance.dataset(uri)
    n = lance.dataset(uri, version=p.read_version).count_rows()
    ds.tags.create("golden", p.read_version)
    lance.write_dataset(demo_events(3, start_id=10**6).cast(ns.schema), uri, mode="append")
    tagged = PartitionInfo(p.object_id, p.location, p.spec_id, p.values, None, None, "golden")
    assert open_partition(ns.root, tagged).count_rows() == n
    branch = lance.dataset(uri).create_branch("exp", p.read_version)
    pinned = branch.version
    lance.write_dataset(demo_events(2, start_id=2 * 10**6).cast(ns.schema), branch, mode="append")
    on_branch = PartitionInfo(p.object_id, p.location, p.spec_id, p.values, pinned, "exp", None)
    assert open_partition(ns.root, on_branch).count_rows() == n  # the branch's later rows stay invisible


def test_cli_explain_and_filtered_partitions(written, capsys):
    ns, _ = written
    flt = "event_date = DATE '2025-12-03'"
    assert main(["--json", "explain", ns.root, flt]) == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    assert out["kept"] == {"1": 4}
    assert main(["explain", ns.root, flt]) == EXIT_OK
    assert "kept 4 of 28" in capsys.readouterr().out
    assert main(["--json", "partitions", ns.root, "--filter", flt]) == EXIT_OK
    parts = json.loads(capsys.readouterr().out)
    assert {p["values"]["event_date"] for p in parts} == {str(dt.date(2025, 12, 3))}
