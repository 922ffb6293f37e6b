"""Benchmark of lancepart.model.murmur3 (vectorised numpy kernel) against a per-row mmh3 loop.

Usage: python benchmarks/murmur3_bench.py [--rows N] [--loop-rows M] [--rounds R]

Data (seeded): N random int64 values and N random ASCII strings of 5-20 characters.
Vectorised timings are the best of R rounds over all N rows. Two per-row baselines are timed once on
the first M rows (default 1 M) and extrapolated to rows/s:

* "mmh3 loop (bytes ready)": ``mmh3.hash(b, 0, signed=True)`` over a Python list of canonical
  bytes prepared beforehand (preparation not timed; the most favourable case for the baseline);
* "mmh3 loop end-to-end": Arrow -> Python values (``to_pylist``), canonicalise per row
  (``struct.pack('<q', v)`` / ``str.encode()``) and hash, as a straightforward per-row
  implementation would.

Speed-ups are relative to the first (faster) baseline.
The kernel is single-threaded numpy; nothing is pinned to a core.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import mmh3
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without install

from lancepart.model import murmur3 as M


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _best_of(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _short_strings(rng: np.random.Generator, n: int) -> pa.Array:
    """n ASCII strings of 5..20 characters, built straight from buffers (fast for 10 M rows)."""
    lens = rng.integers(5, 21, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows per data set (default 10 M)")
    ap.add_argument("--loop-rows", type=int, default=1_000_000, help="rows timed for the per-row mmh3 loop")
    ap.add_argument("--rounds", type=int, default=3, help="rounds for the vectorised timings (best of)")
    args = ap.parse_args()
    n = args.rows
    n_loop = min(args.loop_rows, n)

    rng = np.random.default_rng(20240601)
    datasets = {
        "int64": pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)),
        "string 5-20": _short_strings(rng, n),
    }

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    machine = {
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "cpu_model": _cpu_model(),
        "platform_processor": platform.processor(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "mmh3": importlib.metadata.version("mmh3"),
        "kernel_threads": 1,
    }
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine.items()))
    print(f"rows={n:,}; vectorised: best of {args.rounds} rounds; per-row mmh3 loop: timed on {n_loop:,} rows,")
    print("extrapolated to rows/s. The numpy kernel is single-threaded (no pinning applied).")
    print()

    results: dict[str, dict[str, float]] = {}
    header = f"{'data':<12} {'operation':<26} {'seconds':>9} {'rows/s':>14} {'speed-up':>9} {'vs e2e':>8}"
    print(header)
    print("-" * len(header))
    for name, arr in datasets.items():
        # Baseline first, then check the vectorised hash agrees with it on the same rows.
        subset = arr.slice(0, n_loop)
        canon = M.canonical_bytes(subset).to_pylist()
        hash_ = mmh3.hash
        t0 = time.perf_counter()
        ref = [hash_(b, 0, signed=True) for b in canon]
        t_loop = time.perf_counter() - t0
        loop_rps = n_loop / t_loop
        pack = struct.Struct("<q").pack
        t0 = time.perf_counter()
        if pa.types.is_integer(subset.type):
            ref_e2e = [hash_(pack(v), 0, signed=True) for v in subset.to_pylist()]
        else:
            ref_e2e = [hash_(v.encode(), 0, signed=True) for v in subset.to_pylist()]
        t_e2e = time.perf_counter() - t0
        e2e_rps = n_loop / t_e2e
        if ref_e2e != ref:
            raise SystemExit(f"MISMATCH between the two per-row baselines on {name}")
        if M.murmur3(subset).to_pylist() != ref:
            raise SystemExit(f"MISMATCH between murmur3 and the mmh3 reference on {name}")

        t_hash = _best_of(lambda a=arr: M.murmur3(a), args.rounds)
        t_bucket = _best_of(lambda a=arr: M.bucket(a, 16), args.rounds)
        rows = [
            ("murmur3 (numpy)", t_hash, n / t_hash),
            ("bucket(.,16) (numpy)", t_bucket, n / t_bucket),
            ("mmh3 loop (bytes ready)*", t_loop * n / n_loop, loop_rps),
            ("mmh3 loop end-to-end*", t_e2e * n / n_loop, e2e_rps),
        ]
        for op, secs, rps in rows:
            print(f"{name:<12} {op:<26} {secs:>9.3f} {rps:>14,.0f} {rps / loop_rps:>8.1f}x {rps / e2e_rps:>7.1f}x")
        results[name] = {
            "murmur3_rows_per_s": round(n / t_hash),
            "bucket16_rows_per_s": round(n / t_bucket),
            "mmh3_loop_rows_per_s": round(loop_rps),
            "mmh3_loop_end_to_end_rows_per_s": round(e2e_rps),
            "speedup_murmur3": round((n / t_hash) / loop_rps, 1),
            "speedup_bucket16": round((n / t_bucket) / loop_rps, 1),
            "speedup_murmur3_vs_end_to_end": round((n / t_hash) / e2e_rps, 1),
        }
    print()
    print(f"* per-row loops timed on {n_loop:,} rows and extrapolated (seconds column = extrapolated to {n:,} rows);")
    print("  speed-up is relative to the 'bytes ready' loop, 'vs e2e' to the end-to-end loop")
    print(json.dumps({"benchmark": "murmur3", "rows": n, "loop_rows": n_loop, "machine": machine, "results": results}))


if __name__ == "__main__":
    main()
