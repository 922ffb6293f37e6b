"""``ns.merge`` (issue 14 item 3), replace-where ``ns.write(mode="overwrite", where=...)`` (item 4)
and their conflict rules (item 6): old rows get Lance deletions on each partition table's
*published* version, new rows are written as fragments into their (possibly other, possibly new)
partitions, each touched table gets one Lance version and ONE ``__manifest`` commit publishes
everything (spec "Transaction / Commit Behavior"). A concurrent publish to a table the operation
read makes it evaluate again: never a merged key doubled, never a lost update, never a deleted
row resurrected. Real Lance tables, real processes; the oracle reads what is published with
plain pylance at each table's read_version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, datetime
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import AmbiguousMatchError, DuplicateKeyError, InvalidArgumentError, RowsOutsideFilterError
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from tests.conftest import assert_read_versions_only_increase, copy_ns, create_events_ns, manifest_version
from tests.procs import rival_publishes_first, run_cli, wait_for_unpublished_versions, write_rows

HERE = Path(__file__).resolve().parent
DAY1 = "event_date = DATE '2025-12-01'"
SCHEMA = demo_events(1).schema


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("merge") / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(600, seed=1, days=3))
    ns.write(demo_events(300, seed=2, start_id=1_000, days=3))
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def manifest_tables(root: str) -> dict[str, dict]:
    rows = lance.dataset(join_uri(root, "__manifest")).to_table().to_pylist()
    return {r["object_id"]: r for r in rows if r["object_type"] == "table" and r["read_version"] is not None}


def published_rows(root: str) -> pa.Table:
    """Every row published in the latest __manifest, each table read with plain pylance at its
    read_version, with the object_id of the table holding it."""
    parts = []
    for oid, r in manifest_tables(root).items():
        t = lance.dataset(join_uri(root, r["location"]), version=r["read_version"]).to_table().cast(SCHEMA)
        parts.append(t.append_column("object_id", pa.array([oid] * t.num_rows, pa.utf8())))
    return pa.concat_tables(parts).sort_by("id")


def by_id(t: pa.Table) -> dict[int, dict]:
    out = {}
    for r in t.to_pylist():
        assert r["id"] not in out, f"id {r['id']} published twice"
        out[r["id"]] = r
    return out


def data_cols(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "object_id"}


def changed(rows: pa.Table, **cols) -> pa.Table:
    for name, values in cols.items():
        i = rows.schema.get_field_index(name)
        rows = rows.set_column(i, rows.schema.field(i), pa.array(values, rows.schema.field(i).type))
    return rows


def test_update_in_place_and_insert_in_one_publish(ns):
    """Matched keys are replaced, new keys inserted; one __manifest version; every touched
    table gets exactly one new Lance version (deletions and new fragments in one commit)."""
    before = published_rows(ns.root).drop_columns(["object_id"])
    tables0 = manifest_tables(ns.root)
    v0 = manifest_version(ns.root)
    upd = before.take(pa.array(range(0, 900, 30)))
    upd = changed(upd, amount=[-1.0] * upd.num_rows)
    ins = demo_events(20, seed=9, start_id=50_000, days=3)
    result = ns.merge(pa.concat_tables([upd, ins]), on=["id"])
    assert manifest_version(ns.root) == v0 + 1 == result.manifest_version
    assert result.details["rows_updated"] == upd.num_rows and result.details["rows_inserted"] == 20
    assert result.rows_written == upd.num_rows + 20
    expected = by_id(before) | by_id(upd) | by_id(ins)
    got = by_id(published_rows(ns.root))
    assert {k: data_cols(v) for k, v in got.items()} == expected
    tables1 = manifest_tables(ns.root)
    moved = {o for o in tables1 if o in tables0 and tables1[o]["read_version"] != tables0[o]["read_version"]}
    assert moved and all(tables1[o]["read_version"] == tables0[o]["read_version"] + 1 for o in moved)
    assert ns.to_table().num_rows == len(expected)
    top = ns.history(1)[0]
    assert top.operation == "merge"
    assert top.rows_written == result.rows_written and top.rows_removed == result.details["rows_deleted"]
    assert_read_versions_only_increase(ns)


def test_update_that_moves_a_row_to_another_partition(ns):
    """A key whose new row belongs to another partition (event_date changed, and a new partition
    at that): the old row is gone from its table, the new one is in the other table, in ONE
    __manifest version."""
    before = published_rows(ns.root)
    row = before.filter(pc.equal(before["id"], 7))
    old_oid = row["object_id"][0].as_py()
    new = changed(row.drop_columns(["object_id"]), event_date=[pa.scalar(20_500, pa.date32()).as_py()], amount=[1.5])
    v0 = manifest_version(ns.root)
    result = ns.merge(new, on=["id"])
    assert manifest_version(ns.root) == v0 + 1
    assert result.partitions_created == 1 and result.details["rows_updated"] == 1
    after = published_rows(ns.root)
    seven = after.filter(pc.equal(after["id"], 7)).to_pylist()
    assert len(seven) == 1 and seven[0]["object_id"] != old_oid and seven[0]["amount"] == 1.5
    assert after.num_rows == before.num_rows
    old_table = manifest_tables(ns.root)[old_oid]
    t = lance.dataset(join_uri(ns.root, old_table["location"]), version=old_table["read_version"]).to_table()
    assert 7 not in t["id"].to_pylist()
    assert ns.verify().ok


def test_ignore_modes(ns):
    before = by_id(published_rows(ns.root).drop_columns(["object_id"]))
    upd = changed(published_rows(ns.root).drop_columns(["object_id"]).slice(0, 5), amount=[-2.0] * 5)
    ins = demo_events(4, seed=5, start_id=60_000, days=3)
    data = pa.concat_tables([upd, ins])
    r = ns.merge(data, on=["id"], when_matched="ignore")  # insert only the new keys
    assert r.details["rows_updated"] == 0 and r.details["rows_inserted"] == 4 and r.details["rows_deleted"] == 0
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == before | by_id(ins)
    v = manifest_version(ns.root)
    r = ns.merge(changed(data, amount=[-3.0] * 9), on=["id"], when_not_matched="ignore")
    got = by_id(published_rows(ns.root))
    assert r.details["rows_inserted"] == 0 and r.details["rows_updated"] == 9 and len(got) == len(before) + 4
    assert all(got[i]["amount"] == -3.0 for i in data["id"].to_pylist())
    r = ns.merge(demo_events(2, start_id=90_000), on=["id"], when_not_matched="ignore")
    assert manifest_version(ns.root) == v + 1 and r.rows_written == 0  # nothing to do: nothing committed


def test_typed_errors_publish_nothing(ns):
    """Duplicate input keys, NULL keys, unknown key columns and a key matching two published
    rows are typed errors naming the key; nothing is published."""
    v0 = manifest_version(ns.root)
    before = published_rows(ns.root)
    dup = demo_events(3, start_id=100).take(pa.array([0, 1, 1]))
    with pytest.raises(DuplicateKeyError, match="id=101"):
        ns.merge(dup, on=["id"])
    nulls = changed(demo_events(3, start_id=100), user_id=[1, None, 3])
    with pytest.raises(InvalidArgumentError, match="'user_id' is NULL"):
        ns.merge(nulls, on=["user_id"])
    with pytest.raises(InvalidArgumentError, match="nope"):
        ns.merge(demo_events(3), on=["nope"])
    with pytest.raises(InvalidArgumentError, match="when_matched"):
        ns.merge(demo_events(3), on=["id"], when_matched="delete")
    ns.write(changed(demo_events(1, start_id=5), event_date=[pa.scalar(20_600, pa.date32()).as_py()]))  # id 5 twice
    v1 = manifest_version(ns.root)
    with pytest.raises(AmbiguousMatchError, match=r"id=5\) matches 2 published rows"):
        ns.merge(demo_events(1, start_id=5), on=["id"])
    assert manifest_version(ns.root) == v1 == v0 + 1
    assert published_rows(ns.root).num_rows == before.num_rows + 1


def test_multi_column_key(ns):
    """Keys of two columns match with a hash join; a key half-equal to a published one is new."""
    before = published_rows(ns.root).drop_columns(["object_id"])
    hit = changed(before.slice(10, 3), amount=[7.0] * 3)
    half = changed(before.slice(20, 1), id=[77_777])  # same user_id, other id: not a match
    r = ns.merge(pa.concat_tables([hit, half]), on=["id", "user_id"])
    assert r.details["rows_updated"] == 3 and r.details["rows_inserted"] == 1
    got = by_id(published_rows(ns.root))
    assert len(got) == before.num_rows + 1 and all(got[i]["amount"] == 7.0 for i in hit["id"].to_pylist())


def test_batch_id_makes_a_rerun_a_no_op(ns):
    data = changed(published_rows(ns.root).drop_columns(["object_id"]).slice(0, 3), amount=[4.0] * 3)
    first = ns.merge(data, on=["id"], batch_id="cdc-0001")
    again = ns.merge(changed(data, amount=[5.0] * 3), on=["id"], batch_id="cdc-0001")
    assert not first.skipped and again.skipped and manifest_version(ns.root) == first.manifest_version
    assert [r["amount"] for r in by_id(published_rows(ns.root)).values() if r["id"] in (0, 1, 2)] == [4.0] * 3


def _run_merge(root: str, path: str, fault: str | None = None, max_retries: int = 20) -> subprocess.Popen:
    return run_cli("merge", root, path, "--on", "id", "--max-retries", str(max_retries), fault=fault)


def _write(root: str, start: int) -> None:
    write_rows(root, start)


_wait_for_unpublished_versions = wait_for_unpublished_versions


def test_keys_inserted_concurrently_are_updated_not_doubled(ns, tmp_path):
    """Item 6: the merge (a real process) has its table versions committed and waits before its
    __manifest commit; a real writer process appends the SAME new keys and publishes first. The
    merge's commit conflicts, it evaluates again on the new snapshot: those keys are now matched
    and updated, each key is published exactly once with the merge's values, and the update of
    existing keys is not lost."""
    before = by_id(published_rows(ns.root).drop_columns(["object_id"]))
    new_keys = demo_events(300, seed=70_000, start_id=70_000, days=1)  # the rows writer_proc appends
    merged = changed(new_keys, amount=[-9.0] * 300, country=["ZZ"] * 300)
    old = changed(pa.Table.from_pylist([before[i] for i in range(0, 600, 50)], schema=new_keys.schema),
                  amount=[-8.0] * 12)
    path = str(tmp_path / "cdc.parquet")
    pq.write_table(pa.concat_tables([merged, old]), path)
    go = str(tmp_path / "go")
    proc = _run_merge(ns.root, path, fault=f"before_manifest_commit:wait:{go}")
    _wait_for_unpublished_versions(ns, proc)
    _write(ns.root, 70_000)  # same keys, published while the merge waits
    Path(go).touch()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["retries"] >= 1, "the merge did not have to evaluate again: the test did not exercise the conflict"
    assert result["details"]["rows_updated"] == 312 and result["details"]["rows_inserted"] == 0
    got = by_id(published_rows(ns.root))  # raises on a doubled id
    expected = before | by_id(merged) | by_id(old)
    assert {k: data_cols(v) for k, v in got.items()} == expected
    ns.refresh()
    assert_read_versions_only_increase(ns)
    assert ns.verify().ok


def test_a_delete_published_first_is_not_undone(ns, tmp_path):
    """Item 6: while the merge waits before its __manifest commit, a delete of other rows in the
    same tables publishes first. The merge evaluates again: the deleted rows stay deleted, a
    merged key the delete removed is inserted (as a serial run would), the other updates land."""
    before = by_id(published_rows(ns.root).drop_columns(["object_id"]))
    upd = changed(pa.Table.from_pylist([before[i] for i in range(0, 40)], schema=SCHEMA),
                  amount=[-5.0] * 40)
    path = str(tmp_path / "cdc.parquet")
    pq.write_table(upd, path)
    go = str(tmp_path / "go")
    proc = _run_merge(ns.root, path, fault=f"before_manifest_commit:wait:{go}")
    _wait_for_unpublished_versions(ns, proc)
    PartitionedNamespace.open(ns.root).delete("id % 3 = 0")
    Path(go).touch()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["retries"] >= 1
    expected = {k: v for k, v in before.items() if k % 3} | by_id(upd)
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == expected
    assert result["details"]["rows_inserted"] == len([i for i in range(40) if i % 3 == 0])


def test_kill_before_the_manifest_commit_changes_nothing_visible(ns, tmp_path):
    """kill -9 (os._exit) of the merge after its table commits, before __manifest: nothing
    published changed; a rerun merges exactly once."""
    before = published_rows(ns.root)
    v0 = manifest_version(ns.root)
    data = pa.concat_tables([changed(before.drop_columns(["object_id"]).slice(0, 10), amount=[-4.0] * 10),
                             demo_events(10, start_id=80_000)])
    path = str(tmp_path / "cdc.parquet")
    pq.write_table(data, path)
    proc = _run_merge(ns.root, path, fault="before_manifest_commit:exit")
    proc.communicate(timeout=120)
    assert proc.returncode == 77
    assert manifest_version(ns.root) == v0
    assert published_rows(ns.root).equals(before)
    assert any(lance.dataset(join_uri(ns.root, p.location)).version > p.read_version
               for p in ns.refresh().partitions()), "the process died before committing any table version"
    assert main(["merge", ns.root, path, "--on", "id", "-q"]) == 0
    expected = by_id(before.drop_columns(["object_id"])) | by_id(data)
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == expected
    assert manifest_version(ns.root) == v0 + 1
    assert ns.refresh().verify().ok


# ------------------------------------------------------------------------------ replace-where
def test_replace_where_replaces_exactly_the_matching_rows(ns):
    """Item 4: the rows matching the filter are replaced by the input, the others stay; one
    __manifest version."""
    before = published_rows(ns.root).drop_columns(["object_id"])
    where = "event_date = DATE '2025-12-01' AND amount > 30"
    mask = pc.fill_null(pc.and_(pc.equal(before["event_date"], pa.scalar(20_423, pa.date32())),
                                pc.greater(before["amount"], 30)), False)
    new = changed(demo_events(25, seed=4, start_id=40_000, days=1), amount=[31.0 + i for i in range(25)])
    v0 = manifest_version(ns.root)
    r = ns.write(new, mode="overwrite", where=where)
    assert manifest_version(ns.root) == v0 + 1 == r.manifest_version
    assert r.details["rows_deleted"] == pc.sum(mask.cast(pa.int64())).as_py() > 0 and r.rows_written == 25
    expected = by_id(before.filter(pc.invert(mask))) | by_id(new)
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == expected


def test_replace_where_refuses_input_rows_outside_the_filter(ns):
    before = published_rows(ns.root)
    v0 = manifest_version(ns.root)
    data = demo_events(30, seed=4, start_id=40_000, days=3)  # three days, the filter names one
    n_out = sum(1 for d in data["event_date"].to_pylist() if str(d) != "2025-12-01")
    with pytest.raises(RowsOutsideFilterError, match=rf"{n_out} of 30 input row\(s\) do not match.*id="):
        ns.write(data, mode="overwrite", where=DAY1)
    with pytest.raises(InvalidArgumentError, match="mode='overwrite'"):
        ns.write(data, where=DAY1)
    assert manifest_version(ns.root) == v0 and published_rows(ns.root).equals(before)


def test_replace_where_whole_partitions_and_empty_input(ns):
    """A filter covering whole partitions empties them without reading a row; an empty input
    with a filter deletes (Delta's replaceWhere with no rows)."""
    before = published_rows(ns.root).drop_columns(["object_id"])
    day1 = pc.equal(before["event_date"], pa.scalar(20_423, pa.date32()))
    r = ns.write(before.slice(0, 0), mode="overwrite", where=DAY1)
    assert r.details["rows_deleted"] == pc.sum(day1.cast(pa.int64())).as_py()
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == by_id(before.filter(
        pc.invert(day1)))


def test_cli_merge(ns, tmp_path, capsys):
    data = demo_events(5, start_id=0)
    path = str(tmp_path / "in.parquet")
    pq.write_table(data, path)
    assert main(["merge", ns.root, path, "--on", "id", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["details"]["rows_updated"] == 5 and out["details"]["rows_inserted"] == 0


# ------------------------------------------------------------------------------------- Spark
def to_df(spark, table: pa.Table):
    from tests.test_spark_write import to_df as spark_df

    return spark_df(spark, table)


@pytest.mark.spark
def test_spark_merge_matches_ns_merge(template, tmp_path, spark):
    """``lps.merge`` on the executors gives the rows ``ns.merge`` gives for the same input
    (updates in place, an update moving a row to a new partition, inserts), in one publish."""
    from lancepart import spark as lps

    local, remote = copy_ns(template, tmp_path / "a"), copy_ns(template, tmp_path / "b")
    before = published_rows(local.root).drop_columns(["object_id"])
    upd = changed(before.take(pa.array(range(0, 900, 45))), amount=[-6.0] * 20)
    upd = changed(upd, event_date=[pa.scalar(20_700, pa.date32()).as_py(), *upd["event_date"].to_pylist()[1:]])
    data = pa.concat_tables([upd, demo_events(15, seed=3, start_id=55_000, days=3)])
    expected = local.merge(data, on=["id"])
    v0 = manifest_version(remote.root)
    got = lps.merge(to_df(spark, data), remote.root, on=["id"])
    assert manifest_version(remote.root) == v0 + 1
    assert got.details["rows_updated"] == expected.details["rows_updated"] == 20
    assert got.details["rows_inserted"] == 15 and got.partitions_created == 1
    assert {k: data_cols(v) for k, v in by_id(published_rows(remote.root)).items()} == \
        {k: data_cols(v) for k, v in by_id(published_rows(local.root)).items()}
    only_new = lps.merge(to_df(spark, data), remote.root, on=["id"], when_matched="ignore")
    assert only_new.details["rows_inserted"] == 0 and only_new.rows_written == 0


@pytest.mark.spark
def test_datasource_replace_where(ns, spark):
    """Item 4 through the data source: ``mode("overwrite").option("replaceWhere", ...)``
    replaces the rows matching the filter; an input row outside it fails the write, nothing
    published."""
    from lancepart import spark as lps

    lps.register(spark)  # as a user of the format must (the test may be the first Spark use in its worker)
    before = published_rows(ns.root).drop_columns(["object_id"])
    day1 = pc.equal(before["event_date"], pa.scalar(20_423, pa.date32()))
    new = demo_events(40, seed=8, start_id=30_000, days=1)
    v0 = manifest_version(ns.root)
    (to_df(spark, new).write.format("lancepart").mode("overwrite")
     .option("replaceWhere", DAY1).save(ns.root))
    assert manifest_version(ns.root) == v0 + 1
    expected = by_id(before.filter(pc.invert(day1))) | by_id(new)
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == expected
    bad = demo_events(40, seed=8, start_id=31_000, days=3)
    with pytest.raises(Exception, match=r"RowsOutsideFilterError|do not match"):
        (to_df(spark, bad).write.format("lancepart").mode("overwrite")
         .option("replaceWhere", DAY1).save(ns.root))
    assert manifest_version(ns.root) == v0 + 1


def test_replace_where_sees_an_append_published_first(ns, tmp_path):
    """Item 6 for replace-where: while it waits before its __manifest commit, a real writer
    process appends rows inside the filter and publishes first. The replace-where evaluates
    again: those rows are replaced too (as append-then-replace in series), nothing outside the
    filter is touched, the input is published once."""
    before = published_rows(ns.root).drop_columns(["object_id"])
    day1 = pc.equal(before["event_date"], pa.scalar(20_423, pa.date32()))
    new = demo_events(40, seed=8, start_id=30_000, days=1)
    path = str(tmp_path / "day1.parquet")
    pq.write_table(new, path)
    go = str(tmp_path / "go")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent), "LANCEPART_FAULT": f"before_manifest_commit:wait:{go}"}
    code = ("import json, sys, pyarrow.parquet as pq; from lancepart import PartitionedNamespace; "
            "r = PartitionedNamespace.open(sys.argv[1]).write(pq.read_table(sys.argv[2]), mode='overwrite', "
            "where=sys.argv[3]); print(json.dumps(r.to_dict()))")
    proc = subprocess.Popen([sys.executable, "-c", code, ns.root, path, DAY1], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_unpublished_versions(ns, proc)
    _write(ns.root, 70_000)  # 300 rows on day 1, inside the filter
    Path(go).touch()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["retries"] >= 1
    assert result["details"]["rows_deleted"] == pc.sum(day1.cast(pa.int64())).as_py() + 300
    expected = by_id(before.filter(pc.invert(day1))) | by_id(new)
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == expected


@pytest.mark.spark
def test_spark_merge_evaluates_again_on_a_concurrent_publish(ns, spark, monkeypatch, tmp_path):
    """Item 6 through Spark: while lps.merge waits before its __manifest commit, a real writer
    process appends the same new keys and publishes first; the merge matches again (a new Spark
    job over the moved tables) and writes again: every key once, with the merge's values."""

    from lancepart import spark as lps

    before = by_id(published_rows(ns.root).drop_columns(["object_id"]))
    merged = changed(demo_events(300, seed=70_000, start_id=70_000, days=1), amount=[-9.0] * 300)
    df = to_df(spark, merged)
    go = str(tmp_path / "go")
    monkeypatch.setenv("LANCEPART_FAULT", f"before_manifest_commit:wait:{go}")
    with rival_publishes_first(go, lambda: _write(ns.root, 70_000)):
        result = lps.merge(df, ns.root, on=["id"])
    assert result.retries >= 1 and result.details["spark_jobs"] >= 4  # match + write, twice
    assert result.details["rows_updated"] == 300 and result.details["rows_inserted"] == 0
    assert {k: data_cols(v) for k, v in by_id(published_rows(ns.root)).items()} == before | by_id(merged)


# ------------------------------------------------------------------- which tables a merge reads
KEYED = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("day", pa.date32()),
                   pa.field("amount", pa.float64())])
