"""Packing a scan into Spark input partitions as Spark packs the files of its file sources
(``FilePartition``; docs/datasource.md "How a scan is split into tasks"): small partition tables
share a task, a big table is read by several, every row is read exactly once, and the options
that size the tasks carry Spark's own names."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace, PartitionSpec
from lancepart import spark as lps
from lancepart.errors import InvalidArgumentError
from lancepart.spark.packing import MB, Packing, Split, byte_size, max_split_bytes, pack, packing
from tests.test_hostile_input import identity_spec
from tests.test_spark_read import session_conf

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()), ("v", pa.float64())])


def rows(n: int, keys: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "k": pa.array(ids % keys, pa.int32()), "v": ids * 0.5}, schema=SCHEMA)


def k_namespace(root: str) -> PartitionedNamespace:
    spec = identity_spec(("k", 1, {"type": "identity"}, {"type": "int32"}))
    return PartitionedNamespace.create(root, SCHEMA, PartitionSpec.from_json(spec))


@pytest.fixture(scope="module")
def forty(tmp_path_factory):
    """40 small partition tables (identity on k), 100 rows each."""
    ns = k_namespace(str(tmp_path_factory.mktemp("pack") / "forty"))
    ns.write(rows(4000, 40))
    return ns


def ids(rows_) -> list[int]:
    return sorted(r["id"] for r in rows_)


# --------------------------------------------------------------------------- Spark's arithmetic
def test_split_size_is_sparks():
    """maxSplitBytes = min(maxPartitionBytes, max(openCostInBytes, total / minPartitions)), total
    counting every split's bytes plus the open cost (Spark's FilePartition.maxSplitBytes)."""
    assert max_split_bytes([MB] * 4, Packing(min_partitions=1)) == 20 * MB
    assert max_split_bytes([MB] * 4, Packing(min_partitions=4)) == 5 * MB
    assert max_split_bytes([MB] * 4, Packing(min_partitions=100)) == 4 * MB  # never below the open cost
    assert max_split_bytes([1000 * MB], Packing()) == 128 * MB


def test_pack_fills_biggest_first_and_counts_the_open_cost():
    """Splits sorted by size, biggest first; a task closes when the next split would take it past
    the split size; each split adds its bytes plus the open cost."""
    splits = [Split({"t": n}, n * MB) for n in (1, 50, 2, 60, 30)]
    tasks = pack(splits, max_partition_bytes=100 * MB, open_cost=4 * MB)
    assert [[t["t"] for t in task] for task in tasks] == [[60], [50, 30, 2, 1]]
    # every split in exactly one task
    many = [Split({"t": i}, (i % 7) * MB) for i in range(500)]
    packed = pack(many, max_partition_bytes=64 * MB, open_cost=4 * MB, min_partitions=2)
    assert sorted(t["t"] for task in packed for t in task) == list(range(500))
    assert 20 < len(packed) < 60


def test_sizes_take_sparks_spellings_and_refuse_the_rest():
    assert byte_size("maxPartitionBytes", "128MB") == byte_size("maxPartitionBytes", "134217728b") == 128 * MB
    assert byte_size("openCostInBytes", "4m") == byte_size("openCostInBytes", 4 * MB) == 4 * MB
    for bad in ("lots", "-1", "0", "1.5GB", "12XB"):
        with pytest.raises(InvalidArgumentError, match=r"option 'maxPartitionBytes' must be a"):
            packing({"maxpartitionbytes": bad})
    for bad in ("0", "two", "-3"):
        with pytest.raises(InvalidArgumentError, match=r"option 'minPartitions' must be an integer >= 1"):
            packing({"minpartitions": bad})
    # an option wins over the session's setting, which wins over Spark's default
    assert packing({"opencostinbytes": "1MB"}, {"opencostinbytes": "8MB"}).open_cost == MB
    assert packing({}, {"opencostinbytes": "8MB"}).open_cost == 8 * MB
    assert packing({}).open_cost == 4 * MB


# --------------------------------------------------------------------------- the data source and lps.read
@pytest.fixture(autouse=True)
def registered(spark):
    lps.register(spark)


def test_small_tables_share_tasks_and_every_row_is_read_once(spark, forty):
    """40 tables of 100 rows: tens of tables per task, not one task each (local[2]: at least 2
    tasks, the session's default parallelism); option minPartitions asks for more."""
    want = ids(forty.to_table().to_pylist())
    # (the tables' sizes differ by a few bytes: a task may close one table early)
    df = spark.read.format("lancepart").load(forty.root)
    assert 2 <= df.rdd.getNumPartitions() <= 3
    assert ids(df.select("id").collect()) == want
    more = spark.read.format("lancepart").option("minPartitions", "8").load(forty.root)
    assert 8 <= more.rdd.getNumPartitions() <= 10
    assert ids(more.select("id").collect()) == want
    one_each = spark.read.format("lancepart").option("maxPartitionBytes", "1").load(forty.root)
    assert one_each.rdd.getNumPartitions() == 40
    assert ids(lps.read(spark, forty.root, columns=["id"]).collect()) == want
    assert 2 <= lps.read(spark, forty.root).rdd.getNumPartitions() <= 3


def test_a_big_table_is_read_by_several_tasks_of_whole_fragments(spark, tmp_path):
    """One partition table of 4 fragments (4 appends) bigger than the split size: one task per
    run of fragments that fits, every row once."""
    ns = k_namespace(str(tmp_path / "big"))
    for i in range(4):
        ns.write(rows(5000, 1, start=i * 5000))
    assert len(ns.partitions()) == 1
    [p] = ns.partitions()
    import lance

    ds = lance.dataset(f"{ns.root}/{p.location}", version=p.read_version)
    sizes = [sum(f.file_size_bytes for f in fr.metadata.files) for fr in ds.get_fragments()]
    assert len(sizes) == 4
    # a split size that holds two fragments: two tasks
    two = str(2 * max(sizes) + 1)
    df = (spark.read.format("lancepart").option("maxPartitionBytes", two).option("openCostInBytes", "1")
          .option("minPartitions", "1").load(ns.root))
    assert df.rdd.getNumPartitions() == 2
    assert ids(df.select("id").collect()) == list(range(20_000))
    with session_conf(spark, spark_sql_files_maxPartitionBytes=two, spark_sql_files_openCostInBytes="1",
                      spark_sql_files_minPartitionNum="1"):
        got = lps.read(spark, ns.root, "k = 0", columns=["id"])
        assert got.rdd.getNumPartitions() == 2
        assert ids(got.collect()) == list(range(20_000))


def test_bad_packing_options_are_refused_by_name(spark, forty):
    with pytest.raises(Exception, match=r"InvalidArgumentError: option 'maxPartitionBytes' must be a size"):
        spark.read.format("lancepart").option("maxPartitionBytes", "lots").load(forty.root).count()
    with pytest.raises(Exception, match=r"InvalidArgumentError: option 'minPartitions' must be an integer >= 1"):
        spark.read.format("lancepart").option("minPartitions", "0").load(forty.root).count()


def test_the_session_settings_size_the_tasks(spark, forty):
    """lps.read takes spark.sql.files.minPartitionNum / maxPartitionBytes of the session, as
    Spark's file sources do."""
    with session_conf(spark, spark_sql_files_minPartitionNum="5"):
        assert 5 <= lps.read(spark, forty.root).rdd.getNumPartitions() <= 6
