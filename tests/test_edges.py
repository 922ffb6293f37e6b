"""Answers at the edges (issue 30): an empty projection keeps the row count (item 2), as plain
Lance and every ``count(*)`` engine expect; never 0 rows. Checked against plain pylance at each
table's ``read_version``."""

from __future__ import annotations

import json

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.storage.manifest import join_uri
from tests.test_indexes import SCHEMA, SPEC, rows


@pytest.fixture
def ns(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, SPEC)
    ns.write(rows(20))
    return ns


def plain_rows(ns: PartitionedNamespace) -> int:
    m = lance.dataset(join_uri(ns.root, "__manifest"))
    return sum(lance.dataset(join_uri(ns.root, r["location"]), version=r["read_version"]).count_rows()
               for r in m.to_table(filter="object_type = 'table'").to_pylist() if r["read_version"] is not None)


def test_empty_projection_keeps_the_row_count(ns, capsys):
    """Item 2: ``columns=[]`` gives every matching row and no column, on every reader."""
    assert plain_rows(ns) == 20
    t = ns.to_table(columns=[])
    assert (t.num_rows, t.num_columns) == (20, 0)
    assert ns.to_table(filter="id >= 5", columns=[]).num_rows == 15
    assert ns.to_batches(columns=[]).read_all().num_rows == 20
    assert ns.to_batches(filter="part = 'a'", columns=[]).read_all().num_rows == 7
    assert len(ns.to_pandas(columns=[])) == 20
    v = ns.manifest_version
    ns.write(rows(10, start=100))
    ns.delete("id < 3")
    everything = ns.changes(v).read_all()
    bare = ns.changes(v, columns=[]).read_all()
    assert bare.num_rows == everything.num_rows == 13
    assert bare.column_names == ["_change_type", "_commit_version", "_commit_timestamp"]
    assert bare.column("_change_type").to_pylist() == everything.column("_change_type").to_pylist()
    assert main(["--json", "changes", ns.root, "--from", str(v), "--columns", ","]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(out["counts"].values()) == 13, out["counts"]


@pytest.mark.parametrize(("filter", "want"), [("TRUE", 20), ("1 = 1", 20), ("NOT FALSE", 20), ("FALSE", 0)])
def test_empty_projection_with_a_filter_on_no_column(ns, filter, want):
    """Found by the model test (``--stress``): a filter naming no column left nothing to read, and
    DataFusion saw no rows in batches without columns (``to_table(filter='TRUE', columns=[])``
    gave 0 rows of 20)."""
    assert ns.to_table(filter=filter, columns=[]).num_rows == want
    assert ns.to_batches(filter=filter, columns=[]).read_all().num_rows == want
    assert ns.to_table(filter=filter, columns=["id"]).num_rows == want


def test_empty_projection_of_an_empty_result_is_empty(ns):
    assert ns.to_table(filter="id < 0", columns=[]).num_rows == 0
    assert ns.to_table(filter="id < 0", columns=[]).schema == pa.schema([])


def test_search_reads_renamed_columns_by_field_id(tmp_path):
    """Item 1: after a rename (tables keep the old name until rewritten), vector and full-text
    search return the renamed column's values, and search a renamed column, as to_table does."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, SPEC)
    ns.write(rows(300))
    ns.create_index("txt", "INVERTED", min_rows=1)
    ns.update_schema(rename={"cat": "category", "txt": "body"})
    want = {r["id"]: r["category"] for r in ns.to_table(columns=["id", "category"]).to_pylist()}
    assert set(want.values()) == {"c0", "c1", "c2", "c3", "c4"}
    found = ns.search_text("body", "apple", k=20, columns=["id", "category", "body"])
    assert found.num_rows == 20 and found.column("category").null_count == 0
    assert all(want[r["id"]] == r["category"] and "apple" in r["body"] for r in found.to_pylist())
    q = rows(1, start=7).column("vec").to_pylist()[0]
    near = ns.search("vec", q, k=5, columns=["id", "category"])
    assert near.column("category").null_count == 0
    assert all(want[r["id"]] == r["category"] for r in near.to_pylist())
    assert ns.search("vec", q, k=5, filter="category = 'c2'", columns=["id", "category"]).column(
        "category").to_pylist() == ["c2"] * 5


def test_rollback_across_a_compaction_reports_only_what_changed(tmp_path):
    """Item 3: three appends, a compaction, one more append, then a rollback to the version
    before the compaction: the 30 rows of the appends are published again as they were (a
    compaction changes no row), so the rollback's only change is the 10 rows appended after it.
    The feed checks: snapshot(v-1) - deletes + inserts == snapshot(v) (time travel)."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, SPEC)
    for i in range(3):
        ns.write(rows(10, start=i * 10))
    v = ns.manifest_version
    assert ns.compact(min_small_fragments=2).partitions_touched == 3
    ns.write(rows(10, start=100))
    r = ns.rollback(v)
    feed = ns.changes(r.manifest_version - 1, r.manifest_version).read_all()
    kinds = feed.column("_change_type").to_pylist()
    assert kinds.count("delete") == 10 and kinds.count("insert") == 0, kinds
    assert sorted(feed.column("id").to_pylist()) == list(range(100, 110))
    # with a projection and a filter the same rows, projected
    only = ns.changes(r.manifest_version - 1, r.manifest_version, filter="id >= 105", columns=["id"]).read_all()
    assert sorted(only.column("id").to_pylist()) == list(range(105, 110))
    # a rollback undoing a delete brings the deleted rows back as inserts, and only those
    ns.delete("id < 5")
    v2 = ns.manifest_version
    r2 = ns.rollback(v2 - 1)
    back = ns.changes(r2.manifest_version - 1, r2.manifest_version).read_all()
    assert back.column("_change_type").to_pylist() == ["insert"] * 5
    assert sorted(back.column("id").to_pylist()) == list(range(5))


NESTED = pa.struct([("a", pa.int64()), ("inner", pa.struct([("x", pa.int32()), ("y", pa.utf8())]))])


def nested_rows(n: int, start: int = 0) -> pa.Table:
    vals = [None if i % 5 == 0 else {"a": i, "inner": None} if i % 3 == 0 else
            {"a": i, "inner": {"x": i, "y": f"v{i}"}} for i in range(start, start + n)]
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "k": [["p", "q", "r"][i % 3] for i in
                     range(start, start + n)], "s": pa.array(vals, NESTED)})


