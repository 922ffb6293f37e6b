"""A writer process for tests/test_indexes.py: appends ``--batches`` batches of ``--rows`` rows
(ids from ``--start``, partitions a, b, c and one new partition per batch) to ROOT, one publish
each, and prints the ids it published as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from lancepart import PartitionedNamespace
from tests.test_indexes import rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--rows", type=int, default=400)
    p.add_argument("--batches", type=int, default=8)
    a = p.parse_args()
    ns = PartitionedNamespace.open(a.root)
    print("started", flush=True)
    ids = []
    for i in range(a.batches):
        start = a.start + i * a.rows
        ns.write(rows(a.rows, start=start, parts=("a", "b", "c", f"w{i}")), max_retries=100)
        ids += list(range(start, start + a.rows))
    print(json.dumps(ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
