"""Projection of a filter over source columns onto the ``partition_field_*`` columns of one spec
version, the way pyiceberg's ``Transform.project`` does it: a small visitor over the bound filter
(:mod:`lancepart.read.predicates`) whose leaves ask each partition field "which partition values
can a row satisfying this predicate have?". The answer is always *inclusive*: a partition is
dropped only when no row of it can match.

Partition values of literals are computed with the write path's own transforms
(:func:`lancepart.transforms.transform_for` ``.apply``), so ``bucket``, ``truncate``,
``year``/``month``/``day``/``hour`` and expression fields prune with exactly the semantics the
data was written with (docs/design.md §1-§3: time transforms are ``date_part`` values, not
ordinals since the epoch, so only ``year`` is monotonic).

What is projected (anything else keeps the partition):

=================  ==============================================================================
identity           every comparison, ``IN`` / ``NOT IN``, ``IS [NOT] NULL``, ``[NOT] [I]LIKE``: exact
bucket             ``=``, ``IN``, ``IS NULL`` (hash of the literals); a bounded integer/date range of
                   at most 4096 values is enumerated; ``!=``-like predicates give ``IS NOT NULL``
multi_bucket       only when *every* source is constrained by ``=`` / ``IN`` / ``IS NULL`` in the
                   same conjunction (hash of the cartesian product, at most 4096 tuples)
truncate           ``=``, ``IN``, ``IS NULL``, ranges (truncate is monotonic), ``LIKE 'abc%'``
                   (``= left(prefix, W)`` when the prefix has at least W code points, else
                   ``starts_with``)
year               ``=``, ``IN``, ``IS NULL``, ranges (monotonic; ``OR pf IS NULL`` where an
                   out-of-range instant can make the year NULL; named zones widen by two days)
month, day, hour   ``=``, ``IN``, ``IS NULL``; a bounded range (both ends in one conjunction) shorter
                   than a year / 31 days / 24 hours is enumerated (not for named time zones)
expression         ``=``, ``IN``, ``IS NULL`` by evaluating the expression on the literals (all
                   sources constrained for multi-column expressions); bounded integer/date ranges
                   of at most 4096 values are enumerated
=================  ==============================================================================
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from lancepart.read.predicates import (
    _P,
    _PER_SECOND,
    _PFALSE,
    _PTRUE,
    _And,
    _Cmp,
    _Const,
    _from_int,
    _In,
    _is_string,
    _IsNull,
    _Like,
    _one_of,
    _Or,
    _pand,
    _PCmp,
    _PIn,
    _PIsNull,
    _PLike,
    _POr,
    _por,
    _Pred,
    _PStartsWith,
    _storage,
    _to_int,
    _Unknown,
    _value_type,
)
from lancepart.spec import PartitionField, PartitionSpec, field_id_of
from lancepart.transforms import transform_for

__all__ = ["MAX_POINTS"]

#: the most literal values (or tuples, or enumerated range values) a field's projection evaluates
MAX_POINTS = 4096

_FIXED_OFFSET_RE = re.compile(r"^([+-])(\d\d)(?::?(\d\d))?$")
# Largest gap, in seconds, by which a named zone's wall clock ever jumps: enough to widen a year
# bound so that no jump across New Year's midnight can make ``year`` look non-monotonic.
_ZONE_SLACK_SECONDS = 2 * 86_400


# =========================================================================== projection


def _like_prefix(pattern: str, escape: str | None) -> tuple[str, bool]:
    """(literal prefix every match starts with, whether the pattern is that literal exactly).
    Stops at the first wildcard, escape character or backslash (conservative: shorter prefix)."""
    stop = {"%", "_", "\\"} | ({escape} if escape else set())
    for i, ch in enumerate(pattern):
        if ch in stop:
            return pattern[:i], False
    return pattern, True


def _fixed_zone(tz: str | None) -> bool:
    return tz is None or tz in ("UTC", "Etc/UTC") or _FIXED_OFFSET_RE.match(tz) is not None


@dataclass
class _Field:
    """One partition field as the projection sees it."""

    field: PartitionField
    kind: str  # identity, bucket, multi_bucket, truncate, year, month, day, hour, expression
    sources: list[tuple[str | None, pa.DataType]]  # (column name or None when removed, type)

    @property
    def column(self) -> str:
        return self.field.column_name

    @property
    def single(self) -> tuple[str, pa.DataType] | None:
        if len(self.sources) == 1 and self.sources[0][0] is not None:
            return self.sources[0]  # type: ignore[return-value]
        return None

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array | None:
        """Partition values of source values, exactly as the write path computes them."""
        try:
            out = transform_for(self.field).apply(list(arrays))
            if out.type != self.field.result_type:
                out = out.cast(self.field.result_type)
            return out
        except Exception:  # a literal the write path could not have written: keep everything
            return None

    def image(self, scalars: Sequence[pa.Scalar | None]) -> _P:
        """``column IN t(scalars)`` for a single-source field (None stands for NULL)."""
        _, t = self.single  # type: ignore[misc]
        arr = _array_of(scalars, t)
        out = None if arr is None else self.apply([arr])
        return _PTRUE if out is None else _one_of(self.column, out)

    def time_zone_fixed(self) -> bool:
        t = self.sources[0][1]
        return not pa.types.is_timestamp(t) or _fixed_zone(t.tz)


def _array_of(scalars: Sequence[pa.Scalar | None], t: pa.DataType) -> pa.Array | None:
    """Source values as an array of type ``t`` (exactly: dates and timestamps by their integers)."""
    try:
        storage = _storage(t)
        if storage is not None and storage != t:
            ints = [None if s is None else _to_int(s) for s in scalars]
            return pa.array(ints, storage).view(t)
        return pa.array([None if s is None else s.as_py() for s in scalars], t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
        return None


def _step(s: pa.Scalar, delta: int) -> pa.Scalar | None:
    """The integer-like value ``delta`` units after ``s``, or None when it leaves the type."""
    return _from_int(_to_int(s) + delta, s.type)


class _SpecProjector:
    """Projects source predicates onto the ``partition_field_*`` columns of one spec version."""

    def __init__(self, spec: PartitionSpec, schema: pa.Schema, columns: Iterable[str]) -> None:
        top = {fid: f for f in schema if (fid := field_id_of(f)) is not None}
        have = set(columns)
        self.fields: list[_Field] = []
        for pf in spec.fields:
            if pf.column_name not in have:
                continue  # no manifest column to filter on
            kind = "expression" if pf.expression is not None else pf.transform.type  # type: ignore[union-attr]
            sources = [
                (top[s].name, _value_type(top[s].type)) if s in top else (None, pa.null()) for s in pf.source_ids
            ]
            self.fields.append(_Field(pf, kind, sources))
        self.by_column: dict[str, list[_Field]] = {}
        for f in self.fields:
            if (single := f.single) is not None:
                self.by_column.setdefault(single[0], []).append(f)

    # ---------------------------------------------------------------- visitor
    def project(self, p: _Pred) -> _P:
        if isinstance(p, _Const):
            return _PTRUE if p.value else _PFALSE
        if isinstance(p, _Unknown):
            return _PTRUE
        if isinstance(p, _And):
            return self.project_and(p.items)
        if isinstance(p, _Or):
            return _por(self.project(i) for i in p.items)
        return _pand(self.leaf(f, p) for f in self.by_column.get(p.column, ()))  # type: ignore[attr-defined]

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
                parts.append(self.multi_points(f, points))
            elif f.kind == "year" and f.single[0] in bounds:
                parts = self.year_interval(f, bounds[f.single[0]], parts)
            elif f.kind not in ("identity", "truncate") and f.single[0] in bounds:
                parts.append(self.interval(f, bounds[f.single[0]]))
        return _pand(parts)

    def year_interval(self, f: _Field, cmps: list[tuple[str, pa.Scalar]], parts: list[_P]) -> list[_P]:
        """Both ends of a range known: the instants between them are in range, so their year is
        never NULL and the leaves' ``OR partition_field_<year> IS NULL`` can go."""
        ends = [self.range_leaf(f, op, v) for op, v in cmps]
        bounded = [_strip_is_null(e, f.column) for e in ends]
        if not (any(b.op == ">=" for b in bounded if isinstance(b, _PCmp))
                and any(b.op == "<=" for b in bounded if isinstance(b, _PCmp))):
            return parts
        return [p for p in parts if p not in ends] + bounded

    # ---------------------------------------------------------------- leaves
    def leaf(self, f: _Field, p: _Pred) -> _P:
        col = f.column
        if f.kind == "identity":  # partition value == source value: every predicate is exact
            if isinstance(p, _Cmp):
                return _PIn(col, (p.value,)) if p.op == "=" else _PCmp(col, p.op, p.value)
            if isinstance(p, _In):
                if p.negated:
                    return _PFALSE if p.has_null else _PIn(col, p.values, negated=True)
                return _PIn(col, p.values)
            if isinstance(p, _IsNull):
                return _PIsNull(col, p.negated)
            if isinstance(p, _Like):
                return _PLike(col, p.pattern, p.escape, p.negated, p.case_insensitive)
            return _PTRUE
        not_null = _PIsNull(col, True) if f.kind in ("bucket", "truncate") else _PTRUE
        if isinstance(p, _Cmp):
            if p.op == "=":
                return f.image([p.value])
            if p.op == "!=":
                return not_null
            return _pand([not_null, self.range_leaf(f, p.op, p.value)])
        if isinstance(p, _In):
            if p.negated:
                return _PFALSE if p.has_null else not_null
            return f.image(list(p.values)) if len(p.values) <= MAX_POINTS else not_null
        if isinstance(p, _IsNull):
            return not_null if p.negated else f.image([None])
        if isinstance(p, _Like):
            if p.negated or p.case_insensitive:
                return not_null
            prefix, exact = _like_prefix(p.pattern, p.escape)
            if exact:
                return f.image([pa.scalar(prefix, f.sources[0][1])])
            if f.kind == "truncate" and _is_string(f.sources[0][1]):
                w = f.field.transform.width  # type: ignore[union-attr]
                if len(prefix) >= w:
                    return f.image([pa.scalar(prefix, f.sources[0][1])])
                return _PStartsWith(col, prefix) if prefix else not_null
            return not_null
        return _PTRUE

    def range_leaf(self, f: _Field, op: str, value: pa.Scalar) -> _P:
        """One-sided bound through a monotonic (non-decreasing) transform: truncate and year."""
        if f.kind not in ("truncate", "year"):
            return _PTRUE
        t = value.type
        if op in ("<", ">") and _storage(t) is not None:  # x < v  <=>  x <= v - 1 on integers
            stepped = _step(value, -1 if op == "<" else 1)
            if stepped is None:
                return _PFALSE
            op, value = op + "=", stepped
        op = "<=" if op in ("<", "<=") else ">="
        if f.kind == "year" and not f.time_zone_fixed():
            # Named zones: local time may step back across New Year's midnight; widen the bound.
            slack = _ZONE_SLACK_SECONDS * _PER_SECOND[t.unit]
            widened = _step(value, slack if op == "<=" else -slack)
            if widened is None:
                return _PTRUE
            value = widened
        arr = _array_of([value], f.sources[0][1])
        out = None if arr is None else f.apply([arr])
        if out is None or not out[0].is_valid:
            return _PTRUE
        bound: _P = _PCmp(f.column, op, out[0])
        if f.kind == "year" and not (pa.types.is_timestamp(t) and t.unit == "ns"):
            # Instants beyond chrono's range (year +-262143) have a NULL year; only ns cannot get there.
            bound = _por([bound, _PIsNull(f.column, False)])
        return bound

    def interval(self, f: _Field, cmps: list[tuple[str, pa.Scalar]]) -> _P:
        """Both ends of a range on the source of a non-monotonic field: enumerate its image."""
        _, t = f.single  # type: ignore[misc]
        if _storage(t) is None:
            return _PTRUE
        lo = hi = None
        for op, v in cmps:
            k = _to_int(v)
            if op in (">", ">="):
                k = k + 1 if op == ">" else k
                lo = k if lo is None else max(lo, k)
            else:
                k = k - 1 if op == "<" else k
                hi = k if hi is None else min(hi, k)
        if lo is None or hi is None:
            return _PTRUE
        if lo > hi:
            return _PFALSE
        span = hi - lo
        if f.kind in ("month", "day", "hour"):
            if not f.time_zone_fixed():
                return _PTRUE
            per_day = 1 if pa.types.is_date32(t) else 86_400 * _PER_SECOND[t.unit] if pa.types.is_timestamp(t) else 0
            if per_day == 0:
                return _PTRUE
            if f.kind == "hour":
                step, limit = per_day // 24, per_day
                if step == 0:
                    return _PTRUE
            else:
                step, limit = per_day, per_day * (31 if f.kind == "day" else 366)
            if span >= limit:
                return _PTRUE
        else:  # bucket, expression: only discrete domains (ints and dates), value by value
            if not (pa.types.is_integer(t) or pa.types.is_date32(t)) or span >= MAX_POINTS:
                return _PTRUE
            step = 1
        samples = list(range(lo, hi + 1, step))
        if samples[-1] != hi:
            samples.append(hi)
        arr = pa.array(samples, _storage(t))
        out = f.apply([arr if _storage(t) == t else arr.view(t)])
        return _PTRUE if out is None else _one_of(f.column, out)

    def multi_points(self, f: _Field, points: dict[str, list[pa.Scalar | None]]) -> _P:
        """A multi-source field when every source is pinned to a few values (IS NULL included)."""
        lists: list[list[pa.Scalar | None]] = []
        for name, _t in f.sources:
            if name is None:
                # A removed column reads as NULL now, but older partitions were written with values.
                return _PTRUE
            if name in points:
                lists.append(points[name])
            else:
                return _PTRUE
        if math.prod(len(v) for v in lists) > MAX_POINTS:
            return _PTRUE
        combos = list(itertools.product(*lists))
        arrays = []
        for i, (_name, t) in enumerate(f.sources):
            arr = _array_of([c[i] for c in combos], t)
            if arr is None:
                return _PTRUE
            arrays.append(arr)
        out = f.apply(arrays)
        return _PTRUE if out is None else _one_of(f.column, out)


def _strip_is_null(p: _P, column: str) -> _P:
    """``c >= v OR c IS NULL`` -> ``c >= v``."""
    if isinstance(p, _POr) and _PIsNull(column, False) in p.items:
        return _por(i for i in p.items if i != _PIsNull(column, False))
    return p


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
