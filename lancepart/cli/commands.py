"""The ``lancepart`` command: create, inspect, write and maintain partitioned namespaces.

    lancepart create ROOT --schema FILE|JSON --spec FILE|JSON    (or: create --config FILE [ROOT])
    lancepart describe ROOT [--tables] [--no-sizes]
    lancepart partitions ROOT [--filter SQL]
    lancepart explain ROOT [FILTER | --filter SQL]
    lancepart ingest ROOT FILE... [--format F] [--mode append|overwrite] [--batch-id ID] [--chunk-rows N]
    lancepart overwrite ROOT FILE... [--where SQL] [--format F] [--batch-id ID]
    lancepart compact ROOT [--filter SQL] [--target-rows-per-fragment N]
    lancepart cleanup ROOT [--older-than 7d] [--dry-run] [--allow-short-retention]
    lancepart evolve ROOT --spec FILE|JSON
    lancepart migrate ROOT [--dry-run]
    lancepart repair ROOT [--dry-run]
    lancepart verify ROOT [--deep]
    lancepart drop-partitions ROOT --filter SQL [--dry-run]
    lancepart delete ROOT --filter SQL [--max-retries N]
    lancepart update ROOT --set COL=EXPR [--set COL=EXPR ...] [--filter SQL] [--batch-id ID]
    lancepart history ROOT [--limit N]
    lancepart changes ROOT --from N [--to M] [--filter SQL] [--columns C,C...]
    lancepart rollback ROOT --version N [--max-retries N]
    lancepart merge ROOT FILE... --on COL[,COL...] [--when-matched update|ignore] [--batch-id ID]
    lancepart alter ROOT [--add NAME:TYPE] [--rename OLD=NEW] [--drop NAME] [--widen NAME:TYPE]
    lancepart search ROOT --column C --query Q [--k 10] [--filter SQL] [--text] [--columns A,B] [--metric M]
    lancepart index ROOT create COLUMN INDEX_TYPE [--name N] [--min-rows N] [--param K=V] | drop NAME | list
                                                         (or: index create|drop|list ROOT ...)
    lancepart constraint ROOT add NAME SQL_EXPR | drop NAME | list

Every command takes ``--json`` (one JSON document on stdout, errors included),
``--storage-option KEY=VALUE`` (repeatable; merged over the JSON object in
``$LANCEPART_STORAGE_OPTIONS``; values are never printed), ``--config FILE`` in place of
ROOT (a job config's ``namespace.root`` and ``namespace.storage``) and ``-q`` (no progress
on stderr). A summary goes to stdout, progress and errors to stderr. A command that publishes
also takes ``--max-retries N`` and ``--commit-metadata KEY=VALUE`` (``CommitOptions``).

Exit codes, stable for scripts: 0 success (also a skipped, already published batch id);
1 unexpected error; 2 a lancepart error (bad spec, schema or filter, missing namespace, ...;
the message names what is wrong); 64 bad usage; 75 a commit kept conflicting with
concurrent writers (CommitConflictError, a RetryableError): nothing was published, run it again;
3 the command ran but found problems or had to leave something out (``verify``: problems found;
``cleanup``/``compact``: a version, table, file or directory it could not examine or remove, each
named; the rest was done); 130 interrupted.

>>> import contextlib, io, json
>>> out = io.StringIO()
>>> with contextlib.redirect_stdout(out):
...     code = main(["-q", "--json", "describe", ns.root])
>>> code, json.loads(out.getvalue())["rows"]
(0, 6)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lancepart.arguments import CommitOptions
from lancepart.cli.args import (  # re-exported: callers and tests import them from here
    STORAGE_OPTIONS_ENV,
    UsageError,
    _non_negative_int,
    _open,
    _positive_int,
    _Progress,
    _target,
    parse_duration,
    storage_options,
)
from lancepart.cli.read import (
    _cmd_changes,
    _cmd_describe,
    _cmd_explain,
    _cmd_history,
    _cmd_partitions,
    _cmd_search,
)
from lancepart.errors import InvalidArgumentError, LancepartError, RetryableError, without_source_locations
from lancepart.inputs import FORMATS, input_reader
from lancepart.redact import redacting_output
from lancepart.stats import human_bytes
from lancepart.util.durations import format_duration

if TYPE_CHECKING:

    pass

EXIT_OK, EXIT_FAILED, EXIT_LANCEPART, EXIT_USAGE, EXIT_RETRY, EXIT_INTERRUPTED = 0, 1, 2, 64, 75, 130
EXIT_PROBLEMS = 3  # verify found problems, or a maintenance run left something out (named in its output)


# --------------------------------------------------------------------------- create
def _cmd_create(args: argparse.Namespace) -> Any:
    from lancepart.config import JobConfig, load_document
    from lancepart.errors import ConfigError
    from lancepart.model.spec import PartitionSpec, schema_from_json
    from lancepart.namespace import PartitionedNamespace

    root = args.root or args.root_opt
    if args.config:
        if args.schema or args.spec:
            raise UsageError("create: give either --config or --schema and --spec, not both")
        cfg = JobConfig.load(args.config, storage_env=False)
        nc = cfg.namespace
        if nc.schema is None or nc.spec is None:
            raise ConfigError(f"{args.config}: namespace.schema and namespace.spec are needed to create a namespace")
        schema, spec, so = nc.schema, nc.spec, storage_options(args, nc.storage_options)
        root = root or nc.root
    else:
        if not (root and args.schema and args.spec):
            raise UsageError("create: give ROOT --schema FILE|JSON --spec FILE|JSON, or --config FILE")
        raw_schema = load_document(args.schema, "--schema")
        spec = PartitionSpec.from_json(load_document(args.spec, "--spec"))
        if isinstance(raw_schema, list):  # the job config's list of {name, type, nullable}
            schema = JobConfig.from_dict({"namespace": {"root": root, "schema": raw_schema}}).namespace.schema
        elif isinstance(raw_schema, Mapping) and "fields" in raw_schema:  # the namespace `schema` property
            schema = schema_from_json(raw_schema)
        else:
            raise InvalidArgumentError("--schema must be a list of {name, type, nullable} (as in configs/*.yaml) "
                                       "or the JSON schema `lancepart describe --json` prints")
        so = storage_options(args)
    ns = PartitionedNamespace.create(root, schema, spec, storage_options=so)
    return {"root": ns.root, "spec_id": ns.current_spec.id, "manifest_version": ns.manifest_version,
            "columns": ns.schema.names}


def _cmd_rollback(args: argparse.Namespace) -> Any:
    ns = _open(args)
    _Progress(args.quiet)(f"rolling {ns.root} back to __manifest version {args.version}")
    result = ns.rollback(args.version, commit=_commit(args), max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, **result.to_dict()}
    d = result.details
    if not result.partitions_touched:
        print(f"{ns.root} already reads as version {args.version}: nothing published")
        return None
    for key in ("restored", "removed"):
        for oid in d[key]:
            print(f"  {key}: {oid}")
    print(f"rolled {ns.root} back to version {args.version}: {len(d['restored'])} partition tables restored, "
          f"{len(d['removed'])} removed, {len(d['undone_batch_ids'])} batch ids undone (a rerun publishes them "
          f"again); manifest version {result.manifest_version}")
    return None


# --------------------------------------------------------------------------- ingest
def _input_files(args: argparse.Namespace) -> list[str]:
    """The input files of ``ingest`` / ``overwrite``: with ``--config`` every positional is one."""
    files = list(args.files)
    if args.config and args.root is not None:
        files.insert(0, args.root)
        args.root = None
    return files


def _skipped(ns: Any, result: Any) -> bool:
    """Say so when the write's batch id was published already; whether it was."""
    if result.skipped:
        print(f"batch {result.batch_id!r} is already published in {ns.root}: nothing written "
              f"(manifest version {result.manifest_version})")
    return bool(result.skipped)


