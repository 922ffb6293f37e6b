"""Partition transforms: one small class per transform type of spec "Supported Transforms".

Each class knows its result type, which source types it accepts and how to apply itself to Arrow
arrays (vectorised; no per-row Python). The rule every class follows (docs/design.md §3): its value
equals DataFusion's evaluation of the field's derived expression
(:func:`lancepart.model.datafusion_udfs.derived_expression`) on the same input, which
tests/test_datafusion_equivalence.py checks on random inputs.

Where DataFusion's behaviour decided the implementation:

* **year / month / day / hour** are ``date_part`` on the *local* wall-clock time of the
  timestamp's zone (calendar year, month 1-12, day 1-31, hour 0-23), NULL for instants outside
  chrono's range (-262143-01-01 .. +262142-12-31 UTC; ``date_part('hour', <date>)`` aside).
  Naive timestamps, dates, ``UTC`` and fixed offsets (``+05:30``) are computed here with numpy
  (civil-from-days arithmetic: pyarrow's own ``pc.year`` wraps beyond year ±32767). Named zones
  (``America/New_York``) are evaluated by DataFusion itself: its compiled-in chrono-tz rules apply
  DST until 2099 and not after, pyarrow's ``pc.hour`` reads the host's tz database (on the
  reference host it stops applying DST after 2037) and Python's zoneinfo applies DST forever, so
  no independent offset table would agree with DataFusion on every host.
* **truncate** on integers is ``x - x % W`` with the remainder's sign following the dividend
  (``truncate(-11, 10) = -10``); DataFusion computes it in Int64 (Decimal128 for uint64), so
  it never overflows, and the result always fits the source type. On decimals ``W`` counts whole
  units of the value (``truncate(-11.05, 10) = -10.00``), not units of the last digit.
  Strings keep the first W code points (``left``), binary the first W bytes.

Each class also owns its projections of predicates, inclusive (partition pruning) and strict
(which partitions match entirely), by inheriting the matching class of
:mod:`lancepart.model.projection` (``IdentityProjection``, ``YearProjection``, ...).

>>> from lancepart.model.spec import PartitionField
>>> f = PartitionField("n", [0], {"type": "truncate", "width": 10}, result_type={"type": "int64"})
>>> transform_for(f).apply([pa.array([-11, 11, None])]).to_pylist()
[-10, 10, None]
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import ExpressionEvaluationError, InvalidSpecError, SchemaMismatchError
from lancepart.model import datafusion_udfs as _ldf
from lancepart.model import murmur3 as _murmur3
from lancepart.model import projection as _projection
from lancepart.model.spec import PartitionField, PartitionSpec, check_field_id_reuse, field_id_of

__all__ = [
    "BaseTransform",
    "BucketTransform",
    "DayTransform",
    "ExpressionTransform",
    "HourTransform",
    "IdentityTransform",
    "MonthTransform",
    "MultiBucketTransform",
    "TruncateTransform",
    "YearTransform",
    "apply",
    "losslessly_castable",
    "source_arrays",
    "transform_for",
    "validate_field",
    "validate_spec",
]

_INT64_MAX = 2**63 - 1

# The instants DataFusion's date_part can represent (chrono's NaiveDate range, found by bisection
# against datafusion 55): -262143-01-01T00:00:00 .. +262142-12-31T23:59:59 UTC. Outside: NULL.
_MIN_SECONDS = -8_334_601_228_800
_MAX_SECONDS = 8_210_266_876_799
_MIN_DAYS = _MIN_SECONDS // 86_400
_MAX_DAYS = _MAX_SECONDS // 86_400
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
# arrow-rs parses "+hh:mm", "+hhmm" and "+hh" as fixed offsets, anything else as a tz name.
_FIXED_OFFSET_RE = re.compile(r"^([+-])(\d\d)(?::?(\d\d))?$")
_ZERO_OFFSET_ZONES = frozenset({"UTC", "Etc/UTC"})


# --------------------------------------------------------------------------- type families


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _is_flat(t: pa.DataType) -> bool:
    """Types that can be a partition value as they are (identity)."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or _is_string(t)
        or _is_binary(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _where(field_id: str | None) -> str:
    return f"partition field {field_id!r}" if field_id is not None else "partition field"


# --------------------------------------------------------------------------- base class


class BaseTransform(_projection.Projection, ABC):
    """A partition transform: ``result_type``, ``check_source_types`` and vectorised ``apply``;
    its inclusive and strict projections of predicates come from the projection class it inherits
    (:mod:`lancepart.model.projection`)."""

    name: ClassVar[str]

    @abstractmethod
    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        """The Arrow type the transform yields for these source types."""

    @abstractmethod
    def check_source_types(self, source_types: Sequence[pa.DataType], field_id: str | None = None) -> None:
        """Raise :class:`InvalidSpecError` naming the field and type when a source type is unsupported."""

    @abstractmethod
    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array:
        """Partition values of the source arrays (NULL-typed arrays stand for removed columns)."""

    def _one_source(self, source_types: Sequence[pa.DataType], field_id: str | None) -> pa.DataType:
        if len(source_types) != 1:
            raise InvalidSpecError(
                f"{_where(field_id)}: transform {self.name!r} takes exactly one source column, got {len(source_types)}"
            )
        return _value_type(source_types[0])

    def _unsupported(self, t: pa.DataType, field_id: str | None, what: str) -> InvalidSpecError:
        return InvalidSpecError(
            f"{_where(field_id)}: transform {self.name!r} does not support source type {t} ({what})"
        )


@dataclass(frozen=True)
class IdentityTransform(_projection.IdentityProjection, BaseTransform):
    """``col0``: the source value unchanged; result type = source type.

    >>> IdentityTransform().apply([pa.array(["US", None])]).to_pylist()
    ['US', None]
    """

    name: ClassVar[str] = "identity"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return _value_type(source_types[0])

    def check_source_types(self, source_types: Sequence[pa.DataType], field_id: str | None = None) -> None:
        t = self._one_source(source_types, field_id)
        if not _is_flat(t):
            raise self._unsupported(t, field_id, "a partition value must be a flat primitive: no list, struct or map")

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array:
        return _decoded(arrays[0])


# --------------------------------------------------------------------------- time transforms


def _fixed_offset_seconds(tz: str | None) -> int | None:
    """UTC offset of a zone that has one fixed offset (no zone, UTC, "+05:30"), else None."""
    if tz is None or tz in _ZERO_OFFSET_ZONES:
        return 0
    m = _FIXED_OFFSET_RE.match(tz)
    if m is None:
        return None
    secs = int(m.group(2)) * 3600 + int(m.group(3) or 0) * 60
    if secs >= 86_400:  # chrono rejects it; let DataFusion report the error
        return None
    return secs if m.group(1) == "+" else -secs


def _int64_values(a: pa.Array) -> np.ndarray:
    """The physical integer values of a temporal array as int64 (0 under NULLs)."""
    storage = {4: pa.int32(), 8: pa.int64()}[a.type.bit_width // 8]
    return np.asarray(a.view(storage).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _valid(a: pa.Array) -> np.ndarray:
    return np.asarray(a.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _local_seconds(a: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(local wall-clock seconds since 1970-01-01, validity) of a date/timestamp array with a
    fixed UTC offset; invalid where NULL or outside DataFusion's representable range."""
    t = a.type
    v = _int64_values(a)
    valid = _valid(a)
    if pa.types.is_date32(t):
        valid &= (v >= _MIN_DAYS) & (v <= _MAX_DAYS)
        return np.where(valid, v, 0) * 86_400, valid
    if pa.types.is_date64(t):
        per, offset = 1_000, 0
    else:
        per, offset = _PER_SECOND[t.unit], _fixed_offset_seconds(t.tz)
        assert offset is not None
    lo, hi = max(_MIN_SECONDS * per, -(2**63)), min(_MAX_SECONDS * per + per - 1, _INT64_MAX)
    valid &= (v >= lo) & (v <= hi)
    # Floor to seconds before adding the offset: ns values near the int64 limits would overflow.
    return np.floor_divide(np.where(valid, v, 0), per) + offset, valid


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Proleptic Gregorian (year, month, day) of days since 1970-01-01 (H. Hinnant's civil_from_days)."""
    z = days + 719_468
    era = np.floor_divide(z, 146_097)
    doe = (z - era * 146_097).astype(np.int32)  # 0..146096: int32 arithmetic is faster from here
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return year, month, day


@functools.lru_cache(maxsize=256)
def _zone_error(tz: str) -> str | None:
    """None when DataFusion knows the time zone, else its error."""
    try:
        _ldf.evaluate("date_part('hour', col0)", [pa.array([0], pa.timestamp("s", tz=tz))])
    except (InvalidSpecError, ExpressionEvaluationError) as e:
        return str(e)
    return None


class _TimeTransform(BaseTransform):
    part: ClassVar[str]
    accepts_dates: ClassVar[bool] = True

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return pa.int32()

    def check_source_types(self, source_types: Sequence[pa.DataType], field_id: str | None = None) -> None:
        t = self._one_source(source_types, field_id)
        if pa.types.is_timestamp(t):
            if t.tz is not None and _fixed_offset_seconds(t.tz) is None and (err := _zone_error(t.tz)):
                raise InvalidSpecError(f"{_where(field_id)}: time zone {t.tz!r} of {t} is not usable: {err}")
            return
        if pa.types.is_date(t) and self.accepts_dates:
            return
        need = "a timestamp" if not self.accepts_dates else "a date or timestamp"
        raise self._unsupported(t, field_id, f"{self.name} needs {need}")

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array:
        a = _decoded(arrays[0])
        if pa.types.is_null(a.type):
            return pa.nulls(len(a), pa.int32())
        if pa.types.is_timestamp(a.type) and _fixed_offset_seconds(a.type.tz) is None:
            # Named zone: DataFusion's own tz rules are the reference (module docstring).
            return _ldf.evaluate(f"date_part('{self.part}', col0)", [a]).cast(pa.int32())
        secs, valid = _local_seconds(a)
        days = np.floor_divide(secs, 86_400)
        if self.part == "hour":
            values = (secs - days * 86_400) // 3_600
        else:
            year, month, day = _civil(days)
            values = {"year": year, "month": month, "day": day}[self.part]
        return pa.array(values.astype(np.int32), type=pa.int32(), mask=~valid)


@dataclass(frozen=True)
class YearTransform(_projection.YearProjection, _TimeTransform):
    """``date_part('year', col0)``: calendar year of a date/timestamp (local time of its zone).

    >>> YearTransform().apply([pa.array([-1], pa.date32())]).to_pylist()
    [1969]
    """

    name: ClassVar[str] = "year"
    part: ClassVar[str] = "year"


@dataclass(frozen=True)
class MonthTransform(_projection.MonthProjection, _TimeTransform):
    """``date_part('month', col0)``: month 1-12.

    >>> MonthTransform().apply([pa.array([-1], pa.date32())]).to_pylist()
    [12]
    """

    name: ClassVar[str] = "month"
    part: ClassVar[str] = "month"


@dataclass(frozen=True)
class DayTransform(_projection.DayProjection, _TimeTransform):
    """``date_part('day', col0)``: day of month 1-31.

    >>> DayTransform().apply([pa.array([-1], pa.date32())]).to_pylist()
    [31]
    """

    name: ClassVar[str] = "day"
    part: ClassVar[str] = "day"


@dataclass(frozen=True)
class HourTransform(_projection.HourProjection, _TimeTransform):
    """``date_part('hour', col0)``: hour 0-23 of a timestamp (dates have no hour and are rejected).

    >>> HourTransform().apply([pa.array([0], pa.timestamp("s", tz="+05:30"))]).to_pylist()
    [5]
    """

    name: ClassVar[str] = "hour"
    part: ClassVar[str] = "hour"
    accepts_dates: ClassVar[bool] = False


# --------------------------------------------------------------------------- hashing


def _check_hashable(t: pa.DataType, field_id: str | None, name: str) -> None:
    try:
        _murmur3.canonical_bytes(pa.array([], type=t))
    except InvalidSpecError:
        raise InvalidSpecError(
            f"{_where(field_id)}: transform {name!r} does not support source type {t} "
            f"(murmur3 defines no canonical bytes for it, docs/design.md §1)"
        ) from None


@dataclass(frozen=True)
class BucketTransform(_projection.BucketProjection, BaseTransform):
    """``abs(murmur3(col0)) % N`` (64-bit ``abs``: never negative).

    >>> BucketTransform(16).apply([pa.array([34, None], pa.int64())]).to_pylist()
    [3, None]
    """

    num_buckets: int
    name: ClassVar[str] = "bucket"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return pa.int32()

    def check_source_types(self, source_types: Sequence[pa.DataType], field_id: str | None = None) -> None:
        _check_hashable(self._one_source(source_types, field_id), field_id, self.name)

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array:
        a = _decoded(arrays[0])
        if pa.types.is_null(a.type):
            return pa.nulls(len(a), pa.int32())
        return _murmur3.bucket(a, self.num_buckets)


@dataclass(frozen=True)
class MultiBucketTransform(_projection.MultiBucketProjection, BaseTransform):
    """``abs(murmur3_multi(col0, col1, ...)) % N``: NULL columns are skipped, all NULL -> NULL.

    >>> MultiBucketTransform(8).apply([pa.array([1]), pa.array(["a"])]).to_pylist()
    [4]
    """

    num_buckets: int
    name: ClassVar[str] = "multi_bucket"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return pa.int32()

    def check_source_types(self, source_types: Sequence[pa.DataType], field_id: str | None = None) -> None:
        if len(source_types) < 2:
            raise InvalidSpecError(
                f"{_where(field_id)}: transform 'multi_bucket' takes two or more source columns, "
                f"got {len(source_types)}"
            )
        for t in source_types:
            _check_hashable(_value_type(t), field_id, self.name)

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array:
        n = len(arrays[0])
        present = [d for a in arrays if not pa.types.is_null((d := _decoded(a)).type)]
        if not present:
            return pa.nulls(n, pa.int32())
        return _murmur3.multi_bucket(present, self.num_buckets)


# --------------------------------------------------------------------------- truncate


@dataclass(frozen=True)
class TruncateTransform(_projection.TruncateProjection, BaseTransform):
    """``col0 - (col0 % W)`` on numbers (remainder takes the dividend's sign), the first W code
    points of strings (``left(col0, W)``), the first W bytes of binary; result type = source type.

    >>> TruncateTransform(3).apply([pa.array(["héllo", "日本語テキスト"])]).to_pylist()
    ['hél', '日本語']
    """

    width: int
    name: ClassVar[str] = "truncate"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return _value_type(source_types[0])

    def check_source_types(self, source_types: Sequence[pa.DataType], field_id: str | None = None) -> None:
        t = self._one_source(source_types, field_id)
        w = self.width
        if pa.types.is_floating(t):
            raise self._unsupported(t, field_id, "floats cannot be truncated, docs/design.md §2")
        if pa.types.is_integer(t) or _is_string(t):
            limit = _INT64_MAX
        elif _is_binary(t):
            limit = _INT64_MAX // 2  # the derived expression takes 2*W hex digits
        elif pa.types.is_decimal128(t) or pa.types.is_decimal256(t):
            limit = _INT64_MAX
            if not _decimal_truncate_fits(t, w):
                raise InvalidSpecError(
                    f"{_where(field_id)}: truncate[{w}] of {t} is not supported: integer digits "
                    f"({t.precision - t.scale}) + max(4, digits of the width + 1) must be at most 76"
                )
        else:
            raise self._unsupported(
                t, field_id, "truncate takes integers, decimal128/256, utf8/large_utf8 or binary/large_binary"
            )
        if w > limit:
            # DataFusion plans a wider literal as Decimal/Float64, which changes the arithmetic.
            raise InvalidSpecError(f"{_where(field_id)}: truncate width {w} is too large for {t} (at most {limit})")

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array:
        a = _decoded(arrays[0])
        t = a.type
        if pa.types.is_null(t):
            return a
        if _is_string(t):
            return pc.utf8_slice_codeunits(a, 0, self.width)  # slices code points, like DataFusion's left()
        if _is_binary(t):
            return pc.binary_slice(a, 0, self.width)
        if pa.types.is_integer(t):
            return self._integers(a)
        if pa.types.is_decimal(t):
            return self._decimals(a)
        raise InvalidSpecError(f"transform 'truncate' does not support {t}")

    def _integers(self, a: pa.Array) -> pa.Array:
        t = a.type
        valid = _valid(a)
        raw = a.fill_null(0).to_numpy(zero_copy_only=False)
        if pa.types.is_signed_integer(t):
            x = raw.astype(np.int64)
            r = x - np.fmod(x, np.int64(self.width))  # fmod: C remainder, sign of the dividend
        else:
            x = raw.astype(np.uint64)
            r = x - x % np.uint64(self.width)
        # |r| <= |x|, so the result always fits the source type.
        return pa.array(r.astype(t.to_pandas_dtype()), type=t, mask=None if valid.all() else ~valid)

    def _decimals(self, a: pa.Array) -> pa.Array:
        # x - x % W == W * trunc(x / W) == W * trunc(trunc(x) / W) for an integer W.
        t = a.type
        if t.precision == t.scale:  # |x| < 1 <= W: always 0 (and pc.round needs an integer digit)
            return pc.if_else(a.is_valid(), pa.scalar(Decimal(0), t), pa.scalar(None, t))
        y = pc.round(a, 0, round_mode="towards_zero")
        if self.width == 1:
            return y.cast(t)
        int_digits = t.precision - t.scale
        w = pa.scalar(Decimal(self.width), pa.decimal256(len(str(self.width)), 0))
        # Arrow keeps max(4, digits(W) + 1) fractional digits in the quotient: more than enough
        # that no rounding carries it to the next integer (its fraction is at most 1 - 1/W).
        q = pc.divide(y.cast(pa.decimal256(int_digits, 0)), w)
        q = pc.round(q, 0, round_mode="towards_zero").cast(pa.decimal256(int_digits, 0))
        return pc.multiply(q, w).cast(t)  # |result| <= |x|: always fits


def _decimal_truncate_fits(t: pa.DataType, width: int) -> bool:
    """Whether :meth:`TruncateTransform._decimals` can divide within decimal256's 76 digits."""
    if width == 1 or t.precision == t.scale:
        return True
    return (t.precision - t.scale) + max(4, len(str(width)) + 1) <= 76


# --------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class ExpressionTransform(_projection.ExpressionProjection, BaseTransform):
    """A custom DataFusion SQL expression over ``col0..colN`` with a declared result type.

    >>> ExpressionTransform("lower(col0)", pa.utf8()).apply([pa.array(["US", None])]).to_pylist()
    ['us', None]
    """

    expression: str
    declared_type: pa.DataType
    name: ClassVar[str] = "expression"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return self.declared_type

    def planned_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        """The type DataFusion plans for the expression on these source types."""
        return _ldf.plan_type(self.expression, [_value_type(t) for t in source_types])

    def check_source_types(self, source_types: Sequence[pa.DataType], field_id: str | None = None) -> None:
        try:
            self.planned_type(source_types)
        except InvalidSpecError as e:
            raise InvalidSpecError(f"{_where(field_id)}: {e}") from None

    def apply(self, arrays: Sequence[pa.Array]) -> pa.Array:
        return _ldf.evaluate(self.expression, list(arrays))


_CLASSES: dict[str, type[BaseTransform]] = {
    c.name: c
    for c in (IdentityTransform, YearTransform, MonthTransform, DayTransform, HourTransform,
              BucketTransform, MultiBucketTransform, TruncateTransform)
}


def transform_for(field: PartitionField) -> BaseTransform:
    """The transform object of a partition field (``ExpressionTransform`` for expression fields).

    >>> transform_for(PartitionField("y", [1], {"type": "year"}, result_type={"type": "int32"}))
    YearTransform()
    """
    if field.expression is not None:
        return ExpressionTransform(field.expression, field.result_type)
    tf = field.transform
    assert tf is not None
    cls = _CLASSES.get(tf.type)
    if cls is None:
        raise InvalidSpecError(f"{_where(field.field_id)}: unknown transform type {tf.type!r}")
    if cls is BucketTransform or cls is MultiBucketTransform:
        return cls(tf.num_buckets)  # type: ignore[call-arg]
    if cls is TruncateTransform:
        return cls(tf.width)  # type: ignore[call-arg]
    return cls()


# --------------------------------------------------------------------------- contract functions


def _decoded(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    return a


def source_arrays(field: PartitionField, data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> list[pa.Array]:
    """The source columns of a field, in ``source_ids`` order, cast to their namespace-schema types.

    A source id the schema does not have, or a column ``data`` lacks, reads as all NULL (spec
    requirement 4: typed by the schema when it knows the column, else the NULL type).

    >>> s = pa.schema([pa.field("d", pa.date32(), metadata={"lance:field_id": "1"})])
    >>> f = PartitionField("y", [1], {"type": "year"}, result_type={"type": "int32"})
    >>> source_arrays(f, pa.table({"x": [1]}), s)[0].type
    DataType(date32[day])
    """
    top = {fid: f for f in schema if (fid := field_id_of(f)) is not None}
    n = data.num_rows
    out = []
    for sid in field.source_ids:
        f = top.get(sid)
        if f is None:
            out.append(pa.nulls(n))
            continue
        if f.name not in data.schema.names:
            out.append(pa.nulls(n, f.type))
            continue
        col = _decoded(data.column(f.name))
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatchError(
                    f"{_where(field.field_id)}: column {f.name!r} is {col.type} in the data but {f.type} in the "
                    f"namespace schema: {e}"
                ) from None
        out.append(col)
    return out


def apply(field: PartitionField, data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Array:
    """Partition values of ``field`` for every row of ``data``, typed ``field.result_type``.

    Source columns are found through ``lance:field_id`` in ``schema`` (see :func:`source_arrays`).

    >>> s = pa.schema([pa.field("d", pa.date32(), metadata={"lance:field_id": "1"})])
    >>> f = PartitionField("y", [1], {"type": "year"}, result_type={"type": "int32"})
    >>> apply(f, pa.table({"d": pa.array([0, None], pa.date32())}), s).to_pylist()
    [1970, None]
    """
    arrays = source_arrays(field, data, schema)
    out = transform_for(field).apply(arrays)
    if out.type == field.result_type:
        return out
    try:
        return out.cast(field.result_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ExpressionEvaluationError(
            f"{_where(field.field_id)}: value of type {out.type} cannot be cast to result_type {field.result_type}: {e}"
        ) from None


# --------------------------------------------------------------------------- validation


def _integer_fits(src: pa.DataType, dst: pa.DataType) -> bool:
    if pa.types.is_signed_integer(src):
        return pa.types.is_signed_integer(dst) and dst.bit_width >= src.bit_width
    return dst.bit_width >= src.bit_width if pa.types.is_unsigned_integer(dst) else dst.bit_width > src.bit_width


def losslessly_castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every ``src`` value is exactly a ``dst`` value in the same type family.

    Strings to strings (Utf8View / LargeUtf8 -> utf8), binary to binary, integer widening,
    float32 -> float64, decimal widening, date32 -> date64; NULL to anything.

    >>> losslessly_castable(pa.int32(), pa.int64()), losslessly_castable(pa.int64(), pa.int32())
    (True, False)
    """
    T = pa.types
    if src == dst or T.is_null(src):
        return True
    strings = (T.is_string, T.is_large_string, T.is_string_view)
    binaries = (T.is_binary, T.is_large_binary, T.is_binary_view)
    for family in (strings, binaries):
        if any(p(src) for p in family) and any(p(dst) for p in family):
            return True
    if T.is_integer(src) and T.is_integer(dst):
        return _integer_fits(src, dst)
    if T.is_floating(src) and T.is_floating(dst):
        return dst.bit_width >= src.bit_width
    if T.is_decimal(src) and T.is_decimal(dst):
        return dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
    if T.is_date32(src) and T.is_date64(dst):
        return True
    return False


def _source_types(field: PartitionField, schema: pa.Schema) -> list[pa.DataType]:
    top = {fid: f for f in schema if (fid := field_id_of(f)) is not None}
    nested = {}
    for f in schema:
        _collect_nested(f, f.name, nested, top_level=True)
    types = []
    for sid in field.source_ids:
        if sid in top:
            types.append(top[sid].type)
        elif sid in nested:
            raise InvalidSpecError(
                f"{_where(field.field_id)}: source id {sid} is the nested column {nested[sid]!r}; partition "
                f"sources must be top-level columns"
            )
        else:
            raise InvalidSpecError(
                f"{_where(field.field_id)}: source id {sid} is not a column of the namespace schema "
                f"(known ids: {sorted(top)})"
            )
    return types


def _collect_nested(f: pa.Field, path: str, out: dict[int, str], top_level: bool = False) -> None:
    if not top_level and (fid := field_id_of(f)) is not None:
        out[fid] = path
    t = f.type
    children: Iterable[pa.Field] = ()
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        children = [t.value_field]
    elif pa.types.is_map(t):
        children = [t.key_field, t.item_field]
    for c in children:
        _collect_nested(c, f"{path}.{c.name}", out)


def validate_field(field: PartitionField, schema: pa.Schema) -> None:
    """Check one partition field against the namespace schema; raise :class:`InvalidSpecError`.

    Source ids must be top-level columns, their types supported by the transform, and
    ``result_type`` what the transform yields (identity / truncate: exactly the source type;
    time and bucket transforms: int32; expressions: DataFusion's planned type or a lossless
    widening of it within its family, see :func:`losslessly_castable`).

    >>> s = pa.schema([pa.field("d", pa.date32(), metadata={"lance:field_id": "1"})])
    >>> hour = PartitionField("h", [1], {"type": "hour"}, result_type={"type": "int32"})
    >>> validate_field(hour, s)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lancepart.errors.InvalidSpecError: partition field 'h': transform 'hour' does not support source type ...
    """
    where = _where(field.field_id)
    types = _source_types(field, schema)
    tf = transform_for(field)
    tf.check_source_types(types, field.field_id)
    declared = field.result_type
    if isinstance(tf, ExpressionTransform):
        planned = tf.planned_type(types)
        if not losslessly_castable(planned, declared):
            raise InvalidSpecError(
                f"{where}: expression {field.expression!r} yields {planned} but result_type is {declared}; "
                f"declare result_type {planned} or CAST the expression"
            )
        return
    expected = tf.result_type(types)
    if declared != expected:
        hint = ""
        if isinstance(tf, (IdentityTransform, TruncateTransform)) and losslessly_castable(expected, declared):
            hint = f" ({declared} is a different Arrow type even though it holds the same values)"
        raise InvalidSpecError(
            f"{where}: transform {tf.name!r} of {types[0] if len(types) == 1 else types} yields {expected}, "
            f"but result_type is {declared}{hint}"
        )


def validate_spec(spec: PartitionSpec, schema: pa.Schema, existing_specs: Iterable[PartitionSpec] = ()) -> None:
    """Validate every field of ``spec`` (:func:`validate_field`) and the spec "Field ID Reuse"
    rules against the earlier versions ``existing_specs``.

    >>> s = pa.schema([pa.field("d", pa.date32(), metadata={"lance:field_id": "1"})])
    >>> validate_spec(PartitionSpec(1, [PartitionField("y", [1], {"type": "year"},
    ...     result_type={"type": "int32"})]), s)
    """
    for f in spec.fields:
        validate_field(f, schema)
        if not _murmur3.has_canonical_bytes(f.result_type):
            # a partition's namespace id is derived from its values' canonical bytes
            # (lancepart.model.ids.partition_ids): without them no row could ever be written
            raise InvalidSpecError(
                f"{_where(f.field_id)}: result_type {f.result_type} cannot name a partition (partition values "
                f"must be booleans, integers, floats, dates, timestamps, decimals, strings or binaries); "
                f"CAST the expression to one of those")
    check_field_id_reuse(spec, list(existing_specs))
