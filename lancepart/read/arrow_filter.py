"""A pyarrow compute ``Expression`` as a lancepart SQL filter that prunes partitions.

The pyarrow Dataset of a namespace (:mod:`lancepart.read.pyarrow_dataset`) is given pyarrow
Expressions by the engines that scan it (DuckDB, Polars, ``dataset.to_table(filter=...)``). The
Expression itself is always applied by pyarrow, exactly, to the rows read; this module only
derives from it a SQL predicate for ``__manifest`` pruning. That predicate need not say the same
as the Expression, only never less: :func:`prune_sql` returns SQL that is TRUE (as DataFusion
evaluates it) on every row where the Expression is TRUE (as pyarrow evaluates it), so pruning
with it drops only partitions whose rows the Expression drops anyway. What it cannot derive
prunes nothing.

**How the Expression is read.** pyarrow has no Python API to walk an Expression. It is read
from Arrow's own serialization of it (what ``pickle`` stores, ``Expression.__reduce__``): an
Arrow IPC file of one row whose schema metadata lists the tree in prefix order (``call`` name,
its arguments, ``options``, ``end``; ``field_ref`` name; ``literal`` column) and whose columns
hold the literals and each call's options as typed Arrow scalars. So the function names are
the compute functions pyarrow evaluates, with their options (``is_in``'s null matching, a
cast's target type and safety), and a literal keeps its Arrow type (a timestamp its unit and
zone). Two other routes were refused: Substrait (``pyarrow.substrait.serialize_expressions``)
loses exactly what pruning must keep, since Arrow writes ``is_in(c, ['a', None])`` as
``c = 'a' OR c = NULL`` (FALSE-or-NULL where ``is_in`` says TRUE for a NULL ``c``) and refuses
safe casts, and decoding its protobuf needs the Substrait protos; ``str(expr)`` is display text
without a grammar (a quote in a string literal or a column name makes it ambiguous). The
metadata repeats its keys (several ``call``), which pyarrow's dict-valued ``Schema.metadata``
cannot show: it is read in order through the Arrow C data interface. Anything unexpected in it
(a newer pyarrow writing something else) makes the Expression untranslatable: no pruning, the
same rows.

**What is translated** (every other function, and a field compared with a field, is not):

* ``equal``, ``not_equal``, ``less``, ``less_equal``, ``greater``, ``greater_equal`` between a
  column and a literal (either side) whose value the column's type holds exactly: integers,
  strings, binaries, booleans, dates, timestamps (both zoned or both naive), decimals, and for a
  floating column a finite non-zero number (see below). The literal is cast to the column's
  type (a lossless cast, checked by casting back) and rendered as lancepart's typed SQL literal;
* ``is_in`` over the same literals, with its null matching: ``MATCH`` and ``SKIP`` are FALSE for
  a NULL input (TRUE for ``MATCH`` when the value set holds a null), unlike SQL's ``IN``, and
  are rendered so (``c IS NOT NULL AND c IN (...)``, ``c IS NULL OR c IN (...)``);
* ``is_null`` (``nan_is_null=False``, or any non-floating column), ``is_valid``, a boolean
  column alone, a boolean literal;
* ``and`` / ``and_kleene``, ``or`` / ``or_kleene``, ``invert``, ``and_not`` /
  ``and_not_kleene``; ``if_else(c, x, NULL)`` (what DuckDB makes of ``x IN (...)``);
* ``cast`` of a literal: folded with pyarrow's own cast and its options.

**Three-valued logic.** A part that cannot be translated is dropped where that only widens the
predicate: from an ``AND`` asked to be TRUE wherever the Expression is TRUE. Under ``NOT`` the
question turns: ``NOT e`` is TRUE where ``e`` is FALSE, so ``e`` is translated into a predicate
FALSE wherever ``e`` is FALSE (an ``OR`` may drop parts there, an ``AND`` may not). A floating
column is translated only where the predicate must be TRUE: pyarrow's comparisons follow IEEE
(``NaN > 1`` is FALSE, ``is_in`` tells ``-0.0`` from ``0.0``) where DataFusion orders NaN above
every number, so the two agree on where a comparison is TRUE but not on where it is FALSE; NaN
and zero literals are not translated at all.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lancepart.model.predicates import _ident, _is_string, _sql_literal

#: the largest value set an ``is_in`` is rendered with (a larger one prunes nothing)
MAX_IN_VALUES = 1000


# =========================================================================== the expression tree


@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Nested:
    """A reference into a struct column: its top-level column is ``names[0]``."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Literal:
    value: pa.Scalar


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Any, ...]
    options: pa.StructScalar | None


class _Unreadable(Exception):
    """The serialized Expression is not in the form this module reads."""


