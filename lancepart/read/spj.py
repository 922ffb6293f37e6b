"""Storage-partitioned join planning, engine-agnostic (spec "Query Optimization / Storage
Partitioned Join", Appendix F).

Two partitioned namespaces joined on equal keys can be joined *group by group*: when both
sides partition the join keys by compatible transforms, every pair of rows with equal keys
lies in partition tables whose partition values map to the same *group key*, so each group
(some tables of the left, some of the right) can be joined on its own, without
redistributing either side.

Which partition fields are compatible (:func:`compatibility`), for a left field ``L`` and a
right field ``R`` over the same join keys (in the same order):

=============================  ==================================================================
same transform                 identity = identity, year = year, ..., bucket[N] = bucket[N],
                               truncate[W] = truncate[W], the same expression text: group key is
                               the partition value
bucket[N] ~ bucket[M]          one count divides the other (spec "Bucket divisibility"); the
(or multi_bucket)              finer side's value modulo the coarser count is the group key, so
                               coarse bucket ``b`` meets fine buckets ``b, b + M, b + 2M, ...``
identity ~ any one-column      the identity side's value *is* the key, so the other side's
transform or expression        transform applied to it gives the group key (``identity(d)`` ~
                               ``month(d)``, ``identity(k)`` ~ ``bucket(k, 8)``)
time hierarchy                 year / month / day / hour are ``date_part`` values (docs/design.md
                               §3): ``day`` is the day of the month, so an ``hour`` partition
                               holds rows of every day and cannot be matched to one ``day``
                               partition. A finer side can be grouped to a coarser one when it
                               also partitions by the coarser fields: ``[day(ts), hour(ts)]`` ~
                               ``[day(ts)]`` groups by the shared ``day`` field, and the hour
                               tables of each day form one group with that day's table
everything else                incompatible, with the reason
=============================  ==================================================================

Every field that matches contributes to the group key, so ``[identity(d), bucket(k, 16)]`` ~
``[identity(d), bucket(k, 8)]`` joined on ``(d, k)`` groups by ``(d, bucket % 8)``. A field
used for grouping must be in every spec version that has partition tables in the join.

>>> from lancepart.model.spec import PartitionSpec
>>> s = pa.schema([pa.field("k", pa.int64(), metadata={"lance:field_id": "0"})])
>>> spec = lambda n: PartitionSpec.from_json({"id": 1, "fields": [{"field_id": f"b{n}", "source_ids": [0],
...     "transform": {"type": "bucket", "num_buckets": n}, "result_type": {"type": "int32"}}]})
>>> compatibility(s, [spec(16)], s, [spec(8)], ["k"], ["k"]).compatible
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lancepart.errors import InvalidArgumentError
from lancepart.model.spec import PartitionField, PartitionSpec, field_id_of
from lancepart.model.transforms import (
    BaseTransform,
    BucketTransform,
    DayTransform,
    ExpressionTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    MultiBucketTransform,
    TruncateTransform,
    YearTransform,
    transform_for,
)
from lancepart.results import PartitionInfo

# how= spellings accepted (Spark's) -> the canonical name
JOIN_TYPES: dict[str, str] = {
    "inner": "inner",
    "left": "left", "leftouter": "left", "left_outer": "left",
    "right": "right", "rightouter": "right", "right_outer": "right",
    "full": "full", "outer": "full", "fullouter": "full", "full_outer": "full",
    "left_semi": "left_semi", "leftsemi": "left_semi", "semi": "left_semi",
    "left_anti": "left_anti", "leftanti": "left_anti", "anti": "left_anti",
}
_ACERO = {"inner": "inner", "left": "left outer", "right": "right outer", "full": "full outer",
          "left_semi": "left semi", "left_anti": "left anti"}
_TIME: tuple[type[BaseTransform], ...] = (YearTransform, MonthTransform, DayTransform, HourTransform)


def join_type(how: str) -> str:
    """The canonical join type of a Spark ``how`` spelling.

    >>> join_type("left_outer")
    'left'
    """
    canonical = JOIN_TYPES.get(str(how).lower())
    if canonical is None:
        raise InvalidArgumentError(f"how={how!r} is not a join type; use one of {sorted(set(JOIN_TYPES.values()))}")
    return canonical


def join_pairs(on: str | Sequence[str | tuple[str, str]] | Mapping[str, str]) -> list[tuple[str, str]]:
    """``on`` as ``(left column, right column)`` pairs: a name, a list of names (same on both
    sides), a list of ``(left, right)`` pairs, or a ``{left: right}`` mapping.

    >>> join_pairs(["d", ("customer_id", "id")])
    [('d', 'd'), ('customer_id', 'id')]
    """
    if isinstance(on, str):
        items: list[Any] = [on]
    elif isinstance(on, Mapping):
        items = list(on.items())
    else:
        items = list(on)
    pairs = []
    for item in items:
        if isinstance(item, str):
            pairs.append((item, item))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item):
            pairs.append((item[0], item[1]))
        else:
            raise InvalidArgumentError(f"on={on!r}: {item!r} is neither a column name nor a (left, right) pair")
    if not pairs:
        raise InvalidArgumentError("on names no join key")
    if len({p[0] for p in pairs}) != len(pairs) or len({p[1] for p in pairs}) != len(pairs):
        raise InvalidArgumentError(f"on={on!r} names a join key twice")
    return pairs


# --------------------------------------------------------------------------- compatibility
@dataclass(frozen=True)
class FieldMatch:
    """One pair of partition fields that groups both sides.

    ``kind``: ``"same"`` (equal transform), ``"bucket"`` (divisible bucket counts: the finer
    side's value modulo ``modulus``), ``"derive"`` (``derive_side``'s identity value mapped
    through the other side's transform)."""

    left_field: str
    right_field: str
    kind: str
    description: str
    left_modulus: int | None = None
    right_modulus: int | None = None
    derive_side: str | None = None
    derive_with: PartitionField | None = None
    derive_type: pa.DataType | None = None


@dataclass(frozen=True)
class Compatibility:
    """Whether two namespaces can be joined partition group by partition group on the keys.

    ``reason`` says why (or why not); ``matches`` are the field pairs that form the group key.
    Truthy when compatible.
    """

    compatible: bool
    reason: str
    left_keys: tuple[str, ...] = ()
    right_keys: tuple[str, ...] = ()
    matches: tuple[FieldMatch, ...] = ()

    def __bool__(self) -> bool:
        return self.compatible


def _columns_by_id(schema: pa.Schema) -> dict[int, pa.Field]:
    return {fid: f for f in schema if (fid := field_id_of(f)) is not None}


def _kind(tf: BaseTransform) -> type[BaseTransform]:
    """The class of a transform, one- and multi-column buckets counted as one kind."""
    return BucketTransform if isinstance(tf, MultiBucketTransform) else type(tf)


def _text(f: PartitionField, sources: Sequence[str]) -> str:
    what = f"expression {f.expression!r}" if f.expression is not None else str(f.transform)
    return f"{f.field_id}={what}({', '.join(sources)})"


def same_domain(a: pa.DataType, b: pa.DataType) -> bool:
    """Equal values of types ``a`` and ``b`` get equal partition values under one transform: the
    same type, integers of any width, strings, binaries, decimals of one scale, dates, timestamps
    of one zone, floats (the murmur3 canonical bytes and ``date_part`` agree across them)."""
    if a == b:
        return True
    for same in (pa.types.is_integer, pa.types.is_floating, pa.types.is_date,
                 lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
                 lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)):
        if same(a) and same(b):
            return True
    if pa.types.is_decimal(a) and pa.types.is_decimal(b):
        return a.scale == b.scale
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return a.tz == b.tz
    return False


