"""Nearest-neighbour and full-text search across the partition tables of a namespace.

Spec: spec/partitioning.md (motivation: "queries like vector search are only against a specific
partition, but sometimes ... across all business units"), "Partition Pruning",
"Transaction / Read Behavior"; docs/search.md.

A search plans like a read (:meth:`PartitionedNamespace.scan_plan`): partitions that cannot hold
a row matching ``filter`` are pruned through ``__manifest``; every kept table is searched at its
published version (in parallel), with the inclusive form of the filter pushed into Lance as a
*pre*-filter; the exact filter (DataFusion semantics) is then applied to the rows Lance returned.
When fewer than ``k`` rows survive it while Lance returned as many as were asked for, the same
table is searched again for four times as many (over-fetch) until ``k`` rows survive or the table
has no more candidates: the result is exactly the top ``k`` of the rows matching the filter
(for a flat search; an index search is as exact as the index). The per-table top ``k`` lists
are merged by ``_distance`` (ascending) or ``_score`` (descending), ties broken by partition
table order and then Lance row id, so the same snapshot always gives the same rows.

A table without a vector index is searched flat (exact). A table written before the searched
column existed (schema evolution) holds no candidate rows; columns it lacks read as NULL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.arguments import check_columns, check_int, check_text, invalid
from lancepart.errors import InvalidArgumentError
from lancepart.read.snapshot import apply_filter, open_published
from lancepart.results import PartitionInfo
from lancepart.storage.error_mapping import storage_errors
from lancepart.storage.manifest import join_uri
from lancepart.util.parallel import map_threads

log = logging.getLogger("lancepart.read")

METRICS = ("l2", "cosine", "dot")
# ds.to_table(nearest={...}) keys a caller may pass through ``**params``
VECTOR_PARAMS = ("metric", "nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor", "ef", "use_index")
COUNT_PARAMS = ("nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor", "ef")  # integers >= 1
DISTANCE, SCORE, ROW_ID = "_distance", "_score", "_rowid"
OVERFETCH = 4


@dataclass(frozen=True)
class SearchPlan:
    """Everything one per-table search needs; picklable, so Spark executors run it too."""

    root: str
    column: str
    read_schema: pa.Schema  # output columns and filter columns, namespace types
    filter: str | None
    scan_filter: str | None
    storage_options: Mapping[str, str] | None = None
    # the namespace schema (field ids) and root properties: a table written under an older form of
    # the schema (a column renamed or widened since) is read by field id, as every read is
    schema: pa.Schema | None = None
    namespace_md: Mapping[str, str] | None = None

    def columns_of(self, ds: lance.LanceDataset) -> tuple[str | None, list[str], dict[str, str | None] | None]:
        """In table ``ds``: the name of the searched column (None: the table predates it), the
        columns to read for ``read_schema``, and the mapping from namespace names to the table's
        (None when the table is in the current schema)."""
        from lancepart.evolution.schema_evolution import is_current, source_columns

        if self.schema is None or is_current(ds.schema, self.namespace_md or {}, self.schema):
            return (self.column if self.column in ds.schema.names else None,
                    [c for c in self.read_schema.names if c in ds.schema.names], None)
        mapping = source_columns(ds.schema, self.namespace_md or {}, self.schema,
                                 list(dict.fromkeys([*self.read_schema.names, self.column])))
        cols = list(dict.fromkeys(v for v in (mapping[c] for c in self.read_schema.names) if v is not None))
        return mapping[self.column], cols, mapping


# ----------------------------------------------------------------------------- validation
def vector_dim(schema: pa.Schema, column: str) -> int:
    """The dimension of vector column ``column``: a ``fixed_size_list`` of floats.

    >>> vector_dim(pa.schema([("v", pa.list_(pa.float32(), 8))]), "v")
    8
    """
    check_text("column", column, "a column name (a str)")
    if column not in schema.names:
        raise InvalidArgumentError(f"search column {column!r} is not in the namespace schema {schema.names}")
    t = schema.field(column).type
    if not pa.types.is_fixed_size_list(t) or not pa.types.is_floating(t.value_type):
        raise InvalidArgumentError(f"search column {column!r} has type {t}; a vector search needs a "
                                   f"fixed_size_list of float16/float32/float64")
    return t.list_size


def query_vector(column: str, query: Any, dim: int) -> np.ndarray:
    """``query`` as a 1-D float32 vector of length ``dim``, or :class:`InvalidArgumentError`."""
    try:
        q = np.asarray(query.to_numpy(zero_copy_only=False) if hasattr(query, "to_numpy") else query,
                       dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"query for column {column!r} is not a numeric vector: got "
                                   f"{type(query).__name__} ({e})") from None
    if q.ndim != 1 or q.shape[0] != dim:
        raise InvalidArgumentError(f"query for column {column!r} has shape {q.shape} (a {type(query).__name__}); "
                                   f"column {column!r} has dimension {dim}")
    if not np.isfinite(q).all():
        raise InvalidArgumentError(f"query for column {column!r} holds NaN or infinite values")
    return q


def check_k(k: Any) -> int:
    return check_int("k", k, minimum=1)


def vector_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The search parameters checked: known names, counts that are integers >= 1 (or None),
    ``use_index`` a bool and ``metric`` one of :data:`METRICS`."""
    unknown = sorted(set(params) - set(VECTOR_PARAMS))
    if unknown:
        raise InvalidArgumentError(f"unknown search parameters {unknown}; known: {list(VECTOR_PARAMS)}")
    out = dict(params)
    for name in COUNT_PARAMS:
        if name in out:
            out[name] = check_int(name, out[name], minimum=1, optional=True)
    low, high = out.get("minimum_nprobes"), out.get("maximum_nprobes")
    if low is not None and high is not None and low > high:
        raise InvalidArgumentError(f"minimum_nprobes={low} is above maximum_nprobes={high}")
    if "use_index" in out and not isinstance(out["use_index"], bool):
        raise invalid("use_index", out["use_index"], "True or False")
    if out.get("metric") is not None:
        if not isinstance(out["metric"], str):
            raise invalid("metric", out["metric"], f"one of {list(METRICS)} or None")
        metric = out["metric"].lower()
        if metric not in METRICS:
            raise InvalidArgumentError(f"metric {out['metric']!r} is not one of {list(METRICS)}")
        out["metric"] = metric
    return out