class _CSchema(ctypes.Structure):
    """``struct ArrowSchema`` of the Arrow C data interface."""

    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
                ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p)]


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def metadata_items(schema: pa.Schema) -> list[tuple[bytes, bytes]]:
    """The key/value metadata of ``schema`` in order, repeated keys included (pyarrow's
    ``Schema.metadata`` is a dict). Read from the schema's C data interface export, whose
    metadata is ``int32 n`` then ``n`` times ``int32 len, key, int32 len, value`` (native
    byte order); the capsule releases the export when it goes."""
    capsule = schema.__arrow_c_schema__()
    c = _CSchema.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not c.metadata:
        return []
    addr = c.metadata

    def int32(at: int) -> int:
        return struct.unpack("=i", ctypes.string_at(at, 4))[0]

    n, pos, items = int32(addr), addr + 4, []
    for _ in range(n):
        key_len = int32(pos)
        key = ctypes.string_at(pos + 4, key_len)
        pos += 4 + key_len
        value_len = int32(pos)
        value = ctypes.string_at(pos + 4, value_len)
        pos += 4 + value_len
        items.append((key, value))
    del capsule
    return items


def decode(expr: pc.Expression) -> Field | Nested | Literal | Call | None:
    """The tree of ``expr``, or None when its serialization is not in the form described in the
    module docstring."""
    try:
        rebuild, args = expr.__reduce__()
        if getattr(rebuild, "__name__", "") != "_deserialize" or len(args) != 1 or not isinstance(args[0], pa.Buffer):
            return None
        reader = pa.ipc.open_file(args[0])
        columns = reader.read_all().columns if reader.num_record_batches else []
        items = metadata_items(reader.schema)
        node, end = _parse(items, 0, columns)
        if end != len(items):
            return None
        return node
    except (_Unreadable, pa.ArrowException, ValueError, IndexError, UnicodeDecodeError, struct.error):
        return None


def _parse(items: list[tuple[bytes, bytes]], i: int, columns: list[pa.ChunkedArray]) -> tuple[Any, int]:
    if i >= len(items):
        raise _Unreadable("the expression ends early")
    key, value = items[i]
    if key == b"literal":
        return Literal(_scalar(columns, value)), i + 1
    if key == b"field_ref":
        return Field(value.decode("utf-8")), i + 1
    if key == b"nested_field_ref":
        names: list[str] = []
        j = i + 1
        for _ in range(int(value)):
            child, j = _parse(items, j, columns)
            if isinstance(child, Field):
                names.append(child.name)
            elif isinstance(child, Nested):
                names.extend(child.names)
            else:
                raise _Unreadable("a nested field reference holds something else")
        if not names:
            raise _Unreadable("an empty nested field reference")
        return Nested(tuple(names)), j
    if key == b"call":
        function = value.decode("utf-8")
        args = []
        options = None
        j = i + 1
        while True:
            if j >= len(items):
                raise _Unreadable("a call without its end")
            k, v = items[j]
            if k == b"options":
                options = _scalar(columns, v)
                if not isinstance(options, pa.StructScalar):
                    raise _Unreadable("options are not a struct")
                j += 1
                if j >= len(items) or items[j][0] != b"end":
                    raise _Unreadable("options are not last")
                continue
            if k == b"end":
                if v.decode("utf-8") != function:
                    raise _Unreadable("a call ends with another function's name")
                return Call(function, tuple(args), options), j + 1
            arg, j = _parse(items, j, columns)
            args.append(arg)
    raise _Unreadable(f"unknown key {key!r}")


def _scalar(columns: list[pa.ChunkedArray], index: bytes) -> pa.Scalar:
    col = columns[int(index)]
    if len(col) != 1:
        raise _Unreadable("a literal column is not one value")
    return col[0]


def top_level_columns(node: Any) -> set[str] | None:
    """The columns ``node`` reads (a struct column for a reference into it)."""
    if isinstance(node, Field):
        return {node.name}
    if isinstance(node, Nested):
        return {node.names[0]}
    if isinstance(node, Literal):
        return set()
    if isinstance(node, Call):
        out: set[str] = set()
        for a in node.args:
            out |= top_level_columns(a)  # type: ignore[operator]
        return out
    return None


# =========================================================================== the translation

_COMPARISONS = {"equal": "=", "not_equal": "<>", "less": "<", "less_equal": "<=", "greater": ">",
                "greater_equal": ">="}
_MIRRORED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_AND = ("and", "and_kleene")
_OR = ("or", "or_kleene")
_AND_NOT = ("and_not", "and_not_kleene")
# SetLookupOptions.null_matching_behavior (arrow/compute/api_scalar.h)
_MATCH, _SKIP, _EMIT_NULL, _INCONCLUSIVE = range(4)


