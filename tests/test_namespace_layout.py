"""Namespace layout on disk: spec/partitioning.md "Physical Layout and Naming", "Manifest Table
Schema", "Runtime Namespace Properties", Appendices A, B, C, E; spec/directory-namespace.md
"V2: Manifest"; docs/design.md §4–§7. Real Lance tables, and Lance's own DirectoryNamespace
as the reference reader."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing as mp
import os
import re

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest

from lancepart import (
    InvalidSpecError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    PartitionedNamespace,
    PartitionSpec,
)
from lancepart.errors import CorruptNamespaceError
from lancepart.model.ids import is_valid_namespace_id, partition_ids
from lancepart.storage.manifest import STANDARD_FIELDS
from lancepart.write.reserve import reserve_partitions

TABLE_DIR_RE = re.compile(r"^[0-9a-f]{8}_v(\d+)((?:\$[0-9a-z]{16})+)\$dataset$")

V2_AS_ONLY_SPEC = {  # Appendix A's v2 fields (two levels) as the first spec of a namespace
    "id": 1,
    "fields": [
        {"field_id": "event_year", "source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int32"}},
        {"field_id": "country", "source_ids": [2], "transform": {"type": "identity"}, "result_type": {"type": "utf8"}},
    ],
}


def _reserve(ns: PartitionedNamespace, *columns: pa.Array):
    return reserve_partitions(ns.manifest, ns.current_spec, list(columns), ns.schema)


def test_create_writes_appendix_a_metadata(root, appendix_a, events_schema):
    """Appendix A: `schema` and `partition_spec_v1` are JSON strings in __manifest's table metadata (§6)."""
    ns = PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    md = lance.dataset(os.path.join(root, "__manifest")).metadata
    assert json.loads(md["schema"]) == appendix_a["schema"]
    assert json.loads(md["partition_spec_v1"]) == appendix_a["partition_spec_v1"]
    reopened = PartitionedNamespace.open(root)
    assert reopened.schema == ns.schema
    assert reopened.specs == {1: PartitionSpec.from_json(appendix_a["partition_spec_v1"])}
    assert reopened.current_spec.id == 1
    assert [f.metadata[b"lance:field_id"] for f in reopened.schema] == [b"0", b"1", b"2"]


def test_manifest_schema_extends_directory_namespace(root, tmp_path, events_schema):
    """§7: the five standard columns exactly as DirectoryNamespace creates them, then
    read_version/read_branch/read_tag, then one partition_field_<id> per field typed by result_type."""
    PartitionedNamespace.create(root, events_schema, V2_AS_ONLY_SPEC)
    ours = lance.dataset(os.path.join(root, "__manifest")).schema
    ref_root = str(tmp_path / "reference")
    lns.DirectoryNamespace(root=ref_root).create_namespace(lns.CreateNamespaceRequest(id=["x"]))
    reference = lance.dataset(os.path.join(ref_root, "__manifest")).schema
    assert len(reference) == len(STANDARD_FIELDS)
    for i, ref_field in enumerate(reference):
        assert ours.field(i).equals(ref_field, check_metadata=True), ref_field.name
    assert [(f.name, f.type) for f in list(ours)[5:]] == [
        ("read_version", pa.uint64()), ("read_branch", pa.utf8()), ("read_tag", pa.utf8()),
        ("partition_field_event_year", pa.int32()), ("partition_field_country", pa.utf8()),
    ]
    assert all(f.nullable for f in list(ours)[2:])


def test_manifest_indexes(root, events_schema):
    """directory-namespace.md "Manifest Table Indexes": BTREE object_id, Bitmap object_type, LabelList base_objects."""
    PartitionedNamespace.create(root, events_schema, V2_AS_ONLY_SPEC)
    idx = {tuple(i.field_names): i.type_url.rsplit(".", 1)[-1]
           for i in lance.dataset(os.path.join(root, "__manifest")).describe_indices()}
    assert idx == {("object_id",): "BTreeIndexDetails", ("object_type",): "BitmapIndexDetails",
                   ("base_objects",): "LabelListIndexDetails"}


