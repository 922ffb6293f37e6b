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
import subprocess
import sys
from datetime import timedelta

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import CorruptNamespaceError
from lancepart.manifest import join_uri

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


def test_repair_without_history_says_so(two_days):
    """Issue 11 item 6: when the versions that held the columns are gone, repair raises a
    CorruptNamespaceError that says so (and publishes nothing)."""
    from lancepart.repair import repair_root

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
