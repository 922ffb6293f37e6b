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
    stream = _Stream(produce, items, window, buffered)
    try:
        for i in range(len(items)):
            stream.start_through(min(len(items), i + window))  # keep `window` items in flight
            yield from stream.outputs(i)
    finally:
        stream.close()


class _Stream:
    """The producer threads of one :func:`stream_in_order`: one queue per item started and not yet
    read, and the event that tells the producers the consumer has gone."""

    def __init__(self, produce: Callable[[T], Iterable[R]], items: list[T], window: int, buffered: int) -> None:
        self.produce, self.items, self.buffered = produce, items, buffered
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=min(window, len(items)))
        self.queues: dict[int, queue.Queue] = {}
        self.started = 0
        self.pid = os.getpid()

    def start_through(self, n: int) -> None:
        """Start producing every item before index ``n``."""
        while self.started < n:
            q: queue.Queue = queue.Queue(maxsize=self.buffered)
            self.queues[self.started] = q
            self.pool.submit(contextvars.copy_context().run, self._run, self.items[self.started], q)
            self.started += 1

    def outputs(self, i: int) -> Iterator[R]:
        """Item ``i``'s elements as its producer hands them over; its error raised here."""
        q = self.queues.pop(i)
        while True:
            if os.getpid() != self.pid:  # forked while the stream was read: its producers stayed behind
                raise ForkedProcessError(
                    f"a stream started in process {self.pid} is read on in its forked child {os.getpid()}, where "
                    "the threads producing it do not exist: read it in the process that started it, or "
                    "start a new read in this one")
            out = q.get()
            if out is _END:
                return
            if isinstance(out, _Failed):
                raise out.error
            yield out

    def close(self) -> None:
        """Stop the producers at their next element and let the pool go."""
        self.stop.set()
        for q in self.queues.values():  # unblock producers waiting on a full queue
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _offer(self, q: queue.Queue, item: object) -> bool:
        """Put ``item`` once there is room; False when the consumer has gone."""
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, x: T, q: queue.Queue) -> None:
        try:
            for out in self.produce(x):
                if not self._offer(q, out):
                    return
            self._offer(q, _END)
        except BaseException as e:  # handed to the consumer, raised there
            self._offer(q, _Failed(e))
