"""A compaction process for the compaction tests: compacts ROOT (optionally ``--filter``) and
prints the CommitResult as JSON. Faults come from LANCEPART_FAULT (lancepart.util.faults)."""

from __future__ import annotations

import argparse
import json
import sys

from lancepart import PartitionedNamespace


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--filter")
    p.add_argument("--target-rows", type=int, default=1_048_576)
    a = p.parse_args()
    r = PartitionedNamespace.open(a.root).compact(a.filter, a.target_rows)
    print(json.dumps(r.to_dict(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
