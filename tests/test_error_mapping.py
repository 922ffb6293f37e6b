"""Typed errors that name the path (issue "Safety at the boundaries", item 12): a full file system
(ENOSPC), a directory the process may not write (EACCES), a root that is a file, a corrupt or
missing data file (which table), a filter literal that does not fit its column, and a package
missing where the data is computed. Real failures: a small tmpfs that fills up, a process
without the capability that lets root ignore file modes, files truncated and deleted on disk,
a Spark executor that cannot import a module."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionedNamespace
from lancepart.cli import main
from lancepart.errors import (
    CommitConflictError,
    CorruptNamespaceError,
    CorruptTableError,
    DataFilesMissingError,
    EngineError,
    InvalidArgumentError,
    InvalidFilterError,
    MissingDependencyError,
    RetryableError,
    SparkJobFailedError,
    StorageFullError,
    StoragePermissionError,
    StorageReadOnlyError,
)
from lancepart.storage.manifest import join_uri
from lancepart.util.sample import demo_events
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
def first_data_file(ns: PartitionedNamespace, info=None):
    info = info or ns.partitions()[0]
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


def test_lances_rust_source_locations_are_not_in_the_messages_users_see(ns, capsys):
    """Lance appends the Rust source location of each layer to its errors (", /home/runner/work/
    lance/lance/rust/lance-io/src/local.rs:273:40"): the typed errors, verify's problems, and
    the tables compact and cleanup leave out keep what Lance said without them."""
    victim = ns.partitions()[0]
    other = next(p for p in ns.partitions() if p.values["event_date"] != victim.values["event_date"])
    gone = join_uri(ns.root, victim.location)
    with pytest.raises(ValueError, match=r"\.rs:\d+:\d+"):  # Lance's own text carries them
        lance.dataset(gone, version=victim.read_version + 5)
    shutil.rmtree(gone)
    with pytest.raises(CorruptTableError) as e:
        ns.to_table()
    assert f"Not found: {gone.lstrip('/')}/_versions/{victim.read_version}.manifest" in str(e.value)
    assert ".rs:" not in str(e.value)
    _, path = first_data_file(ns, other)
    os.remove(path)
    with pytest.raises(DataFilesMissingError) as e:
        ns.to_table(filter=f"event_date = DATE '{other.values['event_date']}'")
    assert os.path.basename(path) in str(e.value) and ".rs:" not in str(e.value)
    for args in (["verify", ns.root], ["--json", "verify", ns.root], ["describe", ns.root], ["compact", ns.root],
                 ["cleanup", ns.root], ["--json", "cleanup", ns.root]):
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
        assert code in (2, 3), (args, code, out, err)
        assert victim.object_id in out + err, args
        assert ".rs:" not in out + err, (args, out, err)


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

    from lancepart.ops.quality import check

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
    from lancepart.storage.error_mapping import missing_module

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


# --------------------------------------------------------------------------- one error layer (issue 21 item 5)
def data_file_of(ns: PartitionedNamespace, info) -> str:
    ds = lance.dataset(join_uri(ns.root, info.location), version=info.read_version)
    return os.path.join(join_uri(ns.root, info.location), "data", ds.get_fragments()[0].metadata.files[0].path)


def replace_where_ids_below_100(ns: PartitionedNamespace):
    rows = demo_events(300, seed=1, days=2)
    return ns.write(rows.filter(pc.less(rows.column("id"), 100)), mode="overwrite", where="id < 100")


CHANGES = {
    "merge": lambda ns: ns.merge(demo_events(300, seed=1, days=2), on=["id"]),
    "delete": lambda ns: ns.delete("id >= 0"),
    "replace_where": replace_where_ids_below_100,
}


@pytest.mark.parametrize("operation", sorted(CHANGES))
def test_a_truncated_data_file_met_by_a_change_is_a_corrupt_table_error_naming_table_and_file(ns, operation):
    """merge, delete and replace-where read the published rows of the tables they change: a
    truncated data file surfaced as a raw `ArrowInvalid: ... Invalid range 0..N for object of size
    M`. It is CorruptTableError naming the partition table and the file; nothing was published."""
    info = ns.partitions()[0]
    path = data_file_of(ns, info)
    os.truncate(path, os.path.getsize(path) // 2)
    version = ns.manifest_version
    with pytest.raises(CorruptTableError) as e:
        CHANGES[operation](ns)
    message = str(e.value)
    assert info.object_id in message and os.path.basename(path) in message, message
    assert f"{operation if operation != 'replace_where' else 'write'}: nothing was published" in message
    assert PartitionedNamespace.open(ns.root).manifest_version == version


def fill(directory: Path) -> None:
    """Take every free byte of the file system under ``directory``."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    fd = os.open(directory / "filler-small", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)


MAINTENANCE = {
    "merge": lambda ns: ns.merge(demo_events(20, seed=1, days=1), on=["id"]),
    "delete": lambda ns: ns.delete("id < 50"),
    "compact": lambda ns: ns.compact(),
    "update_schema": lambda ns: ns.update_schema(add=[pa.field("note", pa.utf8())]),
    "rollback": lambda ns: ns.rollback(ns.manifest_version - 1),
    "evolve": lambda ns: ns.evolve([{"source_ids": [1], "transform": {"type": "identity"},
                                     "result_type": {"type": "date32"}}]),
    "drop_partitions": lambda ns: ns.drop_partitions("event_date = DATE '2025-12-01'"),
    "create_index": lambda ns: ns.create_index("id", "BTREE", min_rows=1),
}


@pytest.mark.parametrize("operation", sorted(MAINTENANCE))
def test_a_full_file_system_during_any_operation_is_storage_full_and_nothing_is_published(small_fs, operation):
    """ENOSPC during merge, delete, compact, update_schema, rollback, ... was a bare
    `OSError: No space left on device` naming no path (StorageFullError existed for writes
    only). Every operation raises StorageFullError naming the root (or the table) and saying
    that nothing was published; the namespace reads as before."""
    root = str(small_fs / "ns")
    ns = create_events_ns(root)
    ns.write(demo_events(100, seed=1, days=1))
    ns.write(demo_events(100, seed=2, start_id=100, days=1))
    version, rows = ns.manifest_version, ns.to_table().sort_by("id")
    fill(small_fs)
    try:
        with pytest.raises(StorageFullError) as e:
            MAINTENANCE[operation](ns)
    finally:
        for name in ("filler", "filler-small"):
            os.remove(small_fs / name)
    message = str(e.value)
    assert root in message and "ENOSPC" in message and f"{operation}: nothing was published" in message, message
    again = PartitionedNamespace.open(root)
    assert again.manifest_version == version and again.to_table().sort_by("id").equals(rows)


@pytest.fixture
def read_only_manifest(ns):
    """``__manifest`` of ``ns`` as a read-only bind mount (EROFS, os error 30), as a snapshot or
    a read-only volume presents it."""
    path = join_uri(ns.root, "__manifest")
    if subprocess.run(["mount", "--bind", path, path], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", path], capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield ns
    finally:
        subprocess.run(["umount", path], check=False)


def test_a_read_only_manifest_is_a_read_only_storage_error_naming_the_root(read_only_manifest):
    """A write into a namespace whose __manifest is read-only raised `OSError (os error 30)`."""
    ns = read_only_manifest
    version, rows = ns.manifest_version, ns.to_table().num_rows
    for change in (lambda: ns.write(demo_events(10, seed=3, start_id=5000, days=1)), lambda: ns.delete("id < 3")):
        with pytest.raises(StorageReadOnlyError) as e:
            change()
        assert isinstance(e.value, StoragePermissionError) and isinstance(e.value, PermissionError)
        assert ns.root in str(e.value) and "read-only" in str(e.value) and "nothing was published" in str(e.value)
    assert PartitionedNamespace.open(ns.root).manifest_version == version
    assert ns.to_table().num_rows == rows  # reading still works


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


def test_lances_too_many_concurrent_writers_is_a_retryable_commit_conflict(tmp_path):
    """On S3 under contention a write failed with a raw `OSError: Too many concurrent writers`:
    the error Lance raises when its own retries against concurrent commits run out. The commit
    loops retry it like any commit conflict, and at a public operation it is CommitConflictError,
    a RetryableError, saying nothing was published."""
    from lancepart.storage.error_mapping import is_commit_conflict, operation_error

    e = lance_contention_error(tmp_path)
    assert "Too many concurrent writers" in str(e)
    assert is_commit_conflict(e)
    typed = operation_error(e, "write", "/data/ns")
    assert isinstance(typed, CommitConflictError) and isinstance(typed, RetryableError)
    assert "write on /data/ns" in str(typed) and "nothing was published" in str(typed)


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


def test_an_unclassified_engine_error_is_typed_and_a_bug_passes_unchanged(tmp_path):
    """The last resort of the operation layer: an error of Lance, Arrow or the OS that no rule
    names becomes EngineError naming the operation and the root (the original as __cause__);
    an error raised by lancepart's own code (a bug) is not disguised."""
    from lancepart.storage.error_mapping import operation_error

    with pytest.raises(pa.ArrowInvalid) as arrow_error:
        pa.array(["not a number"]).cast(pa.int8())
    typed = operation_error(arrow_error.value, "to_table", str(tmp_path), publishes=False)
    assert isinstance(typed, EngineError) and f"to_table on {tmp_path}" in str(typed)
    assert operation_error(KeyError("a lancepart bug"), "merge", str(tmp_path)) is None


def test_a_data_file_deleted_while_lance_writes_it_is_data_files_missing(tmp_path):
    """A cleanup at a retention shorter than a write may delete a data file Lance is still
    writing (it is referenced by no version yet): Lance fails when it closes the file. That is
    DataFilesMissingError naming the file and saying nothing was published (it was EngineError,
    which a caller cannot tell from a defect: the retention race test accepts the typed errors
    of that race only)."""
    from lance.file import LanceFileWriter

    from lancepart.storage.error_mapping import operation_error

    path = tmp_path / "data" / "x.lance"
    path.parent.mkdir()
    writer = LanceFileWriter(str(path), pa.schema([("a", pa.int64())]))
    writer.write_batch(pa.table({"a": list(range(10_000))}))
    for f in path.parent.iterdir():  # the file being written, deleted
        f.unlink()
    with pytest.raises(OSError, match="failed to shutdown local writer") as closing:
        writer.close()
    typed = operation_error(closing.value, "write", str(tmp_path))
    assert isinstance(typed, DataFilesMissingError), typed
    assert "x.lance" in str(typed) and "deleted while it was being written" in str(typed)
    assert "nothing was published" in str(typed)


@pytest.mark.spark
def test_a_spark_job_that_fails_is_typed_nothing_is_published_and_the_same_batch_id_publishes_once(spark, tmp_path):
    """A Spark job whose Python worker dies (killed like an executor the OOM killer ended, exit
    code 137) reached the user as a raw Py4JJavaError. lps.write and lps.merge raise
    SparkJobFailedError saying nothing was published, that rerunning the same batch id is safe
    and that files the attempt wrote are left for cleanup, with Spark's error as __cause__."""
    from pyspark.sql import functions as F

    from lancepart import spark as lps
    from lancepart.spark.sample import generated_events

    root = str(tmp_path / "ns")
    create_events_ns(root)
    lps.write(generated_events(spark, 200, seed=1), root, batch_id="b0")
    version = PartitionedNamespace.open(root).manifest_version

    @F.udf("long")
    def dies_on_7(i):
        import os
        import signal

        if i == 7:
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    good = generated_events(spark, 100, seed=2).withColumn("id", F.col("id") + 10_000)
    failing = good.withColumn("id", dies_on_7(F.col("id") - 10_000) + 10_000)
    for name, run in (("lps.write", lambda df: lps.write(df, root, batch_id="b1")),
                      ("lps.merge", lambda df: lps.merge(df, root, on=["id"], batch_id="b1"))):
        with pytest.raises(SparkJobFailedError) as e:
            run(failing)
        message = str(e.value)
        assert name in message and root in message and "nothing was published" in message, message
        assert "same batch_id is safe" in message and "cleanup" in message
        assert "Python worker exited unexpectedly" in message
        assert type(e.value.__cause__).__name__ == "Py4JJavaError"
        assert PartitionedNamespace.open(root).manifest_version == version
    assert lps.write(good, root, batch_id="b1").rows_written == 100
    assert lps.write(good, root, batch_id="b1").skipped
    assert PartitionedNamespace.open(root).to_table().num_rows == 300


@pytest.mark.spark
def test_spark_delete_of_a_truncated_data_file_is_a_corrupt_table_error(ns, spark):
    from lancepart import spark as lps

    info = ns.partitions()[0]
    path = data_file_of(ns, info)
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(CorruptTableError) as e:
        lps.delete(spark, ns.root, "id >= 0")
    assert info.object_id in str(e.value) and os.path.basename(path) in str(e.value)
    assert "lps.delete: nothing was published" in str(e.value)