def _relation(lf: PartitionField, rf: PartitionField, lsrc: list[str], rsrc: list[str]) -> FieldMatch | str:
    """How ``lf`` and ``rf`` (over paired key columns) group rows, or why they cannot."""
    lt, rt = transform_for(lf), transform_for(rf)
    lk, rk = _kind(lt), _kind(rt)
    ltxt, rtxt = _text(lf, lsrc), _text(rf, rsrc)
    desc = f"left {ltxt} ~ right {rtxt}"
    if isinstance(lt, ExpressionTransform) or isinstance(rt, ExpressionTransform):
        if lk == rk and (lf.expression or "").strip() == (rf.expression or "").strip():
            return FieldMatch(lf.field_id, rf.field_id, "same", f"{desc}: same expression")
    elif lk == rk:
        if isinstance(lt, (BucketTransform, MultiBucketTransform)):
            n, m = lt.num_buckets, rt.num_buckets  # type: ignore[union-attr]
            if n == m:
                return FieldMatch(lf.field_id, rf.field_id, "same", f"{desc}: same bucket count")
            if n % m == 0:
                return FieldMatch(lf.field_id, rf.field_id, "bucket", f"{desc}: left bucket % {m} = right bucket",
                                  left_modulus=m)
            if m % n == 0:
                return FieldMatch(lf.field_id, rf.field_id, "bucket", f"{desc}: right bucket % {n} = left bucket",
                                  right_modulus=n)
            return f"{desc}: bucket counts {n} and {m}, neither divides the other"
        if isinstance(lt, TruncateTransform):
            if lt.width == rt.width:  # type: ignore[union-attr]
                return FieldMatch(lf.field_id, rf.field_id, "same", f"{desc}: same width")
            return f"{desc}: truncate widths differ"
        return FieldMatch(lf.field_id, rf.field_id, "same", f"{desc}: same transform")
    if isinstance(lt, IdentityTransform) and len(rf.source_ids) == 1:
        return FieldMatch(lf.field_id, rf.field_id, "derive", f"{desc}: right transform of the left value",
                          derive_side="left", derive_with=rf, derive_type=lf.result_type)
    if isinstance(rt, IdentityTransform) and len(lf.source_ids) == 1:
        return FieldMatch(lf.field_id, rf.field_id, "derive", f"{desc}: left transform of the right value",
                          derive_side="right", derive_with=lf, derive_type=rf.result_type)
    if lk in _TIME and rk in _TIME:
        coarse, fine = (k.name for k in sorted((lk, rk), key=_TIME.index))
        return (f"{desc}: {lt.name} and {rt.name} are date_part values (docs/design.md §3), not nested time "
                f"ranges: a {fine} partition holds rows of every {coarse}; the finer side must also be "
                f"partitioned by {coarse}({lsrc[0]})")
    return f"{desc}: different transforms"