def _cmd_ingest(args: argparse.Namespace) -> Any:
    files = _input_files(args)
    ns = _open(args)
    progress = _Progress(args.quiet)
    reader = input_reader(files, args.format, ns.schema, progress, report_every=args.chunk_rows)
    result = ns.write(reader, mode=args.mode, chunk_rows=args.chunk_rows, batch_id=args.batch_id,
                      commit=_commit(args), max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, "files": files, "mode": args.mode, **result.to_dict()}
    if not _skipped(ns, result):
        print(f"published {result.rows_written} rows from {len(files)} file(s) into {ns.root}: "
              f"{result.partitions_touched} partitions ({result.partitions_created} new), manifest version "
              f"{result.manifest_version}, {result.retries} retries, {result.seconds:.1f} s"
              + (f", batch {result.batch_id!r}" if result.batch_id else ""))
    return None


def _cmd_overwrite(args: argparse.Namespace) -> Any:
    files = _input_files(args)
    ns = _open(args)
    progress = _Progress(args.quiet)
    progress(f"replacing the rows of {ns.root} where {args.where} with {len(files)} file(s)")
    reader = input_reader(files, args.format, ns.schema, progress)
    result = ns.overwrite(reader, where=args.where, batch_id=args.batch_id, commit=_commit(args),
                          max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, "files": files, "where": args.where, **result.to_dict()}
    if not _skipped(ns, result):
        print(f"replaced {result.details.get('rows_deleted', 0)} rows of {ns.root} where {args.where} with "
              f"{result.rows_written} rows from {len(files)} file(s): {result.partitions_touched} partitions "
              f"({result.partitions_created} new), manifest version {result.manifest_version}")
    return None


# --------------------------------------------------------------------------- maintenance
def _cmd_compact(args: argparse.Namespace) -> Any:
    from lancepart.config import CompactConfig, JobConfig

    ns = _open(args)
    # the config's compact: section (as jobs/compact.py reads it), else the defaults, fills what is not given
    cc = JobConfig.load(args.config).compact if args.config else CompactConfig()
    filter = args.filter if args.filter is not None else cc.filter
    _Progress(args.quiet)(f"compacting {ns.root}" + (f" where {filter}" if filter else ""))
    result = ns.compact(filter, target_rows_per_fragment=args.target_rows_per_fragment or cc.target_rows_per_fragment,
                        min_small_fragments=cc.min_small_fragments,
                        materialize_deletions_threshold=cc.materialize_deletions_threshold, commit=_commit(args),
                        max_retries=args.max_retries)
    out = {"root": ns.root, **result.to_dict()}
    if result.failures:
        args.exit_code = EXIT_PROBLEMS
    if args.json:
        return out
    for oid, why in sorted(result.failures.items()):
        print(f"  skipped: {oid}: {why}", file=sys.stderr)
    d = result.details or {}
    extra = "".join(f", {k.replace('_', ' ')} {d[k]}" for k in ("fragments_before", "fragments_after") if k in d)
    print(f"compacted {result.partitions_touched} partition tables of {ns.root}: manifest version "
          f"{result.manifest_version}, {result.rows_written} rows rewritten{extra}, {result.seconds:.1f} s")
    return None


def _cmd_cleanup(args: argparse.Namespace) -> Any:
    ns = _open(args)
    _Progress(args.quiet)(f"cleaning up {ns.root}: versions superseded more than {format_duration(args.older_than)} ago"
                          + (" (dry run)" if args.dry_run else ""))
    stats = ns.cleanup(older_than=args.older_than, dry_run=args.dry_run,
                       allow_short_retention=args.allow_short_retention)
    if stats.skipped or stats.errors:
        args.exit_code = EXIT_PROBLEMS
    out = {"root": ns.root, "older_than_seconds": args.older_than.total_seconds(), **stats.to_dict()}
    if args.json:
        return out
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {stats.versions_removed} versions and {stats.files_removed} files "
          f"({human_bytes(stats.bytes_removed)}) in {stats.tables_scanned} tables of {ns.root}")
    if stats.time_travel_from_version is not None:
        print(f"time travel {'would reach' if args.dry_run else 'reaches'} back to __manifest version "
              f"{stats.time_travel_from_version} ({stats.time_travel_from})")
    for e in stats.errors:
        print(f"  left: {e}")
    return None


def _cmd_evolve(args: argparse.Namespace) -> Any:
    from lancepart.config import load_document

    ns = _open(args)
    value = load_document(args.spec, "--spec")
    if isinstance(value, Mapping):
        fields = value.get("fields")
        if fields is None:
            raise InvalidArgumentError("--spec must be a list of partition fields or an object with 'fields'")
        want = value.get("id")
        if want is not None and want not in (ns.current_spec.id, max(ns.specs) + 1):
            raise InvalidArgumentError(f"--spec has id {want}, but the next spec version of {ns.root} is "
                                       f"{max(ns.specs) + 1} (leave 'id' out to have it assigned)")
    else:
        fields = value
    before = ns.current_spec.id
    spec = ns.update_spec(fields).spec
    out = {"root": ns.root, "spec_id": spec.id, "created": spec.id != before, "spec": spec.to_json(),
           "manifest_version": ns.manifest_version}
    if args.json:
        return out
    if out["created"]:
        print(f"{ns.root}: new partition spec v{spec.id} (manifest version {ns.manifest_version}); new writes use it")
    else:
        print(f"{ns.root}: spec v{spec.id} already defines these fields; nothing changed")
    print(json.dumps(spec.to_json()))
    return None


