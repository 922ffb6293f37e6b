"""Typed errors that name the path (issue "Safety at the boundaries", item 12): a full file system
(ENOSPC), a directory the process may not write (EACCES), a root that is a file, a corrupt or
missing data file (which table), a filter literal that does not fit its column, and a package
missing where the data is computed. Real failures: a small tmpfs that fills up, a process
without the capability that lets root ignore file modes, files truncated and deleted on disk,
a Spark executor that cannot import a module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import (
    CorruptNamespaceError,
    CorruptTableError,
    DataFilesMissingError,
    InvalidArgumentError,
    InvalidFilterError,
    MissingDependencyError,
    StorageFullError,
)
from lancepart.manifest import join_uri
from lancepart.sample import demo_events
from tests.conftest import copy_ns, create_events_ns

HERE = Path(__file__).resolve().parent
# root ignores file modes through these capabilities; without them chmod binds it like anyone
NO_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]




@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("errors") / "ns")
    create_events_ns(root).write(demo_events(300, seed=1, days=2))
    return root


@pytest.fixture
def ns(template, tmp_path) -> PartitionedNamespace:
    return copy_ns(template, tmp_path / "ns")


def run_proc(*args: str, prefix: list[str] | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.run([*(prefix or []), sys.executable, str(HERE / "error_proc.py"), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- ENOSPC
@pytest.fixture
def small_fs(tmp_path):
    """A real 512 KiB tmpfs (the tests run as root in their container)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_file_system_is_storage_full_naming_the_root_and_nothing_is_published(small_fs):
    root = str(small_fs / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(100, seed=1, days=1))
    version, rows = ns.manifest_version, ns.to_table().num_rows
    with pytest.raises(StorageFullError) as e:
        ns.write(demo_events(200_000, seed=2, start_id=1000, days=5))
    assert root in str(e.value) and "ENOSPC" in str(e.value)
    assert isinstance(e.value, OSError)
    # new partitions may have been reserved (empty tables); no row of the failed write is published
    again = PartitionedNamespace.open(root)
    assert again.to_table().num_rows == rows
    before = {p.object_id: p.read_version for p in ns.partitions()}
    assert {p.object_id: p.read_version for p in again.partitions() if p.object_id in before} == before
    assert again.manifest_version >= version


# --------------------------------------------------------------------------- EACCES
@pytest.fixture
def no_override():
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs setpriv and root to drop the override capabilities")
    return NO_OVERRIDE


def test_a_read_only_root_is_a_permission_error_naming_the_root(ns, no_override):
    for dirpath, _, _ in os.walk(ns.root):
        os.chmod(dirpath, 0o555)
    try:
        out = run_proc("write", ns.root, prefix=no_override)
        assert out["error"] == "StoragePermissionError", out
        assert ns.root in out["message"] and "PermissionError" in out["bases"]
        assert run_proc("read", ns.root, prefix=no_override)["error"] is None  # reading still works
        os.chmod(join_uri(ns.root, "__manifest"), 0o000)
        out = run_proc("open", ns.root, prefix=no_override)
        assert out["error"] == "StoragePermissionError" and ns.root in out["message"], out
    finally:
        for dirpath, _, _ in os.walk(ns.root):
            os.chmod(dirpath, 0o755)


def test_creating_under_a_read_only_directory_is_a_permission_error(tmp_path, no_override):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        out = run_proc("create", str(parent / "ns"), prefix=no_override)
        assert out["error"] == "StoragePermissionError" and str(parent / "ns") in out["message"], out
    finally:
        parent.chmod(0o755)


