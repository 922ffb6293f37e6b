"""Storage-partitioned join of two partitioned namespaces in Spark (spec "Query Optimization /
Storage Partitioned Join", Appendix F; see docs/spark-join.md).

When the join keys are partitioned compatibly on both sides (:mod:`lancepart.read.spj`), the
driver forms partition groups from the two pruned ``__manifest`` snapshots and runs ONE Spark
task per group: the task reads the group's tables of both sides with pylance (each at its
published version, filter and projection pushed into the scan) and joins them in memory with
Arrow's hash join. Neither side is shuffled, so the physical plan is ``MapInArrow`` over the
group descriptions, with no ``Exchange``. Otherwise the join falls back to reading both sides
with :func:`lancepart.spark.read` and a normal Spark join, logs a warning saying why, and the
result's ``lancepart_join`` attribute (a :class:`~lancepart.read.spj.JoinPlan`) says so too::

    df = lps.join(spark, "/data/orders", "/data/customers", on=[("customer_id", "id")])
    print(df.lancepart_join)        # groups, matched fields, or why it shuffled

:func:`explain_join` gives the plan without Spark.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lancepart.deprecation import keyword_only
from lancepart.namespace import PartitionedNamespace
from lancepart.read.spj import (
    JoinPlan,
    join_layout,
    join_tables,
    layout_schema,
    plan_join,
)
from lancepart.spark.read import (
    arrow_schema_for,
    conform,
    empty_frame,
    info_to_json,
    output_schema,
    read,
    scan_batches,
    spark_schema,
    spark_type,
    task_frame,
)
from lancepart.spark.registry import register
from lancepart.spark.tasks import options_value, ship_options
from lancepart.storage.error_mapping import public_operation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lancepart.spark")

OUTPUT_BATCH_ROWS = 65_536
_SPARK_HOW = {"inner": "inner", "left": "left", "right": "right", "full": "full", "left_semi": "left_semi",
              "left_anti": "left_anti"}


def _read_columns(columns: Sequence[str] | None, keys: Sequence[str]) -> list[str] | None:
    """The columns to read from one side: the projection plus its join keys (None: all)."""
    if columns is None:
        return None
    cols = [columns] if isinstance(columns, str) else list(columns)
    return cols + [k for k in keys if k not in cols]


@keyword_only("storage_options", "spj")
@public_operation("lps.explain_join", publishes=False, root_arg=0)
def explain_join(left_root: str, right_root: str, on, how: str = "inner", filter_left: str | None = None,
                 filter_right: str | None = None, *, spj: bool = True,
                 storage_options: Mapping[str, str] | None = None) -> JoinPlan:
    """How :func:`join` would run, without Spark: the partition groups of a storage-partitioned
    join, or why the join has to shuffle. ``str()`` of the result is a readable report.

    >>> print(explain_join(orders.root, customers.root, on=[("customer_id", "id")]))  # doctest: +ELLIPSIS
    inner join on left.customer_id = right.id
      left  .../orders: 3 partition tables after pruning
      right .../customers: 2 partition tables after pruning
      storage-partitioned join: 2 partition groups, one task each, no shuffle of either side
        left customer_bucket=bucket[4](customer_id) ~ right id_bucket=bucket[2](id): left bucket % 2 = right bucket
        group (1,): 2 left + 1 right tables
        group (0,): 1 left + 1 right tables
    """
    return plan_join(PartitionedNamespace.open(left_root, storage_options=storage_options),
                     PartitionedNamespace.open(right_root, storage_options=storage_options),
                     on, how, filter_left, filter_right, spj)


def _join_task(left_root: str, right_root: str, sides: list[dict[str, Any]], pairs: list[tuple[str, str]],
               how: str, right_suffix: str, target_bytes: bytes,
               shipped) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executor function: group descriptions in; each group's tables of both sides read
    (exactly as :func:`lancepart.spark.read` reads them) and joined locally; the joined rows
    out as Arrow batches. ``sides``: per side the namespace schema (IPC bytes), the filter, its
    pushed-down form and the columns to read."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schemas = [pa.ipc.read_schema(pa.py_buffer(s["schema"])) for s in sides]
        projected = [output_schema(schema, s["columns"]) for schema, s in zip(schemas, sides, strict=True)]
        target = pa.ipc.read_schema(pa.py_buffer(target_bytes))
        layout = join_layout(projected[0], projected[1], pairs, how, right_suffix)
        so = options_value(shipped)

        def side(i: int, root: str, tasks: list[dict[str, Any]]) -> pa.Table:
            s = sides[i]
            out = [b for t in tasks for b in scan_batches(root, t, schemas[i], s["filter"], s["scan_filter"],
                                                          projected[i].names, so)]
            return pa.Table.from_batches(out, schema=projected[i])

        for batch in batches:
            for task in batch.column(0).to_pylist():
                group = json.loads(task)
                left, right = side(0, left_root, group["left"]), side(1, right_root, group["right"])
                joined = conform(join_tables(left, right, pairs, how, layout), target)
                yield from joined.to_batches(max_chunksize=OUTPUT_BATCH_ROWS)

    return run


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _shuffled_join(spark, plan: JoinPlan, filter_left: str | None, filter_right: str | None,
                   lcols: list[str] | None, rcols: list[str] | None, layout, storage_options):
    """Both sides read with :func:`read` and joined by Spark (an exchange per side), laid out
    exactly like the storage-partitioned result."""
    from pyspark.sql import functions as F

    left = read(spark, plan.left_root, filter_left, lcols, storage_options=storage_options)
    right = read(spark, plan.right_root, filter_right, rcols, storage_options=storage_options)
    rname = {c: f"__lancepart_r{i}" for i, c in enumerate(right.columns)}
    right = right.select([F.col(_q(c)).alias(rname[c]) for c in right.columns])
    cond = functools.reduce(lambda a, b: a & b, [F.col(_q(a)) == F.col(rname[b]) for a, b in plan.pairs])
    joined = left.join(right, cond, _SPARK_HOW[plan.how])
    out = []
    for c in layout:
        st = spark_type(c.type, c.name)
        if c.source == "left":
            e = F.col(_q(c.left))
        elif c.source == "right":
            e = F.col(rname[c.right])
        else:
            e = F.coalesce(F.col(_q(c.left)).cast(st), F.col(rname[c.right]).cast(st))
        out.append(e.cast(st).alias(c.name))
    return joined.select(out)


@keyword_only("storage_options")
@public_operation("lps.join", publishes=False, root_arg=1)
def join(
    spark,
    left_root: str,
    right_root: str,
    on: str | Sequence[str | tuple[str, str]] | Mapping[str, str],
    how: str = "inner",
    filter_left: str | None = None,
    filter_right: str | None = None,
    columns_left: Sequence[str] | None = None,
    columns_right: Sequence[str] | None = None,
    *,
    right_suffix: str = "_right",
    spj: bool = True,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Join two partitioned namespaces; storage-partitioned (no shuffle) when their partitioning
    of the join keys is compatible, else a normal Spark join with a logged warning.

    ``on``: a column name, a list of names present on both sides, ``(left, right)`` pairs or a
    ``{left: right}`` mapping. ``how``: ``inner``, ``left``, ``right``, ``full``, ``left_semi``,
    ``left_anti``. ``filter_left`` / ``filter_right`` prune each side through its ``__manifest``
    and are pushed into its scans; ``columns_left`` / ``columns_right`` project (the join keys are
    always read). Output columns: the left ones (a key named alike on both sides once), then the
    right ones, ``right_suffix`` added where a name clashes. ``spj=False`` forces the shuffled
    join. The returned DataFrame carries ``lancepart_join``, the :class:`JoinPlan` that ran.

    Example::

        lps.join(spark, "/data/orders", "/data/customers", on=[("customer_id", "id")]).lancepart_join.spj
    """
    register(spark, strict=False)  # the `lancepart` data source, for format("lancepart") in the same session
    left_ns = PartitionedNamespace.open(left_root, storage_options=storage_options)
    right_ns = PartitionedNamespace.open(right_root, storage_options=storage_options)
    lparts, filter_left, lscan = left_ns.scan_plan(filter_left)
    rparts, filter_right, rscan = right_ns.scan_plan(filter_right)
    plan = plan_join(left_ns, right_ns, on, how, filter_left, filter_right, spj, left_partitions=lparts,
                     right_partitions=rparts)
    lcols = _read_columns(columns_left, [p[0] for p in plan.pairs])
    rcols = _read_columns(columns_right, [p[1] for p in plan.pairs])
    lschema, rschema = output_schema(left_ns.schema, lcols), output_schema(right_ns.schema, rcols)
    layout = join_layout(lschema, rschema, plan.pairs, plan.how, right_suffix)
    struct = spark_schema(layout_schema(layout))
    so = left_ns.storage_options
    if not plan.spj:
        log.warning("join of %s and %s: no storage-partitioned join, both sides will be shuffled: %s",
                    left_ns.root, right_ns.root, plan.reason)
        df = _shuffled_join(spark, plan, filter_left, filter_right, lcols, rcols, layout, so)
    elif not plan.groups:
        log.info("%s", plan)
        df = empty_frame(spark, struct)
    else:
        log.info("%s", plan)
        df = _partitioned_join(spark, plan, struct, right_suffix, so, (left_ns, filter_left, lscan, lschema),
                               (right_ns, filter_right, rscan, rschema))
    df.lancepart_join = plan
    return df


