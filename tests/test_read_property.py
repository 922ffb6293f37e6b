"""End-to-end read property (spec "Partition Pruning", "Compatibility with Partition Pruning",
"Transaction / Read Behavior"): real namespaces evolved from spec v1 to v2, real Lance tables,
random data and random SQL filters. For every filter, ``ns.to_table(filter)`` returns exactly
the rows a brute-force DataFusion filter over all published rows returns, and
``ns.partitions(filter)`` keeps every table that holds a matching row.

Five namespaces, each written half under v1 and half under v2 after ``ns.evolve``; together
their ten spec versions cover identity (int, string, date), bucket, multi_bucket, truncate
(int, string), year/month/day/hour (naive, fixed-offset and named zones) and single- and
multi-column expressions. The data and filter generators are the pruning property test's
(tests/test_prune.py)."""

from __future__ import annotations

import random
import statistics

import lance
import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from lancepart.storage.manifest import join_uri
from tests.test_prune import INT32, PROP_SCHEMA, _brute_force, _filter, _gen_rows, _identity, _tf


def _expr(fid: str, src: list[int], sql: str, rt: dict) -> dict:
    return {"field_id": fid, "source_ids": src, "expression": sql, "result_type": rt}


CASES = {
    "identity-to-bucket": (
        [_identity("i32", 2, INT32), _identity("s", 3, {"type": "utf8"})],
        [_tf("i_b8", [1], "bucket", num_buckets=8), _tf("s_t2", [3], "truncate", {"type": "utf8"}, width=2)]),
    "time": (
        [_tf("ts_y", [5], "year"), _tf("d_m", [4], "month")],
        [_tf("tsz_d", [6], "day"), _tf("tsn_h", [7], "hour")]),
    "multi-bucket-to-expressions": (
        [_tf("mb", [2, 3], "multi_bucket", num_buckets=8)],
        [_tf("i_t10", [1], "truncate", {"type": "int64"}, width=10),
         _expr("e_mod", [1], "col0 % 7", {"type": "int64"})]),
    "date-to-composite": (
        [_identity("d", 4, {"type": "date32"})],
        [_expr("e_cat", [3, 2], "concat(col0, '-', CAST(col1 AS VARCHAR))", {"type": "utf8"}),
         _tf("ts_d", [5], "day")]),
    "zones-and-prefix": (
        [_tf("i32_b4", [2], "bucket", num_buckets=4), _tf("tsn_y", [7], "year")],
        [_tf("tsn_m", [7], "month"), _tf("i32_t100", [2], "truncate", INT32, width=100),
         _expr("e_first", [3], "coalesce(left(col0, 1), '?')", {"type": "utf8"})]),
}
ROWS_PER_VERSION = 70
FILTERS_PER_CASE = 40  # per case and spec history; 250 under --stress


def _published(ns: PartitionedNamespace) -> tuple[pa.Table, dict[int, str]]:
    """All published rows, and each row id's partition table (read at its read_version)."""
    owner: dict[int, str] = {}
    for p in ns.partitions():
        ds = lance.dataset(join_uri(ns.root, p.location), version=p.read_version)
        for i in ds.to_table(columns=["id"]).column("id").to_pylist():
            assert i not in owner, f"row {i} is in two partition tables"
            owner[i] = p.object_id
    return ns.to_table(), owner


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_to_table_equals_brute_force_across_spec_versions(root, case, stress):
    v1, v2 = CASES[case]
    rng = random.Random(f"read-property-{case}")
    ns = PartitionedNamespace.create(root, PROP_SCHEMA, {"id": 1, "fields": v1})
    first = _gen_rows(rng, ROWS_PER_VERSION)
    ns.write(first)
    spec2 = ns.evolve(v2).spec
    assert spec2.id == 2
    second = _gen_rows(rng, ROWS_PER_VERSION)
    second = second.set_column(0, PROP_SCHEMA.field("id"),
                               pa.array(range(ROWS_PER_VERSION, 2 * ROWS_PER_VERSION), pa.int64()))
    ns.write(second)
    everything, owner = _published(ns)
    assert sorted(everything.column("id").to_pylist()) == list(range(2 * ROWS_PER_VERSION))
    assert {p.spec_id for p in ns.partitions()} == {1, 2}
    data = pa.concat_tables([first, second])
    n_tables = len(ns.partitions())
    pruned = []
    filters = 250 if stress else FILTERS_PER_CASE
    for _ in range(filters):
        flt, _ = _filter(rng, data)
        want = sorted(data.column("id").take(pa.array(_brute_force(data, flt), pa.int64())).to_pylist())
        kept = {p.object_id for p in ns.partitions(flt)}
        dropped = {owner[i] for i in want} - kept
        assert not dropped, f"{flt!r} pruned tables holding matching rows: {dropped}\n{ns.explain(flt)}"
        got = ns.to_table(flt, columns=["id", "s"])
        assert got.schema.names == ["id", "s"]
        assert sorted(got.column("id").to_pylist()) == want, f"{flt!r}\n{ns.explain(flt)}"
        pruned.append(1 - len(kept) / n_tables)
    print(f"\n{case}: {filters} filters over {n_tables} tables (v1 + v2), "
          f"{statistics.mean(pruned):.2f} of the tables pruned on average")
    assert statistics.mean(pruned) > 0.05  # pruning does happen
