"""``create_index`` / ``drop_index`` / ``list_indexes`` over every published partition table.

Two ``__manifest`` commits (docs/indexes.md):

1. the declaration: the root property ``lancepart.index.<name>`` is set (or removed). Lance
   cannot change table metadata and rows in one commit; the declaration goes first so that
   every write that starts from then on keeps the index on the tables it touches;
2. ONE publish moving ``read_version`` of every table that got the index (or lost it): a
   reader sees every partition indexed, or none. Each table's index is built on its *published*
   version (:func:`lancepart.index.apply_on_exact`). On a conflict the publish rebases: a table
   whose published version moved meanwhile (a concurrent append, delete or compaction) is
   looked at again on the new one, and new partitions published meanwhile are indexed too.

A build killed between the two leaves the declaration with tables not (yet) indexed: a search
scans them flat, ``verify`` reports ``index_missing``, and running ``create_index`` again (or
the next compaction) finishes it. Nothing is lost: no row is written by an index build.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lancepart.errors import CommitConflictError, InvalidArgumentError
from lancepart.evolution.schema_evolution import LEGACY_FIELD_IDS_KEY, columns_of
from lancepart.index import (
    Drop,
    IndexDeclaration,
    Maintain,
    PreparedCache,
    apply_on_exact,
    declarations,
    make_declaration,
)
from lancepart.model.ids import check_location
from lancepart.results import CommitResult
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import Manifest, ManifestSnapshot, join_uri, set_root_property
from lancepart.util.parallel import map_threads
from lancepart.write.publish import Made, TableChange, TableWork, publish_changes

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.index")

# (object_id, location, published read_version) of each table to work on
TableTodo = tuple[str, str, int]
# the per-table work of one publish, given the snapshot version and the tables: (object_id, base, version)
ApplyTables = Callable[[int, Sequence[TableTodo]], list[tuple[str, int, int]]]


def op_to_json(kind: str, decls: Sequence[IndexDeclaration] = (), rebuild: Sequence[str] = (),
               names: Sequence[str] = (), namespace_md: Mapping[str, str] | None = None) -> str:
    """The per-table index operation as JSON (Spark tasks run it); ``namespace_md`` (the root
    properties: the schema, the legacy field ids) places the declared column in tables that still
    hold it under an older name."""
    md = {k: v for k, v in (namespace_md or {}).items() if k in ("schema", LEGACY_FIELD_IDS_KEY)}
    return json.dumps({"kind": kind, "decls": [d.to_dict() for d in decls], "rebuild": list(rebuild),
                       "names": list(names), "namespace_md": md})


def index_table(root: str, object_id: str, location: str, base: int, op_json: str,
                storage_options: Mapping[str, str] | None = None, prepared: PreparedCache | None = None) -> int:
    """Apply the index operation ``op_json`` (:func:`op_to_json`) to version ``base`` of one
    partition table; the version holding the result (``base`` if nothing was to do). Runs
    anywhere: the driver's threads or a Spark task. ``prepared`` keeps the index builds across
    the attempts of one operation (:func:`lancepart.index.apply_on_exact`)."""
    so = dict(storage_options) if storage_options else None
    uri = join_uri(root, check_location(location, object_id, root))
    spec = json.loads(op_json)
    if spec["kind"] == "drop":
        op: Maintain | Drop = Drop(spec["names"])
    else:
        decls = [IndexDeclaration(d["name"], d["column"], d["index_type"], d["params"], d["min_rows"])
                 for d in spec["decls"]]
        op = Maintain(decls, rebuild=spec["rebuild"], storage_options=so,
                      column_of=columns_of(spec.get("namespace_md")),
                      base=open_table(uri, version=base, storage_options=so) if spec["rebuild"] else None)
    return apply_on_exact(uri, base, op, so, f"partition table {location} (index)", prepared=prepared)


def publish_tables(manifest: Manifest, op_json: str, what: str, *, max_retries: int = 20,
                   apply_tables: ApplyTables | None = None,
                   still_wanted: Callable[[ManifestSnapshot], None] | None = None,
                   leave_out_unreadable: bool = False, properties: Mapping[str, str] | None = None
                   ) -> CommitResult:
    """Apply ``op_json`` to the published version of every partition table and move all the
    changed ``read_version`` in ONE ``__manifest`` commit, through the one publish path (tables
    pinned to a branch or tag are skipped); ``apply_tables`` runs the per-table work elsewhere
    (Spark tasks). ``leave_out_unreadable``: a table whose published version is gone or cannot
    be read is left out and named in the result's ``failures`` instead of failing it all."""
    from lancepart.model.ids import partition_spec_id

    started = time.monotonic()
    seen: dict[str, Any] = {}
    prepared: PreparedCache = {}  # a table whose published version moves is not built again

    def change(oid: str) -> TableChange:
        return TableChange(oid, commit=lambda published, location: index_table(
            manifest.root, oid, location, published, op_json, manifest.storage_options, prepared))

    def plan(snap: ManifestSnapshot) -> list[TableChange]:
        cols = ["object_id", "read_version", "read_branch", "read_tag"]
        rows = [r for r in snap.table_pins().select(cols).to_pylist() if partition_spec_id(r["object_id"]) is not None]
        pinned = sorted(r["object_id"] for r in rows if r["read_branch"] is not None or r["read_tag"] is not None)
        rows = [r for r in rows if r["read_version"] is not None and r["object_id"] not in set(pinned)]
        seen.update(tables=len(rows), pinned=pinned)
        return [change(r["object_id"]) for r in rows]

    def run(snapshot_version: int, works: Sequence[TableWork]) -> list[Made]:
        todo = [(w.change.object_id, w.location, w.published) for w in works]
        return [Made(oid, base, version) for oid, base, version in apply_tables(snapshot_version, todo)]

    pub = publish_changes(manifest, plan, what=what, check=still_wanted, max_retries=max_retries,
                          check_constraints=False,
                          run=run if apply_tables is not None else None, leave_out_unreadable=leave_out_unreadable,
                          properties=properties)
    changed = {oid: m.version for oid, m in pub.made.items()}
    return CommitResult(
        manifest_version=pub.snapshot.version, partitions_touched=len(changed), retries=pub.retries,
        seconds=round(time.monotonic() - started, 3),
        details={"operation": what, "tables": seen.get("tables", 0), "tables_changed": sorted(changed),
                 "pinned_skipped": seen.get("pinned", [])},
        failures=dict(pub.failures))


