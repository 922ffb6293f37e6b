"""Row-level update: ``SET column = <SQL expression>, ... WHERE <filter>`` in one publish
(docs/merge.md "Update").

An update is a *change* (:mod:`lancepart.write.merge`), evaluated on one ``__manifest``
snapshot:

* the candidates are the partition tables the pruner keeps for ``filter`` (every table without
  one), each at its published ``read_version``;
* in each candidate, the rows for which ``filter`` is TRUE (DataFusion, exactly as reads
  evaluate it) are found by row address, read whole, and get Lance deletion files;
* the new rows are those rows with every ``SET`` expression evaluated by DataFusion over the old
  row (all expressions see the old values, as in SQL) and cast to the column's type (a value
  that does not fit is :class:`~lancepart.errors.InvalidArgumentError` naming the column, the
  expression and the row);
* the new rows are written into their partitions by the write path: a row whose partition
  source changed moves to its new partition (a delete and an insert of the same commit, as a
  merge moves a row), into a table created for it if the partition is new.

The one commit producer then commits each touched table and publishes everything in ONE
``__manifest`` commit, rebased and retried like a merge: if a candidate's published version
moved (a concurrent append, delete, merge, update or compaction published first), the update is
evaluated again on the new snapshot, so two concurrent ``amount = amount + 1`` both count and
a row deleted meanwhile stays deleted. After ``max_retries`` redos,
:class:`~lancepart.errors.CommitConflictError` and nothing published. With a ``batch_id`` the
update publishes at most once.

The change feed shows an updated row as a ``delete`` of its old image and an ``insert`` of its
new one (an update has no key to pair the two by; a merge has, and pairs them as
``update_preimage`` / ``update_postimage``).

Refused before anything is read: an empty ``set``, a column the namespace does not have, an
expression DataFusion cannot plan over the namespace schema (an unknown column in it, a syntax
error), one whose type cannot be cast to the column's, and one that is not row-wise and
deterministic (``random()``, ``now()``, aggregates, windows, subqueries): an update must give
the same rows whenever it is evaluated again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import InvalidArgumentError, InvalidFilterError, InvalidSpecError
from lancepart.model.ids import check_location
from lancepart.results import CommitResult
from lancepart.storage.lance_io import open_table
from lancepart.storage.manifest import ManifestSnapshot, join_uri
from lancepart.util.parallel import map_threads
from lancepart.write.guard import commit_on_published
from lancepart.write.merge import (
    Candidates,
    Deletions,
    Evaluation,
    _check_main,
    _idents,
    apply_change,
    partition_tables,
)

if TYPE_CHECKING:
    from lancepart.handle import NamespaceHandle

log = logging.getLogger("lancepart.write")
_ADDR = "_rowaddr"


def check_set(schema: pa.Schema, assignments: Any) -> dict[str, str]:
    """``assignments`` (``update``'s ``set``) as ``{column: expression}``, checked against
    ``schema`` (see the module docstring); :class:`InvalidArgumentError` naming the column and
    the expression otherwise."""
    from lancepart.model.datafusion_udfs import check_row_wise

    if not isinstance(assignments, Mapping) or not assignments:
        raise InvalidArgumentError(f"set must be a non-empty mapping of column name to SQL expression, e.g. "
                                   f"{{'amount': 'amount * 2'}}; got {assignments!r}")
    out: dict[str, str] = {}
    for col, expr in assignments.items():
        if not isinstance(col, str) or schema.get_field_index(col) < 0:
            raise InvalidArgumentError(f"set: {col!r} is not a column of the namespace (columns: {schema.names})")
        if not isinstance(expr, str) or not expr.strip():
            raise InvalidArgumentError(f"set {col!r}: the value must be a SQL expression as a non-empty string "
                                       f"(a string literal is quoted: \"'US'\"); got {expr!r}")
        try:
            check_row_wise(expr)
        except InvalidSpecError as e:
            raise InvalidArgumentError(f"set {col!r}: {e}; an update must give the same rows whenever it is "
                                       f"evaluated again") from None
        out[col] = expr
    evaluate_set(schema.empty_table(), out, schema)  # plans every expression and its cast on the schema
    return out


def evaluate_set(rows: pa.Table, assignments: Mapping[str, str], schema: pa.Schema) -> pa.Table:
    """``rows`` (conformed to ``schema``) with each column of ``assignments`` replaced by its expression
    evaluated by DataFusion over the old rows and cast safely to the column's type."""
    from lancepart.read.snapshot import _filter_context

    ctx = _filter_context()
    ctx.register_record_batches("t", [rows.to_batches() or [pa.RecordBatch.from_pylist([], schema=rows.schema)]])
    try:
        values: dict[str, pa.ChunkedArray] = {}
        for col, expr in assignments.items():
            try:
                got = ctx.table("t").select_exprs(expr).to_arrow_table()
            except Exception as e:  # DataFusion raises plain Exception
                raise InvalidArgumentError(f"set {col!r} = {expr!r}: DataFusion cannot evaluate it over the "
                                           f"namespace's columns: {_short(e)}") from None
            if got.num_columns != 1 or got.num_rows != rows.num_rows:
                raise InvalidArgumentError(f"set {col!r} = {expr!r}: not one value per row (an aggregate?)")
            values[col] = _cast(got.column(0), schema.field(col), expr, rows)
    finally:
        ctx.deregister_table("t")
    for col, arr in values.items():
        i = rows.schema.get_field_index(col)
        rows = rows.set_column(i, rows.schema.field(i), arr)
    return rows


def _cast(values: pa.ChunkedArray, field: pa.Field, expr: str, rows: pa.Table) -> pa.ChunkedArray:
    if values.type.equals(field.type):
        out = values
    else:
        try:
            out = values.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidArgumentError(
                f"set {field.name!r} = {expr!r}: gives {values.type}, which cannot be cast to the column's type "
                f"{field.type}{_first_bad(values, field.type, rows)}: {e}") from None
    if not field.nullable and out.null_count:
        i = int(np.flatnonzero(out.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidArgumentError(f"set {field.name!r} = {expr!r}: NULL for a row of a NOT NULL column, e.g. "
                                   f"{_row(rows, i)}")
    return out


def _first_bad(values: pa.ChunkedArray, to: pa.DataType, rows: pa.Table) -> str:
    for i, v in enumerate(values.combine_chunks() if values.num_chunks else pa.array([], values.type)):
        try:
            pa.array([v.as_py()], values.type).cast(to, safe=True)
        except Exception:
            return f" (value {v.as_py()!r} of the row {_row(rows, i)})"
    return ""


def _row(rows: pa.Table, i: int) -> str:
    return "(" + ", ".join(f"{k}={v!r}" for k, v in rows.slice(i, 1).to_pylist()[0].items()) + ")"


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]


@dataclass(frozen=True)
class TablePlan:
    """What evaluating an update on one partition table needs (:func:`update_table`), on the
    driver or shipped to a Spark executor (:meth:`to_json`)."""

    root: str
    schema: pa.Schema  # the namespace schema
    read_schema: pa.Schema  # the same with the legacy field ids of the oldest tables
    filter: str | None
    scan_filter: str | None
    assignments: Mapping[str, str]

    def to_json(self) -> str:
        from lancepart.model.spec import schema_to_json

        return json.dumps({"root": self.root, "schema": schema_to_json(self.schema),
                           "read_schema": schema_to_json(self.read_schema), "filter": self.filter,
                           "scan_filter": self.scan_filter, "set": dict(self.assignments)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TablePlan:
        from lancepart.model.spec import schema_from_json

        d = json.loads(text)
        return cls(d["root"], schema_from_json(d["schema"]), schema_from_json(d["read_schema"]), d["filter"],
                   d["scan_filter"], d["set"])


def _matched(ds: Any, plan: TablePlan) -> tuple[np.ndarray, pa.Table | None]:
    """(sorted row addresses, whole rows with ``_rowaddr``) of the rows of ``ds`` the plan's
    filter matches: the filter's columns are read first, the whole rows only of what matched."""
    from lancepart.evolution.schema_evolution import read_columns
    from lancepart.write.deletions import address_predicate, matching_addresses

    names = plan.schema.names
    if plan.filter is None:  # every row, read once
        old = read_columns(ds, plan.read_schema, names, with_row_address=True)
        return np.sort(old.column(_ADDR).to_numpy()), old
    addr = np.sort(matching_addresses(ds, plan.read_schema, plan.filter, plan.scan_filter))
    if not len(addr):
        return addr, None
    old = read_columns(ds, plan.read_schema, names, filter=address_predicate(addr), with_row_address=True)
    return addr, old.filter(pc.is_in(old.column(_ADDR), pa.array(addr)))  # exact, pushed down or not


def update_table(plan: TablePlan, object_id: str, location: str, base: int,
                 storage_options: Mapping[str, str] | None = None, *, idents: bool = True
                 ) -> tuple[Deletions, pa.Table]:
    """One partition table's part of an update, on its published version ``base``: the deletion
    files of the rows the filter matches (not committed) and those rows with the ``SET``
    expressions applied. Runs anywhere: the driver's threads or a Spark task. ``idents``: record
    the identity of the fragments it touches (a re-evaluation that finds them unchanged keeps
    the deletions: :func:`lancepart.write.merge.commutes`)."""
    from lancepart.storage.error_mapping import table_errors
    from lancepart.write.deletions import deletion_files

    root, schema = plan.root, plan.schema
    so = dict(storage_options) if storage_options else None
    ds = open_table(join_uri(root, check_location(location, object_id, root)), version=base, storage_options=so)
    with table_errors(root, object_id, location, version=base, storage_options=so):  # named: table, file
        addr, old = _matched(ds, plan)
        updated, removed = deletion_files(ds, addr) if len(addr) else ([], [])
    rows = old.drop_columns([_ADDR]).cast(schema) if old is not None and len(addr) else schema.empty_table()
    rows = evaluate_set(rows, plan.assignments, schema)
    d = Deletions(object_id, location, base, updated, removed, len(addr))
    return (_idents(ds, d) if idents else d), rows


# the per-table evaluations of an update on one snapshot (version, [(object_id, location, base)]):
# each table's (deletions, new rows), in order; default: the driver's threads
UpdateTables = Callable[[int, Sequence[tuple[str, str, int]], TablePlan], list[tuple[Deletions, pa.Table]]]


def update(ns: NamespaceHandle, set: Mapping[str, str], filter: str | None = None, *, batch_id: str | None = None,
           max_retries: int = 20, max_rows_per_file: int = 1_048_576, properties: Mapping[str, str] | None = None,
           update_tables: UpdateTables | None = None, phases: dict[str, Any] | None = None) -> CommitResult:
    """Set ``set``'s columns to their SQL expressions on every published row matching
    ``filter`` (every row when None), in one publish (see the module docstring).
    ``details["rows_updated"]``. ``update_tables`` evaluates the tables elsewhere
    (``lancepart.spark.update``: in Spark tasks); the commit and its rebase stay here.

    >>> result = update(ns, {"amount": "amount * 2"}, "id = 1")
    >>> _ = ns.refresh()  # the handle reads the version the update published
    >>> result.details["rows_updated"], ns.to_table("id = 1", columns=["amount"]).to_pylist()
    (1, [{'amount': 20.0}])
    """
    from lancepart.arguments import check_filter
    from lancepart.evolution.schema_evolution import with_legacy_ids
    from lancepart.read.manifest_query import prune
    from lancepart.read.snapshot import apply_filter

    filter = check_filter(filter)
    ns.refresh()
    schema, specs, manifest = ns.schema, ns.specs, ns.manifest
    assignments = check_set(schema, set)
    if filter is not None:
        try:
            apply_filter(schema.empty_table(), filter)  # an unknown column fails here, before anything is read
        except InvalidArgumentError as e:
            raise InvalidFilterError(str(e)) from None
    read_schema = with_legacy_ids(schema, ns.snapshot().metadata)  # places the columns of the oldest tables
    plans: dict[str, TablePlan] = {}

    def candidates(snap: ManifestSnapshot) -> Candidates:
        if filter is None:
            plans["now"] = TablePlan(manifest.root, schema, read_schema, None, None, assignments)
            return partition_tables(snap)
        try:
            pruned = prune(filter, schema, specs, snap.table_pins())
        except InvalidArgumentError as e:
            raise InvalidFilterError(str(e)) from None
        plans["now"] = TablePlan(manifest.root, schema, read_schema, filter, pruned.scan_filter, assignments)
        return partition_tables(snap, {*pruned.kept.column("object_id").to_pylist()})

    def local(snapshot_version: int, todo: Sequence[tuple[str, str, int]], plan: TablePlan
              ) -> list[tuple[Deletions, pa.Table]]:
        return map_threads(lambda t: commit_on_published(manifest, snapshot_version, t[0], t[1], t[2], lambda: (
            update_table(plan, t[0], t[1], t[2], manifest.storage_options))), list(todo))

    tables = update_tables or local
    cache: dict[tuple[str, int], tuple[Deletions, pa.Table]] = {}  # a table whose version did not move: not again

    def evaluate(snap: ManifestSnapshot) -> Evaluation:
        cands = candidates(snap)
        _check_main(cands, "update")
        todo = [(oid, loc, v) for oid, (loc, v, _, _) in cands.items() if (oid, v) not in cache]
        for (oid, _, v), out in zip(todo, tables(snap.version, todo, plans["now"]) if todo else [], strict=True):
            cache[(oid, v)] = out
        done = [cache[(oid, v)] for oid, (_, v, _, _) in cands.items()]
        new = [r for _, r in done if r.num_rows]
        rows = pa.concat_tables(new) if new else schema.empty_table()
        details = {"set": dict(assignments), "filter": filter, "rows_updated": rows.num_rows, "tables_read": len(cands)}
        return Evaluation(cands, {d.object_id: d for d, _ in done}, rows, details)

    return apply_change(ns, evaluate, candidates, what="update", batch_id=batch_id, max_retries=max_retries,
                        max_rows_per_file=max_rows_per_file, properties=properties, phases=phases)
