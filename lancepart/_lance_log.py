"""Lance's Rust log filter, set before anything imports ``lance``.

Lance (``lance.fragment.write_fragments``) logs ``WARN No existing dataset at <uri>, it will be
created`` for every fragment written into a table directory that has no table yet: lancepart's
Spark write does that for each new partition on purpose (the table is created after the
fragments), so a job printed one such line per fragment (hundreds per job). Lance reads its
log filter from the ``LANCE_LOG`` environment variable (env_logger directives) once, when
``lance`` is first imported in a process. Unless ``LANCE_LOG`` is set already, lancepart sets it
to :data:`LANCE_LOG_DEFAULT`: warnings as before, except from the module that logs that line
(``lance::dataset::write::insert``, whose only warning it is), which logs errors only.

Spark's Python workers are separate processes: :func:`ship_to_executors` gives them the same
value through the SparkContext's executor environment (``spark.executorEnv.LANCE_LOG``).
"""

from __future__ import annotations

import os
from typing import Any

LANCE_LOG_DEFAULT = "warn,lance::dataset::write::insert=error"

os.environ.setdefault("LANCE_LOG", LANCE_LOG_DEFAULT)


def value() -> str:
    """The filter this process uses (the caller's own ``LANCE_LOG`` wins over the default)."""
    return os.environ.get("LANCE_LOG", LANCE_LOG_DEFAULT)


def ship_to_executors(spark: Any) -> None:
    """Put ``LANCE_LOG`` into the environment of the Python workers of tasks created from now on,
    unless the session has one (``spark.executorEnv.LANCE_LOG``). Spark Connect has no
    SparkContext: there the executors' own environment decides."""
    try:
        env = spark.sparkContext.environment
    except Exception:  # Spark Connect
        return
    env.setdefault("LANCE_LOG", value())
