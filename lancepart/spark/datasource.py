"""The ``lancepart`` Spark data source (PySpark's Python Data Source API): a thin adapter over
the same paths as :func:`lancepart.spark.write` and :func:`lancepart.spark.read` (docs/datasource.md).

* ``df.write.format("lancepart").mode("append" | "overwrite").save(root)``: executors write
  Lance fragments with :func:`lancepart.spark.write._write_task` (the function ``lps.write``
  runs in ``mapInArrow``); each task's fragment metadata travels back as its commit message;
  the driver's ``commit`` publishes everything in ONE ``__manifest`` commit
  (:func:`lancepart.spark.write.publish_fragments`). ``abort`` publishes nothing.
* ``spark.read.format("lancepart").load(root)``: the ``__manifest`` version that is the latest
  at ``load()`` is read by every query of the DataFrame. Spark applies the DataFrame's filters
  after the scan: Spark 4 reuses one read plan for several queries of a DataFrame, so the plan
  must not depend on the filters of one of them (:class:`LancepartReader`). Option ``filter``
  (SQL) prunes partition tables through ``__manifest`` for the whole DataFrame
  (:meth:`PartitionedNamespace.scan_plan`) and is applied exactly on the executors by
  :func:`lancepart.spark.read.scan_batches`. The kept tables are packed into input partitions
  as Spark packs files (:mod:`lancepart.spark.packing`).
* ``option("readChangeFeed", "true").option("startingVersion", N)`` reads the change feed and
  ``spark.readStream.format("lancepart").load(root)`` is a streaming source
  (:mod:`lancepart.spark.changes`).
* ``df.writeStream.format("lancepart").option("checkpointLocation", dir).start(root)``: each
  micro-batch publishes with the batch id ``spark-streaming:<query id>:<batch id>``, so a
  micro-batch Spark replays after a crash (published, not yet in the checkpoint's commit log)
  is skipped by the publish.

Spark runs ``writer``/``reader``/``commit`` in Python worker processes, not in the process that
called ``save``: the result of a publish is kept in a small JSON file on the driver's host
(:func:`last_result`)::

    from lancepart import spark as lps
    lps.register(spark)
    df.write.format("lancepart").mode("append").option("batch_id", "2025-12-10").save("/data/events")
    lps.last_result("/data/events").rows_written
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
    WriterCommitMessage,
)

from lancepart.errors import InvalidArgumentError, LancepartError, NamespaceExistsError
from lancepart.results import CommitResult
from lancepart.spark.options import OPTIONS as OPTIONS  # re-exported: the data source's own options
from lancepart.spark.options import SPARK_OPTIONS as SPARK_OPTIONS
from lancepart.spark.options import (
    _int_option,
    _latest_version,
    _open,
    _root,
    check_options,
    flag,
    option,
    storage_options,
)
from lancepart.spark.registry import NAME, data_source
from lancepart.spark.registry import PUSHDOWN_CONF as PUSHDOWN_CONF  # re-exported
from lancepart.spark.registry import register as register  # re-exported: docs and users call it here
from lancepart.storage.manifest import normalize_root

log = logging.getLogger("lancepart")

STREAM_BATCH_PREFIX = "spark-streaming"
RESULTS_DIR_ENV = "LANCEPART_RESULTS_DIR"

# --------------------------------------------------------------------------- results
def _results_dir() -> str:
    return os.environ.get(RESULTS_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"lancepart-results-{os.getuid()}")


def _result_file(root: str) -> str:
    return os.path.join(_results_dir(), hashlib.sha256(normalize_root(root).encode()).hexdigest()[:32] + ".json")


def _write_json(path: str, doc: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, default=str)
    os.replace(tmp, path)  # a reader sees the previous result or this one, never half of one


def _keep_result(root: str, result: CommitResult, options: Mapping[str, str]) -> None:
    """Log the result (logger ``lancepart``) and keep it for :func:`last_result`; best effort:
    the write is already published, a full /tmp must not fail it."""
    doc = {"root": normalize_root(root), **result.to_dict()}
    log.info("lancepart data source published %s", json.dumps(doc, default=str))
    for path in filter(None, (_result_file(root), options.get("result_path"))):
        try:
            _write_json(path, doc)
        except OSError as e:
            log.warning("cannot keep the result of the write to %s in %s: %s", root, path, e)


def last_result(root: str) -> CommitResult | None:
    """The result of the last write through the data source to ``root`` committed on this host
    (any driver process of the same user; ``$LANCEPART_RESULTS_DIR`` moves the files), or None.

    After ``df.write.format("lancepart").save(root)``, ``lps.last_result(root).manifest_version`` is
    the version it published; a root no write through the data source reached has none:

    >>> print(last_result(ns.root))
    None
    """
    try:
        with open(_result_file(root)) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    doc.pop("root", None)
    return CommitResult(**doc)


# --------------------------------------------------------------------------- writing
@dataclass
class FragmentsMessage(WriterCommitMessage):
    """What one task wrote: the rows :func:`lancepart.spark.write._write_task` yields, as dicts."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    query_id: str | None = None
    plan_key: str | None = None  # the spec and schema the task wrote with


