"""Options of the ``lancepart`` data source a Delta or Iceberg user reaches for (docs/datasource.md
"Options"): each is honoured or refused with a typed error naming it; no option is silently
ignored, and a storage option has a recognisable form. Spec "Transaction / Read Behavior" for the
time-travel reads (a ``__manifest`` version pins every table's ``read_version``)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from lancepart.errors import InvalidArgumentError
from lancepart.spark.options import check_options, storage_options
from tests.conftest import create_events_ns
from tests.test_datasource import events, ids
from tests.test_spark_write import to_df

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def registered(spark):
    lps.register(spark)


@pytest.fixture(scope="module")
def two_writes(tmp_path_factory, spark):
    """A namespace with two appends (ids 0..299, then 1000..1199); the versions and a timestamp
    between the two commits."""
    root = str(tmp_path_factory.mktemp("opts") / "events")
    create_events_ns(root)
    lps.write(to_df(spark, events(300, seed=1)), root)
    first = PartitionedNamespace.open(root)
    time.sleep(0.05)
    lps.write(to_df(spark, events(200, seed=2, start_id=1000)), root)
    entry = next(h for h in PartitionedNamespace.open(root).history() if h.version == first.manifest_version)
    return root, first.manifest_version, entry.timestamp


# --------------------------------------------------------------------------- unknown options
def test_a_typo_is_refused_naming_the_option_and_the_known_ones(spark, two_writes):
    """``versionAsOff`` used to be a storage option, so the read gave the latest snapshot."""
    root, _, _ = two_writes
    with pytest.raises(Exception, match=r"(?i)InvalidArgumentError: unknown option 'versionAsOff'.*did you mean "
                                        r"'versionasof'.*storage\.<key>"):
        spark.read.format("lancepart").option("versionAsOff", "1").load(root).count()
    with pytest.raises(InvalidArgumentError, match=r"unknown option 'flush_row'.*did you mean 'flush_rows'"):
        check_options({"path": root, "flush_row": "10"})


def test_storage_options_have_a_recognisable_form():
    """Object-store keys (aws_*, azure_*, google_*, region, endpoint, ...) and ``storage.<key>``
    are storage options; ``storage.`` is stripped before Lance sees the key."""
    opts = {"path": "/r", "aws_region": "eu-west-1", "allow_http": "true", "storage.some_new_key": "x",
            "filter": "k = 1", "maxPartitionBytes": "1MB"}
    check_options(opts)
    assert storage_options(opts) == {"aws_region": "eu-west-1", "allow_http": "true", "some_new_key": "x"}
    assert storage_options({"path": "/r", "version": "3"}) is None


@pytest.mark.parametrize("name, value, says", [
    ("maxFilesPerTrigger", "10", "no rate limit"),
    ("startingTimestamp", "2025-12-10", "startingVersion"),
    ("overwriteSchema", "true", "update_schema"),
    ("txnAppId", "job", "batch_id"),
])
def test_delta_options_without_an_equivalent_are_refused_with_what_to_use(name, value, says):
    with pytest.raises(InvalidArgumentError, match=rf"option '{name}' is not supported.*{says}"):
        check_options({"path": "/r", name: value})


def test_streaming_rate_limits_are_refused_not_ignored(spark, two_writes):
    root, _, _ = two_writes
    with pytest.raises(Exception, match=r"(?i)option 'maxFilesPerTrigger' is not supported.*no rate limit"):
        spark.readStream.format("lancepart").option("maxFilesPerTrigger", "1").load(root)


# --------------------------------------------------------------------------- time travel by Delta's names
def test_version_as_of_and_timestamp_as_of_read_the_older_version(spark, two_writes):
    """Delta's ``versionAsOf`` is option ``version``; ``timestampAsOf`` reads the latest
    ``__manifest`` version committed at or before the instant (UTC unless it names a zone)."""
    root, first, at = two_writes
    want = ids(PartitionedNamespace.open(root, version=first).to_table())
    assert len(want) == 300
    by_version = spark.read.format("lancepart").option("versionAsOf", str(first)).load(root)
    assert ids(by_version.select("id").collect()) == want
    iso = at.astimezone(tz=None).isoformat()  # with its zone
    by_time = spark.read.format("lancepart").option("timestampAsOf", iso).load(root)
    assert ids(by_time.select("id").collect()) == want
    naive_utc = at.replace(tzinfo=None).isoformat(sep=" ")
    assert spark.read.format("lancepart").option("timestampAsOf", naive_utc).load(root).count() == 300
    assert spark.read.format("lancepart").load(root).count() == 500
    with pytest.raises(Exception, match=r"options \['version', 'versionAsOf'\] each name a version"):
        spark.read.format("lancepart").option("version", "1").option("versionAsOf", "2").load(root).count()
    with pytest.raises(Exception, match=r"option 'timestampAsOf' must be an ISO date or timestamp"):
        spark.read.format("lancepart").option("timestampAsOf", "yesterday").load(root).count()


# --------------------------------------------------------------------------- overwrite modes
def test_partition_overwrite_mode_static_replaces_the_namespace_dynamic_the_touched_partitions(spark, tmp_path):
    """``dynamic`` (the default) replaces the partitions the input has rows for; ``static``
    replaces every row of the namespace, in one __manifest commit."""
    root = str(tmp_path / "ns")
    create_events_ns(root)
    lps.write(to_df(spark, events(400, seed=3)), root)
    ns = PartitionedNamespace.open(root)
    day = ns.to_table().column("event_date")[0].as_py()
    one_day = events(400, seed=3, start_id=5000)
    one_day = one_day.filter(pa.compute.equal(one_day.column("event_date"), pa.scalar(day)))
    before_other_days = ids(ns.to_table(f"event_date <> DATE '{day}'"))
    to_df(spark, one_day).write.format("lancepart").mode("overwrite").save(root)
    assert ids(ns.refresh().to_table()) == sorted(before_other_days + ids(one_day))
    v = ns.manifest_version
    (to_df(spark, one_day).write.format("lancepart").mode("overwrite").option("partitionOverwriteMode", "static")
     .save(root))
    assert ids(ns.refresh().to_table()) == ids(one_day)
    assert ns.manifest_version == v + 1
    with pytest.raises(Exception, match=r"option 'partitionOverwriteMode' must be 'static' or 'dynamic'"):
        to_df(spark, one_day).write.format("lancepart").mode("overwrite").option("partitionOverwriteMode",
                                                                                 "all").save(root)


# --------------------------------------------------------------------------- mergeSchema
def test_merge_schema_adds_and_widens_columns_before_writing(spark, tmp_path):
    root = str(tmp_path / "ns")
    create_events_ns(root)
    ns = PartitionedNamespace.open(root)
    data = events(100, seed=4)
    extra = data.append_column("channel", pa.array(["web"] * data.num_rows))
    with pytest.raises(Exception, match=r"SchemaMismatchError: input column\(s\) \['channel'\]"):
        to_df(spark, extra).write.format("lancepart").mode("append").save(root)
    to_df(spark, extra).write.format("lancepart").mode("append").option("mergeSchema", "true").save(root)
    got = ns.refresh().to_table()
    assert ns.schema.field("channel").nullable and got.num_rows == 100
    assert set(got.column("channel").to_pylist()) == {"web"}
    with pytest.raises(Exception, match=r"option 'mergeSchema' must be 'true' or 'false'"):
        to_df(spark, extra).write.format("lancepart").mode("append").option("mergeSchema", "yes").save(root)


def test_write_threads_is_an_option_of_the_data_source_as_of_lps_write(spark, tmp_path):
    root = str(tmp_path / "ns")
    create_events_ns(root)
    data = events(300, seed=6)
    to_df(spark, data).write.format("lancepart").mode("append").option("write_threads", "1").save(root)
    assert ids(PartitionedNamespace.open(root).to_table()) == ids(data)
    with pytest.raises(Exception, match=r"option 'write_threads' must be an integer >= 1, got '0'"):
        to_df(spark, data).write.format("lancepart").mode("append").option("write_threads", "0").save(root)