def test_appendix_b_c_layout_and_rows(root, events_schema):
    """Appendix B: only tables have directories, named <8 hex>_v<N>$<id>...$dataset; namespaces
    are rows. Appendix C: values inherited from parents; read_version set on tables only."""
    ns = PartitionedNamespace.create(root, events_schema, V2_AS_ONLY_SPEC)
    res = _reserve(ns, pa.array([2025, 2025, 2024], pa.int32()), pa.array(["US", "FR", "US"]))
    assert res.created == 3
    dirs = sorted(d for d in os.listdir(root) if d != "__manifest")
    assert len(dirs) == 3
    for d in dirs:
        m = TABLE_DIR_RE.match(d)
        assert m, d
        assert m.group(1) == "1" and len(m.group(2).split("$")) == 3  # two partition levels
    rows = {r["object_id"]: r for r in lance.dataset(os.path.join(root, "__manifest")).to_table().to_pylist()}
    assert rows["v1"]["object_type"] == "namespace" and rows["v1"]["read_version"] is None
    level1 = [r for oid, r in rows.items() if oid.count("$") == 1]
    level2 = [r for oid, r in rows.items() if oid.count("$") == 2 and r["object_type"] == "namespace"]
    tables = [r for r in rows.values() if r["object_type"] == "table"]
    assert sorted(r["partition_field_event_year"] for r in level1) == [2024, 2025]  # two year namespaces
    assert all(r["partition_field_country"] is None for r in level1)
    assert sorted((r["partition_field_event_year"], r["partition_field_country"]) for r in level2) == [
        (2024, "US"), (2025, "FR"), (2025, "US")]
    for t in tables:
        parent = rows[t["object_id"].rsplit("$", 1)[0]]
        assert parent["object_type"] == "namespace"
        assert (t["partition_field_event_year"], t["partition_field_country"]) == (
            parent["partition_field_event_year"], parent["partition_field_country"])
        assert t["read_version"] is not None and t["read_branch"] is None and t["read_tag"] is None
        assert t["location"] in dirs and t["location"].endswith(t["object_id"])
        assert lance.dataset(os.path.join(root, t["location"]), version=t["read_version"]).count_rows() == 0
        assert all(is_valid_namespace_id(p) for p in t["object_id"].split("$")[1:-1])


def test_appendix_e_runtime_properties(root, events_schema):
    ns = PartitionedNamespace.create(root, events_schema, V2_AS_ONLY_SPEC)
    _reserve(ns, pa.array([2025], pa.int32()), pa.array(["US"]))
    ns.refresh()
    (p,) = ns.partitions()
    _, id1, id2, _ = p.object_id.split("$")
    spec_text = PartitionSpec.from_json(V2_AS_ONLY_SPEC).to_json_string()
    assert ns.describe_namespace(["v1"]) == {"partition_spec": spec_text}
    assert ns.describe_namespace(["v1", id1]) == {"partition.event_year": "2025"}
    assert ns.describe_namespace(["v1", id1, id2]) == {"partition.country": "US"}
    assert p.values == {"event_year": 2025, "country": "US"} and p.spec_id == 1
    with pytest.raises(NamespaceNotFoundError, match="v1\\$nope"):
        ns.describe_namespace(["v1", "nope"])


def test_appendix_e_spec_property_text(root, appendix_a, events_schema):
    """Appendix E shows the exact partition_spec string for v1."""
    ns = PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    expected = ('{"id":1,"fields":[{"field_id":"event_date","source_ids":[1],"transform":{"type":"identity"},'
                '"result_type":{"type":"date32"}}]}')
    assert ns.describe_namespace(["v1"]) == {"partition_spec": expected}
    _reserve(ns, pa.array([dt.date(2025, 12, 10)], pa.date32()))
    ns.refresh()
    (p,) = ns.partitions()
    assert ns.describe_namespace(p.object_id.split("$")[:2]) == {"partition.event_date": "2025-12-10"}