def _read_schema(schema: pa.Schema, columns: Sequence[str] | None, filter: str | None,
                 extra: Sequence[str] = ()) -> tuple[list[str], pa.Schema]:
    from lancepart.model.predicates import filter_columns

    cols = check_columns(columns)
    cols = cols if cols is not None else list(schema.names)
    unknown = [c for c in cols if c not in schema.names]
    if unknown:
        raise InvalidArgumentError(f"columns {unknown} are not in the namespace schema {schema.names}")
    needed = set(cols) | set(filter_columns(filter, schema)) | set(extra)
    return cols, pa.schema([schema.field(n) for n in schema.names if n in needed])


# ----------------------------------------------------------------------------- one table
def _index_metric(ds: lance.LanceDataset, column: str) -> str | None:
    """The metric of the vector index on ``column`` at this version, or None without one."""
    for idx in ds.describe_indices():
        if list(idx.field_names) == [column] and "Vector" in idx.type_url:
            metric = (idx.details or {}).get("metric_type")
            return str(metric).lower() if metric else None
    return None


def _has_inverted_index(ds: lance.LanceDataset, column: str) -> bool:
    return any(list(idx.field_names) == [column] and "Inverted" in idx.type_url for idx in ds.describe_indices())


def _conform(t: pa.Table, read_schema: pa.Schema, extra: Sequence[pa.Field],
             mapping: Mapping[str, str | None] | None = None) -> pa.Table:
    """``t`` with the columns of ``read_schema`` (NULL where the table lacks one) and ``extra``;
    ``mapping`` (namespace name -> the table's name, by field id) for a table in an older form of
    the schema."""
    if mapping is None:
        mapping = {f.name: f.name if f.name in t.column_names else None for f in read_schema}
    arrays = [t.column(mapping[f.name]).cast(f.type) if mapping.get(f.name) is not None else
              pa.nulls(t.num_rows, f.type) for f in read_schema]
    arrays += [t.column(f.name).cast(f.type) for f in extra]
    return pa.Table.from_arrays(arrays, schema=pa.schema(list(read_schema) + list(extra)))


