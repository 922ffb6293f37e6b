"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable


def median_ms(fn: Callable[[int], object], runs: int) -> float:
    """Median wall time of ``fn(i)`` for ``i`` in ``range(runs)``, in milliseconds.

    >>> median_ms(lambda i: None, 3) >= 0
    True
    """
    times = []
    for i in range(runs):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1e3, 2)


def rotated(items: list, k: int) -> list:
    """``items`` started at position ``k`` (mod its length): who goes first in round ``k`` of an
    interleaved benchmark.

    >>> rotated(["a", "b", "c"], 4)
    ['b', 'c', 'a']
    """
    k %= len(items)
    return items[k:] + items[:k]


def settle() -> None:
    """Write the page cache's dirty pages out now, untimed: a benchmark that writes a fresh copy
    of a table before timing an operation on it otherwise times the kernel writing that copy
    back meanwhile (a delete of 1 % of 2 M rows measured 1.15-2.5 s from one run to the next
    without it). Every system of a round settles the same way."""
    os.sync()
