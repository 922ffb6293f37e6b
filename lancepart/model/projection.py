"""Projection of a filter over source columns onto partition values: inclusive and strict, side by
side.

**Inclusive** (:class:`_SpecProjector`, what :func:`lancepart.read.manifest_query.prune` keeps): a small
visitor over the bound filter (:mod:`lancepart.model.predicates`) whose leaves ask each partition
field "which partition values can a row satisfying this predicate have?". A partition is dropped
only when no row of it can match, so the original filter is still applied inside each partition
scan. **Strict** (:func:`matching_tables`, what drop_partitions, delete's whole-table shortcut and
merge rely on): "does *every* row of this partition match?", answered only where it is certain.

Each transform of :mod:`lancepart.model.transforms` owns both projections, the way pyiceberg's
``Transform.project`` / ``Transform.strict_project`` do: every transform class inherits one of
the projection classes below (:class:`Projection` and its subclasses), and the visitors call its
methods; nothing here looks at a transform's name.

=============  ==================================================================================
Projection     inclusive: :meth:`~Projection.project` (one leaf), :meth:`~Projection.project_bound`
(method)       (one-sided bound), :meth:`~Projection.project_range` (both ends in one conjunction),
               :meth:`~Projection.project_tuples` (every source pinned); strict:
               :meth:`~Projection.strict_project`
=============  ==================================================================================

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

Partition values of literals are computed with the write path's own transforms (``.apply``), so
every field prunes with exactly the semantics the data was written with (docs/design.md §1-§3:
time transforms are ``date_part`` values, not ordinals since the epoch, so only ``year`` is
monotonic).

Strict projection is by substitution: only **identity** has one (:meth:`Projection.strict_project`
names the partition column that holds, for every row of the partition, the source column's
value, NULL-aware). When every column a filter names has such a field in a spec version,
evaluating the filter, with DataFusion, on the partition values alone gives its result for every
row of each partition: TRUE selects the partition, FALSE or NULL does not. A spec version where a
filter column has none (a ``year``, ``bucket`` or ``truncate`` field, or no field at all) makes
:func:`lancepart.read.manifest_query.matching_tables` fail with :class:`InvalidFilterError`
naming the column, unless the inclusive projection proves that no partition of that version can hold a matching row.

>>> from lancepart.model.predicates import _parse
>>> from lancepart.model.visitors import _SpecProjector
>>> from lancepart.model.spec import PartitionSpec
>>> schema = pa.schema([pa.field("d", pa.date32(), metadata={"lance:field_id": "1"})])
>>> spec = PartitionSpec.from_json({"id": 1, "fields": [{"field_id": "y", "source_ids": [1],
...     "transform": {"type": "year"}, "result_type": {"type": "int32"}}]})
>>> p = _parse("d >= DATE '2024-03-01' AND d < DATE '2025-02-01'", schema)
>>> _SpecProjector(spec, schema, ["partition_field_y"]).project(p).sql()
'partition_field_y >= 2024 AND partition_field_y <= 2025'
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from lancepart.model.predicates import (
    _P,
    _PER_SECOND,
    _PFALSE,
    _PTRUE,
    _Cmp,
    _from_int,
    _In,
    _is_string,
    _IsNull,
    _Like,
    _one_of,
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
)
from lancepart.model.spec import PartitionField

__all__ = ["MAX_POINTS", "Projection"]

#: the most literal values (or tuples, or enumerated range values) a field's projection evaluates
MAX_POINTS = 4096

_FIXED_OFFSET_RE = re.compile(r"^([+-])(\d\d)(?::?(\d\d))?$")
# Largest gap, in seconds, by which a named zone's wall clock ever jumps: enough to widen a year
# bound so that no jump across New Year's midnight can make ``year`` look non-monotonic.
_ZONE_SLACK_SECONDS = 2 * 86_400
_ROW = "__lancepart_manifest_row"


# =========================================================================== fields


@dataclass
class _Field:
    """One partition field as the projection sees it."""

    field: PartitionField
    transform: Any  # None: a transform this version does not know (keeps everything)
    sources: list[tuple[str | None, pa.DataType]]  # (column name or None when removed, type)

    @property
    def column(self) -> str:
        return self.field.column_name

    @property
    def projection(self) -> Projection:
        return self.transform if self.transform is not None else _NO_PROJECTION

    @property
    def single(self) -> tuple[str, pa.DataType] | None:
        if len(self.sources) == 1 and self.sources[0][0] is not None:
            return self.sources[0]  # type: ignore[return-value]
        return None

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array | None:
        """Partition values of source values, exactly as the write path computes them."""
        if self.transform is None:
            return None
        try:
            out = self.transform.apply(list(arrays))
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


def _fixed_zone(tz: str | None) -> bool:
    return tz is None or tz in ("UTC", "Etc/UTC") or _FIXED_OFFSET_RE.match(tz) is not None


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


def _like_prefix(pattern: str, escape: str | None) -> tuple[str, bool]:
    """(literal prefix every match starts with, whether the pattern is that literal exactly).
    Stops at the first wildcard, escape character or backslash (conservative: shorter prefix)."""
    stop = {"%", "_", "\\"} | ({escape} if escape else set())
    for i, ch in enumerate(pattern):
        if ch in stop:
            return pattern[:i], False
    return pattern, True


# =========================================================================== per-transform projections


class Projection:
    """How a transform projects predicates on its source columns onto its partition values.

    Every transform class inherits this class or one of its subclasses below. The defaults are
    those of a transform about which nothing is known but its values: ``=`` / ``IN`` / ``IS NULL``
    map through :meth:`_Field.image` (the transform applied to the literals), anything else keeps
    every partition, and there is no strict projection.
    """

    #: the partition value is NULL exactly when the source value is (bucket, truncate): a
    #: predicate that no NULL satisfies then projects to ``IS NOT NULL``
    null_preserving: ClassVar[bool] = False

    # ---------------------------------------------------------------- inclusive
    def project(self, f: _Field, p: _Pred) -> _P:
        """Inclusive projection of one leaf over the field's single source column."""
        not_null = _PIsNull(f.column, True) if self.null_preserving else _PTRUE
        if isinstance(p, _Cmp):
            if p.op == "=":
                return f.image([p.value])
            if p.op == "!=":
                return not_null
            return _pand([not_null, self.project_bound(f, p.op, p.value)])
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
            return self.project_prefix(f, prefix, not_null)
        return _PTRUE

    def project_bound(self, f: _Field, op: str, value: pa.Scalar) -> _P:
        """Inclusive projection of ``source op value`` (``<``, ``<=``, ``>``, ``>=``): only a
        monotonic transform bounds its values."""
        return _PTRUE

    def project_prefix(self, f: _Field, prefix: str, not_null: _P) -> _P:
        """Inclusive projection of ``source LIKE 'prefix%...'`` (a pattern that is not a literal)."""
        return not_null

    def project_range(self, f: _Field, cmps: list[tuple[str, pa.Scalar]], parts: list[_P]) -> list[_P]:
        """The conjunction's projected ``parts`` given every bound (``cmps``) it puts on the
        field's single source: both ends known can say more than each end alone."""
        return parts

    def project_tuples(self, f: _Field, points: dict[str, list[pa.Scalar | None]]) -> _P:
        """A multi-source field (or one whose source was removed) when every source is pinned to a
        few values (IS NULL included) in one conjunction: the transform of their cartesian product."""
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

    # ---------------------------------------------------------------- strict
    def strict_project(self, partition_column: str) -> str | None:
        """Strict projection: the ``__manifest`` column that holds, for every row of each
        partition, the value of the field's source column (so any filter over the source, renamed
        to it, is decided for all of the partition's rows at once), or None when there is none."""
        return None


_NO_PROJECTION = Projection()


class IdentityProjection(Projection):
    """The partition value is the source value: every predicate projects exactly, both ways."""

    def project(self, f: _Field, p: _Pred) -> _P:
        col = f.column
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

    def strict_project(self, partition_column: str) -> str | None:
        return partition_column


class _MonotonicProjection(Projection):
    """A transform that never decreases along its source (truncate, year): a one-sided bound on
    the source is the same bound on the transform of its end."""

    def project_bound(self, f: _Field, op: str, value: pa.Scalar) -> _P:
        t = value.type
        if op in ("<", ">") and _storage(t) is not None:  # x < v  <=>  x <= v - 1 on integers
            stepped = _step(value, -1 if op == "<" else 1)
            if stepped is None:
                return _PFALSE
            op, value = op + "=", stepped
        op = "<=" if op in ("<", "<=") else ">="
        widened = self._widened(f, op, value)
        if widened is None:
            return _PTRUE
        arr = _array_of([widened], f.sources[0][1])
        out = None if arr is None else f.apply([arr])
        if out is None or not out[0].is_valid:
            return _PTRUE
        return self._bounded(f, t, _PCmp(f.column, op, out[0]))

    def _widened(self, f: _Field, op: str, value: pa.Scalar) -> pa.Scalar | None:
        """The bound's end, moved outward where the transform is monotonic only up to a slack
        (None: beyond the type, no bound)."""
        return value

    def _bounded(self, f: _Field, t: pa.DataType, bound: _P) -> _P:
        """The projected bound, widened by the partition values it could miss."""
        return bound