def test_directory_namespace_reads_what_we_wrote(root, appendix_a, events_schema):
    """Lance's reference DirectoryNamespace lists v1's partition namespaces, and reads a partition
    table lancepart registered, at the location in __manifest."""
    ns = PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    days = pa.array([dt.date(2025, 12, 10), dt.date(2025, 12, 11)], pa.date32())
    res = _reserve(ns, days)
    # put data into one partition table by hand (the write engine does this in production)
    ref = res.tables[0]
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "event_date": pa.array([days[0]] * 2),
                     "country": ["US", "FR"]}).cast(ns.schema)
    lance.write_dataset(data, os.path.join(root, ref.location), mode="append")

    d = lns.DirectoryNamespace(root=root)
    listed = d.list_namespaces(lns.ListNamespacesRequest(id=["v1"])).namespaces
    expected_ids = sorted(t.object_id.split("$")[1] for t in res.tables)
    assert sorted(listed) == expected_ids
    table_id = ref.object_id.split("$")
    assert d.list_tables(lns.ListTablesRequest(id=table_id[:-1])).tables == ["dataset"]
    desc = d.describe_table(lns.DescribeTableRequest(id=table_id))
    assert desc.location.rstrip("/").endswith(ref.location)
    got = lance.dataset(desc.location).to_table()
    assert got.column("id").to_pylist() == [1, 2]
    assert d.describe_namespace(lns.DescribeNamespaceRequest(id=["v1"])) is not None


def test_create_existing_and_open_missing(root, tmp_path, events_schema, appendix_a):
    PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    with pytest.raises(NamespaceExistsError, match=re.escape(root)):
        PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    missing = str(tmp_path / "missing")
    with pytest.raises(NamespaceNotFoundError, match="missing"):
        PartitionedNamespace.open(missing)
    plain = str(tmp_path / "plain")
    lns.DirectoryNamespace(root=plain).create_namespace(lns.CreateNamespaceRequest(id=["a"]))
    with pytest.raises(NamespaceNotFoundError, match="not a partitioned one"):
        PartitionedNamespace.open(plain)


def test_invalid_spec_rejected_before_anything_is_written(root, events_schema):
    bad = {"id": 1, "fields": [{"field_id": "b", "source_ids": [9], "transform": {"type": "bucket", "num_buckets": 4},
                                "result_type": {"type": "int32"}}]}
    with pytest.raises(InvalidSpecError, match="'b'"):
        PartitionedNamespace.create(root, events_schema, bad)
    assert not os.path.exists(root)


def test_corrupt_metadata_is_reported(root, events_schema, appendix_a):
    PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    lance.dataset(os.path.join(root, "__manifest")).update_metadata({"partition_spec_v1": "{broken"})
    with pytest.raises(CorruptNamespaceError, match="partition spec is not valid JSON"):
        PartitionedNamespace.open(root)


@pytest.mark.parametrize("form", ["absolute", "relative", "file_uri"])
def test_root_forms(tmp_path, monkeypatch, events_schema, appendix_a, form):
    """directory-namespace-configuration.md: absolute paths, relative paths (against the cwd) and URIs."""
    monkeypatch.chdir(tmp_path)
    given = {"absolute": str(tmp_path / "a"), "relative": "rel/ns", "file_uri": f"file://{tmp_path}/u"}[form]
    ns = PartitionedNamespace.create(given, events_schema, appendix_a["partition_spec_v1"], storage_options={})
    _reserve(ns, pa.array([dt.date(2025, 1, 1)], pa.date32()))
    local = {"absolute": tmp_path / "a", "relative": tmp_path / "rel" / "ns", "file_uri": tmp_path / "u"}[form]
    assert (local / "__manifest").is_dir()
    assert len(PartitionedNamespace.open(given, storage_options={}).partitions()) == 1


def test_partition_ids_are_deterministic_and_distinct():
    """docs/design.md §4: same spec version + level + values -> same 16-char base36 id."""
    a = partition_ids(1, [pa.array([2025, 2025, None], pa.int32()), pa.array(["US", "FR", "US"])])
    b = partition_ids(1, [pa.array([2025, 2025, None], pa.int32()), pa.array(["US", "FR", "US"])])
    assert a == b
    assert a[0][0] == a[1][0] and a[0][1] != a[1][1]  # same year namespace, different country
    assert a[2][0] != a[0][0]  # NULL is its own partition
    assert partition_ids(2, [pa.array([2025], pa.int32())])[0][0] != a[0][0]  # spec version matters
    empty_vs_null = partition_ids(1, [pa.array(["", None])])
    assert empty_vs_null[0][0] != empty_vs_null[1][0]
    assert all(is_valid_namespace_id(i) for row in a for i in row)
    # pinned: ids must not change between releases, or writers of two versions would split partitions
    assert a[0] == partition_ids(1, [pa.array([2025], pa.int32()), pa.array(["US"])])[0]
    assert a[0][0] == "d0sdid67uagz4w0g"


