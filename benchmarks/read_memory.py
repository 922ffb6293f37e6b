"""Memory of a full read: ``ns.to_batches`` (a stream) against ``ns.to_table`` (everything in
memory), with delta-rs beside them reading the same rows the same two ways
(``DeltaTable.to_pyarrow_dataset().to_batches()`` and ``.to_pyarrow_table()``).

Peak RSS only grows within a process, so every measurement runs in a fresh child process that
imports the reader, reads every row (summing one column, so nothing is skipped) and reports its
peak RSS (``VmHWM``) and wall time; ``baseline`` only imports. The modes take turns round by
round (interleaved) and the medians are printed with the machine and the versions.

    python benchmarks/read_memory.py [--rows 10000000] [--days 30] [--rounds 3] [--no-delta]
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

MODES = ["baseline", "lancepart.to_batches", "lancepart.to_table", "delta.to_batches", "delta.to_table"]


def build(dir: str, rows: int, days: int, delta: bool) -> tuple[str, str]:
    import numpy as np
    from events_data import SCHEMA, SPEC, events

    from lancepart import PartitionedNamespace

    root, droot = os.path.join(dir, "ns"), os.path.join(dir, "delta")
    ns = PartitionedNamespace.create(root, SCHEMA, SPEC)
    rng = np.random.default_rng(3)
    chunk = 2_000_000
    t0 = time.perf_counter()
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        t = events(rng, start, n, days)
        ns.write(t)
        if delta:
            from deltalake import write_deltalake

            write_deltalake(droot, t, partition_by=["event_date"], mode="append")
    print(f"wrote {rows:,} rows ({len(ns.refresh().partitions())} partition tables) in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return root, droot


def child(mode: str, root: str, droot: str) -> None:
    import pyarrow.compute as pc

    t0 = time.perf_counter()
    rows, total = 0, 0.0
    if mode.startswith("lancepart"):
        from lancepart import PartitionedNamespace

        ns = PartitionedNamespace.open(root)
        if mode.endswith("to_batches"):
            for b in ns.to_batches():
                rows += b.num_rows
                total += pc.sum(b.column("amount")).as_py() or 0.0
        else:
            t = ns.to_table()
            rows, total = t.num_rows, pc.sum(t.column("amount")).as_py()
    elif mode.startswith("delta"):
        from deltalake import DeltaTable

        dt = DeltaTable(droot)
        if mode.endswith("to_batches"):
            for b in dt.to_pyarrow_dataset().to_batches():
                rows += b.num_rows
                total += pc.sum(b.column("amount")).as_py() or 0.0
        else:
            t = dt.to_pyarrow_table()
            rows, total = t.num_rows, pc.sum(t.column("amount")).as_py()
    else:
        import lance  # noqa: F401

        import lancepart  # noqa: F401
    # VmHWM: this process's peak resident set (ru_maxrss would carry the parent's over fork + exec)
    with open("/proc/self/status") as f:
        peak = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")) / 1024
    print(json.dumps({"mode": mode, "rows": rows, "sum": round(total, 2), "peak_mib": round(peak, 1),
                      "seconds": round(time.perf_counter() - t0, 3)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-delta", action="store_true")
    p.add_argument("--child", nargs=3, metavar=("MODE", "ROOT", "DELTA"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child)
        return
    from machine_info import machine

    modes = [m for m in MODES if not (args.no_delta and m.startswith("delta"))]
    with tempfile.TemporaryDirectory(prefix="lancepart-mem-") as d:
        root, droot = build(d, args.rows, args.days, not args.no_delta)
        got: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for m in modes if r % 2 == 0 else modes[::-1]:  # interleaved, alternating order
                out = subprocess.run([sys.executable, __file__, "--child", m, root, droot], check=True,
                                     capture_output=True, text=True).stdout
                got[m].append(json.loads(out.strip().splitlines()[-1]))
                print(f"round {r + 1}: {got[m][-1]}", file=sys.stderr)
    versions = ("pyarrow", "lance") + (() if args.no_delta else ("deltalake",))
    print(json.dumps({"machine": machine(*versions), "rows": args.rows, "rounds": args.rounds}, default=str))
    print(f"{'mode':<24}{'rows':>12}{'peak RSS MiB':>14}{'seconds':>10}   (medians)")
    for m in modes:
        peak = statistics.median(x["peak_mib"] for x in got[m])
        secs = statistics.median(x["seconds"] for x in got[m])
        print(f"{m:<24}{got[m][0]['rows']:>12,}{peak:>14.0f}{secs:>10.2f}")


if __name__ == "__main__":
    main()
