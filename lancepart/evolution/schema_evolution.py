"""Namespace schema evolution with stable field ids (spec "Schema", "Column removal resistant").

``update_schema`` changes the ``schema`` root property of ``__manifest`` in ONE commit (a Lance
``UpdateConfig`` of the table metadata, recorded as ``lancepart.operation = update_schema``):

* **add** — nullable fields only, under names not in use; each gets a fresh ``lance:field_id``
  above the highest id *ever* used, kept in the root property ``lancepart.max_field_id`` so that
  the id of a dropped column is never given again;
* **rename** — the field keeps its id, so partition specs on it (``source_ids``) keep working;
* **drop** — the field leaves the schema; a partition spec whose source it was stays, and its
  transform reads the source as NULL (new rows go to the NULL partition);
* **widen** — only lossless type changes (int32 -> int64, float32 -> float64, wider decimals,
  string -> large_string, ...).

Partition tables are not rewritten. Each table records, in its Arrow schema metadata under
:data:`TABLE_FIELD_IDS_KEY`, the field id of each of its columns (Lance keeps schema metadata
but drops the reserved ``lance:`` field metadata). Reads present every table in the current
schema by field id (:func:`conform`); a table without that record (created before the first
schema change) is read by the names of the schema it was written under, which the first change
saves in the root property :data:`LEGACY_FIELD_IDS_KEY`. A write to an outdated table first
brings it up to date (:func:`upgrade_table`), and so does compaction. docs/schema-evolution.md.

Concurrency: two ``update_schema`` calls touching the root metadata conflict in Lance; the loser
re-reads the newest schema, validates its change against it again and retries. A publish (an
``Update`` of the rows) does not conflict with it: both land.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa

from lancepart.errors import (
    InvalidArgumentError,
    SchemaMismatchError,
)
from lancepart.model.constraints import check_still_valid
from lancepart.model.ids import SCHEMA_KEY
from lancepart.model.spec import (
    FIELD_ID_KEY_BYTES,
    _walk,
    assign_field_ids,
    field_id_of,
    schema_from_json,
    schema_to_json,
)
from lancepart.results import CommitResult
from lancepart.storage.manifest import Manifest, ManifestChanges, ManifestSnapshot
from lancepart.util import faults

log = logging.getLogger("lancepart.schema")

#: Root property: the highest ``lance:field_id`` ever given in this namespace (never reused).
MAX_FIELD_ID_KEY = "lancepart.max_field_id"
#: Root property: ``{column name: field id}`` of the schema before its first change: how a
#: partition table without :data:`TABLE_FIELD_IDS_KEY` is read.
LEGACY_FIELD_IDS_KEY = "lancepart.legacy_field_ids"
#: Arrow schema metadata key of a partition table: ``{column name: field id}`` of its columns.
TABLE_FIELD_IDS_KEY = b"lancepart.field_ids"


# --------------------------------------------------------------------------- the change itself


def max_field_id(schema: pa.Schema, metadata: Mapping[str, str]) -> int:
    """The highest field id ever used: the root property, or the highest id in ``schema``."""
    ids = [fid for _, f in _walk(schema) if (fid := field_id_of(f)) is not None]
    recorded = metadata.get(MAX_FIELD_ID_KEY)
    return max([*ids, int(recorded) if recorded is not None else -1])


def name_ids(schema: pa.Schema) -> dict[str, int]:
    """``{top-level column name: field id}`` of a namespace schema."""
    return {f.name: field_id_of(f) for f in schema}


def _widening(src: pa.DataType, dst: pa.DataType) -> bool:
    from lancepart.model.transforms import losslessly_castable

    T = pa.types
    if src == dst or T.is_null(src):
        return False
    if any(p(dst) for p in (T.is_string_view, T.is_binary_view, T.is_date64)):
        return False  # not a storage type Lance keeps
    return losslessly_castable(src, dst)


def apply_change(schema: pa.Schema, metadata: Mapping[str, str], add: Sequence[pa.Field], rename: Mapping[str, str],
                 drop: Sequence[str], widen: Mapping[str, pa.DataType]) -> tuple[pa.Schema, int]:
    """The schema after the change and the new highest field id; a typed error naming the column
    for a change the rules refuse. Names in ``rename``/``drop``/``widen`` are current names;
    names in ``add`` must be free once the drops and renames are done.

    1. the names ``rename``, ``drop`` and ``widen`` use are columns, none dropped twice or both
       dropped and changed;
    2. each column kept, widened and renamed (:func:`_changed_field`);
    3. the added columns checked (:func:`_check_added`) and given fresh field ids;
    4. the new schema checked whole."""
    _check_changed_names(schema.names, rename, drop, widen)
    fields = {f.name: f for f in schema}
    out = [_changed_field(f, rename, widen) for f in schema if f.name not in drop]
    taken = [f.name for f in out]
    if dup := sorted({n for n in taken if taken.count(n) > 1}):
        raise InvalidArgumentError(f"update_schema rename: name(s) {dup} would be used by two columns")
    top = max_field_id(schema, metadata)
    added = _check_added(add, taken)
    if added:
        fresh = assign_field_ids(pa.schema(added), next_id=top + 1)
        added = list(fresh)
        top = max([top, *(field_id_of(g) for _, g in _walk(added))])
    if not out and not added:
        raise InvalidArgumentError("update_schema drop: the namespace schema would have no column left")
    new = pa.schema(out + added, metadata=schema.metadata)
    schema_to_json(new)  # duplicate names
    assign_field_ids(new)  # duplicate ids
    if new_names := [n for n in rename.values() if n in fields and n not in drop]:
        # also a swap or a chain (a -> b, b -> c): do it in two calls
        raise InvalidArgumentError(f"update_schema rename: name(s) {new_names} are already in use")
    return new, top


def _check_changed_names(names: list[str], rename: Mapping[str, str], drop: Sequence[str],
                         widen: Mapping[str, pa.DataType]) -> None:
    for what, cols in (("rename", list(rename)), ("drop", list(drop)), ("widen", list(widen))):
        unknown = [c for c in cols if c not in names]
        if unknown:
            raise InvalidArgumentError(f"update_schema {what}: column(s) {unknown} are not in the namespace "
                                       f"schema (columns: {names})")
    if dup := sorted({c for c in drop if list(drop).count(c) > 1}):
        raise InvalidArgumentError(f"update_schema drop: column(s) {dup} named twice")
    both = sorted(set(drop) & (set(rename) | set(widen)))
    if both:
        raise InvalidArgumentError(f"update_schema: column(s) {both} are both dropped and renamed/widened")


def _changed_field(f: pa.Field, rename: Mapping[str, str], widen: Mapping[str, pa.DataType]) -> pa.Field:
    """Column ``f`` widened and renamed as asked (its metadata, and so its field id, kept)."""
    if f.name in widen:
        new_type = widen[f.name]
        if not isinstance(new_type, pa.DataType):
            raise InvalidArgumentError(f"update_schema widen: column {f.name!r}: {new_type!r} is not a "
                                       f"pyarrow DataType")
        if not _widening(f.type, new_type):
            raise SchemaMismatchError(
                f"update_schema widen: column {f.name!r} is {f.type}; {new_type} is not a lossless widening "
                f"(allowed: wider integers, float16/32 -> float64, decimal(p,s) -> decimal(p'>=p,s), "
                f"string -> large_string, binary -> large_binary)")
        f = pa.field(f.name, new_type, f.nullable, f.metadata)
    if f.name in rename:
        target = rename[f.name]
        if not isinstance(target, str) or not target or target == f.name:
            raise InvalidArgumentError(f"update_schema rename: column {f.name!r} -> {target!r} is not a new name")
        f = f.with_name(target)
    return f


def _check_added(add: Sequence[pa.Field], taken: list[str]) -> list[pa.Field]:
    """The columns to add, each a nullable pyarrow Field without a field id whose name is not in
    ``taken`` (the kept columns' names after the renames) nor used by another added one."""
    taken = list(taken)
    added: list[pa.Field] = []
    for f in add:
        if not isinstance(f, pa.Field):
            raise InvalidArgumentError(f"update_schema add: {f!r} is not a pyarrow Field")
        if not f.nullable:
            raise SchemaMismatchError(f"update_schema add: column {f.name!r} must be nullable (rows already "
                                      f"written have no value for it)")
        if not f.name or f.name in taken:
            raise InvalidArgumentError(f"update_schema add: column name {f.name!r} is already in use")
        if any(FIELD_ID_KEY_BYTES in (g.metadata or {}) for _, g in _walk([f])):
            raise InvalidArgumentError(f"update_schema add: column {f.name!r} carries a field id; new columns get "
                                       f"fresh ones")
        taken.append(f.name)
        added.append(f)
    return added


def _check_specs(schema: pa.Schema, metadata: Mapping[str, str]) -> None:
    """Every published partition spec still evaluates against the new schema (a widened source
    must keep its transform valid; a dropped source is allowed: it reads as NULL)."""
    from lancepart.model.spec import PartitionSpec
    from lancepart.model.transforms import validate_field

    ids = {field_id_of(f) for f in schema}
    for k, v in metadata.items():
        if not k.startswith("partition_spec_v"):
            continue
        for pf in PartitionSpec.from_json(v).fields:
            if all(s in ids for s in pf.source_ids):
                try:
                    validate_field(pf, schema)
                except Exception as e:
                    raise SchemaMismatchError(f"update_schema: partition field {pf.field_id!r} ({k}) would no longer "
                                              f"evaluate on the new schema: {e}") from None


def _index_declarations(metadata: Mapping[str, str], rename: Mapping[str, str], drop: Sequence[str]
                        ) -> dict[str, str]:
    """The declared indexes (docs/indexes.md) the change touches, updated in the same commit: a
    renamed column's declarations follow it (Lance's indexes on the tables follow the field id).
    Dropping a column a declaration names is refused: drop the index first."""
    import dataclasses

    from lancepart.index import declarations

    out = {}
    for d in declarations(metadata):
        if d.column in drop:
            raise InvalidArgumentError(f"update_schema drop: column {d.column!r} has the declared index {d.name!r}; "
                                       f"drop the index first (ns.drop_index({d.name!r})); nothing was published")
        if d.column in rename:
            out[d.key] = dataclasses.replace(d, column=rename[d.column]).to_json()
    return out


def update_schema(manifest: Manifest, add: Sequence[pa.Field] | None = None, rename: Mapping[str, str] | None = None,
                  drop: Sequence[str] | None = None, widen: Mapping[str, pa.DataType] | None = None, *,
                  max_retries: int = 20, properties: Mapping[str, str] | None = None) -> CommitResult:
    """Apply the change to the ``schema`` root property in one ``__manifest`` commit; on a
    conflict with a concurrent schema change, re-validate against the newest schema and retry."""
    started = time.monotonic()
    if isinstance(drop, str):  # one column
        drop = [drop]
    add, rename, drop, widen = list(add or []), dict(rename or {}), list(drop or []), dict(widen or {})
    if not (add or rename or drop or widen):
        raise InvalidArgumentError("update_schema: nothing to change (give add, rename, drop or widen)")
    from lancepart.model.predicates import check_column_names

    check_column_names([f.name for f in add if isinstance(f, pa.Field)] + [n for n in rename.values()
                                                                            if isinstance(n, str)], "update_schema")
    out: dict[str, Any] = {}

    def mutate(snap: ManifestSnapshot) -> tuple[ManifestChanges, None]:
        md = snap.metadata
        current = schema_from_json(md[SCHEMA_KEY])
        new, top = apply_change(current, md, add, rename, drop, widen)
        _check_specs(new, md)
        check_still_valid(md, new, "update_schema")
        updates = {SCHEMA_KEY: json.dumps(schema_to_json(new), separators=(",", ":")),
                   MAX_FIELD_ID_KEY: str(top), **_index_declarations(md, rename, drop)}
        if LEGACY_FIELD_IDS_KEY not in md:
            updates[LEGACY_FIELD_IDS_KEY] = json.dumps(name_ids(current), separators=(",", ":"), sort_keys=True)
        out.update(new=new, top=top)
        faults.checkpoint("before_schema_commit")
        return ManifestChanges(metadata=updates), None

    committed, _, retries = manifest.update(mutate, max_retries=max_retries, what="update_schema",
                                            transaction_properties=properties)
    new, top = out["new"], out["top"]
    log.info("schema of %s updated (add=%s rename=%s drop=%s widen=%s) in __manifest version %d",
             manifest.uri, [f.name for f in add], rename, drop, {k: str(v) for k, v in widen.items()},
             committed.version)
    return CommitResult(manifest_version=committed.version, retries=retries,
                        seconds=round(time.monotonic() - started, 3),
                        details={"added": [f.name for f in add], "renamed": rename, "dropped": drop,
                                 "widened": {k: str(v) for k, v in widen.items()},
                                 "schema": schema_to_json(new), "max_field_id": top})


# --------------------------------------------------------------------------- partition tables


def table_schema(schema: pa.Schema, rows: int | None = None) -> pa.Schema:
    """The Arrow schema a new partition table is created with: the namespace schema plus the
    record of its columns' field ids (:data:`TABLE_FIELD_IDS_KEY`); given the ``rows`` it is
    created with, also the string encoding of its size
    (:func:`lancepart.evolution.file_format.small_table_encoding`)."""
    from lancepart.evolution.file_format import small_table_encoding

    md = dict(schema.metadata or {})
    md[TABLE_FIELD_IDS_KEY] = json.dumps(name_ids(schema), separators=(",", ":"), sort_keys=True).encode()
    out = schema.with_metadata(md)
    return out if rows is None else small_table_encoding(out, rows)


def table_field_ids(table: pa.Schema, namespace_md: Mapping[str, str], schema: pa.Schema) -> dict[str, int]:
    """``{table column name: field id}`` of a partition table's schema: its own record, else the
    names of the schema before the first change (:data:`LEGACY_FIELD_IDS_KEY`), else the names
    of ``schema`` (no change ever made)."""
    raw = (table.metadata or {}).get(TABLE_FIELD_IDS_KEY)
    if raw is not None:
        ids = {k: int(v) for k, v in json.loads(raw).items()}
    elif LEGACY_FIELD_IDS_KEY in namespace_md:
        ids = {k: int(v) for k, v in json.loads(namespace_md[LEGACY_FIELD_IDS_KEY]).items()}
    else:
        ids = name_ids(schema)
    return {n: ids[n] for n in table.names if n in ids}


def is_current(table: pa.Schema, namespace_md: Mapping[str, str], schema: pa.Schema) -> bool:
    """Whether the table's columns are exactly the namespace schema's (names, ids, types; in
    any order)."""
    ids = table_field_ids(table, namespace_md, schema)
    if sorted(table.names) != sorted(schema.names):
        return False
    return all(ids.get(f.name) == field_id_of(f) and table.field(f.name).type == f.type for f in schema)


def source_columns(table: pa.Schema, namespace_md: Mapping[str, str], schema: pa.Schema,
                   columns: Sequence[str]) -> dict[str, str | None]:
    """For each namespace column of ``columns``: the table column holding its field id, or None."""
    by_id = {fid: n for n, fid in table_field_ids(table, namespace_md, schema).items()}
    return {c: by_id.get(field_id_of(schema.field(c))) for c in columns}


def table_column(table: pa.Schema, column: str, namespace_md: Mapping[str, str] | None) -> str | None:
    """The name namespace column ``column`` has in a partition table of schema ``table`` (None: the
    table was written before the column existed). A table keeps its columns' names until it is
    rewritten, so after a rename it holds the column under its old name: found by field id."""
    if namespace_md and SCHEMA_KEY in namespace_md:
        from lancepart.model.spec import schema_from_json

        schema = schema_from_json(namespace_md[SCHEMA_KEY])
        if column in schema.names:
            return source_columns(table, namespace_md, schema, [column])[column]
    return column if column in table.names else None


def columns_of(namespace_md: Mapping[str, str] | None) -> Callable[[pa.Schema, str], str | None]:
    """:func:`table_column` for the namespace of ``namespace_md`` (what index maintenance takes)."""
    return lambda table, column: table_column(table, column, namespace_md)


def conform(data: pa.Table, mapping: Mapping[str, str | None], target: pa.Schema) -> pa.Table:
    """Rows read from an older table (columns named as in that table) as ``target``: renamed by
    field id, widened columns cast, columns it lacks as NULL."""
    n = data.num_rows
    cols = []
    for f in target:
        src = mapping.get(f.name)
        if src is None:
            cols.append(pa.nulls(n, f.type))
        else:
            col = data.column(src)
            cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=target)


