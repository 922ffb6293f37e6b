"""``ns.update(set, filter)`` and ``lancepart update`` (docs/merge.md "Update"): SQL set
expressions (DataFusion, over each row's old values) on the published rows matching a filter,
in ONE ``__manifest`` commit (spec "Transaction / Commit Behavior": every touched table's new
``read_version`` and any new partition in one commit). A row whose partition source changes
moves to its partition; a concurrent publish to a table the update read makes it evaluate again
(no lost update); typed errors before anything is read. Real Lance tables and real processes;
the oracle is pyarrow over what was published before."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import InvalidArgumentError, InvalidFilterError
from lancepart.util.sample import demo_events
from tests.conftest import assert_read_versions_only_increase, copy_ns, create_events_ns, manifest_version
from tests.procs import rival_publishes_first, run_cli

DAY1 = "event_date = DATE '2025-12-01'"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("update") / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(600, seed=1, days=3))
    ns.write(demo_events(300, seed=2, start_id=1_000, days=3))
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def rows(ns: PartitionedNamespace) -> dict[int, dict]:
    out = {}
    for r in ns.refresh().to_table().to_pylist():
        assert r["id"] not in out, f"id {r['id']} published twice"
        out[r["id"]] = r
    return out


def test_update_sets_expressions_on_exactly_the_matching_rows_in_one_commit(ns):
    """Every SET expression sees the row's OLD values (as in SQL: ``amount`` is doubled and
    ``user_id`` computed from the old ``amount``); rows the filter does not match are untouched;
    one ``__manifest`` version, recorded as an ``update`` in the history."""
    before = rows(ns)
    v0 = manifest_version(ns.root)
    result = ns.update({"amount": "amount * 2", "user_id": "CAST(amount AS BIGINT)", "country": "lower(country)"},
                       f"{DAY1} AND amount > 50")
    hit = {i for i, r in before.items() if r["event_date"] == date(2025, 12, 1) and r["amount"] > 50}
    assert hit and len(hit) < len(before)
    assert result.details["rows_updated"] == len(hit) == result.details["rows_deleted"] == result.rows_written
    assert manifest_version(ns.root) == v0 + 1 == result.manifest_version
    after = rows(ns)
    assert set(after) == set(before)
    for i, r in before.items():
        if i in hit:
            assert after[i] == {**r, "amount": r["amount"] * 2, "user_id": int(r["amount"]),
                                "country": r["country"].lower()}, i
        else:
            assert after[i] == r, i
    top = ns.history(limit=1)[0]
    assert top.operation == "update" and top.rows_written == len(hit) and top.rows_removed == len(hit)
    assert_read_versions_only_increase(ns)
    assert ns.verify().ok


def test_an_update_of_a_partition_source_moves_the_rows_to_their_partition(ns):
    """``event_date`` is an identity partition source: the updated rows leave their tables and
    land in a partition that did not exist (created in the same commit); ``user_id`` feeds a
    bucket, so rows move between buckets too. Nothing lost or doubled."""
    before = rows(ns)
    parts0 = len(ns.partitions())
    result = ns.update({"event_date": "DATE '2026-01-05'", "user_id": "user_id + 1"}, "id < 40")
    assert result.partitions_created >= 1
    after = rows(ns)
    assert set(after) == set(before)
    for i, r in before.items():
        want = {**r, "event_date": date(2026, 1, 5), "user_id": r["user_id"] + 1} if i < 40 else r
        assert after[i] == want
    moved = ns.to_table("event_date = DATE '2026-01-05'", columns=["id"])["id"].to_pylist()
    assert sorted(moved) == list(range(40))
    assert len(ns.partitions()) > parts0
    assert ns.verify().ok


@pytest.mark.parametrize("filter", ["TRUE", "1 = 1"])
def test_a_filter_that_names_no_column_updates_every_row(ns, filter):
    """Found by the model test's --stress run: a filter naming no column read the tables with no
    column, and the row addresses no longer fitted them (an untyped ArrowInvalid)."""
    before = rows(ns)
    result = ns.update({"amount": "amount + 1"}, filter)
    assert result.details["rows_updated"] == len(before)
    assert rows(ns) == {i: {**r, "amount": r["amount"] + 1} for i, r in before.items()}


def test_without_a_filter_every_row_is_updated_and_a_filter_matching_nothing_publishes_nothing(ns):
    before = rows(ns)
    v0 = manifest_version(ns.root)
    result = ns.update({"amount": "0.0"}, "id < 0")
    assert result.details["rows_updated"] == 0 and manifest_version(ns.root) == v0
    result = ns.update({"amount": "amount + 1"})
    assert result.details["rows_updated"] == len(before)
    assert rows(ns) == {i: {**r, "amount": r["amount"] + 1} for i, r in before.items()}


@pytest.mark.parametrize("set_, filter, error, words", [
    ({}, None, InvalidArgumentError, ["non-empty mapping"]),
    ({"nope": "1"}, None, InvalidArgumentError, ["'nope'", "not a column", "amount"]),
    ({"amount": ""}, None, InvalidArgumentError, ["'amount'", "SQL expression"]),
    ({"amount": "nosuch * 2"}, None, InvalidArgumentError, ["'amount'", "nosuch"]),
    ({"amount": "amount *"}, None, InvalidArgumentError, ["'amount'", "amount *"]),
    ({"amount": "amount * random()"}, None, InvalidArgumentError, ["random", "not deterministic"]),
    ({"amount": "sum(amount)"}, None, InvalidArgumentError, ["sum", "aggregate"]),
    ({"amount": "(SELECT 1)"}, None, InvalidArgumentError, ["SELECT"]),
    ({"event_date": "'not a date'"}, None, InvalidArgumentError, ["'event_date'", "date32"]),
    ({"id": "NULL"}, "id = 3", InvalidArgumentError, ["'id'", "NOT NULL", "id=3"]),
    ({"user_id": "CAST(amount AS VARCHAR)"}, "id = 3", InvalidArgumentError, ["'user_id'", "int64"]),
    ({"amount": "1"}, "nosuch = 1", InvalidFilterError, ["nosuch"]),
])
def test_typed_errors_name_the_column_and_publish_nothing(ns, set_, filter, error, words):
    """Refused before a row is read (the cast of a value that does not fit: when the row is
    evaluated, naming it); ``__manifest`` does not move."""
    v0 = manifest_version(ns.root)
    with pytest.raises(error) as e:
        ns.update(set_, filter)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    assert manifest_version(ns.root) == v0


def test_a_batch_id_publishes_the_update_once(ns):
    """``amount = amount + 1`` with a batch id run twice adds 1 once: the rerun is skipped."""
    before = rows(ns)
    first = ns.update({"amount": "amount + 1"}, DAY1, batch_id="fix-1")
    again = ns.update({"amount": "amount + 1"}, DAY1, batch_id="fix-1")
    assert not first.skipped and again.skipped and again.manifest_version == first.manifest_version
    after = rows(ns)
    assert after == {i: {**r, "amount": r["amount"] + 1} if r["event_date"] == date(2025, 12, 1) else r
                     for i, r in before.items()}


def test_a_concurrent_update_of_the_same_rows_is_not_lost(ns, tmp_path, monkeypatch):
    """While this update waits before its ``__manifest`` commit (its table versions made), a
    real process runs the same ``amount = amount + 1`` and publishes first. This update's commit
    conflicts, the tables it read moved, so it evaluates again on the new snapshot: both
    increments count (+2), as in a serial run; no row doubled."""
    before = rows(ns)
    go = str(tmp_path / "go")

    def rival() -> None:
        proc = run_cli("update", ns.root, "--set", "amount=amount + 1", "--filter", DAY1)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        assert json.loads(out)["details"]["rows_updated"] > 0

    monkeypatch.setenv("LANCEPART_FAULT", f"before_manifest_commit:wait:{go}")
    with rival_publishes_first(go, rival):
        result = ns.update({"amount": "amount + 1"}, DAY1)
    assert result.retries >= 1 and result.details["evaluations"] >= 2
    after = rows(ns)
    want = {i: {**r, "amount": r["amount"] + 2} if r["event_date"] == date(2025, 12, 1) else r
            for i, r in before.items()}
    assert after.keys() == want.keys()
    assert all(after[i]["amount"] == pytest.approx(want[i]["amount"]) and
               {**after[i], "amount": 0} == {**want[i], "amount": 0} for i in want)
    assert ns.verify().ok


def test_the_change_feed_shows_an_update_as_delete_and_insert(ns):
    """An update has no key to pair images by: its commit's feed holds a ``delete`` of each
    old row and an ``insert`` of each new one (docs/merge.md)."""
    v0 = ns.manifest_version
    ns.update({"amount": "-1.0"}, "id IN (3, 4)")
    feed = ns.changes(v0).read_all()
    got = sorted((r["id"], r["_change_type"], r["amount"]) for r in feed.to_pylist())
    old = {r["id"]: r["amount"] for r in ns.to_table("id IN (3, 4)").to_pylist()}
    assert [g[0] for g in got] == [3, 3, 4, 4] and {g[1] for g in got} == {"delete", "insert"}
    assert all(a == -1.0 for _, kind, a in got if kind == "insert") and old == {3: -1.0, 4: -1.0}


def test_columns_whose_names_need_quoting(tmp_path):
    """A column named ``Unit Price`` (a space, capitals) and a partition source named ``Region``:
    the expression quotes them as SQL does; the update finds them and moves rows."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("Region", pa.utf8()),
                        ("Unit Price", pa.float64())])
    spec = {"id": 1, "fields": [{"field_id": "region", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "q"), schema, spec)
    ns.write(pa.table({"id": [1, 2, 3], "Region": ["EU", "EU", "US"], "Unit Price": [1.0, 2.0, 3.0]}, schema=schema))
    ns.update({"Unit Price": '"Unit Price" * 10', "Region": "'APAC'"}, "\"Region\" = 'EU'")
    got = sorted(ns.to_table().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "Region": "APAC", "Unit Price": 10.0}, {"id": 2, "Region": "APAC", "Unit Price": 20.0},
                   {"id": 3, "Region": "US", "Unit Price": 3.0}]
    assert ns.to_table("\"Region\" = 'EU'").num_rows == 0
    assert sorted(ns.to_table("\"Region\" = 'APAC'")["id"].to_pylist()) == [1, 2]
    assert [p.values["region"] for p in ns.partitions("\"Region\" = 'APAC'")] == ["APAC"]  # a table of its own


