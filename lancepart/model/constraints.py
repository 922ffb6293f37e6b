"""CHECK constraint declarations (docs/constraints.md): what a constraint is and how one is
read from ``__manifest`` root properties; enforced by :mod:`lancepart.write.constraints`.

A constraint is a name and a SQL boolean expression over the namespace's columns (DataFusion,
row-wise and deterministic), kept as the root property ``lancepart.constraint.<name>``. A row
satisfies it when the expression is TRUE; FALSE and NULL break it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from lancepart.errors import InvalidArgumentError, InvalidSpecError

#: Root property prefix of a constraint declaration: ``lancepart.constraint.<name>`` = expression.
PROPERTY_PREFIX = "lancepart.constraint."
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


def constraints(metadata: Mapping[str, str]) -> dict[str, str]:
    """The constraints declared in ``__manifest`` root properties ``metadata``, by name.

    >>> constraints({"schema": "...", "lancepart.constraint.amount_nonneg": "amount >= 0"})
    {'amount_nonneg': 'amount >= 0'}
    """
    return {k[len(PROPERTY_PREFIX):]: v for k, v in sorted(metadata.items()) if k.startswith(PROPERTY_PREFIX)}


def constraints_json(metadata: Mapping[str, str]) -> str:
    """The constraints of ``metadata`` as one string (what a check done is keyed by)."""
    return json.dumps(constraints(metadata), sort_keys=True)


def columns_of(schema: pa.Schema, cons: Mapping[str, str]) -> list[str]:
    """The columns of ``schema`` the expressions of ``cons`` may name, in schema order."""
    from lancepart.model.predicates import filter_columns

    names = {c for expr in cons.values() for c in filter_columns(expr, schema)}
    return [n for n in schema.names if n in names]


def check_constraint(schema: pa.Schema, name: Any, expression: Any) -> str:
    """``expression`` stripped, after checking ``name`` and ``expression`` as a constraint of a
    namespace of ``schema``: :class:`InvalidArgumentError` naming what is wrong.

    >>> schema = pa.schema([("amount", pa.float64())])
    >>> check_constraint(schema, "amount_nonneg", " amount >= 0 ")
    'amount >= 0'
    >>> check_constraint(schema, "amount_nonneg", "amount * 2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lancepart.errors.InvalidArgumentError: constraint 'amount_nonneg': 'amount * 2' gives double, not a boolean; ...
    """
    from lancepart.model.datafusion_udfs import check_row_wise, filter_context

    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgumentError(f"constraint name {name!r}: letters, digits and '_' (not first a digit), at "
                                   f"most 128 characters")
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidArgumentError(f"constraint {name!r}: the expression must be SQL text (a non-empty str), "
                                   f"e.g. 'amount >= 0'; got {expression!r}")
    expression = expression.strip()
    try:
        check_row_wise(expression)
    except InvalidSpecError as e:
        raise InvalidArgumentError(f"constraint {name!r}: {e}; a constraint must give the same answer for a row "
                                   f"whenever it is checked") from None
    ctx = filter_context()
    plain = pa.schema([f.remove_metadata() for f in schema])
    ctx.register_record_batches("t", [[pa.RecordBatch.from_pylist([], schema=plain)]])
    try:
        kind = ctx.table("t").select_exprs(f"({expression})").schema().field(0).type
    except Exception as e:  # DataFusion raises plain Exception
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise InvalidArgumentError(f"constraint {name!r}: DataFusion cannot plan {expression!r} over the "
                                   f"namespace's columns {schema.names}: {first}") from None
    finally:
        ctx.deregister_table("t")
    if kind not in (pa.bool_(), pa.null()):
        raise InvalidArgumentError(f"constraint {name!r}: {expression!r} gives {kind}, not a boolean; a "
                                   f"constraint is a condition every row must meet, e.g. 'amount >= 0'")
    return expression


def check_still_valid(metadata: Mapping[str, str], schema: pa.Schema, what: str) -> None:
    """Every constraint of ``metadata`` still plans over ``schema`` (a schema change about to be
    made): :class:`InvalidArgumentError` naming the first that does not (a renamed or dropped
    column it names)."""
    for name, expr in constraints(metadata).items():
        try:
            check_constraint(schema, name, expr)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(
                f"{what}: constraint {name!r} ({expr}) would no longer hold a meaning on the new schema ({e}); drop "
                f"it first (ns.drop_constraint({name!r})) and add it again over the new column names; nothing was "
                f"published") from None
