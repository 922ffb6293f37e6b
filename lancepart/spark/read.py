"""Spark reader of a partitioned namespace (spec "Query Optimization / Partition Pruning",
"Transaction / Read Behavior").

Planning happens on the driver: :meth:`PartitionedNamespace.partitions` prunes through
``__manifest`` and yields every kept partition table with its ``read_version`` /
``read_branch`` / ``read_tag``. The tables are packed into tasks as Spark packs files
(:mod:`lancepart.spark.packing`); a small DataFrame holds the task descriptions (JSON), one
per Spark partition, and ``mapInArrow`` runs the scan on the
executors: every task opens its table at the published version with pylance, pushes the
column projection and the inclusive form of the filter into the Lance scanner, applies the
filter exactly with DataFusion (as :meth:`PartitionedNamespace.to_table` does) and streams
Arrow batches to Spark.
Tables bigger than a task (or above ``split_rows`` rows) are split into runs of whole fragments.

The namespace schema maps onto Spark types explicitly (:func:`spark_schema`): timestamps
without a zone become ``TIMESTAMP_NTZ`` (wall clock), with a zone ``TIMESTAMP`` (an instant),
``large_utf8`` a ``STRING``, ``decimal128(p, s)`` a ``DECIMAL(p, s)``, unsigned integers the
next wider signed type (``uint64`` a ``DECIMAL(20, 0)``).

Example::

    from lancepart import spark as lps
    lps.read(spark, "/data/events", "event_date = DATE '2025-12-10'", columns=["id", "amount"])
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lancepart.deprecation import keyword_only
from lancepart.errors import SchemaMismatchError
from lancepart.namespace import PartitionedNamespace
from lancepart.results import info_from_json as info_from_json  # re-exported
from lancepart.results import info_to_json as info_to_json  # re-exported
from lancepart.spark.registry import register
from lancepart.spark.tasks import options_value, ship_options
from lancepart.storage.error_mapping import public_operation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lancepart.spark")

TASK_SCHEMA = "task string"


# --------------------------------------------------------------------------- types
def spark_type(t: pa.DataType, column: str = "?"):
    """The Spark SQL type a namespace column of Arrow type ``t`` reads as.

    :class:`SchemaMismatchError` naming ``column`` for a type Spark cannot hold.

    >>> spark_type(pa.timestamp("ns")).simpleString()
    'timestamp_ntz'
    """
    from pyspark.sql import types as T

    if pa.types.is_dictionary(t):
        return spark_type(t.value_type, column)
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_integer(t):
        signed = {8: T.ByteType(), 16: T.ShortType(), 32: T.IntegerType(), 64: T.LongType()}
        if pa.types.is_signed_integer(t):
            return signed[t.bit_width]
        # unsigned: the next wider signed type, so every value fits
        return {8: T.ShortType(), 16: T.IntegerType(), 32: T.LongType()}.get(t.bit_width, T.DecimalType(20, 0))
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return T.FloatType()
    if pa.types.is_float64(t):
        return T.DoubleType()
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaMismatchError(f"column {column!r}: {t} has precision {t.precision}; Spark decimals hold "
                                      f"at most 38 digits")
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return T.StringType()
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_binary_view(t)):
        return T.BinaryType()
    if pa.types.is_date(t):
        return T.DateType()
    if pa.types.is_timestamp(t):
        return T.TimestampNTZType() if t.tz is None else T.TimestampType()
    if pa.types.is_time(t) and hasattr(T, "TimeType"):
        return T.TimeType()
    if pa.types.is_duration(t):
        return T.DayTimeIntervalType()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(spark_type(t.value_type, column), containsNull=t.value_field.nullable)
    if pa.types.is_map(t):
        return T.MapType(spark_type(t.key_type, column), spark_type(t.item_type, column),
                         valueContainsNull=t.item_field.nullable)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, spark_type(f.type, f"{column}.{f.name}"), f.nullable)
                             for f in t])
    raise SchemaMismatchError(f"column {column!r}: Arrow type {t} has no Spark SQL equivalent")


def spark_schema(schema: pa.Schema):
    """The Spark ``StructType`` of a namespace schema (or a projection of it).

    >>> spark_schema(pa.schema([("d", pa.date32())])).simpleString()
    'struct<d:date>'
    """
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type(f.type, f.name), f.nullable) for f in schema])


def arrow_schema_for(spark, struct) -> pa.Schema:
    """The Arrow schema Spark expects from ``mapInArrow`` for ``struct`` in this session
    (``TIMESTAMP`` carries the session time zone; large var types if the session uses them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    tz = spark.conf.get("spark.sql.session.timeZone")
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    return to_arrow_schema(struct, timezone=tz, prefers_large_types=large)


def conform(data: pa.RecordBatch | pa.Table, target: pa.Schema) -> pa.RecordBatch | pa.Table:
    """``data`` with exactly ``target``'s columns and types: nanosecond timestamps are truncated
    to Spark's microseconds, everything else is cast losslessly (an overflow raises)."""
    columns = []
    for f in target:
        col = data.column(f.name)
        if col.type != f.type:
            col = pc.cast(col, options=pc.CastOptions(f.type, allow_time_truncate=True))
        columns.append(col)
    if isinstance(data, pa.Table):
        return pa.Table.from_arrays(columns, schema=target)
    return pa.RecordBatch.from_arrays(columns, schema=target)


# --------------------------------------------------------------------------- plumbing shared with join.py
def task_frame(spark, tasks: Sequence[str]):
    """A DataFrame with one task description per Spark partition (the JSON strings ``tasks``)."""
    rows = [(t,) for t in tasks]
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: round-robin of one local partition spreads them one per slot
        return spark.createDataFrame(rows, TASK_SCHEMA).repartition(len(rows))
    return spark.createDataFrame(sc.parallelize(rows, len(rows)), TASK_SCHEMA)


def empty_frame(spark, struct):
    """An empty DataFrame of ``struct`` with no partition (so no task runs)."""
    try:
        return spark.createDataFrame(spark.sparkContext.emptyRDD(), struct)
    except Exception:  # Spark Connect has no SparkContext
        return spark.createDataFrame([], struct)


def output_schema(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """``schema`` projected on ``columns`` (:func:`lancepart.read.snapshot.projected`)."""
    from lancepart.read.snapshot import projected

    return projected(schema, columns)


# --------------------------------------------------------------------------- planning
# --------------------------------------------------------------------------- executors
SCAN_BATCH_ROWS = 65_536


def scan_batches(root: str, task: Mapping[str, Any], schema: pa.Schema, filter: str | None,
                 scan_filter: str | None, columns: Sequence[str] | None,
                 so: Mapping[str, str] | None) -> Iterator[pa.RecordBatch]:
    """The published rows of one task's table (or fragments) matching ``filter``, projected to
    ``columns``: exactly what :meth:`PartitionedNamespace.to_batches` streams for that table
    (:func:`lancepart.read.snapshot.table_batches`, then the exact filter per gathered chunk)."""
    from lancepart.evolution.schema_evolution import legacy_md
    from lancepart.read.snapshot import filtered, read_schema_for, table_batches

    cols, read_schema = read_schema_for(schema, filter, columns)
    stream = table_batches(root, info_from_json(task), schema, read_schema, scan_filter=scan_filter,
                           storage_options=so, namespace_md=legacy_md(schema), fragments=task.get("fragments"),
                           batch_size=SCAN_BATCH_ROWS)
    yield from filtered(stream, read_schema, filter, cols, batch_size=SCAN_BATCH_ROWS)


def _read_task(root: str, schema_bytes: bytes, filter: str | None, scan_filter: str | None,
               columns: list[str] | None, target_bytes: bytes,
               shipped) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor function: task descriptions in, the tables' Arrow batches out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        target = pa.ipc.read_schema(pa.py_buffer(target_bytes))
        so = options_value(shipped)
        for batch in batches:
            for packed in batch.column(0).to_pylist():
                for task in json.loads(packed):
                    for b in scan_batches(root, task, schema, filter, scan_filter, columns, so):
                        if b.num_rows:
                            yield conform(b, target)

    return run


# --------------------------------------------------------------------------- entry point
@keyword_only("storage_options")
@public_operation("lps.read", publishes=False, root_arg=1)
def read(
    spark,
    root: str,
    filter: str | None = None,
    columns: Sequence[str] | None = None,
    *,
    split_rows: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The published snapshot of the namespace at ``root`` as a Spark DataFrame.

    ``filter`` (SQL over source columns, as DataFusion parses it) prunes partition tables
    through ``__manifest`` on the driver; on the executors its inclusive form is pushed into
    every Lance scan and the filter itself is applied exactly (DataFusion semantics), so the
    rows are those of :meth:`PartitionedNamespace.to_table`. ``columns`` projects. The kept
    partition tables, each read at its ``read_version`` / ``read_branch`` / ``read_tag``, are
    packed into Spark tasks as Spark packs files (:mod:`lancepart.spark.packing`, with the
    session's ``spark.sql.files.maxPartitionBytes`` / ``openCostInBytes`` / ``minPartitionNum``):
    small tables share a task, a big table is read by several tasks of whole fragments, as is
    a table holding more than ``split_rows`` rows. Storage options reach the executors as a broadcast.

    Example::

        lps.read(spark, "/data/events", "event_date = DATE '2025-12-10'", columns=["id", "amount"])
    """
    register(spark, strict=False)  # the `lancepart` data source, for format("lancepart") in the same session
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    out = output_schema(ns.schema, columns)
    struct = spark_schema(out)
    parts, filter, scan_filter = ns.scan_plan(filter)
    so = ns.storage_options
    from lancepart.spark.packing import packing, plan_scan, session_defaults

    tasks = plan_scan(ns.root, parts, packing({}, session_defaults(spark)), split_rows=split_rows, storage_options=so)
    log.info("read %s: %d partition tables kept, %d tasks", ns.root, len(parts), len(tasks))
    if not tasks:
        return empty_frame(spark, struct)
    target = arrow_schema_for(spark, struct)
    shipped = ship_options(spark, so)
    from lancepart.evolution.schema_evolution import with_legacy_ids

    fn = _read_task(ns.root, with_legacy_ids(ns.schema, ns.snapshot().metadata).serialize().to_pybytes(),
                    filter, scan_filter, out.names,
                    target.serialize().to_pybytes(), shipped)
    return task_frame(spark, [json.dumps(t) for t in tasks]).mapInArrow(fn, struct)
