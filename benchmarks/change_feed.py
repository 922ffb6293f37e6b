"""Cost of the change feed per commit: ``ns.changes(v - 1, v)`` for an append, a delete and a merge,
with delta-rs beside it reading its change data feed (``DeltaTable.load_cdf``) of the same commit
on the same rows (a Delta table partitioned by ``event_date``, ``delta.enableChangeDataFeed``).

Each round makes one commit of each kind on both tables, then times reading that commit's feed
on both (interleaved, alternating order). Medians per kind, the machine and the versions printed.

    python benchmarks/change_feed.py [--rows 1000000] [--days 30] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()

    from deltalake import DeltaTable, write_deltalake
    from events_data import SCHEMA, SPEC, events
    from machine_info import machine

    from lancepart import PartitionedNamespace

    rng = np.random.default_rng(5)
    times: dict[str, list[float]] = {}
    rows: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="lancepart-cdf-") as d:
        ns = PartitionedNamespace.create(f"{d}/ns", SCHEMA, SPEC)
        base = events(rng, 0, args.rows, args.days)
        ns.write(base)
        write_deltalake(f"{d}/delta", base, partition_by=["event_date"],
                        configuration={"delta.enableChangeDataFeed": "true"})
        dt = DeltaTable(f"{d}/delta")
        next_id = args.rows
        print(f"{args.rows:,} rows, {len(ns.partitions())} partition tables, {args.days} Delta partitions",
              file=sys.stderr)
        for r in range(args.rounds):
            n = args.rows // 100
            for kind in ("append 1%", "delete ~0.5%", "merge 1% of keys"):
                t = None
                if kind.startswith("append"):
                    t = events(rng, next_id, n, args.days)
                    next_id += n
                    ns.write(t)
                    write_deltalake(dt, t, mode="append")
                elif kind.startswith("delete"):
                    ns.delete(f"id % 200 = {r}")
                    dt.delete(f"id % 200 = {r}")
                else:
                    ids = rng.choice(next_id, n, replace=False)
                    t = ns.to_table(f"id IN ({', '.join(map(str, ids[:2000]))})")
                    t = t.set_column(4, "amount", pa.array(np.full(t.num_rows, 1.0)))
                    ns.merge(t, on=["id"])
                    (dt.merge(t, "s.id = t.id", source_alias="s", target_alias="t")
                     .when_matched_update_all().when_not_matched_insert_all().execute())
                ns = ns.refresh()
                dt = DeltaTable(f"{d}/delta")
                for name in ("lancepart", "delta-rs") if r % 2 == 0 else ("delta-rs", "lancepart"):
                    t0 = time.perf_counter()
                    if name == "lancepart":
                        got = ns.changes(ns.manifest_version - 1, ns.manifest_version).read_all()
                    else:
                        got = dt.load_cdf(starting_version=dt.version(), ending_version=dt.version()).read_all()
                    times.setdefault(f"{kind} | {name}", []).append(time.perf_counter() - t0)
                    rows[f"{kind} | {name}"] = got.num_rows
    print(json.dumps({"machine": machine("pyarrow", "lance", "deltalake", "lancepart"), "rows": args.rows,
                      "rounds": args.rounds}))
    print(f"{'commit | reader':<36}{'change rows':>12}{'median ms':>11}{'ratio':>8}")
    for key in times:
        kind, name = key.split(" | ")
        med = statistics.median(times[key]) * 1000
        peer = statistics.median(times[f"{kind} | delta-rs"]) * 1000
        ratio = f"{med / peer:.2f}" if name == "lancepart" else ""
        print(f"{key:<36}{rows[key]:>12,}{med:>11.1f}{ratio:>8}")


if __name__ == "__main__":
    main()
