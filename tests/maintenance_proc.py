"""One role of the maintenance race (tests/test_maintenance_race.py), as its own process.

``writer``: appends the batches named on the command line, in order, each under its batch id,
and prints one JSON line per published (or skipped) batch, flushed at once, so a process killed
with SIGKILL leaves a journal of what it saw published. ``compactor`` / ``cleaner``: loop until
the stop file exists, compacting / cleaning the namespace, one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("role", choices=["writer", "compactor", "cleaner"])
    p.add_argument("--batches", default="[]", help="JSON list of [batch_id, start_id, rows]")
    p.add_argument("--stop", help="loop roles stop once this file exists")
    p.add_argument("--older-than", type=float, default=10.0, help="cleaner retention, seconds")
    a = p.parse_args()

    from lancepart import PartitionedNamespace
    from lancepart.util.sample import demo_events

    ns = PartitionedNamespace.open(a.root)
    if a.role == "writer":
        for batch_id, start, rows in json.loads(a.batches):
            data = demo_events(rows, seed=start, start_id=start, days=4)
            r = ns.write(data, batch_id=batch_id)
            emit({"batch_id": batch_id, "skipped": r.skipped, "manifest_version": r.manifest_version})
        return 0
    while not os.path.exists(a.stop):
        ns.refresh()
        if a.role == "compactor":
            r = ns.compact(target_rows_per_fragment=10_000)
            emit({"compacted": r.partitions_touched, "failures": r.failures})
        else:
            s = ns.cleanup(timedelta(seconds=a.older_than), allow_short_retention=True)
            emit({"versions_removed": s.versions_removed, "files_removed": s.files_removed, "errors": s.errors})
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
