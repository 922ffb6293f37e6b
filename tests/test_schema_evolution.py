"""Schema evolution with stable field ids (issue 14 item 1; item 6 for concurrent changes).

Spec partitioning.md "Schema" (one namespace schema, field ids never reused, consistent across
partition tables), "Source Field IDs" (specs survive renames), "Partition Expression" requirement
4 "Column removal resistant" (a dropped source reads as NULL). Everything is real: Lance tables
on disk, separate writer processes; oracles are computed here from the input, and tables are
read back with plain pylance where it matters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import InvalidArgumentError, SchemaMismatchError
from lancepart.evolution.schema_evolution import MAX_FIELD_ID_KEY, TABLE_FIELD_IDS_KEY
from lancepart.model.spec import field_id_of
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from tests.procs import wait_until_reached

REPO = Path(__file__).resolve().parents[1]


def _ids(ns) -> dict[str, int]:
    return {f.name: field_id_of(f) for f in ns.schema}


def _sorted(t: pa.Table, by: str = "id") -> pa.Table:
    return t.sort_by(by)


def _table(ns, info) -> lance.LanceDataset:
    """A partition table at its published version, opened with plain pylance."""
    return lance.dataset(join_uri(ns.root, info.location), version=info.read_version)


def test_add_column_old_tables_read_null_and_appends_upgrade_them(ns):
    """Add: a fresh id above every id used; old tables read the column as NULL; an append to an
    old table brings it up to the current schema first (Lance schema evolution) and its rows
    keep their values; plain pylance sees the column and the field-id record in that table."""
    old = demo_events(300, seed=1, start_id=0, days=2)
    ns.write(old)
    before = _ids(ns)
    r = ns.update_schema(add=[pa.field("score", pa.float64())])
    assert r.manifest_version == ns.manifest_version
    assert _ids(ns)["score"] == max(before.values()) + 1
    assert {k: v for k, v in _ids(ns).items() if k != "score"} == before
    got = ns.to_table()
    assert got.schema.names == [*old.schema.names, "score"]
    assert got.column("score").null_count == 300

    new = demo_events(200, seed=2, start_id=1000, days=2)  # same days: the same partition tables
    new = new.append_column("score", pa.array([float(i) for i in range(200)]))
    ns.write(new)
    got = _sorted(ns.to_table())
    want = _sorted(pa.concat_tables([old.append_column("score", pa.nulls(300, pa.float64())), new]))
    assert got.equals(want.cast(got.schema))
    for info in ns.partitions():
        ds = _table(ns, info)
        assert "score" in ds.schema.names
        assert json.loads(ds.schema.metadata[TABLE_FIELD_IDS_KEY])["score"] == _ids(ns)["score"]


def test_a_write_brings_every_old_table_it_appends_to_up_to_date_in_one_commit(ns):
    """One publish path: after a schema change, a write into many old partition tables upgrades
    them all in ONE ``__manifest`` commit before its own publish, not one commit per table
    (which also raced each other for __manifest and could run out of retries on a wide write)."""
    ns.write(demo_events(300, seed=1, start_id=0, days=3))
    tables = len(ns.partitions())
    assert tables >= 6
    ns.update_schema(add=[pa.field("score", pa.float64())])
    v = ns.manifest_version
    ns.write(demo_events(300, seed=2, start_id=1000, days=3).append_column("score", pa.nulls(300, pa.float64())))
    ops = [e.operation for e in ns.history() if e.version > v]
    assert ops.count("upgrade table schema") == 1, ops
    assert all("score" in _table(ns, info).schema.names for info in ns.partitions())
    assert ns.to_table().num_rows == 600 and ns.verify().ok


def test_rename_keeps_id_and_spec_on_renamed_source_prunes(ns):
    """Rename: the id stays, so the bucket spec on ``user_id`` (source id 4) works through the new
    name: a filter on it prunes (ns.explain / scan_plan) and reads exactly the matching rows of
    old tables (column still named ``user_id`` in Lance) and new ones."""
    old = demo_events(400, seed=3, start_id=0, days=3)
    ns.write(old)
    uid = _ids(ns)["user_id"]
    ns.update_schema(rename={"user_id": "uid"})
    assert _ids(ns)["uid"] == uid and "user_id" not in ns.schema.names
    some = old.column("user_id")[0].as_py()
    # old tables only (their Lance column is still ``user_id``): read and pruned through the new name
    parts, _, _ = ns.scan_plan(f"uid = {some}")
    assert 0 < len(parts) < len(ns.partitions())
    got = ns.to_table(f"uid = {some}")
    assert _sorted(got).equals(_sorted(old.filter(pc.equal(old["user_id"], some))).rename_columns(
        got.schema.names).cast(got.schema))
    assert ns.to_table().column_names == [("uid" if c == "user_id" else c) for c in old.column_names]
    new = demo_events(100, seed=4, start_id=5000, days=3).rename_columns(
        ["uid" if c == "user_id" else c for c in old.schema.names])
    ns.write(new)
    parts, _, _ = ns.scan_plan(f"uid = {some}")
    assert 0 < len(parts) < len(ns.partitions())
    assert "pruned" in ns.explain(f"uid = {some}")
    got = ns.to_table(f"uid = {some}")
    want = pa.concat_tables([old.filter(pc.equal(old["user_id"], some)).rename_columns(new.schema.names),
                             new.filter(pc.equal(new["uid"], some))])
    assert _sorted(got).equals(_sorted(want).cast(got.schema))
    assert ns.to_table().num_rows == 500


def test_drop_partition_source_reads_null_and_new_rows_go_to_null_partition(ns):
    """Drop a partition source (event_date, the identity field's source): the spec stays, the
    column leaves reads, and new rows land in the partition whose event_date value is NULL
    (spec "Column removal resistant")."""
    old = demo_events(200, seed=5, start_id=0, days=2)
    ns.write(old)
    ns.update_schema(drop=["event_date"])
    assert "event_date" not in ns.schema.names
    assert ns.current_spec.fields[0].source_ids == [1]
    got = ns.to_table()
    assert "event_date" not in got.schema.names and got.num_rows == 200
    new = demo_events(50, seed=6, start_id=9000, days=2).drop(["event_date"])
    ns.write(new)
    ids = set(new.column("id").to_pylist())
    parts = {p.object_id: p for p in ns.partitions()}
    holding = [p for p in parts.values() if ids & set(_table(ns, p).to_table(columns=["id"]).column("id").to_pylist())]
    assert holding and all(p.values["event_date"] is None for p in holding)
    assert ns.to_table().num_rows == 250


def test_widen_int32_and_float32(root):
    """Widen int32 -> int64 and float32 -> float64: old tables read cast; a value beyond int32
    written afterwards lands in the partition the same bucket gives (type-promotion resistant)."""
    schema = pa.schema([pa.field("k", pa.int32()), pa.field("x", pa.float32())])
    spec = {"id": 1, "fields": [{"field_id": "kb", "source_ids": [0], "transform": {"type": "bucket", "num_buckets": 4},
                                 "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(root, schema, spec)
    ns.write(pa.table({"k": pa.array([1, 2, 3, 4], pa.int32()), "x": pa.array([0.5, 1.5, 2.5, 3.5], pa.float32())}))
    before = {p.values["kb"]: p.object_id for p in ns.partitions()}
    ns.update_schema(widen={"k": pa.int64(), "x": pa.float64()})
    assert ns.schema.field("k").type == pa.int64() and _ids(ns) == {"k": 0, "x": 1}
    got = ns.to_table()
    assert got.schema.field("k").type == pa.int64() and got.schema.field("x").type == pa.float64()
    assert sorted(got.column("k").to_pylist()) == [1, 2, 3, 4]
    ns.write(pa.table({"k": pa.array([1, 2**40], pa.int64()), "x": pa.array([9.0, 10.0])}))
    after = {p.values["kb"]: p.object_id for p in ns.partitions()}
    assert all(after[b] == oid for b, oid in before.items())  # k=1 went back into its old table
    assert sorted(ns.to_table().column("k").to_pylist()) == [1, 1, 2, 3, 4, 2**40]
    assert ns.verify(deep=True).ok


def test_field_ids_never_reused_after_drop_then_add(ns):
    """Drop ``amount`` then add a new ``amount``: it gets an id above the dropped one (the
    ``lancepart.max_field_id`` root property), and old rows do not show the dropped values."""
    ns.write(demo_events(100, seed=7, start_id=0, days=1))
    dropped = _ids(ns)["amount"]
    ns.update_schema(drop=["amount"])
    top = int(ns.describe_namespace([])[MAX_FIELD_ID_KEY])
    ns.update_schema(add=[pa.field("amount", pa.float64())])
    assert _ids(ns)["amount"] == top + 1 > dropped
    assert ns.to_table().column("amount").null_count == 100  # the old values belong to the dropped field


@pytest.mark.parametrize(("change", "error", "named"), [
    ({"add": [pa.field("z", pa.int64(), nullable=False)]}, SchemaMismatchError, "'z'"),
    ({"add": [pa.field("country", pa.utf8())]}, InvalidArgumentError, "'country'"),
    ({"rename": {"nope": "x"}}, InvalidArgumentError, "nope"),
    ({"rename": {"country": "amount"}}, InvalidArgumentError, "amount"),
    ({"rename": {"country": "amount", "amount": "country"}}, InvalidArgumentError, "already in use"),
    ({"drop": ["nope"]}, InvalidArgumentError, "nope"),
    ({"drop": ["country"], "rename": {"country": "c"}}, InvalidArgumentError, "country"),
    ({"widen": {"amount": pa.float32()}}, SchemaMismatchError, "'amount'"),
    ({"widen": {"country": pa.int64()}}, SchemaMismatchError, "'country'"),
    ({"widen": {"user_id": pa.int32()}}, SchemaMismatchError, "'user_id'"),
    ({"widen": {"event_date": pa.date64()}}, SchemaMismatchError, "'event_date'"),
    ({}, InvalidArgumentError, "nothing to change"),
    ({"drop": ["id", "event_date", "event_ts", "country", "user_id", "amount"]}, InvalidArgumentError, "no column"),
])
def test_refused_changes_are_typed_and_publish_nothing(ns, change, error, named):
    """Every refused change: a typed error naming the column, and no ``__manifest`` commit."""
    version = ns.manifest_version
    with pytest.raises(error, match=named):
        ns.update_schema(**change)
    assert ns.refresh().manifest_version == version


def test_identity_source_cannot_widen(root):
    """An identity field's result_type is its source type: widening that source would make the
    spec invalid, so it is refused (SchemaMismatchError naming the partition field)."""
    ns = PartitionedNamespace.create(root, pa.schema([pa.field("k", pa.int32())]), {"id": 1, "fields": [
        {"field_id": "k", "source_ids": [0], "transform": {"type": "identity"}, "result_type": {"type": "int32"}}]})
    with pytest.raises(SchemaMismatchError, match="partition field 'k'"):
        ns.update_schema(widen={"k": pa.int64()})


def test_read_only_handle_refuses(ns):
    ns.write(demo_events(10, seed=8))
    ro = PartitionedNamespace.open(ns.root, version=ns.manifest_version)
    with pytest.raises(InvalidArgumentError, match="update_schema"):
        ro.update_schema(add=[pa.field("z", pa.int64())])


def test_compaction_rewrites_old_tables_into_current_schema_and_verify_accepts_past_forms(ns):
    """Old tables are a valid past form (verify ok); compaction brings them to the current schema."""
    ns.write(demo_events(200, seed=9, start_id=0, days=2))
    ns.write(demo_events(200, seed=10, start_id=1000, days=2))
    want = _sorted(ns.to_table())
    ns.update_schema(rename={"country": "region"}, add=[pa.field("note", pa.utf8())], drop=["event_ts"])
    assert ns.verify(deep=True).ok
    r = ns.compact()
    assert r.details["schema_upgraded"] == len(ns.partitions())
    for info in ns.partitions():
        assert _table(ns, info).schema.names == ns.schema.names
    got = _sorted(ns.to_table())
    assert got.column("region").equals(want.column("country"))
    assert got.column("note").null_count == got.num_rows
    assert ns.verify(deep=True).ok


_SCHEMA_PROC = textwrap.dedent("""
    import sys, time, pyarrow as pa
    from lancepart import PartitionedNamespace
    root, prefix, n, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    ns = PartitionedNamespace.open(root)
    time.sleep(max(0.0, start_at - time.time()))
    retries = 0
    for i in range(n):
        retries += ns.update_schema(add=[pa.field(f"{prefix}{i}", pa.int64())]).retries
        time.sleep(0.2)
    print(retries)
""")

_WRITE_PROC = textwrap.dedent("""
    import sys, time
    from lancepart import PartitionedNamespace
    from lancepart.util.sample import demo_events
    root, n, start_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    ns = PartitionedNamespace.open(root)
    time.sleep(max(0.0, start_at - time.time()))
    for i in range(n):
        if i % 2:
            ns.refresh()  # odd writes know the newest schema (tables get upgraded), even ones an older one
        ns.write(demo_events(100, seed=100 + i, start_id=10_000 * (i + 1), days=2))
    print("ok")
""")


def _spawn(code: str, *args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_update_schema_and_writes_in_separate_processes(ns):
    """Item 6: two processes adding columns and one writing into the same partition tables, at
    once. Every column lands (re-validated on conflict, ids distinct), every row lands once."""
    ns.write(demo_events(100, seed=11, start_id=0, days=2))
    start = time.time() + 3.0
    procs = [_spawn(_SCHEMA_PROC, ns.root, "a", 4, start), _spawn(_SCHEMA_PROC, ns.root, "b", 4, start),
             _spawn(_WRITE_PROC, ns.root, 4, start)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        outs.append(out.strip())
    print("update_schema retries:", outs[:2])
    ns.refresh()
    ops = [e.operation for e in reversed(ns.history())]
    print("commits in order:", ops)
    added = [f"{x}{i}" for x in "ab" for i in range(4)]
    assert set(added) <= set(ns.schema.names)
    ids = list(_ids(ns).values())
    assert len(set(ids)) == len(ids)
    got = ns.to_table()
    assert got.num_rows == 500
    assert sorted(got.column("id").to_pylist()) == sorted(
        list(range(100)) + [10_000 * (i + 1) + j for i in range(4) for j in range(100)])
    assert ns.verify(deep=True).ok


_ONE_CHANGE = textwrap.dedent("""
    import json, sys, pyarrow as pa
    from lancepart import PartitionedNamespace
    from lancepart.errors import LancepartError
    ns = PartitionedNamespace.open(sys.argv[1])
    try:
        r = ns.update_schema(add=[pa.field(sys.argv[2], pa.int64())])
    except LancepartError as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
    else:
        print(json.dumps({"retries": r.retries}))
""")


def _slow_change(root: str, name: str) -> tuple[subprocess.Popen, Path]:
    """A process whose update_schema, between reading the schema and committing, waits until the
    returned file exists."""
    go = Path(root).parent / f"go-{name}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LANCEPART_FAULT": f"before_schema_commit:wait:{go}"}
    p = subprocess.Popen([sys.executable, "-c", _ONE_CHANGE, root, name], env=env, cwd=str(REPO),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, go


def test_schema_change_that_lost_the_race_rebases_on_the_newest_schema(ns):
    """Item 6: a change computed on schema S, beaten by another change, is re-validated and
    re-applied on the newest schema: both columns land, with distinct fresh ids."""
    p, go = _slow_change(ns.root, "slow")
    wait_until_reached(go, p)
    ns.update_schema(add=[pa.field("fast", pa.int64())])
    go.touch()
    out, err = p.communicate(timeout=120)
    assert json.loads(out.strip().splitlines()[-1])["retries"] >= 1, err[-2000:]
    ns.refresh()
    assert ns.schema.names[-2:] == ["fast", "slow"]
    assert _ids(ns)["slow"] == _ids(ns)["fast"] + 1


def test_schema_change_invalid_on_the_newest_schema_is_refused(ns):
    """Item 6: re-validation on the newest schema refuses what has become invalid (the same
    column name added meanwhile): a typed error, one column, nothing overwritten."""
    p, go = _slow_change(ns.root, "dup")
    wait_until_reached(go, p)
    ns.update_schema(add=[pa.field("dup", pa.utf8())])
    go.touch()
    out, err = p.communicate(timeout=120)
    res = json.loads(out.strip().splitlines()[-1])
    assert res["error"] == "InvalidArgumentError" and "'dup'" in res["message"], err[-2000:]
    ns.refresh()
    assert ns.schema.names.count("dup") == 1 and ns.schema.field("dup").type == pa.utf8()


_SLOW_WRITE = textwrap.dedent("""
    import json, sys
    from lancepart import PartitionedNamespace
    from lancepart.errors import LancepartError
    from lancepart.util.sample import demo_events
    ns = PartitionedNamespace.open(sys.argv[1])
    try:
        r = ns.write(demo_events(100, seed=21, start_id=50_000, days=1))
    except LancepartError as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
    else:
        print(json.dumps({"rows": r.rows_written}))
""")


def test_write_whose_table_was_widened_meanwhile_goes_again_in_the_new_form(ns):
    """A write's fragments hold ``country`` as the Lance field the table had when they were
    written; a widening brought the table up to date (a new Lance field) before the write
    published. Committing them would read their ``country`` as NULL: the table commit refuses
    (SchemaChangedError, nothing committed) and the write, whose input is a table in memory,
    goes again on the new schema: its rows land once, with their values."""
    ns.write(demo_events(100, seed=20, start_id=0, days=1))
    go = Path(ns.root).parent / "go-write"
    env = {**os.environ, "PYTHONPATH": str(REPO), "LANCEPART_FAULT": f"after_fragments:wait:{go}"}
    p = subprocess.Popen([sys.executable, "-c", _SLOW_WRITE, ns.root], env=env, cwd=str(REPO),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until_reached(go, p)  # the writer has fragments and waits
    ns.update_schema(widen={"country": pa.large_utf8()})
    assert ns.compact(min_small_fragments=99).details["schema_upgraded"] == len(ns.partitions())
    go.touch()
    out, err = p.communicate(timeout=120)
    res = json.loads(out.strip().splitlines()[-1])
    assert res == {"rows": 100}, err[-2000:]
    got = ns.refresh().to_table()
    assert got.num_rows == 200 and got.column("country").null_count == 0
    assert sorted(got.column("id").to_pylist()) == list(range(100)) + list(range(50_000, 50_100))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "lancepart.cli", *args], capture_output=True, text=True, env=env,
                          cwd=str(REPO), timeout=300)


def test_cli_alter(ns):
    """``lancepart alter ROOT --add --rename --drop --widen --json``: one commit, the new columns
    with their field ids; a refused change exits 2 with the typed error; nothing to do exits 64."""
    ns.write(demo_events(50, seed=30, days=1))
    before = _ids(ns)
    p = _cli("alter", ns.root, "--add", "price:decimal(12,2)", "--add", "note:string", "--rename", "country=region",
             "--drop", "event_ts", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    cols = {c["name"]: c for c in out["columns"]}
    assert cols["region"]["field_id"] == before["country"] and "event_ts" not in cols
    assert cols["price"]["type"] == "decimal128(12, 2)" and cols["note"]["type"] == "string"
    assert cols["price"]["field_id"] == max(before.values()) + 1
    assert out["manifest_version"] == ns.refresh().manifest_version
    assert ns.to_table().column("region").null_count == 0
    p = _cli("alter", ns.root, "--widen", "price:decimal(14,2)", "--json")
    assert p.returncode == 0, p.stderr
    p = _cli("alter", ns.root, "--widen", "amount:float32", "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["error"] == "SchemaMismatchError"
    assert "'amount'" in json.loads(p.stdout)["message"]
    p = _cli("alter", ns.root, "--json")
    assert p.returncode == 64
    p = _cli("alter", ns.root, "--add", "bad:nosuchtype", "--json")
    assert p.returncode == 2 and "nosuchtype" in json.loads(p.stdout)["message"]


def test_spark_read_shows_old_tables_in_the_current_schema(spark, root):
    """lps.read and the ``lancepart`` data source read tables of older schema forms like
    ``ns.to_table`` does: by field id, including tables written before the first change (named
    by ``lancepart.legacy_field_ids``), and a filter on a renamed column prunes and matches."""
    from lancepart import spark as lps
    from tests.conftest import create_events_ns

    ns = create_events_ns(root)
    data = demo_events(300, seed=40, start_id=0, days=3)
    ns.write(data)
    ns.update_schema(rename={"user_id": "uid"}, drop=["amount"], add=[pa.field("amount", pa.float64())])
    some = data.column("user_id")[0].as_py()
    for flt in (None, f"uid = {some}"):
        want = _sorted(ns.to_table(flt))
        assert want.num_rows > 0 and want.column("amount").null_count == want.num_rows
        got = _sorted(lps.read(spark, ns.root, flt).toArrow())
        assert got.column_names == want.column_names
        assert got.cast(want.schema).equals(want)
    got = spark.read.format("lancepart").load(ns.root).where(f"uid = {some}").toArrow()
    assert sorted(got.column("id").to_pylist()) == sorted(ns.to_table(f"uid = {some}").column("id").to_pylist())


def test_rename_onto_a_dropped_name_in_one_change(ns):
    """Drop ``amount`` and rename ``country`` to ``amount`` in one call: by field id the old
    tables' ``amount`` column is the dropped field and their ``country`` the new ``amount``;
    compaction brings them there with Lance (drop first, then rename)."""
    data = demo_events(120, seed=50, start_id=0, days=2)
    ns.write(data)
    ns.update_schema(drop=["amount"], rename={"country": "amount"})
    want = _sorted(data).column("country")
    assert _sorted(ns.to_table()).column("amount").equals(want)
    ns.compact(min_small_fragments=99)
    for info in ns.partitions():
        assert _table(ns, info).schema.field("amount").type == pa.utf8()
    assert _sorted(ns.to_table()).column("amount").equals(want)
    assert ns.verify(deep=True).ok
