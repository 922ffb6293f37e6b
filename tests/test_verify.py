"""``ns.verify`` / ``lancepart verify`` (issue "Safety at the boundaries", item 9): every published
table opens at its pinned version and every file it references exists; table schemas agree with
the namespace schema; ``__manifest`` has its columns (spec/directory-namespace.md "V2: Manifest",
spec/partitioning.md "Manifest Table Schema"); with ``deep``, every row's partition values
recomputed with the transforms equal its partition's (spec "Partition Transforms"). Real Lance
tables on disk, real files deleted, truncated and bit-flipped, plain pylance to publish foreign
versions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace, Problem, VerifyReport
from lancepart.cli import main
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
from tests.conftest import copy_ns, create_events_ns

HERE = Path(__file__).resolve().parent




@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("verify") / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(400, seed=1, days=2))
    ns.write(demo_events(400, seed=2, start_id=400, days=2))
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def table_dir(ns: PartitionedNamespace, info) -> str:
    return join_uri(ns.root, info.location)


def data_files(ns: PartitionedNamespace, info) -> list[str]:
    ds = lance.dataset(table_dir(ns, info), version=info.read_version)
    return [os.path.join(table_dir(ns, info), "data", df.path) for f in ds.get_fragments()
            for df in f.metadata.files]


def publish_version(ns: PartitionedNamespace, object_id: str, version: int) -> None:
    """Move one table's read_version in __manifest, as any writer that follows the spec does."""
    ns.manifest.update(lambda snap: (snap.with_read_versions({object_id: version}), None))
    ns.refresh()


def kinds(report: VerifyReport) -> list[str]:
    return sorted({p.kind for p in report.problems})