def _usable_fields(side: str, schema: pa.Schema, specs: Sequence[PartitionSpec], keys: Sequence[str],
                   reasons: list[str]) -> list[tuple[PartitionField, list[str]]]:
    """Fields over join keys only, present (same definition) in every spec version of ``specs``."""
    by_id = _columns_by_id(schema)
    first, *others = specs
    out = []
    before = len(reasons)
    for f in first.fields:
        cols = [by_id[s].name if s in by_id else None for s in f.source_ids]
        if any(c is None or c not in keys for c in cols):
            continue
        missing = [s.id for s in others if not any(g.field_id == f.field_id and g.same_definition(f) for g in s.fields)]
        if missing:
            reasons.append(f"{side} field {f.field_id} is not in spec version(s) {missing}, which also have "
                           f"partition tables")
            continue
        out.append((f, cols))  # type: ignore[arg-type]
    if not out and len(reasons) == before:
        reasons.append(f"{side} has no partition field over the join keys {list(keys)} "
                       f"(spec version(s) {[s.id for s in specs]})")
    return out


def compatibility(left_schema: pa.Schema, left_specs: Sequence[PartitionSpec], right_schema: pa.Schema,
                  right_specs: Sequence[PartitionSpec], left_keys: Sequence[str],
                  right_keys: Sequence[str]) -> Compatibility:
    """The storage-partitioned join decision for the spec versions that hold the tables of each side.

    A pure function of schemas and specs; see the module docstring for the rules.
    """
    left_keys, right_keys = tuple(left_keys), tuple(right_keys)
    if len(left_keys) != len(right_keys) or not left_keys:
        raise InvalidArgumentError(f"join keys {list(left_keys)} and {list(right_keys)} must pair up one to one")
    for side, schema, keys in (("left", left_schema, left_keys), ("right", right_schema, right_keys)):
        unknown = [k for k in keys if schema.get_field_index(k) < 0]
        if unknown:
            raise InvalidArgumentError(f"{side} join keys {unknown} are not columns of the {side} namespace "
                                       f"(columns: {schema.names})")
    if not left_specs or not right_specs:
        return Compatibility(False, "a side has no partition spec", left_keys, right_keys)
    reasons: list[str] = []
    lfields = _usable_fields("left", left_schema, left_specs, left_keys, reasons)
    rfields = _usable_fields("right", right_schema, right_specs, right_keys, reasons)
    to_right = dict(zip(left_keys, right_keys, strict=True))
    matches: list[FieldMatch] = []
    used: set[str] = set()
    for lf, lsrc in lfields:
        for rf, rsrc in rfields:
            if rf.field_id in used or [to_right[c] for c in lsrc] != rsrc:
                continue
            bad = [(a, b) for a, b in zip(lsrc, rsrc, strict=True)
                   if not same_domain(left_schema.field(a).type, right_schema.field(b).type)]
            if bad:
                a, b = bad[0]
                reasons.append(f"join keys {a} ({left_schema.field(a).type}) and {b} ({right_schema.field(b).type}) "
                               f"do not share partition values")
                continue
            m = _relation(lf, rf, lsrc, rsrc)
            if isinstance(m, str):
                reasons.append(m)
                continue
            matches.append(m)
            used.add(rf.field_id)
            break
    if not matches:
        if lfields and rfields and not reasons:
            reasons.append("no partition field of the left is over the same join keys as one of the right")
        return Compatibility(False, "; ".join(reasons), left_keys, right_keys)
    return Compatibility(True, "; ".join(m.description for m in matches), left_keys, right_keys, tuple(matches))


