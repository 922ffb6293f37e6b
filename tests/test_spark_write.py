"""The Spark write path on real Spark local[2]: spec/partitioning.md "Transaction" and
docs/design.md §8. Partition values are recomputed independently (mmh3, dates) and the
published snapshot is read back with Lance at every table's read_version."""

from __future__ import annotations

import os
from collections import Counter

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace, SchemaMismatchError
from lancepart import spark as lps
from lancepart.spark.sample import generated_events
from lancepart.util.sample import demo_events
from tests.conftest import expected_keys
from tests.procs import release, wait_until_reached

pytestmark = pytest.mark.spark

def to_df(spark, table: pa.Table):
    """A Spark DataFrame of demo rows; event_ts stays wall-clock (TIMESTAMP_NTZ) like the namespace column."""
    import pandas as pd

    df = spark.createDataFrame(table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get))
    return df.withColumn("event_ts", df["event_ts"].cast("timestamp_ntz"))


def expected_counts(data: pa.Table) -> Counter:
    return Counter(expected_keys(data))


def published(ns: PartitionedNamespace) -> tuple[Counter, pa.Table]:
    ns.refresh()
    counts = Counter()
    for p in ns.partitions():
        counts[(p.values["event_date"], p.values["user_bucket"])] += lance.dataset(
            os.path.join(ns.root, p.location), version=p.read_version).count_rows()
    return counts, ns.to_table().sort_by("id")


def test_spark_append_publishes_exactly_the_input(spark, ns):
    df = generated_events(spark, 60_000, seed=11, slices=3)
    data = demo_events(20_000, seed=11, start_id=0)
    for s in (1, 2):  # the same rows the executors generate, made locally
        data = pa.concat_tables([data, demo_events(20_000, seed=11, start_id=s * 20_000)])
    r = lps.write(df, ns.root, batch_id="b-1")
    assert (r.rows_written, r.partitions_created, r.partitions_touched, r.skipped) == (60_000, 28, 28, False)
    counts, table = published(ns)
    assert counts == expected_counts(data)
    assert table.equals(data.cast(ns.schema))
    oids = [p.object_id for p in ns.partitions()]
    assert len(oids) == len(set(oids)) == 28
    # several tasks wrote into one partition table: its fragments come from more than one task
    p = ns.partitions()[0]
    assert len(lance.dataset(os.path.join(ns.root, p.location), version=p.read_version).get_fragments()) >= 2
    again = lps.write(df, ns.root, batch_id="b-1")
    assert again.skipped and again.manifest_version == r.manifest_version
    # Lance's reference DirectoryNamespace lists and describes the new tables
    d = lns.DirectoryNamespace(root=ns.root)
    level1 = d.list_namespaces(lns.ListNamespacesRequest(id=["v1"])).namespaces
    assert len(level1) == 7
    desc = d.describe_table(lns.DescribeTableRequest(id=p.object_id.split("$")))
    assert desc.location.rstrip("/").endswith(p.location)


def test_spark_overwrite_replaces_only_touched_partitions(spark, ns):
    old = demo_events(5_000, seed=2)
    lps.write(to_df(spark, old), ns.root)
    before, _ = published(ns)
    new = demo_events(40, seed=3, start_id=100_000, days=1)
    r = lps.write(to_df(spark, new), ns.root, mode="overwrite")
    touched = expected_counts(new)
    assert r.partitions_touched == len(touched)
    after, _ = published(ns)
    for key, n in before.items():
        assert after[key] == (touched[key] if key in touched else n)


def test_task_failure_publishes_nothing(spark, ns):
    lps.write(to_df(spark, demo_events(1_000)), ns.root)
    _, snapshot = published(ns)
    bad = demo_events(1_000, start_id=1_000, seed=4)
    ids = bad.column("id").to_pylist()
    ids[777] = None  # non-nullable id: the write tasks fail, planning does not
    bad = bad.set_column(0, pa.field("id", pa.int64()), pa.array(ids, pa.int64()))
    with pytest.raises(Exception, match="'id' is non-nullable but the input has 1 NULLs"):
        lps.write(to_df(spark, bad), ns.root)
    _, after = published(ns)
    assert after.equals(snapshot)