def _type_arg(text: str, option: str) -> Any:
    from lancepart.errors import InvalidSpecError
    from lancepart.model.spec import arrow_type_from_text

    try:
        return arrow_type_from_text(text)
    except InvalidSpecError as e:
        raise InvalidArgumentError(f"{option}: {e}") from None


def _name_value(text: str, sep: str, option: str, value: str = "VALUE") -> tuple[str, str]:
    name, found, rest = text.partition(sep)
    if not found or not name.strip() or not rest.strip():
        raise InvalidArgumentError(f"{option}: expected {_option_form(option, sep, value)}, got {text!r}")
    return name.strip(), rest.strip()


def _option_form(option: str, sep: str, value: str) -> str:
    return f"NAME{sep}{value}" if option != "--rename" else "OLD=NEW"


def _cmd_alter(args: argparse.Namespace) -> Any:
    import pyarrow as pa

    add = [pa.field(n, _type_arg(t, "--add"), nullable=True) for n, t in
           (_name_value(a, ":", "--add", "TYPE") for a in args.add or [])]
    rename = dict(_name_value(r, "=", "--rename") for r in args.rename or [])
    widen = {n: _type_arg(t, "--widen") for n, t in (_name_value(w, ":", "--widen", "TYPE") for w in
                                                      args.widen or [])}
    drop = list(args.drop or [])
    if not (add or rename or drop or widen):
        raise UsageError("alter: give at least one of --add, --rename, --drop, --widen")
    ns = _open(args)
    result = ns.update_schema(add=add, rename=rename, drop=drop, widen=widen, commit=_commit(args),
                              max_retries=args.max_retries)
    from lancepart.model.spec import field_id_of

    columns = [{"name": f.name, "type": str(f.type), "field_id": field_id_of(f), "nullable": f.nullable}
               for f in ns.schema]
    if args.json:
        return {"root": ns.root, "manifest_version": result.manifest_version, "retries": result.retries,
                "columns": columns}
    print(f"{ns.root}: schema changed in manifest version {result.manifest_version}; partition tables are "
          f"brought up to date by their next write or compaction")
    for c in columns:
        print(f"  {c['field_id']:>4}  {c['name']}: {c['type']}{'' if c['nullable'] else ' NOT NULL'}")
    return None


def _cmd_migrate(args: argparse.Namespace) -> Any:
    from lancepart.storage.manifest import normalize_root
    from lancepart.v1_tables import migrate

    root, so = _target(args)
    root = normalize_root(root)
    _Progress(args.quiet)(f"migrating {root}" + (" (dry run)" if args.dry_run else ""))
    out = {"root": root, **migrate(root, storage_options=so, dry_run=args.dry_run)}
    if args.json:
        return out
    verb = "would register" if args.dry_run else "registered"
    counts = {k: len(out.get(k) or ()) for k in ("registered", "refreshed", "already_registered", "skipped")}
    print(f"{root}: {verb} {counts['registered']} V1 tables, refreshed {counts['refreshed']}, "
          f"{counts['already_registered']} already registered, {counts['skipped']} skipped; "
          f"manifest version {out.get('manifest_version')}")
    for key in ("registered", "refreshed", "skipped"):
        for name, detail in (out.get(key) or {}).items():
            print(f"  {key}: {name} {detail}")
    return None


def _cmd_repair(args: argparse.Namespace) -> Any:
    from lancepart.ops.repair import repair_root
    from lancepart.storage.manifest import normalize_root

    root, so = _target(args)
    root = normalize_root(root)
    report = repair_root(root, so, dry_run=args.dry_run)
    out = {"root": root, **report.to_dict()}
    if args.json:
        return out
    if not report.needed:
        print(f"{root}: __manifest has all its columns, nothing to restore"
              + ("; DirectoryNamespace writer flag " + ("would be " if args.dry_run else "") + "set"
                 if report.writer_flag_added else ""))
        return None
    verb = "would restore" if args.dry_run else "restored"
    print(f"{root}: {verb} columns {', '.join(report.columns_restored)} from __manifest version "
          f"{report.from_version} (stripped version {report.current_version}): {report.rows_restored} rows "
          f"restored, {len(report.rows_carried_over)} rows added by the other writer carried over, "
          f"{len(report.rows_removed)} rows it removed left out"
          + (f"; published as version {report.new_version}" if report.new_version is not None else ""))
    for oid in report.rows_carried_over:
        print(f"  carried over: {oid}")
    for oid in report.rows_removed:
        print(f"  removed by the other writer: {oid}")


def _cmd_verify(args: argparse.Namespace) -> Any:
    from lancepart.maintenance.verify import verify
    from lancepart.storage.manifest import normalize_root

    root, so = _target(args)
    root = normalize_root(root)
    from lancepart.storage.error_mapping import file_in_the_way

    if "://" not in root and (blocker := file_in_the_way(root)) is not None:  # a usage error, as elsewhere
        raise InvalidArgumentError(f"{blocker} is a file, not a directory: it cannot be (or hold) the namespace "
                                   f"root {root}")
    _Progress(args.quiet)(f"verifying {root}" + (" (deep: every row is read)" if args.deep else ""))
    from lancepart.namespace import PartitionedNamespace

    report = verify(root, so, deep=args.deep,
                    open_namespace=lambda r, o: PartitionedNamespace.open(r, storage_options=o))
    if not report.ok:
        args.exit_code = EXIT_PROBLEMS
    if args.json:
        return {"root": root, **report.to_dict()}
    for p in report.problems:
        print(f"{p.kind}: {p.object_id}: {p.message}")
    print(f"{root}: {'ok' if report.ok else f'{len(report.problems)} problems'}; {report.tables_checked} tables "
          f"({report.tables_declared} declared only), {report.files_checked} files"
          + (f", {report.rows_checked} rows read" if args.deep else "") + f", {report.seconds:.1f} s")
    return None


def _cmd_drop_partitions(args: argparse.Namespace) -> Any:
    ns = _open(args)
    _Progress(args.quiet)(f"dropping partitions of {ns.root} where {args.filter}"
                          + (" (dry run)" if args.dry_run else ""))
    result = ns.drop_partitions(args.filter, dry_run=args.dry_run, commit=_commit(args), max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, **result.to_dict()}
    verb = "would drop" if args.dry_run else "dropped"
    for d in result.details["dropped"]:
        print(f"  {verb}: {d['object_id']} ({d['location']})")
    print(f"{verb} {result.partitions_touched} partitions of {ns.root}; manifest version {result.manifest_version}"
          + ("" if args.dry_run else "; their files stay until `lancepart cleanup`"))
    return None


