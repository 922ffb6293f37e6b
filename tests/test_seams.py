"""Where two features meet (issue 21): a schema change beside a delete, a merge or replace-where
after a schema change, merge keys that filters call equal.

Spec partitioning.md "Schema" (field ids stable across partition tables, so a table written
under an older form of the schema is read by field id), "Transaction / Commit Behavior" (a
publish moves ``read_version`` to a version holding exactly the published rows plus its own
change). Every check reads what ``__manifest`` publishes with plain pylance: each partition table
at its ``read_version``, its columns placed by the field-id record the table carries.
"""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart.errors import DuplicateKeyError
from lancepart.model.spec import field_id_of
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from lancepart.write import upgrade as schema_upgrade
from tests.conftest import create_events_ns, manifest_version


def published(root: str) -> pa.Table:
    """Every published row in the namespace schema, read with plain pylance: each partition
    table at its read_version, its columns matched to the namespace schema by field id."""
    man = lance.dataset(join_uri(root, "__manifest"))
    md = man.metadata
    fields = json.loads(md["schema"])["fields"]
    names = {int(f["metadata"]["lance:field_id"]): f["name"] for f in fields}
    legacy = json.loads(md.get("lancepart.legacy_field_ids", "{}"))
    parts = []
    for r in man.to_table().to_pylist():
        if r["object_type"] != "table" or r["read_version"] is None or "$" not in r["object_id"]:
            continue
        t = lance.dataset(join_uri(root, r["location"]), version=r["read_version"]).to_table()
        raw = (t.schema.metadata or {}).get(b"lancepart.field_ids")
        ids = json.loads(raw) if raw is not None else (legacy or {n: i for i, n in names.items()})
        by_id = {int(ids[n]): n for n in t.column_names if n in ids}
        parts.append(pa.table({name: t.column(by_id[fid]) if fid in by_id else pa.nulls(t.num_rows)
                               for fid, name in names.items()}))
    return pa.concat_tables(parts, promote_options="permissive")


def rows_by_id(t: pa.Table) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for r in t.to_pylist():
        assert r["id"] not in out, f"id {r['id']} published twice"
        out[r["id"]] = r
    return out