def create_index(ns: NamespaceHandle, column: str, index_type: str, *, name: str | None = None,
                 replace: bool = False, min_rows: int | None = None, max_retries: int = 20,
                 apply_tables: Callable[[str], ApplyTables] | None = None,
                 properties: Mapping[str, str] | None = None, **params: Any) -> CommitResult:
    """Declare an index and build it on every published partition table of at least ``min_rows``
    rows, published in one ``__manifest`` commit. Running it again with the same definition
    finishes an interrupted build (a no-op when every table has it); a different definition
    under a taken name needs ``replace=True`` (every table's index is then rebuilt)."""
    ns.refresh()
    decl = make_declaration(ns.schema, column, index_type, name, min_rows, params)
    value = decl.to_json()

    def same(current: str | None) -> bool:
        if current is None or current == value:
            return current == value
        if not replace:
            raise InvalidArgumentError(
                f"an index named {decl.name!r} is declared already with another definition ({current}); "
                f"pass replace=True to rebuild it as {value}, or choose another name")
        return False

    previous = set_root_property(ns.manifest, decl.key, value, same, max_retries, properties)
    rebuild = [decl.name] if previous is not None and previous != value else []
    log.info("index %s declared in %s: %s", decl.name, ns.root, value)

    def still_wanted(snap: ManifestSnapshot) -> None:
        if snap.metadata.get(decl.key) != value:
            raise CommitConflictError(f"index {decl.name!r} was dropped or redeclared while it was being built; "
                                      f"nothing was published")

    op_json = op_to_json("maintain", [decl], rebuild, namespace_md=ns.snapshot().metadata)
    result = publish_tables(ns.manifest, op_json, f"create_index {decl.name}", max_retries=max_retries,
                            apply_tables=apply_tables(op_json) if apply_tables else None, still_wanted=still_wanted,
                            properties=properties)
    result.details.update(index=decl.to_dict())
    return result


