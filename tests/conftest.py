"""Shared fixtures. Everything runs for real: Lance tables on disk, DataFusion, Spark local[2]."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

# A pytest-xdist worker runs with a __main__ that has neither __spec__ nor __file__, which
# pyspark.sql.connect (imported by great_expectations) takes for a doctest run, and it calls
# sys.exit(0). Give that __main__ a file: one that does nothing if a spawned process runs it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _main = sys.modules["__main__"]
    if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
        _main.__file__ = str(Path(__file__).with_name("xdist_main.py"))

# Every JVM the tests start (the shared `spark` session, ./spark-submit.sh runs, Spark drivers
# in subprocesses: they inherit this environment) compiles with C1 only and collects garbage on
# one thread. On tiny inputs C2's compilations cost more CPU than they save: a JVM that starts
# a SparkContext and runs one job takes about 15 CPU seconds instead of 25, a Spark test file
# about a third less. SPARK_SUBMIT_OPTS reaches the JVM that bin/spark-submit starts, in local
# mode the driver and executors; it changes no behaviour, and prints nothing.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# spec/partitioning.md Appendix A, verbatim.
APPENDIX_A = json.loads("""
{
  "partition_spec_v1": {
    "id": 1,
    "fields": [
      {
        "field_id": "event_date",
        "source_ids": [1],
        "transform": { "type": "identity" },
        "result_type": { "type": "date32" }
      }
    ]
  },
  "partition_spec_v2": {
    "id": 2,
    "fields": [
      {
        "field_id": "event_year",
        "source_ids": [1],
        "transform": { "type": "year" },
        "result_type": { "type": "int32" }
      },
      {
        "field_id": "country",
        "source_ids": [2],
        "transform": { "type": "identity" },
        "result_type": { "type": "utf8" }
      }
    ]
  },
  "schema": {
    "fields": [
      {
        "name": "id",
        "nullable": false,
        "type": { "type": "int64" },
        "metadata": { "lance:field_id": "0" }
      },
      {
        "name": "event_date",
        "nullable": true,
        "type": { "type": "date32" },
        "metadata": { "lance:field_id": "1" }
      },
      {
        "name": "country",
        "nullable": true,
        "type": { "type": "utf8" },
        "metadata": { "lance:field_id": "2" }
      }
    ]
  }
}
""")


@pytest.fixture(autouse=True)
def _faults_counted_afresh():
    """A fault spec's ``n`` counts the times its step is reached in this test, not since the worker
    process started (a test before it may have reached the step with a spec set)."""
    from lancepart.util import faults

    faults.reset()
    yield


@pytest.fixture
def appendix_a() -> dict:
    return json.loads(json.dumps(APPENDIX_A))


@pytest.fixture
def events_schema() -> pa.Schema:
    """The Appendix A schema as Arrow, without field ids (they get assigned)."""
    return pa.schema([pa.field("id", pa.int64(), nullable=False), ("event_date", pa.date32()),
                      ("country", pa.utf8())])


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "ns")


# The write tests' namespace: demo events partitioned by event_date x bucket(user_id, 4).
EVENTS_SPEC = {"id": 1, "fields": [
    {"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"}, "result_type": {"type": "date32"}},
    {"field_id": "user_bucket", "source_ids": [4], "transform": {"type": "bucket", "num_buckets": 4},
     "result_type": {"type": "int32"}},
]}


def create_events_ns(root: str):
    """A new namespace at ``root`` for the demo events (``id`` non-nullable), partitioned by EVENTS_SPEC."""
    from lancepart import PartitionedNamespace
    from lancepart.util.sample import demo_events

    schema = demo_events(1).schema
    return PartitionedNamespace.create(root, schema.set(0, schema.field("id").with_nullable(False)), EVENTS_SPEC)


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """The object ids of the partition tables opened while the test runs."""
    from lancepart.read import snapshot

    seen: list[str] = []
    real = snapshot.open_published

    def counting(root, info, storage_options=None):
        seen.append(info.object_id)
        return real(root, info, storage_options)

    monkeypatch.setattr(snapshot, "open_published", counting)
    return seen


def written_events(tmp_path_factory, name: str, rows: int, seed: int, commits: int = 2):
    """A module's events namespace: ``rows`` demo events written in ``commits`` writes (several
    fragments per table); (a fresh handle, the rows written)."""
    from lancepart import PartitionedNamespace
    from lancepart.util.sample import demo_events

    root = str(tmp_path_factory.mktemp(name) / "ns")
    ns = create_events_ns(root)
    data = demo_events(rows, seed=seed)
    step = -(-rows // commits)
    for start in range(0, rows, step):
        ns.write(data.slice(start, step))
    return PartitionedNamespace.open(root), data


def copy_ns(template: str, dest):
    """A copy of the namespace at ``template`` (a module's prepared one) at ``dest``, opened."""
    import shutil

    from lancepart import PartitionedNamespace

    shutil.copytree(template, dest)
    return PartitionedNamespace.open(str(dest))


@pytest.fixture
def ns(root):
    return create_events_ns(root)


def manifest_version(root: str) -> int:
    """The latest version of ``__manifest`` at ``root``, read with plain pylance."""
    import lance

    from lancepart.storage.manifest import join_uri

    return lance.dataset(join_uri(root, "__manifest")).version


def assert_read_versions_only_increase(ns) -> None:
    """docs/design.md §8: across every ``__manifest`` version, no table's ``read_version`` ever
    moves backwards (and at least one table has one, so the check cannot pass vacuously)."""
    import lance

    from lancepart.storage.manifest import join_uri

    history: dict[str, list[int]] = {}
    ds = lance.dataset(join_uri(ns.root, "__manifest"), storage_options=ns.storage_options)
    for v in range(1, ds.version + 1):
        for row in ds.checkout_version(v).to_table(columns=["object_id", "read_version"]).to_pylist():
            if row["read_version"] is not None:
                history.setdefault(row["object_id"], []).append(row["read_version"])
    assert history, "no table has a read_version in any __manifest version"
    backwards = {oid: h for oid, h in history.items() if h != sorted(h)}
    assert not backwards, f"read_version moved backwards across __manifest versions: {backwards}"


def expected_keys(data: pa.Table) -> list[tuple]:
    """Partition key of every row of ``data`` under EVENTS_SPEC, computed independently of
    lancepart: the date itself, and mmh3 over the int64 little-endian bytes of user_id."""
    import mmh3
    import numpy as np

    uniq, inv = np.unique(data.column("user_id").to_numpy(), return_inverse=True)
    b = np.array([abs(mmh3.hash(int(u).to_bytes(8, "little", signed=True), 0, signed=True)) % 4 for u in uniq])
    return list(zip(data.column("event_date").to_pylist(), b[inv].tolist(), strict=True))


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """One SeaweedFS server (master, volume, filer, S3 gateway; tests/seaweedfs_server.py) for
    the whole run; skipped with the reason if the ``weed`` binary is missing or does not come up."""
    import logging
    import time

    from tests.seaweedfs_server import SeaweedUnavailable, seaweedfs_s3

    started = time.monotonic()
    server_cm = seaweedfs_s3(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server = server_cm.__enter__()
    except SeaweedUnavailable as e:
        pytest.skip(f"SeaweedFS unavailable: {e}")
    logging.getLogger(__name__).info("SeaweedFS ready in %.1f s at %s", time.monotonic() - started, server.endpoint)
    try:
        yield server
    finally:
        server_cm.__exit__(None, None, None)


@pytest.fixture(scope="session")
def spark():
    """A real Spark session on local[2] (Java 17), shared by the whole run."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lancepart-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# --------------------------------------------------------------------------- --stress
def pytest_addoption(parser):
    parser.addoption("--stress", action="store_true", default=False,
                     help="run the concurrency and crash suites longer: more rounds, writers, batches and kills")
    parser.addoption("--cluster", action="store_true", default=False,
                     help="run the tests that start a Spark standalone cluster (master + 2 workers on 127.0.0.1) "
                          "and ship the packed environment of `make dist` to it")


def pytest_configure(config):
    config.addinivalue_line("markers", "stress: runs only with --stress (longer reliability runs)")
    config.addinivalue_line("markers", "cluster: runs only with --cluster (a Spark standalone cluster)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--stress"):  # the soaks run for minutes each: a hang is still ended, later
        for item in items:
            item.add_marker(pytest.mark.timeout(3600))
    for option, marker in (("--stress", "stress"), ("--cluster", "cluster")):
        if config.getoption(option):
            continue
        skip = pytest.mark.skip(reason=f"needs {option}")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # an xdist worker: every worker orders the same collection the same way
        items[:] = long_work_first(items, workers)


def long_work_first(items: list, workers: int) -> list:
    """The order pytest-xdist hands the tests out in. Under ``--dist worksteal`` (pyproject.toml)
    worker k starts with the k-th of ``workers`` contiguous shares of this order, and a worker
    that is done takes the second half of what the busiest one has left.

    * Each share starts with its long work: the modules that hold a ``slow`` test, dealt out
      module by module. A long test that started last kept the run going while the other
      workers had nothing left; the queues now end in short tests.
    * The other tests that use the shared ``spark`` session follow, back to back, in two halves
      (the last two shares): Spark closes a Python worker that was idle for a minute, and the
      next query starts new ones, which import lancepart again (about 8 CPU seconds each
      time); spread between other tests, Spark tests paid that again and again.
    * Then the rest, in collection order. A share is contiguous, so a module mostly runs in
      one worker (its module fixtures are set up once).
    """
    def module(item) -> str:
        return item.nodeid.split("::")[0]

    slow = {module(item) for item in items if item.get_closest_marker("slow") is not None}
    shares: list[list] = [[] for _ in range(workers)]
    for n, name in enumerate(dict.fromkeys(module(item) for item in items if module(item) in slow)):
        shares[n % workers] += [item for item in items if module(item) == name]
    spark = [item for item in items if module(item) not in slow and "spark" in getattr(item, "fixturenames", ())]
    half = (len(spark) + 1) // 2
    shares[-2] += spark[:half]
    shares[-1] += spark[half:]
    placed = {id(item) for share in shares for item in share}
    rest = [item for item in items if id(item) not in placed]
    order, left = [], len(items)
    for k, share in enumerate(shares):
        size = left // (workers - k)  # what worksteal first sends worker k
        take = max(0, size - len(share))
        order += share + rest[:take]
        rest, left = rest[take:], left - size
    return order + rest


@pytest.fixture(scope="session")
def stress(request) -> bool:
    """True under ``pytest --stress``: the reliability suites run more rounds, batches and kills."""
    return bool(request.config.getoption("--stress"))
