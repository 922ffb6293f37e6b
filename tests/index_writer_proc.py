"""A writer process for tests/test_indexes.py: appends batches of ``--rows`` rows (ids from
``--start``; partitions a, b, c and one new partition per batch) to ROOT, one publish each. It
prints ``started`` after its first publish, keeps writing until the file ``--stop`` exists, then
writes one more batch (so a publish lands after whatever the test did meanwhile) and prints the
ids it published as JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys

from lancepart import PartitionedNamespace
from tests.test_indexes import rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--rows", type=int, default=400)
    p.add_argument("--stop", required=True)
    p.add_argument("--max-batches", type=int, default=200)
    a = p.parse_args()
    ns = PartitionedNamespace.open(a.root)
    ids: list[int] = []
    for i in range(a.max_batches):
        stopping = os.path.exists(a.stop)
        start = a.start + i * a.rows
        ns.write(rows(a.rows, start=start, parts=("a", "b", "c", f"w{i}")), max_retries=100)
        ids += list(range(start, start + a.rows))
        if i == 0:
            print("started", flush=True)
        if stopping:
            break
    print(json.dumps(ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
