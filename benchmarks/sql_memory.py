"""Memory of a DataFusion SQL aggregate over the whole namespace: ``ns.sql("SELECT sum(amount),
count(*) FROM t")`` (the kept partition tables streamed into DataFusion, the query's projection
pushed into each Lance scan) against ``ns.to_table()`` (every row in memory) and against the
same query over the rows materialised in DataFusion first (``ctx.from_arrow(ns.to_batches())``,
what ``ns.sql`` did before it streamed).

Peak RSS only grows within a process, so every measurement runs in a fresh child process that
imports lancepart and DataFusion, opens the namespace, and reports its resident set before the
read (``VmRSS``) and its peak after it (``VmHWM``); the growth is the difference. ``baseline``
only opens the namespace. The modes take turns round by round (interleaved, the order
alternating) and the medians are printed with the machine and the versions.

The namespace: the reading benchmarks' events (benchmarks/events_data.py), ``--days`` days x 4
user buckets = partition tables of ``--rows / (4 * days)`` rows each (default 6 000 000 rows in
60 tables of 100 000).

    python benchmarks/sql_memory.py [--rows 6000000] [--days 15] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ["baseline", "sql", "to_table", "materialised"]
QUERY = "SELECT sum(amount) AS s, count(*) AS n FROM t"


def build(dir: str, rows: int, days: int) -> str:
    import numpy as np
    from events_data import SCHEMA, SPEC, events

    from lancepart import PartitionedNamespace

    root = os.path.join(dir, "ns")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    rng = np.random.default_rng(3)
    chunk = 2_000_000
    t0 = time.perf_counter()
    for start in range(0, rows, chunk):
        ns.write(events(rng, start, min(chunk, rows - start), days))
    print(f"wrote {rows:,} rows ({len(ns.refresh().partitions())} partition tables) in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return root


def _status(key: str) -> float:
    """``key`` of /proc/self/status in MiB (VmRSS: now; VmHWM: this process's peak)."""
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith(key + ":")) / 1024


def child(mode: str, root: str) -> None:
    import datafusion
    import pyarrow.compute as pc

    from lancepart import PartitionedNamespace

    ns = PartitionedNamespace.open(root)
    before = _status("VmRSS")
    t0 = time.perf_counter()
    rows, total = 0, 0.0
    if mode == "sql":
        out = ns.sql(QUERY).to_pylist()[0]
        rows, total = out["n"], out["s"]
    elif mode == "to_table":
        t = ns.to_table()
        rows, total = t.num_rows, pc.sum(t.column("amount")).as_py()
    elif mode == "materialised":
        ctx = datafusion.SessionContext()
        ctx.from_arrow(ns.to_batches(), name="t")
        out = ctx.sql(QUERY).to_pylist()[0]
        rows, total = out["n"], out["s"]
    seconds = time.perf_counter() - t0
    peak = _status("VmHWM")
    print(json.dumps({"mode": mode, "rows": rows, "sum": round(total, 2), "before_mib": round(before, 1),
                      "peak_mib": round(peak, 1), "growth_mib": round(peak - before, 1),
                      "seconds": round(seconds, 3)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=6_000_000)
    p.add_argument("--days", type=int, default=15)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--child", nargs=2, metavar=("MODE", "ROOT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child)
        return
    from machine_info import machine

    with tempfile.TemporaryDirectory(prefix="lancepart-sqlmem-") as d:
        root = build(d, args.rows, args.days)
        got: dict[str, list[dict]] = {m: [] for m in MODES}
        for r in range(args.rounds):
            for m in MODES if r % 2 == 0 else MODES[::-1]:  # interleaved, alternating order
                out = subprocess.run([sys.executable, __file__, "--child", m, root], check=True,
                                     capture_output=True, text=True).stdout
                got[m].append(json.loads(out.strip().splitlines()[-1]))
                print(f"round {r + 1}: {got[m][-1]}", file=sys.stderr)
    print(json.dumps({"machine": machine("pyarrow", "lance", "datafusion"), "rows": args.rows,
                      "tables": 4 * args.days, "rounds": args.rounds, "query": QUERY}, default=str))
    print(f"{'mode':<14}{'rows':>12}{'RSS before MiB':>16}{'peak MiB':>10}{'growth MiB':>12}{'seconds':>10}"
          "   (medians)")
    med = {m: {k: statistics.median(x[k] for x in got[m]) for k in ("before_mib", "peak_mib", "growth_mib", "seconds")}
           for m in MODES}
    for m in MODES:
        x = med[m]
        print(f"{m:<14}{got[m][0]['rows']:>12,}{x['before_mib']:>16.0f}{x['peak_mib']:>10.0f}"
              f"{x['growth_mib']:>12.0f}{x['seconds']:>10.2f}")
    sql, table = med["sql"]["growth_mib"], med["to_table"]["growth_mib"]
    print(f"sql growth / to_table growth: {sql / table:.3f}" if table > 0 else "to_table did not grow")


if __name__ == "__main__":
    main()
