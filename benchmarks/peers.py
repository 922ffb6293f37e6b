"""Write benchmark against the peers: lancepart ``ns.write`` vs delta-rs, pyiceberg and plain Lance.

In ONE process, on the same in-memory Arrow table (``--rows`` rows, default 2 M, generated with
numpy, seeded: user_id int64, shop_id int64 with ~1 000 distinct values, event_ts timestamp,
event_date date32, country string, amount float64), each case runs every system once per round,
rounds interleaved in a rotating order (round r starts with system r mod n), each round into a
fresh directory; the directories are removed after the case's last round. One untimed warm-up
round comes first. Systems:

* lancepart: ``PartitionedNamespace.write`` (in-process, default options)
* delta-rs:  ``deltalake.write_deltalake(mode="append", partition_by=[...])``
* pyiceberg: ``Table.append`` (SqlCatalog on sqlite; bucket writes need ``pyiceberg-core``)
* lance:     ``lance.write_dataset`` unpartitioned: the floor, one table, no partitioning
* lance-tables: one ``lance.write_dataset`` per partition (sorted by the partition column, 16
  threads): what the spec's one-table-per-partition layout costs in Lance itself, before any
  ``__manifest`` or namespace work

Cases (the same partitions for every table format):

* bucket16:   bucket(user_id, 16). delta-rs gets a precomputed bucket column (lancepart.model.murmur3,
  outside the timed section), pyiceberg a BucketTransform(16) partition field on user_id.
* identity1k: identity(shop_id), ~1 000 partitions.

Printed per case and system: median and min seconds, ratio to lancepart, partitions, files and
bytes per partition table / partition directory, total files and bytes; then lancepart / fastest
table format and lancepart / delta-rs bytes per partition; then one JSON summary line.
Install the peers with ``pip install -e '.[bench]'`` (or run ``make bench-peers``).

    python benchmarks/peers.py [--rows 2000000] [--rounds 5] [--cases bucket16,identity1k]
                               [--systems lancepart,delta-rs,pyiceberg,lance,lance-tables] [--keep]
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from machine_info import machine

SYSTEMS = ("lancepart", "delta-rs", "pyiceberg", "lance", "lance-tables")
TABLE_FORMATS = ("lancepart", "delta-rs", "pyiceberg")
COUNTRIES = ["US", "FR", "DE", "JP", "BR", "IN", "GB", "CA", "MX", "ES"]
BUCKET_COL = "user_bucket"  # the precomputed bucket column delta-rs partitions by

TIMED = {
    "lancepart": "ns.write(table) only; PartitionedNamespace.create (the empty __manifest) is before it",
    "delta-rs": "write_deltalake(mode='append', partition_by=...) only; DeltaTable.create (empty table) is before",
    "pyiceberg": "table.append(table) only; catalog, create_table and update_spec are before it",
    "lance": "lance.write_dataset(table) (creates the dataset: it has no separate create step)",
    "lance-tables": "sort by the partition column, then one lance.write_dataset per partition on 16 threads: "
                    "the floor of any one-Lance-table-per-partition layout (no __manifest, no namespace)",
}


def events(rows: int, seed: int) -> pa.Table:
    """The input table, generated with numpy (vectorised, seeded)."""
    rng = np.random.default_rng(seed)
    start_us = 1_735_689_600 * 1_000_000  # 2025-01-01T00:00:00Z
    ts = start_us + rng.integers(0, 30 * 86_400 * 1_000_000, rows)
    return pa.table({
        "user_id": pa.array(rng.integers(0, 50_000_000, rows), pa.int64()),
        "shop_id": pa.array(rng.integers(0, 1000, rows), pa.int64()),
        "event_ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "event_date": pa.array((ts // (86_400 * 1_000_000)).astype(np.int32), pa.int32()).view(pa.date32()),
        "country": pa.array(COUNTRIES).take(pa.array(rng.integers(0, len(COUNTRIES), rows))),
        "amount": pa.array(np.round(rng.random(rows) * 500, 2), pa.float64()),
    })


def lancepart_setup(table: pa.Table, root: str):
    """``table`` (of :func:`events`) as a namespace at ``root`` partitioned by identity(shop_id):
    the starting point of benchmarks/delete.py and benchmarks/merge.py."""
    from lancepart import PartitionedNamespace

    spec = {"id": 1, "fields": [{"field_id": "shop", "source_ids": [table.schema.get_field_index("shop_id")],
                                 "transform": {"type": "identity"}, "result_type": {"type": "int64"}}]}
    ns = PartitionedNamespace.create(root, table.schema, spec)
    ns.write(table.cast(ns.schema))
    return ns


def delta_setup(table: pa.Table, root: str):
    """The same rows as a Delta table partitioned by shop_id (delta-rs)."""
    import deltalake

    deltalake.write_deltalake(root, table, partition_by=["shop_id"])
    return deltalake.DeltaTable(root)


def spark_session(app: str, master: str = "local[*]"):
    """Spark on ``local[*]`` (driver memory 4g) for the ``--spark`` systems of benchmarks/delete.py
    and benchmarks/merge.py, or on ``master`` (a standalone cluster's ``spark://`` URL: executors of
    1 core and 1 GiB on every worker); workers run this interpreter and import this checkout."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app).config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "4g").config("spark.sql.shuffle.partitions", "8"))
    if not master.startswith("local"):
        repo = str(Path(__file__).resolve().parent.parent)
        builder = (builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.executor.memory", "1g").config("spark.executor.cores", "1")
                   .config("spark.executorEnv.PYTHONPATH", repo))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def walk(path: str) -> tuple[int, int]:
    """(files, bytes) under ``path``."""
    files = size = 0
    for d, _, names in os.walk(path):
        for n in names:
            files += 1
            size += os.path.getsize(os.path.join(d, n))
    return files, size


def layout(root: str, part_dirs: list[str]) -> dict:
    """Files and bytes per partition directory (mean, max) and in total under ``root``."""
    per = [walk(p) for p in part_dirs]
    total_files, total_bytes = walk(root)
    return {
        "partitions": len(per),
        "files_per_partition": round(sum(f for f, _ in per) / max(1, len(per)), 2),
        "max_files_per_partition": max((f for f, _ in per), default=0),
        "bytes_per_partition": round(sum(b for _, b in per) / max(1, len(per))),
        "total_files": total_files,
        "total_bytes": total_bytes,
    }


# ---------------------------------------------------------------------------- the systems
# Each runner: setup(root) -> state (untimed), run(state) -> rows written (timed),
# measure(state) -> (layout dict, set of partition values as strings) (untimed).


class Lancepart:
    def __init__(self, table: pa.Table, case: str):
        from lancepart import PartitionedNamespace

        self.cls = PartitionedNamespace
        self.table = table
        src = table.schema.get_field_index("user_id" if case == "bucket16" else "shop_id")
        transform = {"type": "bucket", "num_buckets": 16} if case == "bucket16" else {"type": "identity"}
        result = "int32" if case == "bucket16" else "int64"
        self.spec = {"id": 1, "fields": [{"field_id": "p", "source_ids": [src], "transform": transform,
                                          "result_type": {"type": result}}]}

    def setup(self, root: str):
        ns = self.cls.create(root, self.table.schema, self.spec)
        return ns, self.table.cast(ns.schema) if ns.schema != self.table.schema else self.table

    def run(self, state) -> int:
        ns, data = state
        return ns.write(data).rows_written

    def measure(self, state, root: str) -> tuple[dict, set[str]]:
        ns, _ = state
        parts = ns.partitions()
        dirs = [os.path.join(ns.root, p.location) for p in parts]
        return layout(root, dirs), {str(next(iter(p.values.values()))) for p in parts}


class Delta:
    def __init__(self, table: pa.Table, case: str):
        import deltalake

        self.dl = deltalake
        if case == "bucket16":
            from lancepart.model import murmur3

            table = table.append_column(BUCKET_COL, murmur3.bucket(table.column("user_id"), 16))
            self.col = BUCKET_COL
        else:
            self.col = "shop_id"
        self.table = table

    def setup(self, root: str):
        self.dl.DeltaTable.create(root, schema=self.table.schema, partition_by=[self.col])
        return root

    def run(self, root: str) -> int:
        self.dl.write_deltalake(root, self.table, mode="append", partition_by=[self.col])
        return self.table.num_rows

    def measure(self, root: str, _root: str) -> tuple[dict, set[str]]:
        dirs = sorted(os.path.join(root, d) for d in os.listdir(root) if d.startswith(self.col + "="))
        return layout(root, dirs), {os.path.basename(d).split("=", 1)[1] for d in dirs}


class Iceberg:
    def __init__(self, table: pa.Table, case: str):
        from pyiceberg.transforms import BucketTransform, IdentityTransform

        self.table = table
        if case == "bucket16":
            self.source, self.transform, self.name = "user_id", BucketTransform(16), BUCKET_COL
        else:
            self.source, self.transform, self.name = "shop_id", IdentityTransform(), "shop_id"

    def setup(self, root: str):
        from pyiceberg.catalog.sql import SqlCatalog

        os.makedirs(root)
        catalog = SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")
        catalog.create_namespace("bench")
        tbl = catalog.create_table("bench.events", schema=self.table.schema)
        with tbl.update_spec() as u:
            u.add_field(self.source, self.transform, self.name)
        return tbl

    def run(self, tbl) -> int:
        tbl.append(self.table)
        return self.table.num_rows

    def measure(self, tbl, root: str) -> tuple[dict, set[str]]:
        data = os.path.join(tbl.location().removeprefix("file://"), "data")
        dirs = sorted(os.path.join(data, d) for d in os.listdir(data) if d.startswith(self.name + "="))
        return layout(root, dirs), {os.path.basename(d).split("=", 1)[1] for d in dirs}


class LanceFloor:
    def __init__(self, table: pa.Table, case: str):
        import lance

        self.lance = lance
        self.table = table

    def setup(self, root: str):
        return root

    def run(self, root: str) -> int:
        self.lance.write_dataset(self.table, root)
        return self.table.num_rows

    def measure(self, root: str, _root: str) -> tuple[dict, set[str]]:
        return layout(root, [root]), set()


class LanceTables:
    """What the spec's layout costs before lancepart adds anything: one plain Lance table per
    partition, each created by ``lance.write_dataset`` from its rows, on a thread pool."""

    def __init__(self, table: pa.Table, case: str):
        import lance

        from lancepart.util.parallel import map_threads

        self.lance, self.map_threads = lance, map_threads
        if case == "bucket16":
            from lancepart.model import murmur3

            self.key = murmur3.bucket(table.column("user_id"), 16)
        else:
            self.key = table.column("shop_id")
        self.table = table

    def setup(self, root: str):
        os.makedirs(root)
        return root

    def run(self, root: str) -> int:
        key = np.asarray(self.key.combine_chunks() if isinstance(self.key, pa.ChunkedArray) else self.key)
        order = np.argsort(key, kind="stable")
        rows = self.table.take(pa.array(order))
        sorted_key = key[order]
        starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
        bounds = list(zip(starts, [*starts[1:], len(sorted_key)], strict=True))
        self.map_threads(lambda b: self.lance.write_dataset(rows.slice(b[0], b[1] - b[0]),
                                                            os.path.join(root, f"p={sorted_key[b[0]]}")), bounds)
        return self.table.num_rows

    def measure(self, root: str, _root: str) -> tuple[dict, set[str]]:
        dirs = sorted(os.path.join(root, d) for d in os.listdir(root))
        return layout(root, dirs), set()


RUNNERS: dict[str, Callable] = {"lancepart": Lancepart, "delta-rs": Delta, "pyiceberg": Iceberg, "lance": LanceFloor,
                                "lance-tables": LanceTables}
PACKAGES = {"lancepart": [], "delta-rs": ["deltalake"], "pyiceberg": ["pyiceberg", "pyiceberg-core", "sqlalchemy"],
            "lance": ["pylance"], "lance-tables": ["pylance"]}


def versions(systems: list[str]) -> dict[str, str]:
    out = {}
    for pkg in ["pylance", "pyarrow", "numpy"] + [p for s in systems for p in PACKAGES[s]]:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "missing"
    return out


def run_case(case: str, table: pa.Table, systems: list[str], rounds: int, work: str, keep: bool) -> dict:
    runners = {s: RUNNERS[s](table, case) for s in systems}
    times: dict[str, list[float]] = {s: [] for s in systems}
    shapes: dict[str, dict] = {}
    values: dict[str, set[str]] = {}
    # Output is removed after the last round, not after each run: a file system that has just
    # freed many inodes allocates the next ones slowly (ext4 skips recently deleted inodes),
    # which would penalise whichever system runs next, and most the one making most files.
    written: list[str] = []
    for rnd in range(rounds + 1):  # round 0 warms every system up, untimed
        k = rnd % len(systems)
        order = systems[k:] + systems[:k]
        line = []
        for s in order:
            root = os.path.join(work, case, f"{s}-r{rnd}")
            state = runners[s].setup(root)
            gc.collect()
            t0 = time.perf_counter()
            rows = runners[s].run(state)
            dt = time.perf_counter() - t0
            assert rows == table.num_rows, (s, rows)
            shapes[s], values[s] = runners[s].measure(state, root)
            if rnd:
                times[s].append(dt)
            line.append(f"{s} {dt:.2f}s")
            del state
            written.append(root)
        print(f"{case} round {rnd}{' (warm-up)' if rnd == 0 else ''}: {', '.join(line)}", file=sys.stderr, flush=True)
    if not keep:
        for root in written:
            shutil.rmtree(root, ignore_errors=True)
    formats = [s for s in systems if s in TABLE_FORMATS]
    ref = values[formats[0]] if formats else set()
    for s in formats:  # every table format wrote the same partitions
        assert values[s] == ref, f"{case}: {s} wrote partitions {sorted(values[s])[:5]}..., not {sorted(ref)[:5]}..."
    out = {}
    for s in systems:
        med = statistics.median(times[s])
        out[s] = {"median_s": round(med, 3), "min_s": round(min(times[s]), 3), **shapes[s]}
    if "lancepart" in out:
        lp = out["lancepart"]["median_s"]
        for s in systems:
            out[s]["vs_lancepart"] = round(out[s]["median_s"] / lp, 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default="bucket16,identity1k")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="subset of " + ",".join(SYSTEMS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the output directories (printed)")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    cases = [c for c in args.cases.split(",") if c]
    for s in systems:
        if s not in RUNNERS:
            ap.error(f"--systems: unknown system {s!r}; choose from {', '.join(SYSTEMS)}")
    if args.rounds < 1 or args.rows < 1:
        ap.error("--rounds and --rows must be >= 1")
    for c in cases:
        if c not in ("bucket16", "identity1k"):
            ap.error(f"--cases: unknown case {c!r}; choose from bucket16, identity1k")
    vers = versions(systems)
    missing = [p for p, v in vers.items() if v == "missing"]
    if missing:
        print(f"missing packages {missing}: pip install -e '.[bench]', or leave the system out with --systems",
              file=sys.stderr)
        return 2

    table = events(args.rows, args.seed)
    work = tempfile.mkdtemp(prefix="lancepart-peers-")
    info = machine("pyarrow", "lance")
    print(f"machine: cpus={info['cpus']} cpu={info['cpu']!r} python={info['python']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    print(f"rows={table.num_rows:,} rounds={args.rounds} (+1 warm-up), interleaved, rotating order; "
          f"table {table.nbytes / 1e6:.0f} MB in memory")
    print("timed section:")
    for s in systems:
        print(f"  {s:<10} {TIMED[s]}")
    report = {"machine": info, "versions": vers, "rows": table.num_rows, "rounds": args.rounds, "cases": {}}
    for case in cases:
        report["cases"][case] = res = run_case(case, table, systems, args.rounds, work, args.keep)
        print(f"\n{case}")
        print(f"  {'system':<10}{'median s':>10}{'min s':>9}{'vs lp':>8}{'parts':>7}{'files/part':>12}"
              f"{'max':>5}{'KB/part':>10}{'files':>8}{'MB total':>10}")
        for s, r in res.items():
            vs = f"{r['vs_lancepart']:>8.2f}" if "vs_lancepart" in r else f"{'-':>8}"
            print(f"  {s:<10}{r['median_s']:>10.3f}{r['min_s']:>9.3f}{vs}{r['partitions']:>7}"
                  f"{r['files_per_partition']:>12.2f}{r['max_files_per_partition']:>5}"
                  f"{r['bytes_per_partition'] / 1e3:>10.1f}{r['total_files']:>8}{r['total_bytes'] / 1e6:>10.2f}")
        peers = [s for s in res if s in TABLE_FORMATS and s != "lancepart"]
        if "lancepart" in res and peers:
            fastest = min(peers, key=lambda s: res[s]["median_s"])
            ratio = round(res["lancepart"]["median_s"] / res[fastest]["median_s"], 3)
            res["lancepart_vs_fastest_format"] = {"fastest": fastest, "ratio": ratio}
            print(f"  lancepart / fastest table format ({fastest}) = {ratio:.2f}  (goal <= 1.0)")
        if "lancepart" in res and "delta-rs" in res:
            b = round(res["lancepart"]["bytes_per_partition"] / max(1, res["delta-rs"]["bytes_per_partition"]), 3)
            res["lancepart_vs_delta_bytes_per_partition"] = b
            print(f"  lancepart / delta-rs bytes per partition = {b:.2f}  (goal <= 1.2); "
                  f"lancepart files per partition table = {res['lancepart']['files_per_partition']:.2f} (goal <= 3)")
    print(json.dumps(report))
    if args.keep:
        print(f"output kept under {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