def read_columns(ds: lance.LanceDataset, schema: pa.Schema, columns: Sequence[str], *, filter: str | None = None,
                 with_row_address: bool = False, fragments: Sequence[Any] | None = None) -> pa.Table:
    """The namespace columns ``columns`` of a partition table version, found by field id (a
    renamed column under its table name, a widened one cast, one the table lacks as NULL): how
    every per-table evaluation (a delete's filter, a merge's keys, replace-where) reads a table
    that may be in an older form of the schema. ``schema`` is the namespace schema, carrying the
    legacy ids when the namespace has them (:func:`with_legacy_ids`). ``filter`` (over namespace
    names) is pushed into Lance's scan only when every column it may name is stored under its
    namespace name and type; the caller applies its exact filter afterwards either way. With
    ``with_row_address``, ``_rowaddr`` comes last. ``fragments``: only these fragments of ``ds``."""
    md = legacy_md(schema)
    mapping = source_columns(ds.schema, md, schema, columns)
    present = list(dict.fromkeys(n for n in mapping.values() if n is not None))
    same = all(mapping[c] == c and ds.schema.field(c).type == schema.field(c).type for c in columns)
    table = None
    if filter is not None and same:
        try:
            table = ds.scanner(columns=present, filter=filter, with_row_address=with_row_address,
                               fragments=fragments).to_table()
        except ValueError as e:  # Lance's planner refused it: scan unfiltered, the exact filter follows
            log.debug("Lance refused the pushed-down filter %r (%s); scanning without it", filter, e)
    if table is None:
        table = ds.scanner(columns=present, with_row_address=with_row_address, fragments=fragments).to_table()
    out = conform(table, mapping, pa.schema([schema.field(c).remove_metadata() for c in columns]))
    if with_row_address:
        if not out.num_columns:  # no column named (a filter such as TRUE): the addresses alone carry the rows
            return pa.table({"_rowaddr": table.column("_rowaddr")})
        out = out.append_column(pa.field("_rowaddr", pa.uint64()), table.column("_rowaddr"))
    return out


