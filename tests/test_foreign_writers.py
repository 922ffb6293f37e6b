"""Other writers in a lancepart root (issue 11, items 6, 7 and 8).

Spec: directory-namespace.md "V2: Manifest" (the five standard ``__manifest`` columns Lance's
own ``DirectoryNamespace`` knows), partitioning.md "Manifest Table Schema" (the
``read_version`` / ``read_branch`` / ``read_tag`` and ``partition_field_*`` columns) and
"Namespace Naming" (partition namespace ids are random 16-character base36 names).

Everything is real: pylance's ``lance.namespace.DirectoryNamespace`` writes into the root,
foreign spec-following writers are built with plain pylance, and what is published is checked
with plain pylance.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import pathlib
import secrets
import subprocess
import sys
from datetime import timedelta

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import CorruptNamespaceError, NamespaceNotFoundError
from lancepart.storage.manifest import join_uri

# the table metadata key Lance's DirectoryNamespace reads its writer feature flags from
NAMESPACE_WRITER_FLAGS_KEY = "lance.namespace.manifest.writer_feature_flags"

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("event_date", pa.date32()), ("country", pa.utf8())])
BY_DATE = {"id": 1, "fields": [{"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "date32"}}]}
D10, D11 = datetime.date(2025, 12, 10), datetime.date(2025, 12, 11)
LANCEPART_COLUMNS = ["read_version", "read_branch", "read_tag", "partition_field_event_date"]


def rows(ids, dates, countries) -> pa.Table:
    return pa.table({"id": ids, "event_date": dates, "country": countries}, schema=SCHEMA)


def manifest_ds(root: str) -> lance.LanceDataset:
    return lance.dataset(join_uri(root, "__manifest"))


def ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def unguard(root: str) -> None:
    """Remove the DirectoryNamespace writer flag, as a namespace lancepart created before it
    set the flag has it."""
    manifest_ds(root).update_metadata({NAMESPACE_WRITER_FLAGS_KEY: None})


def foreign_op(root: str, op: str):
    """One write of Lance's own DirectoryNamespace into the root."""
    d = lns.DirectoryNamespace(root=root)
    if op == "create_namespace":
        return d.create_namespace(lns.CreateNamespaceRequest(id=["foreign_ns"]))
    if op == "create_table":
        return d.create_table(lns.CreateTableRequest(id=["foreign_tbl"]), ipc(pa.table({"a": [1, 2]})))
    if op == "declare_table":
        return d.declare_table(lns.DeclareTableRequest(id=["foreign_decl"]))
    if op == "register_table":
        lance.write_dataset(pa.table({"a": [1]}), join_uri(root, "ext.lance"))
        return d.register_table(lns.RegisterTableRequest(id=["foreign_reg"], location="ext.lance"))
    raise AssertionError(op)


FOREIGN_OPS = ("create_namespace", "create_table", "declare_table", "register_table")
FOREIGN_OID = {"create_namespace": "foreign_ns", "create_table": "foreign_tbl", "declare_table": "foreign_decl",
               "register_table": "foreign_reg"}


@pytest.fixture
def two_days(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_DATE)
    ns.write(rows([1, 2], [D10, D10], ["US", "FR"]))
    ns.write(rows([3, 4], [D11, None], ["US", "DE"]))
    return ns


def sorted_rows(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["id"])


# ----------------------------------------------------------------------------- item 6
@pytest.mark.parametrize("op", FOREIGN_OPS)
def test_directory_namespace_refuses_to_rewrite_manifest(two_days, op):
    """Issue 11 item 6 / spec directory-namespace.md "V2: Manifest": Lance's DirectoryNamespace
    refuses every write into a lancepart root (writer feature flag in ``__manifest``'s table
    metadata), leaving ``__manifest`` untouched; reading through it keeps working."""
    root = two_days.root
    before = manifest_ds(root)
    with pytest.raises(Exception, match="writer feature flags"):
        foreign_op(root, op)
    after = manifest_ds(root)
    assert after.version == before.version
    assert set(LANCEPART_COLUMNS) <= set(after.schema.names)
    d = lns.DirectoryNamespace(root=root)
    assert d.list_namespaces(lns.ListNamespacesRequest(id=["v1"])).namespaces  # reads still work
    assert len(PartitionedNamespace.open(root).to_table()) == 4
    # lancepart's own writes are plain Lance commits: the flag does not stop them
    two_days.write(rows([5], [D10], ["US"]))
    assert len(PartitionedNamespace.open(root).to_table()) == 5