def _cmd_delete(args: argparse.Namespace) -> Any:
    ns = _open(args)
    _Progress(args.quiet)(f"deleting rows of {ns.root} where {args.filter}")
    result = ns.delete(args.filter, commit=_commit(args), max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, **result.to_dict()}
    for t in result.details["tables"]:
        print(f"  {t['object_id']}: {t['rows_deleted']} rows deleted (version {t['from_version']} -> "
              f"{t['read_version']})")
    print(f"deleted {result.details['rows_deleted']} rows from {result.partitions_touched} partitions of {ns.root}; "
          f"manifest version {result.manifest_version}")
    return None


def _cmd_update(args: argparse.Namespace) -> Any:
    ns = _open(args)
    assignments = dict(args.set)
    shown = ", ".join(f"{c} = {e}" for c, e in assignments.items())
    _Progress(args.quiet)(f"updating rows of {ns.root}: set {shown}" + (f" where {args.filter}" if args.filter else ""))
    result = ns.update(assignments, args.filter, batch_id=args.batch_id, commit=_commit(args),
                       max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, **result.to_dict()}
    if result.skipped:
        print(f"batch {args.batch_id} is already published (manifest version {result.manifest_version}); nothing done")
        return None
    print(f"updated {result.details.get('rows_updated', 0)} rows in {result.partitions_touched} partitions of "
          f"{ns.root}; manifest version {result.manifest_version}")
    return None


def _cmd_merge(args: argparse.Namespace) -> Any:
    ns = _open(args)
    on = [c.strip() for c in args.on.split(",") if c.strip()]
    progress = _Progress(args.quiet)
    progress(f"merging {len(args.files)} file(s) into {ns.root} on {on}")
    data = input_reader(list(args.files), args.format, ns.schema, progress).read_all()
    result = ns.merge(data, on, when_matched=args.when_matched, when_not_matched=args.when_not_matched,
                      batch_id=args.batch_id, commit=_commit(args), max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, "files": list(args.files), **result.to_dict()}
    d = result.details
    print(f"merged into {ns.root}: {d.get('rows_updated', 0)} rows updated, {d.get('rows_inserted', 0)} inserted, "
          f"{result.partitions_touched} partitions ({result.partitions_created} new), manifest version "
          f"{result.manifest_version}" + (" (batch already published: nothing done)" if result.skipped else ""))
    return None


def _index_param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--param {text!r}: expected KEY=VALUE, e.g. num_partitions=16")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


_INDEX_ARGS = {"create": 2, "drop": 1, "list": 0}  # action -> its positional arguments after ROOT
_INDEX_USAGE = ("index ROOT create COLUMN INDEX_TYPE [--name N] [--min-rows N] [--param K=V] | "
                "index ROOT drop NAME | index ROOT list (or the action first: index list ROOT, "
                "index create ROOT COLUMN INDEX_TYPE, index drop ROOT NAME)")


def _index_positionals(args: argparse.Namespace) -> None:
    _action_positionals(args, "index", _INDEX_ARGS, _INDEX_USAGE)


def _action_positionals(args: argparse.Namespace, command: str, actions: Mapping[str, int], usage: str) -> None:
    """ROOT, the action and its arguments in either order (``index ROOT list`` or ``index list
    ROOT``), into ``args.root``, ``args.action`` and ``args.target``."""
    if args.action in actions:  # index [ROOT] ACTION ARG...
        if len(args.target) != actions[args.action]:
            raise UsageError(usage)
        return
    if args.root not in actions:
        raise UsageError(f"unknown {command} action {args.action!r}: {usage}")
    action, rest = args.root, [args.action, *args.target]  # index ACTION ROOT ARG...
    want = actions[action]
    if len(rest) == want + 1:
        args.root, args.target = rest[0], rest[1:]
    elif len(rest) == want and args.config:  # index --config FILE ACTION ARG...
        args.root, args.target = None, rest
    else:
        raise UsageError(usage)
    args.action = action


def _cmd_index(args: argparse.Namespace) -> Any:
    _index_positionals(args)
    ns = _open(args)
    if args.action == "list":
        out = ns.list_indexes()
        if args.json:
            return {"root": ns.root, "indexes": out}
        for d in out:
            print(f"{d['name']}: {d['index_type']} on {d['column']} {json.dumps(d['params'])} min_rows={d['min_rows']}"
                  f"  indexed {d['indexed']}/{d['above_min_rows']} tables above min_rows ({d['tables']} tables)")
        if not out:
            print(f"{ns.root}: no index declared")
        return None
    _Progress(args.quiet)(f"{args.action} index on {ns.root}: {' '.join(args.target)}")
    if args.action == "create":
        result = ns.create_index(args.target[0], args.target[1], name=args.name, replace=args.replace,
                                 min_rows=args.min_rows, commit=_commit(args), max_retries=args.max_retries,
                                 **dict(args.param or []))
    else:
        result = ns.drop_index(args.target[0], commit=_commit(args), max_retries=args.max_retries)
    below = None
    if args.action == "create":  # say what min_rows left out: a small table is searched flat, unindexed
        decl = result.details["index"]
        cov = next((d for d in ns.refresh().list_indexes() if d["name"] == decl["name"]), None)
        if cov is not None:
            below = {"min_rows": decl["min_rows"], "tables": cov["tables"] - cov["above_min_rows"]}
    if args.json:
        return {"root": ns.root, **result.to_dict(), **({"below_min_rows": below} if below else {})}
    print(f"{args.action} index: {result.partitions_touched} of {result.details['tables']} partition tables changed; "
          f"manifest version {result.manifest_version}")
    if below and below["tables"]:
        what = ("full-text search needs the index on every table it searches" if decl["index_type"] == "INVERTED"
                else "a search scans them without it")
        print(f"{below['tables']} of {result.details['tables']} partition tables have fewer than --min-rows "
              f"{below['min_rows']} rows and stay unindexed ({what}); pass --min-rows 0 (with --replace) to index "
              f"every table")
    return None


_CONSTRAINT_ARGS = {"add": 2, "drop": 1, "list": 0}
_CONSTRAINT_USAGE = ("constraint ROOT add NAME SQL_EXPR | constraint ROOT drop NAME | constraint ROOT list "
                     "(or the action first: constraint add ROOT NAME SQL_EXPR, ...)")