def rows_as(rows: pa.Table, schema: pa.Schema, target: pa.Schema) -> pa.Table:
    """Rows of namespace schema ``schema`` in the newer form ``target`` of it, by field id."""
    by_id = {field_id_of(f): f.name for f in schema}
    return conform(rows, {f.name: by_id.get(field_id_of(f)) for f in target}, target)


def with_legacy_ids(schema: pa.Schema, namespace_md: Mapping[str, str]) -> pa.Schema:
    """``schema`` carrying :data:`LEGACY_FIELD_IDS_KEY` in its schema metadata when the namespace
    has it: what a Spark read ships to its executors, so that they place the columns of tables
    without a field-id record without opening ``__manifest``."""
    legacy = namespace_md.get(LEGACY_FIELD_IDS_KEY)
    if legacy is None:
        return schema
    return schema.with_metadata({**(schema.metadata or {}), LEGACY_FIELD_IDS_KEY.encode(): legacy.encode()})


def legacy_md(schema: pa.Schema) -> dict[str, str]:
    """The root properties :func:`with_legacy_ids` put into ``schema`` (for :func:`is_current`)."""
    raw = (schema.metadata or {}).get(LEGACY_FIELD_IDS_KEY.encode())
    return {LEGACY_FIELD_IDS_KEY: raw.decode()} if raw is not None else {}
