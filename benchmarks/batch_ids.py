"""Batch id bookkeeping benchmark: what a batch id costs a publish and a lookup as the number of
remembered ids grows (docs/exactly-once.md).

For each count of ids already recorded (0, 10 000, 100 000 by default; the index
``_lancepart_batches`` is filled directly, then compacted the way publishes keep it), a
namespace of one partition field gets ``--runs`` one-row appends and prints medians of:
a publish without a batch id, a publish with a new batch id, a rerun of a published id (skipped),
and ``find_batch`` for an id that is there and one that is not.

    python benchmarks/batch_ids.py [--counts 0,10000,100000] [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime

import lance
import pyarrow as pa
from machine_info import machine
from timing import median_ms


def fill_index(ns, n: int) -> None:
    from lancepart.write import batches

    if n == 0:
        return
    now = datetime.now(UTC)
    rows = pa.table({
        "batch_id": pa.array([f"lancepart_ingest:/opt/jobs/configs/ventes-été.yaml:{i:08d}" for i in range(n)]),
        "manifest_version": pa.array([1] * n, pa.uint64()),
        "committed_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
    }, schema=batches.INDEX_SCHEMA)
    uri = batches.index_uri(ns.manifest)
    ds = lance.write_dataset(rows, uri, schema=batches.INDEX_SCHEMA, mode="create")
    ds.update_metadata({batches.WATERMARK_KEY: str(ns.manifest_version)})
    batches._compact(lance.dataset(uri))


def bench(n: int, runs: int) -> dict:
    from lancepart import PartitionedNamespace
    from lancepart.write.batches import find_batch

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("shop", pa.int32())])
    spec = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                                 "result_type": {"type": "int32"}}]}
    ns = PartitionedNamespace.create(tempfile.mkdtemp() + "/ns", schema, spec)
    ns.write(pa.table({"id": pa.array([0], pa.int64()), "shop": pa.array([1], pa.int32())}))
    fill_index(ns, n)
    row = lambda i: pa.table({"id": pa.array([i], pa.int64()), "shop": pa.array([i % 4], pa.int32())})  # noqa: E731
    out = {"ids_recorded": n}
    out["publish_no_batch_id_ms"] = median_ms(lambda i: ns.write(row(i)), runs)
    out["publish_new_batch_id_ms"] = median_ms(lambda i: ns.write(row(i), batch_id=f"new-été-{n}-{i}"), runs)
    out["rerun_skipped_ms"] = median_ms(lambda i: ns.write(row(i), batch_id=f"new-été-{n}-{i}"), runs)
    snap = ns.manifest.snapshot()
    hit = f"lancepart_ingest:/opt/jobs/configs/ventes-été.yaml:{n // 2:08d}" if n else f"new-été-{n}-0"
    out["lookup_hit_ms"] = median_ms(lambda i: find_batch(ns.manifest, hit, snap), runs)
    out["lookup_miss_ms"] = median_ms(lambda i: find_batch(ns.manifest, f"absent-{i}", snap), runs)
    out["index_rows"] = lance.dataset(f"{ns.root}/_lancepart_batches").count_rows()
    out["index_fragments"] = len(lance.dataset(f"{ns.root}/_lancepart_batches").get_fragments())
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--counts", default="0,10000,100000")
    p.add_argument("--runs", type=int, default=15)
    a = p.parse_args()
    print(json.dumps({"machine": machine("lance", "pyarrow")}))
    for n in (int(c) for c in a.counts.split(",")):
        print(json.dumps(bench(n, a.runs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