def _reserve_in_process(root: str, barrier, out) -> None:
    ns = PartitionedNamespace.open(root)
    days = pa.array([dt.date(2025, 1, 1) + dt.timedelta(days=i) for i in range(20)], pa.date32())
    barrier.wait()
    res = reserve_partitions(ns.manifest, ns.current_spec, [days], ns.schema)
    out.put([(t.object_id, t.location) for t in res.tables])


def test_two_processes_reserving_the_same_partitions_make_one_table_each(root, events_schema, appendix_a):
    """docs/design.md §8 hazard 1: two writers create the same new partitions at once -> exactly one
    table per partition; both see the same location; the loser's empty tables are removed."""
    PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_reserve_in_process, args=(root, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert results[0] == results[1]
    ns = PartitionedNamespace.open(root)
    oids = [p.object_id for p in ns.partitions()]
    assert len(oids) == len(set(oids)) == 20
    assert sorted(d for d in os.listdir(root) if d != "__manifest") == sorted(loc for _, loc in results[0])


def _format(ds: lance.LanceDataset) -> set[tuple[int, int]]:
    return {(f.file_major_version, f.file_minor_version) for fr in ds.get_fragments() for f in fr.data_files()}


@pytest.mark.parametrize("made_in", ["2.0", "2.2"])
def test_manifest_file_format_is_kept_through_every_commit(root, events_schema, appendix_a, monkeypatch, made_in):
    """docs/design.md §7: a new ``__manifest`` is written in Lance's 2.0 format (the pins every
    open scans decode faster there), the partition tables keep theirs (§10), and a
    ``__manifest`` in 2.2 (made by an earlier lancepart) works the same. Either format is kept
    through appends, a spec change that adds a column, a merge, a delete, a strip by Lance's
    ``DirectoryNamespace`` and the repair after it, and both are read by that
    ``DirectoryNamespace``."""
    from lancepart.storage import manifest as m
    from tests.test_foreign_writers import foreign_op, unguard

    if made_in != m.MANIFEST_STORAGE_VERSION:  # a namespace an earlier lancepart created
        monkeypatch.setattr(m, "MANIFEST_STORAGE_VERSION", made_in)
    ns = PartitionedNamespace.create(root, events_schema, appendix_a["partition_spec_v1"])
    monkeypatch.undo()
    manifest = os.path.join(root, "__manifest")
    expected = {(2, int(made_in[-1]))}
    assert _format(lance.dataset(manifest)) == expected
    assert made_in == "2.2" or m.MANIFEST_STORAGE_VERSION == "2.0"

    day = [dt.date(2025, 12, 10), dt.date(2025, 12, 11)]
    ns.write(pa.table({"id": [1, 2, 3], "event_date": [day[0], day[1], day[1]], "country": ["US", "FR", "US"]}))
    ns.update_spec(appendix_a["partition_spec_v2"])
    ns.write(pa.table({"id": [4, 5], "event_date": [day[0], day[1]], "country": ["DE", "US"]}))
    ns.merge(pa.table({"id": [2, 6], "event_date": [day[1], day[0]], "country": ["NL", "US"]}), on=["id"])
    ns.delete("id = 1")
    unguard(root)
    foreign_op(root, "create_table")  # Lance's DirectoryNamespace rewrites __manifest with its five columns
    PartitionedNamespace.repair(root)
    assert _format(lance.dataset(manifest)) == expected

    ns = PartitionedNamespace.open(root)
    got = sorted(ns.to_table().select(["id", "country"]).to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 2, "country": "NL"}, {"id": 3, "country": "US"}, {"id": 4, "country": "DE"},
                   {"id": 5, "country": "US"}, {"id": 6, "country": "US"}]
    assert {table_format for p in ns.partitions()
            for table_format in _format(lance.dataset(os.path.join(root, p.location)))} == {(2, 2)}
    d = lns.DirectoryNamespace(root=root)
    assert "foreign_tbl" in d.list_tables(lns.ListTablesRequest(id=[])).tables
    assert sorted(d.list_namespaces(lns.ListNamespacesRequest(id=[])).namespaces) == ["v1", "v2"]