@dataclass
class _WritePlan:
    root: str
    spec_json: str
    schema_bytes: bytes
    existing: dict[str, str]
    job_id: str
    so: dict[str, str] | None
    flush_rows: int
    max_rows_per_file: int
    max_retries: int
    started: float
    write_threads: int = 8

    def key(self) -> str:
        return hashlib.sha256(self.spec_json.encode() + self.schema_bytes).hexdigest()[:16]


def _spec_option(options: Mapping[str, str]):
    raw = options.get("spec")
    if raw is None:
        return None
    from lancepart.model.spec import PartitionSpec

    text = raw
    if not raw.lstrip().startswith("{"):  # a path to a JSON or YAML file
        try:
            with open(raw) as f:
                text = f.read()
        except OSError as e:
            raise InvalidArgumentError(f"option 'spec': cannot read {raw!r}: {e.strerror}") from None
        if raw.endswith((".yaml", ".yml")):
            import yaml

            text = json.dumps(yaml.safe_load(text), default=str)
    try:
        return PartitionSpec.from_json(text)
    except LancepartError as e:
        raise type(e)(f"option 'spec': {e}") from None


def _open_for_write(options: Mapping[str, str], input_schema: pa.Schema):
    """The namespace to write; created with option ``spec`` and the input's schema if absent."""
    from lancepart.errors import NamespaceNotFoundError
    from lancepart.namespace import PartitionedNamespace

    root, so = _root(options), storage_options(options)
    spec = _spec_option(options)
    try:
        ns = PartitionedNamespace.open(root, storage_options=so)
    except NamespaceNotFoundError:
        if spec is None:
            raise
        try:
            ns = PartitionedNamespace.create(root, input_schema, spec, storage_options=so)
            log.info("created the namespace %s for the lancepart data source (spec %s)", root, spec.to_json_string())
        except NamespaceExistsError:  # another writer created it meanwhile
            ns = PartitionedNamespace.open(root, storage_options=so)
    if spec is not None and spec.to_json() != ns.current_spec.to_json():
        raise InvalidArgumentError(f"option 'spec' differs from the current spec of {ns.root} "
                                   f"({ns.current_spec.to_json_string()}); leave it out to write with the current spec")
    return ns


def _merge_schema(ns, input_schema: pa.Schema) -> None:
    """Option ``mergeSchema``: add the input's columns the namespace lacks (nullable) and widen
    the columns the input holds in a wider type (the ``update_schema`` rules: an impossible
    change is its typed error), in one ``__manifest`` commit before any row is written. The
    rows are a second commit: a write that then fails leaves the schema change published."""
    from lancepart.write.plan import promotable

    add = [f.with_nullable(True) for f in input_schema if ns.schema.get_field_index(f.name) < 0]
    widen = {f.name: f.type for f in input_schema if ns.schema.get_field_index(f.name) >= 0
             and f.type != ns.schema.field(f.name).type and not promotable(f.type, ns.schema.field(f.name).type)}
    if add or widen:
        try:
            ns.update_schema(add=add or None, widen=widen or None)
        except LancepartError as e:
            raise type(e)(f"option 'mergeSchema': {e}") from None
        log.info("lancepart data source: mergeSchema changed the schema of %s: added %s, widened %s", ns.root,
                 [f.name for f in add], sorted(widen))


