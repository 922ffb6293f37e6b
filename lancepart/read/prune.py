"""Partition pruning through ``__manifest`` (spec "Query Optimization / Partition Pruning",
"Partition Evolution / Compatibility with Partition Pruning", Appendices C and D).

A filter over the namespace's *source* columns is parsed and type-coerced by DataFusion, then
projected onto the ``partition_field_<field_id>`` columns of every spec version, the way
pyiceberg's ``Transform.project`` does it: a small visitor over the filter whose leaves ask each
partition field "which partition values can a row satisfying this predicate have?". The answer
is always *inclusive*: a partition is dropped only when no row of it can match, so the original
filter is still applied inside each partition scan (:attr:`PruneResult.residual`).

Partition values of literals are computed with the write path's own transforms
(:func:`lancepart.transforms.transform_for` ``.apply``), so ``bucket``, ``truncate``,
``year``/``month``/``day``/``hour`` and expression fields prune with exactly the semantics the
data was written with (docs/design.md §1-§3: time transforms are ``date_part`` values, not
ordinals since the epoch, so only ``year`` is monotonic).

The projected predicates become one DataFusion query over ``__manifest`` in the form of
Appendix D, which is what runs (:attr:`PruneResult.manifest_sql`)::

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

>>> import pyarrow as pa
>>> from lancepart.spec import PartitionSpec
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

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import datafusion as _df
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import InvalidArgumentError, InvalidFilterError
from lancepart.spec import PartitionField, PartitionSpec, field_id_of
from lancepart.transforms import transform_for

__all__ = ["PruneResult", "prune"]

#: the most literal values (or tuples, or enumerated range values) a field's projection evaluates
MAX_POINTS = 4096

_TABLE = "__lp_source"
_MANIFEST = "__manifest"
_SELECT_COLUMNS = ("object_id", "location", "read_version", "read_branch", "read_tag")
_SPEC_ID_RE = r"^v(?P<spec>[0-9]+)\$"

_CMP_OPS = ("=", "!=", "<", "<=", ">", ">=")
_MIRROR = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DF_UNIT = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}
_FIXED_OFFSET_RE = re.compile(r"^([+-])(\d\d)(?::?(\d\d))?$")
# Largest gap, in seconds, by which a named zone's wall clock ever jumps: enough to widen a year
# bound so that no jump across New Year's midnight can make ``year`` look non-monotonic.
_ZONE_SLACK_SECONDS = 2 * 86_400


# =========================================================================== source predicates
# The filter, bound to source columns, in negation normal form once built. ``_Unknown`` stands
# for "any predicate": it is closed under negation and projects to TRUE.


class _Pred:
    __slots__ = ()


@dataclass(frozen=True)
class _Const(_Pred):
    value: bool | None  # None: SQL NULL, never TRUE


@dataclass(frozen=True)
class _Unknown(_Pred):
    what: str


@dataclass(frozen=True)
class _Cmp(_Pred):
    column: str
    op: str
    value: pa.Scalar  # typed as the column, never NULL


@dataclass(frozen=True)
class _In(_Pred):
    column: str
    values: tuple[pa.Scalar, ...]  # non-NULL, typed as the column
    has_null: bool
    negated: bool


@dataclass(frozen=True)
class _IsNull(_Pred):
    column: str
    negated: bool


@dataclass(frozen=True)
class _Like(_Pred):
    column: str
    pattern: str
    escape: str | None
    negated: bool
    case_insensitive: bool


@dataclass(frozen=True)
class _And(_Pred):
    items: tuple[_Pred, ...]


@dataclass(frozen=True)
class _Or(_Pred):
    items: tuple[_Pred, ...]


_TRUE, _FALSE, _NULL = _Const(True), _Const(False), _Const(None)


def _and(items: Iterable[_Pred]) -> _Pred:
    out: list[_Pred] = []
    for p in items:
        if isinstance(p, _And):
            out.extend(p.items)
        elif p == _TRUE:
            continue
        elif isinstance(p, _Const):  # FALSE or NULL: never TRUE
            return _FALSE
        else:
            out.append(p)
    return _TRUE if not out else out[0] if len(out) == 1 else _And(tuple(out))


def _or(items: Iterable[_Pred]) -> _Pred:
    out: list[_Pred] = []
    for p in items:
        if isinstance(p, _Or):
            out.extend(p.items)
        elif p == _TRUE:
            return _TRUE
        elif isinstance(p, _Const):
            continue
        else:
            out.append(p)
    return _FALSE if not out else out[0] if len(out) == 1 else _Or(tuple(out))


def _negate(p: _Pred) -> _Pred:
    """NOT p, pushed to the leaves. Exact under SQL's three-valued logic: NOT(x < v) is TRUE exactly
    when x >= v is, NOT of NULL stays NULL, De Morgan holds."""
    if isinstance(p, _Const):
        return p if p.value is None else _Const(not p.value)
    if isinstance(p, _Unknown):
        return p
    if isinstance(p, _Cmp):
        return _Cmp(p.column, _NEGATE[p.op], p.value)
    if isinstance(p, _In):
        return _In(p.column, p.values, p.has_null, not p.negated)
    if isinstance(p, _IsNull):
        return _IsNull(p.column, not p.negated)
    if isinstance(p, _Like):
        return _Like(p.column, p.pattern, p.escape, not p.negated, p.case_insensitive)
    if isinstance(p, _And):
        return _or(_negate(i) for i in p.items)
    if isinstance(p, _Or):
        return _and(_negate(i) for i in p.items)
    raise TypeError(p)


# =========================================================================== parsing and binding


def _new_context() -> _df.SessionContext:
    # One partition: keeps row order and costs nothing on a few thousand rows.
    return _df.SessionContext(_df.SessionConfig().with_target_partitions(1))


def _parse(filter: str, schema: pa.Schema) -> _Pred:
    """The filter as DataFusion plans it (types coerced, NOT pushed down, BETWEEN expanded)."""
    empty = pa.RecordBatch.from_pylist([], schema=pa.schema([pa.field(f.name, f.type) for f in schema]))
    ctx = _new_context()
    ctx.register_record_batches(_TABLE, [[empty]])
    try:
        df = ctx.table(_TABLE)
        expr = ctx.parse_sql_expr(filter, df.logical_plan().to_variant().schema())
        plan = df.filter(expr).optimized_logical_plan()
    except BaseException as e:  # DataFusion raises plain Exception; Rust panics raise BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        msg = str(e).strip()
        if m := re.search(r"No field named ([^\s.]+(?:\.[^\s.]+)?)\.", msg):
            raise InvalidArgumentError(
                f"filter {filter!r}: unknown column {m.group(1)!r}; the namespace columns are "
                f"{schema.names} (DataFusion: {_short(msg)})"
            ) from None
        raise InvalidArgumentError(
            f"filter {filter!r} is not a valid SQL boolean expression over the namespace columns "
            f"(DataFusion: {_short(msg)})"
        ) from None
    return _Binder(schema, filter).plan(plan, filter)


def _short(msg: str) -> str:
    msg = " ".join(msg.split())
    return msg if len(msg) < 400 else msg[:400] + "..."


class _Binder:
    """DataFusion logical expressions -> :class:`_Pred` over source columns."""

    def __init__(self, schema: pa.Schema, filter: str = "") -> None:
        self.types = {f.name: _value_type(f.type) for f in schema}
        self.filter = filter
        # A cast the user wrote (``CAST(s AS INT) = 42``) is intent; one DataFusion added to make a
        # string column meet a number is a literal that does not fit the column.
        self.explicit_cast = bool(re.search(r"\bcast\b|::", filter, re.I))
        # Aliases the optimizer introduces below the filter (common subexpression elimination
        # turns ``CAST(d AS TIMESTAMP)`` used twice into ``__common_expr_1``): name -> expression.
        self.aliases: dict[str, Any] = {}

    def plan(self, plan: Any, filter: str) -> _Pred:
        """The predicate of an optimized ``SELECT * FROM t WHERE ...`` plan."""
        node = plan
        while True:
            v = node.to_variant()
            kind = type(v).__name__
            if kind == "Filter":
                self._collect_aliases(node.inputs()[0])
                return self.expr(v.predicate())
            if kind == "EmptyRelation":  # the optimizer proved the filter never TRUE
                return _FALSE
            if kind == "TableScan":
                return _and(self.expr(f) for f in list(v.filters() or []))
            inputs = node.inputs()
            if len(inputs) != 1:  # a join: IN (SELECT ...), EXISTS (...)
                raise InvalidArgumentError(
                    f"filter {filter!r}: only row-wise predicates over the namespace columns can be used "
                    f"(no subqueries); DataFusion planned a {kind}"
                )
            node = inputs[0]

    def _collect_aliases(self, node: Any) -> None:
        while type(v := node.to_variant()).__name__ == "Projection":
            for e in v.projections():
                a = e.to_variant()
                if type(a).__name__ == "Alias":
                    self.aliases.setdefault(a.alias(), a.expr())
            inputs = node.inputs()
            if len(inputs) != 1:
                return
            node = inputs[0]

    def expr(self, e: Any) -> _Pred:
        try:
            v = e.to_variant()
        except BaseException as ex:  # e.g. ScalarFunction has no Python variant
            if isinstance(ex, (KeyboardInterrupt, SystemExit)):
                raise
            return _Unknown(_display(e))
        kind = type(v).__name__
        if kind == "Alias":
            return self.expr(v.expr())
        if kind == "BinaryExpr":
            op = v.op()
            if op == "AND":
                return _and([self.expr(v.left()), self.expr(v.right())])
            if op == "OR":
                return _or([self.expr(v.left()), self.expr(v.right())])
            if op in _CMP_OPS:
                return self.compare(v.left(), op, v.right(), e)
            return _Unknown(_display(e))
        if kind == "Not":
            return _negate(self.expr(v.expr()))
        if kind in ("IsNull", "IsNotNull"):
            col = self.column(v.expr())
            if col is None or col[2]:  # TRY_CAST(s AS INT) IS NULL is TRUE for s = 'abc'
                return _Unknown(_display(e))
            return _IsNull(col[0], kind == "IsNotNull")
        if kind == "IsTrue":
            return self.expr(v.expr())
        if kind == "IsFalse":  # TRUE exactly when the operand is FALSE
            return _negate(self.expr(v.expr()))
        if kind == "Between":
            lo = self.compare(v.expr(), ">=", v.low(), e)
            hi = self.compare(v.expr(), "<=", v.high(), e)
            return _negate(_and([lo, hi])) if v.negated() else _and([lo, hi])
        if kind == "InList":
            return self.in_list(v, e)
        if kind in ("Like", "ILike"):
            return self.like(v, e, kind == "ILike")
        if kind == "Column":
            if v.relation() is None and v.name() in self.aliases:  # a boolean subexpression the optimizer named
                return self.expr(self.aliases[v.name()])
            col = self.column(e)
            if col is not None and pa.types.is_boolean(col[1]) and not col[2]:
                return _Cmp(col[0], "=", pa.scalar(True))
            return _Unknown(_display(e))
        if kind == "Literal":
            value = self.literal(e)
            if value is not None and (pa.types.is_boolean(value.type) or pa.types.is_null(value.type)):
                return _Const(value.as_py())
            return _Unknown(_display(e))
        return _Unknown(_display(e))

    # ---------------------------------------------------------------- operands
    def column(self, e: Any) -> tuple[str, pa.DataType, bool] | None:
        """(name, type, whether it is wrapped in a (TRY_)CAST) of a column or a cast of one. The cast's
        target type is the other operand's type: DataFusion coerces both sides to it."""
        try:
            v = e.to_variant()
        except BaseException as ex:
            if isinstance(ex, (KeyboardInterrupt, SystemExit)):
                raise
            return None
        kind = type(v).__name__
        if kind == "Column":
            name = v.name()
            if v.relation() is None and name in self.aliases:
                return self.column(self.aliases[name])
            return (name, self.types[name], False) if name in self.types else None
        if kind in ("Cast", "TryCast"):
            inner = self.column(v.expr())
            if inner is None or inner[2]:
                return None
            return inner[0], inner[1], True
        return None

    @staticmethod
    def literal(e: Any) -> pa.Scalar | None:
        try:
            if type(e.to_variant()).__name__ != "Literal":
                return None
            value = e.python_value()
        except BaseException as ex:
            if isinstance(ex, (KeyboardInterrupt, SystemExit)):
                raise
            return None
        return value if isinstance(value, pa.Scalar) else None

    # ---------------------------------------------------------------- leaves
    def compare(self, left: Any, op: str, right: Any, whole: Any) -> _Pred:
        col, lit = self.column(left), self.literal(right)
        if col is None or lit is None:
            col, lit, op = self.column(right), self.literal(left), _MIRROR[op]
        if col is None or lit is None:
            return _Unknown(_display(whole))
        if not lit.is_valid:
            return _NULL
        name, ctype, cast = col
        self.check_fits(name, ctype, cast, lit)
        if not cast:
            value = _coerce(lit, ctype)
            return _Unknown(_display(whole)) if value is None else _Cmp(name, op, value)
        return _uncast_compare(name, ctype, op, lit) or _Unknown(_display(whole))

    def in_list(self, v: Any, whole: Any) -> _Pred:
        col = self.column(v.expr())
        lits = [self.literal(x) for x in v.list()]
        if col is None or any(x is None for x in lits):
            return _Unknown(_display(whole))
        name, ctype, cast = col
        values: list[pa.Scalar] = []
        has_null = False
        for lit in lits:
            assert lit is not None
            if not lit.is_valid:
                has_null = True
                continue
            self.check_fits(name, ctype, cast, lit)
            if not cast:
                value = _coerce(lit, ctype)
                if value is None:
                    return _Unknown(_display(whole))
                values.append(value)
                continue
            p = _uncast_compare(name, ctype, "=", lit)
            if p is None:
                return _Unknown(_display(whole))
            if isinstance(p, _Cmp):
                values.append(p.value)
            # else: no column value casts to this literal; it can never match (nor exclude)
        if not values:
            return _NULL if not v.negated() else (_NULL if has_null else _IsNull(name, True))
        return _In(name, tuple(values), has_null, bool(v.negated()))

    def check_fits(self, name: str, ctype: pa.DataType, cast: bool, lit: pa.Scalar) -> None:
        """:class:`InvalidFilterError` for a string column compared with a literal of another type
        (``country = 42``): DataFusion would cast every value of the column to the literal's type,
        so the filter fails on the first row that is not a number instead of when it is planned."""
        if cast and not self.explicit_cast and _is_string(ctype) and not _is_string(lit.type):
            raise InvalidFilterError(
                f"filter {self.filter!r}: column {name!r} is {ctype} but is compared with {lit.as_py()!r} "
                f"({lit.type}); quote the literal ({name} = '{lit.as_py()}') or write the CAST you mean")

    def like(self, v: Any, whole: Any, ilike: bool) -> _Pred:
        col = self.column(v.expr())
        pat = self.literal(v.pattern())
        if col is None or col[2] or pat is None or not _is_string(col[1]):
            return _Unknown(_display(whole))
        if not pat.is_valid:
            return _NULL
        if not ilike:
            # Older bindings return every LIKE as ``Like``: tell ILIKE apart by its display.
            rest = _display(whole)[len(_display(v.expr())):]
            if rest.startswith((" ILIKE ", " NOT ILIKE ")):
                ilike = True
            elif not rest.startswith((" LIKE ", " NOT LIKE ")):
                return _Unknown(_display(whole))
        escape = v.escape_char()
        return _Like(col[0], pat.as_py(), escape or None, bool(v.negated()), ilike)