def _cmd_constraint(args: argparse.Namespace) -> Any:
    _action_positionals(args, "constraint", _CONSTRAINT_ARGS, _CONSTRAINT_USAGE)
    ns = _open(args)
    if args.action == "list":
        out = ns.list_constraints()
        if args.json:
            return out
        for name, expr in out.items():
            print(f"{name}: CHECK ({expr})")
        if not out:
            print(f"{ns.root}: no constraint declared")
        return None
    _Progress(args.quiet)(f"{args.action} constraint on {ns.root}: {' '.join(args.target)}")
    if args.action == "add":
        result = ns.add_constraint(args.target[0], args.target[1], commit=_commit(args), max_retries=args.max_retries)
    else:
        result = ns.drop_constraint(args.target[0], commit=_commit(args), max_retries=args.max_retries)
    if args.json:
        return {"root": ns.root, **result.to_dict()}
    if args.action == "add":
        print(f"constraint {args.target[0]} added: {result.details['rows_checked']} published rows in "
              f"{result.details['tables']} partition tables meet it; manifest version {result.manifest_version}")
    else:
        print(f"constraint {args.target[0]} dropped; manifest version {result.manifest_version}")
    return None


# --------------------------------------------------------------------------- parser
def _common(with_config: bool) -> argparse.ArgumentParser:
    """Options every subcommand accepts (after its name too: ``lancepart describe ROOT --json``)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("common options")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document on stdout (errors too)")
    g.add_argument("--storage-option", dest="storage_option_sub", action="append", metavar="KEY=VALUE",
                   default=argparse.SUPPRESS,
                   help=f"a storage option for Lance (repeatable), merged over ${STORAGE_OPTIONS_ENV} "
                        "(a JSON object); values are never printed")
    g.add_argument("--storage-options-file", dest="storage_options_file_sub", metavar="FILE",
                   default=argparse.SUPPRESS,
                   help="storage options for Lance from a JSON or YAML mapping (keeps secrets off the command "
                        "line; ${VAR} in a value is the environment variable VAR)")
    g.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress on stderr")
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="print a traceback on unexpected errors")
    if with_config:
        g.add_argument("--config", metavar="FILE",
                       help="take ROOT and storage options from a job config (namespace.root, namespace.storage)")
    return p


_Add = Callable[..., argparse.ArgumentParser]  # adds one subcommand: add(name, help, func, root=True, ...)


def _adder(sub: Any, epilog: str) -> _Add:
    """The function each ``_parser_<command>`` adds its subcommand with: the common options,
    ROOT (unless ``root=False``), the exit codes as epilog, ``func`` as what runs it."""

    def add(name: str, help: str, func: Callable[[argparse.Namespace], Any], root: bool = True,
            description: str | None = None, usage: str | None = None) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=description or help, parents=[_common(root)],
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog, usage=usage)
        if root:
            sp.add_argument("root", nargs="?", metavar="ROOT", help="namespace root: a directory or URI (s3://...)")
        sp.set_defaults(func=func)
        return sp

    return add


def _parser_create(add: _Add) -> None:
    c = add("create", "create a partitioned namespace from a schema and a partition spec", _cmd_create, root=False,
            description="Create a partitioned namespace: ROOT --schema --spec, or from a job config's "
                        "namespace.root/schema/spec (--config).")
    c.add_argument("root", nargs="?", metavar="ROOT", help="namespace root (overrides the config's namespace.root)")
    c.add_argument("--schema", metavar="FILE|JSON",
                   help="columns as in configs/*.yaml ([{name, type, nullable}, ...]) or the schema JSON "
                        "`describe --json` prints")
    c.add_argument("--spec", metavar="FILE|JSON", help='partition spec JSON: {"id": 1, "fields": [...]}')
    c.add_argument("--config", metavar="FILE", help="YAML job config with namespace.root, namespace.schema, "
                                                    "namespace.spec (and namespace.storage)")
    c.add_argument("--root", dest="root_opt", metavar="ROOT", help=argparse.SUPPRESS)  # older spelling of ROOT


def _parser_describe(add: _Add) -> None:
    d = add("describe", "specs, schema, partition count, versions and sizes", _cmd_describe,
            description="Specs, schema, manifest version, partition count, and per partition table its "
                        "published rows, bytes on storage and number of versions, with totals.")
    d.add_argument("--tables", action="store_true", help="also list every partition table (text output)")
    d.add_argument("--no-sizes", action="store_true", help="skip rows, bytes and versions (no table is opened)")


def _parser_partitions(add: _Add) -> None:
    ls = add("partitions", "list published partition tables (optionally pruned by a filter)", _cmd_partitions)
    ls.add_argument("--filter", metavar="SQL", help="SQL filter over source columns, e.g. "
                                                    "\"event_date = DATE '2025-12-10'\"")


def _parser_history(add: _Add) -> None:
    hi = add("history", "the retained __manifest versions (snapshots), newest first", _cmd_history,
             description="Every retained __manifest version, newest first: version, time (UTC), operation, "
                         "batch id, rows and partition tables a write published. Each is a snapshot that "
                         "PartitionedNamespace.open(root, version=N) reads; cleanup decides how far back they go.")
    hi.add_argument("--limit", type=_positive_int, metavar="N", help="only the N newest versions")


def _parser_changes(add: _Add) -> None:
    ch = add("changes", "the change feed: rows each __manifest commit inserted and deleted", _cmd_changes,
             description="The rows inserted and deleted by each __manifest commit after version N up to M "
                         "(default: the latest), one JSON object per line with _change_type (insert, delete, "
                         "update_preimage, update_postimage), _commit_version and _commit_timestamp. Compaction, "
                         "index builds and schema changes change no row. A range a cleanup removed is an error "
                         "naming the oldest version the feed reaches.")
    ch.add_argument("--from", dest="start", required=True, type=_non_negative_int, metavar="N",
                    help="the version to start after (its own commit is not included)")
    ch.add_argument("--to", dest="end", type=_positive_int, metavar="M", help="the last version (default: latest)")
    ch.add_argument("--filter", metavar="SQL", help="only changed rows matching this SQL filter (prunes partitions)")
    ch.add_argument("--columns", metavar="C,C...", help="only these columns (and the three change columns)")


def _parser_rollback(add: _Add) -> None:
    rb = add("rollback", "publish an older __manifest version's partition tables as a new version", _cmd_rollback,
             description="Make the namespace read as __manifest version N did, in one commit: each partition "
                         "table N pinned gets a new table version with exactly the fragments N read, tables N "
                         "did not have leave __manifest. Specs and schema stay. Batch ids published after N are "
                         "recorded as undone, so their reruns publish again. See `lancepart history`.")
    rb.add_argument("--version", required=True, type=_positive_int, metavar="N", help="the version to go back to")
    _max_retries(rb)


def _parser_explain(add: _Add) -> None:
    ex = add("explain", "partitions kept and pruned per spec version for a filter", _cmd_explain,
             description="Per spec version: the partition predicate a filter projects to, how many partition "
                         "tables it keeps and prunes, what is pushed into each Lance scan, and the __manifest "
                         "query. Without a filter: the full scan (every partition kept).")
    ex.add_argument("filter", nargs="?", metavar="FILTER", help="SQL filter over source columns (default: none)")
    ex.add_argument("--filter", dest="filter_opt", metavar="SQL", help="the filter, as an option (as in `partitions`)")


def _parser_ingest(add: _Add) -> None:
    ing = add("ingest", "write local files into the namespace in-process (no Spark) in one commit", _cmd_ingest,
              description="Write Parquet, CSV, JSON (newline-delimited) or Arrow IPC files into the namespace "
                          "without Spark, streamed in chunks, and publish them all in one __manifest commit.")
    ing.add_argument("files", nargs="+", metavar="FILE", help="input files; the format comes from the extension")
    ing.add_argument("--format", choices=FORMATS, help="input format of every FILE (default: by extension)")
    ing.add_argument("--mode", choices=("append", "overwrite"), default="append",
                     help="append rows, or overwrite: replace only the partitions the input has rows for (dynamic "
                          "partition overwrite; the others keep theirs; `lancepart overwrite` replaces every row) "
                          "(default: append)")
    ing.add_argument("--batch-id", metavar="ID",
                     help="exactly-once id: an id that is already published makes this a no-op (exit 0)")
    ing.add_argument("--chunk-rows", type=_positive_int, default=1_000_000, metavar="N",
                     help="rows planned and written per chunk; bounds memory (default: 1000000)")
    _max_retries(ing)


def _parser_overwrite(add: _Add) -> None:
    ow = add("overwrite", "replace every row (or those --where matches) with local files, in one commit",
             _cmd_overwrite,
             description="Replace every published row matching --where (default: TRUE, the whole namespace) with "
                         "the rows of Parquet, CSV, JSON or Arrow IPC files, in one __manifest commit: partitions "
                         "the files have no rows for lose their rows too (unlike `ingest --mode overwrite`, which "
                         "replaces only the partitions the input touches). Every input row must match --where.")
    ow.add_argument("files", nargs="+", metavar="FILE", help="input files; the format comes from the extension")
    ow.add_argument("--where", default="TRUE", metavar="SQL",
                    help="replace only the rows this SQL filter matches, e.g. \"event_date = DATE '2025-12-10'\" "
                         "(default: TRUE, every row)")
    ow.add_argument("--format", choices=FORMATS, help="input format of every FILE (default: by extension)")
    ow.add_argument("--batch-id", metavar="ID",
                    help="exactly-once id: an id that is already published makes this a no-op (exit 0)")
    _max_retries(ow)


def _parser_compact(add: _Add) -> None:
    cp = add("compact", "rewrite small fragments of partition tables, published in one commit", _cmd_compact)
    cp.add_argument("--filter", metavar="SQL", help="compact only the partitions this filter selects")
    cp.add_argument("--target-rows-per-fragment", type=_positive_int, metavar="N",
                    help="rows per fragment to aim for (default: the config's compact.target_rows_per_fragment, "
                         "else 1048576)")
    _max_retries(cp)


def _parser_cleanup(add: _Add) -> None:
    cl = add("cleanup", "remove old table versions and unreferenced files", _cmd_cleanup,
             description="Remove table versions superseded longer than --older-than ago and files no version "
                         "references; never what a published read_version, read_tag or read_branch pins. "
                         "Exit code 3 when something could not be examined or removed (each one is named).")
    cl.add_argument("--older-than", type=parse_duration, default=timedelta(days=7), metavar="DURATION",
                    help="retention, e.g. 7d, 36h, 90m, 1d12h; must exceed the longest write job (default: 7d)")
    cl.add_argument("--dry-run", action="store_true", help="report what would be removed, remove nothing")
    cl.add_argument("--allow-short-retention", action="store_true",
                    help="allow --older-than below the namespace's retention floor (1h, or the __manifest metadata "
                         "key lancepart.retention_floor): only for a namespace no job writes to; running writes can "
                         "fail")


def _parser_evolve(add: _Add) -> None:
    ev = add("evolve", "add a partition spec version", _cmd_evolve,
             description="Add partition spec version N+1 with the given fields; new writes use it, reads span "
                         "every version. Defining exactly the current spec again changes nothing.")
    ev.add_argument("--spec", required=True, metavar="FILE|JSON",
                    help='the new fields: [{"source_ids": [...], "transform": {...}, "result_type": {...}}, ...] '
                         'or {"fields": [...]}')


def _parser_migrate(add: _Add) -> None:
    mg = add("migrate", "bring a namespace written by an older layout up to date", _cmd_migrate)
    mg.add_argument("--dry-run", action="store_true", help="report what would change, change nothing")


def _parser_repair(add: _Add) -> None:
    rp = add("repair", "restore a __manifest another tool stripped of lancepart's columns", _cmd_repair,
             description="Restore read_version/read_branch/read_tag and the partition_field_* columns of a "
                         "__manifest that a directory-namespace-only tool rewrote, from its history, keeping "
                         "the rows that tool added; one commit. Also sets the flag that makes Lance's "
                         "DirectoryNamespace refuse to rewrite it.")
    rp.add_argument("--dry-run", action="store_true", help="report what would be restored, change nothing")


def _parser_verify(add: _Add) -> None:
    vf = add("verify", "check that every published table and file is there and right (exit 3: problems)",
             _cmd_verify, description="Check __manifest's columns, that every published table opens at its "
                                      "pinned version, that every file it references exists and that its schema "
                                      "is the namespace's; --deep also reads every row and recomputes its "
                                      "partition values. Exit code 3 when problems are found.")
    vf.add_argument("--deep", action="store_true", help="read every row and recompute its partition values")


def _parser_drop_partitions(add: _Add) -> None:
    dp = add("drop-partitions", "remove whole partitions from __manifest in one commit (files stay for cleanup)",
             _cmd_drop_partitions,
             description="Remove every partition the filter selects entirely from __manifest in one commit. The "
                         "filter may only name identity-partitioned columns. Files stay until cleanup.")
    dp.add_argument("--filter", required=True, metavar="SQL", help="e.g. \"event_date < DATE '2025-01-01'\"")
    dp.add_argument("--dry-run", action="store_true", help="list what would be dropped, change nothing")
    _max_retries(dp)


def _parser_delete(add: _Add) -> None:
    dl = add("delete", "delete the rows matching a filter from every partition, in one commit", _cmd_delete,
             description="Delete every published row for which the filter is TRUE: Lance deletions on the "
                         "published version of each partition that may hold one, then one __manifest commit "
                         "(all partitions or none). Removed rows' files stay until cleanup.")
    dl.add_argument("--filter", required=True, metavar="SQL", help="e.g. \"user_id = 42\"; 'TRUE' deletes every row")
    _max_retries(dl)


def _set_item(text: str) -> tuple[str, str]:
    col, sep, expr = text.partition("=")
    if not sep or not col.strip() or not expr.strip():
        raise argparse.ArgumentTypeError(f"expected COL=EXPR, e.g. amount=amount*2 or country='US'; got {text!r}")
    return col.strip(), expr.strip()


def _parser_update(add: _Add) -> None:
    up = add("update", "set columns to SQL expressions on the rows matching a filter, in one commit", _cmd_update,
             description="Set each --set column to its SQL expression (DataFusion, over the row's old values) on "
                         "every published row for which --filter is TRUE (every row without it): the old rows get "
                         "Lance deletions, the new ones are written into their partitions (a row whose partition "
                         "source changes moves), one __manifest commit. docs/merge.md.")
    up.add_argument("--set", action="append", required=True, type=_set_item, metavar="COL=EXPR",
                    help="a column and its new value, e.g. amount=amount*2 or \"country='US'\" (repeatable)")
    up.add_argument("--filter", metavar="SQL", help="the rows to update, e.g. \"user_id = 42\" (default: every row)")
    up.add_argument("--batch-id", metavar="ID", help="exactly-once id: already published makes this a no-op")
    _max_retries(up)


def _parser_merge(add: _Add) -> None:
    mg = add("merge", "upsert rows from local files by key columns, in one commit", _cmd_merge,
             description="Merge (upsert) Parquet, CSV, JSON or Arrow IPC files by key columns: published rows "
                         "whose key is in the input are replaced (even into another partition), the others are "
                         "inserted; one __manifest commit. Duplicate or NULL keys in the input are refused.")
    mg.add_argument("files", nargs="+", metavar="FILE", help="input files; the format comes from the extension")
    mg.add_argument("--on", required=True, metavar="COL[,COL...]", help="key columns, e.g. id or tenant,id")
    mg.add_argument("--format", choices=FORMATS, help="input format of every FILE (default: by extension)")
    mg.add_argument("--when-matched", choices=("update", "ignore"), default="update")
    mg.add_argument("--when-not-matched", choices=("insert", "ignore"), default="insert")
    mg.add_argument("--batch-id", metavar="ID", help="exactly-once id: already published makes this a no-op")
    _max_retries(mg)


def _parser_alter(add: _Add) -> None:
    al = add("alter", "change the namespace schema: add, rename, drop or widen columns, in one commit", _cmd_alter,
             description="Change the namespace schema in one __manifest commit. New columns are nullable and get "
                         "fresh field ids (never reused); renamed columns keep theirs (partition specs on them "
                         "keep working); a dropped partition source reads as NULL; only lossless widenings. "
                         "Partition tables are not rewritten: reads show them in the new schema.")
    al.add_argument("--add", action="append", metavar="NAME:TYPE",
                    help="add a nullable column, e.g. score:float64, note:string, price:decimal(12,2) (repeatable)")
    al.add_argument("--rename", action="append", metavar="OLD=NEW", help="rename a column (repeatable)")
    al.add_argument("--drop", action="append", metavar="NAME", help="drop a column (repeatable)")
    al.add_argument("--widen", action="append", metavar="NAME:TYPE",
                    help="widen a column's type losslessly, e.g. n:int64, x:float64, s:large_string (repeatable)")
    _max_retries(al)


def _parser_search(add: _Add) -> None:
    se = add("search", "nearest rows to a vector, or best full-text matches, across partitions", _cmd_search,
             description="The --k published rows nearest to the vector --query in --column (a JSON list of "
                         "numbers; _distance ascending), or with --text the best full-text matches (_score "
                         "descending; the column needs an INVERTED index: `lancepart index ROOT create COLUMN "
                         "INVERTED`), among the rows --filter selects; partitions are pruned with the filter. "
                         "One JSON line per row (--json: one JSON array). docs/search.md.")
    se.add_argument("--column", required=True, metavar="C", help="the vector (or, with --text, string) column")
    se.add_argument("--query", required=True, metavar="Q",
                    help="a JSON list of numbers, e.g. '[0.1, 0.2, ...]'; with --text the words to match")
    se.add_argument("--k", type=_positive_int, default=10, metavar="N", help="rows to return (default: 10)")
    se.add_argument("--filter", metavar="SQL", help="SQL filter over source columns, e.g. \"tenant = 'acme'\"")
    se.add_argument("--text", action="store_true", help="a full-text query (INVERTED index) instead of a vector")
    se.add_argument("--columns", metavar="A,B", help="columns to return (default: all), plus _distance or _score")
    se.add_argument("--metric", choices=("l2", "cosine", "dot"),
                    help="vector distance (default: the metric of the column's vector indexes, else l2)")
    se.add_argument("--param", action="append", type=_index_param, metavar="KEY=VALUE",
                    help="a Lance search parameter (JSON value), e.g. nprobes=20 or refine_factor=5; repeatable")


def _parser_index(add: _Add) -> None:
    ix = add("index", "declare, drop or list the indexes kept on every partition table", _cmd_index,
             usage="%(prog)s ROOT {create,drop,list} [ARG ...] [options]\n"
                   "       %(prog)s {create,drop,list} ROOT [ARG ...] [options]\n"
                   "       %(prog)s --config FILE {create,drop,list} [ARG ...] [options]",
             description="create COLUMN INDEX_TYPE: declare an index (IVF_PQ, IVF_HNSW_SQ, ... INVERTED, BTREE, "
                         "BITMAP, LABEL_LIST) and build it on every published partition table of at least "
                         "--min-rows rows, in one publish; writes and compactions keep it from then on. "
                         "drop NAME: remove it everywhere, in one publish. list: the declarations and how many "
                         "tables carry each.")
    ix.add_argument("action", metavar="{create,drop,list}",
                    help="what to do; before or after ROOT (index ROOT list, index list ROOT)")
    ix.add_argument("target", nargs="*", metavar="ARG", help="create: COLUMN INDEX_TYPE; drop: NAME")
    ix.add_argument("--name", help="index name (default: <column>_<index_type>)")
    ix.add_argument("--min-rows", type=lambda t: _positive_int(t, least=0), default=None, metavar="N",
                    help="tables with fewer rows stay unindexed (default: 10000)")
    ix.add_argument("--replace", action="store_true", help="rebuild an index declared under NAME with another "
                                                           "definition")
    ix.add_argument("--param", action="append", type=_index_param, metavar="KEY=VALUE",
                    help="a Lance index parameter (JSON value), e.g. num_partitions=16; repeatable")
    _max_retries(ix)


def _parser_constraint(add: _Add) -> None:
    co = add("constraint", "add, drop or list the CHECK constraints every write is checked against", _cmd_constraint,
             usage="%(prog)s ROOT {add,drop,list} [ARG ...] [options]\n"
                   "       %(prog)s {add,drop,list} ROOT [ARG ...] [options]",
             description="add NAME SQL_EXPR: declare a constraint every row must make TRUE (FALSE and NULL break "
                         "it), after checking the published rows (rows that break it are named and nothing is "
                         "added); from then on every write, merge, update, replace-where, rollback and Spark job "
                         "is checked before it publishes. drop NAME: remove it. list: name and expression of each.")
    co.add_argument("action", metavar="{add,drop,list}",
                    help="what to do; before or after ROOT (constraint ROOT list, constraint list ROOT)")
    co.add_argument("target", nargs="*", metavar="ARG", help="add: NAME SQL_EXPR; drop: NAME")
    _max_retries(co)


# the subcommands, in the order `lancepart --help` lists them
_PARSERS = (
    _parser_create, _parser_describe, _parser_partitions, _parser_history, _parser_changes, _parser_rollback,
    _parser_explain, _parser_ingest, _parser_overwrite, _parser_compact, _parser_cleanup, _parser_evolve,
    _parser_migrate, _parser_repair, _parser_verify, _parser_drop_partitions, _parser_delete, _parser_update,
    _parser_merge,
    _parser_alter, _parser_search, _parser_index, _parser_constraint,
)


def build_parser() -> argparse.ArgumentParser:
    from lancepart import __version__

    doc = __doc__.split("\n\n")
    p = argparse.ArgumentParser(
        prog="lancepart", description="Partitioned Lance namespaces: create, inspect, write and maintain.",
        epilog=doc[3].strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"lancepart {__version__}")
    p.add_argument("--json", action="store_true", default=False, help="print one JSON document on stdout")
    p.add_argument("--storage-option", action="append", metavar="KEY=VALUE", default=[],
                   help="a storage option for Lance (repeatable)")
    p.add_argument("--storage-options-file", metavar="FILE", default=None,
                   help="storage options for Lance from a JSON or YAML mapping (keeps secrets off the command line)")
    p.add_argument("-q", "--quiet", action="store_true", default=False, help="no progress on stderr")
    p.add_argument("--debug", action="store_true", default=False, help="print a traceback on unexpected errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = _adder(sub, doc[3].strip())
    for define in _PARSERS:
        define(add)
    return p


def _max_retries(p: argparse.ArgumentParser) -> None:
    """The commit options of a command that publishes (``CommitOptions`` in Python)."""
    p.add_argument("--max-retries", type=lambda t: _positive_int(t, least=0), default=20, metavar="N",
                   help=f"__manifest commit attempts after a conflict with a concurrent writer before giving up "
                        f"with exit code {EXIT_RETRY} (default: 20)")
    p.add_argument("--commit-metadata", action="append", type=_key_value, metavar="KEY=VALUE",
                   help="recorded with the __manifest commit (`lancepart history --json` shows it in properties); "
                        "repeatable; keys starting with lancepart. are refused")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key.strip(), value


def _commit(args: argparse.Namespace) -> CommitOptions:
    """The ``commit=`` of a publishing command: its ``--commit-metadata`` pairs."""
    return CommitOptions(custom_metadata=dict(args.commit_metadata or []) or None)


def _merge_common(args: argparse.Namespace) -> None:
    args.storage_option = list(args.storage_option or []) + list(getattr(args, "storage_option_sub", []) or [])
    if not hasattr(args, "config"):
        args.config = None


# --------------------------------------------------------------------------- entry point
def _print(obj: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj, indent=2, default=str))
        return
    if isinstance(obj, list):
        for item in obj:
            print(json.dumps(item, default=str))
        return
    for k, v in obj.items():
        print(f"{k}: {v if not isinstance(v, (dict, list)) else json.dumps(v, default=str)}")


def _fail(code: int, kind: str, message: str, as_json: bool) -> int:
    message = without_source_locations(message)  # an unexpected error may repeat Lance's text as it is
    print(f"lancepart: {kind}: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": kind, "message": message, "exit_code": code}, indent=2))
    return code


@redacting_output  # nothing it prints shows URL userinfo or a secret storage option value
def main(argv: list[str] | None = None) -> int:
    """Run the ``lancepart`` command; returns the exit code.

    >>> main(["-q", "cleanup", ns.root, "--older-than", "7d", "--dry-run"])  # doctest: +ELLIPSIS
    would remove 0 versions and 0 files (0 B) in 3 tables of .../events
    time travel would reach back to __manifest version 1 (...)
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help/--version exit 0, errors exit 2
        if e.code in (0, None):
            return EXIT_OK
        if wants_json:
            print(json.dumps({"error": "usage", "message": "bad command line (see stderr)", "exit_code": EXIT_USAGE}))
        return EXIT_USAGE
    _merge_common(args)
    # the library's log lines are the progress of long commands; other commands show warnings only
    logger, level = logging.getLogger("lancepart"), logging.getLogger("lancepart").level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("lancepart: %(message)s"))
    if not args.quiet:
        logger.addHandler(handler)
        long_running = args.command in ("ingest", "compact", "cleanup", "migrate", "verify")
        logger.setLevel(logging.INFO if long_running else logging.WARNING)
    try:
        out = args.func(args)
        if out is not None:
            _print(out, args.json)
        return getattr(args, "exit_code", EXIT_OK)
    except UsageError as e:
        return _fail(EXIT_USAGE, "usage", f"{e} (see: {parser.prog} {args.command} --help)", args.json)
    except RetryableError as e:
        return _fail(EXIT_RETRY, type(e).__name__, f"{e} (retryable: run it again)", args.json)
    except LancepartError as e:
        return _fail(EXIT_LANCEPART, type(e).__name__, str(e), args.json)
    except KeyboardInterrupt:
        return _fail(EXIT_INTERRUPTED, "interrupted", "stopped by the user", args.json)
    except BrokenPipeError:  # what reads stdout stopped reading (`lancepart changes ROOT --from 1 | head`)
        with contextlib.suppress(OSError):  # nothing more goes there, not even at exit's flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as e:  # anything else is a bug or an environment problem
        if args.debug or os.environ.get("LANCEPART_DEBUG"):
            traceback.print_exc()
        return _fail(EXIT_FAILED, f"unexpected {type(e).__name__}", f"{e} (rerun with --debug for a traceback)",
                     args.json)
    finally:  # main() may run in a longer-lived process (tests, notebooks)
        logger.removeHandler(handler)
        logger.setLevel(level)
