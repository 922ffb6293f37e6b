"""One worker of tests/test_model.py::test_model_concurrent: random operations (append with unique
ids, merge, delete, update_schema add, compact) on one namespace for a bounded time, each written as
one JSON line with its outcome: what it did, and the ``manifest_version`` it reported, or the error.

    python tests/model_proc.py ROOT WORKER SECONDS SEED OUT [--no-merge-after-change] [--no-add-column]
                               [--no-compact]

The flags keep away from defects being fixed on main (tests/test_model.py KNOWN_DEFECTS): no merge
once the namespace schema changed, no schema change at all, no compaction in this worker.
"""

from __future__ import annotations

import json
import random
import sys
import time

import pyarrow as pa

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("country", pa.utf8()), ("f", pa.float64()),
                    ("v", pa.int64())])
COUNTRIES = ["US", "FR", "DE", None]
FLOATS = [0.0, 1.5, -2.5, 3.25, None]
OPS = ["append", "merge", "delete", "add_column", "compact"]
WEIGHTS = [35, 25, 15, 10, 15]


def rows(rng: random.Random, ids: list[int]) -> list[dict]:
    return [{"id": i, "country": rng.choice(COUNTRIES), "f": rng.choice(FLOATS), "v": rng.choice([None, 0, 1, 5, 9])}
            for i in ids]


def main(argv: list[str]) -> int:
    from lancepart import PartitionedNamespace
    from lancepart.errors import LancepartError

    root, worker, seconds, seed, out = argv[0], int(argv[1]), float(argv[2]), int(argv[3]), argv[4]
    ops = [op for op in OPS if not ((op == "add_column" and "--no-add-column" in argv)
                                    or (op == "compact" and "--no-compact" in argv))]
    weights = [w for op, w in zip(OPS, WEIGHTS, strict=True) if op in ops]
    rng = random.Random(seed)
    ns = PartitionedNamespace.open(root)
    next_id = worker * 1_000_000
    deadline = time.monotonic() + seconds
    seq = 0
    with open(out, "w") as log:
        while time.monotonic() < deadline:
            seq += 1
            op = rng.choices(ops, weights)[0]
            rec: dict = {"worker": worker, "seq": seq, "op": op}
            try:
                ns.refresh()
                if op == "append":
                    ids = list(range(next_id, next_id + rng.randint(1, 6)))
                    next_id += len(ids)
                    rec.update(batch_id=f"w{worker}-{seq}", rows=rows(rng, ids))
                    r = ns.write(pa.Table.from_pylist(rec["rows"], schema=SCHEMA), batch_id=rec["batch_id"])
                elif op == "merge":
                    if "--no-merge-after-change" in argv and len(ns.schema) != len(SCHEMA):
                        continue
                    published = ns.to_table(columns=["id"]).column("id").to_pylist()
                    old = rng.sample(published, min(len(published), rng.randint(0, 3)))
                    new = list(range(next_id, next_id + rng.randint(1, 2)))
                    next_id += len(new)
                    rec.update(batch_id=f"w{worker}-{seq}", rows=rows(rng, old + new))
                    r = ns.merge(pa.Table.from_pylist(rec["rows"], schema=SCHEMA), on=["id"],
                                 batch_id=rec["batch_id"])
                elif op == "delete":
                    rec["filter"] = rng.choice([f"id % 7 = {rng.randrange(7)}", "country = 'FR'",
                                                f"v > {rng.randrange(9)}", "f < 0.0", "country IS NULL AND v = 1"])
                    r = ns.delete(rec["filter"])
                    rec["rows_deleted"] = r.details.get("rows_deleted")
                elif op == "add_column":
                    rec["column"] = f"c{worker}_{seq}"
                    r = ns.update_schema(add=[pa.field(rec["column"], pa.int32())])
                else:
                    r = ns.compact()
                rec.update(ok=True, version=r.manifest_version, touched=r.partitions_touched, skipped=r.skipped,
                           rows_written=r.rows_written, retries=r.retries)
            except Exception as e:  # recorded; the test decides
                rec.update(ok=False, error=type(e).__name__, typed=isinstance(e, LancepartError), message=str(e)[:800])
            log.write(json.dumps(rec, default=str) + "\n")
            log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
