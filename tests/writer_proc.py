"""A writer process for the concurrency and crash tests: writes demo rows with ids
[start, start+rows) into ROOT and prints the CommitResult as JSON. Faults come from
LANCEPART_FAULT (lancepart.util.faults)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from lancepart import PartitionedNamespace
from lancepart.errors import CommitConflictError
from lancepart.util.sample import demo_events


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--mode", default="append")
    p.add_argument("--batch-id")
    p.add_argument("--max-retries", type=int, default=20)
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to begin (lines writers up)")
    a = p.parse_args()
    data = demo_events(a.rows, seed=a.start, start_id=a.start, days=a.days)
    ns = PartitionedNamespace.open(a.root)
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    try:
        r = ns.write(data, mode=a.mode, batch_id=a.batch_id, max_retries=a.max_retries)
    except CommitConflictError as e:
        print(json.dumps({"error": "CommitConflictError", "message": str(e)}))
        return 3
    print(json.dumps(r.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
