"""A writer that never stops, for tests/test_liveness.py: appends batches of ``--rows`` rows (ids
from ``--start``, spread over ``--parts``) to ROOT as fast as it can, one publish each, until the
file ``--stop`` exists (then one more batch, so a publish lands after whatever the test did).

One JSON line per batch, flushed at once: ``{"start", "rows", "version", "retries", "seconds"}``
when it published, ``{"start", "rows", "refused", "message"}`` when the write raised a typed
error (the test decides which refusals the operation beside it may cause). ``started`` is
printed after the first publish."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--start", type=int, default=1_000_000)
    p.add_argument("--rows", type=int, default=300)
    p.add_argument("--parts", default="a,b,c")
    p.add_argument("--stop", required=True)
    p.add_argument("--max-batches", type=int, default=2000)
    a = p.parse_args()

    from lancepart import PartitionedNamespace
    from lancepart.errors import LancepartError
    from tests.test_indexes import rows

    ns = PartitionedNamespace.open(a.root)
    parts = tuple(a.parts.split(","))
    published = 0
    for i in range(a.max_batches):
        stopping = os.path.exists(a.stop)
        start = a.start + i * a.rows
        t = time.monotonic()
        try:
            r = ns.write(rows(a.rows, start=start, parts=parts))
            line = {"start": start, "rows": a.rows, "version": r.manifest_version, "retries": r.retries,
                    "seconds": round(time.monotonic() - t, 3)}
            published += 1
        except LancepartError as e:
            line = {"start": start, "rows": a.rows, "refused": type(e).__name__, "message": str(e)[:500]}
            ns.refresh()
        print(json.dumps(line), flush=True)
        if published == 1 and "version" in line:
            print("started", flush=True)
        if stopping:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
