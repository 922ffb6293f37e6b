"""Partition pruning through ``__manifest`` (spec "Query Optimization / Partition Pruning",
"Partition Evolution / Compatibility with Partition Pruning", Appendices C and D): the public
entry point.

A filter over the namespace's *source* columns is parsed and type-coerced by DataFusion, then
projected onto the ``partition_field_<field_id>`` columns of every spec version, the way
pyiceberg's ``Transform.project`` does it, and the projected predicates run as one DataFusion
query over ``__manifest``. The answer is always *inclusive*: a partition is dropped only when no
row of it can match, so the original filter is still applied inside each partition scan
(:attr:`PruneResult.residual`).

The work is done in three modules, each usable on its own:

* :mod:`lancepart.predicates`: the predicate model over source columns, the binder from
  DataFusion's plan to it (literal coercion included), and the predicate model over
  ``partition_field_*`` columns with its SQL rendering;
* :mod:`lancepart.projection`: inclusive and strict projection, side by side; each
  transform of :mod:`lancepart.transforms` owns both (a table there lists what each projects);
* :mod:`lancepart.read.manifest_query`: the ``__manifest`` query, the scan pushdown,
  :func:`prune` and :class:`PruneResult`.

>>> import pyarrow as pa
>>> from lancepart.spec import PartitionSpec
>>> schema = pa.schema([pa.field("d", pa.date32(), metadata={"lance:field_id": "1"})])
>>> spec = PartitionSpec.from_json({"id": 1, "fields": [{"field_id": "y", "source_ids": [1],
...     "transform": {"type": "year"}, "result_type": {"type": "int32"}}]})
>>> rows = pa.table({"object_id": ["v1$a$dataset", "v1$b$dataset"], "object_type": ["table", "table"],
...                  "partition_field_y": pa.array([2024, 2025], pa.int32())})
>>> prune("d = DATE '2025-12-10'", schema, {1: spec}, rows).predicates
{1: 'partition_field_y = 2025'}
"""

from __future__ import annotations

from lancepart.predicates import _sql_literal  # noqa: F401  (importable from here, as before)
from lancepart.projection import MAX_POINTS
from lancepart.read.manifest_query import PruneResult, filter_columns, prune

__all__ = ["MAX_POINTS", "PruneResult", "filter_columns", "prune"]
