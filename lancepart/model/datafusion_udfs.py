"""DataFusion side of the spec: derived expressions, the murmur3 UDFs, expression fields.

Spec: spec/partitioning.md "Partition Expression", "Supported Transforms", "Hash Functions";
docs/design.md §1-§3. The rule every transform follows: the value computed by
:mod:`lancepart.model.transforms` equals DataFusion's evaluation of :func:`derived_expression`.

Decisions DataFusion forced (all checked against datafusion 55, see tests/test_datafusion_equivalence.py):

* **murmur3 returns Int64.** The spec says "a signed 32-bit integer", and the bucket transform is
  ``abs(murmur3(col0)) % N``; but DataFusion's ``abs`` on an Int32 of -2**31 fails the whole query
  (``Int32Array overflow on abs(-2147483648)``). Our ``murmur3`` / ``murmur3_multi`` UDFs therefore
  return Int64 *values in the int32 range* (the signed 32-bit hash, sign-extended): ``abs`` cannot
  overflow, ``% N`` is computed in 64 bits exactly as docs/design.md §1 prescribes, and the bucket
  is cast to int32 at the end. An expression that wants the hash as int32 writes
  ``CAST(murmur3(x) AS INT)``.
* **Exact UDF signatures.** datafusion-python only registers Python UDFs with one exact argument
  list, and integer arguments are the only ones DataFusion coerces to it. :func:`evaluate` therefore
  rewrites every ``murmur3(`` / ``murmur3_multi(`` call (innermost first, with a tokenizer that
  respects quotes, comments and parentheses) into a call of a private UDF registered for exactly
  the argument types DataFusion plans for that call (``__lp_murmur3_<n>``). :func:`register_udfs`
  registers the public names for one chosen signature, for SQL written by hand.
* **Row order.** With ``target_partitions > 1`` DataFusion round-robin repartitions a plain
  projection and returns rows out of order; every context here uses one partition.
* **truncate on binary.** ``left(col0, W)`` on Binary casts the bytes to a UTF-8 string (it fails on
  non-UTF-8 data and counts characters, not bytes); ``substr`` rejects Binary. The derived
  expression for binary sources is ``decode(left(encode(col0, 'hex'), 2*W), 'hex')`` = first W bytes.
* **truncate width** literals above 2**63 - 1 are planned as Decimal/Float64 by DataFusion, which
  changes the arithmetic; such widths are rejected at validation (:mod:`lancepart.model.transforms`).

>>> evaluate("abs(murmur3(col0)) % 16", [pa.array([34], pa.int64())]).to_pylist()
[3]
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import datafusion as _df
import pyarrow as pa

from lancepart.errors import ExpressionEvaluationError, InvalidSpecError
from lancepart.model import murmur3 as _murmur3
from lancepart.model.spec import PartitionField

__all__ = [
    "HASH_FUNCTIONS",
    "derived_expression",
    "evaluate",
    "plan_type",
    "register_udfs",
]

#: the Lance extensions of spec "Hash Functions"
HASH_FUNCTIONS = ("murmur3", "murmur3_multi")

_TABLE = "__lp_input"
_VALUE = "__lp_value"
_COL_RE = re.compile(r"col(\d+)")


# --------------------------------------------------------------------------- derived expressions


def derived_expression(field: PartitionField, source_types: Sequence[pa.DataType] | None = None) -> str:
    """The DataFusion SQL of a partition field: spec table "Supported Transforms", or its expression.

    ``truncate`` needs ``source_types``: strings use ``left(col0, W)``, binary the byte form
    ``decode(left(encode(col0, 'hex'), 2W), 'hex')`` (see module docstring), numbers
    ``col0 - (col0 % W)``.

    >>> from lancepart.model.spec import PartitionField
    >>> f = PartitionField("b", [0], {"type": "bucket", "num_buckets": 8}, result_type={"type": "int32"})
    >>> derived_expression(f)
    'abs(murmur3(col0)) % 8'
    """
    if field.expression is not None:
        return field.expression
    tf = field.transform
    assert tf is not None
    cols = [f"col{i}" for i in range(len(field.source_ids))]
    if tf.type == "identity":
        return "col0"
    if tf.type in ("year", "month", "day", "hour"):
        return f"date_part('{tf.type}', col0)"
    if tf.type == "bucket":
        return f"abs(murmur3(col0)) % {tf.num_buckets}"
    if tf.type == "multi_bucket":
        return f"abs(murmur3_multi({', '.join(cols)})) % {tf.num_buckets}"
    if tf.type == "truncate":
        if not source_types:
            raise InvalidSpecError(
                f"partition field {field.field_id!r}: the derived expression of 'truncate' depends on the "
                f"source type (string, binary or numeric); pass source_types"
            )
        t = source_types[0]
        if pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return f"left(col0, {tf.width})"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return f"decode(left(encode(col0, 'hex'), {2 * tf.width}), 'hex')"
        return f"col0 - (col0 % {tf.width})"
    raise InvalidSpecError(f"partition field {field.field_id!r}: unknown transform type {tf.type!r}")


# --------------------------------------------------------------------------- murmur3 UDFs


def _hash_udf_func(multi: bool):
    """The Python body of a murmur3 UDF: int32 hash as Int64 (module docstring), NULL type = NULL."""

    def func(*arrs: pa.Array) -> pa.Array:
        n = len(arrs[0])
        # A NULL-typed argument (e.g. a removed column) contributes nothing (spec requirement 5).
        present = [a for a in arrs if not pa.types.is_null(a.type)]
        if not present:
            return pa.nulls(n, pa.int64())
        h = _murmur3.murmur3_multi(*present) if multi else _murmur3.murmur3(present[0])
        return h.cast(pa.int64())

    return func


def _make_udf(name: str, function: str, arg_types: Sequence[pa.DataType]) -> _df.ScalarUDF:
    return _df.udf(
        _hash_udf_func(function == "murmur3_multi"),
        [pa.field(f"arg{i}", t) for i, t in enumerate(arg_types)],
        pa.int64(),
        "immutable",
        name,
    )


def register_udfs(
    ctx: _df.SessionContext,
    arg_types: Sequence[pa.DataType] | None = None,
    multi_arg_types: Sequence[pa.DataType] | None = None,
) -> None:
    """Register ``murmur3`` and ``murmur3_multi`` (spec "Hash Functions") in ``ctx``.

    datafusion-python registers a Python UDF for one exact argument list, so choose it:
    ``murmur3`` takes ``arg_types[0]`` (default Int64, to which every integer type coerces) and
    ``murmur3_multi`` takes ``multi_arg_types`` (default ``[Int64, Int64]``). Both return the
    signed 32-bit hash as Int64 (module docstring). Registering again replaces the previous
    signature. :func:`evaluate` does not need this: it registers a UDF per call signature itself.

    >>> ctx = _df.SessionContext()
    >>> register_udfs(ctx, [pa.utf8()])
    >>> ctx.sql("SELECT murmur3('iceberg') AS h").to_pydict()
    {'h': [1210000089]}
    """
    one = list(arg_types or [pa.int64()])
    if len(one) != 1:
        raise InvalidSpecError(f"murmur3 takes exactly one argument, got types {one}")
    many = list(multi_arg_types or [pa.int64(), pa.int64()])
    for t in [*one, *many]:
        _check_hashable(t, "register_udfs")
    ctx.register_udf(_make_udf("murmur3", "murmur3", one))
    ctx.register_udf(_make_udf("murmur3_multi", "murmur3_multi", many))


def _check_hashable(t: pa.DataType, where: str) -> None:
    if pa.types.is_null(t):
        return
    try:
        _murmur3.canonical_bytes(pa.array([], type=t))
    except InvalidSpecError as e:
        raise InvalidSpecError(f"{where}: {e}") from None


# --------------------------------------------------------------------------- SQL tokenizer

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<str>'(?:[^']|'')*')
  | (?P<qident>"(?:[^"]|"")*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<punct>.)
    """,
    re.X | re.S,
)


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    start: int
    end: int


