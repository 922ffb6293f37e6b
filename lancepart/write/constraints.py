"""CHECK constraints of a namespace (docs/constraints.md): declared in ``__manifest``, enforced
by the one commit producer on every write path.

A constraint is a name and a SQL boolean expression over the namespace's columns (DataFusion,
row-wise and deterministic), kept as the root property ``lancepart.constraint.<name>`` of
``__manifest``, so every writer of the namespace sees it in the snapshot it commits on. A row
*satisfies* it when the expression is TRUE; FALSE and NULL break it (write
``amount IS NULL OR amount >= 0`` to let NULLs through).

Enforcement (:func:`check_tables`, step "constraints" of
:class:`lancepart.write.publish.CommitProducer`): before the ``__manifest`` commit, the rows an
operation adds to each table (its new fragments, and fragments whose deletions it undid) are
read (the constraints' columns only) and checked against the constraints declared on the
snapshot the commit is built on; on a rebase the check runs again on the newer snapshot, for
tables and constraints not checked yet. A breaking row fails the operation with
:class:`~lancepart.errors.ConstraintViolationError` and nothing is published. ``ns.write``
checks its input rows before it writes anything as well, to fail before the work.

Adding one (:func:`add_constraint`) is three steps, because Lance rebases a stale row commit
over a metadata commit without a conflict:

1. the published rows are checked (breaking rows: refused, nothing committed);
2. the declaration is committed (from then on writers built on that snapshot check it);
3. a *seal*: a ``__manifest`` row commit that changes no row but touches the fragment every row
   commit touches, so that any writer that read a snapshot older than the declaration conflicts
   with it and is rebased onto a snapshot that has the constraint; before it commits, the rows
   tables gained since step 1 are checked. Rows that break it there (a writer that read a
   snapshot older than the declaration published them) withdraw the declaration and raise.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lancepart.errors import ConstraintViolationError, InvalidArgumentError
from lancepart.model.constraints import PROPERTY_PREFIX, check_constraint, columns_of, constraints
from lancepart.results import CommitResult
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import Manifest, ManifestChanges, ManifestSnapshot, join_uri, set_root_property
from lancepart.util import faults
from lancepart.util.parallel import map_threads

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

EXAMPLE_ROWS = 3  # rows a violation names


def namespace_schema(metadata: Mapping[str, str]) -> pa.Schema:
    """The namespace schema of root properties ``metadata``, with the legacy field ids the
    oldest tables need to be read by field id."""
    from lancepart.evolution.schema_evolution import SCHEMA_KEY, with_legacy_ids
    from lancepart.model.spec import schema_from_json

    return with_legacy_ids(schema_from_json(metadata[SCHEMA_KEY]), metadata)


def violations(rows: pa.Table, cons: Mapping[str, str]) -> list[tuple[str, int, pa.Table]]:
    """For each constraint of ``cons`` that rows of ``rows`` (namespace column names) break:
    ``(name, how many, the first few of them)``."""
    from lancepart.read.snapshot import apply_filter

    out = []
    if len(cons) > 1 and rows.num_rows:  # one pass over all rows; each constraint only on the rows it found
        rows = apply_filter(rows, " OR ".join(f"NOT coalesce(({expr}), false)" for expr in cons.values()))
    for name, expr in cons.items():
        if not rows.num_rows:
            break
        bad = apply_filter(rows, f"NOT coalesce(({expr}), false)")
        if bad.num_rows:
            out.append((name, bad.num_rows, bad.slice(0, EXAMPLE_ROWS)))
    return out


def violation_error(cons: Mapping[str, str], found: Sequence[tuple[str, int, pa.Table]], what: str,
                    where: str = "") -> ConstraintViolationError:
    name, count, rows = found[0]
    shown = rows.to_pylist()
    text = "; ".join("(" + ", ".join(f"{k}={v!r}" for k, v in r.items()) + ")" for r in shown)
    others = f"; constraints {[n for n, _, _ in found[1:]]} are broken too" if len(found) > 1 else ""
    return ConstraintViolationError(
        f"{what}: {count} row(s){where} break constraint {name!r} ({cons[name]}), e.g. {text}{others}; "
        f"nothing was published", constraint=name, expression=cons[name], rows=shown, count=count)


def check_rows(rows: pa.Table, cons: Mapping[str, str], what: str) -> None:
    """:class:`ConstraintViolationError` if rows of ``rows`` (namespace column names; columns a
    constraint names but ``rows`` lacks are NULL) break a constraint of ``cons``."""
    if not cons or not rows.num_rows:
        return
    found = violations(rows, cons)
    if found:
        raise violation_error(cons, found, what)


@dataclass(frozen=True)
class TableRows:
    """Rows a table gained: those of version ``version`` of the table at ``location`` not in
    version ``base`` (all of them when ``base`` is None)."""

    object_id: str
    location: str
    base: int | None
    version: int


def added_fragments(ds: Any, base: Any | None) -> list[Any] | None:
    """The fragments of ``ds`` holding rows that ``base`` (an older or newer version of the same
    table, or None) does not show: new fragment ids, and fragments with fewer deleted rows
    (a rollback brings rows back). None: all of them."""
    if base is None:
        return None
    before = {f.fragment_id: f.metadata for f in base.get_fragments()}
    out = []
    for f in ds.get_fragments():
        old = before.get(f.fragment_id)
        if old is None or _live(f.metadata) > _live(old):
            out.append(f)
    return out


def _live(md: Any) -> int:
    deleted = md.deletion_file.num_deleted_rows if md.deletion_file is not None else 0
    return md.physical_rows - (deleted or 0)


def check_tables(manifest: Manifest, metadata: Mapping[str, str], tables: Sequence[TableRows], what: str,
                 cons: Mapping[str, str] | None = None) -> int:
    """Check the rows ``tables`` gained against ``cons`` (default: the constraints declared in
    ``metadata``, the root properties of the snapshot the commit is built on);
    :class:`ConstraintViolationError` naming how many rows in how many tables break one, and a
    few of them whole. Reads only the constraints' columns of the added fragments, tables in
    parallel. Returns the rows checked."""
    cons = constraints(metadata) if cons is None else cons
    if not cons or not tables:
        return 0
    from lancepart.evolution.schema_evolution import read_columns

    schema = namespace_schema(metadata)
    cols = columns_of(schema, cons)
    so = manifest.storage_options

    def one(t: TableRows) -> tuple[int, list[tuple[str, int, pa.Table]]]:
        uri = join_uri(manifest.root, t.location)
        ds = open_table(uri, version=t.version, storage_options=so)
        base = open_table(uri, version=t.base, storage_options=so) if t.base is not None else None
        frags = added_fragments(ds, base)
        if frags is not None and not frags:
            return 0, []
        rows = read_columns(ds, schema, cols, fragments=frags, with_row_address=True)
        found = violations(rows, cons)
        return rows.num_rows, [(name, n, _whole_rows(ds, schema, bad)) for name, n, bad in found]

    results = map_threads(one, tables)
    broken: dict[str, list[Any]] = {}
    for t, (_, found) in zip(tables, results, strict=True):
        for name, n, examples in found:
            entry = broken.setdefault(name, [0, [], []])
            entry[0] += n
            entry[1].append(t.object_id)
            entry[2].append(examples)
    if broken:
        merged = [(name, n, pa.concat_tables(ex, promote_options="permissive").slice(0, EXAMPLE_ROWS))
                  for name, (n, _, ex) in broken.items()]
        first = next(iter(broken.values()))[1]
        where = (f" of partition table {first[0]}" if len(first) == 1 else
                 f" in {len(first)} partition tables ({', '.join(first[:2])}{', ...' if len(first) > 2 else ''})")
        raise violation_error(cons, merged, what, where)
    return sum(n for n, _ in results)


def _whole_rows(ds: Any, schema: pa.Schema, bad: pa.Table) -> pa.Table:
    """The rows of ``bad`` (constraint columns and ``_rowaddr``) read whole from ``ds`` (what a
    violation names); the constraint columns alone if Lance cannot find them by address."""
    from lancepart.evolution.schema_evolution import conform, legacy_md, source_columns

    addrs = bad.column("_rowaddr").to_pylist()
    try:
        mapping = source_columns(ds.schema, legacy_md(schema), schema, schema.names)
        present = [n for n in dict.fromkeys(mapping.values()) if n is not None]
        got = ds.scanner(columns=present, filter=f"_rowaddr IN ({', '.join(map(str, addrs))})").to_table()
        if got.num_rows == len(addrs):
            return conform(got, mapping, pa.schema([f.remove_metadata() for f in schema]))
    except (ValueError, OSError, KeyError):
        pass
    return bad.drop_columns(["_rowaddr"])


def check_published(manifest: Manifest, snap: ManifestSnapshot, cons: Mapping[str, str], what: str,
                    since: Mapping[str, int] | None = None) -> tuple[int, dict[str, int]]:
    """Check the published rows of ``snap`` against ``cons`` (only what tables gained since the
    versions ``since`` names, when given); ``(rows checked, the versions checked by object id)``."""
    pins = published_versions(snap)
    todo = []
    for oid, (location, version) in pins.items():
        before = (since or {}).get(oid)
        if since is not None and before == version:
            continue
        todo.append(TableRows(oid, location, before, version))
    rows = check_tables(manifest, snap.metadata, todo, what, cons)
    return rows, {oid: v for oid, (_, v) in pins.items()}


def published_versions(snap: ManifestSnapshot) -> dict[str, tuple[str, int]]:
    """``object_id -> (location, read_version)`` of the partition tables published on main."""
    from lancepart.model.ids import partition_spec_id

    cols = ["object_id", "location", "read_version", "read_branch", "read_tag"]
    return {r["object_id"]: (r["location"], r["read_version"]) for r in snap.table_pins().select(cols).to_pylist()
            if partition_spec_id(r["object_id"]) is not None and r["read_version"] is not None
            and r["read_branch"] is None and r["read_tag"] is None}


def add_constraint(ns: NamespaceHandle, name: str, expression: str, *, max_retries: int = 20,
                   properties: Mapping[str, str] | None = None) -> CommitResult:
    """Declare the CHECK constraint ``name`` (see the module docstring for the three steps).
    Adding the same definition again finishes an interrupted add; another definition under a
    taken name is :class:`InvalidArgumentError` (drop it first)."""
    started = time.monotonic()
    ns.refresh()
    snap = ns.snapshot()
    expression = check_constraint(ns.schema, name, expression)
    key = PROPERTY_PREFIX + name
    current = snap.metadata.get(key)
    if current is not None and current != expression:
        raise InvalidArgumentError(f"a constraint named {name!r} is declared already as {current!r}; drop it first "
                                   f"(ns.drop_constraint({name!r})) to declare it as {expression!r}")
    what = f"add_constraint {name}"
    cons = {name: expression}
    try:
        checked, since = check_published(ns.manifest, snap, cons, what)
    except ConstraintViolationError as e:
        raise _not_added(e, name) from None

    def same(value: str | None) -> bool:
        if value is not None and value != expression:
            raise InvalidArgumentError(f"a constraint named {name!r} was declared meanwhile as {value!r}; "
                                       f"nothing was changed")
        return value == expression

    set_root_property(ns.manifest, key, expression, same, max_retries, properties)
    faults.checkpoint("before_constraint_seal")
    seen = {"rows": checked}

    def seal(s: ManifestSnapshot) -> tuple[ManifestChanges, None]:
        nonlocal since
        if s.metadata.get(key) != expression:
            raise InvalidArgumentError(f"constraint {name!r} was dropped or redeclared while it was being added; "
                                       f"nothing was changed")
        rows, since = check_published(ns.manifest, s, cons, what, since)
        seen["rows"] += rows
        return ManifestChanges(touch=True), None

    try:
        new, _, retries = ns.manifest.update(seal, max_retries=max_retries, what=what,
                                             transaction_properties=properties)
    except ConstraintViolationError as e:
        set_root_property(ns.manifest, key, None, lambda value: value != expression, max_retries, properties)
        raise _not_added(e, name) from None
    ns.refresh()
    return CommitResult(manifest_version=new.version, retries=retries, seconds=round(time.monotonic() - started, 3),
                        details={"operation": "add_constraint", "constraint": name, "expression": expression,
                                 "rows_checked": seen["rows"], "tables": len(since)})


def _not_added(e: ConstraintViolationError, name: str) -> ConstraintViolationError:
    text = str(e).replace("; nothing was published", f"; constraint {name!r} was not added")
    return ConstraintViolationError(text, constraint=e.constraint, expression=e.expression, rows=e.rows,
                                    count=e.count)


def drop_constraint(ns: NamespaceHandle, name: str, *, max_retries: int = 20,
                    properties: Mapping[str, str] | None = None) -> CommitResult:
    """Remove the constraint ``name``; :class:`InvalidArgumentError` naming the declared ones if
    there is none of that name."""
    started = time.monotonic()
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"constraint name: a non-empty str, not {name!r}")
    key = PROPERTY_PREFIX + name
    ns.refresh()
    previous = set_root_property(ns.manifest, key, None, lambda value: value is None, max_retries, properties)
    ns.refresh()
    if previous is None:
        declared = sorted(constraints(ns.snapshot().metadata)) or "none"
        raise InvalidArgumentError(f"no constraint named {name!r} is declared in {ns.root} (declared: {declared})")
    return CommitResult(manifest_version=ns.snapshot().version, seconds=round(time.monotonic() - started, 3),
                        details={"operation": "drop_constraint", "constraint": name, "expression": previous})