def test_schema_mismatch_before_any_write(spark, ns):
    df = to_df(spark, demo_events(10)).withColumnRenamed("country", "nation")
    version = ns.manifest_version
    with pytest.raises(SchemaMismatchError, match="'nation'"):
        lps.write(df, ns.root)
    assert ns.refresh().manifest_version == version
    base = to_df(spark, demo_events(10))
    wrong = base.withColumn("user_id", base["user_id"].cast("string"))
    with pytest.raises(SchemaMismatchError, match="column 'user_id' is string in the input but int64"):
        lps.write(wrong, ns.root)
    zoned = base.withColumn("event_ts", base["event_ts"].cast("timestamp"))
    with pytest.raises(SchemaMismatchError, match="cast it to timestamp_ntz first"):
        lps.write(zoned, ns.root)


def test_concurrent_creator_wins_and_spark_job_adopts_its_tables(spark, ns, monkeypatch):
    """docs/design.md §8 hazard 1 on the Spark path: executors wrote new partitions into this
    job's own directories; meanwhile another process reserves the same partitions. Exactly
    one table per partition survives and the Spark job's rows move into the winner's tables."""
    import subprocess
    import sys
    import threading
    from pathlib import Path

    data = demo_events(3_000, seed=31, start_id=50_000)
    df = to_df(spark, data)
    go = ns.root + ".go"
    monkeypatch.setenv("LANCEPART_FAULT", f"after_fragments:wait:{go}")  # read by the driver only
    other: dict = {}

    def rival():
        try:
            wait_until_reached(go)  # the executors wrote the job's tables; the driver stands still
            env = {k: v for k, v in os.environ.items() if k != "LANCEPART_FAULT"}
            other["proc"] = subprocess.run([sys.executable, str(Path(__file__).with_name("writer_proc.py")),
                                            ns.root, "--start", "0", "--rows", "2000"], env=env, capture_output=True,
                                           text=True)
        finally:
            release(go)

    t = threading.Thread(target=rival)
    t.start()
    r = lps.write(df, ns.root)
    t.join()
    assert other["proc"].returncode == 0, other["proc"].stderr
    assert r.details.get("adopted", 0) > 0 and r.partitions_created < 28
    ns.refresh()
    oids = [p.object_id for p in ns.partitions()]
    assert len(oids) == len(set(oids)) == 28
    dirs = [d for d in os.listdir(ns.root) if d != "__manifest"]
    assert sorted(dirs) == sorted(p.location for p in ns.partitions())  # the job's losing directories are gone
    ids = sorted(ns.to_table(columns=["id"]).column("id").to_pylist())
    assert ids == list(range(2_000)) + list(range(50_000, 53_000))


def test_failing_expectation_publishes_nothing(spark, ns):
    from lancepart import ExpectationFailedError

    lps.write(to_df(spark, demo_events(500)), ns.root)
    _, before = published(ns)
    version = ns.manifest_version
    bad = demo_events(1_000, seed=41, start_id=1_000)
    amounts = bad.column("amount").to_pylist()
    amounts[10], amounts[20] = -5.0, 99_999.0
    bad = bad.set_column(5, "amount", pa.array(amounts))
    expectations = [{"type": "not_null", "column": "id"}, {"type": "between", "column": "amount", "min": 0,
                                                            "max": 10_000},
                    {"type": "in_set", "column": "country", "values": ["US", "FR", "DE", "JP", "BR"]}]
    bad_df = to_df(spark, bad)
    with pytest.raises(ExpectationFailedError) as exc:
        lps.write(bad_df, ns.root, expectations=expectations)
    assert "1 of 3 expectations failed" in str(exc.value) and "2 of 1000 rows unexpected" in str(exc.value)
    assert not bad_df.is_cached  # cached for the gate and the write, released on the failure too
    assert ns.refresh().manifest_version == version
    assert sorted(d for d in os.listdir(ns.root)) == sorted(["__manifest", *(p.location for p in ns.partitions())])
    _, after = published(ns)
    assert after.equals(before)
    ok_df = to_df(spark, demo_events(100, start_id=5_000))
    ok = lps.write(ok_df, ns.root, expectations=expectations)
    assert ok.rows_written == 100 and "expectations_s" in ok.details
    assert not ok_df.is_cached


