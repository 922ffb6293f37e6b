"""spark-submit entry point: ingest a source into a partitioned namespace.

Usage: ./spark-submit.sh jobs/ingest.py --config configs/demo.yaml [spark-submit options]

Until the write engine lands this job plans and reserves: it creates the namespace if
missing, computes the partition tuples of the source on the executors and reserves them
in __manifest (namespace rows, table rows, empty tables), then prints a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from lancepart.config import JobConfig
    from lancepart.errors import LancepartError
    from lancepart.jobs import run_ingest

    parser = argparse.ArgumentParser(prog="jobs/ingest.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="job config YAML (see configs/)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        summary = run_ingest(JobConfig.load(args.config))
    except LancepartError as e:
        print(f"ingest failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    summary["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
