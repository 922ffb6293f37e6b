"""Search benchmark (issue 15 item 4): pruned vector search across partitions.

Builds ``--rows`` random vectors (``--dim``, default 128; drawn around ``--clusters`` centres so
an IVF index has structure to find, as real embeddings do) spread over ``--partitions``
partitions (identity on ``tenant``), and the same rows as ONE unpartitioned Lance table. Every
table gets the same kind of vector index (``--index``, one IVF list per 4096 rows of the table).
Then, for ``--queries`` query vectors, rounds interleaved (each query runs every method in turn):

* filtered, one partition:  ``ns.search(..., filter="tenant = 'pNNN'")``  vs the unpartitioned
  table with the same filter as a Lance prefilter  vs numpy brute force over that partition's rows
* unfiltered, all partitions: ``ns.search(...)``  vs the unpartitioned table  vs numpy brute force

and prints latency p50 / p95 (ms), recall@k of each index search against numpy brute force, and
the index build time: in-process (every partition table in parallel, then one ``__manifest``
publish), for the unpartitioned table, and (``--spark``) on Spark local[2].

    python benchmarks/search.py [--rows 200000] [--partitions 100] [--dim 128] [--queries 30]
                                [--rounds 3] [--index IVF_FLAT] [--spark]

Goal (issue 15): filtered search >= 10x faster than the unpartitioned table with a prefilter;
recall@10 >= 0.95 at default search parameters.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
from machine_info import machine

from lancepart import PartitionedNamespace
from lancepart.storage.manifest import join_uri

ROWS_PER_LIST = 4096


def make_data(rows: int, partitions: int, dim: int, clusters: int, seed: int = 0) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32) * 3
    vec = centres[rng.integers(0, clusters, rows)] + rng.standard_normal((rows, dim)).astype(np.float32)
    tenant = np.char.add("p", np.char.zfill((np.arange(rows) % partitions).astype(str), 3))
    table = pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "tenant": pa.array(tenant),
                      "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), dim)})
    return table, vec


def index_params(index: str, rows: int, dim: int) -> dict:
    # the same list size everywhere (~4096 rows per IVF list), so a partition table and the
    # unpartitioned table get the "same index"
    p = {"num_partitions": max(1, rows // ROWS_PER_LIST), "metric": "l2"}
    if "PQ" in index:
        p["num_sub_vectors"] = max(1, dim // 8)
    return p


def build_partition_indexes(ns: PartitionedNamespace, index: str, dim: int) -> float:
    """``ns.create_index`` on every partition table (in parallel, then one publish); seconds."""
    rows = smallest_table(ns)
    t = time.perf_counter()
    ns.create_index("v", index, min_rows=0, **index_params(index, rows, dim))
    return time.perf_counter() - t


def smallest_table(ns: PartitionedNamespace) -> int:
    """Rows of the smallest partition table at its published version (the IVF list count)."""
    return min(lance.dataset(join_uri(ns.root, i.location), version=i.read_version).count_rows()
               for i in ns.partitions())


def build_partition_indexes_spark(root: str, index: str, dim: int) -> float:
    """The same build with ``lps.create_index`` (the per-table builds in Spark tasks, local[2])."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lancepart import spark as lps
    from lancepart.spark.session import get_session

    spark = get_session("search-bench", master="local[2]")
    try:
        ns = PartitionedNamespace.open(root)
        rows = smallest_table(ns)
        t = time.perf_counter()
        lps.create_index(spark, root, "v", index, min_rows=0, **index_params(index, rows, dim))
        return time.perf_counter() - t
    finally:
        spark.stop()


def brute_force(vec: np.ndarray, q: np.ndarray, k: int, rows: np.ndarray | None = None) -> np.ndarray:
    sub = vec if rows is None else vec[rows]
    d = ((sub - q) ** 2).sum(axis=1)
    top = np.argpartition(d, k)[:k] if len(d) > k else np.arange(len(d))
    top = top[np.argsort(d[top], kind="stable")]
    return top if rows is None else rows[top]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--index", default="IVF_FLAT", choices=["IVF_FLAT", "IVF_PQ", "IVF_HNSW_SQ", "IVF_SQ"])
    ap.add_argument("--spark", action="store_true", help="also time the index build on Spark local[2]")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()

    print(json.dumps(machine("lance", "pyarrow", "numpy"), sort_keys=True))
    print(json.dumps(vars(args), sort_keys=True))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="search-bench-"))
    data, vec = make_data(args.rows, args.partitions, args.dim, args.clusters)
    spec = {"id": 1, "fields": [{"field_id": "tenant", "source_ids": [1], "transform": {"type": "identity"},
                                  "result_type": {"type": "utf8"}}]}
    t = time.perf_counter()
    ns = PartitionedNamespace.create(str(work / "ns"), data.schema, spec)
    ns.write(data)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    flat = lance.write_dataset(data, str(work / "flat.lance"))
    flat_write_s = time.perf_counter() - t
    print(f"write: partitioned {write_s:.1f}s ({len(ns.partitions())} tables), unpartitioned {flat_write_s:.1f}s")

    builds = {}
    if args.spark:
        shutil.copytree(work / "ns", work / "ns_spark")
        builds["partitioned, Spark local[2]"] = build_partition_indexes_spark(str(work / "ns_spark"), args.index,
                                                                              args.dim)
    builds["partitioned, in-process"] = build_partition_indexes(ns, args.index, args.dim)
    t = time.perf_counter()
    flat.create_index("v", args.index, **index_params(args.index, args.rows, args.dim))
    builds["unpartitioned table"] = time.perf_counter() - t
    flat = lance.dataset(str(work / "flat.lance"))
    for name, s in builds.items():
        print(f"index build ({args.index}) {name}: {s:.1f}s")

    rng = np.random.default_rng(1)
    qs = vec[rng.integers(0, args.rows, args.queries)] + rng.standard_normal((args.queries, args.dim)).astype(
        np.float32) * 0.5
    tenants = data.column("tenant").to_numpy(zero_copy_only=False)
    rows_of = {}
    k = args.k
    ids_of = data.column("id").to_numpy()
    methods = ["filtered: ns.search (1 partition)", "filtered: unpartitioned + prefilter",
               "filtered: numpy brute force", f"all: ns.search ({args.partitions} tables)",
               "all: unpartitioned table", "all: numpy brute force", "filtered: ns.search again, warm handle"]
    times: dict[str, list[float]] = {m: [] for m in methods}
    hits: dict[str, int] = {m: 0 for m in methods if "brute" not in m}
    for r in range(args.rounds):
        for i, q in enumerate(qs):
            tenant = f"p{(i * 37 + r) % args.partitions:03d}"
            f = f"tenant = '{tenant}'"
            if tenant not in rows_of:
                rows_of[tenant] = np.flatnonzero(tenants == tenant)
            rows = rows_of[tenant]
            runs = {
                methods[0]: lambda q=q, f=f: ns.search("v", q, k=k, filter=f, columns=["id"]).column("id").to_numpy(),
                methods[1]: lambda q=q, f=f: flat.to_table(columns=["id"], nearest={"column": "v", "q": q, "k": k},
                                                           filter=f, prefilter=True).column("id").to_numpy(),
                methods[2]: lambda q=q, rows=rows: ids_of[brute_force(vec, q, k, rows)],
                methods[3]: lambda q=q: ns.search("v", q, k=k, columns=["id"]).column("id").to_numpy(),
                methods[4]: lambda q=q: flat.to_table(columns=["id"], nearest={"column": "v", "q": q, "k": k}
                                                      ).column("id").to_numpy(),
                methods[5]: lambda q=q: ids_of[brute_force(vec, q, k)],
                # the same partition again on this handle: its table open, its index cache warm,
                # the scan plan cached (a service answering one tenant's queries)
                methods[6]: lambda q=q, f=f: ns.search("v", q * 1.01, k=k, filter=f, columns=["id"]
                                                       ).column("id").to_numpy(),
            }
            got = {}
            for m, fn in runs.items():
                t = time.perf_counter()
                got[m] = fn()
                times[m].append((time.perf_counter() - t) * 1e3)
            for m in hits:
                if m == methods[6]:  # another query vector: checked against its own brute force
                    truth = ids_of[brute_force(vec, q * 1.01, k, rows)]
                else:
                    truth = got[methods[2]] if m.startswith("filtered") else got[methods[5]]
                hits[m] += len(set(got[m].tolist()) & set(truth.tolist()))
    n = args.rounds * args.queries
    print(f"\nlatency over {n} searches (ms; shared machine), recall@{k} vs numpy brute force:")
    print(f"{'method':40s} {'p50':>9s} {'p95':>9s} {'recall':>7s}")
    for m in methods:
        rec = f"{hits[m] / (n * k):.3f}" if m in hits else "exact"
        print(f"{m:40s} {statistics.median(times[m]):9.2f} {pct(times[m], 95):9.2f} {rec:>7s}")
    speedup = statistics.median(times[methods[1]]) / statistics.median(times[methods[0]])
    print(f"\nfiltered speed-up, ns.search vs unpartitioned + prefilter (p50): {speedup:.1f}x (goal >= 10x)")
    warm = statistics.median(times[methods[1]]) / statistics.median(times[methods[6]])
    print(f"filtered speed-up, warm handle (partition searched before) vs unpartitioned + prefilter (p50): {warm:.1f}x")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