def table_specs(ns, partitions: Sequence[PartitionInfo] | None = None) -> list[PartitionSpec]:
    """The spec versions of ``partitions`` (default: every published table of ``ns``); the
    current spec when there is no table."""
    parts = ns.partitions() if partitions is None else partitions
    ids = sorted({p.spec_id for p in parts})
    return [ns.specs[i] for i in ids if i in ns.specs] or [ns.current_spec]


def spj_compatibility(left_ns, right_ns, left_keys: Sequence[str], right_keys: Sequence[str]) -> Compatibility:
    """Can ``left_ns`` and ``right_ns`` (:class:`PartitionedNamespace`) be joined on
    ``left_keys[i] = right_keys[i]`` without a shuffle? Looks at the spec versions that hold
    published partition tables.

    >>> spj_compatibility(orders, customers, ["customer_id"], ["id"]).reason
    'left customer_bucket=bucket[4](customer_id) ~ right id_bucket=bucket[2](id): left bucket % 2 = right bucket'
    >>> spj_compatibility(orders, customers, ["amount"], ["id"]).reason
    "left has no partition field over the join keys ['amount'] (spec version(s) [1])"
    """
    return compatibility(left_ns.schema, table_specs(left_ns), right_ns.schema, table_specs(right_ns),
                         left_keys, right_keys)


# --------------------------------------------------------------------------- groups
@dataclass(frozen=True)
class JoinGroup:
    """Partition tables of both sides whose rows can only join each other."""

    key: tuple
    left: tuple[PartitionInfo, ...]
    right: tuple[PartitionInfo, ...]


def _derived(m: FieldMatch, values: list[Any]) -> list[Any]:
    from lancepart.model.transforms import transform_for

    assert m.derive_with is not None and m.derive_type is not None
    out = transform_for(m.derive_with).apply([pa.array(values, type=m.derive_type)])
    if out.type != m.derive_with.result_type:
        out = out.cast(m.derive_with.result_type)
    return out.to_pylist()


def group_keys(compat: Compatibility, parts: Sequence[PartitionInfo], side: str) -> list[tuple]:
    """The group key of every partition table of one side (``"left"`` / ``"right"``)."""
    columns = []
    for m in compat.matches:
        fid = m.left_field if side == "left" else m.right_field
        values = [p.values.get(fid) for p in parts]
        modulus = m.left_modulus if side == "left" else m.right_modulus
        if modulus is not None:
            values = [None if v is None else v % modulus for v in values]
        elif m.derive_side == side:
            values = _derived(m, values)
        columns.append(values)
    return list(zip(*columns, strict=True)) if columns else [() for _ in parts]


def _sort_key(g: JoinGroup) -> tuple:
    return (-(len(g.left) + len(g.right)), repr(g.key))


def plan_groups(compat: Compatibility, left: Sequence[PartitionInfo], right: Sequence[PartitionInfo],
                how: str) -> list[JoinGroup]:
    """Partition groups for a compatible join; groups that cannot produce a row for ``how`` (one
    side empty in an inner join, ...) are left out. Largest groups first."""
    how = join_type(how)
    sides: dict[tuple, tuple[list[PartitionInfo], list[PartitionInfo]]] = {}
    for p, k in zip(left, group_keys(compat, left, "left"), strict=True):
        sides.setdefault(k, ([], []))[0].append(p)
    for p, k in zip(right, group_keys(compat, right, "right"), strict=True):
        sides.setdefault(k, ([], []))[1].append(p)
    keep_left_only = how in ("left", "full", "left_anti")
    keep_right_only = how in ("right", "full")
    groups = [JoinGroup(k, tuple(lt), tuple(rt)) for k, (lt, rt) in sides.items()
              if (lt and rt) or (lt and keep_left_only) or (rt and keep_right_only)]
    return sorted(groups, key=_sort_key)


