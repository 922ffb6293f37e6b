"""The ``__manifest`` query of partition pruning, and what :func:`prune` returns.

:func:`prune` binds the filter (:mod:`lancepart.model.predicates`), projects it onto the
``partition_field_*`` columns of every spec version (:mod:`lancepart.model.projection`) and runs
the projected predicates as one DataFusion query over ``__manifest`` in the form of the spec's
Appendix D (:attr:`PruneResult.manifest_sql`)::

    SELECT object_id, location, read_version, read_branch, read_tag
    FROM __manifest
    WHERE object_type = 'table'
      AND (
        (object_id LIKE 'v1$%'
          AND partition_field_event_date = DATE '2025-12-10')
        OR
        (object_id LIKE 'v2$%'
          AND partition_field_event_year = 2025
          AND partition_field_country = 'US')
      )

It also renders the inclusive filter pushed into each Lance scan (:attr:`PruneResult.scan_filter`).
The answer is always *inclusive*: the original filter is still applied inside each partition
scan (:attr:`PruneResult.residual`).

Partition pruning (spec "Query Optimization / Partition Pruning", "Partition Evolution /
Compatibility with Partition Pruning", Appendices C and D) is this module, the entry point
(imported as ``lancepart.read.prune`` too), over three pure ones it runs:

* :mod:`lancepart.model.predicates`: the predicate model over source columns, the binder from
  DataFusion's plan to it (literal coercion included), and the predicate model over
  ``partition_field_*`` columns with its SQL rendering;
* :mod:`lancepart.model.projection`: inclusive and strict projection, side by side; each
  transform of :mod:`lancepart.model.transforms` owns both;
* :mod:`lancepart.model.visitors`: the visitors over a partition spec that apply them.

>>> import pyarrow as pa
>>> from lancepart.model.spec import PartitionSpec
>>> schema = pa.schema([pa.field("d", pa.date32(), metadata={"lance:field_id": "1"})])
>>> spec = PartitionSpec.from_json({"id": 1, "fields": [{"field_id": "y", "source_ids": [1],
...     "transform": {"type": "year"}, "result_type": {"type": "int32"}}]})
>>> rows = pa.table({"object_id": ["v1$a$dataset", "v1$b$dataset"], "object_type": ["table", "table"],
...                  "partition_field_y": pa.array([2024, 2025], pa.int32())})
>>> r = prune("d = DATE '2025-12-10'", schema, {1: spec}, rows)
>>> r.object_ids, r.pruned
(['v1$b$dataset'], {1: 1})
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import InvalidArgumentError, InvalidFilterError
from lancepart.model.predicates import (
    _P,
    _PFALSE,
    _PTRUE,
    _TRUE,
    _And,
    _Cmp,
    _Const,
    _In,
    _is_string,
    _IsNull,
    _Like,
    _new_context,
    _Or,
    _PAnd,
    _parse,
    _POr,
    _Pred,
    _short,
    _sql_literal,
    _sql_string,
    filter_columns,
    lance_ident,
)
from lancepart.model.projection import _ROW, MAX_POINTS
from lancepart.model.spec import PartitionSpec
from lancepart.model.visitors import _spec_rows, _SpecProjector, _strict_sources

__all__ = ["MAX_POINTS", "PruneResult", "entire_tables", "filter_columns", "matching_tables", "prune"]

_MANIFEST = "__manifest"
_SELECT_COLUMNS = ("object_id", "location", "read_version", "read_branch", "read_tag")
_ROWNUM = "__lancepart_row_number"  # a __manifest row's number, carried through the pruning query
_SPEC_ID_RE = r"^v(?P<spec>[0-9]+)\$"


# =========================================================================== scan pushdown


def _pushdown(p: _Pred) -> str | None:
    """An *inclusive* version of the source predicate for the Lance scanner: every row the filter
    accepts passes it (None: no constraint). Leaves are rendered from the literals DataFusion
    coerced to the column's own type, so Lance's planner (whose literal coercion differs from
    DataFusion's: it refuses a string for a zoned timestamp, for one) sees no ambiguity; a leaf
    that cannot be rendered is dropped from a conjunction (widening it) and makes a disjunction
    unconstrained. The exact filter is then applied by DataFusion on the scanned rows."""
    if isinstance(p, _Const):
        return None if p.value else "FALSE"
    if isinstance(p, _Cmp):
        lit = _scan_literal(p.value)
        return None if lit is None else f"{lance_ident(p.column)} {p.op} {lit}"
    if isinstance(p, _In):
        if p.negated and p.has_null:
            return "FALSE"  # x NOT IN (..., NULL) is never TRUE
        lits = [_scan_literal(v) for v in p.values]
        if not lits:
            return "FALSE" if not p.negated else None
        if any(lit is None for lit in lits):
            return None
        return f"{lance_ident(p.column)} {'NOT ' if p.negated else ''}IN ({', '.join(lits)})"  # type: ignore[arg-type]
    if isinstance(p, _IsNull):
        return f"{lance_ident(p.column)} IS {'NOT ' if p.negated else ''}NULL"
    if isinstance(p, _Like):
        if p.escape is not None or p.case_insensitive:
            return None
        return f"{lance_ident(p.column)} {'NOT ' if p.negated else ''}LIKE {_sql_string(p.pattern)}"
    if isinstance(p, _And):
        parts = [x for x in (_pushdown(i) for i in p.items) if x is not None]
        return None if not parts else " AND ".join(f"({x})" for x in parts)
    if isinstance(p, _Or):
        parts = [_pushdown(i) for i in p.items]
        return None if any(x is None for x in parts) else " OR ".join(f"({x})" for x in parts)
    return None  # _Unknown


def _scan_literal(s: pa.Scalar) -> str | None:
    """A literal Lance's scanner reads as exactly ``s``: integers, finite floats, strings, dates
    and timestamps; None for anything else."""
    t = s.type
    if pa.types.is_floating(t) and not math.isfinite(float(s.as_py())):
        return None
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or _is_string(t) or pa.types.is_date32(t)
            or pa.types.is_timestamp(t) or pa.types.is_boolean(t)):
        return None
    try:
        return _sql_literal(s)
    except InvalidArgumentError:
        return None


# =========================================================================== result


@dataclass(frozen=True)
class PruneResult:
    """What :func:`prune` kept.

    ``kept`` holds the ``__manifest`` table rows (every column) that may contain matching rows;
    ``pruned`` / ``kept_counts`` count table rows per spec version; ``predicates`` is the
    projected predicate of each spec version (DataFusion SQL over ``partition_field_*``);
    ``manifest_sql`` is the Appendix D query that selected them; ``residual`` is the original
    filter, still to be applied inside every partition scan.
    """

    filter: str | None
    kept: pa.Table
    pruned: dict[int, int]
    kept_counts: dict[int, int]
    predicates: dict[int, str]
    manifest_sql: str
    residual: str | None
    specs: dict[int, PartitionSpec] = field(repr=False, default_factory=dict)
    scan_filter: str | None = None  # inclusive filter pushed into each Lance scan (see _pushdown)

    @property
    def object_ids(self) -> list[str]:
        """``object_id`` of every kept table, in ``__manifest`` row order."""
        return self.kept.column("object_id").to_pylist()

    def explain(self) -> str:
        """Per spec version: the partition predicate, and how many tables were kept and pruned.

        >>> print(PruneResult("x = 1", pa.table({"object_id": pa.array([], pa.utf8())}), {1: 2},
        ...     {1: 0}, {1: "FALSE"}, "SELECT ...", "x = 1").explain())  # doctest: +NORMALIZE_WHITESPACE
        filter: x = 1
        v1: kept 0 of 2 partition tables, pruned 2
          partition predicate: FALSE
        pushed into each Lance scan: (none)
        residual (applied exactly, by DataFusion, to the scanned rows): x = 1
        manifest query:
          SELECT ...
        """
        lines = [f"filter: {self.filter if self.filter is not None else '(none)'}"]
        for sid in sorted(set(self.pruned) | set(self.kept_counts) | set(self.predicates)):
            kept, pruned = self.kept_counts.get(sid, 0), self.pruned.get(sid, 0)
            spec = self.specs.get(sid)
            fields = ""
            if spec is not None:
                fields = " [" + ", ".join(
                    f"{f.field_id}={f.transform if f.transform else repr(f.expression)}"
                    f"({','.join(map(str, f.source_ids))})" for f in spec.fields
                ) + "]"
            label = f"v{sid}" if sid >= 0 else "unknown spec versions"
            lines.append(f"{label}{fields}: kept {kept} of {kept + pruned} partition tables, pruned {pruned}")
            lines.append(f"  partition predicate: {self.predicates.get(sid, 'TRUE')}")
        lines.append(f"pushed into each Lance scan: {self.scan_filter if self.scan_filter else '(none)'}")
        lines.append(f"residual (applied exactly, by DataFusion, to the scanned rows): "
                     f"{self.residual if self.residual else '(none)'}")
        lines.append("manifest query:")
        lines.extend("  " + line for line in self.manifest_sql.splitlines())
        return "\n".join(lines)


# =========================================================================== entry point


def prune(
    filter: str | None,
    schema: pa.Schema,
    specs: Mapping[int, PartitionSpec],
    manifest_rows: pa.Table,
) -> PruneResult:
    """The partition tables of ``manifest_rows`` that may hold rows matching ``filter``.

    ``filter`` is a SQL boolean expression over the namespace's source columns (DataFusion
    syntax, e.g. ``event_date = DATE '2025-12-10' AND country IN ('US', 'FR')``); ``schema`` the
    namespace schema (with ``lance:field_id``); ``specs`` every spec version; ``manifest_rows``
    the ``__manifest`` rows (``object_id``, ``object_type`` and the ``partition_field_*``
    columns; ``location`` / ``read_*`` are selected when present). A table whose spec version is
    not in ``specs`` is always kept. Never drops a table that has a matching row.

    Raises :class:`InvalidArgumentError` naming the filter (and the column, when unknown) when
    DataFusion cannot plan it as a boolean expression over ``schema``.

    >>> result = prune("event_date = '2025-12-10' AND country = 'US'", ns.schema, ns.specs, ns.snapshot().rows)
    >>> result.kept_counts, result.pruned           # per spec version: tables kept, tables pruned
    ({1: 1}, {1: 2})
    >>> print(result.manifest_sql)
    SELECT object_id, location, read_version, read_branch, read_tag
    FROM __manifest
    WHERE object_type = 'table'
      AND (
        (object_id LIKE 'v1$%'
          AND partition_field_event_date = DATE '2025-12-10')
      )
    """
    specs = dict(sorted(specs.items()))
    if filter is not None and not filter.strip():
        filter = None
    pred = _TRUE if filter is None else _parse(filter, schema)

    rows = manifest_rows
    columns = set(rows.column_names)
    for needed in ("object_id", "object_type"):
        if needed not in columns:
            raise InvalidArgumentError(f"manifest_rows has no {needed!r} column (columns: {rows.column_names})")
    predicates: dict[int, _P] = {}
    for sid, spec in specs.items():
        predicates[sid] = _SpecProjector(spec, schema, columns).project(pred) if filter is not None else _PTRUE

    is_table = pc.fill_null(pc.equal(rows.column("object_type"), "table"), False)
    totals = _spec_totals(rows.column("object_id"), specs, is_table)
    known = {str(sid) for sid in specs}
    # "" is a table outside every v<N> namespace (a root-level table, e.g. a migrated V1 one): not a partition
    has_unknown = any(key not in known and key != "" for key in totals)

    sql = _manifest_sql(predicates, [c for c in _SELECT_COLUMNS if c in columns], has_unknown)
    kept = _run(sql, rows)
    kept_counts, pruned = _kept_and_pruned(specs, totals, kept, has_unknown)
    return PruneResult(
        filter=filter,
        kept=kept,
        pruned=pruned,
        kept_counts=kept_counts,
        predicates={sid: p.sql() for sid, p in predicates.items()},
        manifest_sql=sql,
        residual=filter,
        specs=specs,
        scan_filter=None if filter is None else _pushdown(pred),
    )


def _kept_and_pruned(specs: Mapping[int, PartitionSpec], totals: Mapping[str, int], kept: pa.Table,
                     has_unknown: bool) -> tuple[dict[int, int], dict[int, int]]:
    """Per spec version, the tables ``kept`` holds and the tables pruned out of ``totals``; with
    ``has_unknown``, -1 counts the tables of spec versions not in ``specs`` (always kept)."""
    known = {str(sid) for sid in specs}
    kept_totals = _spec_totals(kept.column("object_id"), specs)
    kept_counts = {sid: kept_totals.get(str(sid), 0) for sid in specs}
    pruned = {sid: totals.get(str(sid), 0) - kept_counts[sid] for sid in specs}
    if has_unknown:  # -1: tables of spec versions not in ``specs`` (always kept)
        kept_counts[-1] = sum(n for key, n in kept_totals.items() if key not in known)
        pruned[-1] = 0
    return kept_counts, pruned


def _spec_totals(object_ids: pa.Array | pa.ChunkedArray, specs: Iterable[int],
                 where: pa.Array | pa.ChunkedArray | None = None) -> dict[str, int]:
    """How many of ``object_ids`` (those ``where`` is true, when given) each ``<N>`` of
    ``v<N>$...`` has ("" for none): a prefix test per known spec version, the regex of
    :func:`_spec_ids` only for the ids none of them has. ``where`` saves copying the ids out.

    >>> ids = pa.array(["v1$a", "v1$b", "v2$c", "v1", "t"])
    >>> _spec_totals(ids, [1]), _spec_totals(ids, [1, 2], pa.array([True, False, True, False, True]))
    ({'1': 2, '2': 1, '': 2}, {'1': 1, '2': 1, '': 1})
    """
    out: dict[str, int] = {}
    known = None
    total = len(object_ids) if where is None else (pc.sum(where).as_py() or 0)
    for sid in specs:
        hit = pc.starts_with(object_ids, f"v{sid}$")
        if where is not None:
            hit = pc.and_(hit, where)
        n = pc.sum(hit).as_py() or 0
        if n:
            out[str(sid)] = n
        known = hit if known is None else pc.or_(known, hit)
    if sum(out.values()) < total:
        rest_mask = None if known is None else pc.invert(pc.fill_null(known, False))
        if where is not None:
            rest_mask = where if rest_mask is None else pc.and_(rest_mask, where)
        rest = object_ids if rest_mask is None else object_ids.filter(rest_mask)
        for key, n in _counts(_spec_ids(rest)).items():
            out[key] = out.get(key, 0) + n
    return out


def _spec_ids(object_ids: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The ``<N>`` of ``v<N>$...`` per object_id ("" when it has none)."""
    if len(object_ids) == 0:
        return pa.array([], pa.utf8())
    return pc.fill_null(pc.struct_field(pc.extract_regex(object_ids, _SPEC_ID_RE), [0]), "")


