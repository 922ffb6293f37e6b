"""The SQL table functions ``lps.register(spark)`` adds (docs/datasource.md "SQL"): each gives
what the Python call gives (``ns.history()``, ``ns.partitions()``, ``ns.changes()``), for SQL
users used to Delta's ``DESCRIBE HISTORY``, ``SHOW PARTITIONS`` and ``table_changes``."""

from __future__ import annotations

import pytest

from lancepart import PartitionedNamespace
from lancepart import spark as lps
from tests.conftest import create_events_ns
from tests.test_datasource import events

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def written(tmp_path_factory, spark):
    """Two appends and a delete."""
    lps.register(spark)
    root = str(tmp_path_factory.mktemp("sqlf") / "events")
    ns = create_events_ns(root)
    ns.write(events(300, seed=1))
    first = ns.manifest_version
    ns.write(events(100, seed=2, start_id=1000))
    ns.delete("id < 20")
    return PartitionedNamespace.open(root), first


def test_lancepart_history_is_ns_history(spark, written):
    ns, _ = written
    got = spark.sql(f"SELECT * FROM lancepart_history('{ns.root}')").collect()
    want = ns.history()
    assert [(r.version, r.operation, r.rows_written, r.batch_id) for r in got] == [
        (h.version, h.operation, h.rows_written, h.batch_id) for h in want]


def test_lancepart_partitions_is_ns_partitions_with_a_filter(spark, written):
    ns, _ = written
    day = ns.to_table().column("event_date")[0].as_py()
    flt = f"event_date = DATE '{day}'"
    for sql, parts in ((f"SELECT * FROM lancepart_partitions('{ns.root}')", ns.partitions()),
                       (f"SELECT * FROM lancepart_partitions('{ns.root}', \"{flt}\")", ns.partitions(flt))):
        got = spark.sql(sql).collect()
        assert sorted((r.object_id, r.read_version) for r in got) == sorted((p.object_id, p.read_version)
                                                                            for p in parts)
    one = spark.sql(f"SELECT * FROM lancepart_partitions('{ns.root}', \"{flt}\")").first()
    assert one.partition_values["event_date"] == day.isoformat()


def test_lancepart_changes_is_ns_changes(spark, written):
    ns, first = written
    got = spark.sql(f"SELECT id, _change_type, _commit_version FROM lancepart_changes('{ns.root}', {first})")
    want = ns.changes(first).read_all()
    assert sorted((r.id, r._change_type, r._commit_version) for r in got.collect()) == sorted(
        zip(want.column("id").to_pylist(), want.column("_change_type").to_pylist(),
            want.column("_commit_version").to_pylist(), strict=True))
    until = spark.sql(f"SELECT count(*) AS n FROM lancepart_changes('{ns.root}', '{first}', '{first + 1}')").first()
    assert until.n == 100  # the second append only; a version may come as a string
    with pytest.raises(Exception, match=r"start_version must be a __manifest version"):
        spark.sql(f"SELECT * FROM lancepart_changes('{ns.root}', 'latest')").collect()


def test_lancepart_describe(spark, written):
    ns, _ = written
    rows = dict(spark.sql(f"SELECT * FROM lancepart_describe('{ns.root}')").collect())
    assert rows["manifest_version"] == str(ns.manifest_version)
    assert rows["partitions"] == str(len(ns.partitions()))
    assert "event_date" in rows["current_spec"]