# --------------------------------------------------------------------------- output layout and local join
@dataclass(frozen=True)
class OutputColumn:
    """One output column: from the ``left`` / ``right`` column, or ``coalesce`` of a same-named key."""

    name: str
    source: str
    left: str | None
    right: str | None
    type: pa.DataType
    nullable: bool


def _common_type(a: pa.DataType, b: pa.DataType, what: str) -> pa.DataType:
    if a == b:
        return a
    try:
        return pa.unify_schemas([pa.schema([("k", a)]), pa.schema([("k", b)])],
                                promote_options="permissive").field("k").type
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise InvalidArgumentError(f"{what}: types {a} and {b} have no common type to compare in") from None


def join_layout(left: pa.Schema, right: pa.Schema, pairs: Sequence[tuple[str, str]], how: str,
                right_suffix: str = "_right") -> list[OutputColumn]:
    """The output columns of a join, laid out like Spark's ``df.join(other, on=[names], how)``:
    join keys named alike on both sides first, once each (from the left for inner/left joins,
    the right for right joins, coalesced for full joins), then the other left columns, then the
    other right columns, renamed ``<name><right_suffix>`` where the name is taken. Semi and anti
    joins return the left columns only.

    >>> s = pa.schema([("k", pa.int64()), ("v", pa.utf8())])
    >>> [c.name for c in join_layout(s, s, [("k", "k")], "inner")]
    ['k', 'v', 'v_right']
    """
    how = join_type(how)
    if how in ("left_semi", "left_anti"):
        return [OutputColumn(f.name, "left", f.name, None, f.type, f.nullable) for f in left]
    shared = [lk for lk, rk in pairs if lk == rk]
    left_null = how in ("right", "full")
    right_null = how in ("left", "full")
    out = []
    for name in shared:
        lf, rf = left.field(name), right.field(name)
        t = _common_type(lf.type, rf.type, f"join key {name!r}")
        source = {"inner": "left", "left": "left", "right": "right", "full": "coalesce"}[how]
        nullable = {"left": lf.nullable, "right": rf.nullable, "coalesce": lf.nullable or rf.nullable}[source]
        out.append(OutputColumn(name, source, name, name, t, nullable))
    out += [OutputColumn(f.name, "left", f.name, None, f.type, f.nullable or left_null)
            for f in left if f.name not in shared]
    names = {c.name for c in out}
    for f in right:
        if f.name in shared:
            continue
        name = f.name if f.name not in names else f.name + right_suffix
        if name in names:
            raise InvalidArgumentError(f"right column {f.name!r} clashes with left column {name!r}; "
                                       f"pass another right_suffix or project the columns")
        names.add(name)
        out.append(OutputColumn(name, "right", None, f.name, f.type, f.nullable or right_null))
    return out


def layout_schema(layout: Sequence[OutputColumn]) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.type, c.nullable) for c in layout])


