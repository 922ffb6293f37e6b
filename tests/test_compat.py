"""V1 tables beside a partitioned namespace, the directory namespace properties, V1 -> V2 migration.

Spec: directory-namespace.md "V1: Directory Listing" ("Table Existence", "Marker Files"),
"Compatibility Mode"; directory-namespace-configuration.md "Configuration", "Compatibility
Mode", "Migration from V1 to V2". Real Lance tables, and Lance's own DirectoryNamespace both
to make the V1 markers and to read the result.
"""

from __future__ import annotations

import os
from datetime import timedelta

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import ConfigError
from lancepart.storage.manifest import join_uri
from lancepart.v1_tables import (
    CompatConfig,
    list_root_tables,
    list_v1_tables,
    migrate,
    open_namespace,
    v1_tables,
)
from tests.crash_proc import Batch

V1_DATA = pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]})


def v1_root(root: str) -> None:
    """V1 tables beside the namespace: two tables, one deregistered, one declared (reserved),
    an empty ``<name>.lance`` directory and one holding a non-Lance file."""
    for name in ("clicks", "users", "old"):
        lance.write_dataset(V1_DATA, join_uri(root, f"{name}.lance"))
    v1 = lns.DirectoryNamespace(root=root, manifest_enabled="false")  # pure V1 behaviour
    v1.deregister_table(lns.DeregisterTableRequest(id=["old"]))
    v1.declare_table(lns.DeclareTableRequest(id=["planned"]))
    os.makedirs(join_uri(root, "empty.lance"))
    os.makedirs(join_uri(root, "notes.lance"))
    with open(join_uri(root, "notes.lance", "readme.txt"), "w") as f:
        f.write("not a Lance table")


def test_v1_listing_honours_markers_and_open_still_works(ns):
    """V1 "Table Existence" and "Marker Files": a deregistered table is not listed, a reserved one
    only on request, an empty directory is no table, a non-Lance one is (V1 original). The
    partitioned namespace opens and reads as before."""
    ns.write(Batch("b1", 1_000_000, 50).table(), batch_id="b1")
    before = ns.to_table().sort_by("id")
    v1_root(ns.root)
    assert list_v1_tables(ns.root) == ["clicks", "notes", "users"]
    assert list_v1_tables(ns.root, include_reserved=True) == ["clicks", "notes", "planned", "users"]
    assert {t.name: t.state for t in v1_tables(ns.root)} == {
        "clicks": "table", "notes": "table", "old": "deregistered", "planned": "reserved", "users": "table"}
    # Lance's reference implementation agrees on the markers (it also lists the empty directory)
    listed = lns.DirectoryNamespace(root=ns.root, manifest_enabled="false").list_tables(lns.ListTablesRequest(id=[]))
    assert set(listed.tables) - {"empty"} == {"clicks", "notes", "planned", "users"}
    again = PartitionedNamespace.open(ns.root)
    assert again.to_table().sort_by("id").equals(before)
    assert [p.object_id for p in again.partitions()] == [p.object_id for p in ns.partitions()]


def test_configuration_properties(ns, monkeypatch, tmp_path):
    """directory-namespace-configuration.md "Configuration": root forms, storage.* without the
    prefix, manifest_enabled / dir_listing_enabled as 'true'/'false'."""
    cfg = CompatConfig.from_properties({"root": ns.root, "storage.region": "us-west-2", "dir_listing_enabled": "False"})
    assert (cfg.root, cfg.storage_options, cfg.manifest_enabled, cfg.dir_listing_enabled) == (
        ns.root, {"region": "us-west-2"}, True, False)
    monkeypatch.chdir(os.path.dirname(ns.root))
    assert CompatConfig.from_properties({"root": os.path.basename(ns.root)}).root == ns.root
    with pytest.raises(ConfigError, match=r"'manifest_enabled'.*'yes'"):
        CompatConfig.from_properties({"root": ns.root, "manifest_enabled": "yes"})
    with pytest.raises(ConfigError, match="manifest_enable"):
        CompatConfig.from_properties({"root": ns.root, "manifest_enable": "true"})
    with pytest.raises(ConfigError, match="'root'"):
        CompatConfig.from_properties({"storage.region": "x"})
    v1_root(ns.root)
    assert open_namespace({"root": ns.root}).current_spec.id == 1
    with pytest.raises(ConfigError, match="manifest_enabled=false"):
        open_namespace({"root": ns.root, "manifest_enabled": "false"})


