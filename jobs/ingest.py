"""spark-submit entry point: ingest a source into a partitioned namespace.

Usage: ./spark-submit.sh jobs/ingest.py --config configs/demo.yaml [spark-submit options]
       [--batch-id ID] [--logical-date YYYY-MM-DD] [--default-batch-id ID]

Creates the namespace from the config's schema and spec when it does not exist, reads the
source (Parquet, CSV, JSON or the built-in generator), runs the config's expectations,
writes Lance fragments on the executors and publishes them in one __manifest commit, then
prints a JSON summary (rows, partitions touched/created, manifest version, retries,
seconds).

The batch id, first that applies: ``--batch-id``; the config's ``batch_id``, whose
``{logical_date}`` is replaced by ``--logical-date`` or else by the config's own
``logical_date`` (``demo-{logical_date}`` with ``logical_date: 2025-12-01`` is
``demo-2025-12-01``; an id without a placeholder is used as written); ``--default-batch-id``
(the Airflow DAG passes one for configs without ``batch_id``). A batch id that is already published is found
before the SparkSession is created: the job prints the skipped summary (``"skipped": true``)
without starting Spark. Exit codes: 0 published or skipped (batch id already published), 2 a
lancepart error (nothing published).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys


def main(argv: list[str] | None = None) -> int:
    from lancepart.config import JobConfig
    from lancepart.job_runner import job_main, run_ingest

    parser = argparse.ArgumentParser(prog="jobs/ingest.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="job config YAML (see configs/)")
    parser.add_argument("--batch-id", help="exactly-once id overriding the config's batch_id (empty: the config's)")
    parser.add_argument("--logical-date", metavar="YYYY-MM-DD",
                        help="the date that replaces {logical_date} in the config's batch_id, instead of the "
                             "config's logical_date (the Airflow DAG passes the run's logical date; empty: none)")
    parser.add_argument("--default-batch-id", metavar="ID",
                        help="the batch id when neither --batch-id nor the config gives one (the Airflow DAG "
                             "passes lancepart_ingest:<config>:<logical date>)")
    parser.add_argument("--storage-options-file", metavar="FILE",
                        help="storage options from a JSON or YAML mapping, under the config's namespace.storage "
                             "(keeps secrets off the command line; also: $LANCEPART_STORAGE_OPTIONS, ${VAR})")
    args = parser.parse_args(argv)

    def run() -> dict:
        cfg = JobConfig.load(args.config, args.storage_options_file, logical_date=args.logical_date)
        if args.batch_id:
            cfg = dataclasses.replace(cfg, batch_id=args.batch_id)
        elif cfg.batch_id is None and args.default_batch_id:
            cfg = dataclasses.replace(cfg, batch_id=args.default_batch_id)
        return run_ingest(cfg)

    return job_main("ingest", run)


if __name__ == "__main__":
    sys.exit(main())