# --------------------------------------------------------------------------- a root that is a file
def test_a_root_that_is_a_file_is_named(tmp_path, capsys):
    f = tmp_path / "not_a_dir"
    f.write_text("hello")
    with pytest.raises(InvalidArgumentError, match=f"{f} is a file"):
        create_events_ns(str(f))
    with pytest.raises(InvalidArgumentError, match=f"{f} is a file"):
        create_events_ns(str(f / "below"))
    with pytest.raises(InvalidArgumentError, match=f"{f} is a file"):
        PartitionedNamespace.open(str(f))
    parquet = tmp_path / "in.parquet"
    import pyarrow.parquet as pq

    pq.write_table(demo_events(10), parquet)
    assert main(["ingest", str(f), str(parquet), "--json", "-q"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["error"] == "InvalidArgumentError" and f"{f} is a file" in out["message"]


# --------------------------------------------------------------------------- corrupt and missing data files
def first_data_file(ns: PartitionedNamespace):
    info = ns.partitions()[0]
    ds = lance.dataset(join_uri(ns.root, info.location), version=info.read_version)
    name = ds.get_fragments()[0].metadata.files[0].path
    return info, os.path.join(join_uri(ns.root, info.location), "data", name)


def test_a_truncated_data_file_is_a_corrupt_table_error_naming_the_table_and_file(ns):
    info, path = first_data_file(ns)
    os.truncate(path, 64)
    with pytest.raises(CorruptTableError) as e:
        ns.to_table()
    assert isinstance(e.value, CorruptNamespaceError)
    assert info.object_id in str(e.value) and os.path.basename(path) in str(e.value)


def test_a_deleted_data_file_is_data_files_missing_naming_the_table_and_file(ns):
    info, path = first_data_file(ns)
    os.remove(path)
    with pytest.raises(DataFilesMissingError) as e:
        ns.to_table()
    assert info.object_id in str(e.value) and os.path.basename(path) in str(e.value)


def test_a_table_that_cannot_be_opened_is_a_corrupt_table_error(ns):
    info = ns.partitions()[0]
    shutil.rmtree(os.path.join(join_uri(ns.root, info.location), "_versions"))
    with pytest.raises(CorruptTableError, match=info.object_id.replace("$", r"\$")):
        ns.to_table()


@pytest.mark.spark
def test_spark_read_of_a_truncated_data_file_names_the_table(ns, spark):
    from lancepart import spark as lps

    info, path = first_data_file(ns)
    os.truncate(path, 64)
    with pytest.raises(Exception) as e:
        lps.read(spark, ns.root).collect()
    assert "CorruptTableError" in str(e.value) and info.object_id in str(e.value)


# --------------------------------------------------------------------------- filters
def test_a_literal_that_does_not_fit_its_column_is_refused_at_pruning_time(ns, capsys):
    """`partitions --filter "country = 42"` listed everything and only the read failed."""
    for f in ("country = 42", "country IN (1, 2)", "country > 4.5 AND event_date = DATE '2025-12-01'"):
        with pytest.raises(InvalidFilterError) as e:
            ns.partitions(f)
        assert "'country'" in str(e.value)
    with pytest.raises(InvalidFilterError, match="42"):
        ns.partitions("country = 42")
    with pytest.raises(InvalidFilterError):
        ns.to_table("country = 42")
    assert main(["partitions", ns.root, "--filter", "country = 42", "--json", "-q"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "InvalidFilterError"
    assert ns.partitions("country = 'US'")  # a fitting literal
    assert ns.partitions("CAST(country AS BIGINT) IS NULL OR TRUE")  # an explicit cast is the user's intent


# --------------------------------------------------------------------------- a missing package on executors
@pytest.mark.spark
def test_a_package_missing_on_the_executors_is_a_missing_dependency_not_failed_expectations(spark, tmp_path):
    """The DataFrame's Python code imports a module the driver has and the executors do not:
    every expectation used to be reported as failed (5 of 5); the gate must name the package."""
    from pyspark.sql import functions as F

    from lancepart.quality import check

    name = f"lp_driver_only_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def double(x):\n    return 2.0 * x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        __import__(name)  # importable on the driver

        @F.udf("double")
        def amount(x):
            return __import__(name).double(x)

        df = spark.range(20).withColumn("amount", amount(F.col("id")))
        expectations = [{"type": "not_null", "column": "amount"},
                        {"type": "between", "column": "amount", "min": 0, "max": 100},
                        {"type": "not_null", "column": "id"},
                        {"type": "unique", "column": "id"},
                        {"type": "row_count", "min": 1}]
        with pytest.raises(MissingDependencyError) as e:
            check(df, expectations)
        assert repr(name) in str(e.value) and "executors" in str(e.value)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_the_missing_dependency_text_names_the_package():
    from lancepart.error_mapping import missing_module

    assert missing_module("PythonException: ModuleNotFoundError: No module named 'lancepart.write'") == "lancepart"
    assert missing_module("everything fine") is None


@pytest.mark.spark
def test_spark_write_to_a_full_file_system_names_the_storage_full_table(small_fs, spark):
    from lancepart import spark as lps
    from lancepart.spark.sample import generated_events

    root = str(small_fs / "ns")
    create_events_ns(root)
    with pytest.raises(Exception) as e:
        lps.write(generated_events(spark, 300_000, seed=3), root)
    # raised on an executor: typed where Spark hands the task's exception back, named in its text otherwise
    assert "StorageFullError" in f"{type(e.value).__name__}: {e.value}" and root in str(e.value)
    assert PartitionedNamespace.open(root).to_table().num_rows == 0


# --------------------------------------------------------------------------- one classifier (issue 21 item 5)
def lance_contention_error(tmp_path) -> OSError:
    """The error Lance raises when its own conflict retries run out, made for real: an update
    through a handle read before a concurrent delete of the same fragment, with no retry left."""
    uri = str(tmp_path / "contended")
    lance.write_dataset(pa.table({"a": list(range(100)), "b": list(range(100))}), uri)
    before = lance.dataset(uri)
    lance.dataset(uri).delete("a < 10")
    with pytest.raises(OSError) as e:
        before.update({"b": "b + 1"}, where="a >= 5", conflict_retries=0)
    return e.value


def test_lances_too_many_concurrent_writers_is_a_commit_conflict(tmp_path):
    """On S3 under contention a write failed with a raw `OSError: Too many concurrent writers`:
    the error Lance raises when its own retries against concurrent commits run out. Every
    commit loop asks the one classifier, which calls it a commit conflict: retried."""
    from lancepart.error_mapping import is_commit_conflict

    e = lance_contention_error(tmp_path)
    assert "Too many concurrent writers" in str(e)
    assert is_commit_conflict(e)


def test_every_public_error_is_exported_and_conflicts_are_one_retryable_family():
    """Only 7 of the error types were importable from `lancepart`."""
    import inspect

    import lancepart
    from lancepart import errors

    public = {n: c for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, errors.LancepartError)}
    assert len(public) >= 30
    missing = sorted(n for n, c in public.items() if getattr(lancepart, n, None) is not c or n not in lancepart.__all__)
    assert not missing, missing
    assert issubclass(lancepart.CommitConflictError, lancepart.RetryableError)
    assert issubclass(lancepart.StorageReadOnlyError, lancepart.StoragePermissionError)
