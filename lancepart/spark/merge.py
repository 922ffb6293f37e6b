"""Spark front end of merge (:mod:`lancepart.write.merge`): ``lps.merge(df, root, on=[...])``.

The driver collects the input's key columns only (refusing NULL and duplicate keys there) and
ships them to the executors. Each partition table that can hold the keys
(:class:`lancepart.write.merge.KeyPruner`, as ``ns.merge`` picks them) is matched in a Spark
task, one table per item: it reads its published version's key columns, hash-joins them with
the keys and, for ``when_matched="update"``, writes its deletion files; it returns the
deletions and the matched input row
numbers. The driver refuses a key matching several rows, then one ``mapInArrow`` pass over the
input keeps the rows to write (matched keys when updating, the others when inserting) and
writes them with the very task function of ``lps.write`` into their partitions. The driver
commits each touched table (deletions and new fragments in one version) and publishes in ONE
``__manifest`` commit with the same code as ``ns.merge``; when a table the merge read moved
meanwhile, the match runs again in a new Spark job on the moved tables only and the rows are
written again. The input is cached for the duration (it is read once for the keys and once per
attempt for the rows).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.arguments import CommitOptions, commit_settings
from lancepart.deprecation import keyword_only
from lancepart.evolution.schema_evolution import with_legacy_ids
from lancepart.model.constraints import constraints_json
from lancepart.model.spec import schema_to_json
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.spark.registry import register
from lancepart.spark.tasks import Task, run_on_executors, spark_action
from lancepart.spark.workers import check_workers
from lancepart.spark.write import (
    FRAGMENT_ROW_SCHEMA,
    _arrow_schema_of,
    _ipc,
    _released,
    _write_task,
    existing_tables,
    table_writes,
)
from lancepart.storage.error_mapping import public_operation
from lancepart.storage.manifest import ManifestSnapshot
from lancepart.write.create import create_tables
from lancepart.write.merge import (
    Deletions,
    Evaluation,
    MergePlan,
    apply_change,
    check_keys,
    check_merge_args,
    key_values,
    merge_properties,
)
from lancepart.write.plan import check_schema
from lancepart.write.publish import fragments_from_json

log = logging.getLogger("lancepart.spark")


def _read_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _match_task(root: str, schema_json: str, keys: Any, on: Sequence[str], delete: bool) -> Task:
    """The executor function: ``[object_id, location, base]`` in, the table's deletions and
    matched input row numbers out (JSON)."""

    def run(item: str, options: dict[str, str] | None) -> str:
        from lancepart.model.spec import schema_from_json
        from lancepart.write.merge import merge_in_table

        oid, location, base = json.loads(item)
        d, rows = merge_in_table(root, oid, location, base, _read_ipc(keys.value), on, schema_from_json(schema_json),
                                 options, delete)
        return json.dumps({"object_id": oid, "location": location, "base": base, "rows": d.rows,
                           "updated": [f.to_json() for f in d.updated], "removed": list(d.removed),
                           "matched": rows.tolist()})

    return run


def keep_rows(batch: pa.RecordBatch, matched: pa.Table, on: Sequence[str], types: Mapping[str, pa.DataType],
              update: bool, insert: bool) -> pa.RecordBatch:
    """The rows of ``batch`` a merge writes: those whose key is in ``matched`` when ``update``,
    the others when ``insert`` (vectorised: a set lookup, or a hash join for several columns)."""
    if update and insert:
        return batch
    n = batch.num_rows
    if len(on) == 1:  # keys compared as the driver's evaluation compares them (-0.0 is 0.0)
        hit = pc.fill_null(pc.is_in(key_values(batch.column(on[0]).cast(types[on[0]])),
                                    value_set=matched.column(on[0])), False)
    else:
        probe = pa.table({**{c: key_values(batch.column(c).cast(types[c])) for c in on},
                          "__i": pa.array(np.arange(n))})
        found = probe.join(matched, keys=list(on), join_type="inner").column("__i").to_numpy()
        mask = np.zeros(n, dtype=bool)
        mask[found] = True
        hit = pa.array(mask)
    return batch.filter(hit if update else pc.invert(hit))


def _merge_write_task(matched: bytes, on: Sequence[str], update: bool, insert: bool, write_task):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keys = _read_ipc(matched)
        types = {c: keys.schema.field(c).type for c in on}
        yield from write_task(keep_rows(b, keys, on, types, update, insert) for b in batches)

    return run


@keyword_only("when_matched", "when_not_matched")
@public_operation("lps.merge", root_arg=1)
def merge(df, root: str, on: Sequence[str], *, when_matched: str = "update", when_not_matched: str = "insert",
          flush_rows: int = 1_000_000, max_rows_per_file: int = 1_048_576, batch_id: str | None = None,
          storage_options: Mapping[str, str] | None = None, commit: CommitOptions | None = None,
          max_retries: int | None = None) -> CommitResult:
    """Upsert the Spark DataFrame ``df`` into the namespace at ``root`` by the key columns ``on``
    (same semantics, errors and result as ``ns.merge``), the per-table work on the executors.

    1. check the input's schema, the arguments and the Spark workers;
    2. collect the key columns on the driver (refusing NULL and duplicate keys);
    3. ``ns.merge``'s plan and publish (:func:`~lancepart.write.merge.apply_change`), with the
       matching and the writes of each attempt as Spark jobs (:class:`_SparkMerge`).

    Example::

        from lancepart import spark as lps
        lps.merge(changes, "/data/events", on=["id"])
    """
    spark = df.sparkSession
    register(spark, strict=False)
    started = time.monotonic()
    retries, props = commit_settings(commit, max_retries)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    schema = ns.schema
    input_schema = _arrow_schema_of(df)
    check_schema(input_schema, schema)  # before any byte is written
    on = check_merge_args(schema, on, when_matched, when_not_matched, input_schema.names)
    check_workers(spark)
    phases: dict[str, Any] = {"spark_jobs": 0}
    op = _SparkMerge(df, ns, on, when_matched == "update", when_not_matched == "insert", phases,
                     flush_rows=flush_rows, max_rows_per_file=max_rows_per_file)
    cached = not df.is_cached
    if cached:
        df.persist()
    with _released(df, cached):
        t = time.monotonic()
        keys = df.select(*on).toArrow()
        keys = pa.table({c: keys.column(c).cast(schema.field(c).type) for c in on})
        check_keys(keys, on)
        phases["keys_s"] = round(time.monotonic() - t, 3)
        op.plan = plan = MergePlan(keys, on, when_matched, when_not_matched, op.match_tables, schema=schema)
        try:
            result = apply_change(ns, plan.evaluate, plan.candidates, what="merge", batch_id=batch_id,
                                  max_retries=retries, max_rows_per_file=max_rows_per_file, write=op.write,
                                  started=started, phases=phases, properties={**props, **merge_properties(on)})
        finally:
            op.release()
    log.info("spark merge on %s: %d updated, %d inserted", ns.root, result.details.get("rows_updated", 0),
             result.details.get("rows_inserted", 0))
    return result


class _SparkMerge:
    """The Spark jobs of one :func:`merge`: matching the keys against the candidate tables on the
    executors (the keys broadcast once), and writing the rows to write with ``lps.write``'s task."""

    def __init__(self, df, ns: PartitionedNamespace, on: Sequence[str], update: bool, insert: bool,
                 phases: dict[str, Any], *, flush_rows: int, max_rows_per_file: int) -> None:
        self.df, self.spark, self.on, self.phases = df, df.sparkSession, on, phases
        self.update, self.insert = update, insert
        self.schema, self.spec, self.manifest = ns.schema, ns.current_spec, ns.manifest
        self.flush_rows, self.max_rows_per_file = flush_rows, max_rows_per_file
        # the legacy ids place the key columns of tables written before the first schema change
        self.schema_json = json.dumps(schema_to_json(with_legacy_ids(self.schema, ns.snapshot().metadata)),
                                      separators=(",", ":"))
        self.sc = self.spark.sparkContext
        self.plan: MergePlan | None = None  # set once the keys are collected
        self.shipped_keys: list[Any] = []

    def match_tables(self, snapshot_version: int, todo: Sequence[tuple[str, str, int]]
                     ) -> list[tuple[Deletions, np.ndarray]]:
        """Match the keys against the tables ``todo`` in one Spark job; per table its deletions and
        the matched input rows."""
        if not self.shipped_keys:
            self.shipped_keys.append(self.sc.broadcast(_ipc(self.plan.keys)))
        manifest = self.manifest
        answers = run_on_executors(self.spark, manifest.storage_options, [json.dumps(list(item)) for item in todo],
                                   _match_task(manifest.root, self.schema_json, self.shipped_keys[0], self.on,
                                               self.update), self.phases)
        return [(Deletions(p["object_id"], p["location"], p["base"], fragments_from_json(p["updated"]),
                           p["removed"], p["rows"]), np.asarray(p["matched"], dtype=np.int64)) for p in answers]

    def write(self, ev: Evaluation, snap: ManifestSnapshot):
        """Write the rows to write (matched ones when updating, the others when inserting) in one
        Spark job; the new tables created."""
        update, insert, manifest, spec = self.update, self.insert, self.manifest, self.spec
        if not (update and ev.matched.num_rows) and not (insert and ev.matched.num_rows < self.plan.keys.num_rows):
            return [], 0
        checked = constraints_json(snap.metadata)  # the tasks check the rows they write against these
        with spark_action(self.spark, manifest.storage_options) as shipped:
            task = _write_task(manifest.root, spec.to_json_string(), self.schema.serialize().to_pybytes(),
                               existing_tables(snap, spec.namespace), uuid.uuid4().hex, shipped, self.flush_rows,
                               self.max_rows_per_file, constraints=checked, what="lps.merge")
            rows = self.df.mapInArrow(_merge_write_task(_ipc(ev.matched), self.on, update, insert, task),
                                      FRAGMENT_ROW_SCHEMA).collect()
        self.phases["spark_jobs"] += 1
        writes = list(table_writes(rows, checked).values())
        create_tables(manifest.root, self.schema, writes, manifest.storage_options)
        return writes, 0

    def release(self) -> None:
        for b in self.shipped_keys:
            b.destroy()
