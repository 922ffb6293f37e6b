"""Partition evolution (spec "Partition Evolution", "Field ID Reuse", "Manifest Table Schema",
Appendix A): ``ns.evolve`` adds ``partition_spec_v<N+1>``, extends ``__manifest`` with the new
``partition_field_*`` columns through Lance schema evolution and adds the ``v<N+1>`` row; new
writes use the newest spec; reads and pruning span every version."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.errors import CorruptNamespaceError, InvalidSpecError
from lancepart.evolution.spec_evolution import _add_columns, _add_row, _publish, resolve_fields
from lancepart.model.spec import PartitionSpec
from lancepart.storage.manifest import ManifestChanges, ManifestConflict, join_uri
from tests.conftest import APPENDIX_A

D = dt.date
V2_FIELDS = APPENDIX_A["partition_spec_v2"]["fields"]


@pytest.fixture
def appendix_ns(root, events_schema) -> PartitionedNamespace:
    return PartitionedNamespace.create(root, events_schema, APPENDIX_A["partition_spec_v1"])


def rows(ns: PartitionedNamespace, start: int, values: list[tuple[dt.date | None, str | None]]) -> pa.Table:
    return pa.table({"id": list(range(start, start + len(values))), "event_date": [d for d, _ in values],
                     "country": [c for _, c in values]}, schema=ns.schema)


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_appendix_a_evolution_v1_to_v2(appendix_ns):
    """Appendix A: spec v1 = identity(event_date); v2 = year(event_date) x identity(country).
    The root properties become exactly Appendix A, __manifest gains partition_field_event_year
    and partition_field_country (Lance schema evolution, same table, indexes kept) and a v2 row."""
    ns = appendix_ns
    before = lance.dataset(join_uri(ns.root, "__manifest"))
    spec = ns.evolve(V2_FIELDS).spec
    assert spec.to_json() == APPENDIX_A["partition_spec_v2"]
    assert ns.current_spec == spec and sorted(ns.specs) == [1, 2]
    md = lance.dataset(join_uri(ns.root, "__manifest")).metadata
    assert json.loads(md["partition_spec_v1"]) == APPENDIX_A["partition_spec_v1"]
    assert json.loads(md["partition_spec_v2"]) == APPENDIX_A["partition_spec_v2"]
    after = lance.dataset(join_uri(ns.root, "__manifest"))
    assert after.schema.names == [*before.schema.names, "partition_field_event_year", "partition_field_country"]
    assert after.schema.field("partition_field_event_year").type == pa.int32()
    assert after.schema.field("partition_field_country").type == pa.utf8()
    assert {i.name for i in after.describe_indices()} == {i.name for i in before.describe_indices()}
    v2 = after.to_table(filter="object_id = 'v2'").to_pylist()
    assert len(v2) == 1 and v2[0]["object_type"] == "namespace"
    assert ns.describe_namespace(["v2"])["partition_spec"] == spec.to_json_string()
    # Lance's own directory namespace sees the new spec version namespace
    d = lns.DirectoryNamespace(root=ns.root)
    assert sorted(d.list_namespaces(lns.ListNamespacesRequest(id=[])).namespaces) == ["v1", "v2"]


def test_writes_use_the_newest_spec_and_reads_span_both(appendix_ns):
    """The spec's own example ("Compatibility with Partition Pruning"): v1 by event_date, v2 by
    year(event_date) x country; ``event_date = '2025-12-10'`` matches the exact v1 partition and
    the v2 partitions of year 2025 (every country), and returns exactly the matching rows."""
    ns = appendix_ns
    ns.write(rows(ns, 0, [(D(2025, 12, 10), "US"), (D(2025, 12, 11), "CN"), (D(2024, 1, 1), "US")]))
    ns.evolve(V2_FIELDS)
    r = ns.write(rows(ns, 10, [(D(2025, 12, 10), "US"), (D(2025, 6, 1), "US"), (D(2025, 12, 10), "CN"),
                               (D(2026, 1, 1), "CN"), (None, None)]))
    assert r.partitions_created == 4  # (2025,US) (2025,CN) (2026,CN) (NULL,NULL), all under v2
    by_spec = {}
    for p in ns.partitions():
        by_spec.setdefault(p.spec_id, []).append(p.values)
    assert len(by_spec[1]) == 3 and all(set(v) == {"event_date"} for v in by_spec[1])
    assert sorted(by_spec[2], key=str) == sorted([{"event_year": 2025, "country": "US"},
                                                  {"event_year": 2025, "country": "CN"},
                                                  {"event_year": 2026, "country": "CN"},
                                                  {"event_year": None, "country": None}], key=str)
    kept = ns.partitions("event_date = DATE '2025-12-10'")
    assert sorted((p.spec_id, tuple(p.values.values())) for p in kept) == [
        (1, (D(2025, 12, 10),)), (2, (2025, "CN")), (2, (2025, "US"))]
    assert ids(ns.to_table("event_date = DATE '2025-12-10'")) == [0, 10, 12]
    assert ids(ns.to_table("country = 'CN'")) == [1, 12, 13]
    assert ids(ns.to_table("event_date IS NULL")) == [14]
    assert ids(ns.to_table()) == [0, 1, 2, 10, 11, 12, 13, 14]
    text = ns.explain("event_date = DATE '2025-12-10'")
    assert "v1 [event_date=identity(1)]: kept 1 of 3" in text and "v2 [event_year=year(1), country=identity(2)]" in text


def test_batch_ids_survive_evolution(appendix_ns):
    """A batch published under v1 is still recognised after evolving: the rerun is skipped."""
    ns = appendix_ns
    data = rows(ns, 0, [(D(2025, 12, 10), "US")])
    ns.write(data, batch_id="nightly-1")
    ns.evolve(V2_FIELDS)
    again = ns.write(data, batch_id="nightly-1")
    assert again.skipped and ids(ns.to_table()) == [0]


def test_field_id_reuse_rules(appendix_ns, events_schema):
    """Spec "Field ID Reuse": a field with an earlier field's source_ids and transform reuses
    its field_id (also when the field comes without one); a new definition gets a new id; an
    old id for a new definition, or a new id for an old definition, is refused."""
    ns = appendix_ns
    identity_date = {"source_ids": [1], "transform": {"type": "identity"}, "result_type": {"type": "date32"}}
    year = {"source_ids": [1], "transform": {"type": "year"}, "result_type": {"type": "int32"}}
    bucket = {"source_ids": [2], "transform": {"type": "bucket", "num_buckets": 8}, "result_type": {"type": "int32"}}
    resolved = resolve_fields([identity_date, year, bucket], ns.schema, list(ns.specs.values()))
    assert [f.field_id for f in resolved] == ["event_date", "event_date_year", "country_bucket_8"]
    with pytest.raises(InvalidSpecError, match=r"'day_of_event'.*same source_ids and transform.*'event_date'"):
        ns.evolve([{**identity_date, "field_id": "day_of_event"}])
    with pytest.raises(InvalidSpecError, match="'event_date': field_id already names a different definition"):
        ns.evolve([{**year, "field_id": "event_date"}])
    with pytest.raises(InvalidSpecError, match="result_type"):
        ns.evolve([{**identity_date, "result_type": {"type": "int32"}}])
    with pytest.raises(InvalidSpecError, match="at least one field"):
        ns.evolve([])
    assert sorted(ns.refresh().specs) == [1]  # nothing published by the refused evolutions
    spec2 = ns.evolve([year, bucket]).spec
    assert [f.field_id for f in spec2.fields] == ["event_date_year", "country_bucket_8"]
    spec3 = ns.evolve([identity_date, {**year}]).spec  # back to days + the v2 year field: both ids reused
    assert spec3.id == 3 and [f.field_id for f in spec3.fields] == ["event_date", "event_date_year"]
    cols = [n for n in lance.dataset(join_uri(ns.root, "__manifest")).schema.names if n.startswith("partition_field_")]
    assert cols == ["partition_field_event_date", "partition_field_event_date_year", "partition_field_country_bucket_8"]


def test_evolving_to_the_current_spec_is_a_no_op(appendix_ns):
    ns = appendix_ns
    spec = ns.evolve(V2_FIELDS).spec
    version = ns.manifest_version
    again = ns.evolve(V2_FIELDS)
    assert again.spec == spec and again.details["created"] is False and again.manifest_version == version
    assert ns.evolve(spec.to_json()).spec == spec
    assert ns.refresh().manifest_version == version


def test_crash_after_the_row_is_rolled_forward(appendix_ns):
    """An evolution that died after its columns and v2 row (before the root property): writers
    still use v1, and the next evolution publishes the pending v2 first, then becomes v3 with
    ids reused against v2."""
    ns = appendix_ns
    pending = PartitionSpec.from_json(APPENDIX_A["partition_spec_v2"])
    _add_columns(ns.manifest, pending, 5)
    _add_row(ns.manifest, pending, 5)
    ns.refresh()
    assert sorted(ns.specs) == [1]
    ns.write(rows(ns, 0, [(D(2025, 12, 10), "US")]))
    assert {p.spec_id for p in ns.partitions()} == {1}
    spec = ns.evolve([{"source_ids": [2], "transform": {"type": "identity"}, "result_type": {"type": "utf8"}}]).spec
    assert spec.id == 3 and [f.field_id for f in spec.fields] == ["country"]
    assert ns.specs[2] == pending
    # a rerun of the crashed evolution itself finishes it instead of adding a spec
    other = PartitionedNamespace.create(ns.root + "-b", ns.schema, APPENDIX_A["partition_spec_v1"])
    _add_columns(other.manifest, pending, 5)
    _add_row(other.manifest, pending, 5)
    finished = other.evolve(V2_FIELDS)  # publishes the pending v2, which the fields define: created
    assert finished.spec == pending and finished.details["created"] and sorted(other.specs) == [1, 2]


EVOLVER = """
import sys, time
from lancepart import PartitionedNamespace
ns = PartitionedNamespace.open(sys.argv[1])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
field = {"source_ids": [2], "transform": {"type": "bucket", "num_buckets": int(sys.argv[3])},
         "result_type": {"type": "int32"}}