def _counts(spec_ids: pa.Array | pa.ChunkedArray) -> dict[str, int]:
    if len(spec_ids) == 0:
        return {}
    vc = pc.value_counts(spec_ids)
    return dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True))


def _manifest_sql(predicates: Mapping[int, _P], select: Sequence[str], has_unknown: bool) -> str:
    """The Appendix D query: one ``object_id LIKE 'v<N>$%'`` branch per spec version."""
    branches = []
    for sid, p in predicates.items():
        if p == _PFALSE:
            continue
        conds = [f"object_id LIKE 'v{sid}$%'"]
        if p != _PTRUE:
            conds.extend(i.sql() if not isinstance(i, _POr) else f"({i.sql()})"
                         for i in (p.items if isinstance(p, _PAnd) else (p,)))
        branches.append("(" + "\n      AND ".join(conds) + ")")
    if has_unknown:  # tables of a spec version we do not know: keep
        known = " OR ".join(f"object_id LIKE 'v{sid}$%'" for sid in predicates) or "FALSE"
        branches.append(f"(object_id ~ '^v[0-9]+\\$' AND NOT ({known}))")
    head = f"SELECT {', '.join(select)}\nFROM {_MANIFEST}\nWHERE object_type = 'table'"
    if not branches:
        return head + "\n  AND FALSE"
    return head + "\n  AND (\n    " + "\n    OR\n    ".join(branches) + "\n  )"


