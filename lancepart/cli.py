"""The ``lancepart`` command.

Exit codes: 0 success, 1 unexpected error, 2 a lancepart error (bad spec, missing
namespace, conflict, ...; the message names what is wrong), 64 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lancepart.errors import LancepartError

EXIT_OK, EXIT_FAILED, EXIT_LANCEPART, EXIT_USAGE = 0, 1, 2, 64


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


def _cmd_create(args: argparse.Namespace) -> Any:
    from lancepart.config import JobConfig
    from lancepart.errors import ConfigError
    from lancepart.namespace import PartitionedNamespace

    cfg = JobConfig.load(args.config)
    nc = cfg.namespace
    if nc.schema is None or nc.spec is None:
        raise ConfigError(f"{args.config}: namespace.schema and namespace.spec are needed to create a namespace")
    ns = PartitionedNamespace.create(args.root or nc.root, nc.schema, nc.spec, nc.storage_options or None)
    return {"root": ns.root, "spec_id": ns.current_spec.id, "manifest_version": ns.manifest_version}


def _cmd_describe(args: argparse.Namespace) -> Any:
    from lancepart.namespace import PartitionedNamespace
    from lancepart.spec import schema_to_json

    ns = PartitionedNamespace.open(args.root)
    parts = ns.partitions()
    return {
        "root": ns.root,
        "manifest_version": ns.manifest_version,
        "current_spec": ns.current_spec.id,
        "specs": {k: s.to_json() for k, s in ns.specs.items()},
        "schema": schema_to_json(ns.schema),
        "partitions": len(parts),
    }


def _cmd_partitions(args: argparse.Namespace) -> Any:
    from lancepart.namespace import PartitionedNamespace

    return [p.to_dict() for p in PartitionedNamespace.open(args.root).partitions(args.filter)]


def _cmd_explain(args: argparse.Namespace) -> Any:
    from lancepart.namespace import PartitionedNamespace
    from lancepart.read.prune import prune

    ns = PartitionedNamespace.open(args.root)
    result = prune(args.filter, ns.schema, ns.specs, ns.snapshot().rows)
    if not args.json:
        print(result.explain())
        return None
    return {"filter": args.filter, "kept": result.kept_counts, "pruned": result.pruned,
            "predicates": result.predicates, "manifest_sql": result.manifest_sql, "residual": result.residual}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lancepart", description="Partitioned Lance namespaces: create, inspect, write.")
    p.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", help="create a partitioned namespace from a job config's schema and spec")
    c.add_argument("--config", required=True, help="YAML with namespace.root, namespace.schema, namespace.spec")
    c.add_argument("--root", help="override namespace.root")
    c.set_defaults(func=_cmd_create)
    d = sub.add_parser("describe", help="specs, schema, partition count and manifest version")
    d.add_argument("root")
    d.set_defaults(func=_cmd_describe)
    ls = sub.add_parser("partitions", help="list published partition tables (optionally pruned by a filter)")
    ls.add_argument("root")
    ls.add_argument("--filter", help="SQL filter over source columns, e.g. \"event_date = DATE '2025-12-10'\"")
    ls.set_defaults(func=_cmd_partitions)
    ex = sub.add_parser("explain", help="partitions kept and pruned per spec version for a filter")
    ex.add_argument("root")
    ex.add_argument("filter", help="SQL filter over source columns")
    ex.set_defaults(func=_cmd_explain)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code == 0 else EXIT_USAGE
    try:
        out = args.func(args)
        if out is not None:
            _print(out, args.json)
    except LancepartError as e:
        print(f"lancepart: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_LANCEPART
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
