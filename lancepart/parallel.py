"""Bounded thread pool for per-table Lance calls on the driver (they are I/O-bound and run in
Rust without the GIL)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 16


def map_threads(fn: Callable[[T], R], items: Iterable[T], max_workers: int = MAX_WORKERS) -> list[R]:
    """``[fn(x) for x in items]`` on up to ``max_workers`` threads, in order; the first error
    raised by any call is re-raised after the others finished. Each call runs in a copy of the
    caller's context (:mod:`contextvars`: the operation's opened tables, see
    :func:`lancepart.lance_io.one_open_per_version`).

    >>> map_threads(lambda x: x * 2, [1, 2, 3])
    [2, 4, 6]
    """
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, x) for x in items]
        return [f.result() for f in futures]
