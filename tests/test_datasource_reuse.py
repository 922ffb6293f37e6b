"""A ``format("lancepart")`` DataFrame or temporary view used for several queries (issue 21):
every query must read what ``ns.to_table`` reads for its own filter, whatever queries ran on the
same DataFrame before it (docs/datasource.md "One read plan per DataFrame").

Spark 4 plans the read of a Python data source once per relation and reuses that plan (the
pickled reader and its input partitions) for later queries of the same DataFrame that push no
filter of their own, and for every scan of it within one query. The sequences below are the ones
that read another query's filter before."""

from __future__ import annotations

import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from tests.conftest import create_events_ns
from tests.test_datasource import events, ids
from tests.test_spark_write import to_df

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def registered(spark):
    lps.register(spark)


@pytest.fixture(scope="module")
def filled(tmp_path_factory, spark):
    """1 500 events (28 partition tables: 7 days x 4 user buckets)."""
    root = str(tmp_path_factory.mktemp("reuse") / "events")
    create_events_ns(root)
    lps.write(to_df(spark, events(1500, seed=21)), root)
    return root


@pytest.fixture(scope="module")
def oracle(filled):
    """``filter -> sorted ids`` of ``ns.to_table(filter)``, and two filters on different columns."""
    ns = PartitionedNamespace.open(filled)
    data = ns.to_table()
    country = sorted({c for c in data.column("country").to_pylist() if c is not None})[0]
    day = data.column("event_date")[0].as_py()

    def rows(sql: str | None = None) -> list[int]:
        return ids(ns.to_table(sql, columns=["id"]))

    return rows, f"country = '{country}'", f"event_date = DATE '{day}'"


def load(spark, root: str):
    return spark.read.format("lancepart").load(root)


def test_count_after_a_filtered_count_counts_everything(spark, filled, oracle):
    """The issue's sequence: count, filtered count, count, collect."""
    rows, by_country, _ = oracle
    everything = rows()
    df = load(spark, filled)
    assert df.count() == len(everything)
    assert df.where(by_country).count() == len(rows(by_country)) < len(everything)
    assert df.count() == len(everything)
    assert ids(df.collect()) == everything
    assert load(spark, filled).count() == len(everything)


def test_collect_after_a_filter_collects_everything(spark, filled, oracle):
    """The first query of the DataFrame is the filtered one (nothing was planned before it)."""
    rows, by_country, _ = oracle
    df = load(spark, filled)
    assert ids(df.where(by_country).collect()) == rows(by_country)
    assert ids(df.collect()) == rows()
    assert ids(df.select("id").collect()) == rows()


def test_filters_in_a_row_each_read_their_own_rows(spark, filled, oracle):
    """Two pushable filters in a row, then filters Spark cannot hand to a Python data source (an
    expression, an OR), then no filter: each result is ns.to_table of its own filter."""
    rows, by_country, by_day = oracle
    df = load(spark, filled)
    for sql in (by_country, by_day, f"{by_country} AND {by_day}", "id % 5 = 1", f"({by_country} OR {by_day})",
                None, by_day):
        got = (df if sql is None else df.where(sql)).select("id").collect()
        assert ids(got) == rows(sql), sql


def test_two_filters_of_one_query_each_read_their_own_rows(spark, filled, oracle):
    """A union and a self-join of two filtered views of one DataFrame: two scans of one relation."""
    rows, by_country, by_day = oracle
    df = load(spark, filled)
    union = df.where(by_country).union(df.where(by_day)).select("id").collect()
    assert ids(union) == sorted(rows(by_country) + rows(by_day))
    both = set(rows(by_country)) & set(rows(by_day))
    joined = df.where(by_country).alias("a").join(df.where(by_day).alias("b"), "id").select("id").collect()
    assert ids(joined) == sorted(both)


def test_cache_after_a_filtered_query_caches_everything(spark, filled, oracle):
    rows, by_country, by_day = oracle
    df = load(spark, filled)
    assert df.where(by_country).count() == len(rows(by_country))
    df.cache()
    try:
        assert df.count() == len(rows())
        assert ids(df.where(by_day).select("id").collect()) == rows(by_day)
        assert ids(df.where(by_country).select("id").collect()) == rows(by_country)
        assert ids(df.collect()) == rows()
    finally:
        df.unpersist()


@pytest.mark.parametrize("kind", ["checkpoint", "localCheckpoint"])
def test_checkpoint_after_a_filtered_query_holds_everything(spark, filled, oracle, tmp_path, kind):
    rows, by_country, by_day = oracle
    df = load(spark, filled)
    assert df.where(by_day).count() == len(rows(by_day))
    if kind == "checkpoint":
        spark.sparkContext.setCheckpointDir(str(tmp_path / "checkpoints"))
        saved = df.checkpoint()
    else:
        saved = df.localCheckpoint()
    assert saved.count() == len(rows())
    assert ids(saved.where(by_country).select("id").collect()) == rows(by_country)
    assert ids(df.where(by_country).select("id").collect()) == rows(by_country)


def test_sql_view_count_after_a_filtered_select_counts_everything(spark, filled, oracle):
    """The SQL example of docs/guide.md: a filtered SELECT, then SELECT count(*), on one temporary view."""
    rows, by_country, by_day = oracle
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW lp_reuse USING lancepart OPTIONS (path '{filled}')")
    try:
        assert spark.sql(f"SELECT count(*) AS n FROM lp_reuse WHERE {by_country}").first()["n"] == len(
            rows(by_country))
        assert spark.sql("SELECT count(*) AS n FROM lp_reuse").first()["n"] == len(rows())
        assert ids(spark.sql(f"SELECT id FROM lp_reuse WHERE {by_day}").collect()) == rows(by_day)
        assert ids(spark.sql("SELECT id FROM lp_reuse").collect()) == rows()
    finally:
        spark.catalog.dropTempView("lp_reuse")


def test_a_dataframe_reads_the_snapshot_of_its_load(spark, tmp_path):
    """Every query of a DataFrame (and of a temporary view) reads the __manifest version that was
    the latest when it was loaded, filtered or not, before or after a write; load() again (or
    CREATE OR REPLACE the view) to read newer writes."""
    root = str(tmp_path / "ns")
    create_events_ns(root)
    lps.write(to_df(spark, events(300, seed=1)), root)
    at_load = PartitionedNamespace.open(root)
    day = at_load.to_table().column("event_date")[0].as_py()
    by_day = f"event_date = DATE '{day}'"
    df = load(spark, root)
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW lp_snapshot USING lancepart OPTIONS (path '{root}')")
    try:
        assert df.where(by_day).count() == at_load.to_table(by_day).num_rows
        lps.write(to_df(spark, events(200, seed=2, start_id=10_000)), root)
        latest = PartitionedNamespace.open(root)
        assert latest.to_table().num_rows == 500
        for frame in (df, spark.table("lp_snapshot")):
            assert frame.count() == 300
            assert ids(frame.where(by_day).collect()) == ids(at_load.to_table(by_day))
            assert ids(frame.collect()) == ids(at_load.to_table())
        assert load(spark, root).count() == 500
        assert ids(load(spark, root).where(by_day).collect()) == ids(latest.to_table(by_day))
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW lp_snapshot USING lancepart OPTIONS (path '{root}')")
        assert spark.sql("SELECT count(*) AS n FROM lp_snapshot").first()["n"] == 500
    finally:
        spark.catalog.dropTempView("lp_snapshot")


def test_a_dataframe_whose_version_cleanup_removed_says_so(spark, tmp_path):
    """A DataFrame used after a cleanup removed the __manifest version of its load fails and
    says to load it again; it never reads another version."""
    import datetime as dt

    root = str(tmp_path / "ns")
    create_events_ns(root)
    lps.write(to_df(spark, events(50, seed=1)), root)
    df = load(spark, root)
    lps.write(to_df(spark, events(50, seed=2, start_id=1000)), root)
    PartitionedNamespace.open(root).cleanup(dt.timedelta(0), allow_short_retention=True)
    with pytest.raises(Exception, match=r"SnapshotExpiredError: __manifest version \d+, the latest one when this "
                                        r"DataFrame or view was loaded, is gone; load it again"):
        df.count()
    assert load(spark, root).count() == 100


def test_option_filter_prunes_and_every_query_keeps_it(spark, filled, oracle):
    """option("filter", sql) prunes partition tables through __manifest once for the DataFrame:
    one input partition per kept table (with a task size and an open cost above every table's
    size), and every query of it (count, WHERE, collect, SQL on a view with the option) reads only matching rows."""
    rows, by_country, by_day = oracle
    ns = PartitionedNamespace.open(filled)
    kept = len(ns.partitions(by_day))
    assert 0 < kept < len(ns.partitions())
    df = (spark.read.format("lancepart").option("filter", by_day).option("maxPartitionBytes", "1GB")
          .option("openCostInBytes", "1GB").load(filled))
    assert df.rdd.getNumPartitions() == kept
    assert df.count() == len(rows(by_day))
    assert ids(df.where(by_country).collect()) == rows(f"{by_day} AND {by_country}")
    assert df.where(by_country).rdd.getNumPartitions() == kept
    assert ids(df.collect()) == rows(by_day)
    spark.sql(f"""CREATE OR REPLACE TEMPORARY VIEW lp_day USING lancepart
                  OPTIONS (path '{filled}', filter "{by_day}")""")
    try:
        assert spark.sql("SELECT count(*) AS n FROM lp_day").first()["n"] == len(rows(by_day))
        assert ids(spark.sql(f"SELECT id FROM lp_day WHERE {by_country}").collect()) == rows(
            f"{by_day} AND {by_country}")
    finally:
        spark.catalog.dropTempView("lp_day")
    with pytest.raises(Exception, match=r"InvalidArgumentError: option 'filter': filter 'nope = 1': unknown column"):
        spark.read.format("lancepart").option("filter", "nope = 1").load(filled).count()