def test_next_publish_protects_a_namespace_created_before_the_flag(two_days):
    """Issue 11 item 6: a namespace created before lancepart set the DirectoryNamespace writer
    flag is protected from its next publish on, without a repair: Lance's DirectoryNamespace is
    refused afterwards and ``__manifest`` keeps its columns."""
    root = two_days.root
    unguard(root)
    assert NAMESPACE_WRITER_FLAGS_KEY not in manifest_ds(root).metadata
    two_days.write(rows([5], [D10], ["US"]))
    assert NAMESPACE_WRITER_FLAGS_KEY in manifest_ds(root).metadata
    before = manifest_ds(root).version
    with pytest.raises(Exception, match="writer feature flags"):
        foreign_op(root, "create_table")
    assert manifest_ds(root).version == before
    assert len(PartitionedNamespace.open(root).to_table()) == 5


@pytest.mark.parametrize("op", FOREIGN_OPS)
def test_stripped_manifest_typed_error_cleanup_refused_and_repaired(two_days, op, capsys):
    """Issue 11 item 6 / spec partitioning.md "Manifest Table Schema": a namespace without the
    flag (made before lancepart set it) is rewritten by DirectoryNamespace with its five columns.
    Opening, reading, writing and cleanup then raise CorruptNamespaceError naming the lost
    columns (never KeyError), cleanup removes nothing, and ``lancepart repair`` restores the
    columns from ``__manifest`` history in one commit, keeping the foreign row."""
    root = two_days.root
    expected = sorted_rows(two_days.to_table())
    stale = PartitionedNamespace.open(root)
    unguard(root)
    good_version = manifest_ds(root).version
    foreign_op(root, op)
    stripped = manifest_ds(root)
    assert stripped.schema.names == ["object_id", "object_type", "location", "metadata", "base_objects"]

    with pytest.raises(CorruptNamespaceError) as e:
        PartitionedNamespace.open(root)
    for col in LANCEPART_COLUMNS:
        assert col in str(e.value)
    assert "lancepart repair" in str(e.value)
    with pytest.raises(CorruptNamespaceError, match="read_version"):
        stale.write(rows([9], [D10], ["US"]))  # a handle opened before the damage
    with pytest.raises(CorruptNamespaceError, match="read_version"):
        stale.cleanup(older_than=timedelta(days=7))
    versions = {v["version"] for v in stripped.versions()}
    assert {v["version"] for v in manifest_ds(root).versions()} == versions  # cleanup removed nothing

    # dry run: reports, changes nothing
    from lancepart.cli import main

    capsys.readouterr()
    assert main(["repair", root, "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["needed"] and report["dry_run"] and report["new_version"] is None
    assert report["columns_restored"] == LANCEPART_COLUMNS
    assert report["from_version"] == good_version
    assert report["rows_carried_over"] == [FOREIGN_OID[op]]
    assert manifest_ds(root).version == stripped.version

    # the real thing, as a separate process
    proc = subprocess.run([sys.executable, "-m", "lancepart.cli", "repair", root, "--json"], capture_output=True,
                          text=True, timeout=300, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["new_version"] == stripped.version + 1  # one publish (indexes and the flag follow)
    assert report["rows_restored"] == 7  # v1, three partition namespaces and their three tables
    restored = manifest_ds(root)
    assert restored.schema.names[:9] == stripped.schema.names + LANCEPART_COLUMNS
    published = manifest_ds(root).checkout_version(report["new_version"]).to_table()
    assert FOREIGN_OID[op] in published.column("object_id").to_pylist()
    foreign = published.filter(pa.compute.equal(published.column("object_id"), FOREIGN_OID[op])).to_pylist()[0]
    assert all(foreign[c] is None for c in LANCEPART_COLUMNS)
    assert {i.name for i in restored.describe_indices()} >= {"object_id_idx", "object_type_idx"}

    ns = PartitionedNamespace.open(root)
    assert sorted_rows(ns.to_table()) == expected
    ns.write(rows([7], [D11], ["US"]))
    assert len(PartitionedNamespace.open(root).to_table()) == len(expected) + 1
    with pytest.raises(Exception, match="writer feature flags"):  # the flag is back
        lns.DirectoryNamespace(root=root).create_namespace(lns.CreateNamespaceRequest(id=["again"]))
    assert ns.repair().needed is False


def test_stripped_namespace_repaired_through_the_public_class(two_days):
    """A namespace ``open`` refuses (stripped by DirectoryNamespace) is repaired from the public
    object, without opening it: ``PartitionedNamespace.repair(root, ...)``; the instance form
    keeps working on a handle, also when called on the class with the handle."""
    root = two_days.root
    expected = sorted_rows(two_days.to_table())
    unguard(root)
    foreign_op(root, "create_table")
    stripped = manifest_ds(root).version
    with pytest.raises(CorruptNamespaceError, match=r"PartitionedNamespace\.repair\(ROOT\)"):
        PartitionedNamespace.open(root)

    dry = PartitionedNamespace.repair(root, dry_run=True, storage_options=None)
    assert dry.needed and dry.dry_run and dry.new_version is None
    assert dry.columns_restored == tuple(LANCEPART_COLUMNS) and dry.rows_carried_over == ("foreign_tbl",)
    assert manifest_ds(root).version == stripped
    with pytest.raises(CorruptNamespaceError):
        PartitionedNamespace.open(root)

    report = PartitionedNamespace.repair(pathlib.Path(root))
    assert report.needed and report.new_version == stripped + 1
    ns = PartitionedNamespace.open(root)
    assert sorted_rows(ns.to_table()) == expected
    assert PartitionedNamespace.repair(root).needed is False
    assert ns.repair().needed is False and ns.repair(True).dry_run
    assert PartitionedNamespace.repair(ns, dry_run=True).needed is False  # the method called on the class
    with pytest.raises(NamespaceNotFoundError):
        PartitionedNamespace.repair(root + "-missing")


def test_repair_without_history_says_so(two_days):
    """Issue 11 item 6: when the versions that held the columns are gone, repair raises a
    CorruptNamespaceError that says so (and publishes nothing)."""
    from lancepart.ops.repair import repair_root

    root = two_days.root
    unguard(root)
    foreign_op(root, "create_namespace")
    last = manifest_ds(root).version
    vdir = os.path.join(root, "__manifest", "_versions")
    for name in os.listdir(vdir):  # what an earlier cleanup of the stripped namespace left
        if name.endswith(".manifest") and not _is_version(name, last):
            os.remove(os.path.join(vdir, name))
    with pytest.raises(CorruptNamespaceError, match="no earlier version"):
        repair_root(root)
    assert manifest_ds(root).version == last


def _is_version(name: str, version: int) -> bool:
    """Whether a ``_versions`` file name is that of ``version`` (either naming scheme Lance uses)."""
    stem = name.split(".")[0]
    return stem.isdigit() and (int(stem) == version or int(stem) == 2**64 - 1 - version)


# ----------------------------------------------------------------------------- items 7 and 8
def random_id() -> str:
    """A partition namespace id as the spec makes them: 16 random base36 characters."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(16))


def foreign_partition(ns: PartitionedNamespace, values: dict, ids: list[int] | None, *,
                      parents: list[str] | None = None) -> str:
    """What another spec-following writer does with plain pylance: a partition table under random
    namespace ids (``parents``: ids of levels that already exist), its rows, and ``__manifest``
    rows appended with the partition values inherited down the levels. ``ids=None`` declares the
    table only (row with NULL read_version, no directory). Returns the table object_id."""
    spec = ns.current_spec
    parents = list(parents or [])
    names = parents + [random_id() for _ in range(len(spec.fields) - len(parents))]
    m = manifest_ds(ns.root)
    new = []
    for level in range(len(parents), len(spec.fields)):
        row = {"object_id": "$".join([spec.namespace, *names[: level + 1]]), "object_type": "namespace",
               "metadata": "{}"}
        row.update({f.column_name: values[f.field_id] for f in spec.fields[: level + 1]})
        new.append(row)
    oid = "$".join([spec.namespace, *names, "dataset"])
    location = f"{secrets.token_hex(4)}_{oid}"
    version = None
    if ids is not None:
        data = pa.table({"id": ids, "event_date": [values.get("event_date", D10)] * len(ids),
                         "country": [values.get("country", "XX")] * len(ids)}, schema=ns.schema)
        version = lance.write_dataset(data, join_uri(ns.root, location)).version
    row = {"object_id": oid, "object_type": "table", "location": location, "read_version": version}
    row.update({f.column_name: values[f.field_id] for f in spec.fields})
    new.append(row)
    lance.write_dataset(pa.Table.from_pylist(new, schema=m.schema), join_uri(ns.root, "__manifest"), mode="append")
    ns.refresh()
    return oid


def tables_of(ns: PartitionedNamespace) -> dict:
    """Published partition tables, by their values (plain pylance over __manifest)."""
    out: dict = {}
    for p in ns.refresh().partitions():
        out.setdefault(tuple(sorted(p.values.items())), []).append(p.object_id)
    return out


def read_ids(ns: PartitionedNamespace, filter: str | None = None) -> list[int]:
    return sorted(ns.refresh().to_table(filter).column("id").to_pylist())


def test_write_finds_foreign_partition_by_value(tmp_path):
    """Issue 11 item 7 / spec partitioning.md "Namespace Naming": a partition another writer made
    under a random id (including the NULL partition) gets lancepart's rows in its own table;
    overwrite replaces its rows; no second table appears."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_DATE)
    f10 = foreign_partition(ns, {"event_date": D10}, [100, 101])
    fnull = foreign_partition(ns, {"event_date": None}, [200])
    assert read_ids(ns) == [100, 101, 200]
    r = ns.write(rows([1, 2, 3], [D10, None, D11], ["US", "FR", "US"]))
    assert r.partitions_created == 1  # only 2025-12-11 is new
    tables = tables_of(ns)
    assert tables[(("event_date", D10),)] == [f10]
    assert tables[(("event_date", None),)] == [fnull]
    assert len(tables) == 3 and all(len(v) == 1 for v in tables.values())
    assert read_ids(ns) == [1, 2, 3, 100, 101, 200]
    ns.write(rows([9], [D10], ["US"]), mode="overwrite")
    assert read_ids(ns) == [2, 3, 9, 200]
    ns.write(rows([8], [None], ["US"]), mode="overwrite")
    assert read_ids(ns) == [3, 8, 9]
    assert len(ns.partitions()) == 3
    # plain pylance: the foreign table holds the rows at its published version
    p = next(p for p in ns.partitions() if p.object_id == f10)
    assert lance.dataset(join_uri(ns.root, p.location), version=p.read_version).to_table()["id"].to_pylist() == [9]


BY_YEAR_COUNTRY = {"id": 1, "fields": [
    {"field_id": "event_year", "source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int32"}},
    {"field_id": "country", "source_ids": [2], "transform": {"type": "identity"}, "result_type": {"type": "utf8"}}]}


def test_multi_level_foreign_ids(tmp_path):
    """Issue 11 item 7 / spec "Namespace Naming", "Manifest Table Schema" (values inherited from
    parent namespaces): with a two-level spec, a foreign (2025, US) table is written into, a new
    (2025, FR) partition goes under the foreign 2025 namespace (no second 2025 namespace), and
    (2025, NULL) and (2026, US) are new."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_YEAR_COUNTRY)
    fus = foreign_partition(ns, {"event_year": 2025, "country": "US"}, [100])
    year_ns = fus.split("$")[1]
    foreign_partition(ns, {"event_year": 2025, "country": None}, [101], parents=[year_ns])
    ns.write(rows([1, 2, 3, 4], [D10, D10, D11, datetime.date(2026, 1, 1)], ["US", "FR", None, "US"]))
    tables = tables_of(ns)
    assert tables[(("country", "US"), ("event_year", 2025))] == [fus]
    fr = tables[(("country", "FR"), ("event_year", 2025))]
    assert len(fr) == 1 and fr[0].startswith(f"v1${year_ns}$")
    assert len(tables[(("country", None), ("event_year", 2025))]) == 1
    assert len(tables) == 4
    snap = ns.snapshot().rows
    level0 = [o for o, t in zip(snap["object_id"].to_pylist(), snap["object_type"].to_pylist(), strict=True)
              if t == "namespace" and o.count("$") == 1]
    assert len(level0) == 2  # 2025 (foreign) and 2026
    assert read_ids(ns, "country = 'US'") == [1, 4, 100]
    ns.write(rows([7], [D11], [None]), mode="overwrite")
    assert read_ids(ns) == [1, 2, 4, 7, 100]


def test_declared_table_reads_empty_and_accepts_writes(tmp_path):
    """Issue 11 item 8 / spec partitioning.md "Transaction" (read_version NULL): a table row whose
    directory does not exist yet reads as empty (to_table, partitions) and a write creates and
    publishes it; a pinned table whose directory is gone stays an error."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_DATE)
    ns.write(rows([1], [D10], ["US"]))
    decl = foreign_partition(ns, {"event_date": D11}, None)
    assert read_ids(ns) == [1]
    assert read_ids(ns, "event_date = DATE '2025-12-11'") == []
    assert {p.object_id for p in ns.partitions()} >= {decl}
    proc = subprocess.run([sys.executable, "-m", "lancepart.cli", "describe", ns.root, "--json", "--tables"],
                          capture_output=True, text=True, timeout=300, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    described = {t["object_id"]: t for t in json.loads(proc.stdout)["tables"]}
    assert described[decl]["rows"] == 0
    ns.write(rows([2, 3], [D11, D11], ["US", "FR"]))
    assert tables_of(ns)[(("event_date", D11),)] == [decl]
    p = next(p for p in ns.partitions() if p.object_id == decl)
    assert p.read_version is not None
    assert lance.dataset(join_uri(ns.root, p.location), version=p.read_version).count_rows() == 2
    assert read_ids(ns) == [1, 2, 3]
    # published data missing is not "declared": still an error
    gone = next(p for p in ns.partitions() if p.object_id != decl)
    import shutil

    shutil.rmtree(join_uri(ns.root, gone.location))
    with pytest.raises(CorruptNamespaceError, match=gone.object_id.replace("$", r"\$")):
        ns.to_table()


def test_directory_namespace_declared_table_after_repair(tmp_path):
    """Issue 11 items 6 and 8, with Lance's own DirectoryNamespace: in a namespace without the
    writer flag it creates a partition namespace and declares its table (stripping __manifest);
    after repair the declared table (NULL partition values, read_version NULL) reads as empty and
    a write of that partition creates and publishes it."""
    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_DATE)
    ns.write(rows([1], [D10], ["US"]))
    unguard(ns.root)
    d = lns.DirectoryNamespace(root=ns.root)
    rid = random_id()
    d.create_namespace(lns.CreateNamespaceRequest(id=["v1", rid]))
    d.declare_table(lns.DeclareTableRequest(id=["v1", rid, "dataset"]))
    report = ns.repair()
    assert set(report.rows_carried_over) == {f"v1${rid}", f"v1${rid}$dataset"}
    assert read_ids(ns) == [1]
    assert f"v1${rid}$dataset" in {p.object_id for p in ns.partitions()}
    ns.write(rows([5], [None], ["US"]))  # the declared table is the NULL partition
    assert tables_of(ns)[(("event_date", None),)] == [f"v1${rid}$dataset"]
    assert read_ids(ns) == [1, 5]
    assert lns.DirectoryNamespace(root=ns.root).describe_table(
        lns.DescribeTableRequest(id=["v1", rid, "dataset"])).location


@pytest.mark.spark
def test_spark_write_and_read_foreign_and_declared_partitions(spark, tmp_path):
    """Issue 11 items 7 and 8 on the Spark path (lancepart.spark.write / read): rows for a
    partition another writer made under a random id land in its table, a declared partition is
    created and published, and lps.read reads a declared table as empty."""
    from lancepart import spark as lps

    ns = PartitionedNamespace.create(str(tmp_path / "ns"), SCHEMA, BY_DATE)
    f10 = foreign_partition(ns, {"event_date": D10}, [100])
    decl = foreign_partition(ns, {"event_date": D11}, None)
    assert sorted(r["id"] for r in lps.read(spark, ns.root).collect()) == [100]
    assert sorted(r["id"] for r in lps.read(spark, ns.root, split_rows=1).collect()) == [100]
    df = spark.createDataFrame([(1, D10, "US"), (2, D11, "FR"), (3, None, "DE")],
                               "id long, event_date date, country string")
    lps.write(df, ns.root)
    tables = tables_of(ns)
    assert tables[(("event_date", D10),)] == [f10]
    assert tables[(("event_date", D11),)] == [decl]
    assert len(tables) == 3
    assert read_ids(ns) == [1, 2, 3, 100]
    lps.write(spark.createDataFrame([(9, D10, "US")], "id long, event_date date, country string"), ns.root,
              mode="overwrite")
    assert sorted(r["id"] for r in lps.read(spark, ns.root).collect()) == [2, 3, 9]


def test_repair_commit_never_overwrites_a_concurrent_commit(two_days):
    """Issue 11 item 6 (one publish path, no lost commit): the repair's commit replaces the
    schema, which Lance would otherwise rebase over anything; it must fail when another commit
    landed after the snapshot it was computed from, and a rerun then repairs the newer version."""
    from lancepart.ops.repair import repair_root
    from lancepart.storage.manifest import ManifestConflict

    root = two_days.root
    unguard(root)
    foreign_op(root, "create_namespace")
    manifest = two_days.manifest
    base = manifest.snapshot(check=False)
    late = pa.Table.from_pylist([{"object_id": "late", "object_type": "namespace", "metadata": "{}"}],
                                schema=manifest_ds(root).schema)
    lance.write_dataset(late, join_uri(root, "__manifest"), mode="append")  # a plain append lands first
    with pytest.raises(ManifestConflict):
        manifest.restore(base, base.rows)
    report = repair_root(root)
    assert set(report.rows_carried_over) == {"foreign_ns", "late"}
    assert len(PartitionedNamespace.open(root).to_table()) == 4


def test_table_commit_never_adds_a_fragment_the_latest_version_already_holds(tmp_path):
    """A table commit is made on the published version it already opened (no listing first);
    when a newer, unpublished version already holds the same fragment (a rebased commit of a
    concurrent writer took it in), Lance's rebase of the commit adds it a second time. The
    commit must see that (fragments compared as a multiset, each exactly once) and end with
    every row once; comparing sets let a version with the fragment twice through, and the
    write published its rows twice (found by tests/test_seams.py's mixed load)."""
    from lancepart.storage.lance_io import write_fragments
    from lancepart.storage.table_commit import commit_table

    uri = str(tmp_path / "t")
    lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    ours = write_fragments(pa.table({"id": pa.array(range(10, 15), pa.int64())}), uri)
    # someone's commit on the latest version took our fragment in
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(ours), read_version=1)
    version = commit_table(str(tmp_path), "t", 1, ours)
    made = lance.dataset(uri, version=version)
    ids = sorted(made.to_table().column("id").to_pylist())
    assert ids == list(range(15)), f"rows of version {version}: {ids}"
    assert len(made.get_fragments()) == 2
