"""The ``lancepart`` Spark data source (docs/datasource.md) on real Spark local[2]: it must give
exactly what ``lps.write`` / ``lps.read`` / ``ns.to_table`` give (spec "Transaction": one
``__manifest`` commit per write; "Partition Pruning": a partition is dropped only when it provably
holds no matching row)."""

from __future__ import annotations

import datetime as dt
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from lancepart.read.snapshot import apply_filter
from lancepart.spark.datasource import PUSHDOWN_CONF, filter_sql
from lancepart.util.sample import demo_events
from tests.conftest import EVENTS_SPEC, create_events_ns
from tests.test_spark_write import to_df

pytestmark = pytest.mark.spark


def events(n: int, seed: int, start_id: int = 0) -> pa.Table:
    """Demo events, every 13th row without a country (NULLs for the null-aware filters)."""
    t = demo_events(n, seed=seed, start_id=start_id)
    country = [None if i % 13 == 0 else c for i, c in enumerate(t.column("country").to_pylist())]
    return t.set_column(t.schema.get_field_index("country"), "country", pa.array(country, pa.utf8()))


def ids(table_or_rows) -> list[int]:
    if isinstance(table_or_rows, pa.Table):
        return sorted(table_or_rows.column("id").to_pylist())
    return sorted(r["id"] for r in table_or_rows)


@pytest.fixture(autouse=True)
def registered(spark):
    """format("lancepart") needs lps.register(spark) (or any lps.* call) first in a session."""
    lps.register(spark)


@pytest.fixture(scope="module")
def filled(tmp_path_factory, spark):
    """A namespace holding 3 000 events written by lps.write (28 partition tables)."""
    root = str(tmp_path_factory.mktemp("ds") / "events")
    create_events_ns(root)
    lps.write(to_df(spark, events(3000, seed=5)), root)
    return root


# --------------------------------------------------------------------------- registration
def test_register_is_idempotent_and_enables_pushdown(spark, filled):
    """Item 13.1: lps.register(spark) may be called any number of times; lps.* call it implicitly."""
    lps.register(spark)
    lps.register(spark)
    assert spark.conf.get(PUSHDOWN_CONF) == "true"
    assert spark.read.format("lancepart").load(filled).count() == 3000


# --------------------------------------------------------------------------- writing
def test_format_write_equals_lps_write_and_batch_id_skips(spark, tmp_path):
    """Same planner, fragment writer and single publish as lps.write: same table contents and the
    same partition tables; a rerun of a published batch_id publishes nothing (docs/exactly-once.md)."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    create_events_ns(a)
    create_events_ns(b)
    df = to_df(spark, events(2000, seed=7))
    before = PartitionedNamespace.open(a).manifest_version
    df.write.format("lancepart").mode("append").option("batch_id", "day-1").save(a)
    lps.write(df, b, batch_id="day-1")
    na, nb = PartitionedNamespace.open(a), PartitionedNamespace.open(b)
    assert na.to_table().sort_by("id").equals(nb.to_table().sort_by("id"))
    assert sorted(p.object_id for p in na.partitions()) == sorted(p.object_id for p in nb.partitions())
    assert na.manifest_version == before + 1  # ONE __manifest commit
    result = lps.last_result(a)
    assert (result.rows_written, result.partitions_created, result.batch_id, result.skipped) == (2000, 28, "day-1",
                                                                                                   False)
    assert result.manifest_version == na.manifest_version
    df.write.format("lancepart").mode("append").option("batch_id", "day-1").save(a)
    assert lps.last_result(a).skipped is True
    assert na.refresh().manifest_version == before + 1
    assert na.to_table().num_rows == 2000


def test_overwrite_is_dynamic_partition_overwrite_like_lps_write(spark, tmp_path):
    """mode("overwrite") replaces only the partitions the input touches, as lps.write(mode="overwrite")."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    first = events(1500, seed=1)
    day = first.column("event_date")[0].as_py()
    second = events(300, seed=2, start_id=10_000)
    second = second.filter(pa.compute.equal(second.column("event_date"), pa.scalar(day, pa.date32())))
    for root in (a, b):
        create_events_ns(root)
        lps.write(to_df(spark, first), root)
    to_df(spark, second).write.format("lancepart").mode("overwrite").save(a)
    lps.write(to_df(spark, second), b, mode="overwrite")
    got = PartitionedNamespace.open(a).to_table().sort_by("id")
    assert got.equals(PartitionedNamespace.open(b).to_table().sort_by("id"))
    kept = first.filter(pa.compute.not_equal(first.column("event_date"), pa.scalar(day, pa.date32())))
    # the overwritten day's partitions hold only the new rows; every other day is untouched
    assert ids(got) == sorted(ids(kept) + ids(second))


def test_a_failing_task_publishes_nothing(spark, ns):
    """Spark aborts the job when a task raises mid-write: abort() publishes nothing, the
    namespace reads exactly as before (fragments of the finished task stay unreferenced)."""
    from pyspark.sql import functions as F

    df = to_df(spark, events(1000, seed=3)).repartition(2)
    before = ns.manifest_version

    @F.udf("long")
    def boom(i):
        if i == 999:
            raise RuntimeError("task failed mid-write")
        return i

    with pytest.raises(Exception, match="task failed mid-write"):
        df.withColumn("id", boom("id")).write.format("lancepart").mode("append").save(ns.root)
    ns.refresh()
    assert ns.manifest_version == before
    assert ns.to_table().num_rows == 0


def test_options_are_checked_and_errors_are_typed(spark, tmp_path, ns):
    df = to_df(spark, events(10, seed=1))
    with pytest.raises(Exception, match=r"InvalidArgumentError: option 'max_retries' must be an integer >= 0, "
                                        r"got 'many'"):
        df.write.format("lancepart").mode("append").option("max_retries", "many").save(ns.root)
    with pytest.raises(Exception, match=r"InvalidArgumentError: option 'batch_id'"):
        df.write.format("lancepart").mode("append").option("batch_id", "").save(ns.root)
    # Spark itself refuses the modes a Python data source cannot implement (default "errorifexists")
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("lancepart").save(ns.root)
    missing = str(tmp_path / "missing")
    with pytest.raises(Exception, match="NamespaceNotFoundError"):
        df.write.format("lancepart").mode("append").save(missing)
    # with option spec, a missing namespace is created from the input's schema
    import json

    df.write.format("lancepart").mode("append").option("spec", json.dumps(EVENTS_SPEC)).save(missing)
    created = PartitionedNamespace.open(missing)
    assert created.current_spec.to_json() == ns.current_spec.to_json()
    assert created.to_table().num_rows == 10
    other = {**EVENTS_SPEC, "fields": EVENTS_SPEC["fields"][:1]}
    with pytest.raises(Exception, match="InvalidArgumentError: option 'spec' differs"):
        df.write.format("lancepart").mode("append").option("spec", json.dumps(other)).save(missing)
    assert ns.refresh().to_table().num_rows == 0


