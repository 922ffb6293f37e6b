"""Executor-side partition planning: the distinct partition tuples of a DataFrame, computed
with the vectorised transforms inside ``mapInArrow`` (Arrow end to end, no rows on the driver).

Only the source columns of the spec travel to Python; each task emits its own distinct
tuples once, at its end (no shuffle), and the driver merges those few rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from lancepart.spec import PartitionSpec, field_id_of


def partition_value_schema(spec: PartitionSpec) -> pa.Schema:
    return pa.schema([pa.field(f.column_name, f.result_type) for f in spec.fields])


def _distinct(table: pa.Table) -> pa.Table:
    return table.group_by(table.schema.names, use_threads=False).aggregate([])


def distinct_partitions(df, spec: PartitionSpec, schema: pa.Schema) -> pa.Table:
    """Distinct partition value tuples of ``df`` under ``spec``: one row per partition,
    columns ``partition_field_<field_id>``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from lancepart import transforms

    out_schema = partition_value_schema(spec)
    by_id = {field_id_of(f): f.name for f in schema}
    sources = sorted({by_id[s] for f in spec.fields for s in f.source_ids if s in by_id} & set(df.columns))
    spec_json, schema_bytes = spec.to_json_string(), schema.serialize().to_pybytes()

    def compute(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        local_spec = PartitionSpec.from_json(spec_json)
        local_schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        seen: list[pa.Table] = []
        for batch in batches:
            cols = [transforms.apply(f, batch, local_schema) for f in local_spec.fields]
            seen.append(_distinct(pa.Table.from_arrays(cols, schema=out_schema)))
            if len(seen) > 64:  # keep the per-task state small
                seen = [_distinct(pa.concat_tables(seen))]
        if seen:
            yield from _distinct(pa.concat_tables(seen)).to_batches()

    projected = df.select(*sources) if sources else df.select()
    per_task = projected.mapInArrow(compute, from_arrow_schema(out_schema))._collect_as_arrow()
    if not per_task:
        return out_schema.empty_table()
    return _distinct(pa.Table.from_batches(per_task, schema=out_schema)).cast(out_schema)