def test_spark_write_reports_phase_timings(spark, ns):
    """Issue 12 item 5: ``lps.write`` reports the time of each phase in ``details`` (present,
    never negative; no thresholds), the gate's included when there is one."""
    r = lps.write(to_df(spark, demo_events(2_000, seed=8)), ns.root, expectations=[{"type": "row_count", "min": 1}])
    d = r.details
    for key in ("expectations_s", "write_s", "reserve_s", "commit_tables_s", "manifest_commit_s", "publish_s"):
        assert isinstance(d[key], float) and d[key] >= 0, (key, d)
    assert d["fragments"] >= r.partitions_touched > 0


@pytest.mark.slow
def test_spark_write_does_not_log_lance_no_existing_dataset_per_fragment(tmp_path):
    """Issue 12 item 5: Lance logged ``WARN ... No existing dataset at <table>, it will be created``
    once per fragment written into a new partition table (256 lines for a 16 M-row job). A Spark
    write prints none of them, from a session the user started before importing lancepart, with
    lancepart's log filter and with Lance's usual ``LANCE_LOG=warn`` (new partition tables are
    now born with their data); a Spark task writing fragments into fresh directories the old way
    (the control) shows them, so the captured output is the one that would."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "LANCE_LOG"}
    env.update(PYTHONPATH=str(repo), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(repo / "tests" / "spark_log_proc.py"), str(tmp_path)], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    versions = json.loads(proc.stdout.strip().splitlines()[-1])
    assert versions["quiet"] > 0 and versions["warn"] > 0
    quiet, _, rest = proc.stderr.partition("=== LANCE_LOG=warn from here ===")
    warn, _, control = rest.partition("=== control from here ===")
    assert control, proc.stderr[-2000:]
    assert "No existing dataset" not in quiet, quiet[-2000:]
    assert "No existing dataset" not in warn, warn[-2000:]  # new partition tables are born with their data
    assert "No existing dataset" in control  # the control: the captured output would show them


def test_gate_and_write_compute_the_source_once(spark, ns):
    """Issue 12 item 4: with expectations, the input is computed once for the gate and the write
    (a CSV parsed once, not twice): the gate's pass fills a cache the write reads, released at
    the end. Counted with an accumulator the source's own tasks add their rows to."""
    from pyspark.sql.pandas.types import from_arrow_schema

    rows_made = spark.sparkContext.accumulator(0)
    data = demo_events(3_000, seed=12)

    def make(batches):
        for batch in batches:
            for part in batch.column(0).to_pylist():
                chunk = data.slice(part * 1_500, 1_500)
                rows_made.add(chunk.num_rows)
                yield from chunk.to_batches()

    df = spark.range(0, 2, numPartitions=2).mapInArrow(make, from_arrow_schema(data.schema))
    df = df.withColumn("event_ts", df["event_ts"].cast("timestamp_ntz"))
    r = lps.write(df, ns.root, expectations=[{"type": "not_null", "column": "id"}, {"type": "row_count", "min": 1}])
    assert r.rows_written == 3_000
    assert rows_made.value == 3_000  # once, not once for the gate and once for the write
    assert not df.is_cached
    # the gate reports which part of its time computed the input the write then read from the cache
    assert 0 < r.details["expectations_input_s"] <= r.details["expectations_s"]