def ids_of(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


# ------------------------------------------------------------------ 1. a schema upgrade and a delete
def test_a_schema_upgrade_never_publishes_a_concurrent_delete(root, monkeypatch):
    """A write after update_schema brings the old table up to date on its published version. A
    delete that commits its table version just then (and will fail to publish) must not be
    published by the upgrade: the upgrade checks that its version holds exactly the published
    rows, deletion files included, not only the same fragment ids."""
    ns = create_events_ns(root)
    old = demo_events(200, seed=1, start_id=0, days=1)
    ns.write(old)
    ns.update_schema(add=[pa.field("score", pa.float64())])
    real = schema_upgrade._evolve_table
    fired: list[str] = []

    def delete_first(uri, so, md, schema):  # a rival's table commit lands inside the upgrade's window
        if not fired:
            fired.append(uri)
            lance.dataset(uri).delete("id < 20")
        return real(uri, so, md, schema)

    monkeypatch.setattr(schema_upgrade, "_evolve_table", delete_first)
    new = demo_events(50, seed=2, start_id=1_000, days=1)
    ns.write(new)
    assert fired, "the write did not upgrade an old table"
    assert ids_of(published(root)) == ids_of(old) + ids_of(new)
    assert ids_of(ns.to_table()) == ids_of(old) + ids_of(new)
    assert ns.verify().ok


# ------------------------------------------------------------------ 3. merge / replace-where after a change
CHANGES = {
    "add": dict(add=[pa.field("score", pa.float64())]),
    "rename": dict(rename={"amount": "total"}),
    "drop": dict(drop=["amount"]),
}


def _old_rows(ns, kind: str, n: int, **kw) -> pa.Table:
    """Rows written before the change; for ``widen`` the tables get an int32 column first."""
    rows = demo_events(n, **kw)
    if kind == "widen":
        ns.update_schema(add=[pa.field("small", pa.int32())])
        rows = rows.append_column("small", pa.array(range(n), pa.int32()))
    ns.write(rows)
    return rows


def _change(ns, kind: str) -> None:
    if kind == "widen":  # the old tables hold it as int32
        ns.update_schema(widen={"small": pa.int64()})
    else:
        ns.update_schema(**CHANGES[kind])


def _as_schema(rows: pa.Table, schema: pa.Schema, kind: str) -> pa.Table:
    """Demo event rows in ``schema``, the namespace schema after the change ``kind``."""
    if kind == "rename":
        rows = rows.rename_columns(["total" if n == "amount" else n for n in rows.column_names])
    return pa.table({f.name: rows.column(f.name).cast(f.type) if f.name in rows.column_names
                     else pa.nulls(rows.num_rows, f.type) for f in schema})


@pytest.mark.parametrize("kind", ["add", "rename", "widen", "drop"])
def test_merge_after_a_schema_change(root, kind):
    """ns.merge updates rows of tables written under the older schema and inserts new ones;
    the published rows equal the oracle (the merged rows replace the old ones, nothing else moves)."""
    ns = create_events_ns(root)
    old = _old_rows(ns, kind, 300, seed=1, start_id=0, days=2)
    _change(ns, kind)
    schema = ns.schema
    base = _as_schema(old, schema, kind)
    upd = base.slice(0, 40)
    upd = upd.set_column(upd.schema.get_field_index("user_id"), schema.field("user_id"),
                         pc.add(upd.column("user_id"), 7))  # moves rows to other buckets
    ins = _as_schema(demo_events(20, seed=3, start_id=5_000, days=2), schema, kind)
    r = ns.merge(pa.concat_tables([upd, ins]), on=["id"])
    assert (r.details["rows_updated"], r.details["rows_inserted"]) == (40, 20)
    expected = rows_by_id(pa.concat_tables([base.slice(40), upd, ins]))
    assert rows_by_id(published(root)) == expected
    assert rows_by_id(ns.to_table()) == expected
    assert ns.verify().ok


@pytest.mark.parametrize("kind", ["add", "rename", "widen"])
def test_replace_where_after_a_schema_change(root, kind):
    ns = create_events_ns(root)
    old = _old_rows(ns, kind, 300, seed=1, start_id=0, days=2)
    _change(ns, kind)
    schema = ns.schema
    day = old.column("event_date")[0].as_py()
    where = f"event_date = DATE '{day}'"
    repl = _as_schema(demo_events(30, seed=4, start_id=9_000, days=1), schema, kind)
    repl = repl.set_column(1, schema.field(1), pa.array([day] * repl.num_rows, pa.date32()))
    r = ns.write(repl, mode="overwrite", where=where)
    kept = old.filter(pc.not_equal(old.column("event_date"), pa.scalar(day, pa.date32())))
    assert r.details["rows_deleted"] == old.num_rows - kept.num_rows
    assert ids_of(published(root)) == ids_of(kept) + ids_of(repl)
    assert ns.verify().ok


def test_a_renamed_key_still_matches_rows_of_old_tables(root):
    """Merge reads the key of a table written before a rename under its old name (by field
    id): the key is updated, never inserted a second time."""
    ns = create_events_ns(root)
    old = demo_events(100, seed=1, start_id=0, days=1)
    ns.write(old)
    ns.update_schema(rename={"id": "event_id"})
    upd = ns.to_table().slice(0, 10)
    r = ns.merge(upd, on=["event_id"])
    assert (r.details["rows_updated"], r.details["rows_inserted"]) == (10, 0)
    assert sorted(published(root).column("event_id").to_pylist()) == ids_of(old)


def test_delete_by_a_renamed_column_finds_rows_of_old_tables(root):
    ns = create_events_ns(root)
    old = demo_events(200, seed=1, start_id=0, days=2)
    ns.write(old)
    ns.update_schema(rename={"user_id": "uid"})
    uid = old.column("user_id")[0].as_py()
    r = ns.delete(f"uid = {uid}")
    gone = old.filter(pc.equal(old.column("user_id"), uid))
    assert r.details["rows_deleted"] == gone.num_rows > 0
    assert ids_of(published(root)) == sorted(set(ids_of(old)) - set(ids_of(gone)))


def test_a_column_added_under_a_dropped_name_is_not_the_old_one(root):
    """Drop then add under the same name: a new field id. Rows of old tables hold the dropped
    column's values under that name; a delete by the new column must see them as NULL."""
    ns = create_events_ns(root)
    old = demo_events(100, seed=1, start_id=0, days=1)
    ns.write(old)
    ns.update_schema(drop=["amount"])
    ns.update_schema(add=[pa.field("amount", pa.float64())])
    before = manifest_version(root)
    r = ns.delete("amount IS NOT NULL")
    assert r.details["rows_deleted"] == 0
    assert ids_of(published(root)) == ids_of(old)
    assert manifest_version(root) == before


# ------------------------------------------------------------------ 2. -0.0 and 0.0, NaN
def _float_ns(root):
    from lancepart import PartitionedNamespace

    schema = pa.schema([pa.field("f", pa.float64()), pa.field("g", pa.utf8()), pa.field("v", pa.int64())])
    spec = {"id": 1, "fields": [{"field_id": "g", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "utf8"}}]}
    return PartitionedNamespace.create(root, schema, spec)


