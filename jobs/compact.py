"""spark-submit entry point: compact the partition tables of a namespace.

Usage: ./spark-submit.sh jobs/compact.py --config configs/compact-demo.yaml [spark-submit options]

Plans on the driver at every table's published read_version (tables pinned by read_tag /
read_branch are skipped) before it creates a SparkSession: with nothing to rewrite, Spark never
starts. Otherwise it rewrites each table that has small fragments or many deleted rows in a
Spark task, then commits the tables and publishes them in one __manifest commit, safe
beside live writers. Prints a JSON summary (tables compacted, rows rewritten, fragments and
bytes before/after, manifest version, seconds per phase). Exit codes: 0 compacted or nothing
to do, 3 some tables could not be read and were skipped (named under "failures"; the others
were compacted and published), 2 a lancepart error (nothing published).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from lancepart.config import JobConfig
    from lancepart.job_runner import job_main, run_compact

    parser = argparse.ArgumentParser(prog="jobs/compact.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="job config YAML (see configs/compact-demo.yaml)")
    parser.add_argument("--storage-options-file", metavar="FILE",
                        help="storage options from a JSON or YAML mapping, under the config's namespace.storage "
                             "(keeps secrets off the command line; also: $LANCEPART_STORAGE_OPTIONS, ${VAR})")
    args = parser.parse_args(argv)
    return job_main("compact", lambda: run_compact(JobConfig.load(args.config, args.storage_options_file)))


if __name__ == "__main__":
    sys.exit(main())