def join_tables(left: pa.Table, right: pa.Table, pairs: Sequence[tuple[str, str]], how: str,
                layout: Sequence[OutputColumn]) -> pa.Table:
    """Join two in-memory tables with Arrow's hash join (NULL keys never match, as in SQL).

    Only the keys and row numbers go through the hash join; the rows are then gathered with
    ``take``, so any column type (lists, structs, ...) can be carried.

    >>> l, r = pa.table({"k": [1, 2]}), pa.table({"k": [2, 2], "v": ["a", "b"]})
    >>> join_tables(l, r, [("k", "k")], "inner", join_layout(l.schema, r.schema, [("k", "k")], "inner")).num_rows
    2
    """
    how = join_type(how)
    lkeys, rkeys = [p[0] for p in pairs], [f"__r{i}" for i in range(len(pairs))]
    lk = {}
    rk = {}
    for (a, b), rname in zip(pairs, rkeys, strict=True):
        t = _common_type(left.schema.field(a).type, right.schema.field(b).type, f"join keys {a!r} and {b!r}")
        lk[a] = left.column(a).cast(t)
        rk[rname] = right.column(b).cast(t)
    lk["__li"] = pa.array(np.arange(left.num_rows, dtype=np.int64))
    rk["__ri"] = pa.array(np.arange(right.num_rows, dtype=np.int64))
    joined = pa.table(lk).join(pa.table(rk), keys=lkeys, right_keys=rkeys, join_type=_ACERO[how],
                               coalesce_keys=False, use_threads=True)
    li = joined.column("__li")
    lrows = left.take(li)
    rrows = right.take(joined.column("__ri")) if "__ri" in joined.column_names else None
    columns = []
    for c in layout:
        if c.source == "left":
            col = lrows.column(c.left)
        elif c.source == "right":
            col = rrows.column(c.right)  # type: ignore[union-attr]
        else:
            col = pc.coalesce(lrows.column(c.left).cast(c.type), rrows.column(c.right).cast(c.type))  # type: ignore[union-attr]
        columns.append(col.cast(c.type) if col.type != c.type else col)
    return pa.Table.from_arrays(columns, schema=layout_schema(layout))


# --------------------------------------------------------------------------- the whole plan
@dataclass
class JoinPlan:
    """What a join will do: storage-partitioned (``spj``) group by group, or a shuffled join
    and why (``reason``)."""

    left_root: str
    right_root: str
    pairs: list[tuple[str, str]]
    how: str
    compatibility: Compatibility
    left_tables: int
    right_tables: int
    groups: list[JoinGroup] = field(default_factory=list)
    spj: bool = False
    reason: str = ""

    def __str__(self) -> str:
        keys = ", ".join(f"left.{a} = right.{b}" for a, b in self.pairs)
        lines = [f"{self.how} join on {keys}",
                 f"  left  {self.left_root}: {self.left_tables} partition tables after pruning",
                 f"  right {self.right_root}: {self.right_tables} partition tables after pruning"]
        if self.spj:
            lines.append(f"  storage-partitioned join: {len(self.groups)} partition groups, one task each, "
                         f"no shuffle of either side")
            lines += [f"    {m.description}" for m in self.compatibility.matches]
            for g in self.groups[:20]:
                lines.append(f"    group {g.key}: {len(g.left)} left + {len(g.right)} right tables")
            if len(self.groups) > 20:
                lines.append(f"    ... {len(self.groups) - 20} more groups")
        else:
            lines.append(f"  shuffled join (no storage-partitioned join): {self.reason}")
        return "\n".join(lines)


def plan_join(left_ns, right_ns, on, how: str = "inner", filter_left: str | None = None,
              filter_right: str | None = None, spj: bool = True, *,
              left_partitions: Sequence[PartitionInfo] | None = None,
              right_partitions: Sequence[PartitionInfo] | None = None) -> JoinPlan:
    """Prune both sides (unless their kept ``*_partitions`` are given), decide compatibility on
    the spec versions of the kept tables and form the partition groups (or say why the join
    must shuffle).

    >>> print(plan_join(orders, customers, [("customer_id", "id")], filter_left="customer_id = 10"))
    ... # doctest: +ELLIPSIS
    inner join on left.customer_id = right.id
      left  .../orders: 1 partition tables after pruning
      right .../customers: 2 partition tables after pruning
      storage-partitioned join: 1 partition groups, one task each, no shuffle of either side
        left customer_bucket=bucket[4](customer_id) ~ right id_bucket=bucket[2](id): left bucket % 2 = right bucket
        group (0,): 1 left + 1 right tables
    """
    pairs = join_pairs(on)
    how = join_type(how)
    lparts = list(left_partitions) if left_partitions is not None else left_ns.partitions(filter_left)
    rparts = list(right_partitions) if right_partitions is not None else right_ns.partitions(filter_right)
    compat = compatibility(left_ns.schema, table_specs(left_ns, lparts), right_ns.schema,
                           table_specs(right_ns, rparts), [p[0] for p in pairs], [p[1] for p in pairs])
    plan = JoinPlan(left_ns.root, right_ns.root, pairs, how, compat, len(lparts), len(rparts))
    if not spj:
        plan.reason = "storage-partitioned join disabled by the caller (spj=False)"
    elif not compat:
        plan.reason = compat.reason
    else:
        plan.groups = plan_groups(compat, lparts, rparts, how)
        plan.spj = True
        plan.reason = compat.reason
    return plan