def test_nullable_struct_in_a_struct_is_written(tmp_path):
    """Item 4: a nullable struct nested in a struct was a PanicException in Lance (it asserts on
    the array slices a partition's rows are); now written, appended, merged and read back."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.utf8()), ("s", NESTED)])
    spec = {"id": 1, "fields": [{"field_id": "k", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns.write(nested_rows(40))
    ns.write(nested_rows(40, start=40))
    ns.merge(nested_rows(10, start=75), on=["id"])
    want = pa.concat_tables([nested_rows(75), nested_rows(10, start=75)]).cast(schema)
    assert plain_rows(ns) == 85
    got = ns.to_table().sort_by("id")
    assert got.column("s").to_pylist() == want.column("s").to_pylist()


def test_to_polars_takes_decimal256_and_fixed_offset_time_zones(tmp_path):
    """Item 4: to_polars panicked on decimal256 and failed on a '+05:30' time zone."""
    import decimal

    from lancepart.errors import InvalidArgumentError

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.utf8()), ("d", pa.decimal256(20, 2)),
                        ("ts", pa.timestamp("us", tz="+05:30")), ("wide", pa.decimal256(60, 2))])
    spec = {"id": 1, "fields": [{"field_id": "k", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns.write(pa.table({"id": [1, 2], "k": ["a", "b"], "d": [decimal.Decimal("1.25"), None], "ts": [0, 3_600_000_000],
                       "wide": [decimal.Decimal("1" * 50 + ".5"), None]}, schema=schema))
    df = ns.to_polars(columns=["id", "d", "ts"]).sort("id")
    assert [str(v) for v in df["d"].to_list()] == ["1.25", "None"]
    assert str(df.schema["ts"]) == "Datetime(time_unit='us', time_zone='UTC')"
    assert [v.timestamp() for v in df["ts"].to_list()] == [0, 3600]
    with pytest.raises(InvalidArgumentError, match="'wide'"):
        ns.to_polars()


def test_index_on_a_renamed_column_is_built_on_tables_that_keep_the_old_name(tmp_path):
    """Item 13 (found by the model test's --stress run): create_index on a column renamed after
    the tables were written failed (Lance: 'country2 not found in schema'): a table keeps its
    columns' names until it is rewritten, so every per-table index operation finds the column by
    field id. A later write (index on write), a compaction and a vector search with the index's
    metric all see it."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, SPEC)
    ns.write(rows(3000))
    ns.update_schema(rename={"cat": "category", "vec": "embedding"})
    r = ns.create_index("category", "BTREE", min_rows=1)
    assert r.partitions_touched == 3
    ns.create_index("embedding", "IVF_PQ", min_rows=1, num_partitions=2, num_sub_vectors=4, metric="cosine")
    ns.write(rows(300, start=10_000).rename_columns(["id", "part", "txt", "category", "embedding"]))
    assert ns.verify().ok, ns.verify().problems
    assert all(i["indexed"] == i["tables"] == 3 for i in ns.list_indexes()), ns.list_indexes()
    ns.compact(min_small_fragments=2)
    assert ns.verify().ok, ns.verify().problems
    assert ns.to_table(filter="category = 'c3'").num_rows == 660
    q = ns.to_table(filter="id = 5", columns=["embedding"]).column("embedding").to_pylist()[0]
    assert ns.search("embedding", q, k=1, columns=["id"], use_index=False).column("id").to_pylist() == [5]
    from lancepart.read.search import resolve_metric

    parts = ns.partitions()
    tables = [ns._published_dataset(p) for p in parts]
    assert resolve_metric("embedding", parts, tables, None, ns.snapshot().metadata) == "cosine"


def test_small_messages_and_exit_codes(ns, tmp_path, capsys):
    """Item 12: verify on a file exits 2 like every other command given a bad ROOT; an unknown
    column in a filter names no internal alias; DataFusion's messages are not prefixed twice;
    ``alter --add`` asks for NAME:TYPE."""
    from lancepart.errors import InvalidArgumentError

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["verify", str(afile)]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError) as e:
        ns.to_table(filter="nope = 1")
    assert "__lp_source" not in str(e.value) and "'nope'" in str(e.value)
    with pytest.raises(InvalidArgumentError) as e:
        ns.to_table(filter="id = = 1")
    assert "DataFusion error" not in str(e.value)
    assert main(["alter", ns.root, "--add", "nocolon"]) == 2
    assert "expected NAME:TYPE" in capsys.readouterr().err