def _partitioned_join(spark, plan: JoinPlan, struct, right_suffix: str, so: Mapping[str, str] | None,
                      *sides: tuple[PartitionedNamespace, str | None, str | None, pa.Schema]):
    """The storage-partitioned join: one Spark task per partition group (:func:`_join_task`), no
    shuffle. ``sides``: per side its namespace, filter, scan filter and output schema."""
    tasks = [json.dumps(_group_json(g)) for g in plan.groups]
    target = arrow_schema_for(spark, struct)
    shipped = ship_options(spark, so)
    from lancepart.evolution.schema_evolution import with_legacy_ids

    side_specs = [{"schema": with_legacy_ids(ns.schema, ns.snapshot().metadata).serialize().to_pybytes(), "filter": f,
                   "scan_filter": sf, "columns": s.names} for ns, f, sf, s in sides]
    (left_ns, *_), (right_ns, *_) = sides
    fn = _join_task(left_ns.root, right_ns.root, side_specs, plan.pairs, plan.how, right_suffix,
                    target.serialize().to_pybytes(), shipped)
    return task_frame(spark, tasks).mapInArrow(fn, struct)


def _group_json(g) -> dict[str, Any]:
    return {"key": repr(g.key), "left": [info_to_json(p) for p in g.left], "right": [info_to_json(p) for p in g.right]}