def _display(e: Any) -> str:
    try:
        return e.canonical_name()
    except BaseException as ex:
        if isinstance(ex, (KeyboardInterrupt, SystemExit)):
            raise
        return repr(e)


# =========================================================================== types and literals


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _coerce(lit: pa.Scalar, t: pa.DataType) -> pa.Scalar | None:
    """``lit`` as a value of column type ``t`` when that is exact, else None."""
    if lit.type == t:
        return lit
    try:
        value = lit.cast(t)
        back = value.cast(lit.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
        return None
    return value if back.equals(lit) else None


def _storage(t: pa.DataType) -> pa.DataType | None:
    """The integer storage of a type whose values are integers (ints, dates, timestamps)."""
    if pa.types.is_integer(t):
        return t
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_date64(t) or pa.types.is_timestamp(t):
        return pa.int64()
    return None


def _to_int(s: pa.Scalar) -> int:
    storage = _storage(s.type)
    assert storage is not None
    return pa.array([s]).view(storage)[0].as_py() if storage != s.type else s.as_py()


def _from_int(k: int, t: pa.DataType) -> pa.Scalar | None:
    storage = _storage(t)
    assert storage is not None
    lo, hi = _int_range(storage)
    if not lo <= k <= hi:
        return None
    a = pa.array([k], storage)
    return (a if storage == t else a.view(t))[0]


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _exact_number(s: pa.Scalar) -> Fraction | None:
    t = s.type
    if pa.types.is_integer(t):
        return Fraction(s.as_py())
    if pa.types.is_floating(t):
        v = float(s.as_py())
        return Fraction(v) if math.isfinite(v) else None
    if pa.types.is_decimal(t):
        return Fraction(Decimal(s.as_py()))
    return None


def _cast_scale(src: pa.DataType, dst: pa.DataType) -> int | None:
    """k when CAST(x AS dst) = k * x exactly and injectively for every integer-like ``x`` of
    ``src`` (physical values), else None."""
    T = pa.types
    if T.is_integer(src):
        lo, hi = _int_range(src)
        if T.is_integer(dst):
            dlo, dhi = _int_range(dst)
            return 1 if dlo <= lo and hi <= dhi else None
        if T.is_floating(dst):  # exact only while the integer fits the mantissa
            return 1 if max(abs(lo), hi) < 2 ** ({16: 11, 32: 24, 64: 53}[dst.bit_width]) else None
        if T.is_decimal(dst):
            return 1 if dst.precision - dst.scale >= len(str(max(abs(lo), hi))) else None
        return None
    if T.is_date32(src):
        if T.is_timestamp(dst) and dst.tz is None:
            return 86_400 * _PER_SECOND[dst.unit]
        if T.is_date64(dst):
            return 86_400_000
        return None
    if T.is_timestamp(src) and T.is_timestamp(dst) and (src.tz is None) == (dst.tz is None):
        a, b = _PER_SECOND[src.unit], _PER_SECOND[dst.unit]
        return b // a if b >= a else None
    return None


def _uncast_compare(name: str, ctype: pa.DataType, op: str, lit: pa.Scalar) -> _Pred | None:
    """``CAST(col AS target) op lit`` as a predicate on ``col`` itself, or None when unsure.

    The casts DataFusion inserts to compare a column with a wider literal (int32 vs int64,
    date vs timestamp, us vs ns) multiply the physical value by a constant, so the predicate
    becomes an integer bound: ``CAST(d AS TIMESTAMP) < TIMESTAMP '2025-12-10 10:00'`` is
    ``d <= DATE '2025-12-10'``.
    """
    target = lit.type
    if pa.types.is_float32(ctype) and pa.types.is_float64(target) and pa.types.is_float64(lit.type):
        v = lit.as_py()
        if math.isnan(v):
            return None
        f32 = np.float32(v)
        if float(f32) == v:
            return _Cmp(name, op, pa.scalar(f32, pa.float32()))
        return _NULL if op == "=" else None
    scale = _cast_scale(ctype, target)
    if scale is None or _storage(ctype) is None:
        return None
    if pa.types.is_timestamp(target) or pa.types.is_date64(target):
        r: Fraction | None = Fraction(_to_int(lit), scale)
    else:
        r = _exact_number(lit)
        r = None if r is None else r / scale
    if r is None:
        return None
    lo, hi = _int_range(_storage(ctype))  # type: ignore[arg-type]

    def at(k: int, cmp: str) -> _Pred:
        s = _from_int(k, ctype)
        return _NULL if s is None else _Cmp(name, cmp, s)

    integral = r.denominator == 1
    if op == "=":
        return at(int(r), "=") if integral and lo <= r <= hi else _NULL
    if op == "!=":
        return at(int(r), "!=") if integral and lo <= r <= hi else _IsNull(name, True)
    if op in ("<", "<="):
        k = (math.ceil(r) - 1) if op == "<" else math.floor(r)
        return _IsNull(name, True) if k >= hi else _NULL if k < lo else at(k, "<=")
    k = (math.floor(r) + 1) if op == ">" else math.ceil(r)
    return _IsNull(name, True) if k <= lo else _NULL if k > hi else at(k, ">=")


def _sql_literal(s: pa.Scalar) -> str:
    """A DataFusion SQL literal equal to ``s`` (same value; comparisons coerce the type)."""
    t = s.type
    if not s.is_valid:
        return "NULL"
    T = pa.types
    if T.is_boolean(t):
        return "TRUE" if s.as_py() else "FALSE"
    if T.is_integer(t):
        return str(s.as_py())
    if T.is_floating(t):
        v = float(s.as_py())
        if math.isnan(v):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(v):
            return f"CAST('{'-' if v < 0 else ''}Infinity' AS DOUBLE)"
        return repr(v)
    if T.is_decimal(t):
        kind = "Decimal256" if T.is_decimal256(t) else "Decimal128"
        return f"arrow_cast('{format(s.as_py(), 'f')}', '{kind}({t.precision}, {t.scale})')"
    if _is_string(t):
        return "'" + s.as_py().replace("'", "''") + "'"
    if T.is_fixed_size_binary(t):
        return f"arrow_cast(X'{s.as_py().hex()}', 'FixedSizeBinary({t.byte_width})')"
    if T.is_binary(t) or T.is_large_binary(t) or T.is_binary_view(t):
        return f"X'{s.as_py().hex()}'"
    if T.is_date32(t):
        days = _to_int(s)
        iso = str(np.datetime64(days, "D"))
        if re.fullmatch(r"\d{4}-\d\d-\d\d", iso) and iso >= "0001-01-01":
            return f"DATE '{iso}'"
        return f"arrow_cast(arrow_cast({days}, 'Int32'), 'Date32')"
    if T.is_date64(t):
        return f"arrow_cast(arrow_cast({_to_int(s)}, 'Int64'), 'Date64')"
    if T.is_timestamp(t):
        v = _to_int(s)
        tz = "None" if t.tz is None else f'Some("{t.tz}")'
        type_str = f"Timestamp({_DF_UNIT[t.unit]}, {tz})"
        iso = np.datetime_as_string(np.datetime64(v, t.unit), unit=t.unit)
        if re.fullmatch(r"\d{4}-.*", iso) and iso >= "0001-01-01":
            return f"arrow_cast('{iso}{'' if t.tz is None else 'Z'}', '{type_str}')"
        return f"arrow_cast(arrow_cast({v}, 'Int64'), '{type_str}')"
    raise InvalidArgumentError(f"no SQL literal for a partition value of type {t}")


def _ident(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _sql_string(v: str) -> str:
    return "'" + v.replace("'", "''") + "'"


# =========================================================================== partition predicates
# Predicates over one spec's ``partition_field_*`` columns; rendered as DataFusion SQL.


class _P:
    __slots__ = ()

    def sql(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class _PConst(_P):
    value: bool

    def sql(self) -> str:
        return "TRUE" if self.value else "FALSE"


@dataclass(frozen=True)
class _PCmp(_P):
    column: str
    op: str
    value: pa.Scalar

    def sql(self) -> str:
        return f"{_ident(self.column)} {self.op} {_sql_literal(self.value)}"


@dataclass(frozen=True)
class _PIn(_P):
    column: str
    values: tuple[pa.Scalar, ...]  # non-NULL, distinct
    negated: bool = False

    def sql(self) -> str:
        col = _ident(self.column)
        if len(self.values) == 1:
            return f"{col} {'!=' if self.negated else '='} {_sql_literal(self.values[0])}"
        items = ", ".join(_sql_literal(v) for v in self.values)
        return f"{col} {'NOT IN' if self.negated else 'IN'} ({items})"


@dataclass(frozen=True)
class _PIsNull(_P):
    column: str
    negated: bool

    def sql(self) -> str:
        return f"{_ident(self.column)} IS {'NOT ' if self.negated else ''}NULL"


@dataclass(frozen=True)
class _PLike(_P):
    column: str
    pattern: str
    escape: str | None
    negated: bool
    case_insensitive: bool

    def sql(self) -> str:
        op = ("NOT " if self.negated else "") + ("ILIKE" if self.case_insensitive else "LIKE")
        esc = f" ESCAPE {_sql_string(self.escape)}" if self.escape is not None else ""
        return f"{_ident(self.column)} {op} {_sql_string(self.pattern)}{esc}"


@dataclass(frozen=True)
class _PStartsWith(_P):
    column: str
    prefix: str

    def sql(self) -> str:
        return f"starts_with({_ident(self.column)}, {_sql_string(self.prefix)})"


@dataclass(frozen=True)
class _PAnd(_P):
    items: tuple[_P, ...]

    def sql(self) -> str:
        return " AND ".join(f"({i.sql()})" if isinstance(i, _POr) else i.sql() for i in self.items)


@dataclass(frozen=True)
class _POr(_P):
    items: tuple[_P, ...]

    def sql(self) -> str:
        return " OR ".join(f"({i.sql()})" if isinstance(i, _PAnd) else i.sql() for i in self.items)


_PTRUE, _PFALSE = _PConst(True), _PConst(False)


def _pand(items: Iterable[_P]) -> _P:
    out: dict[str, _P] = {}
    for p in items:
        for q in p.items if isinstance(p, _PAnd) else (p,):
            if q == _PFALSE:
                return _PFALSE
            if q != _PTRUE:
                out.setdefault(q.sql(), q)
    vals = list(out.values())
    return _PTRUE if not vals else vals[0] if len(vals) == 1 else _PAnd(tuple(vals))


def _por(items: Iterable[_P]) -> _P:
    out: dict[str, _P] = {}
    in_lists: dict[str, list[pa.Scalar]] = {}  # x = 1 OR x IN (2, 3)  ->  x IN (1, 2, 3)
    for p in items:
        for q in p.items if isinstance(p, _POr) else (p,):
            if q == _PTRUE:
                return _PTRUE
            if isinstance(q, _PIn) and not q.negated:
                if q.column not in in_lists:
                    out[f"IN {q.column}"] = q  # keeps its place
                    in_lists[q.column] = []
                known = {_sql_literal(v) for v in in_lists[q.column]}
                in_lists[q.column].extend(v for v in q.values if _sql_literal(v) not in known)
            elif q != _PFALSE:
                out.setdefault(q.sql(), q)
    for col, values in in_lists.items():
        out[f"IN {col}"] = _PIn(col, tuple(values))
    vals = list(out.values())
    return _PFALSE if not vals else vals[0] if len(vals) == 1 else _POr(tuple(vals))


def _one_of(column: str, values: pa.Array) -> _P:
    """``column`` takes one of ``values`` (NULL among them means ``IS NULL``)."""
    values = pc.unique(values)
    non_null = tuple(v for v in values if v.is_valid)
    parts: list[_P] = []
    if non_null:
        parts.append(_PIn(column, non_null))
    if values.null_count:
        parts.append(_PIsNull(column, False))
    return _por(parts)


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


# =========================================================================== result


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
        return None if lit is None else f"{_ident(p.column)} {p.op} {lit}"
    if isinstance(p, _In):
        if p.negated and p.has_null:
            return "FALSE"  # x NOT IN (..., NULL) is never TRUE
        lits = [_scan_literal(v) for v in p.values]
        if not lits:
            return "FALSE" if not p.negated else None
        if any(lit is None for lit in lits):
            return None
        return f"{_ident(p.column)} {'NOT ' if p.negated else ''}IN ({', '.join(lits)})"  # type: ignore[arg-type]
    if isinstance(p, _IsNull):
        return f"{_ident(p.column)} IS {'NOT ' if p.negated else ''}NULL"
    if isinstance(p, _Like):
        if p.escape is not None or p.case_insensitive:
            return None
        return f"{_ident(p.column)} {'NOT ' if p.negated else ''}LIKE {_sql_string(p.pattern)}"
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


_IDENTIFIER = re.compile(r'"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_]*)')


def filter_columns(filter: str | None, schema: pa.Schema) -> list[str]:
    """The namespace columns ``filter`` may mention (a superset: every identifier-like token
    that names a column, unquoted ones also case-folded as DataFusion does), in schema order."""
    if not filter:
        return []
    tokens = set()
    for quoted, bare in _IDENTIFIER.findall(filter):
        if quoted:
            tokens.add(quoted.replace('""', '"'))
        else:
            tokens.update((bare, bare.lower()))
    return [n for n in schema.names if n in tokens]


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

    >>> # prune("event_date = '2025-12-10' AND country = 'US'", ns.schema, ns.specs, ns.snapshot().rows)
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
    spec_of = _spec_ids(rows.column("object_id").filter(is_table))
    known = {str(sid) for sid in specs}
    totals = _counts(spec_of)
    # "" is a table outside every v<N> namespace (a root-level table, e.g. a migrated V1 one): not a partition
    has_unknown = any(key not in known and key != "" for key in totals)

    sql = _manifest_sql(predicates, [c for c in _SELECT_COLUMNS if c in columns], has_unknown)
    kept = _run(sql, rows)

    kept_totals = _counts(_spec_ids(kept.column("object_id")))
    kept_counts = {sid: kept_totals.get(str(sid), 0) for sid in specs}
    pruned = {sid: totals.get(str(sid), 0) - kept_counts[sid] for sid in specs}
    if has_unknown:  # -1: tables of spec versions not in ``specs`` (always kept)
        kept_counts[-1] = sum(n for key, n in kept_totals.items() if key not in known)
        pruned[-1] = 0
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
    sub = rows.select(wanted)
    ctx = _new_context()
    ctx.register_record_batches(_MANIFEST, [sub.to_batches() or [pa.RecordBatch.from_pylist([], schema=sub.schema)]])
    try:
        out = ctx.sql(sql).to_arrow_table()
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise InvalidArgumentError(f"the partition pruning query failed: {_short(str(e))}\n{sql}") from None
    mask = pc.is_in(rows.column("object_id"), value_set=out.column("object_id").combine_chunks())
    return rows.filter(mask)