BY_HUNDREDS = {"id": 1, "fields": [{"field_id": "hundreds", "source_ids": [0],
                                    "transform": {"type": "truncate", "width": 100},
                                    "result_type": {"type": "int64"}}]}


def keyed_rows(ids, amount: float = 0.0, days: int = 3) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "day": pa.array([20_423 + i % days for i in ids], pa.int32()).cast(pa.date32()),
                     "amount": pa.array([amount] * len(ids), pa.float64())}, schema=KEYED)


def table_rows(root: str) -> dict[str, list[int]]:
    """object_id -> the ids its published version holds."""
    out = {}
    for oid, r in manifest_tables(root).items():
        out[oid] = lance.dataset(join_uri(root, r["location"]), version=r["read_version"]).to_table(
            columns=["id"])["id"].to_pylist()
    return out


def published_keyed(root: str) -> dict[int, float]:
    """id -> amount of every published row; an id published twice fails."""
    out: dict[int, float] = {}
    for r in manifest_tables(root).values():
        t = lance.dataset(join_uri(root, r["location"]), version=r["read_version"]).to_table(columns=["id", "amount"])
        for i, a in zip(t["id"].to_pylist(), t["amount"].to_pylist(), strict=True):
            assert i not in out, f"id {i} published twice"
            out[i] = a
    return out


