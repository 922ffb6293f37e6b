"""Arguments that became keyword-only, still accepted by position for one release.

The public functions take ``(spark or df, root, <the operation's own arguments>, *,
storage_options=None, ...)``: ``storage_options`` (and the options after it) are keywords
everywhere. Functions that used to take them by position keep accepting that for one
release, with a :class:`DeprecationWarning` naming the keyword to use (docs/api.md).

>>> @keyword_only("storage_options")
... def read(spark, root, filter=None, *, storage_options=None):
...     return filter, storage_options
>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     read(None, "/data", "x > 1", {"region": "eu"})
('x > 1', {'region': 'eu'})
>>> caught[0].category.__name__
'DeprecationWarning'

A keyword the function does not take is an :class:`~lancepart.errors.InvalidArgumentError`
naming it (nothing is silently ignored):

>>> read(None, "/data", colums=["id"])
Traceback (most recent call last):
...
lancepart.errors.InvalidArgumentError: read() does not take colums=; it takes filter=, storage_options=
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from lancepart.errors import InvalidArgumentError

F = TypeVar("F", bound=Callable[..., Any])

#: the release from which the positional forms are refused
REMOVED_IN = "0.2"


def keyword_only(*names: str) -> Callable[[F], F]:
    """Decorator: the keyword-only parameters ``names`` of the decorated function may still be
    passed by position, in that order, after its positional parameters; doing so warns with a
    :class:`DeprecationWarning` and passes them as keywords. Below ``@classmethod`` /
    ``@staticmethod``; the signature ``help()`` shows is the new one. Unless the function takes
    ``**kwargs``, a keyword it does not take is an :class:`InvalidArgumentError` naming it
    (``names`` may be empty for just that check)."""

    def wrap(fn: F) -> F:
        params = inspect.signature(fn).parameters
        missing = [n for n in names if params.get(n) is None or params[n].kind is not inspect.Parameter.KEYWORD_ONLY]
        if missing:
            raise TypeError(f"{fn.__qualname__}: {missing} are not keyword-only parameters")
        positional = sum(p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                         for p in params.values())
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        known = {n for n, p in params.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
        options = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
                   or (p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is not inspect.Parameter.empty)]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            shown = run.__qualname__  # as the class names it (a renamed method: its public name)
            if not takes_any and not known.issuperset(kwargs):
                unknown = sorted(set(kwargs) - known)
                raise InvalidArgumentError(f"{shown}() does not take {', '.join(f'{n}=' for n in unknown)}; it takes "
                                           f"{', '.join(f'{n}=' for n in options) or 'no options'}")
            if len(args) > positional:
                extra = args[positional:]
                if len(extra) > len(names):
                    later = f" ({positional} from lancepart {REMOVED_IN} on)" if names else ""
                    raise TypeError(f"{shown}() takes at most {positional + len(names)} positional arguments{later} "
                                    f"but {len(args)} were given")
                given = names[:len(extra)]
                for name, value in zip(given, extra, strict=True):
                    if name in kwargs:
                        raise TypeError(f"{shown}() got multiple values for argument {name!r}")
                    kwargs[name] = value
                warnings.warn(
                    f"{shown}(): passing {', '.join(given)} by position is deprecated and works until lancepart "
                    f"{REMOVED_IN}; pass {', '.join(f'{n}=...' for n in given)} as keyword "
                    f"{'argument' if len(given) == 1 else 'arguments'}",
                    DeprecationWarning, stacklevel=2)
                args = args[:positional]
            return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap
