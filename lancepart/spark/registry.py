"""Registering the ``lancepart`` Spark data source in a session (``format("lancepart")``).

Every ``lps.*`` front end registers it implicitly, while the data source itself
(:mod:`lancepart.spark.datasource`) is built on the paths of ``lps.write`` and ``lps.read``: so
registration sits below both, and the data source hands its class over with
:func:`data_source` when its module is imported (``import lancepart.spark`` does that first).

Example::

    from lancepart.spark.registry import register
    register(spark)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("lancepart")

NAME = "lancepart"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

_SOURCE: list[type] = []  # the data source class, once lancepart.spark.datasource is imported
_FUNCTIONS: list[Callable[[Any], None]] = []  # the table functions, once lancepart.spark.sql_functions is imported


def data_source(cls: type) -> type:
    """Class decorator of the ``lancepart`` data source: the class :func:`register` registers."""
    _SOURCE[:] = [cls]
    return cls


def _with_session_defaults(cls: type, spark) -> type:
    """A subclass of the data source carrying the session's scan packing settings: the data
    source runs in Python workers that cannot ask the session (:mod:`lancepart.spark.packing`)."""
    from lancepart.spark.packing import session_defaults

    return type(cls.__name__, (cls,), {"session_defaults": session_defaults(spark), "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def table_functions(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    """Decorator of the function that registers the SQL table functions in a session
    (:mod:`lancepart.spark.sql_functions`): :func:`register` calls it."""
    _FUNCTIONS[:] = [fn]
    return fn


def _register_functions(spark, strict: bool) -> None:
    """The SQL table functions; a session that cannot take them (no Python UDTFs) keeps the data source."""
    try:
        for fn in _FUNCTIONS:
            fn(spark)  # lancepart_history(root), lancepart_changes(root, v), ...
    except Exception as e:
        if strict:
            raise
        log.warning("cannot register the lancepart SQL table functions in this Spark session: %s", e)


def register(spark, strict: bool = True) -> None:
    """Register the ``lancepart`` data source in ``spark`` (idempotent), the SQL table functions
    ``lancepart_history`` / ``_partitions`` / ``_changes`` / ``_describe``
    (:mod:`lancepart.spark.sql_functions`), and enable Spark's filter pushdown for Python data
    sources, which the reader needs (``spark.sql.python.filterPushdown.enabled``).
    ``strict=False`` (the implicit call of every ``lps.*`` function) logs a failure instead of
    raising it: ``lps.write`` does not need the data source.

    Example::

        lps.register(spark)
        spark.read.format("lancepart").load("/data/events")
    """
    if getattr(spark, "_lancepart_registered", False):
        return
    try:
        if not _SOURCE:
            raise RuntimeError("the lancepart data source is not loaded: import lancepart.spark first")
        spark.conf.set(PUSHDOWN_CONF, "true")
        spark.dataSource.register(_with_session_defaults(_SOURCE[0], spark))
        _register_functions(spark, strict)
    except Exception as e:
        if strict:
            raise
        log.warning("cannot register the lancepart data source in this Spark session: %s", e)
        return
    try:
        spark._lancepart_registered = True
    except AttributeError:  # pragma: no cover - a session object without a __dict__: register again next time
        pass