def _tokens(sql: str) -> list[_Tok]:
    """Lexical tokens of a SQL expression; whitespace and comments dropped."""
    out = []
    for m in _TOKEN_RE.finditer(sql):
        kind = m.lastgroup
        assert kind is not None
        if kind not in ("ws", "comment"):
            out.append(_Tok(kind, m.group(), m.start(), m.end()))
    return out


def _calls(toks: list[_Tok], names: frozenset[str] | set[str]) -> list[tuple[int, int, str, list[tuple[int, int]]]]:
    """Top-level calls of ``names`` in a token list: (start, end, name, [(arg start, arg end)]) in
    character offsets; nested calls are inside the argument spans."""
    found = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "ident" and t.text.lower() in names and i + 1 < len(toks) and toks[i + 1].text == "(":
            depth, j, args, arg_start = 0, i + 1, [], toks[i + 1].end
            while j < len(toks):
                x = toks[j]
                if x.text == "(":
                    depth += 1
                elif x.text == ")":
                    depth -= 1
                    if depth == 0:
                        break
                elif x.text == "," and depth == 1:
                    args.append((arg_start, x.start))
                    arg_start = x.end
                j += 1
            if j == len(toks):
                raise InvalidSpecError(f"unbalanced parentheses after {t.text}(")
            args.append((arg_start, toks[j].start))
            found.append((t.start, toks[j].end, t.text.lower(), args))
            i = j + 1
            continue
        i += 1
    return found


