"""The two predicate models of partition pruning, the binder between a filter and the first,
and the literal coercion both rely on.

* **Source predicates** (:class:`_Pred`: ``_Cmp``, ``_In``, ``_IsNull``, ``_Like``, ``_And``,
  ``_Or``, ``_Const``, ``_Unknown``): the filter bound to the namespace's *source* columns, in
  negation normal form. :func:`_parse` lets DataFusion plan the filter (types coerced, ``NOT``
  pushed down, ``BETWEEN`` expanded) and :class:`_Binder` turns the plan into this model, with
  every literal coerced exactly to its column's type (or the leaf left ``_Unknown``, which
  projects to TRUE). The casts DataFusion inserts are undone where they only rescale an integer
  (:func:`_uncast_compare`).
* **Partition predicates** (:class:`_P`: ``_PCmp``, ``_PIn``, ``_PIsNull``, ``_PLike``,
  ``_PStartsWith``, ``_PAnd``, ``_POr``, ``_PConst``): predicates over one spec version's
  ``partition_field_*`` columns, rendered as DataFusion SQL (:meth:`_P.sql`) for the
  ``__manifest`` query.

:mod:`lancepart.model.projection` maps the first model onto the second;
:mod:`lancepart.read.manifest_query` runs the result. These names are internal to the pruner:
the public entry point is :func:`lancepart.read.manifest_query.prune`.

>>> import pyarrow as pa
>>> schema = pa.schema([pa.field("n", pa.int32())])
>>> _parse("NOT (n < 3 OR n IS NULL)", schema)
_And(items=(_Cmp(column='n', op='>=', value=<pyarrow.Int32Scalar: 3>), _IsNull(column='n', negated=True)))
>>> _sql_literal(pa.scalar(5, pa.int64())), _PIn("partition_field_n", (pa.scalar(1), pa.scalar(2))).sql()
('5', 'partition_field_n IN (1, 2)')
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import datafusion as _df
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import InvalidArgumentError, InvalidFilterError, SchemaMismatchError

_TABLE = "__lp_source"

_CMP_OPS = ("=", "!=", "<", "<=", ">", ">=")
_MIRROR = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DF_UNIT = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}


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
    """DataFusion's message, once: without its repeated "DataFusion error:" prefixes and the
    internal table alias the filter is planned over."""
    msg = " ".join(msg.split())
    msg = re.sub(r"^(?:DataFusion error:\s*)+", "", msg.replace(_TABLE + ".", ""))
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


# words a SQL parser takes for a keyword where a bare column name stands: quoted even when lowercase
_KEYWORDS = frozenset("""all and any array as asc between by case cast create date default delete desc distinct
else end exists false from full group having in inner insert interval is join left like limit not null on or
order outer right select set table then time timestamp to true union update using values when where with
""".split())


def _plain(name: str) -> bool:
    return re.fullmatch(r"[a-z_][a-z0-9_]*", name) is not None and name not in _KEYWORDS


def _ident(name: str) -> str:
    """A column name as DataFusion reads it: bare when it is a plain lowercase identifier, else
    in double quotes (a double quote inside doubled)."""
    if _plain(name):
        return name
    return '"' + name.replace('"', '""') + '"'


def lance_ident(name: str) -> str:
    """A column name as Lance's filter parser reads it: bare when plain, else in backticks.
    Lance reads a double-quoted name as a string literal (``"Status" = 'old'`` compares two
    strings and matches nothing), so every filter text handed to a Lance scan quotes this way.
    A name holding a backtick cannot be named at all; :func:`check_column_names` refuses it."""
    if _plain(name):
        return name
    return "`" + name + "`"


def check_column_names(names: Sequence[str], what: str) -> None:
    """:class:`SchemaMismatchError` naming the first column Lance cannot store or filter on: a
    ``.`` in a top-level name (Lance takes it for a struct path and refuses to write it) or a
    backtick (no Lance filter can name it; with it in a table, Lance plans no filter at all)."""
    for n in names:
        if "." in n or "`" in n:
            raise SchemaMismatchError(
                f"{what}: column {n!r} cannot be used: Lance does not allow "
                f"{'.' if '.' in n else 'a backtick'} in a top-level column name; rename it")


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


# a name in double quotes (SQL, DataFusion), in backticks (Spark, MySQL) or bare (any letter first)
_IDENTIFIER = re.compile(r'"((?:[^"]|"")+)"|`((?:[^`]|``)+)`|([^\W\d]\w*)')


def filter_columns(filter: str | None, schema: pa.Schema) -> list[str]:
    """The namespace columns ``filter`` may mention (a superset: every identifier-like token
    that names a column, unquoted ones also case-folded as DataFusion does), in schema order."""
    if not filter:
        return []
    tokens = set()
    for quoted, ticked, bare in _IDENTIFIER.findall(filter):
        if quoted:
            tokens.add(quoted.replace('""', '"'))
        elif ticked:
            tokens.add(ticked.replace("``", "`"))
        else:
            tokens.update((bare, bare.lower()))
    return [n for n in schema.names if n in tokens]