def prune_sql(expr: pc.Expression | None, schema: pa.Schema) -> str | None:
    """A SQL filter over ``schema``'s columns that is TRUE on every row where ``expr`` is TRUE
    (None: nothing could be translated, prune nothing)."""
    if expr is None:
        return None
    node = decode(expr)
    if node is None:
        return None
    return _sql(node, schema, True)


def _sql(node: Any, schema: pa.Schema, true: bool) -> str | None:
    """``true``: a predicate TRUE wherever ``node`` is TRUE; else FALSE wherever it is FALSE."""
    if isinstance(node, Literal):
        v = node.value
        if pa.types.is_boolean(v.type) or pa.types.is_null(v.type):
            if v.is_valid:
                return "TRUE" if v.as_py() else "FALSE"
            return "FALSE" if true else "TRUE"  # NULL is never TRUE, never FALSE
        return None
    if isinstance(node, Field):
        f = _field(schema, node)
        return _ident(f.name) if f is not None and pa.types.is_boolean(f.type) else None
    if not isinstance(node, Call):
        return None
    name, args = node.function, node.args
    if name in _AND or name in _OR:
        if len(args) != 2:
            return None
        parts = [_sql(a, schema, true) for a in args]
        joiner = " AND " if name in _AND else " OR "
        # An AND is TRUE only where both parts are, an OR FALSE only where both are: there the
        # predicate of one part alone still holds. Elsewhere every part is needed.
        if (name in _AND) == true:
            parts = [p for p in parts if p is not None]
            if not parts:
                return None
        elif any(p is None for p in parts):
            return None
        return joiner.join(f"({p})" for p in parts)
    if name in _AND_NOT:
        if len(args) != 2:
            return None
        return _sql(Call("and_kleene", (args[0], Call("invert", (args[1],), None)), None), schema, true)
    if name == "invert":
        if len(args) != 1:
            return None
        inner = _sql(args[0], schema, not true)
        return None if inner is None else f"NOT ({inner})"
    if name == "if_else":
        # if_else(c, x, NULL) is TRUE where c and x are, FALSE where c is TRUE and x FALSE
        if len(args) != 3 or _literal(args[2]) is None or _literal(args[2]).is_valid:  # type: ignore[union-attr]
            return None
        if not true:
            return _sql(args[1], schema, False)
        return _sql(Call("and_kleene", (args[0], args[1]), None), schema, True)
    if name in _COMPARISONS:
        return _comparison(node, schema, true)
    if name == "is_in":
        return _is_in(node, schema, true)
    if name in ("is_null", "is_valid"):
        if len(args) != 1 or not isinstance(args[0], Field):
            return None
        f = _field(schema, args[0])
        if f is None:
            return None
        if name == "is_null" and pa.types.is_floating(f.type):
            nan_is_null = _option(node.options, "nan_is_null")
            if nan_is_null is None or nan_is_null.as_py() is not False:
                return None
        return f"{_ident(f.name)} IS {'NOT ' if name == 'is_valid' else ''}NULL"
    return None


def _field(schema: pa.Schema, node: Field) -> pa.Field | None:
    i = schema.get_field_index(node.name)
    return schema.field(i) if i >= 0 else None


def _option(options: pa.StructScalar | None, name: str) -> pa.Scalar | None:
    if options is None or options.type.get_field_index(name) < 0:
        return None
    return options[name]


def _literal(node: Any) -> pa.Scalar | None:
    """The value of a literal, or of a cast of one (folded with pyarrow's cast and its options)."""
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Call) and node.function == "cast" and len(node.args) == 1 and node.options is not None:
        value = _literal(node.args[0])
        opts = node.options
        if value is None or opts.type.get_field_index("to_type") < 0:
            return None
        flags = {n: _option(opts, n) for n in ("allow_int_overflow", "allow_time_truncate", "allow_time_overflow",
                                               "allow_decimal_truncate", "allow_float_truncate",
                                               "allow_invalid_utf8")}
        if any(v is None or not pa.types.is_boolean(v.type) or not v.is_valid for v in flags.values()):
            return None
        try:
            return pc.cast(value, options=pc.CastOptions(opts.type.field("to_type").type,
                                                         **{n: v.as_py() for n, v in flags.items()}))
        except (pa.ArrowException, TypeError, ValueError):
            return None
    return None


