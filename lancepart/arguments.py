"""Type checks of the arguments of the public methods (``to_table``, ``to_batches``,
``to_duckdb``, ``sql``, ``changes``, ``partitions``, ``explain``, ``search``, ...), and
:class:`CommitOptions`, the ``commit=`` argument of every method that publishes.

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
from dataclasses import dataclass
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


#: the prefix of the ``__manifest`` transaction properties lancepart itself records (operation,
#: batch id, rows, ...): a commit's ``custom_metadata`` may not use it
RESERVED_PREFIX = "lancepart."
DEFAULT_MAX_RETRIES = 20


@dataclass(frozen=True)
class CommitOptions:
    """How an operation commits to ``__manifest``, one object for every publishing method
    (``commit=``), like deltalake's ``CommitProperties``.

    ``max_retries``: rebases after a conflict with a concurrent writer before
    :class:`~lancepart.errors.CommitConflictError` (default 20; the methods' ``max_retries=``
    keyword says the same). ``custom_metadata``: ``str -> str`` pairs recorded in the Lance
    transaction of the operation's ``__manifest`` commit, which ``ns.history()`` shows in
    ``HistoryEntry.properties``; keys starting with ``lancepart.`` are lancepart's own and refused.

    >>> CommitOptions(max_retries=5, custom_metadata={"job": "nightly"}).custom_metadata
    {'job': 'nightly'}
    >>> CommitOptions(custom_metadata={"lancepart.operation": "x"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lancepart.errors.InvalidArgumentError: custom_metadata key 'lancepart.operation' is reserved: ...
    """

    max_retries: int | None = None
    custom_metadata: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        check_int("max_retries", self.max_retries, minimum=0, optional=True)
        md = self.custom_metadata
        if md is None:
            return
        if not isinstance(md, Mapping):
            raise invalid("custom_metadata", md, "a mapping of str to str or None")
        for key, value in md.items():
            if not isinstance(key, str) or not key.strip():
                raise invalid("custom_metadata key", key, "a non-empty str")
            if key.lower().startswith(RESERVED_PREFIX):
                raise InvalidArgumentError(f"custom_metadata key {key!r} is reserved: keys starting with "
                                           f"{RESERVED_PREFIX!r} are what lancepart records itself; choose another key")
            if not isinstance(value, str):
                raise invalid(f"custom_metadata[{key!r}]", value, "a str")
        object.__setattr__(self, "custom_metadata", dict(md))


def commit_settings(commit: Any, max_retries: Any) -> tuple[int, dict[str, str]]:
    """``(max_retries, transaction properties)`` of a publishing method's ``commit=`` and
    ``max_retries=``: either may give the retries (both: they must agree), default 20.

    >>> commit_settings(None, None)
    (20, {})
    >>> commit_settings(CommitOptions(max_retries=3, custom_metadata={"run": "7"}), None)
    (3, {'run': '7'})
    """
    if commit is None:
        commit = CommitOptions()
    elif not isinstance(commit, CommitOptions):
        raise invalid("commit", commit, "a lancepart.CommitOptions or None")
    check_int("max_retries", max_retries, minimum=0, optional=True)
    if max_retries is not None and commit.max_retries is not None and max_retries != commit.max_retries:
        raise InvalidArgumentError(f"max_retries={max_retries} and commit=CommitOptions(max_retries="
                                   f"{commit.max_retries}) disagree: give it once")
    retries = next((r for r in (max_retries, commit.max_retries) if r is not None), DEFAULT_MAX_RETRIES)
    return int(retries), dict(commit.custom_metadata or {})
