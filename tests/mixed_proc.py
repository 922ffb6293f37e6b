"""One role of a mixed load on one namespace, run as its own process (tests/test_seams.py):
``schema`` (columns added, widened, renamed), ``write`` (appends of fresh ids), ``merge`` (updates
of its own ids and inserts of fresh ones), ``delete`` (deletes of its own ids, few retries) or
``compact``. Prints one JSON line per operation: what it did, and ``ok`` or the error's type.
Every error must be a typed lancepart error; the test rebuilds its oracle from the ``ok`` lines.

    python tests/mixed_proc.py ROOT ROLE SECONDS SEED
"""

from __future__ import annotations

import json
import random
import sys
import time

import pyarrow as pa

from lancepart import PartitionedNamespace
from lancepart.errors import LancepartError
from lancepart.util.sample import demo_events


def main(root: str, role: str, seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        ns = PartitionedNamespace.open(root)
        op: dict = {"role": role, "i": i}
        try:
            if role == "schema":
                name = f"c{seed}_{i}"
                ns.update_schema(add=[pa.field(name, pa.int32())])
                ns.refresh().update_schema(widen={name: pa.int64()})
                ns.refresh().update_schema(rename={name: name + "r"})
                op["columns"] = [name + "r"]
            elif role == "write":
                start = 1_000_000 * seed + 1_000 * i
                ns.write(demo_events(40, seed=seed * 100 + i, start_id=start, days=2))
                op["ids"] = [start, start + 40]
            elif role == "merge":
                # updates of ids [100, 200) (amount = the round), inserts of fresh ids
                upd = demo_events(200, seed=1, start_id=0, days=2).slice(100, 20 + rng.randrange(20))
                upd = upd.set_column(5, "amount", pa.array([float(i)] * upd.num_rows))
                start = 1_000_000 * seed + 1_000 * i
                ins = demo_events(10, seed=seed * 100 + i, start_id=start, days=2)
                r = ns.merge(pa.concat_tables([upd, ins]), on=["id"])
                op.update(updated=upd.column("id").to_pylist(), ids=[start, start + 10],
                          version=r.manifest_version, matched=r.details["rows_updated"])
            elif role == "delete":
                k = 2 * i  # ids [0, 100): this role's own
                if k >= 100:
                    break
                ns.delete(f"id = {k} OR id = {k + 1}", max_retries=1)
                op["deleted"] = [k, k + 1]
            elif role == "compact":
                ns.compact()
            op["ok"] = True
        except LancepartError as e:
            op.update(ok=False, error=type(e).__name__, message=str(e)[:300])
        except Exception as e:
            op.update(ok=False, error=type(e).__name__, raw=True, message=str(e)[:500])
        print(json.dumps(op), flush=True)
        i += 1
        time.sleep(rng.uniform(0, 0.2))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