def referenced_columns(expression: str) -> list[int]:
    """Indices ``k`` of the ``colK`` placeholders an expression references, sorted.

    >>> referenced_columns("concat(col1, 'col7', col0)")
    [0, 1]
    """
    toks = _tokens(expression)
    out = set()
    for i, t in enumerate(toks):
        m = _COL_RE.fullmatch(t.text.lower()) if t.kind == "ident" else None
        if m and not (i + 1 < len(toks) and toks[i + 1].text == "("):
            out.add(int(m.group(1)))
    return sorted(out)


# --------------------------------------------------------------------------- prepared expressions


@functools.lru_cache(maxsize=1)
def _function_catalog() -> tuple[frozenset[str], frozenset[str]]:
    """(non-deterministic function names, aggregate and window function names) of DataFusion."""
    ctx = _df.SessionContext(_df.SessionConfig().with_information_schema(True))
    volatile = ctx.sql("SELECT DISTINCT routine_name FROM information_schema.routines WHERE NOT is_deterministic")
    names = frozenset(n.lower() for n in volatile.to_pydict()["routine_name"])
    return names, frozenset(n.lower() for n in [*ctx.udafs(), *ctx.udwfs()])


def _check_row_wise(expression: str, toks: list[_Tok]) -> None:
    """Spec requirements 1-2 beyond spec.py's denylist: DataFusion's own volatility, no
    aggregates, windows or subqueries (their value would depend on the batch)."""
    volatile, aggregates = _function_catalog()
    for i, t in enumerate(toks):
        if t.kind != "ident":
            continue
        low = t.text.lower()
        if low in ("select", "over"):
            raise InvalidSpecError(
                f"expression {expression!r}: {t.text.upper()} is not allowed; a partition expression is "
                f"evaluated row by row (subqueries and window functions depend on the batch)"
            )
        if i + 1 < len(toks) and toks[i + 1].text == "(":
            if low in volatile:
                raise InvalidSpecError(
                    f"expression {expression!r}: DataFusion marks {t.text}() as not deterministic "
                    f"(spec requirements 1-2)"
                )
            if low in aggregates:
                raise InvalidSpecError(
                    f"expression {expression!r}: {t.text}() is an aggregate or window function; a partition "
                    f"expression must be row-wise"
                )


def check_row_wise(expression: str) -> None:
    """:class:`InvalidSpecError` unless ``expression`` is row-wise and deterministic by
    DataFusion's own function catalog (no volatile function, aggregate, window or subquery).

    >>> check_row_wise("amount * 2")
    >>> check_row_wise("amount * random()")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.InvalidSpecError: expression 'amount * random()': DataFusion marks random() as not ...
    """
    _check_row_wise(expression, _tokens(expression))


_SQL_OPTIONS = _df.SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)


@dataclass
class _Prepared:
    """One expression planned against one input schema, ready to run per batch."""

    expression: str
    schema: pa.Schema
    ctx: _df.SessionContext
    sql: str
    output_type: pa.DataType
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, batch: pa.RecordBatch) -> pa.Array:
        with self.lock:
            self.ctx.deregister_table(_TABLE)
            self.ctx.register_record_batches(_TABLE, [[batch]])
            try:
                table = self.ctx.sql_with_options(self.sql, _SQL_OPTIONS).to_arrow_table()
            finally:
                self.ctx.deregister_table(_TABLE)
        col = table.column(0)
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _new_context() -> _df.SessionContext:
    # One partition: DataFusion's round-robin repartitioning would otherwise reorder rows.
    return _df.SessionContext(_df.SessionConfig().with_target_partitions(1))


def _plan_type(ctx: _df.SessionContext, sql_expr: str, expression: str) -> pa.DataType:
    try:
        schema = ctx.sql_with_options(f"SELECT (\n{sql_expr}\n) AS {_VALUE} FROM {_TABLE}", _SQL_OPTIONS).schema()
    except BaseException as e:  # DataFusion raises plain Exception, Rust panics raise BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise InvalidSpecError(f"expression {expression!r}: DataFusion cannot plan {sql_expr!r}: {_short(e)}") from None
    return schema.field(0).type