# --------------------------------------------------------------------------- reading
def test_filter_sql_is_exact_or_refused():
    """A filter is pushed only if DataFusion evaluates it exactly as Spark: floats (NaN, -0.0),
    zoned timestamps and nested columns stay with Spark; LIKE metacharacters are escaped."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNull, Not, StringContains, StringStartsWith

    schema = pa.schema([("s", pa.utf8()), ("f", pa.float64()), ("ts", pa.timestamp("us", "UTC")),
                        ("d", pa.date32()), ("i", pa.int64())])
    assert filter_sql(GreaterThan(("f",), 1.0), schema) is None
    assert filter_sql(EqualTo(("ts",), dt.datetime(2025, 1, 1, tzinfo=dt.UTC)), schema) is None
    assert filter_sql(EqualTo(("s", "x"), "a"), schema) is None
    assert filter_sql(EqualTo(("i",), "1"), schema) is None  # a literal of another type
    assert filter_sql(Not(In(("i",), (1, None))), schema) == '''NOT ("i" IN (1, NULL))'''
    assert filter_sql(IsNull(("d",)), schema) == '"d" IS NULL'
    values = ["a%b", "a_b", "axb", "a\\b", "it's", "a%", "%", None, "ab"]
    table = pa.table({"s": pa.array(values, pa.utf8())})
    for needle in ("a%", "a_", "a\\", "it'", "%"):
        for f, ok in ((StringStartsWith(("s",), needle), lambda v, n=needle: v.startswith(n)),
                      (StringContains(("s",), needle), lambda v, n=needle: n in v)):
            got = apply_filter(table, filter_sql(f, schema)).column("s").to_pylist()
            assert got == [v for v in values if v is not None and ok(v)], (f, got)


# Each group of _atoms (by position) is one query: together they use every atom once (pushed
# and residual filters, a NULL test, an OR), and each matches rows of the `filled` namespace;
# --stress adds RANDOM_CASES random conjunctions.
GROUPS = [(0, 4), (2, 6, 13), (1, 11), (3, 7, 14), (5, 12, 10), (8,), (9, 15)]
RANDOM_CASES = 10


def _atoms(F, data: pa.Table, rng: random.Random):
    """(Spark column, the same filter as SQL) pairs over the demo events columns."""
    day = rng.choice(sorted(set(data.column("event_date").to_pylist())))
    country = rng.choice(["US", "DE", "JP", "BR", "FR"])
    user = rng.randrange(0, 1_000_000)
    ts = dt.datetime.combine(day, dt.time(rng.randrange(24), 30))
    return [
        (F.col("event_date") == F.lit(day), f"event_date = DATE '{day}'"),
        (F.col("event_date") > F.lit(day), f"event_date > DATE '{day}'"),
        (F.col("event_date") <= F.lit(day), f"event_date <= DATE '{day}'"),
        (F.col("event_date").isin(day, day + dt.timedelta(days=2)),
         f"event_date IN (DATE '{day}', DATE '{day + dt.timedelta(days=2)}')"),
        (F.col("country") == country, f"country = '{country}'"),
        (F.col("country") != country, f"country <> '{country}'"),
        (F.col("country").isin(country, "DE"), f"country IN ('{country}', 'DE')"),
        (F.col("country").startswith(country[0]), f"country LIKE '{country[0]}%'"),
        (F.col("country").contains(country[1]), f"country LIKE '%{country[1]}%'"),
        (F.col("country").isNull(), "country IS NULL"),
        (F.col("country").isNotNull(), "country IS NOT NULL"),
        (F.col("user_id") < user, f"user_id < {user}"),
        (F.col("event_ts") >= F.lit(ts).cast("timestamp_ntz"), f"event_ts >= TIMESTAMP '{ts}'"),
        # residuals: Spark applies them after the scan
        (F.col("amount") > 50.0, "amount > 50.0"),
        (F.col("id") % 5 == 1, "id % 5 = 1"),
        ((F.col("country") == country) | (F.col("event_date") == F.lit(day)),
         f"(country = '{country}' OR event_date = DATE '{day}')"),
    ]


def test_dataframe_filters_equal_to_table_and_lps_read(spark, filled, stress):
    """Conjunctions of pushed and residual filters, every filter of _atoms in one of them (and
    random ones with --stress): format("lancepart") returns exactly the rows of ns.to_table(the
    same filter as SQL) (and of lps.read for some of them)."""
    from pyspark.sql import functions as F

    ns = PartitionedNamespace.open(filled)
    data = ns.to_table()
    rng = random.Random(13)
    df = spark.read.format("lancepart").load(filled)
    assert sorted(i for g in GROUPS for i in g) == list(range(len(_atoms(F, data, rng))))
    cases = [[atoms[i] for i in group] for group in GROUPS for atoms in [_atoms(F, data, rng)]]
    cases += [rng.sample(_atoms(F, data, rng), rng.randint(1, 3)) for _ in range(RANDOM_CASES if stress else 0)]
    for case, chosen in enumerate(cases):
        cond, sql = chosen[0][0], chosen[0][1]
        for c, s in chosen[1:]:
            cond, sql = cond & c, f"{sql} AND {s}"
        got = df.where(cond).select("id").collect()
        assert ids(got) == ids(ns.to_table(sql, columns=["id"])), sql
        assert got or case >= len(GROUPS), f"{sql} matches no row: the comparison proves nothing"
        if case < 2:
            assert ids(got) == ids(lps.read(spark, filled, sql, columns=["id"]).collect()), sql


def test_num_partitions_show_pruning_by_option_filter_not_by_where(spark, filled):
    """With a task size and an open cost above every table's size, one input partition per kept
    partition table. Option filter prunes (a day of the 7 keeps its 4 bucket tables); a WHERE does
    not: Spark 4 may reuse the read plan of a DataFrame for its other queries
    (tests/test_datasource_reuse.py), so the plan never depends on one query's filters and Spark
    keeps every Filter."""
    from pyspark.sql import functions as F

    ns = PartitionedNamespace.open(filled)
    day = ns.to_table().column("event_date")[0].as_py()
    by_day = f"event_date = DATE '{day}'"
    df = spark.read.format("lancepart").option("maxPartitionBytes", "1GB").option("openCostInBytes", "1GB").load(filled)
    assert df.rdd.getNumPartitions() == len(ns.partitions()) == 28
    one_day = df.where(F.col("event_date") == F.lit(day))
    assert one_day.rdd.getNumPartitions() == 28
    assert "Filter (" in one_day._jdf.queryExecution().executedPlan().toString()
    assert one_day.count() == ns.to_table(by_day).num_rows
    pruned = (spark.read.format("lancepart").option("filter", by_day).option("maxPartitionBytes", "1GB")
              .option("openCostInBytes", "1GB").load(filled))
    assert pruned.rdd.getNumPartitions() == len(ns.partitions(by_day)) == 4
    assert ids(pruned.collect()) == ids(ns.to_table(by_day))
    assert "Filter (" not in pruned._jdf.queryExecution().executedPlan().toString()


def test_version_option_reads_an_older_manifest_version(spark, tmp_path):
    """option("version", N) reads __manifest version N (spec "Transaction / Read Behavior")."""
    root = str(tmp_path / "ns")
    ns = create_events_ns(root)
    lps.write(to_df(spark, events(200, seed=1)), root)
    v1 = ns.refresh().manifest_version
    lps.write(to_df(spark, events(300, seed=2, start_id=1000)), root)
    assert spark.read.format("lancepart").load(root).count() == 500
    assert spark.read.format("lancepart").option("version", v1).load(root).count() == 200
    with pytest.raises(Exception, match=r"InvalidArgumentError: option 'version'=999: .*the latest __manifest "
                                        r"version of .* is \d+"):
        spark.read.format("lancepart").option("version", 999).load(root).count()


def test_a_given_schema_projects_the_read(spark, filled):
    """No column pruning in the API: a schema naming fewer columns reads only those; a column the
    namespace lacks is a SchemaMismatchError naming it."""
    from pyspark.sql import functions as F

    ns = PartitionedNamespace.open(filled)
    df = spark.read.format("lancepart").schema("id long, amount double").load(filled)
    assert df.columns == ["id", "amount"]
    row = df.where(F.col("id") < 500).agg(F.count("*").alias("n"), F.sum("amount").alias("s")).collect()[0]
    expected = ns.to_table("id < 500", columns=["amount"]).column("amount")
    assert row["n"] == len(expected) and row["s"] == pytest.approx(pa.compute.sum(expected).as_py())
    with pytest.raises(Exception, match=r"SchemaMismatchError: column\(s\) \['nope'\]"):
        spark.read.format("lancepart").schema("id long, nope string").load(filled).count()


# --------------------------------------------------------------------------- streaming
def test_streaming_replayed_micro_batch_is_skipped(spark, tmp_path):
    """Exactly once: a micro-batch published but not yet in the checkpoint's commit log (delete
    <checkpoint>/commits/<n>) is replayed by Spark on restart and skipped by the publish, because
    its batch id is spark-streaming:<query id>:<n> and the query id survives restarts."""
    from pyspark.sql import functions as F

    root, inp, ck = str(tmp_path / "ns"), str(tmp_path / "in"), str(tmp_path / "ck")
    ns = create_events_ns(root)
    os.makedirs(inp)
    pq.write_table(events(100, seed=1), os.path.join(inp, "a.parquet"))
    schema = spark.read.parquet(inp).schema

    def run() -> str:
        src = spark.readStream.schema(schema).parquet(inp)
        src = src.withColumn("event_ts", F.col("event_ts").cast("timestamp_ntz"))
        q = src.writeStream.format("lancepart").option("checkpointLocation", ck).trigger(availableNow=True).start(root)
        q.awaitTermination()
        assert q.exception() is None
        return q.id

    qid = run()
    pq.write_table(events(50, seed=2, start_id=1000), os.path.join(inp, "b.parquet"))
    assert run() == qid
    published = ns.refresh().manifest_version
    first = lps.last_result(root)
    os.remove(os.path.join(ck, "commits", "1"))  # killed after the publish, before Spark's commit
    os.remove(os.path.join(ck, "commits", ".1.crc"))
    assert run() == qid  # the same query id after a restart from the checkpoint
    table = ns.refresh().to_table()
    assert table.num_rows == 150 and len(set(table.column("id").to_pylist())) == 150
    assert ns.manifest_version == published
    replay = lps.last_result(root)
    assert (first.batch_id, first.skipped) == (f"spark-streaming:{qid}:1", False)
    assert (replay.batch_id, replay.skipped) == (f"spark-streaming:{qid}:1", True)


# --------------------------------------------------------------------------- SQL
def test_sql_temporary_view_select_insert_and_create_table_limits(spark, tmp_path):
    """SQL over the data source (docs/datasource.md "SQL"): CREATE TEMPORARY VIEW ... USING
    lancepart OPTIONS (path ...) supports SELECT, INSERT INTO and INSERT OVERWRITE (dynamic
    partition overwrite). What Spark 4 does not support for Python data sources is pinned here:
    a catalog table (CREATE TABLE ... USING lancepart) is created but Spark passes no options to
    its reader, and a path query (lancepart.`/path`) is refused."""
    root = str(tmp_path / "ns")
    create_events_ns(root)
    lps.write(to_df(spark, events(100, seed=1)), root)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW lp_view USING lancepart OPTIONS (path '{root}')")
    assert spark.sql("SELECT count(*) AS n FROM lp_view WHERE country IS NULL").collect()[0]["n"] == 8
    spark.sql("INSERT INTO lp_view SELECT id + 1000, event_date, event_ts, country, user_id, amount FROM lp_view "
              "WHERE id < 10")
    ns = PartitionedNamespace.open(root)
    assert ns.to_table().num_rows == 110
    day = ns.to_table().column("event_date")[0].as_py()
    before = ns.to_table()
    # the view reads the version of its creation (docs/datasource.md "One read plan per
    # DataFrame"), not its own INSERT: it is created again before it is read from to overwrite
    assert spark.sql("SELECT count(*) AS n FROM lp_view").collect()[0]["n"] == 100
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW lp_view USING lancepart OPTIONS (path '{root}')")
    assert spark.sql("SELECT count(*) AS n FROM lp_view").collect()[0]["n"] == 110
    # the day's partitions are replaced by their own rows: an append would double them
    spark.sql(f"INSERT OVERWRITE lp_view SELECT * FROM lp_view WHERE event_date = DATE '{day}'")
    after = ns.refresh().to_table()
    assert ids(after) == ids(before)
    spark.catalog.dropTempView("lp_view")

    spark.sql("DROP TABLE IF EXISTS lp_events")
    try:  # a catalog table would get no options (not even its path) from Spark 4.3: refused when created
        with pytest.raises(Exception, match=r"InvalidArgumentError: CREATE TABLE \.\.\. USING lancepart is not "
                                            r"supported.*Use a temporary view"):
            spark.sql(f"CREATE TABLE lp_events USING lancepart OPTIONS (path '{root}')")
        assert not spark.catalog.tableExists("lp_events")
    finally:
        spark.sql("DROP TABLE IF EXISTS lp_events")
    with pytest.raises(Exception, match="UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY"):
        spark.sql(f"SELECT count(*) FROM lancepart.`{root}`").collect()
    assert ns.refresh().to_table().num_rows == after.num_rows  # DROP TABLE leaves the data


# --------------------------------------------------------------------------- pruning from pushFilters
@pytest.mark.parametrize("per_scan", [False, True])
def test_push_filters_prune_only_on_a_spark_that_keeps_plans_per_scan(monkeypatch, filled, per_scan):
    """Spark 4.3 keeps one read plan per relation, so the reader never prunes by a query's
    filters there (tests/test_datasource_reuse.py); a Spark that keeps the plan per scan
    (detected by DataSourceReader.pushLimit) gets a plan pruned by the filters filter_sql can say
    exactly. The capability is faked here in-process: the reader's own pushFilters, partitions
    and read, both ways, give exactly ns.to_table's rows (Spark applies every filter again)."""
    import json

    from pyspark.sql.datasource import EqualTo, GreaterThan

    from lancepart.spark import datasource
    from lancepart.spark.read import spark_schema

    monkeypatch.setattr(datasource, "keeps_plan_per_scan", lambda: per_scan)
    ns = PartitionedNamespace.open(filled)
    day = ns.to_table().column("event_date")[0].as_py()
    reader = datasource.LancepartReader({"path": filled}, spark_schema(ns.schema), ns.manifest_version)
    pushed = [EqualTo(("event_date",), day), GreaterThan(("amount",), 10.0)]
    assert list(reader.pushFilters(pushed)) == pushed  # Spark keeps applying them
    parts = reader.partitions()
    tables = {t["object_id"] for p in parts for t in json.loads(p.value)["tasks"]}
    by_day = f"event_date = DATE '{day}'"
    assert tables == ({p.object_id for p in ns.partitions(by_day)} if per_scan else
                      {p.object_id for p in ns.partitions()})
    import pyarrow as pa

    got = pa.Table.from_batches([b for p in parts for b in reader.read(p)])
    want = ns.to_table(by_day) if per_scan else ns.to_table()
    assert ids(got) == ids(want)
