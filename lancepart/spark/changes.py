"""The change feed and the streaming source of the ``lancepart`` data source (docs/reading.md).

* ``spark.read.format("lancepart").option("readChangeFeed", "true").option("startingVersion", N)
  .load(root)``: the rows inserted and deleted by the ``__manifest`` commits N (included, as in
  Delta Lake) up to option ``endingVersion`` (default: the latest at load), with ``_change_type``,
  ``_commit_version`` and ``_commit_timestamp``: :meth:`PartitionedNamespace.changes`
  (exclusive of its start) planned on the driver from ``__manifest`` alone, one input partition
  per commit and partition table, the rows diffed on the executors.
* ``spark.readStream.format("lancepart").load(root)``: a Structured Streaming source whose
  offsets are ``__manifest`` versions. Without option ``startingVersion`` its first micro-batch is
  every row published at the latest version when the query first started; each later micro-batch
  is what the commits since the previous one inserted (with ``readChangeFeed``: every change, with
  the three change columns). An offset names versions only, so a micro-batch Spark replays after a
  restart reads exactly the same rows; with an exactly-once sink (the ``lancepart`` sink
  included) each row lands once. A range a cleanup removed before the query read it (before a
  restart from the checkpoint, or while a micro-batch is read) fails the query with
  :class:`SnapshotExpiredError` naming the oldest version the stream can resume from and the
  ``startingVersion`` to resume with. Option ``filter`` prunes through ``__manifest``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from lancepart.errors import InvalidArgumentError, LancepartError, SnapshotExpiredError

log = logging.getLogger("lancepart")

CHANGE_FEED_OPTIONS = ("readchangefeed", "startingversion", "endingversion")
_SNAPSHOT = -1  # the offset before a stream's first micro-batch when it starts with a snapshot


def change_feed(options: Mapping[str, str]) -> bool:
    raw = str(options.get("readChangeFeed", "false")).strip().lower()
    if raw not in ("true", "false"):
        raise InvalidArgumentError(f"option 'readChangeFeed' must be true or false, got {raw!r}")
    return raw == "true"


def change_schema(ns_schema: pa.Schema) -> pa.Schema:
    from lancepart.read.changes import CHANGE_COLUMNS

    return pa.schema(list(ns_schema) + CHANGE_COLUMNS)


def _columns(schema: Any) -> list[str]:
    from lancepart.read.changes import CHANGE_COLUMNS

    names = {f.name for f in CHANGE_COLUMNS}
    return [n for n in schema.names if n not in names]


def _partitions(ns: Any, plan: Any, kinds: Sequence[str] | None) -> list[InputPartition]:
    shared = plan.to_json()
    return [InputPartition(json.dumps({"root": ns.root, "task": t.to_json(), "plan": shared, "kinds": kinds}))
            for t in plan.tasks]


def _read(partition: InputPartition, schema: Any, options: Mapping[str, str]) -> Iterator[pa.RecordBatch]:
    """An executor's rows of one change task, in the Spark schema ``schema``."""
    if partition.value is None:  # Spark's stand-in when there is nothing to read
        return
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import to_arrow_schema

    from lancepart.read.changes import ChangePlan, ChangeTask, run_task
    from lancepart.spark.options import storage_options
    from lancepart.spark.read import conform

    d = json.loads(partition.value)
    target = to_arrow_schema(schema, timezone="UTC")
    plan = ChangePlan.from_json(d["plan"])
    for b in run_task(d["root"], ChangeTask.from_json(d["task"]), plan, storage_options(options)):
        if d["kinds"] is not None:
            b = b.filter(pc.is_in(b.column("_change_type"), value_set=pa.array(d["kinds"])))
        if b.num_rows:
            yield conform(b, target)


class ChangeFeedReader(DataSourceReader):
    """``readChangeFeed``: the commits ``startingVersion`` .. ``endingVersion`` (both included)."""

    def __init__(self, options: Mapping[str, str], schema: Any, load_version: int | None) -> None:
        from lancepart.spark.options import _int_option

        self.options = options  # case-insensitive keys (Spark lowercases them)
        self.schema = schema
        self.load_version = load_version
        self.start = _int_option(self.options, "startingVersion", None, 1)
        if self.start is None:
            raise InvalidArgumentError("option 'readChangeFeed' needs option 'startingVersion' (the first "
                                       "__manifest version whose changes to read; see lancepart history)")
        self.end = _int_option(self.options, "endingVersion", None, 1)

    def partitions(self) -> list[InputPartition]:
        from lancepart.read.changes import plan_changes
        from lancepart.spark.options import _open

        ns = _open(self.options, self.load_version)
        end = self.end if self.end is not None else ns.manifest_version
        if end > ns.manifest_version:
            raise InvalidArgumentError(f"option 'endingVersion'={end}: the latest __manifest version of {ns.root} "
                                       f"is {ns.manifest_version}")
        plan = plan_changes(ns, self.start - 1, end, filter=self.options.get("filter"), columns=_columns(self.schema))
        log.info("lancepart change feed of %s, versions %d..%d: %d tasks", ns.root, self.start, end, len(plan.tasks))
        return _partitions(ns, plan, None)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read(partition, self.schema, self.options)


class LancepartStreamReader(DataSourceStreamReader):
    """Offsets are ``{"version": v}``: every commit up to ``__manifest`` version ``v`` was emitted
    (``v = -1``: nothing yet, the first micro-batch is a snapshot)."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        from lancepart.spark.options import _int_option, _root

        self.options = options  # case-insensitive keys (Spark lowercases them)
        self.schema = schema
        self.root = _root(self.options)
        self.cdf = change_feed(self.options)
        self.start = _int_option(self.options, "startingVersion", None, 1)

    def _latest(self) -> int:
        from lancepart.spark.options import storage_options
        from lancepart.storage.manifest import Manifest, normalize_root

        return Manifest(normalize_root(self.root), storage_options(self.options)).latest_version()

    def initialOffset(self) -> dict:
        return {"version": _SNAPSHOT if self.start is None else self.start - 1}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return {"version": self._latest()}

    def reportLatestOffset(self) -> dict | None:
        return {"version": self._latest()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        from lancepart.namespace import PartitionedNamespace
        from lancepart.read.changes import plan_changes
        from lancepart.spark.options import storage_options

        first, last = int(start["version"]), int(end["version"])
        if last <= first:
            return []
        try:
            ns = PartitionedNamespace.open(self.root, version=last, storage_options=storage_options(self.options))
            columns = _columns(self.schema)
            if first == _SNAPSHOT:
                plan = plan_changes(ns, 0, filter=self.options.get("filter"), columns=columns, snapshot_at=last)
            else:
                plan = plan_changes(ns, first, last, filter=self.options.get("filter"), columns=columns)
        except SnapshotExpiredError as e:  # the checkpointed offsets name versions a cleanup removed
            raise self._expired(e) from e
        log.info("lancepart stream of %s: versions (%d, %d]: %d tasks", ns.root, first, last, len(plan.tasks))
        return _partitions(ns, plan, None if self.cdf else ["insert"])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        try:
            yield from _read(partition, self.schema, self.options)
        except SnapshotExpiredError as e:  # a cleanup removed the versions after the micro-batch was planned
            raise self._expired(e) from e

    def _expired(self, e: SnapshotExpiredError) -> SnapshotExpiredError:
        """``e``, and where this stream can go on from: the oldest retained ``__manifest`` version."""
        from lancepart.ops.history import retained_versions
        from lancepart.spark.options import storage_options
        from lancepart.storage.manifest import Manifest, normalize_root

        manifest = Manifest(normalize_root(self.root), storage_options(self.options))
        try:
            oldest = retained_versions(manifest.dataset())[0][0]
        except (LancepartError, OSError, ValueError, IndexError):  # the original error says enough
            return e
        return SnapshotExpiredError(
            f"{e}. The stream of {self.root} can resume from version {oldest} at the earliest, without the rows of "
            f"the versions that are gone: start it again with a new checkpointLocation and option "
            f"startingVersion={oldest + 1}")

    def commit(self, end: dict) -> None:
        return None