def _top_k_exact(run: Callable[[int, str | None], pa.Table], plan: SearchPlan, k: int, n_rows: int,
                 extra: Sequence[pa.Field], what: str, mapping: Mapping[str, str | None] | None = None) -> pa.Table:
    """Call ``run(limit, prefilter)`` (a Lance search, best first) with the pushed-down filter,
    apply the exact filter, and over-fetch until ``k`` rows survive or the table is exhausted.
    ``mapping``: the table is in an older form of the schema (read by field id; its column
    names may mean other fields, so the filter is not pushed into it)."""
    limit, pushed = k, plan.scan_filter if mapping is None else None
    while True:
        try:
            raw = run(limit, pushed)
        except ValueError as e:
            if pushed is None:
                raise
            log.debug("Lance refused the pushed-down filter %r in a %s (%s); searching without it", pushed, what, e)
            pushed = None
            continue
        out = _conform(raw, plan.read_schema, extra, mapping)
        if plan.filter:
            out = apply_filter(out, plan.filter)
        if out.num_rows >= k or raw.num_rows < limit or limit >= n_rows:
            return out.slice(0, k)
        limit = min(limit * OVERFETCH, n_rows)


def search_table(plan: SearchPlan, info: PartitionInfo, query: np.ndarray, k: int,
                 params: Mapping[str, Any]) -> pa.Table:
    """The top ``k`` rows of one partition table at its published version for vector ``query``:
    ``plan.read_schema`` columns, ``_distance`` and ``_rowid``, best first."""
    return search_dataset(plan, info, open_published(plan.root, info, plan.storage_options), query, k, params)


def search_dataset(plan: SearchPlan, info: PartitionInfo, ds: lance.LanceDataset | None, query: np.ndarray,
                   k: int, params: Mapping[str, Any]) -> pa.Table:
    """:func:`search_table` on ``ds``, the table ``info`` already opened at its published version
    (None: declared only, no rows); several queries on one table open it once."""
    extra = [pa.field(DISTANCE, pa.float32()), pa.field(ROW_ID, pa.uint64())]
    empty = pa.schema(list(plan.read_schema) + extra).empty_table()
    if ds is None:  # declared only
        return empty
    column, cols, mapping = plan.columns_of(ds)
    if column is None:  # written before the column existed
        return empty
    nearest = {"column": column, "q": query, **params}

    def run(limit: int, prefilter: str | None) -> pa.Table:
        return ds.to_table(columns=[*cols, DISTANCE], nearest={**nearest, "k": limit}, filter=prefilter,
                           prefilter=prefilter is not None, with_row_id=True)

    with storage_errors(join_uri(plan.root, info.location), table=info.object_id, reading=True):
        n_rows = ds.count_rows()
        if n_rows == 0:
            return empty
        return _top_k_exact(run, plan, k, n_rows, extra, "vector search", mapping)


