"""Durations as people write them in configs, properties and on the command line.

>>> parse_duration("1d12h")
datetime.timedelta(days=1, seconds=43200)
>>> parse_duration("30 days")
datetime.timedelta(days=30)
>>> format_duration(timedelta(hours=36))
'1d12h'
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_UNITS = {"w": 604_800, "week": 604_800, "weeks": 604_800, "d": 86_400, "day": 86_400, "days": 86_400,
          "h": 3_600, "hour": 3_600, "hours": 3_600, "m": 60, "min": 60, "minute": 60, "minutes": 60,
          "s": 1, "sec": 1, "second": 1, "seconds": 1}


def parse_duration(value: Any) -> timedelta:
    """``7d``, ``36h``, ``1d12h``, ``90m``, ``2w``, ``30 days``, ``12 hours``, a number of seconds
    (``3600``, ``"0"``) or a ``timedelta`` -> ``timedelta``. Raises ``ValueError`` naming the text
    for anything else (negative values included)."""
    if isinstance(value, timedelta):
        return value
    text = str(value).strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or _PART.sub("", text).strip() or any(u not in _UNITS for _, u in parts):
            raise ValueError(f"{value!r} is not a duration like 7d, 36h, 1d12h, 90m, 2w, '30 days' or a number "
                             f"of seconds") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds < 0 or seconds != seconds:
        raise ValueError(f"{value!r} is not a duration: it must be zero or more")
    return timedelta(seconds=seconds)


def format_duration(d: timedelta) -> str:
    """The inverse of :func:`parse_duration` for whole seconds: ``timedelta(hours=36)`` -> ``1d12h``."""
    rest, out = int(d.total_seconds()), ""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out or "0"
