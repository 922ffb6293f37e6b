"""Spark front end of row-level update (:mod:`lancepart.write.update`).

The driver checks the ``SET`` expressions and prunes on the published ``__manifest``; each
candidate partition table is evaluated in a Spark task (its rows matching the filter found and
read, their deletion files written, the expressions applied: :func:`lancepart.write.update.update_table`),
which returns the deletions and the new rows; the driver writes the new rows into their
partitions and publishes everything in ONE ``__manifest`` commit with the same code as
``ns.update``. On a conflict the tables whose published version moved are evaluated again, in a
new Spark job. A task that finds its published version removed by a cleanup reports it, and the
driver rebases. Any other failed task publishes nothing. The new rows travel to the driver: an
update of a few rows in a big namespace reads the namespace on the executors and moves only
those rows.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from lancepart.arguments import CommitOptions, commit_settings
from lancepart.deprecation import keyword_only
from lancepart.namespace import PartitionedNamespace
from lancepart.results import CommitResult
from lancepart.spark.registry import register
from lancepart.spark.tasks import Task, commit_or_conflict, run_on_executors
from lancepart.storage.error_mapping import public_operation
from lancepart.write.merge import Deletions
from lancepart.write.publish import fragments_from_json
from lancepart.write.update import TablePlan


def _ipc(table: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def _rows(text: str) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text))).read_all()


def _update_task(plan_json: str, snapshot_version: int) -> Task:
    """The executor function: ``[object_id, location, base]`` in, the table's deletions and new
    rows out (JSON), or ``{"conflict": ...}`` when the driver must rebase."""

    def run(item: str, options: dict[str, str] | None) -> str:
        from lancepart.write.update import TablePlan, update_table

        plan = TablePlan.from_json(plan_json)
        oid, location, base = json.loads(item)

        def answer(done: tuple[Deletions, pa.Table]) -> str:
            d, rows = done
            return json.dumps({"object_id": oid, "location": location, "base": base, "rows": d.rows,
                               "updated": [f.to_json() for f in d.updated], "removed": list(d.removed),
                               "new_rows": _ipc(rows)})

        return commit_or_conflict(plan.root, options, snapshot_version, oid, location, base,
                                  lambda: update_table(plan, oid, location, base, options, idents=False), answer)

    return run


@keyword_only("batch_id", "storage_options")
@public_operation("lps.update", root_arg=1)
def update(spark, root: str, set: Mapping[str, str], filter: str | None = None, *, batch_id: str | None = None,
           storage_options: Mapping[str, str] | None = None, commit: CommitOptions | None = None,
           max_retries: int | None = None) -> CommitResult:
    """``ns.update`` with the candidate partition tables evaluated in Spark tasks (about four per
    core): set each column of ``set`` to its SQL expression on every published row matching
    ``filter``, in one ``__manifest`` commit; the same result as ``ns.update``.
    ``details["spark_jobs"]``, ``details["rows_updated"]``.

    Example::

        from lancepart import spark as lps
        lps.update(spark, "/data/events", {"amount": "amount * 2"}, "user_id = 42")
    """
    from lancepart.write.update import update as _update

    register(spark, strict=False)
    retries, props = commit_settings(commit, max_retries)
    ns = PartitionedNamespace.open(root, storage_options=storage_options)
    phases: dict[str, Any] = {"spark_jobs": 0}

    def tables(snapshot_version: int, todo: Sequence[tuple[str, str, int]], plan: TablePlan
               ) -> list[tuple[Deletions, pa.Table]]:
        answers = run_on_executors(spark, ns.storage_options, [json.dumps(list(t)) for t in todo],
                                   _update_task(plan.to_json(), snapshot_version), phases)
        return [(Deletions(p["object_id"], p["location"], p["base"], fragments_from_json(p["updated"]),
                           p["removed"], p["rows"]), _rows(p["new_rows"]).cast(plan.schema)) for p in answers]

    return _update(ns, set, filter, batch_id=batch_id, max_retries=retries, properties=props, update_tables=tables,
                   phases=phases)