def text_table(plan: SearchPlan, info: PartitionInfo, ds: lance.LanceDataset | None, query: str, k: int
               ) -> pa.Table:
    """The top ``k`` rows of one partition table for full-text ``query`` on ``plan.column``
    (Lance needs an INVERTED index on it): ``plan.read_schema`` columns, ``_score``, ``_rowid``.
    ``ds``: the table already opened at its published version (None: declared only)."""
    extra = [pa.field(SCORE, pa.float32()), pa.field(ROW_ID, pa.uint64())]
    empty = pa.schema(list(plan.read_schema) + extra).empty_table()
    if ds is None:
        return empty
    column, cols, mapping = plan.columns_of(ds)
    if column is None:
        return empty
    with storage_errors(join_uri(plan.root, info.location), table=info.object_id, reading=True):
        n_rows = ds.count_rows()
        if n_rows == 0:
            return empty
        if not _has_inverted_index(ds, column):
            raise InvalidArgumentError(
                f"partition table {info.object_id!r} (version {ds.version}) has no INVERTED index on column "
                f"{plan.column!r}: full-text search needs one on every searched table; declare it on every table "
                f"with `lancepart index ROOT create {plan.column} INVERTED --min-rows 0` (ns.create_index("
                f"{plan.column!r}, 'INVERTED', min_rows=0)); an index declared with a higher min_rows leaves "
                f"smaller tables unindexed (redeclare it with --replace)")

        def run(limit: int, prefilter: str | None) -> pa.Table:
            return ds.to_table(columns=[*cols, SCORE], full_text_query={"query": query, "columns": [column]},
                               filter=prefilter, prefilter=prefilter is not None, limit=limit, with_row_id=True)

        return _top_k_exact(run, plan, k, n_rows, extra, "full-text search", mapping)


# ----------------------------------------------------------------------------- merge
def merge_top_k(tables: Sequence[pa.Table], k: int, by: str, descending: bool = False) -> pa.Table:
    """The best ``k`` rows of per-table results (``tables`` in partition order) by column ``by``;
    ties go to the earlier table, then the lower ``_rowid``."""
    if not tables:
        raise ValueError("merge_top_k needs at least one table")
    parts = [t.append_column("_part", pa.array(np.full(t.num_rows, i, dtype=np.int32))) for i, t in enumerate(tables)]
    allrows = pa.concat_tables(parts)
    order = pc.sort_indices(allrows, sort_keys=[(by, "descending" if descending else "ascending"),
                                                ("_part", "ascending"), (ROW_ID, "ascending")])
    return allrows.take(order[:k]).drop_columns(["_part"])


# ----------------------------------------------------------------------------- namespace level
def open_tables(plan: SearchPlan, infos: Sequence[PartitionInfo]) -> list[lance.LanceDataset | None]:
    """Every table of ``infos`` at its published version (None: declared only), opened in parallel."""
    return map_threads(lambda info: open_published(plan.root, info, plan.storage_options), infos)


def resolve_metric(column: str, infos: Sequence[PartitionInfo], datasets: Sequence[lance.LanceDataset | None],
                   requested: str | None, namespace_md: Mapping[str, str] | None = None) -> str:
    """The metric every table is searched with: ``requested``, else the metric of the vector
    indexes on ``column`` (they must agree), else ``l2``. A table whose index uses another
    metric than the one passed is searched flat by Lance (exact, slower). ``namespace_md`` (the
    root properties) finds the column in a table that holds it under an older name."""
    from lancepart.evolution.schema_evolution import table_column

    if requested is not None:
        return requested
    found: dict[str, list[str]] = {}
    for info, ds in zip(infos, datasets, strict=True):
        name = None if ds is None else table_column(ds.schema, column, namespace_md)
        m = None if name is None else _index_metric(ds, name)
        if m is not None:
            found.setdefault(m, []).append(info.object_id)
    if len(found) > 1:
        detail = "; ".join(f"{m}: {ids[:3]}" for m, ids in sorted(found.items()))
        raise InvalidArgumentError(f"the vector indexes on column {column!r} use different metrics ({detail}); "
                                   f"distances would not be comparable: pass metric= explicitly")
    return next(iter(found), "l2")


def search_plan(ns: Any, filter: str | None) -> tuple[list[PartitionInfo], str | None, str | None]:
    """:meth:`PartitionedNamespace.scan_plan`, with the filter dropped when the partition values
    alone prove it TRUE for every row of every kept table (the strict projection of
    :func:`lancepart.maintenance.delete.entire_tables`: identity-partitioned columns only): then
    neither Lance's prefilter nor the exact filter has anything to remove. Cached per snapshot."""
    parts, filter, scan_filter = ns.scan_plan(filter)
    if filter is None or not parts:
        return parts, filter, scan_filter
    key = ("entire", filter)
    entire = ns._filter_facts.get(key)
    if entire is None:
        from lancepart.read.manifest_query import entire_tables

        entire = entire_tables(filter, ns.schema, ns.specs, ns.snapshot().table_pins())
        ns._filter_facts[key] = entire
    if all(p.object_id in entire for p in parts):
        return parts, None, None
    return parts, filter, scan_filter


def search(ns: Any, column: str, query: Any, k: int = 10, filter: str | None = None, *,
           columns: Sequence[str] | None = None, **params: Any) -> pa.Table:
    """The ``k`` rows nearest to ``query`` in vector column ``column`` among the published rows
    matching ``filter``, with ``_distance``, sorted ascending. ``params``: ``metric``
    (``l2`` squared euclidean, ``cosine``, ``dot``), ``nprobes``, ``refine_factor``, ``ef``, ...
    passed to Lance's nearest search on each table.

    >>> hits = search(docs, "embedding", [1, 0, 0, 0], k=2, filter="tenant = 'acme'", columns=["id"], nprobes=20)
    >>> hits["id"].to_pylist(), [round(d, 2) for d in hits["_distance"].to_pylist()]
    ([1, 3], [0.0, 0.02])
    >>> search(docs, "embedding", [1, 0, 0, 0], k=2, metric="cosine")["id"].to_pylist()  # every tenant
    [1, 4]
    """
    schema: pa.Schema = ns.schema
    dim = vector_dim(schema, column)
    q = query_vector(column, query, dim)
    k = check_k(k)
    params = vector_params(params)
    parts, filter, scan_filter = search_plan(ns, filter)
    cols, read_schema = _read_schema(schema, columns, filter)
    plan = SearchPlan(ns.root, column, read_schema, filter, scan_filter, ns.storage_options, schema,
                      ns.snapshot().metadata)
    datasets = map_threads(ns._published_dataset, parts)  # kept open by the handle: warm index caches
    params["metric"] = resolve_metric(column, parts, datasets, params.get("metric"), ns.snapshot().metadata)
    found = map_threads(lambda pair: search_dataset(plan, pair[0], pair[1], q, k, params),
                        list(zip(parts, datasets, strict=True)))
    if not found:
        found = [pa.schema([*read_schema, pa.field(DISTANCE, pa.float32()),
                            pa.field(ROW_ID, pa.uint64())]).empty_table()]
    return merge_top_k(found, k, DISTANCE).select([*cols, DISTANCE])


def search_text(ns: Any, column: str, query: str, k: int = 10, filter: str | None = None, *,
                columns: Sequence[str] | None = None) -> pa.Table:
    """The ``k`` published rows matching full-text ``query`` on string column ``column`` best,
    among those matching ``filter``, with ``_score`` (BM25, computed per partition table),
    sorted descending. Every searched table needs an INVERTED index on ``column``.

    >>> search_text(docs, "body", "lance partition", k=5, filter="tenant = 'acme'")["id"].to_pylist()
    [1, 3]
    """
    schema: pa.Schema = ns.schema
    check_text("column", column, "a column name (a str)")
    if column not in schema.names:
        raise InvalidArgumentError(f"search column {column!r} is not in the namespace schema {schema.names}")
    t = schema.field(column).type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise InvalidArgumentError(f"search column {column!r} has type {t}; full-text search needs a string column")
    check_text("query", query, f"a non-empty str (the full-text query on column {column!r})")
    k = check_k(k)
    parts, filter, scan_filter = search_plan(ns, filter)
    cols, read_schema = _read_schema(schema, columns, filter)
    plan = SearchPlan(ns.root, column, read_schema, filter, scan_filter, ns.storage_options, schema,
                      ns.snapshot().metadata)
    found = map_threads(lambda info: text_table(plan, info, ns._published_dataset(info), query, k), parts)
    if not found:
        found = [pa.schema([*read_schema, pa.field(SCORE, pa.float32()), pa.field(ROW_ID, pa.uint64())]).empty_table()]
    return merge_top_k(found, k, SCORE, descending=True).select([*cols, SCORE])