def test_index_create_says_what_min_rows_left_out(ns, capsys):
    """Item 11: `index create` with the default --min-rows indexed none of the small tables and
    said nothing; full-text search then pointed at pylance. Now both say what to do."""
    from lancepart.errors import InvalidArgumentError

    assert main(["index", ns.root, "create", "txt", "INVERTED", "-q"]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 partition tables have fewer than --min-rows 10000 rows" in out and "--min-rows 0" in out
    with pytest.raises(InvalidArgumentError, match=r"lancepart index ROOT create txt INVERTED --min-rows 0"):
        ns.search_text("txt", "apple")
    assert main(["--json", "index", ns.root, "create", "txt", "INVERTED", "--min-rows", "0", "--replace", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["below_min_rows"] == {"min_rows": 0, "tables": 0}
    assert ns.refresh().search_text("txt", "apple", k=3).num_rows == 3


def test_evolve_history_names_no_merge(ns):
    """Item 12: the commit that adds a new spec's partition columns read 'merge' in history (Lance's
    name for add_columns), as if rows had been merged."""
    v = ns.manifest_version
    ns.evolve([{"field_id": "cat", "source_ids": [3], "transform": {"type": "identity"},
                "result_type": {"type": "utf8"}}])
    ops = [h.operation for h in ns.history() if h.version > v]
    assert "merge" not in ops and "add columns" in ops, ops


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_write_after_an_unpublished_rollback_keeps_the_published_schema(tmp_path, monkeypatch, mode):
    """Found by the model test (``--stress``): a rollback to before a schema change stopped before
    its ``__manifest`` commit left the table's latest version in the old schema (``x`` int32, no
    ``tag``), beyond the published one. The next write's fragments carry the published field ids;
    committing them on that version published a table whose ``x`` and ``tag`` read NULL. The
    commit now restores the published version first when the latest one's schema differs
    (docs/design.md §8 hazard 2): every value reads back, with plain pylance too."""
    from lancepart.util.faults import InjectedFault

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("part", pa.utf8()), ("x", pa.int32())])
    spec = {"id": 1, "fields": [{"field_id": "part", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), schema, spec)
    ns.write(pa.table({"id": [1], "part": ["a"], "x": pa.array([1], pa.int32())}))
    before = ns.manifest_version
    ns.update_schema(add=[pa.field("tag", pa.utf8())], widen={"x": pa.int64()})
    ns.write(pa.table({"id": [2], "part": ["a"], "x": [2], "tag": ["two"]}))
    monkeypatch.setenv("LANCEPART_FAULT", "before_manifest_commit:raise")
    with pytest.raises(InjectedFault):
        ns.rollback(before)
    monkeypatch.delenv("LANCEPART_FAULT")
    ns.refresh()
    ns.write(pa.table({"id": [3], "part": ["a"], "x": [3], "tag": ["three"]}), mode=mode)
    want = [{"id": 3, "part": "a", "x": 3, "tag": "three"}]
    if mode == "append":
        want = [{"id": 1, "part": "a", "x": 1, "tag": None}, {"id": 2, "part": "a", "x": 2, "tag": "two"}, *want]
    assert ns.refresh().to_table().sort_by("id").to_pylist() == want
    (p,) = ns.partitions()
    plain = lance.dataset(join_uri(ns.root, p.location), version=p.read_version).to_table().sort_by("id")
    assert plain.column("x").to_pylist() == [r["x"] for r in want]
    assert plain.column("tag").to_pylist() == [r["tag"] for r in want]
