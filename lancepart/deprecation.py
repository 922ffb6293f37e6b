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
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: the release from which the positional forms are refused
REMOVED_IN = "0.2"


def keyword_only(*names: str) -> Callable[[F], F]:
    """Decorator: the keyword-only parameters ``names`` of the decorated function may still be
    passed by position, in that order, after its positional parameters; doing so warns with a
    :class:`DeprecationWarning` and passes them as keywords. Below ``@classmethod`` /
    ``@staticmethod``; the signature ``help()`` shows is the new one."""

    def wrap(fn: F) -> F:
        params = inspect.signature(fn).parameters
        missing = [n for n in names if params.get(n) is None or params[n].kind is not inspect.Parameter.KEYWORD_ONLY]
        if missing:
            raise TypeError(f"{fn.__qualname__}: {missing} are not keyword-only parameters")
        positional = sum(p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                         for p in params.values())
        shown = fn.__qualname__

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            if len(args) > positional:
                extra = args[positional:]
                if len(extra) > len(names):
                    raise TypeError(f"{shown}() takes at most {positional + len(names)} positional arguments "
                                    f"({positional} from lancepart {REMOVED_IN} on) but {len(args)} were given")
                given = names[:len(extra)]
                for name, value in zip(given, extra, strict=True):
                    if name in kwargs:
                        raise TypeError(f"{shown}() got multiple values for argument {name!r}")
                    kwargs[name] = value
                warnings.warn(
                    f"{shown}(): passing {', '.join(given)} by position is deprecated and stops working in "
                    f"lancepart {REMOVED_IN}; pass {', '.join(f'{n}=...' for n in given)} as keyword "
                    f"{'argument' if len(given) == 1 else 'arguments'}",
                    DeprecationWarning, stacklevel=2)
                args = args[:positional]
            return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap
