"""Row-level delete benchmark: lancepart ``ns.delete`` vs delta-rs ``DeltaTable.delete``.

In ONE process, on the same generated 2 M-row Arrow table as benchmarks/peers.py, partitioned
by ``identity(shop_id)`` (about 1 000 partitions) for both: each round writes a fresh copy of
each table (untimed), then times one delete of about 1 % of the rows, chosen by a column that
is not the partition column (``user_id % 100 = 7``: rows in every partition), and one delete
of 1 % of the partitions by the partition column (``shop_id < 10``: whole partitions).
Systems alternate who goes first; one untimed warm-up round; medians. Each round also checks
that both systems deleted the same number of rows and kept the same rows.

    python benchmarks/delete.py [--rows 2000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow.compute as pc
from machine_info import machine
from peers import delta_setup, events, lancepart_setup, spark_session
from timing import rotated, settle

CASES = {  # name -> (lancepart filter, delta-rs predicate, its pyarrow mask)
    "1% of rows (user_id % 100 = 7)": ("user_id % 100 = 7", "user_id % 100 = 7",
                                        lambda t: pc.equal(pc.remainder(t["user_id"], 100), 7)),
    "1% of partitions (shop_id < 10)": ("shop_id < 10", "shop_id < 10", lambda t: pc.less(t["shop_id"], 10)),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spark", action="store_true", help="also lps.delete on Spark local[*]")
    args = ap.parse_args()
    import deltalake  # noqa: F401  (a missing peer fails before any work)

    systems = ["lancepart", "delta-rs"] + (["lancepart on Spark"] if args.spark else [])
    if args.spark:
        from lancepart import spark as lps

        spark = spark_session("lancepart-bench-delete")

    table = events(args.rows, seed=7)
    info = {"machine": machine("pyarrow", "lance", "deltalake"), "rows": args.rows,
            "partitions": len(pc.unique(table["shop_id"])), "rounds": args.rounds, "cases": {}}
    print(json.dumps(info), flush=True)
    work = tempfile.mkdtemp(prefix="lancepart-bench-delete-")
    try:
        for case, (lp_filter, dl_pred, mask) in CASES.items():
            expected_deleted = pc.sum(mask(table)).as_py()
            expected_left = table.num_rows - expected_deleted
            times: dict[str, list[float]] = {s: [] for s in systems}
            for rnd in range(args.rounds + 1):
                order = rotated(systems, rnd)
                line = []
                for system in order:
                    root = os.path.join(work, f"{system.replace(' ', '-')}-{rnd}")
                    state = (delta_setup if system == "delta-rs" else lancepart_setup)(table, root)
                    settle()  # the copy written back before the clock starts
                    t0 = time.perf_counter()
                    if system == "lancepart on Spark":
                        r = lps.delete(spark, root, lp_filter)
                        dt = time.perf_counter() - t0
                        deleted = r.details["rows_deleted"]
                        left = state.refresh().to_table(columns=["user_id"]).num_rows
                    elif system == "lancepart":
                        r = state.delete(lp_filter)
                        dt = time.perf_counter() - t0
                        deleted, left = r.details["rows_deleted"], state.to_table(columns=["user_id"]).num_rows
                    else:
                        metrics = state.delete(dl_pred)
                        dt = time.perf_counter() - t0
                        deleted, left = int(metrics["num_deleted_rows"]), state.to_pyarrow_table(
                            columns=["user_id"]).num_rows
                    assert (deleted, left) == (expected_deleted, expected_left), (system, deleted, left)
                    if rnd:
                        times[system].append(dt)
                    line.append(f"{system} {dt:.3f}s")
                    shutil.rmtree(root, ignore_errors=True)
                print(f"{case} round {rnd}{' (warm-up)' if rnd == 0 else ''}: {', '.join(line)}", file=sys.stderr,
                      flush=True)
            lp, dl = statistics.median(times["lancepart"]), statistics.median(times["delta-rs"])
            info["cases"][case] = {"rows_deleted": expected_deleted, "lancepart_s": round(lp, 3),
                                   "delta_rs_s": round(dl, 3), "ratio": round(lp / dl, 2)}
            print(f"{case}: {expected_deleted:,} rows deleted; lancepart {lp:.3f} s, delta-rs {dl:.3f} s, "
                  f"lancepart / delta-rs = {lp / dl:.2f}", flush=True)
            if args.spark:
                sp = statistics.median(times["lancepart on Spark"])
                info["cases"][case].update(lancepart_spark_s=round(sp, 3), spark_ratio=round(sp / dl, 2))
                print(f"{case}: lps.delete on Spark local[*] {sp:.3f} s, lps.delete / delta-rs = {sp / dl:.2f}",
                      flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