def _family(t: pa.DataType) -> tuple[str, bool] | None:
    T = pa.types
    if T.is_boolean(t):
        return ("bool", False)
    if T.is_integer(t):
        return ("int", False)
    if T.is_floating(t):
        return ("float", False)
    if T.is_decimal(t):
        return ("decimal", False)
    if _is_string(t):
        return ("string", False)
    if T.is_binary(t) or T.is_large_binary(t) or T.is_binary_view(t) or T.is_fixed_size_binary(t):
        return ("binary", False)
    if T.is_date(t):
        return ("date", False)
    if T.is_timestamp(t):
        return ("timestamp", t.tz is not None)
    return None


def _as_column(value: pa.Scalar, column: pa.DataType) -> pa.Scalar | None:
    """``value`` as a value of the column's type when pyarrow compares the two as the same value
    (a lossless cast between types of one kind, or an integer for a floating column), else None.
    NULL, NaN and a floating zero are None."""
    if not value.is_valid:
        return None
    kind, col_kind = _family(value.type), _family(column)
    if kind is None or col_kind is None:
        return None
    if kind != col_kind and not (col_kind[0] == "float" and kind[0] == "int"):
        return None
    try:
        cast = value.cast(column)
        if not cast.is_valid or not cast.cast(value.type).equals(value):
            return None
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if col_kind[0] == "float":
        v = float(cast.as_py())
        if v != v or v == 0.0 or v in (float("inf"), float("-inf")):
            return None
    return cast


def _column_and_value(a: Any, b: Any, schema: pa.Schema) -> tuple[pa.Field, pa.Scalar, bool] | None:
    """(column, literal, whether the column is on the right) of a comparison of a column with a literal."""
    for col_node, lit_node, mirrored in ((a, b, False), (b, a, True)):
        if isinstance(col_node, Field):
            f = _field(schema, col_node)
            value = _literal(lit_node)
            if f is not None and value is not None:
                return f, value, mirrored
    return None


def _comparison(node: Call, schema: pa.Schema, true: bool) -> str | None:
    if len(node.args) != 2:
        return None
    found = _column_and_value(node.args[0], node.args[1], schema)
    if found is None:
        return None
    f, value, mirrored = found
    if pa.types.is_floating(f.type) and not true:
        return None  # IEEE and DataFusion agree on where it is TRUE only (module docstring)
    cast = _as_column(value, f.type)
    if cast is None:
        return None
    op = _COMPARISONS[node.function]
    return f"{_ident(f.name)} {_MIRRORED[op] if mirrored else op} {_sql_literal(cast)}"


def _is_in(node: Call, schema: pa.Schema, true: bool) -> str | None:
    if len(node.args) != 1 or not isinstance(node.args[0], Field) or node.options is None:
        return None
    f = _field(schema, node.args[0])
    value_set = _option(node.options, "value_set")
    if f is None or not isinstance(value_set, pa.ListScalar | pa.LargeListScalar) or not value_set.is_valid:
        return None
    if pa.types.is_floating(f.type) and not true:
        return None
    behaviour = _null_matching(node.options)
    if behaviour is None:
        return None
    values = value_set.values
    if len(values) > MAX_IN_VALUES:
        return None
    has_null = values.null_count > 0
    rendered: list[str] = []
    for v in values:
        if not v.is_valid:
            continue
        cast = _as_column(v, f.type)
        if cast is None:
            return None
        rendered.append(_sql_literal(cast))
    col = _ident(f.name)
    within = f"{col} IN ({', '.join(dict.fromkeys(rendered))})" if rendered else None
    if behaviour in (_MATCH, _SKIP):  # TRUE or FALSE, never NULL
        if behaviour == _MATCH and has_null:
            return f"{col} IS NULL" if within is None else f"({col} IS NULL OR {within})"
        return "FALSE" if within is None else f"({col} IS NOT NULL AND {within})"
    if behaviour == _EMIT_NULL or (behaviour == _INCONCLUSIVE and not has_null):  # SQL's IN
        return within
    return None


def _null_matching(options: pa.StructScalar) -> int | None:
    """``SetLookupOptions``' null matching (the deprecated ``skip_nulls``, when set, decides)."""
    skip = _option(options, "skip_nulls")
    if skip is not None and skip.is_valid:
        return _SKIP if skip.as_py() else _MATCH
    behaviour = _option(options, "null_matching_behavior")
    if behaviour is None or not behaviour.is_valid:
        return None
    b = behaviour.as_py()
    return b if b in (_MATCH, _SKIP, _EMIT_NULL, _INCONCLUSIVE) else None


def columns_of(exprs: Sequence[pc.Expression]) -> set[str] | None:
    """The top-level columns the expressions read, or None when one cannot be read."""
    out: set[str] = set()
    for e in exprs:
        node = decode(e)
        cols = None if node is None else top_level_columns(node)
        if cols is None:
            return None
        out |= cols
    return out
