"""The visitors over a partition spec, side by side (as pyiceberg's ``expressions/visitors.py``):
the *inclusive* one (:class:`_SpecProjector`: which partition values can a row satisfying the
filter have) and the *strict* one (:func:`_strict_sources`: which partition columns hold a
source column's value exactly, so that a filter TRUE on the partition values is TRUE on every
row). Each leaf asks the field's transform (:mod:`lancepart.model.projection`, owned by the
classes of :mod:`lancepart.model.transforms`). The queries that run them over ``__manifest`` are
:mod:`lancepart.read.manifest_query`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import InvalidSpecError
from lancepart.model import ids as _ids
from lancepart.model.predicates import (
    _P,
    _PFALSE,
    _PTRUE,
    _And,
    _Cmp,
    _Const,
    _In,
    _IsNull,
    _Like,
    _Or,
    _pand,
    _por,
    _Pred,
    _Unknown,
    _value_type,
)
from lancepart.model.projection import _ROW, MAX_POINTS, _Field, _like_prefix  # noqa: F401
from lancepart.model.spec import PartitionSpec, field_id_of

# =========================================================================== inclusive visitor


def _fields(spec: PartitionSpec, schema: pa.Schema, columns: Iterable[str] | None) -> list[_Field]:
    """The fields of ``spec`` with a ``__manifest`` column among ``columns`` (None: every field)."""
    from lancepart.model.transforms import transform_for

    top = {fid: f for f in schema if (fid := field_id_of(f)) is not None}
    have = None if columns is None else set(columns)
    out: list[_Field] = []
    for pf in spec.fields:
        if have is not None and pf.column_name not in have:
            continue  # no manifest column to filter on
        try:
            tf = transform_for(pf)
        except InvalidSpecError:
            tf = None
        sources = [(top[s].name, _value_type(top[s].type)) if s in top else (None, pa.null()) for s in pf.source_ids]
        out.append(_Field(pf, tf, sources))
    return out


class _SpecProjector:
    """Projects source predicates onto the ``partition_field_*`` columns of one spec version."""

    def __init__(self, spec: PartitionSpec, schema: pa.Schema, columns: Iterable[str]) -> None:
        self.fields = _fields(spec, schema, columns)
        self.by_column: dict[str, list[_Field]] = {}
        for f in self.fields:
            if (single := f.single) is not None:
                self.by_column.setdefault(single[0], []).append(f)

    def project(self, p: _Pred) -> _P:
        if isinstance(p, _Const):
            return _PTRUE if p.value else _PFALSE
        if isinstance(p, _Unknown):
            return _PTRUE
        if isinstance(p, _And):
            return self.project_and(p.items)
        if isinstance(p, _Or):
            return _por(self.project(i) for i in p.items)
        return _pand(f.projection.project(f, p) for f in self.by_column.get(p.column, ()))  # type: ignore[attr-defined]

    def project_and(self, items: Sequence[_Pred]) -> _P:
        parts = [self.project(i) for i in items]
        if any(p == _PFALSE for p in parts):
            return _PFALSE
        # Conjunction-level facts: points (=, IN, IS NULL, OR of those) and two-sided bounds.
        points: dict[str, list[pa.Scalar | None]] = {}
        bounds: dict[str, list[tuple[str, pa.Scalar]]] = {}
        for item in items:
            for col, vals in _points_of(item).items():
                points[col] = vals if col not in points else _intersect(points[col], vals)
            if isinstance(item, _Cmp) and item.op in ("<", "<=", ">", ">="):
                bounds.setdefault(item.column, []).append((item.op, item.value))
        if any(not v for v in points.values()):
            return _PFALSE
        for f in self.fields:
            if f.single is None:
                parts.append(f.projection.project_tuples(f, points))
            elif f.single[0] in bounds:
                parts = f.projection.project_range(f, bounds[f.single[0]], parts)
        return _pand(parts)


def _points_of(p: _Pred) -> dict[str, list[pa.Scalar | None]]:
    """Columns a predicate pins to a finite set of values (None = NULL) whenever it is TRUE."""
    if isinstance(p, _Cmp) and p.op == "=":
        return {p.column: [p.value]}
    if isinstance(p, _In) and not p.negated and len(p.values) <= MAX_POINTS:
        return {p.column: list(p.values)}
    if isinstance(p, _IsNull) and not p.negated:
        return {p.column: [None]}
    if isinstance(p, _Like) and not p.negated and not p.case_insensitive:
        prefix, exact = _like_prefix(p.pattern, p.escape)
        return {p.column: [pa.scalar(prefix)]} if exact else {}
    if isinstance(p, _Or):
        subs = [_points_of(i) for i in p.items]
        cols = {c for s in subs for c in s}
        if len(cols) == 1 and all(len(s) == 1 for s in subs):
            (col,) = cols
            out: list[pa.Scalar | None] = []
            for s in subs:
                out.extend(s[col])
            return {col: out} if len(out) <= MAX_POINTS else {}
    if isinstance(p, _And):
        merged: dict[str, list[pa.Scalar | None]] = {}
        for i in p.items:
            for col, vals in _points_of(i).items():
                merged[col] = vals if col not in merged else _intersect(merged[col], vals)
        return merged
    return {}


def _same(a: pa.Scalar | None, b: pa.Scalar | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return a.equals(b.cast(a.type)) if a.type != b.type else a.equals(b)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False


def _intersect(a: list[pa.Scalar | None], b: list[pa.Scalar | None]) -> list[pa.Scalar | None]:
    if len(a) * len(b) > MAX_POINTS * 4:
        return a if len(a) <= len(b) else b  # too large to intersect cheaply: either is a superset
    return [x for x in a if any(_same(x, y) for y in b)]


# =========================================================================== strict visitor


def _strict_sources(spec: PartitionSpec, schema: pa.Schema) -> dict[str, _Field]:
    """Source column name -> the first field of ``spec`` with a strict projection of it."""
    out: dict[str, _Field] = {}
    for f in _fields(spec, schema, None):
        if (single := f.single) is not None and single[0] not in out:
            if f.projection.strict_project(f.column) is not None:
                out[single[0]] = f
    return out


def _spec_rows(rows: pa.Table, spec_id: int) -> np.ndarray:
    """Row numbers of the partition table rows of spec version ``spec_id``."""
    is_table = pc.equal(rows.column("object_type"), "table")
    prefix = pc.starts_with(rows.column("object_id"), f"v{spec_id}{_ids.DELIMITER}")
    suffix = pc.ends_with(rows.column("object_id"), f"{_ids.DELIMITER}{_ids.TABLE_NAME}")
    mask = pc.and_(pc.and_(is_table, prefix), suffix)
    return np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))


