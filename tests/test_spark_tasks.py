"""The per-table fan-out every Spark front end shares (lancepart/spark/tasks.py): how many tasks
share the tables, the answers in the order of the items, the counters, and a ``{"conflict": ...}``
answer raised on the driver as the ManifestConflict that makes it rebase."""

from __future__ import annotations

import json

import pytest

from lancepart.spark.tasks import run_on_executors, task_count
from lancepart.storage.manifest import ManifestConflict


def test_task_count_groups_tables_into_about_four_tasks_per_core():
    assert task_count(3, 2) == 3  # never more tasks than tables
    assert task_count(8, 2) == 8
    assert task_count(12, 2) == 6  # 8 slots: 6 tasks of 2 tables, as long as 8 uneven tasks would take
    assert task_count(512, 2) == 8
    assert task_count(12, 2, tasks_per_core=1) == 2
    assert task_count(12, 2, items_per_task=1) == 12
    assert task_count(12, 2, items_per_task=5) == 3


@pytest.mark.spark
def test_run_on_executors_answers_in_order_and_counts_the_job(spark):
    seen = {"prefix": "t"}

    def task(item: str, options):
        return json.dumps({"item": seen["prefix"] + item, "options": options})

    phases = {"spark_jobs": 0, "spark_tasks": 0, "tables_s": 0.0}
    items = [str(i) for i in range(12)]
    answers = run_on_executors(spark, {"region": "eu-west-1"}, items, task, phases)
    assert answers == [{"item": f"t{i}", "options": {"region": "eu-west-1"}} for i in items]
    assert phases["spark_jobs"] == 1 and phases["spark_tasks"] == task_count(12, spark.sparkContext.defaultParallelism)
    assert run_on_executors(spark, None, [], task, phases) == [] and phases["spark_jobs"] == 1  # no items, no job


@pytest.mark.spark
def test_a_conflict_answer_is_a_manifest_conflict_on_the_driver(spark):
    def task(item: str, options):
        return json.dumps({"conflict": f"{item} moved"} if item == "b" else [item])

    phases: dict = {}
    with pytest.raises(ManifestConflict, match="b moved"):
        run_on_executors(spark, None, ["a", "b", "c"], task, phases)
    assert phases["spark_jobs"] == 1 and phases["spark_tasks"] == 3