def test_migrate_registers_v1_tables_in_one_commit(ns):
    """"Migration from V1 to V2": every V1 table gets a table row with its directory as location
    and read_version pinned to its current version, in one __manifest commit; a second run
    commits nothing; Lance's DirectoryNamespace lists and describes them from the manifest alone
    (dir listing off). Later V1 writes stay invisible until migrate runs again."""
    v1_root(ns.root)
    start = ns.manifest_version
    dry = migrate(ns.root, dry_run=True)
    assert dry["registered"] == {"clicks": 1, "users": 1} and ns.manifest.dataset().version == start
    assert set(dry["skipped"]) == {"old", "planned", "notes"}

    out = migrate(ns.root)
    assert out["registered"] == dry["registered"] and out["manifest_version"] == start + 1
    snap = ns.manifest.snapshot()
    rows = {r["object_id"]: r for r in snap.tables().to_pylist() if "$" not in r["object_id"]}
    assert {k: (r["location"], r["read_version"]) for k, r in rows.items()} == {
        "clicks": ("clicks.lance", 1), "users": ("users.lance", 1)}

    second = migrate(ns.root)
    assert second["registered"] == {} and second["refreshed"] == {}
    assert sorted(second["already_registered"]) == ["clicks", "users"]
    assert second["manifest_version"] == start + 1

    ref = lns.DirectoryNamespace(root=ns.root, dir_listing_enabled="false")
    assert sorted(ref.list_tables(lns.ListTablesRequest(id=[])).tables) == ["clicks", "users"]
    desc = ref.describe_table(lns.DescribeTableRequest(id=["clicks"]))
    assert desc.location.rstrip("/").endswith("clicks.lance")
    assert lance.dataset(desc.location).to_table().equals(V1_DATA)
    assert list_root_tables({"root": ns.root, "dir_listing_enabled": "false"}) == ["clicks", "users"]
    assert list_root_tables({"root": ns.root}) == ["clicks", "notes", "users"]
    assert list_root_tables({"root": ns.root, "manifest_enabled": "false"}) == ["clicks", "notes", "users"]

    lance.write_dataset(V1_DATA, join_uri(ns.root, "clicks.lance"), mode="append")  # a later V1 write
    assert ns.manifest.snapshot().row("clicks")["read_version"] == 1
    third = migrate(ns.root)
    assert third["refreshed"] == {"clicks": [1, 2]} and third["manifest_version"] == start + 2
    assert ns.manifest.snapshot().row("clicks")["read_version"] == 2


def test_migrated_tables_are_not_partitions(ns):
    """Root-level tables in __manifest are not partition tables (spec "Physical Layout and
    Naming": partitions live under ``v<N>``): partitions(), pruning, explain, reads, writes and
    cleanup leave them alone."""
    ns.write(Batch("b1", 1_000_000, 80).table(), batch_id="b1")
    flt = "event_date = DATE '2025-12-01'"
    parts, pruned, table = ns.partitions(), ns.partitions(flt), ns.to_table().sort_by("id")
    explained = ns.explain(flt)
    v1_root(ns.root)
    migrate(ns.root)
    ns.refresh()
    assert ns.partitions() == parts and ns.partitions(flt) == pruned
    assert ns.explain(flt) == explained
    assert ns.to_table().sort_by("id").equals(table)
    assert ns.to_table(flt).num_rows == table.filter(pa.compute.equal(
        table.column("event_date"), pa.scalar(pruned[0].values["event_date"]))).num_rows
    ns.write(Batch("b2", 2_000_000, 80).table(), batch_id="b2")
    assert ns.to_table().num_rows == 160
    lance.write_dataset(V1_DATA, join_uri(ns.root, "clicks.lance"), mode="overwrite")
    stats = ns.cleanup(timedelta(0), allow_short_retention=True)
    assert not any(r.startswith(("clicks.lance", "users.lance")) for r in stats.removed)
    assert [v["version"] for v in lance.dataset(join_uri(ns.root, "clicks.lance")).versions()] == [1, 2]


@pytest.fixture(scope="module")
def s3():
    from tests.s3_server import moto_s3

    with moto_s3(atomic=True) as server:
        yield server


def test_v1_listing_and_migration_on_an_object_store(s3):
    """The same on ``s3://``, through Lance's object store (no local file system calls)."""
    from lancepart.util.sample import demo_events
    from tests.conftest import EVENTS_SPEC

    root, so = s3.new_root(), s3.storage_options()
    schema = demo_events(1).schema
    ns = PartitionedNamespace.create(root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC,
                                     storage_options=so)
    for name in ("clicks", "old"):
        lance.write_dataset(V1_DATA, join_uri(root, f"{name}.lance"), storage_options=so)
    props = {"root": root, "manifest_enabled": "false", **{f"storage.{k}": v for k, v in so.items()}}
    v1 = lns.DirectoryNamespace(**props)
    v1.deregister_table(lns.DeregisterTableRequest(id=["old"]))
    v1.declare_table(lns.DeclareTableRequest(id=["planned"]))
    assert list_v1_tables(root, so) == ["clicks"]
    assert list_v1_tables(root, so, include_reserved=True) == ["clicks", "planned"]
    out = migrate(root, so)
    assert out["registered"] == {"clicks": 1}
    assert migrate(root, so)["registered"] == {}
    assert list_root_tables({**props, "manifest_enabled": "true", "dir_listing_enabled": "false"}) == ["clicks"]
    assert ns.refresh().partitions() == []
