"""Merge (upsert) benchmark: lancepart ``ns.merge`` vs delta-rs ``DeltaTable.merge``.

In ONE process, on the generated Arrow table of benchmarks/peers.py with a unique ``id`` key
column added, partitioned by ``identity(shop_id)`` (about 1 000 partitions) for both: each round
writes a fresh copy of each table (untimed), then times one merge of a CDC batch with 1 % of the
rows updated (a new ``amount``; one in ten also moves to another ``shop_id``, i.e. another
partition) and 1 % new keys inserted: lancepart ``ns.merge(batch, on=["id"])`` against
delta-rs ``merge(predicate="t.id = s.id").when_matched_update_all().when_not_matched_insert_all()``.
Systems alternate who goes first; one untimed warm-up round; medians. Each round checks that
both updated and inserted the expected numbers of rows and hold the same row count after.

    python benchmarks/merge.py [--rows 2000000] [--rounds 3]
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

import numpy as np
import pyarrow as pa
from machine_info import machine
from peers import delta_setup, events, lancepart_setup, spark_session
from timing import rotated, settle


def data(rows: int) -> tuple[pa.Table, pa.Table, int, int]:
    """(table, CDC batch, rows updated, rows inserted)."""
    table = events(rows, seed=7)
    table = table.add_column(0, "id", pa.array(np.arange(rows, dtype=np.int64)))
    rng = np.random.default_rng(11)
    n = max(1, rows // 100)
    upd = table.take(pa.array(np.sort(rng.choice(rows, n, replace=False))))
    amount = np.round(rng.random(n) * 500, 2)
    shop = upd.column("shop_id").to_numpy().copy()
    moved = rng.random(n) < 0.1
    shop[moved] = (shop[moved] + 1) % 1000
    upd = upd.set_column(upd.schema.get_field_index("amount"), "amount", pa.array(amount))
    upd = upd.set_column(upd.schema.get_field_index("shop_id"), "shop_id", pa.array(shop))
    ins = events(n, seed=13).add_column(0, "id", pa.array(np.arange(rows, rows + n, dtype=np.int64)))
    return table, pa.concat_tables([upd, ins]), n, n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spark", action="store_true", help="also lps.merge on Spark local[*] (the CDC batch as a "
                                                         "cached DataFrame)")
    args = ap.parse_args()
    import deltalake  # noqa: F401  (a missing peer fails before any work)

    table, batch, n_upd, n_ins = data(args.rows)
    systems = ["lancepart", "delta-rs"] + (["lancepart on Spark"] if args.spark else [])
    df = None
    if args.spark:
        from lancepart import spark as lps

        spark = spark_session("lancepart-bench-merge")
        df = spark.createDataFrame(batch.to_pandas()).cache()
        df.count()
    info = {"machine": machine("pyarrow", "lance", "deltalake"), "rows": args.rows,
            "partitions": len(set(table.column("shop_id").to_pylist())), "rounds": args.rounds,
            "rows_updated": n_upd, "rows_inserted": n_ins}
    print(json.dumps(info), flush=True)
    work = tempfile.mkdtemp(prefix="lancepart-bench-merge-")
    times: dict[str, list[float]] = {s: [] for s in systems}
    try:
        for rnd in range(args.rounds + 1):
            order = rotated(systems, rnd)
            line = []
            for system in order:
                root = os.path.join(work, f"{system.replace(' ', '-')}-{rnd}")
                state = (delta_setup if system == "delta-rs" else lancepart_setup)(table, root)
                settle()  # the copy written back before the clock starts
                t0 = time.perf_counter()
                if system == "lancepart on Spark":
                    r = lps.merge(df, root, on=["id"])
                    dt = time.perf_counter() - t0
                    done = (r.details["rows_updated"], r.details["rows_inserted"])
                    total = state.refresh().to_table(columns=["id"]).num_rows
                elif system == "lancepart":
                    r = state.merge(batch.cast(state.schema), on=["id"])
                    dt = time.perf_counter() - t0
                    done = (r.details["rows_updated"], r.details["rows_inserted"])
                    total = state.to_table(columns=["id"]).num_rows
                else:
                    m = (state.merge(batch, predicate="t.id = s.id", source_alias="s", target_alias="t")
                         .when_matched_update_all().when_not_matched_insert_all().execute())
                    dt = time.perf_counter() - t0
                    done = (int(m["num_target_rows_updated"]), int(m["num_target_rows_inserted"]))
                    total = state.to_pyarrow_table(columns=["id"]).num_rows
                assert done == (n_upd, n_ins) and total == args.rows + n_ins, (system, done, total)
                if rnd:
                    times[system].append(dt)
                line.append(f"{system} {dt:.3f}s")
                shutil.rmtree(root, ignore_errors=True)
            print(f"round {rnd}{' (warm-up)' if rnd == 0 else ''}: {', '.join(line)}", file=sys.stderr, flush=True)
        lp, dl = statistics.median(times["lancepart"]), statistics.median(times["delta-rs"])
        info.update(lancepart_s=round(lp, 3), delta_rs_s=round(dl, 3), ratio=round(lp / dl, 2))
        print(f"merge of {n_upd:,} updates + {n_ins:,} inserts into {args.rows:,} rows: lancepart {lp:.3f} s, "
              f"delta-rs {dl:.3f} s, lancepart / delta-rs = {lp / dl:.2f}", flush=True)
        if args.spark:
            sp = statistics.median(times["lancepart on Spark"])
            info.update(lancepart_spark_s=round(sp, 3), spark_ratio=round(sp / dl, 2))
            print(f"lps.merge on Spark local[*] {sp:.3f} s, lps.merge / delta-rs = {sp / dl:.2f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