def drop_index(ns: NamespaceHandle, name: str, *, max_retries: int = 20,
               apply_tables: Callable[[str], ApplyTables] | None = None,
               properties: Mapping[str, str] | None = None) -> CommitResult:
    """Remove the declaration ``name`` (from then on no write keeps it), then drop the index from
    every published partition table in one publish. :class:`InvalidArgumentError` if it is not
    declared and no table has it."""
    ns.refresh()
    key = IndexDeclaration(name, "", "").key
    previous = set_root_property(ns.manifest, key, None, lambda current: current is None, max_retries, properties)
    op_json = op_to_json("drop", names=[name])
    result = publish_tables(ns.manifest, op_json, f"drop_index {name}", max_retries=max_retries,
                            apply_tables=apply_tables(op_json) if apply_tables else None, properties=properties)
    if previous is None and not result.partitions_touched:
        declared = ", ".join(d.name for d in declarations(ns.manifest.dataset().metadata)) or "none"
        raise InvalidArgumentError(f"no index named {name!r} is declared in {ns.root} (declared: {declared})")
    return result


def maintain_all(manifest: Manifest, *, max_retries: int = 20,
                 apply_tables: Callable[[str], ApplyTables] | None = None) -> CommitResult | None:
    """Bring every declared index up to date on every published partition table (build where a
    table passed ``min_rows``, ``optimize_indices`` where fragments are outside it, rebuild where
    it names fragments gone) in one publish; None when no index is declared. The compaction job
    runs it after its own publish. A table whose published version cannot be read is left
    out, named in the result's ``failures``: the others still get their indexes."""
    decls = declarations(manifest.dataset().metadata)
    if not decls:
        return None
    wanted = {d.key: d.to_json() for d in decls}

    def still_wanted(snap: ManifestSnapshot) -> None:
        if any(snap.metadata.get(k) != v for k, v in wanted.items()):
            raise CommitConflictError("a declared index was dropped or redeclared during index maintenance; "
                                      "nothing was published (the next run picks the new declarations up)")

    op_json = op_to_json("maintain", decls, namespace_md=manifest.dataset().metadata)
    return publish_tables(manifest, op_json, "index maintenance", max_retries=max_retries,
                          apply_tables=apply_tables(op_json) if apply_tables else None, still_wanted=still_wanted,
                          leave_out_unreadable=True)


def coverage(root: str, snap: ManifestSnapshot, decls: Sequence[IndexDeclaration],
             storage_options: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Per declaration: how many published partition tables there are, how many have at least
    ``min_rows`` rows, how many carry the index, and the object ids of those above the
    threshold without it."""
    from lancepart.model.ids import partition_spec_id

    so = dict(storage_options) if storage_options else None
    cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
    rows = [r for r in snap.table_pins().select(cols).to_pylist()
            if partition_spec_id(r["object_id"]) is not None and r["read_version"] is not None]

    def one(r: dict[str, Any]) -> tuple[str, int, set[str]]:
        uri = join_uri(root, check_location(r["location"], r["object_id"], root))
        ds = open_table(uri, version=r["read_version"], storage_options=so)
        return r["object_id"], ds.count_rows(), {i.name for i in ds.describe_indices()}

    seen = map_threads(one, rows) if decls and rows else []
    out = {}
    for d in decls:
        eligible = [(oid, names) for oid, n, names in seen if n >= d.min_rows]
        out[d.name] = {"tables": len(rows), "above_min_rows": len(eligible),
                       "indexed": sum(1 for _, n, names in seen if d.name in names),
                       "missing": sorted(oid for oid, names in eligible if d.name not in names)}
    return out


def list_indexes(ns: NamespaceHandle) -> list[dict[str, Any]]:
    """The declared indexes of the snapshot ``ns`` reads, each with its coverage
    (:func:`coverage`)."""
    decls = declarations(ns.snapshot().metadata)
    cov = coverage(ns.root, ns.snapshot(), decls, ns.storage_options)
    return [{**d.to_dict(), **cov[d.name]} for d in decls]
