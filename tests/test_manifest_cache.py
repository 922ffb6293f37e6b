"""The process's cache of ``__manifest`` table pins (lancepart/storage/manifest.py ``PINS_CACHE``):
a ``__manifest`` version never changes, so a second open of the same version reuses what the first
read (spec "Partition Pruning": pruning reads the table rows of one version); a newer version, or
a namespace removed and created again at the same root, is read afresh. Real Lance tables."""

from __future__ import annotations

import shutil

import pyarrow as pa

from lancepart import PartitionedNamespace
from lancepart.storage.manifest import PINS_CACHE, _PinsCache

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("shop", pa.int32())])
SPEC = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                             "result_type": {"type": "int32"}}]}


def rows(ids: range, shops: int) -> pa.Table:
    return pa.table({"id": list(ids), "shop": [i % shops for i in ids]}, schema=SCHEMA)


def test_a_version_opened_again_reuses_its_pins_and_a_new_version_does_not(tmp_path):
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    ns.write(rows(range(30), 3))
    first = PartitionedNamespace.open(root).snapshot().table_pins()
    again = PartitionedNamespace.open(root).snapshot().table_pins()
    assert again is first  # not read again
    ns.write(rows(range(30, 40), 5))  # a new version with two new partitions
    newer = PartitionedNamespace.open(root)
    assert newer.snapshot().table_pins() is not first
    assert len(newer.partitions()) == 5 and len(newer.partitions("shop = 4")) == 1


def test_a_namespace_created_again_at_the_same_root_is_never_read_from_the_cache(tmp_path):
    """Same root, same ``__manifest`` version number, other rows: the key holds the version's
    data files, whose names are new on every write."""
    root = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    ns.write(rows(range(10), 2))
    v = ns.manifest_version
    assert len(PartitionedNamespace.open(root).partitions()) == 2
    shutil.rmtree(root)
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    ns.write(rows(range(10), 4))
    assert ns.manifest_version == v
    reopened = PartitionedNamespace.open(root)
    assert sorted(p.values["shop"] for p in reopened.partitions()) == [0, 1, 2, 3]
    assert reopened.to_table().num_rows == 10


def test_the_cache_is_bounded_by_rows():
    cache = _PinsCache(max_rows=10)
    t = pa.table({"x": list(range(4))})
    for i in range(5):
        cache.put(("u", i, ()), t)
    assert cache.get(("u", 0, ())) is None and cache.get(("u", 4, ())) is t  # 2 entries of 4 rows kept
    assert cache.get(("u", 3, ())) is t and cache.get(("u", 2, ())) is None
    cache.put(("big", 0, ()), pa.table({"x": list(range(11))}))  # more than the bound: not kept
    assert cache.get(("big", 0, ())) is None
    assert PINS_CACHE.max_rows >= 100_000  # a namespace of 100 000 partitions fits