def _input_arrow_schema(schema) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    # the zone only matters for TIMESTAMP columns, which a wall-clock namespace column refuses anyway
    return to_arrow_schema(schema, timezone="UTC")


def _plan_write(options: Mapping[str, str], schema) -> tuple[_WritePlan, Any]:
    """Driver side, before any task: the checks and the inputs of the task function, as lps.write."""
    from lancepart.write.plan import check_schema

    started = time.monotonic()
    max_retries = _int_option(options, "max_retries", 20, 0)
    flush_rows = _int_option(options, "flush_rows", 1_000_000, 1)
    max_rows_per_file = _int_option(options, "max_rows_per_file", 1_048_576, 1)
    write_threads = _int_option(options, "write_threads", 8, 1)
    input_schema = _input_arrow_schema(schema)
    ns = _open_for_write(options, input_schema)
    if flag(options, "mergeSchema"):
        _merge_schema(ns, input_schema)
    check_schema(input_schema, ns.schema)  # before any byte is written
    spec = ns.current_spec
    from lancepart.spark.write import existing_tables

    existing = existing_tables(ns.snapshot(), spec.namespace)
    plan = _WritePlan(ns.root, spec.to_json_string(), ns.schema.serialize().to_pybytes(), existing,
                      uuid.uuid4().hex, ns.manifest.storage_options, flush_rows, max_rows_per_file, max_retries,
                      started, write_threads)
    return plan, ns


def _write_fragments(plan: _WritePlan, batches: Iterator[pa.RecordBatch], existing: Mapping[str, str],
                     job_id: str) -> list[dict[str, Any]]:
    """Executor side: the very task function lps.write runs, its output rows as dicts."""
    from lancepart.spark.write import _write_task

    run = _write_task(plan.root, plan.spec_json, plan.schema_bytes, existing, job_id, plan.so, plan.flush_rows,
                      plan.max_rows_per_file, plan.write_threads)
    rows: list[dict[str, Any]] = []
    for out in run(batches):
        rows.extend(out.to_pylist())
    return rows


def _publish(plan: _WritePlan, messages, *, mode: str, batch_id: str | None,
             phases: dict[str, Any]) -> CommitResult:
    """Driver side: lps.write's own tail with the spec and schema the tasks wrote with."""
    from lancepart.model.spec import PartitionSpec
    from lancepart.spark.write import publish_fragments
    from lancepart.storage.manifest import Manifest

    rows = [r for m in messages if m is not None for r in m.rows]
    spec = PartitionSpec.from_json(plan.spec_json)
    schema = pa.ipc.read_schema(pa.py_buffer(plan.schema_bytes))
    phases = {"tasks": len(messages), **phases}
    return publish_fragments(Manifest(plan.root, plan.so), spec, schema, rows, mode=mode, batch_id=batch_id,
                             max_retries=plan.max_retries, started=plan.started, phases=phases)


def _checked_inside(plan: _WritePlan, batches: Iterator[pa.RecordBatch], where: str) -> Iterator[pa.RecordBatch]:
    """Executor side of replaceWhere: each batch, as it streams by, must match ``where``."""
    from lancepart.write.merge import check_inside
    from lancepart.write.plan import conform

    schema = pa.ipc.read_schema(pa.py_buffer(plan.schema_bytes))
    for batch in batches:
        check_inside(conform(batch, schema), where)
        yield batch


def _publish_replace_where(plan: _WritePlan, messages, where: str, batch_id: str | None,
                           phases: dict[str, Any]) -> CommitResult:
    """Driver side of replaceWhere: the tasks' fragments and the deletions of the rows matching
    ``where``, in one publish (:func:`lancepart.write.merge.replace_where`)."""
    from lancepart.namespace import PartitionedNamespace
    from lancepart.spark.write import table_writes
    from lancepart.write.create import create_tables
    from lancepart.write.merge import replace_where

    ns = PartitionedNamespace.open(plan.root, storage_options=plan.so)
    writes = list(table_writes([r for m in messages if m is not None for r in m.rows]).values())
    create_tables(plan.root, pa.ipc.read_schema(pa.py_buffer(plan.schema_bytes)), writes, plan.so)
    return replace_where(ns, None, where, batch_id=batch_id, max_retries=plan.max_retries, written=writes,
                         started=plan.started, phases={"tasks": len(messages), **phases})


class LancepartWriter(DataSourceArrowWriter):
    """Batch writes: ``write`` on the executors, ``commit``/``abort`` on the driver."""

    def __init__(self, options: Mapping[str, str], schema, overwrite: bool) -> None:
        from lancepart.write.batches import check_batch_id
        from lancepart.write.publish import already_published

        self.options = dict(options)
        self.mode = "overwrite" if overwrite else "append"
        self.batch_id = self.options.get("batch_id")
        if self.batch_id is not None:
            try:
                check_batch_id(self.batch_id)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"option 'batch_id': {e}") from None
        # replaceWhere (Delta's option): the rows matching it are replaced by the input (docs/merge.md)
        self.where = option(self.options, "replaceWhere")
        if self.where is not None and self.mode != "overwrite":
            raise InvalidArgumentError("option 'replaceWhere' replaces the rows it matches: use mode('overwrite')")
        # partitionOverwriteMode (Spark's and Delta's): dynamic (the default) replaces the partitions
        # the input has rows for; static replaces the whole namespace (a replace-where of every row)
        overwrite_mode = str(option(self.options, "partitionOverwriteMode") or "dynamic").strip().lower()
        if overwrite_mode not in ("static", "dynamic"):
            raise InvalidArgumentError(f"option 'partitionOverwriteMode' must be 'static' or 'dynamic', got "
                                       f"{option(self.options, 'partitionOverwriteMode')!r}")
        if overwrite_mode == "static" and self.mode == "overwrite" and self.where is None:
            self.where = "TRUE"
        self.plan, ns = _plan_write(self.options, schema)
        self.skipped = None
        if self.batch_id is not None:  # a rerun of a published batch: no task writes anything
            self.skipped = already_published(ns.manifest, ns.snapshot(), self.batch_id, self.plan.started)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FragmentsMessage:
        if self.skipped is not None:
            return FragmentsMessage()
        if self.where is not None:
            iterator = _checked_inside(self.plan, iterator, self.where)
        return FragmentsMessage(_write_fragments(self.plan, iterator, self.plan.existing, self.plan.job_id))

    def commit(self, messages) -> None:
        if self.skipped is not None:
            result = self.skipped
        else:
            # from the driver's planning to the last task's end
            phases = {"write_s": round(time.monotonic() - self.plan.started, 3)}
            if self.where is not None:
                result = _publish_replace_where(self.plan, messages, self.where, self.batch_id, phases)
            else:
                result = _publish(self.plan, messages, mode=self.mode, batch_id=self.batch_id, phases=phases)
        _keep_result(self.plan.root, result, self.options)

    def abort(self, messages) -> None:
        # nothing was published: the fragments the tasks wrote are unreferenced files, which
        # ns.cleanup() removes; the namespace is exactly as before
        written = sum(len(m.rows) for m in messages if m is not None)
        log.warning("lancepart data source: write to %s aborted; nothing published (%d partition groups written "
                    "by finished tasks stay unreferenced until cleanup)", self.plan.root, written)


def _task_local(name: str) -> str | None:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.getLocalProperty(name) if tc is not None else None


_EXISTING: dict[tuple[str, str], dict[str, str]] = {}


class LancepartStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes (append output mode): every micro-batch is one publish whose batch id
    is ``spark-streaming:<query id>:<micro-batch id>``; a replayed micro-batch is skipped."""

    def __init__(self, options: Mapping[str, str], schema, overwrite: bool) -> None:
        if overwrite:
            raise InvalidArgumentError("the lancepart streaming sink supports outputMode('append') only "
                                       "(complete/update output modes would overwrite partitions every micro-batch)")
        if options.get("batch_id") is not None:
            raise InvalidArgumentError("option 'batch_id' is not for streaming writes: every micro-batch gets "
                                       f"'{STREAM_BATCH_PREFIX}:<query id>:<batch id>'")
        self.options = dict(options)
        self.plan, _ = _plan_write(self.options, schema)
        self.run_id = uuid.uuid4().hex  # new at every start of the query: a replay writes new directories

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FragmentsMessage:
        query_id = _task_local("sql.streaming.queryId")
        batch = _task_local("streaming.sql.batchId") or "?"
        # the partition tables published now (the plan's map is from the start of the query): one
        # read of __manifest per executor process and micro-batch
        key = (self.run_id, batch)
        existing = _EXISTING.get(key)
        if existing is None:
            existing = _existing_tables(self.plan)
            _EXISTING.clear()
            _EXISTING[key] = existing
        # every task of the micro-batch (and a retried attempt of its stage) writes a new partition
        # into one directory, never one of an earlier run or micro-batch
        from pyspark import TaskContext

        tc = TaskContext.get()
        stage = tc.stageId() if tc is not None else "?"
        job_id = hashlib.sha256(f"{self.run_id}/{batch}/{stage}".encode()).hexdigest()
        rows = _write_fragments(self.plan, iterator, existing, job_id)
        return FragmentsMessage(rows, query_id=query_id, plan_key=self.plan.key())

    def commit(self, messages, batchId: int) -> None:
        query_ids = {m.query_id for m in messages if m is not None and m.query_id}
        rows = sum(len(m.rows) for m in messages if m is not None)
        if len(query_ids) != 1:
            if rows:
                raise InvalidArgumentError(f"micro-batch {batchId}: the tasks reported query ids {sorted(query_ids)}; "
                                           f"expected exactly one")
            return  # no task ran: nothing to publish
        keys = {m.plan_key for m in messages if m is not None}
        if keys != {self.plan.key()}:  # the spec or schema changed since the query started: publish nothing
            from lancepart.errors import CommitConflictError

            raise CommitConflictError(f"micro-batch {batchId}: the spec or schema of {self.plan.root} changed while "
                                      f"it was written; nothing was published, restart the query to replay it")
        batch_id = f"{STREAM_BATCH_PREFIX}:{query_ids.pop()}:{batchId}"
        self.plan.started = time.monotonic()
        result = _publish(self.plan, messages, mode="append", batch_id=batch_id, phases={"micro_batch": batchId})
        _keep_result(self.plan.root, result, self.options)

    def abort(self, messages, batchId: int) -> None:
        log.warning("lancepart streaming sink: micro-batch %d to %s aborted; nothing published", batchId,
                    self.plan.root)


def _existing_tables(plan: _WritePlan) -> dict[str, str]:
    from lancepart.namespace import PartitionedNamespace
    from lancepart.spark.write import existing_tables

    ns = PartitionedNamespace.open(plan.root, storage_options=plan.so)
    return existing_tables(ns.snapshot(), f"v{json.loads(plan.spec_json).get('id')}")


# --------------------------------------------------------------------------- filters
def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _kind(t: pa.DataType) -> str | None:
    """The column kinds whose comparisons DataFusion evaluates exactly as Spark does. Floats are
    left out (Spark: NaN = NaN, NaN above every number, -0.0 = 0.0; the filter pushed into the
    Lance scanner is not pinned for them), as are zoned timestamps, decimals and nested types."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_signed_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t) and t.tz is None:
        return "ntz"
    return None


def _literal(kind: str, value: Any) -> str | None:
    if value is None:
        return "NULL"
    if kind == "bool":
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if kind == "int":
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "str":
        return _string(value) if isinstance(value, str) else None
    if kind == "date":
        return f"DATE '{value.isoformat()}'" if type(value) is dt.date else None
    if kind == "ntz":
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            return f"TIMESTAMP '{value.isoformat(sep=' ', timespec='microseconds')}'"
        return None
    return None


def _like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_COMPARE = {EqualTo: "=", GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<="}


def filter_sql(f: Filter, schema: pa.Schema) -> str | None:
    """The SQL (DataFusion) form of the Spark filter ``f`` over the namespace ``schema`` when it
    means exactly the same on every row, else None (Spark keeps it as a residual filter).

    >>> filter_sql(EqualTo(("country",), "US"), pa.schema([("country", pa.utf8())]))
    '"country" = \\'US\\''
    """
    if isinstance(f, Not):
        child = filter_sql(f.child, schema)
        return None if child is None else f"NOT ({child})"
    attribute = getattr(f, "attribute", None)
    if not attribute or len(attribute) != 1 or schema.get_field_index(attribute[0]) < 0:
        return None  # nested fields, unknown names
    col = _quote(attribute[0])
    kind = _kind(schema.field(attribute[0]).type)
    if kind is None:
        return None
    if isinstance(f, IsNull):
        return f"{col} IS NULL"
    if isinstance(f, IsNotNull):
        return f"{col} IS NOT NULL"
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return f"{col} IS NULL"
        lit = _literal(kind, f.value)
        return None if lit is None else f"{col} = {lit}"
    op = _COMPARE.get(type(f))
    if op is not None:
        if f.value is None:
            return None
        lit = _literal(kind, f.value)
        return None if lit is None else f"{col} {op} {lit}"
    if isinstance(f, In):
        lits = [_literal(kind, v) for v in f.value]
        if not lits or any(v is None for v in lits):
            return None
        return f"{col} IN ({', '.join(lits)})"
    if isinstance(f, StringStartsWith | StringEndsWith | StringContains) and kind == "str":
        v = _like(f.value)
        pattern = {StringStartsWith: f"{v}%", StringEndsWith: f"%{v}", StringContains: f"%{v}%"}[type(f)]
        return f"{col} LIKE {_string(pattern)} ESCAPE '\\'"
    return None


# --------------------------------------------------------------------------- reading
def keeps_plan_per_scan() -> bool:
    """True on a Spark whose Python data sources keep their read plan per scan, not one per
    relation: then a plan pruned by one query's filters serves that query only. Detected by
    ``DataSourceReader.pushLimit``, which arrives with that change (Spark 4.3 has neither); never
    by a version string."""
    return hasattr(DataSourceReader, "pushLimit")


class LancepartReader(DataSourceReader):
    """Plans on the driver through ``__manifest`` (one snapshot), scans on the executors.

    What it reads depends on the data source's options (``filter`` prunes) and ``load_version``
    only, never on the filters of a query. Spark 4.3 keeps ONE read plan (this reader, pickled, and its input
    partitions) on the relation of a DataFrame or temporary view: the plan of its first query,
    replaced by the plan of each later query that offers filters, and used as it is by every
    other query of the relation (a plain ``count()``, ``cache()``, ``checkpoint()``, a filter
    Spark cannot hand to a Python data source) and by every scan of it within one query (a
    self-join, a union of two filters). A plan pruned for one query's filters would silently
    drop the rows of the others."""

    def __init__(self, options: Mapping[str, str], schema, load_version: int | None = None,
                 session_defaults: Mapping[str, str] | None = None) -> None:
        self.options = dict(options)
        self.schema = schema
        self.load_version = load_version
        self.session_defaults = dict(session_defaults or {})  # scan packing (lancepart.spark.packing)
        self.pushed: list[str] = []  # SQL of the query's filters, only where keeps_plan_per_scan()
        self.ns_schema = _open(self.options, load_version).schema
        from lancepart.errors import SchemaMismatchError

        unknown = [f.name for f in schema.fields if self.ns_schema.get_field_index(f.name) < 0]
        if unknown:  # a schema given by the user (spark.read.schema(...), CREATE TABLE t (...)) may only project
            raise SchemaMismatchError(f"column(s) {unknown} of the given schema are not in the namespace schema "
                                      f"(columns: {self.ns_schema.names})")

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        # Every filter stays with Spark, which applies it after the scan. On Spark 4.3 the plan
        # this reader makes may serve another query of the same DataFrame (see the class
        # docstring), so it must not prune by these filters; option 'filter' prunes, the same for
        # every query. A Spark that keeps the read plan per scan (keeps_plan_per_scan) gets a
        # plan pruned by the filters filter_sql can say exactly, conservative as every pruning.
        if keeps_plan_per_scan():
            self.pushed = [sql for sql in (filter_sql(f, self.ns_schema) for f in filters) if sql is not None]
        yield from filters

    def partitions(self) -> list[InputPartition]:
        from lancepart.spark.packing import packing, plan_scan

        ns = _open(self.options, self.load_version)
        given = self.options.get("filter")
        # with this scan's own filters where Spark keeps read plans per scan (exact SQL, never refused)
        wanted = " AND ".join(f"({f})" for f in [given, *self.pushed] if f and f.strip()) if self.pushed else given
        try:
            parts, filter, scan_filter = ns.scan_plan(wanted)
        except LancepartError as e:
            raise type(e)(f"option 'filter': {e}") from None
        tasks = plan_scan(ns.root, parts, packing(self.options, self.session_defaults),
                          split_rows=_int_option(self.options, "split_rows", None, 1),
                          storage_options=ns.storage_options)
        log.info("lancepart data source: read %s at __manifest version %d: %d partition tables kept, %d pruned "
                 "(option 'filter': %s), %d tasks", ns.root, ns.manifest_version, len(parts),
                 len(ns.snapshot().table_pins()) - len(parts),
                 self.options.get("filter"), len(tasks))
        from lancepart.evolution.schema_evolution import LEGACY_FIELD_IDS_KEY

        legacy = ns.snapshot().metadata.get(LEGACY_FIELD_IDS_KEY)  # places the columns of tables of older schemas
        return [InputPartition(json.dumps({"tasks": t, "filter": filter, "scan_filter": scan_filter, "root": ns.root,
                                           "legacy": legacy}))
                for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:  # Spark's stand-in when no partition table is kept
            return
        from pyspark.sql.pandas.types import to_arrow_schema

        from lancepart.spark.read import conform, scan_batches

        d = json.loads(partition.value)
        target = to_arrow_schema(self.schema, timezone="UTC")
        so = storage_options(self.options)
        from lancepart.evolution.schema_evolution import LEGACY_FIELD_IDS_KEY, with_legacy_ids

        ns_schema = with_legacy_ids(self.ns_schema, {LEGACY_FIELD_IDS_KEY: d["legacy"]} if d.get("legacy") else {})
        for task in d["tasks"]:
            for b in scan_batches(d["root"], task, ns_schema, d["filter"], d["scan_filter"], list(self.schema.names),
                                  so):
                if b.num_rows:
                    yield conform(b, target)


# --------------------------------------------------------------------------- the data source
@data_source
class LancepartDataSource(DataSource):
    """``format("lancepart")``: a partitioned namespace root as a Spark table."""

    #: the session's scan packing settings, set on the class :func:`register` registers
    session_defaults: dict[str, str] = {}

    def __init__(self, options) -> None:
        super().__init__(options)
        check_options(self.options)  # a typo is refused, never read as a storage option
        # Spark creates the data source once per relation (load(), CREATE TEMPORARY VIEW) and every
        # read of the relation starts from this object: each query of a DataFrame reads the
        # __manifest version that was the latest at load, as the read plan Spark may reuse does
        self.load_version = _latest_version(self.options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        from lancepart.spark.changes import change_feed, change_schema
        from lancepart.spark.read import spark_schema

        ns_schema = _open(self.options, self.load_version).schema
        return spark_schema(change_schema(ns_schema) if change_feed(self.options) else ns_schema)

    def reader(self, schema) -> DataSourceReader:
        from lancepart.spark.changes import ChangeFeedReader, change_feed

        if change_feed(self.options):
            return ChangeFeedReader(self.options, schema, self.load_version)
        return LancepartReader(self.options, schema, self.load_version, self.session_defaults)

    def streamReader(self, schema):
        """``spark.readStream.format("lancepart").load(root)`` (:mod:`lancepart.spark.changes`)."""
        from lancepart.spark.changes import LancepartStreamReader

        return LancepartStreamReader(self.options, schema)

    def writer(self, schema, overwrite: bool) -> LancepartWriter:
        return LancepartWriter(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite: bool) -> LancepartStreamWriter:
        return LancepartStreamWriter(self.options, schema, overwrite)
