"""Executor-side partition planning: distinct partition tuples of a DataFrame, computed with
the vectorised transforms inside ``mapInArrow`` (Arrow end to end, no rows on the driver)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from lancepart.spec import PartitionSpec


def partition_value_schema(spec: PartitionSpec) -> pa.Schema:
    return pa.schema([pa.field(f.column_name, f.result_type) for f in spec.fields])


def distinct_partitions(df, spec: PartitionSpec, schema: pa.Schema) -> pa.Table:
    """Distinct partition value tuples of ``df`` under ``spec``: one row per partition,
    columns ``partition_field_<field_id>``. Only the distinct tuples reach the driver."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from lancepart import transforms

    out_schema = partition_value_schema(spec)
    spec_json, schema_bytes = spec.to_json_string(), schema.serialize().to_pybytes()

    def compute(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        local_spec = PartitionSpec.from_json(spec_json)
        local_schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        for batch in batches:
            cols = [transforms.apply(f, batch, local_schema) for f in local_spec.fields]
            table = pa.Table.from_arrays(cols, schema=out_schema)
            # partial distinct per batch keeps the shuffle small
            yield from table.group_by(out_schema.names, use_threads=False).aggregate([]).to_batches()

    values = df.mapInArrow(compute, from_arrow_schema(out_schema)).distinct()
    return pa.Table.from_batches(values._collect_as_arrow(), schema=out_schema) if values.take(1) else \
        out_schema.empty_table()