class TruncateProjection(_MonotonicProjection):
    """Monotonic; NULL only from NULL; a string ``LIKE`` prefix becomes ``left(prefix, W)`` or
    ``starts_with``."""

    null_preserving: ClassVar[bool] = True
    width: int

    def project_prefix(self, f: _Field, prefix: str, not_null: _P) -> _P:
        t = f.sources[0][1]
        if not _is_string(t):
            return not_null
        if len(prefix) >= self.width:
            return f.image([pa.scalar(prefix, t)])
        return _PStartsWith(f.column, prefix) if prefix else not_null


class YearProjection(_MonotonicProjection):
    """Monotonic on fixed-offset zones (named zones: bounds widened by two days); the year of an
    instant beyond chrono's range is NULL, so a bound keeps ``OR pf IS NULL`` unless both ends
    are known or the source is a nanosecond timestamp."""

    def _widened(self, f: _Field, op: str, value: pa.Scalar) -> pa.Scalar | None:
        if f.time_zone_fixed():
            return value
        # Named zones: local time may step back across New Year's midnight; widen the bound.
        slack = _ZONE_SLACK_SECONDS * _PER_SECOND[value.type.unit]
        return _step(value, slack if op == "<=" else -slack)

    def _bounded(self, f: _Field, t: pa.DataType, bound: _P) -> _P:
        if pa.types.is_timestamp(t) and t.unit == "ns":
            return bound
        # Instants beyond chrono's range (year +-262143) have a NULL year; only ns cannot get there.
        return _por([bound, _PIsNull(f.column, False)])

    def project_range(self, f: _Field, cmps: list[tuple[str, pa.Scalar]], parts: list[_P]) -> list[_P]:
        """Both ends of a range known: the instants between them are in range, so their year is
        never NULL and the leaves' ``OR partition_field_<year> IS NULL`` can go."""
        ends = [self.project_bound(f, op, v) for op, v in cmps]
        bounded = [_strip_is_null(e, f.column) for e in ends]
        if not (any(b.op == ">=" for b in bounded if isinstance(b, _PCmp))
                and any(b.op == "<=" for b in bounded if isinstance(b, _PCmp))):
            return parts
        return [p for p in parts if p not in ends] + bounded


def _strip_is_null(p: _P, column: str) -> _P:
    """``c >= v OR c IS NULL`` -> ``c >= v``."""
    if isinstance(p, _POr) and _PIsNull(column, False) in p.items:
        return _por(i for i in p.items if i != _PIsNull(column, False))
    return p