def _rewrite_hash_calls(ctx: _df.SessionContext, sql: str, expression: str, counter: list[int]) -> str:
    """Replace each murmur3 / murmur3_multi call by a UDF registered for its exact argument types."""
    toks = _tokens(sql)
    calls = _calls(toks, set(HASH_FUNCTIONS))
    if not calls:
        return sql
    out, pos = [], 0
    for start, end, name, spans in calls:
        args = [_rewrite_hash_calls(ctx, sql[a:b], expression, counter).strip() for a, b in spans]
        if name == "murmur3" and len(args) != 1:
            raise InvalidSpecError(f"expression {expression!r}: murmur3 takes exactly one argument, got {len(args)}")
        if any(not a for a in args):
            raise InvalidSpecError(f"expression {expression!r}: empty argument in {sql[start:end]!r}")
        types = [_plan_type(ctx, a, expression) for a in args]
        for t in types:
            _check_hashable(t, f"expression {expression!r}: {name}")
        udf_name = f"__lp_{name}_{counter[0]}"
        counter[0] += 1
        ctx.register_udf(_make_udf(udf_name, name, types))
        out.append(sql[pos:start])
        out.append(f"{udf_name}({', '.join(args)})")
        pos = end
    out.append(sql[pos:])
    return "".join(out)