def test_a_clean_namespace_verifies_ok_and_the_cli_exits_0(ns, capsys):
    report = ns.verify(deep=True)
    assert report.ok, report.problems
    assert report.tables_checked == len(ns.partitions()) == 8
    assert report.rows_checked == 800 and report.files_checked >= 16
    assert main(["verify", ns.root, "--deep", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["problems"] == []


def test_a_deleted_data_file_is_a_missing_file_naming_table_and_file_and_the_cli_exits_3(ns, capsys):
    info = ns.partitions()[3]
    gone = data_files(ns, info)[0]
    os.remove(gone)
    report = ns.verify()
    assert not report.ok
    [p] = report.problems
    assert isinstance(p, Problem)
    assert (p.kind, p.object_id, p.location) == ("missing_file", info.object_id, info.location)
    assert os.path.basename(gone) in p.message
    assert main(["verify", ns.root, "--json", "-q"]) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["problems"][0]["kind"] == "missing_file"


def test_deleted_deletion_and_index_files_are_missing_files(ns):
    info = ns.partitions()[0]
    ds = lance.dataset(table_dir(ns, info), version=info.read_version)
    ds.delete("id % 2 = 0")
    ds = lance.dataset(table_dir(ns, info))
    ds.create_scalar_index("id", "BTREE")
    publish_version(ns, info.object_id, lance.dataset(table_dir(ns, info)).version)
    assert ns.verify().ok
    shutil.rmtree(os.path.join(table_dir(ns, info), "_deletions"))
    shutil.rmtree(os.path.join(table_dir(ns, info), "_indices"))
    report = ns.verify()
    missing = [p.message for p in report.problems if p.kind == "missing_file"]
    assert any("_deletions/" in m for m in missing) and any("_indices/" in m for m in missing), missing


def test_a_table_that_cannot_be_opened_at_its_read_version(ns):
    info = ns.partitions()[1]
    shutil.rmtree(os.path.join(table_dir(ns, info), "_versions"))
    report = ns.verify()
    assert [(p.kind, p.object_id) for p in report.problems] == [("table_unreadable", info.object_id)]


def test_deep_finds_rows_of_another_partition_written_by_a_foreign_writer(ns):
    """A spec-following foreign writer appended rows of 2025-12-02 into a 2025-12-01 table:
    the files are all there and readable; only recomputing the partition values finds it."""
    info = next(p for p in ns.partitions() if str(p.values["event_date"]) == "2025-12-01")
    uri = table_dir(ns, info)
    wrong = ns.to_table(f"event_date = DATE '2025-12-02' AND user_id % 4 = {0}").slice(0, 3)
    lance.write_dataset(wrong.select(ns.schema.names).cast(ns.schema), uri, mode="append")
    publish_version(ns, info.object_id, lance.dataset(uri).version)
    assert ns.verify().ok  # shallow: everything referenced exists and opens
    report = ns.verify(deep=True)
    bad = [p for p in report.problems if p.kind == "wrong_partition"]
    assert bad and all(p.object_id == info.object_id for p in bad)
    assert "event_date" in bad[0].message


def test_deep_finds_single_bit_flips_that_read_without_error(ns):
    """Issue item 9: flipping one bit in a data file gave wrong rows without any error at 22 of 62
    offsets. Flip bits one at a time until plain pylance reads the file fine but a partition
    source column changed; verify --deep must report that table."""
    info = ns.partitions()[2]
    path = data_files(ns, info)[0]
    original = Path(path).read_bytes()
    uri = table_dir(ns, info)
    clean = lance.dataset(uri, version=info.read_version).to_table()
    found = None
    for offset in range(0, len(original)):
        flipped = bytearray(original)
        flipped[offset] ^= 0x04
        Path(path).write_bytes(bytes(flipped))
        try:
            rows = lance.dataset(uri, version=info.read_version).to_table()
        except Exception:
            continue
        if rows.num_rows == clean.num_rows and rows.column("event_date") != clean.column("event_date"):
            found = offset
            break
    assert found is not None, "no silent bit flip in event_date found"
    report = ns.verify(deep=True)
    assert [(p.kind, p.object_id) for p in report.problems] == [("wrong_partition", info.object_id)], report.problems


def test_deep_reports_a_truncated_data_file_as_corrupt_data_naming_the_file(ns):
    info = ns.partitions()[5]
    path = data_files(ns, info)[0]
    os.truncate(path, 64)
    report = ns.verify(deep=True)
    [p] = report.problems
    assert (p.kind, p.object_id) == ("corrupt_data", info.object_id)
    assert os.path.basename(path) in p.message


def test_a_table_schema_that_differs_from_the_namespace_schema(ns):
    info = ns.partitions()[4]
    uri = table_dir(ns, info)
    ds = lance.dataset(uri, version=info.read_version)
    ds.add_columns({"extra": "id * 2"})
    publish_version(ns, info.object_id, lance.dataset(uri).version)
    report = ns.verify()
    [p] = report.problems
    assert (p.kind, p.object_id) == ("schema_mismatch", info.object_id) and "extra" in p.message


def test_a_stripped_manifest_is_missing_columns(ns):
    """A writer that knows only the directory namespace rewrites __manifest with its five
    standard columns: verify names each missing column."""
    ds = lance.dataset(join_uri(ns.root, "__manifest"))
    ds.drop_columns(["read_version", "read_branch", "read_tag", "partition_field_user_bucket"])
    report = ns.verify()  # through the handle opened before the damage
    missing = {p.message.split("'")[1] for p in report.problems if p.kind == "missing_column"}
    assert missing == {"read_version", "read_branch", "read_tag", "partition_field_user_bucket"}


def test_a_declared_table_is_not_a_problem(ns):
    """A table row whose read_version is NULL and whose directory does not exist (Lance's
    declare_table) reads as empty: verify counts it as declared, not as a problem."""
    def add_row(snap):
        rows = snap.rows
        row = {c: None for c in rows.column_names}
        row.update(object_id="declared_one", object_type="table", location="declared_one.lance")
        return pa.concat_tables([rows, pa.Table.from_pylist([row], schema=rows.schema)]), None

    ns.manifest.update(add_row)
    report = ns.verify()
    assert report.ok, report.problems
    assert report.tables_declared == 1


def test_verify_in_a_separate_process_on_the_command_line(ns):
    os.remove(data_files(ns, ns.partitions()[0])[0])
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.run([sys.executable, "-m", "lancepart.cli", "verify", ns.root], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "missing_file" in proc.stdout and "1 problems" in proc.stdout
    assert "verified 8/8 tables" in proc.stderr  # progress
