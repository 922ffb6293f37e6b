"""SQL table functions over a namespace, registered in a session by ``lps.register(spark)``:
what ``DESCRIBE HISTORY``, ``SHOW PARTITIONS``, ``table_changes`` and ``DESCRIBE DETAIL`` give
Delta users, for SQL users of lancepart (docs/datasource.md "SQL")::

    SELECT * FROM lancepart_history('/data/events')
    SELECT * FROM lancepart_partitions('/data/events', "event_date >= DATE '2025-12-01'")
    SELECT * FROM lancepart_changes('/data/events', 12)            -- the commits after version 12
    SELECT * FROM lancepart_changes('/data/events', 12, 15)        -- ... up to version 15
    SELECT * FROM lancepart_describe('/data/events')

Each is a Python UDTF run on the driver's Python worker with the namespace opened read-only;
``lancepart_changes`` has the namespace's columns, so its output schema is found when the query
is analysed (its arguments must be constants). Storage options come from the environment (a
table function takes no options): for a store that needs others, use ``ns.history()`` etc.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from lancepart.spark.registry import table_functions

HISTORY_SCHEMA = ("version long, timestamp timestamp, operation string, batch_id string, rows_written long, "
                  "partitions_touched long, rows_removed long, properties map<string, string>")
PARTITIONS_SCHEMA = ("object_id string, location string, spec_id int, partition_values map<string, string>, "
                     "read_version long, read_branch string, read_tag string")
DESCRIBE_SCHEMA = "key string, value string"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _version(name: str, value: Any) -> int | None:
    """A version argument as SQL gives it (an integer, or a string of one)."""
    from lancepart.errors import InvalidArgumentError

    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"lancepart_changes: {name} must be a __manifest version (an integer), got "
                                   f"{value!r}") from None


def _open(root: Any):
    from lancepart.errors import InvalidArgumentError
    from lancepart.namespace import PartitionedNamespace

    if not isinstance(root, str) or not root:
        raise InvalidArgumentError(f"the first argument is the namespace root (a string), got {root!r}")
    return PartitionedNamespace.open(root)


class LancepartHistory:
    """``lancepart_history(root)``: ``ns.history()``, newest first."""

    def eval(self, root: str) -> Iterator[tuple]:
        for h in _open(root).history():
            yield (h.version, h.timestamp, h.operation, h.batch_id, h.rows_written, h.partitions_touched,
                   h.rows_removed, dict(h.properties))


class LancepartPartitions:
    """``lancepart_partitions(root [, filter])``: ``ns.partitions(filter)``, partition values as text."""

    def eval(self, root: str, filter: str | None = None) -> Iterator[tuple]:
        for p in _open(root).partitions(filter):
            yield (p.object_id, p.location, p.spec_id, {k: _text(v) for k, v in p.values.items()}, p.read_version,
                   p.read_branch, p.read_tag)


class LancepartDescribe:
    """``lancepart_describe(root)``: the namespace in key/value rows (version, schema, specs, counts)."""

    def eval(self, root: str) -> Iterator[tuple]:
        ns = _open(root)
        yield "root", ns.root
        yield "manifest_version", str(ns.manifest_version)
        yield "schema", ns.schema.to_string(show_schema_metadata=False, show_field_metadata=False)
        yield "current_spec", ns.current_spec.to_json_string()
        yield "spec_ids", json.dumps(sorted(ns.specs))
        yield "partitions", str(len(ns.partitions()))


class LancepartChanges:
    """``lancepart_changes(root, start_version [, end_version])``: ``ns.changes(start, end)``."""

    @staticmethod
    def analyze(root, start, end=None):
        from pyspark.sql.udtf import AnalyzeResult

        from lancepart.errors import InvalidArgumentError
        from lancepart.spark.changes import change_schema
        from lancepart.spark.read import spark_schema

        for name, arg in (("root", root), ("start_version", start), ("end_version", end)):
            if arg is not None and not arg.isConstantExpression:
                raise InvalidArgumentError(f"lancepart_changes: {name} must be a constant")
        _version("start_version", start.value)
        _version("end_version", None if end is None else end.value)
        return AnalyzeResult(spark_schema(change_schema(_open(root.value).schema)))

    def eval(self, root: str, start: Any, end: Any = None) -> Iterator[tuple]:
        ns = _open(root)
        reader = ns.changes(_version("start_version", start), _version("end_version", end))
        for batch in reader:
            columns = [c.to_pylist() for c in batch.columns]
            yield from zip(*columns, strict=True)


@table_functions
def register_functions(spark) -> None:
    """Register the table functions in ``spark`` (``lps.register`` calls it)."""
    from pyspark.sql.functions import udtf

    spark.udtf.register("lancepart_history", udtf(LancepartHistory, returnType=HISTORY_SCHEMA))
    spark.udtf.register("lancepart_partitions", udtf(LancepartPartitions, returnType=PARTITIONS_SCHEMA))
    spark.udtf.register("lancepart_describe", udtf(LancepartDescribe, returnType=DESCRIBE_SCHEMA))
    spark.udtf.register("lancepart_changes", udtf(LancepartChanges))