def test_an_update_after_a_rename_reads_the_old_tables_by_field_id(ns):
    """The tables were written before ``amount`` became ``price``: the update names the new
    name, finds the rows in the old tables by field id and writes them in the new schema."""
    before = rows(ns)
    ns.update_schema(rename={"amount": "price"})
    ns.update({"price": "price + 100"}, "id < 5")
    after = {r["id"]: r for r in ns.refresh().to_table().to_pylist()}
    assert {i: after[i]["price"] for i in range(5)} == {i: before[i]["amount"] + 100 for i in range(5)}
    assert after[7]["price"] == before[7]["amount"]


def test_cli_update(ns, capsys):
    before = rows(ns)
    assert main(["update", ns.root, "--set", "amount=amount * 3", "--set", "country='ZZ'", "--filter", "id = 5",
                 "-q"]) == 0
    assert "updated 1 rows" in capsys.readouterr().out
    assert rows(ns)[5] == {**before[5], "amount": before[5]["amount"] * 3, "country": "ZZ"}
    assert main(["update", ns.root, "--set", "amount", "-q"]) == 64
    assert "COL=EXPR" in capsys.readouterr().err
    assert main(["update", ns.root, "--set", "nope=1", "-q"]) == 2
    assert "'nope'" in capsys.readouterr().err
    assert Path(ns.root).exists()


@pytest.mark.spark
def test_lps_update_on_executors_publishes_what_ns_update_publishes(template, tmp_path, spark):
    """``lps.update``: the candidate tables are evaluated in Spark tasks; the published rows equal
    ``ns.update``'s on a copy of the same namespace, rows moved between partitions included."""
    from lancepart import spark as lps

    a, b = copy_ns(template, tmp_path / "a"), copy_ns(template, tmp_path / "b")
    change = {"amount": "amount * 2", "event_date": "DATE '2026-02-01'"}
    where = "user_id % 7 = 3 OR id < 5"
    expected = a.update(change, where)
    got = lps.update(spark, b.root, change, where)
    assert got.details["rows_updated"] == expected.details["rows_updated"] > 0
    assert got.details["spark_jobs"] == 1 and got.partitions_created == expected.partitions_created >= 1
    assert rows(b) == rows(a)
    assert lps.update(spark, b.root, {"amount": "amount"}, "id < 0").details["rows_updated"] == 0
    with pytest.raises(InvalidArgumentError, match="nosuch"):
        lps.update(spark, b.root, {"nosuch": "1"})
    assert b.refresh().verify().ok
