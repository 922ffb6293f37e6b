"""The ``lancepart`` commands that read: describe, partitions, explain, history, changes, search."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from lancepart.errors import InvalidArgumentError
from lancepart.stats import describe, human_bytes

if TYPE_CHECKING:
    from lancepart.namespace import PartitionedNamespace

from lancepart.cli.args import UsageError, _open, _Progress


# --------------------------------------------------------------------------- describe
def _cmd_describe(args: argparse.Namespace) -> Any:
    ns = _open(args)
    out = describe(ns, sizes=not args.no_sizes, progress=_Progress(args.quiet))
    if args.json:
        return out
    _print_describe(ns, out, args.tables)
    return None


def _print_describe(ns: PartitionedNamespace, out: dict[str, Any], with_tables: bool) -> None:
    print(f"root: {out['root']}")
    print(f"manifest version: {out['manifest_version']}")
    from lancepart.model.spec import field_id_of

    names = {field_id_of(f): f.name for f in ns.schema}
    for spec_id, spec in sorted(ns.specs.items()):
        fields = ", ".join(
            f"{f.field_id}=" + (f"expression({f.expression!r})" if f.expression is not None else
                                f"{f.transform}({','.join(names.get(s, str(s)) for s in f.source_ids)})")
            for f in spec.fields)
        print(f"spec v{spec_id}{' (current)' if spec_id == out['current_spec'] else ''}: {fields}")
    print("schema: " + ", ".join(f"{f.name} {f.type}{'' if f.nullable else ' not null'}" for f in ns.schema))
    for name, expr in out["constraints"].items():
        print(f"constraint {name}: CHECK ({expr})")
    print(f"partitions: {out['partitions']}")
    if "bytes" in out:
        print(f"rows: {out['rows']}")
        print(f"storage: {human_bytes(out['bytes'])} ({out['bytes']} bytes) in {out['partitions']} tables "
              f"+ __manifest, {out['versions']} versions "
              f"(__manifest: {human_bytes(out['manifest']['bytes'])}, {out['manifest']['versions']} versions)")
        if with_tables:
            for t in out["tables"]:
                print(f"  {t['object_id']}  v{t['read_version']}  rows={t['rows']}  bytes={t['bytes']}  "
                      f"versions={t['versions']}  {json.dumps(t['values'], default=str)}")


# --------------------------------------------------------------------------- partitions / explain
def _cmd_partitions(args: argparse.Namespace) -> Any:
    return [p.to_dict() for p in _open(args).partitions(args.filter)]


def _cmd_explain(args: argparse.Namespace) -> Any:
    from lancepart.read.manifest_query import prune

    if args.config and args.root is not None and args.filter is None:  # with --config the positional is FILTER
        args.root, args.filter = None, args.root
    if args.filter is not None and args.filter_opt is not None:
        raise UsageError("explain: give the filter once, as FILTER or as --filter SQL")
    if args.filter is None:
        args.filter = args.filter_opt  # None: the unfiltered scan, every partition kept
    ns = _open(args)
    result = prune(args.filter, ns.schema, ns.specs, ns.snapshot().rows)
    if not args.json:
        print(result.explain())
        return None
    return {"filter": args.filter, "kept": result.kept_counts, "pruned": result.pruned,
            "predicates": result.predicates, "manifest_sql": result.manifest_sql, "residual": result.residual}


def _cmd_history(args: argparse.Namespace) -> Any:
    entries = _open(args).history(limit=args.limit)
    if not args.json:
        for e in entries:
            fields = (("batch_id", e.batch_id), ("rows", e.rows_written), ("rows_removed", e.rows_removed),
                      ("partitions", e.partitions_touched))
            extra = "".join(f" {k}={v}" for k, v in fields if v is not None)
            print(f"{e.version:>6}  {e.timestamp.isoformat(timespec='seconds')}  {e.operation}{extra}")
        return None
    return [e.to_dict() for e in entries]


def _cmd_changes(args: argparse.Namespace) -> Any:
    ns = _open(args)
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    reader = ns.changes(args.start, args.end, filter=args.filter, columns=columns)
    counts: dict[str, int] = {}
    out = [] if args.json else None
    for batch in reader:
        for row in batch.to_pylist():
            counts[row["_change_type"]] = counts.get(row["_change_type"], 0) + 1
            if out is not None:
                out.append(row)
            else:
                print(json.dumps(row, default=_json_value, ensure_ascii=False))
    end = args.end if args.end is not None else ns.manifest_version
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no rows changed"
    _Progress(args.quiet)(f"changes of {ns.root} after version {args.start} up to {end}: {summary}")
    if out is None:
        return None
    return {"root": ns.root, "from": args.start, "to": end, "counts": counts,
            "rows": json.loads(json.dumps(out, default=_json_value))}


def _json_value(v: Any) -> Any:
    return v.isoformat() if hasattr(v, "isoformat") else str(v)


# --------------------------------------------------------------------------- search
def _cmd_search(args: argparse.Namespace) -> Any:
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    params = dict(args.param or [])
    if args.metric is not None:
        params["metric"] = args.metric
    if args.text:
        if params:
            raise UsageError("search --text: --metric and --param apply to a vector search only")
        ns = _open(args)
        found = ns.search_text(args.column, args.query, k=args.k, filter=args.filter, columns=columns)
    else:
        try:
            vector = json.loads(args.query)
        except ValueError:
            vector = None
        if not (isinstance(vector, list) and vector
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector)):
            raise InvalidArgumentError(f"--query {args.query[:60]!r}: a vector search needs a JSON list of numbers, "
                                       f"e.g. '[0.12, -0.5, ...]' (one per dimension of --column); for a full-text "
                                       f"query add --text")
        ns = _open(args)
        found = ns.search(args.column, vector, k=args.k, filter=args.filter, columns=columns, **params)
    return found.to_pylist()