def _closed_range(f: _Field, cmps: list[tuple[str, pa.Scalar]]) -> tuple[int, int] | _P:
    """The inclusive integer range ``[lo, hi]`` the bounds ``cmps`` leave the single source (by
    its physical integers), or the projection when that already decides it (TRUE, FALSE)."""
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
    return lo, hi


def _enumerated(f: _Field, lo: int, hi: int, step: int) -> _P:
    """The field's values on ``lo, lo + step, ..., hi`` (physical integers of its single source)."""
    _, t = f.single  # type: ignore[misc]
    samples = list(range(lo, hi + 1, step))
    if samples[-1] != hi:
        samples.append(hi)
    arr = pa.array(samples, _storage(t))
    out = f.apply([arr if _storage(t) == t else arr.view(t)])
    return _PTRUE if out is None else _one_of(f.column, out)


class _DiscreteRangeProjection(Projection):
    """Not monotonic (bucket, expression): a bounded range of integers or dates is enumerated,
    value by value, when it has at most :data:`MAX_POINTS` values."""

    def project_range(self, f: _Field, cmps: list[tuple[str, pa.Scalar]], parts: list[_P]) -> list[_P]:
        r = _closed_range(f, cmps)
        if not isinstance(r, tuple):
            return [*parts, r]
        lo, hi = r
        _, t = f.single  # type: ignore[misc]
        if not (pa.types.is_integer(t) or pa.types.is_date32(t)) or hi - lo >= MAX_POINTS:
            return [*parts, _PTRUE]
        return [*parts, _enumerated(f, lo, hi, 1)]


class BucketProjection(_DiscreteRangeProjection):
    """A hash: ``=`` / ``IN`` / ``IS NULL`` by hashing the literals, short ranges enumerated;
    NULL only from NULL."""

    null_preserving: ClassVar[bool] = True


class ExpressionProjection(_DiscreteRangeProjection):
    """A DataFusion expression, evaluated on the literals; short ranges enumerated."""


class MultiBucketProjection(Projection):
    """A hash of several columns: projected only when every source is pinned
    (:meth:`Projection.project_tuples`)."""


class _DatePartProjection(Projection):
    """``date_part`` below the year (month, day, hour) cycles, so it is not monotonic; a range
    shorter than one cycle (both ends in one conjunction, fixed-offset zones) is enumerated."""

    #: a range spanning this many days (or more) covers every value
    cycle_days: ClassVar[int]
    #: samples per day: one value of the transform each
    steps_per_day: ClassVar[int] = 1

    def project_range(self, f: _Field, cmps: list[tuple[str, pa.Scalar]], parts: list[_P]) -> list[_P]:
        r = _closed_range(f, cmps)
        if not isinstance(r, tuple):
            return [*parts, r]
        lo, hi = r
        _, t = f.single  # type: ignore[misc]
        if not f.time_zone_fixed():
            return [*parts, _PTRUE]
        per_day = 1 if pa.types.is_date32(t) else 86_400 * _PER_SECOND[t.unit] if pa.types.is_timestamp(t) else 0
        if per_day == 0:
            return [*parts, _PTRUE]
        step = per_day // self.steps_per_day
        if step == 0 or hi - lo >= per_day * self.cycle_days:
            return [*parts, _PTRUE]
        return [*parts, _enumerated(f, lo, hi, step)]


class MonthProjection(_DatePartProjection):
    """Month 1-12: ranges shorter than a year are enumerated day by day."""

    cycle_days: ClassVar[int] = 366


class DayProjection(_DatePartProjection):
    """Day of month 1-31: ranges shorter than 31 days are enumerated day by day."""

    cycle_days: ClassVar[int] = 31


class HourProjection(_DatePartProjection):
    """Hour 0-23: ranges shorter than a day are enumerated hour by hour."""

    cycle_days: ClassVar[int] = 1
    steps_per_day: ClassVar[int] = 24