@pytest.fixture
def keyed(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(str(tmp_path / "keyed"), KEYED, BY_HUNDREDS)
    ns.write(keyed_rows(range(1_000)))  # ten partitions of truncate(id, 100)
    return ns


def test_merge_reads_only_the_tables_that_can_hold_its_keys(keyed):
    """Issue 23 goal 3 / spec partitioning.md "Query Optimization / Partition Pruning": the
    partition source is the key column, so a key can only be in the table of its own partition
    value. A merge updating ids 5 and 505 and inserting 5000-5001 reads the keys of two of the
    ten tables (details["tables_read"]), and its inserts, whose partition has no table, are
    inserts without a read."""
    assert len(manifest_tables(keyed.root)) == 10
    r = keyed.merge(pa.concat_tables([keyed_rows([5, 505], 1.0), keyed_rows([5_000, 5_001], 2.0)]), on=["id"])
    assert r.details["rows_updated"] == 2 and r.details["rows_inserted"] == 2
    assert r.details["tables_read"] == 2 and r.details["tables_skipped"] == 8
    got = published_keyed(keyed.root)
    assert len(got) == 1_002 and got[5] == got[505] == 1.0 and got[5_000] == got[5_001] == 2.0
    # the inserted keys now have their table: the next merge of them reads it and updates
    r = keyed.merge(keyed_rows([5_000, 999], 3.0), on=["id"])
    assert r.details["rows_updated"] == 2 and r.details["rows_inserted"] == 0 and r.details["tables_read"] == 2
    assert len(published_keyed(keyed.root)) == 1_002
    # a key of several columns prunes by the fields over them (here id alone)
    r = keyed.merge(keyed_rows([7, 8_000], 4.0), on=["id", "day"])
    assert r.details["tables_read"] == 1 and r.details["rows_updated"] == 1 and r.details["rows_inserted"] == 1
    assert published_keyed(keyed.root)[7] == 4.0
    assert keyed.verify().ok


def test_merge_after_partition_evolution_finds_keys_in_every_spec_version(keyed):
    """Spec partitioning.md "Partition Evolution" / "Compatibility with Partition Pruning": the
    tables of each spec version are pruned by that version's own transforms. v1 truncate(id, 100)
    tables, v2 identity(day) tables (day is no key: all read) and v3 bucket(id, 8) tables; keys
    living in each are updated, never inserted a second time, and the tables left unread are
    those that cannot hold them."""
    keyed.evolve([{"source_ids": [1], "transform": {"type": "identity"}, "result_type": {"type": "date32"}}])
    keyed.write(keyed_rows(range(1_000, 1_100)))
    keyed.evolve([{"source_ids": [0], "transform": {"type": "bucket", "num_buckets": 8},
                   "result_type": {"type": "int32"}}])
    keyed.write(keyed_rows(range(2_000, 2_100)))
    tables = manifest_tables(keyed.root)
    n = {v: sum(1 for o in tables if o.startswith(f"v{v}$")) for v in (1, 2, 3)}
    assert n == {1: 10, 2: 3, 3: 8}
    keys = [42, 1_050, 2_050]
    r = keyed.merge(keyed_rows(keys, 5.0), on=["id"])
    assert r.details["rows_updated"] == 3 and r.details["rows_inserted"] == 0
    # v1: the one table of ids 0-99; v2: all three; v3: at most one per key's bucket
    assert 1 + 3 + 1 <= r.details["tables_read"] <= 1 + 3 + 3
    assert r.details["tables_read"] + r.details["tables_skipped"] == sum(n.values())
    got = published_keyed(keyed.root)
    assert len(got) == 1_200 and all(got[k] == 5.0 for k in keys)
    # the updated rows now live in v3 bucket tables; merged again they are found there
    r = keyed.merge(keyed_rows([*keys, 9_999], 6.0), on=["id"])
    assert r.details["rows_updated"] == 3 and r.details["rows_inserted"] == 1
    got = published_keyed(keyed.root)
    assert len(got) == 1_201 and all(got[k] == 6.0 for k in [*keys, 9_999])
    where = {i: oid for oid, ids in table_rows(keyed.root).items() for i in ids}
    assert all(where[k].startswith("v3$") for k in keys)
    assert keyed.refresh().verify().ok


def test_merge_float_keys_prune_as_keys_compare(tmp_path):
    """A float key partitioned by identity: -0.0 and 0.0 are one key and NaN equals NaN (docs/merge.md
    "Merge semantics"); partition values are named from canonical bytes that agree (spec
    partitioning.md "Namespace Naming"), so pruning never separates a key from its table."""
    schema = pa.schema([pa.field("x", pa.float64(), nullable=False), pa.field("v", pa.int64())])
    spec = {"id": 1, "fields": [{"field_id": "x", "source_ids": [0], "transform": {"type": "identity"},
                                 "result_type": {"type": "float64"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "floats"), schema, spec)
    ns.write(pa.table({"x": [-0.0, 1.0, float("nan"), 2.5], "v": [1, 2, 3, 4]}, schema=schema))
    assert len(manifest_tables(ns.root)) == 4
    r = ns.merge(pa.table({"x": [0.0, float("nan"), 3.0], "v": [10, 30, 50]}, schema=schema), on=["x"])
    assert r.details["rows_updated"] == 2 and r.details["rows_inserted"] == 1
    assert r.details["tables_read"] == 2 and r.details["tables_skipped"] == 2
    got = sorted(ns.to_table().column("v").to_pylist())
    assert got == [2, 4, 10, 30, 50]


def test_a_table_created_concurrently_in_a_partition_of_the_keys_is_detected(keyed, tmp_path):
    """The hazard of reading only some tables: the merge (a real process) found no table for
    the partition of its new keys 5000-5009 and holds them as inserts; while it waits before its
    __manifest commit a writer creates that partition's table with the same keys and publishes
    first. The new table is one the merge would read, so its commit conflicts, it evaluates
    again and updates those keys: each published once, with the merge's values."""
    data = pa.concat_tables([keyed_rows([5], 1.0), keyed_rows(range(5_000, 5_010), 7.0)])
    path = str(tmp_path / "cdc.parquet")
    pq.write_table(data, path)
    go = str(tmp_path / "go")
    proc = _run_merge(keyed.root, path, fault=f"before_manifest_commit:wait:{go}")
    wait_for_unpublished_versions(keyed, proc)
    assert not any(o for o, ids in table_rows(keyed.root).items() if 5_000 in ids)
    PartitionedNamespace.open(keyed.root).write(keyed_rows(range(5_000, 5_010), -1.0))  # the rival
    Path(go).touch()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    result = json.loads(out)
    assert result["retries"] >= 1
    assert result["details"]["rows_updated"] == 11 and result["details"]["rows_inserted"] == 0
    assert result["details"]["tables_read"] == 2
    got = published_keyed(keyed.root)  # raises on a doubled id
    assert len(got) == 1_010 and all(got[i] == 7.0 for i in range(5_000, 5_010)) and got[5] == 1.0


def test_a_merge_losing_every_round_gives_up_after_max_retries_evaluations(ns, monkeypatch):
    """One bound for the whole merge: each attempt of the one commit producer evaluates at most
    once, so a merge whose candidates move on every attempt (here: a rival appends to a table the
    merge reads, during each evaluation, so every ``__manifest`` commit conflicts) is given up
    after ``max_retries + 1`` evaluations with nothing published, not evaluated again inside
    every publish attempt of every outer attempt (spec "Transaction / Commit Behavior")."""
    import lancepart.write.merge as merge_mod
    from lancepart.errors import CommitConflictError

    rival = PartitionedNamespace.open(ns.root)
    base = ns.to_table(filter=DAY1)
    calls = {"n": 0}
    evaluate = merge_mod.MergePlan.evaluate

    def evaluate_then_rival_appends(self, snap):
        calls["n"] += 1
        out = evaluate(self, snap)
        extra = base.slice(0, 1).to_pydict()
        extra["id"] = [50_000 + calls["n"]]
        rival.write(pa.table(extra, schema=base.schema))  # into a partition the merge reads
        return out

    monkeypatch.setattr(merge_mod.MergePlan, "evaluate", evaluate_then_rival_appends)
    rows_before = ns.to_table().num_rows
    update = base.slice(0, 5)
    with pytest.raises(CommitConflictError, match="nothing was published"):
        ns.merge(update, on=["id"], max_retries=3)
    assert calls["n"] <= 4, f"{calls['n']} evaluations for max_retries=3"
    now = PartitionedNamespace.open(ns.root)
    assert now.to_table().num_rows == rows_before + calls["n"]  # only the rival's rows were published


def test_a_merge_evaluated_again_publishes_its_new_tables_with_their_declared_indexes(ns, monkeypatch):
    """A merge whose first evaluation a rival invalidates (it deletes a row the merge updates)
    removes the table it created and writes it again under the same name, at version 1: the
    index built on the removed table must not count for the new one (docs/indexes.md: every table
    published with a write carries the declared indexes; verify reports ``index_missing``). Found
    by the model test's --stress run."""
    import datetime as dt

    import lancepart.write.merge as merge_mod

    ns.create_index("country", "BITMAP", name="ix_country", min_rows=1)
    rival = PartitionedNamespace.open(ns.root)
    base = ns.to_table(filter=DAY1)
    update = base.slice(0, 5)
    update = update.set_column(update.schema.get_field_index("amount"), "amount", pa.array([777.0] * 5))
    new = base.slice(0, 1).to_pydict()
    new["id"], new["event_date"] = [90_000], [dt.date(2026, 2, 1)]  # a partition nobody wrote yet
    update = pa.concat_tables([update, pa.table(new, schema=base.schema)])
    calls = {"n": 0}
    evaluate = merge_mod.MergePlan.evaluate

    def evaluate_then_rival_deletes(self, snap):
        calls["n"] += 1
        out = evaluate(self, snap)
        if calls["n"] == 1:
            rival.delete(f"id = {update.column('id')[0].as_py()}")  # a row this merge updates
        return out

    monkeypatch.setattr(merge_mod.MergePlan, "evaluate", evaluate_then_rival_deletes)
    result = ns.merge(update, on=["id"])
    assert calls["n"] >= 2 and result.details["evaluations"] >= 2
    assert [p for p in ns.refresh().verify().problems if p.kind == "index_missing"] == []
    assert sorted(ns.to_table("id = 90000 OR amount = 777.0").column("id").to_pylist()) == sorted(
        update.column("id").to_pylist())


KEY_CASES = {  # input keys (never NULL), published keys (a NULL among them matches nothing)
    "int64": (pa.array([5, 3, 9, -1], pa.int64()), pa.array([9, 4, None, 3, -1, 5], pa.int64())),
    "int8 and a NULL where 0 is a key": (pa.array([5, 0], pa.int8()), pa.array([0, None, 5, 1], pa.int8())),
    "uint64 beyond int64": (pa.array([2**64 - 1, 0], pa.uint64()), pa.array([0, 2**63, 2**64 - 1, None], pa.uint64())),
    "float64 -0.0 and NaN": (pa.array([0.0, float("nan"), 2.5]), pa.array([-0.0, float("nan"), 2.5, None, 3.0])),
    "float32": (pa.array([1.5, float("nan")], pa.float32()), pa.array([float("nan"), 1.5, -1.0], pa.float32())),
    "date32 and the epoch": (pa.array([date(2025, 1, 2), date(1970, 1, 1)]),
                             pa.array([date(2025, 1, 2), date(2025, 1, 3), None])),
    "timestamp": (pa.array([datetime(2025, 1, 2, 3)], pa.timestamp("us", "UTC")),
                  pa.array([datetime(2025, 1, 2, 3), None], pa.timestamp("us", "UTC"))),
    "bool": (pa.array([True, False]), pa.array([False, True, None])),
    "string (Arrow's lookup)": (pa.array(["a", "b"]), pa.array(["b", None, "c", "a"])),
}


@pytest.mark.parametrize("case", sorted(KEY_CASES))
def test_key_lookup_by_binary_search_equals_arrows_set_lookup(case):
    """The input keys sorted once and each table's keys found by binary search match exactly the
    rows (and input row numbers) Arrow's set lookup matches, with the merge's key equality
    (-0.0 = 0.0, NaN = NaN, a NULL published key matches nothing)."""
    from lancepart.model.keys import comparable_keys
    from lancepart.write.merge import _ADDR, _ROW, KeyLookup

    inp, pub = KEY_CASES[case]
    keys = comparable_keys(pa.table({"k": inp}), ["k"]).append_column(_ROW, pa.array(range(len(inp)), pa.int64()))
    published = comparable_keys(pa.table({"k": pub, _ADDR: pa.array(range(len(pub)), pa.uint64())}), ["k"])
    lookup = KeyLookup(keys, ["k"])
    assert (lookup.sorted is not None) == (case != "string (Arrow's lookup)")
    got = lookup.find(published).select([_ADDR, _ROW]).to_pylist()
    lookup.sorted = None  # Arrow's set lookup
    assert got == lookup.find(published).select([_ADDR, _ROW]).to_pylist()
    assert got  # something matched
