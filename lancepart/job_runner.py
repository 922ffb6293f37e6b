"""Job bodies behind ``jobs/*.py`` and the CLI, so both stay thin shells."""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from lancepart.config import JobConfig
from lancepart.errors import ConfigError, LancepartError, NamespaceNotFoundError
from lancepart.namespace import PartitionedNamespace
from lancepart.redact import redacting_output

log = logging.getLogger("lancepart.jobs")


@redacting_output  # nothing the job prints shows URL userinfo or a secret storage option value
def job_main(name: str, run: Callable[[], dict[str, Any]]) -> int:
    """The body of a ``jobs/*.py`` entry point: run the job and print its JSON summary with
    ``job_seconds`` (exit code 0; 3 when the summary lists ``failures``, tables a maintenance run
    had to skip), or print the typed error on stderr (exit code 2; the job published nothing).

    ``jobs/compact.py`` is ``sys.exit(job_main("compact", lambda: run_compact(JobConfig.load(path))))``.

    >>> job_main("count", lambda: {"rows": ns.to_table().num_rows})  # doctest: +ELLIPSIS
    {
      "rows": 6,
      "job_seconds": ...
    }
    0
    >>> job_main("count", lambda: PartitionedNamespace.open(f"{tmp}/nowhere").to_table())  # message on stderr
    2
    """
    started = time.monotonic()
    try:
        summary = run()
    except LancepartError as e:
        print(f"{name} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except Exception:  # printed here, redacted, rather than by the interpreter after the streams are restored
        traceback.print_exc()
        return 1
    summary["job_seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(summary, indent=2, default=str))
    if summary.get("failures"):  # a maintenance run had to skip tables: done for the rest, not for those
        print(f"{name}: skipped {len(summary['failures'])} table(s): {sorted(summary['failures'])}", file=sys.stderr)
        return 3
    return 0


def open_or_create(cfg: JobConfig) -> tuple[PartitionedNamespace, bool]:
    """Open the configured namespace, creating it from ``schema`` + ``spec`` when missing."""
    nc = cfg.namespace
    try:
        return PartitionedNamespace.open(nc.root, storage_options=nc.storage_options or None), False
    except NamespaceNotFoundError:
        if nc.schema is None or nc.spec is None:
            raise ConfigError(
                f"namespace {nc.root} does not exist and the config has no namespace.schema/namespace.spec "
                f"to create it from"
            ) from None
    return PartitionedNamespace.create(nc.root, nc.schema, nc.spec, storage_options=nc.storage_options or None), True


def source_dataframe(spark, cfg: JobConfig):
    """The job's input as a Spark DataFrame."""
    src = cfg.source
    if src.kind == "generate":
        from lancepart.spark.sample import generated_events

        return generated_events(spark, src.rows, seed=src.seed)
    reader = spark.read.options(**{k: str(v) for k, v in src.options.items()})
    return getattr(reader, src.kind)(src.path)


def published_batch(cfg: JobConfig) -> dict[str, Any] | None:
    """The summary of the ingest ``cfg`` describes when its ``batch_id`` is published already
    (``skipped: true``, as the Spark write reports it), found without Spark; None when the
    batch has to be written (no batch id, no namespace yet, or the id is not published). The
    publish checks again, atomically: this only spares a rerun the Spark start."""
    from lancepart.write.batches import check_batch_id
    from lancepart.write.publish import already_published

    if cfg.batch_id is None:
        return None
    started = time.monotonic()
    check_batch_id(cfg.batch_id)
    nc = cfg.namespace
    try:
        ns = PartitionedNamespace.open(nc.root, storage_options=nc.storage_options or None)
    except NamespaceNotFoundError:
        return None
    done = already_published(ns.manifest, ns.snapshot(), cfg.batch_id, started)
    if done is None:
        return None
    log.info("batch %r is already published in %s: nothing to write, Spark not started", cfg.batch_id, ns.root)
    return {"root": ns.root, "namespace_created": False, "spec_id": ns.current_spec.id, "mode": cfg.mode,
            **done.to_dict()}


def run_ingest(cfg: JobConfig) -> dict[str, Any]:
    """Open (or create) the namespace, read the source, gate it, write it and publish it once.
    A batch id that is published already returns the skipped summary before Spark starts
    (:func:`published_batch`)."""
    if (skipped := published_batch(cfg)) is not None:
        return skipped
    from pyspark.sql import SparkSession  # noqa: F401 - imported here, before great_expectations starts importing

    from lancepart.spark import write
    from lancepart.spark.session import get_session

    if cfg.expectations:  # the import of great_expectations overlaps the start of the Spark session
        from lancepart.ops.quality import preload

        preload()
    spark = get_session(cfg.spark.get("app_name", "lancepart-ingest"), cfg.spark.get("conf"))
    ns, created_ns = open_or_create(cfg)
    df = source_dataframe(spark, cfg)
    log.info("ingest into %s (mode=%s, batch_id=%s)", ns.root, cfg.mode, cfg.batch_id)
    result = write(df, ns.root, mode=cfg.mode, batch_id=cfg.batch_id,
                   storage_options=cfg.namespace.storage_options or None, expectations=cfg.expectations or None,
                   index_on_write=cfg.index_on_write)
    return {
        "root": ns.root,
        "namespace_created": created_ns,
        "spec_id": ns.current_spec.id,
        "mode": cfg.mode,
        **result.to_dict(),
    }


def run_compact(cfg: JobConfig) -> dict[str, Any]:
    """Compact the configured namespace's partition tables on Spark executors and publish them
    once. The plan is made first, on the driver: with nothing to rewrite, Spark never starts."""
    from lancepart.spark.compact import compact_on_demand
    from lancepart.spark.session import get_session

    nc, cc = cfg.namespace, cfg.compact
    ns = PartitionedNamespace.open(nc.root, storage_options=nc.storage_options or None)  # never created here
    log.info("compact %s (filter=%s, target_rows_per_fragment=%d)", ns.root, cc.filter, cc.target_rows_per_fragment)
    result = compact_on_demand(lambda: get_session(cfg.spark.get("app_name", "lancepart-compact"),
                                                   cfg.spark.get("conf")),
                               ns.root, cc.filter, cc.target_rows_per_fragment,
                               storage_options=nc.storage_options or None, min_small_fragments=cc.min_small_fragments,
                               materialize_deletions_threshold=cc.materialize_deletions_threshold,
                               tables_per_task=cc.tables_per_task)
    return {"root": ns.root, "filter": cc.filter, **result.to_dict()}