print(ns.evolve([field]).spec.id)
"""


def test_concurrent_evolutions_and_writers(appendix_ns, tmp_path: Path):
    """Two processes evolve to different specs while two writer processes publish: both specs
    land under distinct ids, no partition row or data row is lost, and each write went
    entirely under one spec version (real processes, one start instant)."""
    ns = appendix_ns
    ns.write(rows(ns, 0, [(D(2025, 12, d), "US") for d in range(1, 6)]))
    start = str(time.time() + 3)
    script = tmp_path / "evolver.py"
    script.write_text(EVOLVER)
    writer = tmp_path / "writer.py"
    writer.write_text(
        "import sys, time, datetime as dt, pyarrow as pa\n"
        "from lancepart import PartitionedNamespace\n"
        "ns = PartitionedNamespace.open(sys.argv[1])\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "base = int(sys.argv[3])\n"
        "for k in range(3):\n"
        "    t = pa.table({'id': [base + 10 * k + i for i in range(10)],\n"
        "                  'event_date': [dt.date(2025, 12, 1 + i) for i in range(10)],\n"
        "                  'country': ['US', 'CN'] * 5}, schema=ns.refresh().schema)\n"
        "    ns.write(t)\n")
    procs = [subprocess.Popen([sys.executable, str(script), ns.root, start, n], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in ("8", "16")]
    procs += [subprocess.Popen([sys.executable, str(writer), ns.root, start, str(b)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for b in (1000, 2000)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    assert sorted(int(o.strip()) for o, _ in outs[:2]) == [2, 3]
    ns.refresh()
    assert sorted(ns.specs) == [1, 2, 3]
    assert {f.transform.num_buckets for s in (ns.specs[2], ns.specs[3]) for f in s.fields} == {8, 16}
    want = list(range(5)) + [b + i for b in (1000, 2000) for i in range(30)]
    assert ids(ns.to_table()) == want
    parts = ns.partitions()
    assert len({p.object_id for p in parts}) == len(parts)
    for p in parts:  # every table holds only rows of its own partition under its spec
        t = lance.dataset(join_uri(ns.root, p.location), version=p.read_version).to_table()
        if p.spec_id == 1:
            assert set(t.column("event_date").to_pylist()) == {p.values["event_date"]}


def test_publish_race_loser_finds_the_spec_published(appendix_ns):
    """Step 3 of an evolution raced by another process finishing the same pending spec (found by
    test_concurrent_evolutions_and_writers under load): Lance refuses the second of two concurrent
    metadata updates, and the loser must find the property published and succeed, not fail."""
    ns = appendix_ns
    spec = PartitionSpec.from_json(APPENDIX_A["partition_spec_v2"])
    _add_columns(ns.manifest, spec, 3)
    earlier = ns.manifest.snapshot()
    ns.manifest.dataset().update_metadata({spec.key: spec.to_json_string()})  # the other process wins
    with pytest.raises(ManifestConflict):  # what the loser's commit on its earlier snapshot meets
        ns.manifest.commit_config(earlier, ManifestChanges(metadata={spec.key: spec.to_json_string()}))

    _publish(ns.manifest, spec, max_retries=3)  # rebased: finds it published
    assert PartitionSpec.from_json(ns.manifest.dataset().metadata[spec.key]) == spec

    other = PartitionSpec(spec.id, spec.fields[:1])  # a different spec under the same key: never overwritten
    with pytest.raises(CorruptNamespaceError, match=spec.key):
        _publish(ns.manifest, other, max_retries=3)
    assert PartitionSpec.from_json(ns.manifest.dataset().metadata[spec.key]) == spec
