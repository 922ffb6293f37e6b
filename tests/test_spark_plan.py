"""Executor-side partition planning on real Spark local[2] (spec "Partition Transform";
the values must equal the in-process transforms, computed independently)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart import PartitionSpec
from lancepart.sample import demo_events
from lancepart.spark.plan import distinct_partitions
from lancepart.spec import assign_field_ids

pytestmark = pytest.mark.spark


def test_distinct_partitions_match_local_computation(spark):
    data = demo_events(20_000, seed=7)
    schema = assign_field_ids(data.schema)
    spec = PartitionSpec.from_json({"id": 1, "fields": [
        {"field_id": "event_date", "source_ids": [1], "transform": {"type": "identity"},
         "result_type": {"type": "date32"}},
        {"field_id": "user_bucket", "source_ids": [4], "transform": {"type": "bucket", "num_buckets": 4},
         "result_type": {"type": "int32"}},
    ]})
    df = spark.createDataFrame(data.to_pandas()).repartition(3)
    got = distinct_partitions(df, spec, schema)
    assert got.schema.names == ["partition_field_event_date", "partition_field_user_bucket"]
    # independent computation: mmh3 per distinct user id, days straight from the column
    import mmh3
    import numpy as np

    users = data.column("user_id").to_numpy()
    uniq, inverse = np.unique(users, return_inverse=True)
    buckets = np.array([abs(mmh3.hash(int(u).to_bytes(8, "little", signed=True), 0, signed=True)) % 4
                        for u in uniq])[inverse]
    expected = set(zip(data.column("event_date").to_pylist(), buckets.tolist(), strict=False))
    assert set(zip(*(got.column(i).to_pylist() for i in range(2)), strict=False)) == expected
    assert got.num_rows == len(expected) == 7 * 4


def test_distinct_partitions_of_empty_input(spark):
    data = demo_events(10).slice(0, 0)
    schema = assign_field_ids(data.schema)
    spec = PartitionSpec.from_json({"id": 1, "fields": [
        {"field_id": "country", "source_ids": [3], "transform": {"type": "identity"},
         "result_type": {"type": "utf8"}}]})
    df = spark.createDataFrame([], schema="id long, event_date date, event_ts timestamp_ntz, country string, "
                                          "user_id long, amount double")
    got = distinct_partitions(df, spec, schema)
    assert got.num_rows == 0 and pc.count(got.column(0)).as_py() == 0
    assert got.schema.field(0).type == pa.utf8()