def _run(sql: str, rows: pa.Table) -> pa.Table:
    """Run the manifest query with DataFusion; the kept rows of ``rows`` (every column, row order)."""
    wanted = [c for c in rows.column_names if c in ("object_id", "object_type", *_SELECT_COLUMNS)
              or c.startswith("partition_field_")]
    # Only flat columns go to DataFusion; list columns such as base_objects are not needed.
    sub = rows.select(wanted).append_column(_ROWNUM, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
    ctx = _new_context()
    ctx.register_record_batches(_MANIFEST, [sub.to_batches() or [pa.RecordBatch.from_pylist([], schema=sub.schema)]])
    try:  # the row numbers alone come back: the kept rows are taken from ``rows``
        out = ctx.sql(f"SELECT {_ROWNUM}\n" + sql[sql.index("\nFROM ") + 1:]).to_arrow_table()
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise InvalidArgumentError(f"the partition pruning query failed: {_short(str(e))}\n{sql}") from None
    return _take(rows, np.sort(out.column(_ROWNUM).to_numpy()))


# Kept rows up to this many are taken batch by batch: pyarrow's take of a table in many batches
# joins each column's batches first (0.5 ms at 100 000 partitions, for one row).
_SMALL_TAKE = 512


def _take(rows: pa.Table, index: np.ndarray) -> pa.Table:
    """``rows.take(index)`` (``index`` sorted), batch by batch when few rows are taken.

    >>> t = pa.Table.from_batches([pa.record_batch({"a": [0, 1]}), pa.record_batch({"a": [2, 3, 4]})])
    >>> _take(t, np.array([1, 3, 4])).column("a").to_pylist(), _take(t, np.array([], np.int64))["a"].to_pylist()
    ([1, 3, 4], [])
    """
    if len(index) > _SMALL_TAKE or rows.num_rows == 0:
        return rows.take(index)
    batches = rows.to_batches()
    starts = np.cumsum([0] + [b.num_rows for b in batches])
    which = np.searchsorted(starts, index, side="right") - 1
    taken = [batches[k].take(pa.array(index[which == k] - starts[k])) for k in np.unique(which)]
    return pa.Table.from_batches(taken, schema=rows.schema)


def matching_tables(filter: str, schema: pa.Schema, specs: dict[int, PartitionSpec], rows: pa.Table) -> list[int]:
    """Row numbers of the partition tables of ``rows`` (``__manifest`` rows) that ``filter``
    selects entirely, by strict projection; :class:`InvalidFilterError` where that cannot be
    decided (module docstring)."""
    from lancepart.read.snapshot import apply_filter

    inclusive = prune(filter, schema, specs, rows)  # validates the filter; names unknown columns
    kept = set(inclusive.object_ids)
    columns = filter_columns(filter, schema)
    object_ids = rows.column("object_id")
    out: list[int] = []
    for spec_id, spec in sorted(specs.items()):
        idx = _spec_rows(rows, spec_id)
        if not len(idx):
            continue
        strict = _strict_sources(spec, schema)
        other = [c for c in columns if c not in strict]
        if other:
            maybe = [i for i in idx.tolist() if object_ids[i].as_py() in kept]
            if maybe:
                raise InvalidFilterError(
                    f"filter {filter!r}: column {other[0]!r} is not an identity partition field of spec v{spec_id}, "
                    f"so whether {len(maybe)} of its partitions match entirely cannot be decided; drop_partitions "
                    f"takes filters over identity-partitioned columns only "
                    f"({sorted(strict) or 'spec v' + str(spec_id) + ' has none'})")
            continue
        sub = rows.take(pa.array(idx, pa.int64()))
        cols = [pa.array(idx, pa.int64())]
        fields = [pa.field(_ROW, pa.int64())]
        for name in columns:
            f = strict[name]
            column = f.projection.strict_project(f.column)
            src = schema.field(name)
            value = sub.column(column) if column in sub.column_names else pa.nulls(len(idx), src.type)
            cols.append(value.cast(src.type))
            fields.append(pa.field(name, src.type))
        table = pa.Table.from_arrays(cols, schema=pa.schema(fields))
        try:
            out.extend(apply_filter(table, filter).column(_ROW).to_pylist())
        except InvalidArgumentError as e:
            raise InvalidFilterError(str(e)) from None
    return sorted(out)


def entire_tables(filter: str, schema: pa.Schema, specs: Mapping[int, PartitionSpec], pins: pa.Table) -> set[str]:
    """The partition tables whose every row matches ``filter``, by the strict projection
    drop_partitions uses (:func:`matching_tables`: the filter names only
    identity-partitioned columns and is TRUE on the partition values); empty where that cannot be
    decided (those tables are read)."""
    try:
        picked = matching_tables(filter, schema, dict(specs), pins)
    except InvalidFilterError:  # a column that is not identity-partitioned: decided row by row instead
        return set()
    return set(pins.column("object_id").take(pa.array(picked, pa.int64())).to_pylist()) if picked else set()
