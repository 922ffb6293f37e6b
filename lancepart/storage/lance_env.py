"""Process-wide Lance settings lancepart chooses, applied when ``lancepart`` is imported (before
anything imports ``lance``); a value already set in the environment is always kept.

* ``LANCE_USE_VERSION_HINT=false``: Lance otherwise rewrites ``_versions/latest_version_hint.json``
  at every commit of every table, one more file (a quarter of the files) in each small partition
  table. The hint only speeds up finding a table's *latest* version; lancepart reads partition
  tables at the ``read_version`` ``__manifest`` pins, and Lance treats a hint as a lower bound (a
  table written without it, or with a stale one, opens at its true latest version in every
  reader). Lance reads the variable once, at its first commit in the process
  (``LANCE_USE_VERSION_HINT=true`` restores the hint). docs/design.md §8.
* ``LANCE_LOG`` (Lance's Rust log filter, env_logger directives, read once when ``lance`` is first
  imported): :data:`LANCE_LOG_DEFAULT` keeps warnings as before except from the module that logs
  ``WARN No existing dataset at <uri>, it will be created`` for every fragment written into a
  table directory that has no table yet (``lance::dataset::write::insert``, whose only warning
  it is). lancepart's Spark write does that for each new partition on purpose, so a job printed
  one such line per fragment. docs/phase-timings-and-logs.md.

Spark's Python workers are separate processes: :func:`ship_to_executors` gives them the same
values through the SparkContext's executor environment (``spark.executorEnv.*``).
"""

from __future__ import annotations

import os
from typing import Any

VERSION_HINT = "LANCE_USE_VERSION_HINT"
LANCE_LOG_DEFAULT = "warn,lance::dataset::write::insert=error"
DEFAULTS = {VERSION_HINT: "false", "LANCE_LOG": LANCE_LOG_DEFAULT}

for _name, _value in DEFAULTS.items():
    os.environ.setdefault(_name, _value)


def value(name: str = "LANCE_LOG") -> str:
    """The value this process uses for ``name`` (the caller's own setting wins over the default)."""
    return os.environ.get(name, DEFAULTS[name])


def ship_to_executors(spark: Any) -> None:
    """Put these settings into the environment of the Python workers of tasks created from now on,
    unless the session has its own (``spark.executorEnv.<NAME>``). Spark Connect has no
    SparkContext: there the executors' own environment decides."""
    try:
        env = spark.sparkContext.environment
    except Exception:  # Spark Connect
        return
    for name in DEFAULTS:
        env.setdefault(name, value(name))