@functools.lru_cache(maxsize=128)
def _prepare(expression: str, schema: pa.Schema) -> _Prepared:
    """Plan ``expression`` over ``schema`` (columns col0..colN) once; cached per (expression, schema)."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidSpecError(f"expression {expression!r}: must be a non-empty SQL string")
    toks = _tokens(expression)
    _check_row_wise(expression, toks)
    ctx = _new_context()
    if not len(schema):
        schema = pa.schema([pa.field("__lp_rows", pa.null())])
    empty_batch = pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    ctx.register_record_batches(_TABLE, [[empty_batch]])
    try:
        rewritten = _rewrite_hash_calls(ctx, expression, expression, [0])
        # A single expression and nothing else (no "col0 FROM other WHERE ..."): parse it alone.
        try:
            ctx.parse_sql_expr(rewritten, ctx.table(_TABLE).logical_plan().to_variant().schema())
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise InvalidSpecError(
                f"expression {expression!r}: DataFusion cannot parse it as one expression: {_short(e)}"
            ) from None
        output_type = _plan_type(ctx, rewritten, expression)
        sql = f"SELECT (\n{rewritten}\n) AS {_VALUE} FROM {_TABLE}"
        # Run it on the empty input: catches errors of physical planning, and an aggregate
        # (one row out of zero rows in) that slipped through the name check.
        try:
            empty = ctx.sql_with_options(sql, _SQL_OPTIONS).to_arrow_table()
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise InvalidSpecError(f"expression {expression!r}: DataFusion cannot plan it: {_short(e)}") from None
        if empty.num_rows != 0:
            raise InvalidSpecError(f"expression {expression!r}: is not row-wise (an aggregate?)")
    finally:
        ctx.deregister_table(_TABLE)
    return _Prepared(expression, schema, ctx, sql, output_type)


_contexts = threading.local()  # one filter context per thread


def filter_context() -> _df.SessionContext:
    """This thread's DataFusion context with lancepart's UDFs, for filters and expression checks
    (made once: a new context and its UDFs cost about as much as filtering a table of a few
    thousand rows). Register a table in it only for the duration of one evaluation."""
    ctx = getattr(_contexts, "ctx", None)
    if ctx is None:
        ctx = _df.SessionContext(_df.SessionConfig().with_target_partitions(1))
        register_udfs(ctx)
        _contexts.ctx = ctx
    return ctx


def _after_fork_in_child() -> None:
    global _contexts
    _prepare.cache_clear()  # each holds a lock another thread of the parent may have held
    _contexts = threading.local()  # the forking thread's context was made in the parent


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _short(e: BaseException) -> str:
    msg = str(e).strip()
    msg = re.sub(r"^DataFusion error: ", "", msg)
    return msg if len(msg) < 600 else msg[:600] + "..."


# --------------------------------------------------------------------------- evaluation


def _as_array(a: Any) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    if not isinstance(a, pa.Array):
        a = pa.array(a)
    if pa.types.is_dictionary(a.type):
        a = a.dictionary_decode()
    return a


def _input_batch(
    expression: str,
    columns: Mapping[str, Any] | Sequence[Any] | pa.Table | pa.RecordBatch,
    num_rows: int | None,
) -> pa.RecordBatch:
    if isinstance(columns, (pa.Table, pa.RecordBatch)):
        named = {name: columns.column(name) for name in columns.column_names}
        num_rows = columns.num_rows if num_rows is None else num_rows
    elif isinstance(columns, Mapping):
        named = dict(columns)
    else:
        named = {f"col{i}": c for i, c in enumerate(columns)}
    arrays = {k: _as_array(v) for k, v in named.items()}
    lengths = {len(a) for a in arrays.values()}
    if num_rows is not None:
        lengths.add(num_rows)
    if len(lengths) > 1:
        raise ExpressionEvaluationError(f"expression {expression!r}: input columns differ in length {sorted(lengths)}")
    n = lengths.pop() if lengths else 1
    refs = referenced_columns(expression)
    # Spec requirement 4: a source column that is not there reads as NULL.
    for k in refs:
        arrays.setdefault(f"col{k}", pa.nulls(n))
    names = sorted((k for k in arrays if _COL_RE.fullmatch(k)), key=lambda k: int(k[3:]))
    return pa.RecordBatch.from_arrays([arrays[k] for k in names], names=names) if names else pa.record_batch(
        {"__lp_rows": pa.nulls(n)}
    )


def plan_type(expression: str, source_types: Sequence[pa.DataType]) -> pa.DataType:
    """The Arrow type DataFusion plans for ``expression`` with ``colK`` of ``source_types[K]``.

    Raises :class:`InvalidSpecError` when it cannot be planned or is not row-wise / deterministic.

    >>> plan_type("date_part('year', col0)", [pa.date32()])
    DataType(int32)
    """
    schema = pa.schema([pa.field(f"col{i}", t) for i, t in enumerate(source_types)])
    for k in referenced_columns(expression):
        if k >= len(source_types):
            raise InvalidSpecError(
                f"expression {expression!r}: references col{k} but there are only {len(source_types)} source columns"
            )
    return _prepare(expression, schema).output_type


def evaluate(
    expression: str,
    columns: Mapping[str, Any] | Sequence[Any] | pa.Table | pa.RecordBatch,
    num_rows: int | None = None,
) -> pa.Array:
    """Evaluate a DataFusion SQL expression over ``col0..colN`` bound to arrays; one result array.

    ``columns`` is a sequence (``col0``, ``col1``, ...), a mapping or a table with columns named
    ``colK``. A ``colK`` the expression references but ``columns`` lacks is all-NULL (spec
    requirement 4); ``num_rows`` gives the length when no column is given. Plans are cached per
    (expression, input types), so calling this per Arrow batch is cheap. ``murmur3`` and
    ``murmur3_multi`` work on every type docs/design.md §1 defines.

    Raises :class:`InvalidSpecError` when DataFusion cannot plan the expression and
    :class:`ExpressionEvaluationError` (naming the first failing row and its values) when it
    fails at run time.

    >>> evaluate("lower(col0)", [pa.array(["A", None])]).to_pylist()
    ['a', None]
    """
    batch = _input_batch(expression, columns, num_rows)
    prepared = _prepare(expression, batch.schema)
    try:
        out = prepared.run(batch)
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise ExpressionEvaluationError(
            f"expression {expression!r} failed at run time: {_short(e)}{_failing_row(prepared, batch)}"
        ) from None
    if len(out) != batch.num_rows:
        raise ExpressionEvaluationError(
            f"expression {expression!r} returned {len(out)} rows for {batch.num_rows} input rows"
        )
    return out


def _failing_row(prepared: _Prepared, batch: pa.RecordBatch) -> str:
    """Bisect the batch to the first row that fails on its own (a few dozen tiny evaluations)."""

    def fails(b: pa.RecordBatch) -> bool:
        try:
            prepared.run(b)
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            return True
        return False

    lo, hi = 0, batch.num_rows
    if hi == 0 or not fails(batch):
        return ""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(batch.slice(lo, mid - lo)):
            hi = mid
        elif fails(batch.slice(mid, hi - mid)):
            lo = mid
        else:  # only fails in combination: give up on a single row
            return ""
    row = batch.slice(lo, 1).to_pylist()[0]
    return f" (first failing row {lo}: {row})"
