"""Fault injection at named protocol steps, for the crash and conflict tests.

Inert unless ``LANCEPART_FAULT`` is set, e.g. ``LANCEPART_FAULT=after_table_commits:exit``.
Form: ``<step>:<action>[:<n>]`` with action ``raise`` (InjectedFault), ``exit``
(``os._exit(77)``, no cleanup, like kill -9), ``sleep`` (n seconds, default 5) or ``wait``
(``<step>:wait:<path>``: creates ``<path>.reached`` on arrival, then waits until the file
``path`` exists, at most :data:`WAIT_LIMIT` seconds: a test waits for the first file, lets a
rival publish, then creates the second); with ``raise``/``exit`` an ``n`` fires on the
n-th time the step is reached (default 1st).
Several specs may be given separated by commas.
"""

from __future__ import annotations

import os
import threading
import time

from lancepart.errors import LancepartError

ENV = "LANCEPART_FAULT"
STEPS = (
    "after_plan",  # partitions known, nothing written
    "after_reserve",  # reservation committed
    "after_fragments",  # some fragments written (checked after each partition table's fragments)
    "after_table_commit",  # after each partition table commit
    "after_table_commits",  # every touched table committed, __manifest not yet
    "before_manifest_commit",  # inside the retry loop, just before the __manifest commit
    "after_manifest_commit",  # published
)
# steps of other operations than a write
OTHER_STEPS = (
    "before_schema_commit",  # update_schema: the new schema computed, its __manifest commit not yet made
    "before_change_task",  # the change feed: a task planned, its partition tables not opened yet
    "before_constraint_seal",  # add_constraint: declared, its seal commit not yet made
    "before_unreferenced_delete",  # cleanup: an unreferenced file checked again, its delete not yet made
    "waiting_for_cleanup",  # a publish's file check finds a cleanup deleting files of its table, and waits
    "before_batch_check",  # a publish attempt: its __manifest snapshot taken, nothing of it read yet
)
WAIT_LIMIT = 120.0
_counts: dict[str, int] = {}
_lock = threading.Lock()  # table commits reach their checkpoint from several threads


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread of the parent may have held it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def reset() -> None:
    """Forget how many times each step was reached in this process: a ``raise`` or ``exit``
    fires on the n-th time its step is reached after the last reset (tests reset before each)."""
    with _lock:
        _counts.clear()


class InjectedFault(LancepartError):
    """Raised by a ``raise`` fault; never raised in production."""


def checkpoint(step: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    for item in spec.split(","):
        name, _, rest = item.partition(":")
        if name.strip() != step:
            continue
        action, _, arg = rest.partition(":")
        with _lock:
            _counts[step] = n = _counts.get(step, 0) + 1
        if action == "sleep":
            time.sleep(float(arg or 5))
            continue
        if action == "wait":
            with open(f"{arg}.reached", "a"):
                pass
            deadline = time.monotonic() + WAIT_LIMIT
            while not os.path.exists(arg) and time.monotonic() < deadline:
                time.sleep(0.02)
            continue
        if n != int(arg or 1):
            continue
        if action == "exit":
            os._exit(77)
        raise InjectedFault(f"injected fault at protocol step {step!r}")
