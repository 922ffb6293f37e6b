"""Demo data generated on the executors (nothing shipped from the driver)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from lancepart.util.sample import demo_events


def generated_events(spark, rows: int, seed: int = 42, slices: int | None = None):
    """A DataFrame of :func:`lancepart.util.sample.demo_events` rows, ``rows`` in all, made per
    Spark partition from its id range (deterministic for a given ``slices``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    slices = slices or max(2, spark.sparkContext.defaultParallelism)
    schema = demo_events(1).schema
    bounds = spark.range(0, slices, numPartitions=slices)
    per = -(-rows // slices)

    def make(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for s in batch.column(0).to_pylist():  # one slice id per row here, not data rows
                start = s * per
                n = max(0, min(per, rows - start))
                if n:
                    yield from demo_events(n, seed=seed, start_id=start).to_batches()

    return bounds.mapInArrow(make, from_arrow_schema(schema))
