"""Batch vector search on Spark: one result set per query row of a DataFrame.

Planning happens on the driver as for :meth:`PartitionedNamespace.search`: the filter prunes
partitions through ``__manifest``, the metric is resolved from the tables' vector indexes. Every
(kept partition table x query) pair is searched on the executors (each task opens a table once
at its published version and runs its queries against it, pushing the inclusive filter into Lance
as a prefilter and applying the exact filter afterwards, with over-fetch); a window then keeps
the best ``k`` per query, ties broken by partition table order and row id, as the in-process
search does, so ``lps.search`` gives for each query the rows ``ns.search`` gives::

    lps.search(spark, "/data/docs", "embedding", queries_df, k=10, filter="tenant = 'acme'",
               id_column="qid").where("rank <= 3")
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lancepart.deprecation import REMOVED_IN
from lancepart.errors import InvalidArgumentError
from lancepart.namespace import PartitionedNamespace
from lancepart.read import search as _search
from lancepart.spark.read import arrow_schema_for, conform, info_from_json, info_to_json, spark_schema, task_frame
from lancepart.spark.registry import register
from lancepart.spark.tasks import options_value, ship_options
from lancepart.storage.error_mapping import public_operation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PART, ROW_ID, DISTANCE, RANK = "_part", "_rowid", "_distance", "rank"


def _search_task(plan: _search.SearchPlan, dim: int, k: int, params: dict[str, Any], id_column: str, query_column: str,
                 cols: list[str], target_bytes: bytes, shipped
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor function: (task, query id, query) rows in, each pair's top k rows out."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from dataclasses import replace

        from lancepart.read.snapshot import open_published

        target = pa.ipc.read_schema(pa.py_buffer(target_bytes))
        p = replace(plan, storage_options=options_value(shipped))
        for batch in batches:
            tasks = batch.column("task").to_pylist()
            for task in dict.fromkeys(tasks):  # one open per table, then its queries
                rows = np.flatnonzero(np.asarray(tasks, dtype=object) == task)
                t = json.loads(task)
                info = info_from_json(t)
                ds = open_published(p.root, info, p.storage_options)
                ids = batch.column(id_column).take(pa.array(rows))
                queries = batch.column(query_column).take(pa.array(rows))
                for i in range(len(rows)):  # one Lance search per query (not per data row)
                    q = queries[i]
                    if not q.is_valid:
                        continue
                    vec = _search.query_vector(p.column, q.values, dim)
                    found = _search.search_dataset(p, info, ds, vec, k, params)
                    if not found.num_rows:
                        continue
                    n = found.num_rows
                    out = found.select(cols).append_column(DISTANCE, found.column(DISTANCE))
                    out = out.append_column(ROW_ID, found.column(ROW_ID).cast(pa.int64()))
                    out = out.append_column(PART, pa.array(np.full(n, t["part"], dtype=np.int32)))
                    out = out.append_column(id_column, pa.repeat(ids[i], n))
                    yield from conform(out, target).to_batches()

    return run


@public_operation("lps.search", publishes=False, root_arg=1)
def search(spark, root: str, column: str, queries, k: int = 10, filter: str | None = None,
           columns: Sequence[str] | None = None, *, query_column: str = "query", id_column: str | None = None,
           storage_options: Mapping[str, str] | None = None, **params: Any) -> DataFrame:
    """For every row of ``queries`` (a DataFrame whose ``query_column`` holds a vector of the
    column's dimension), the ``k`` published rows nearest to it in vector column ``column`` among
    those matching ``filter``: a DataFrame of the query id, ``rank`` (1 = nearest), the row
    ``columns`` (all by default) and ``_distance``. ``id_column`` names the query id column of
    ``queries``; without it a ``query_id`` from ``monotonically_increasing_id()`` is added (pass
    one of your own for ids that stay the same across runs). ``params`` as for
    :meth:`PartitionedNamespace.search` (``metric``, ``nprobes``, ``refine_factor``, ...). The
    arguments come in the order of ``ns.search(column, query, k, filter, columns)``; the order
    ``(spark, root, queries, column, ...)`` still works until lancepart 0.2, with a
    :class:`DeprecationWarning`.

    Example::

        lps.search(spark, "/data/docs", "embedding",
                   spark.createDataFrame([(1, [0.1] * 128)], "qid long, query array<float>"), k=5, id_column="qid")
    """
    if not isinstance(column, str) and isinstance(queries, str):  # (spark, root, queries, column, ...)
        warnings.warn(f"lps.search(spark, root, queries, column, ...) is deprecated and works until lancepart "
                      f"{REMOVED_IN}: pass lps.search(spark, root, column, queries, ...), the order of "
                      f"ns.search(column, query, ...)", DeprecationWarning, stacklevel=3)
        column, queries = queries, column
    register(spark, strict=False)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    schema = ns.schema
    dim = _search.vector_dim(schema, column)
    k = _search.check_k(k)
    params = _search.vector_params(params)
    queries, id_column = _check_queries(queries, query_column, id_column, dim)
    parts, filter, scan_filter = ns.scan_plan(filter)
    cols, read_schema = _search._read_schema(schema, columns, filter)
    if id_column in cols or RANK in cols:
        raise InvalidArgumentError(f"the result columns {cols} clash with id_column {id_column!r} or {RANK!r}: "
                                   f"choose another id_column or fewer columns")
    plan = _search.SearchPlan(ns.root, column, read_schema, filter, scan_filter, schema=schema,
                              namespace_md=ns.snapshot().metadata)
    if params.get("metric") is None:
        params["metric"] = _search.resolve_metric(column, parts, _search.open_tables(plan, parts), None,
                                                  ns.snapshot().metadata)
    return _search_frame(spark, ns, plan, parts, queries, dim=dim, k=k, params=params, id_column=id_column,
                         query_column=query_column, cols=cols)


def _check_queries(queries, query_column: str, id_column: str | None, dim: int):
    """``(queries, id_column)``: the query column checked, the id column checked or added
    (``query_id``, from ``monotonically_increasing_id()``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if query_column not in queries.columns:
        raise InvalidArgumentError(f"query_column {query_column!r} is not a column of the queries DataFrame "
                                   f"{queries.columns}")
    qtype = queries.schema[query_column].dataType
    if not isinstance(qtype, T.ArrayType) or not isinstance(qtype.elementType, T.NumericType):
        raise InvalidArgumentError(f"query_column {query_column!r} has type {qtype.simpleString()}; it must be an "
                                   f"array of numbers of length {dim}")
    if id_column is None:
        id_column = "query_id"
        queries = queries.withColumn(id_column, F.monotonically_increasing_id())
    elif id_column not in queries.columns:
        raise InvalidArgumentError(f"id_column {id_column!r} is not a column of the queries DataFrame "
                                   f"{queries.columns}")
    return queries, id_column


def _search_frame(spark, ns: PartitionedNamespace, plan: _search.SearchPlan, parts: list, queries, *, dim: int,
                  k: int, params: dict[str, Any], id_column: str, query_column: str, cols: list[str]):
    """The result DataFrame: every (kept table x query) pair searched on the executors, then the
    best ``k`` of each query ranked by a window."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    schema = ns.schema
    id_field = queries.schema[id_column]
    row_struct = spark_schema(pa.schema([schema.field(c) for c in cols]))
    struct = T.StructType([*row_struct.fields, T.StructField(DISTANCE, T.FloatType()),
                           T.StructField(ROW_ID, T.LongType()), T.StructField(PART, T.IntegerType()),
                           T.StructField(id_column, id_field.dataType, id_field.nullable)])
    out_cols = [id_column, RANK, *cols, DISTANCE]
    if not parts:
        return spark.createDataFrame([], T.StructType([struct[id_column], T.StructField(RANK, T.IntegerType()),
                                                       *row_struct.fields, struct[DISTANCE]]))
    tasks = task_frame(spark, [json.dumps(info_to_json(p, part=i)) for i, p in enumerate(parts)])
    pairs = tasks.crossJoin(queries.select(id_column, F.col(query_column).cast("array<float>").alias(query_column)))
    target = arrow_schema_for(spark, struct)
    fn = _search_task(plan, dim, k, params, id_column, query_column, cols, target.serialize().to_pybytes(),
                      ship_options(spark, ns.storage_options))
    found = pairs.mapInArrow(fn, struct)
    w = Window.partitionBy(id_column).orderBy(F.col(DISTANCE).asc_nulls_last(), F.col(PART), F.col(ROW_ID))
    return found.withColumn(RANK, F.row_number().over(w)).where(F.col(RANK) <= k).select(*out_cols)
