"""Bounded thread pool for per-table Lance calls on the driver (they are I/O-bound and run in
Rust without the GIL)."""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lancepart.errors import ForkedProcessError

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 16


def map_threads(fn: Callable[[T], R], items: Iterable[T], max_workers: int = MAX_WORKERS) -> list[R]:
    """``[fn(x) for x in items]`` on up to ``max_workers`` threads, in order; the first error
    raised by any call is re-raised after the others finished. Each call runs in a copy of the
    caller's context (:mod:`contextvars`: the operation's opened tables, see
    :func:`lancepart.storage.lance_io.one_open_per_version`).

    >>> map_threads(lambda x: x * 2, [1, 2, 3])
    [2, 4, 6]
    """
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        futures = [pool.submit(contextvars.copy_context().run, fn, x) for x in items]
        return [f.result() for f in futures]


_END = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def stream_in_order(produce: Callable[[T], Iterable[R]], items: Iterable[T], *, window: int = 4,
                    buffered: int = 2) -> Iterator[R]:
    """``for x in items: yield from produce(x)``, with up to ``window`` items produced ahead on
    threads: each item's output waits in a queue of at most ``buffered`` elements until its turn,
    so memory holds at most ``window * buffered`` elements whatever the number of items, and the
    slow first requests of the next items (opening a table on an object store) overlap the
    current one. Order is kept; the first error is raised in the consumer's thread. Closing the
    generator early stops the producers at their next element. Each producer runs in a copy of
    the caller's :mod:`contextvars` context. The producers are threads of the process that
    started the stream: read on in a forked child, it raises :class:`ForkedProcessError` instead
    of waiting for them.

    >>> list(stream_in_order(lambda n: range(n), [1, 2, 3]))
    [0, 0, 1, 0, 1, 2]
    """
    items = list(items)
    if window <= 1 or len(items) <= 1:
        for x in items:
            yield from produce(x)
        return
    stop = threading.Event()

    def offer(q: queue.Queue, item: object) -> bool:
        """Put ``item`` once there is room; False when the consumer has gone."""
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run(x: T, q: queue.Queue) -> None:
        try:
            for out in produce(x):
                if not offer(q, out):
                    return
            offer(q, _END)
        except BaseException as e:  # handed to the consumer, raised there
            offer(q, _Failed(e))

    pool = ThreadPoolExecutor(max_workers=min(window, len(items)))
    queues: dict[int, queue.Queue] = {}
    started = 0
    pid = os.getpid()
    try:
        for i in range(len(items)):
            while started < min(len(items), i + window):  # keep `window` items in flight
                q: queue.Queue = queue.Queue(maxsize=buffered)
                queues[started] = q
                pool.submit(contextvars.copy_context().run, run, items[started], q)
                started += 1
            q = queues.pop(i)
            while True:
                if os.getpid() != pid:  # forked while the stream was read: its producers stayed behind
                    raise ForkedProcessError(
                        f"a stream started in process {pid} is read on in its forked child {os.getpid()}, where "
                        "the threads producing it do not exist: read it in the process that started it, or "
                        "start a new read in this one")
                out = q.get()
                if out is _END:
                    break
                if isinstance(out, _Failed):
                    raise out.error
                yield out
    finally:
        stop.set()
        for q in queues.values():  # unblock producers waiting on a full queue
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        pool.shutdown(wait=False, cancel_futures=True)