@pytest.mark.parametrize("on", [["f"], ["f", "g"]])
def test_minus_zero_and_zero_are_one_merge_key(root, on):
    """Keys compare as filters do (DataFusion: -0.0 = 0.0, NaN = NaN): merging -0.0 where 0.0
    is published updates that row; merging NaN where NaN is published updates it."""
    ns = _float_ns(root)
    ns.write(pa.table({"f": [0.0, float("nan"), 1.5], "g": ["a", "a", "a"], "v": [1, 2, 3]}))
    r = ns.merge(pa.table({"f": [-0.0, float("nan")], "g": ["a", "a"], "v": [10, 20]}), on=on)
    assert (r.details["rows_updated"], r.details["rows_inserted"]) == (2, 0)
    got = published(root)
    assert sorted(got.column("v").to_pylist()) == [3, 10, 20]
    assert ns.to_table("f = 0").column("v").to_pylist() == [10]


def test_an_input_holding_zero_and_minus_zero_is_a_duplicate_key(root):
    ns = _float_ns(root)
    ns.write(pa.table({"f": [1.0], "g": ["a"], "v": [1]}))
    before = manifest_version(root)
    for keys in ([0.0, -0.0], [float("nan"), float("nan")]):
        with pytest.raises(DuplicateKeyError):
            ns.merge(pa.table({"f": keys, "g": ["a", "a"], "v": [1, 2]}), on=["f"])
    assert manifest_version(root) == before


def test_field_ids_of_the_checked_schema(root):
    """The helper above places columns by field id, as the spec asks (a sanity check of the oracle)."""
    ns = create_events_ns(root)
    ns.write(demo_events(10, seed=1))
    ns.update_schema(rename={"amount": "total"})
    got = published(root)
    assert got.column_names == ns.schema.names
    assert {f.name: field_id_of(f) for f in ns.schema}["total"] == 5


def test_a_partition_created_after_a_column_was_added_keeps_its_values(root):
    """A new partition table created by a write after update_schema(add) records its columns'
    field ids; without that record it is read by the names of the schema before the first
    change, and the added column reads as NULL although its values are on disk."""
    ns = create_events_ns(root)
    ns.write(demo_events(20, seed=1, days=1))
    ns.update_schema(add=[pa.field("small", pa.int32())])
    rows = demo_events(30, seed=2, start_id=100, days=3)  # days 2 and 3: new partitions
    rows = rows.append_column("small", pa.array(range(30), pa.int32()))
    ns.write(rows)
    got = {r["id"]: r["small"] for r in published(root).to_pylist() if r["id"] >= 100}
    assert got == dict(zip(rows.column("id").to_pylist(), range(30), strict=True))
    t = ns.to_table("id >= 100")
    assert sorted(t.column("small").to_pylist()) == list(range(30))


# ------------------------------------------------------------------ 1 and 4 under a real mixed load
@pytest.mark.slow
def test_mixed_load_beside_schema_changes_loses_nothing_and_raises_only_typed_errors(root, stress):
    """Writers, a merge loop, a delete loop with few retries (some of its deletes fail) and
    compaction, beside a schema change (add, widen, rename) every moment, each in its own
    process. Every error is a typed lancepart error; every row a successful write or merge
    published is there once, exactly the rows of successful deletes are gone (a failed
    delete's rows are never published as deleted by someone else's commit), and the merged
    amounts are the last successful merge's."""
    import subprocess
    import sys

    from tests.procs import child_env

    ns = create_events_ns(root)
    initial = demo_events(200, seed=1, start_id=0, days=2)
    ns.write(initial)
    seconds = 60 if stress else 12
    roles = [("schema", 1), ("write", 2), ("write", 3), ("merge", 4), ("delete", 5), ("compact", 6)]
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).parent / "mixed_proc.py"), root, role,
                               str(seconds), str(seed)], env=child_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for role, seed in roles]
    ops = []
    for p in procs:
        out, err = p.communicate(timeout=seconds + 300)
        assert p.returncode == 0, err[-3000:]
        ops += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    raw = [o for o in ops if o.get("raw")]
    assert not raw, raw[:3]
    ok = [o for o in ops if o["ok"]]
    print({role: (sum(1 for o in ok if o["role"] == role), sum(1 for o in ops if o["role"] == role))
           for role, _ in roles})
    expected = set(initial.column("id").to_pylist())
    for o in ok:
        if "ids" in o:
            expected |= set(range(*o["ids"]))
        expected -= set(o.get("deleted", []))
    got = published(root)
    assert sorted(got.column("id").to_pylist()) == sorted(expected)
    merges = [o for o in ok if o["role"] == "merge"]
    if merges:
        last = {k: float(o["i"]) for o in merges for k in o["updated"]}
        amounts = {r["id"]: r["amount"] for r in got.to_pylist() if r["id"] in last}
        assert amounts == last
    ns.refresh()
    assert ns.verify().ok, ns.verify().problems[:3]


# ------------------------------------------------------------------ 9. a filter is an expression
@pytest.mark.parametrize("where", ["TRUE UNION SELECT * FROM t", "country = 'FR') OR (TRUE",
                                   "TRUE; SELECT 1", "TRUE ORDER BY id LIMIT 1"])
def test_a_filter_is_parsed_as_one_expression_never_spliced_into_sql(root, where):
    """replace-where and delete evaluate the caller's filter text as one expression; text that
    would change the query around it is refused with a typed error, on an empty namespace and on
    a written one, and nothing is published."""
    from lancepart.errors import InvalidFilterError, LancepartError
    from lancepart.read.snapshot import apply_filter

    rows = demo_events(10, seed=1, days=1)
    with pytest.raises(LancepartError):
        apply_filter(rows, where)
    ns = create_events_ns(root)
    for attempt in range(2):
        before = manifest_version(root)
        with pytest.raises(InvalidFilterError):
            ns.write(rows, mode="overwrite", where=where)
        with pytest.raises(InvalidFilterError):
            ns.delete(where)
        assert manifest_version(root) == before
        if attempt == 0:
            ns.write(demo_events(50, seed=2, days=1))
    assert ns.to_table().num_rows == 50


# ------------------------------------------------------------------ 8. rows a foreign writer appended
def test_verify_reports_rows_a_foreign_writer_appended_beyond_read_version(root):
    """Plain pylance appends to a partition table: not published, so not read; verify reports
    them as unpublished_rows (versions, row count). A lancepart job's own unpublished version
    (killed before its __manifest commit) is not reported. The next lancepart write to that
    partition leaves the foreign rows out."""
    import os

    from lancepart.errors import LancepartError
    from lancepart.util import faults

    ns = create_events_ns(root)
    ns.write(demo_events(100, seed=1, days=1))
    assert ns.verify().ok
    info = ns.partitions()[0]
    uri = join_uri(root, info.location)
    published_rows = lance.dataset(uri, version=info.read_version).count_rows()
    # a lancepart job that dies before publishing: its table versions carry lancepart's mark
    os.environ[faults.ENV] = "before_manifest_commit:raise"
    faults.reset()
    try:
        with pytest.raises(LancepartError):
            ns.write(demo_events(100, seed=2, start_id=500, days=1))
    finally:
        del os.environ[faults.ENV]
    assert lance.dataset(uri).version > info.read_version
    assert ns.verify().ok, ns.verify().problems
    extra = lance.dataset(uri, version=info.read_version).to_table().slice(0, 3)
    lance.write_dataset(extra, uri, mode="append")  # a foreign writer
    report = ns.verify()
    found = [p for p in report.problems if p.kind == "unpublished_rows"]
    assert [p.object_id for p in found] == [info.object_id] and not report.ok
    assert "3 row(s)" in found[0].message
    assert ns.to_table().num_rows == 100
    ns.write(demo_events(100, seed=3, start_id=1_000, days=1))
    ns.refresh()
    now = {p.object_id: p for p in ns.partitions()}[info.object_id]
    assert lance.dataset(uri, version=now.read_version).count_rows() >= published_rows
    assert ns.to_table().num_rows == 200
    assert sorted(set(ns.to_table().column("id").to_pylist())) == ids_of(ns.to_table())


# ------------------------------------------------------------------ found by the model: rollback
def test_rollback_to_a_partition_that_was_removed_and_made_again_since(root):
    """A rollback removes a partition; a later write makes it again, in a new table directory
    under the same object id; rolling forward to the first version must publish that version's
    table (its directory, its rows), not pin the new table at a version it never had."""
    ns = create_events_ns(root)
    ns.write(demo_events(40, seed=1, start_id=0, days=1))
    v_first = ns.manifest_version
    ns.write(demo_events(40, seed=2, start_id=100, days=2))  # day 2: new partitions
    v_both = ns.manifest_version
    expected = ids_of(ns.to_table())
    ns.rollback(v_first)  # the day-2 partitions leave __manifest
    ns.write(demo_events(40, seed=3, start_id=500, days=2))  # and are made again, in new directories
    ns.rollback(v_both)
    assert ids_of(published(root)) == expected
    assert ids_of(ns.refresh().to_table()) == expected
    assert ns.verify().ok, ns.verify().problems[:2]


# ------------------------------------------------------------------ found by the model: indexes
def test_a_declared_index_follows_a_renamed_column_and_blocks_its_drop(root):
    """An index declared on a column that is renamed follows it (same commit), so overwrite,
    compaction and verify keep working; dropping an indexed column is refused with a typed
    error until the index is dropped."""
    from lancepart.errors import InvalidArgumentError

    ns = create_events_ns(root)
    ns.write(demo_events(100, seed=1, days=1))
    ns.create_index("amount", "BTREE", min_rows=0)
    ns.update_schema(rename={"amount": "total"})
    assert [i["column"] for i in ns.list_indexes()] == ["total"]
    rows = demo_events(10, seed=2, start_id=1_000, days=1).rename_columns(
        ["total" if n == "amount" else n for n in demo_events(1).column_names])
    ns.write(rows)
    ns.write(rows, mode="overwrite")
    ns.compact()
    assert ids_of(ns.to_table()) == ids_of(rows)
    assert ns.verify().ok, ns.verify().problems[:2]
    before = manifest_version(root)
    with pytest.raises(InvalidArgumentError, match="drop the index first"):
        ns.update_schema(drop=["total"])
    assert manifest_version(root) == before
    ns.drop_index("amount_btree")
    ns.update_schema(drop=["total"])
    ns.write(demo_events(5, seed=3, start_id=2_000, days=1).drop_columns(["amount"]))
    assert ns.verify().ok
