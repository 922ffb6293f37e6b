"""Type checks of the arguments of the public reading methods (``to_table``, ``to_batches``,
``to_duckdb``, ``sql``, ``changes``, ``partitions``, ``explain``, ``search``, ...).

A value of the wrong type is an :class:`~lancepart.errors.InvalidArgumentError` naming the
argument, what it accepts and the type it got, raised before anything is read; never a raw
``TypeError`` or ``AttributeError`` from deeper down (``'int' object has no attribute 'strip'``).

>>> check_filter("  ") is None
True
>>> check_columns(("id", "amount"))
['id', 'amount']
>>> check_int("k", 5, minimum=1)
5
>>> check_filter(5)
Traceback (most recent call last):
...
lancepart.errors.InvalidArgumentError: filter must be SQL text (a str) or None, got int 5
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

from lancepart.errors import InvalidArgumentError

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def invalid(name: str, value: Any, expected: str) -> InvalidArgumentError:
    """``InvalidArgumentError("<name> must be <expected>, got <type> <value>")`` (the value shortened)."""
    return InvalidArgumentError(f"{name} must be {expected}, got {type(value).__name__} {_REPR.repr(value)}")


def check_filter(value: Any, name: str = "filter") -> str | None:
    """A filter argument: SQL text or None; blank text is None (no filter)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(name, value, "SQL text (a str) or None")
    return value if value.strip() else None


def check_text(name: str, value: Any, expected: str = "a non-empty str") -> str:
    """A string argument that may not be blank (a column name, a query)."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(name, value, expected)
    return value


def check_int(name: str, value: Any, *, minimum: int = 0, optional: bool = False) -> int | None:
    """An integer argument of at least ``minimum`` (a bool is not one); None when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise invalid(name, value, f"an integer >= {minimum}" + (" or None" if optional else ""))
    if value < minimum:
        raise InvalidArgumentError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_columns(value: Any, name: str = "columns") -> list[str] | None:
    """A projection argument: a list (or other iterable) of column names, or None for all of
    them. A string, a mapping or a name that is not a string is refused; what the names must
    be (known, not repeated) is checked where the schema is known. An empty list stays empty."""
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise invalid(name, value, "a list of column names (str) or None")
    cols = list(value)
    bad = [c for c in cols if not isinstance(c, str)]
    if bad:
        raise InvalidArgumentError(f"{name} must be a list of column names (str), got {type(bad[0]).__name__} "
                                   f"{_REPR.repr(bad[0])} in {_REPR.repr(cols)}")
    return cols


def check_instance(name: str, value: Any, cls: type | tuple[type, ...], expected: str) -> Any:
    """An object argument that must be an instance of ``cls`` or None."""
    if value is not None and not isinstance(value, cls):
        raise invalid(name, value, f"{expected} or None")
    return value
