"""Requests per partition on an object store: a write into new partitions, an append into
existing ones and a row-level delete, each counted by a reverse proxy in front of a real
SeaweedFS S3 gateway (tests/request_proxy.py; no mock: every request goes to the store and
back). The bounds are the format's minimum with one shared Lance session (docs/object-storage.md
"Requests"): a change that adds a request per partition fails here. No timing is asserted.

Spec partitioning.md "Partition Table" (one Lance table per partition) and "Transaction /
Read Behavior" (a write commits each table, then publishes every ``read_version`` in one
``__manifest`` commit): the per-table requests are the table's own Lance protocol.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from lancepart import PartitionedNamespace
from tests.request_proxy import counting_proxy

PARTITIONS, ROWS = 12, 200
SPEC = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                             "result_type": {"type": "int64"}}]}


def data(seed: int) -> pa.Table:
    n = PARTITIONS * ROWS
    ids = pa.array(range(seed * n, (seed + 1) * n), pa.int64())
    return pa.table({"id": ids, "shop_id": pa.array([i % PARTITIONS for i in range(n)], pa.int64()),
                     "name": pa.array([f"customer-{i:012d}" for i in range(n)])})


def per_table(log: list[tuple[str, str]]) -> tuple[float, Counter]:
    """(requests on partition tables per partition, their kinds by table directory part)."""
    mine = [(k, p) for k, p in log if "$dataset" in p]
    kinds = Counter((k, p.split("$dataset/", 1)[1].split("/", 1)[0] if "$dataset/" in p else "") for k, p in mine)
    return len(mine) / PARTITIONS, kinds


@pytest.fixture
def counted(seaweedfs):
    with counting_proxy(seaweedfs.endpoint) as (endpoint, counter):
        so = {**seaweedfs.storage_options(), "aws_endpoint": endpoint}
        yield seaweedfs.new_root(), so, counter


def test_requests_per_partition_at_the_format_minimum(counted):
    """New partition: 5 requests per table (the data file, and the commit: a listing of
    ``_versions/`` before and inside Lance's create, the transaction and the manifest), as plain
    ``lance.write_dataset``. Append into an existing partition: 6 (an open at the published
    version, the data file, the commit's listing and two puts, and the one existence check of
    the data file before publishing). Delete of 1 % of the rows of tables with two fragments:
    per table its open and its two data files read, and per table with rows deleted a deletion
    file per fragment changed and the commit (a listing and two puts). On the code before, the
    new-partition count here was 6.0 per table (the data file checked again before publishing);
    benchmarks/request_counts.py measured 15.6 for an append and 17.4 for a delete per
    partition (a new object-store client per table, each version opened three times, a listing
    before each commit, the version checked again before publishing)."""
    root, so, counter = counted
    ns = PartitionedNamespace.create(root, data(0).schema, SPEC, storage_options=so)
    counter.take()

    ns.write(data(0))
    new, kinds = per_table(counter.take())
    assert new <= 5, kinds
    assert all(k != "HEAD" for k, _ in kinds), kinds  # nothing asked about files it just wrote

    ns.write(data(1))
    append, kinds = per_table(counter.take())
    assert append <= 6, kinds
    assert kinds[("LIST", "_versions")] <= PARTITIONS, kinds  # a table opened at a version is not listed

    result = ns.delete("id % 100 = 7")
    delete, kinds = per_table(counter.take())
    assert result.details["rows_deleted"] == 2 * PARTITIONS * ROWS // 100
    touched, deletion_files = result.partitions_touched, kinds[("PUT", "_deletions")]
    assert 0 < touched and deletion_files <= 2 * touched, kinds  # a deletion file per fragment changed
    # every table: its open and its two fragments read; a table with rows deleted: its deletion
    # files and its commit (a listing, the transaction, the manifest); nothing else
    assert delete * PARTITIONS <= PARTITIONS * (1 + 2) + deletion_files + 3 * touched, kinds
    assert ns.to_table().num_rows == 2 * PARTITIONS * ROWS - 2 * PARTITIONS * ROWS // 100
    print(f"requests per partition on SeaweedFS: new {new:.1f}, append {append:.1f}, delete {delete:.1f}")
