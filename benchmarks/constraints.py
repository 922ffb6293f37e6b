"""CHECK constraint cost on an ingest: ``ns.write`` of 2 M rows into ~30 daily partitions with
no constraint, with two constraints (``amount >= 0``, ``country IS NOT NULL``) checked on the
rows in memory, and with the same two read back and checked at publish (a handle opened before
they were added: what a Spark job, a stale handle or a write that started before
``add_constraint`` pays).

In ONE process, on benchmarks/peers.py's generated table: each round creates a fresh namespace
per variant (untimed, constraints added untimed), then times the write; the variants' order
rotates per round; one untimed warm-up round; medians and each variant's ratio to the plain
write, and the check's own seconds (the write's ``constraints_s`` phase, or the publish's
read-back) as a share of the plain write: on a busy machine the write's own noise is larger
than the check. docs/benchmarks.md "CHECK constraints".

    python benchmarks/constraints.py [--rows 2000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time

from machine_info import machine
from peers import events

CONSTRAINTS = {"amount_nonneg": "amount >= 0", "country_set": "country IS NOT NULL"}
VARIANTS = ("no constraint", "2 constraints, checked in memory", "2 constraints, read back at publish")


def setup(variant: str, table, root: str):
    from lancepart import PartitionedNamespace

    spec = {"id": 1, "fields": [{"field_id": "day", "source_ids": [table.schema.get_field_index("event_date")],
                                 "transform": {"type": "identity"}, "result_type": {"type": "date32"}}]}
    ns = PartitionedNamespace.create(root, table.schema, spec)
    if variant == VARIANTS[0]:
        return ns
    adder = ns if variant == VARIANTS[1] else PartitionedNamespace.open(root)  # ns keeps its older snapshot
    for name, expr in CONSTRAINTS.items():
        adder.add_constraint(name, expr)
    return ns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    table = events(args.rows, seed=11)
    print(json.dumps({"machine": machine("pyarrow", "lance", "datafusion"), "rows": args.rows,
                      "partitions": len(table["event_date"].unique()), "rounds": args.rounds,
                      "constraints": CONSTRAINTS}), flush=True)
    work = tempfile.mkdtemp(prefix="lancepart-bench-constraints-")
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    phases: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for rnd in range(args.rounds + 1):
            order = VARIANTS[rnd % 3:] + VARIANTS[:rnd % 3]
            for variant in order:
                root = f"{work}/r{rnd}-{VARIANTS.index(variant)}"
                ns = setup(variant, table, root)
                t = time.perf_counter()
                result = ns.write(table)
                took = time.perf_counter() - t
                assert result.rows_written == table.num_rows
                if rnd:
                    times[variant].append(took)
                    # the check's own seconds: in memory (constraints_s), or the publish reading back
                    # (inside commit_tables_s, which is ~0 without it: every table here is new)
                    phases[variant].append(result.details.get("constraints_s", 0.0)
                                           + result.details.get("commit_tables_s", 0.0))
                shutil.rmtree(root)
        base = statistics.median(times[VARIANTS[0]])
        for v in VARIANTS:
            med = statistics.median(times[v])
            check = statistics.median(phases[v])
            print(json.dumps({"variant": v, "median_s": round(med, 3), "vs_plain": round(med / base, 3),
                              "check_s": round(check, 3), "check_share_of_plain": round(check / base, 3),
                              "rounds_s": [round(x, 3) for x in times[v]]}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
