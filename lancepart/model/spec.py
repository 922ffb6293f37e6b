"""Pure model of the partitioning spec: partition specs, fields, transforms, namespace schema.

Spec: spec/partitioning.md "Metadata Definition", "Schema", "Partition Spec",
"Partition Transform". JSON goes through the official pydantic models of
``lance_namespace_urllib3_client`` so what we write is what every other client parses.
No I/O here; type checks that need an engine live in ``transforms`` / ``datafusion``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from lancepart.errors import InvalidSpecError

_CLIENT = "lance_namespace_urllib3_client"
_MODELS = {"partition_spec": "PartitionSpec", "partition_field": "PartitionField",
           "partition_transform": "PartitionTransform", "json_arrow_schema": "JsonArrowSchema",
           "json_arrow_field": "JsonArrowField", "json_arrow_data_type": "JsonArrowDataType"}


def _load_models() -> Any:
    """The official pydantic models we use, without importing the whole REST client: its
    package ``__init__`` imports every API module and every model (2-4 s, paid again by every
    Spark Python worker and CLI process). The model modules are loaded under placeholder
    parent packages that are removed afterwards, so a later ``import lance_namespace_urllib3_client``
    runs normally and reuses these very classes."""
    if _CLIENT in sys.modules:  # already imported by someone: use it as is
        return importlib.import_module(_CLIENT + ".models")
    found = importlib.util.find_spec(_CLIENT)
    if found is None or not found.submodule_search_locations:
        return importlib.import_module(_CLIENT + ".models")  # let the import error say what is missing
    base = next(iter(found.submodule_search_locations))
    placeholders = []
    for name, path in ((_CLIENT, base), (_CLIENT + ".models", os.path.join(base, "models"))):
        module = types.ModuleType(name)
        module.__path__ = [path]
        sys.modules[name] = module
        placeholders.append(name)
    try:
        return types.SimpleNamespace(**{cls: getattr(importlib.import_module(f"{_CLIENT}.models.{mod}"), cls)
                                        for mod, cls in _MODELS.items()})
    finally:
        for name in placeholders:
            sys.modules.pop(name, None)


_m = _load_models()

FIELD_ID_KEY = "lance:field_id"
FIELD_ID_KEY_BYTES = FIELD_ID_KEY.encode()

#: transform type -> (parameter it requires or None, source arity: 1 or "many")
TRANSFORM_TYPES: dict[str, tuple[str | None, str]] = {
    "identity": (None, "one"),
    "year": (None, "one"),
    "month": (None, "one"),
    "day": (None, "one"),
    "hour": (None, "one"),
    "bucket": ("num_buckets", "one"),
    "multi_bucket": ("num_buckets", "many"),
    "truncate": ("width", "one"),
}

# field_id becomes the column name suffix partition_field_<field_id> and a SQL identifier.
_FIELD_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

# Functions whose value depends on time, randomness or session state (spec requirements 1-2).
VOLATILE_FUNCTIONS = frozenset(
    {
        "random", "rand", "uuid", "now", "current_date", "current_time",
        "current_timestamp", "localtime", "localtimestamp", "today",
        "current_user", "session_user", "user", "current_schema",
        "current_database", "version", "pg_backend_pid", "nextval", "setseed",
    }
)
_IDENT_CALL_RE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*(\()?")
_STRING_LIT_RE = re.compile(r"'(?:[^']|'')*'")


# --------------------------------------------------------------------------- arrow types

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "null": pa.null(), "bool": pa.bool_(), "boolean": pa.bool_(),
    "int8": pa.int8(), "uint8": pa.uint8(), "int16": pa.int16(), "uint16": pa.uint16(),
    "int32": pa.int32(), "uint32": pa.uint32(), "int64": pa.int64(), "uint64": pa.uint64(),
    "float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64(),
    "utf8": pa.utf8(), "large_utf8": pa.large_utf8(),
    "binary": pa.binary(), "large_binary": pa.large_binary(),
    "date32": pa.date32(), "date64": pa.date64(),
    # Lance's own JSON names: a bare "timestamp"/"duration" is microseconds, no zone.
    "timestamp": pa.timestamp("us"), "duration": pa.duration("us"),
}
_TS_RE = re.compile(r"^timestamp\[(s|ms|us|ns)(?:, tz=(.+))?\]$")
_DURATION_RE = re.compile(r"^duration\[(s|ms|us|ns)\]$")
_TIME_RE = re.compile(r"^(time32|time64)\[(s|ms|us|ns)\]$")


def arrow_type_to_json(t: pa.DataType) -> _m.JsonArrowDataType:
    """Arrow type -> ``JsonArrowDataType`` using Lance's type names.

    Lance's JSON form has no slot for a timestamp unit or zone; ``timestamp`` means
    microseconds without zone (as Lance reads it) and other timestamps are written as
    ``timestamp[<unit>]`` / ``timestamp[<unit>, tz=<zone>]`` so nothing is lost.

    >>> arrow_type_to_json(pa.int32()).to_dict()
    {'type': 'int32'}
    """
    J = _m.JsonArrowDataType
    if pa.types.is_dictionary(t):
        return arrow_type_to_json(t.value_type)
    for name, simple in _SIMPLE_TYPES.items():
        if t == simple and name not in ("boolean",):
            return J(type=name)
    if pa.types.is_timestamp(t):
        return J(type=f"timestamp[{t.unit}]" if t.tz is None else f"timestamp[{t.unit}, tz={t.tz}]")
    if pa.types.is_duration(t):
        return J(type=f"duration[{t.unit}]")
    if pa.types.is_time(t):
        return J(type=f"{'time32' if pa.types.is_time32(t) else 'time64'}[{t.unit}]")
    if pa.types.is_decimal(t):
        # Lance encodes precision and scale as length = precision * 1000 + scale.
        return J(type=f"decimal{t.bit_width}", length=t.precision * 1000 + t.scale)
    if pa.types.is_fixed_size_binary(t):
        return J(type="fixed_size_binary", length=t.byte_width)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        name = "list" if pa.types.is_list(t) else "large_list" if pa.types.is_large_list(t) else "fixed_size_list"
        length = t.list_size if pa.types.is_fixed_size_list(t) else None
        return J(type=name, fields=[_field_to_json(t.value_field)], length=length)
    if pa.types.is_struct(t):
        return J(type="struct", fields=[_field_to_json(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        entries = pa.field("entries", pa.struct([t.key_field, t.item_field]), nullable=False)
        return J(type="map", fields=[_field_to_json(entries)])
    raise InvalidSpecError(f"Arrow type {t} has no JSON representation in the namespace schema")


def arrow_type_from_json(j: _m.JsonArrowDataType | Mapping[str, Any]) -> pa.DataType:
    """``JsonArrowDataType`` (model or dict) -> Arrow type; inverse of :func:`arrow_type_to_json`.

    >>> arrow_type_from_json({"type": "date32"})
    DataType(date32[day])
    """
    if isinstance(j, Mapping):
        try:
            j = _m.JsonArrowDataType.from_dict(dict(j))
        except ValidationError as e:
            raise InvalidSpecError(f"invalid JsonArrowDataType {dict(j)!r}: {e.errors()[0]['msg']}") from None
    name = j.type.lower()
    if name in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[name]
    if m := _TS_RE.match(j.type):
        return pa.timestamp(m.group(1), tz=m.group(2))
    if m := _DURATION_RE.match(name):
        return pa.duration(m.group(1))
    if m := _TIME_RE.match(name):
        return (pa.time32 if m.group(1) == "time32" else pa.time64)(m.group(2))
    if name in ("decimal32", "decimal64", "decimal128", "decimal256"):
        enc = j.length or 0
        precision = (enc + 128) // 1000
        scale = enc - precision * 1000
        ctor = {"decimal32": pa.decimal32, "decimal64": pa.decimal64,
                "decimal128": pa.decimal128, "decimal256": pa.decimal256}[name]
        return ctor(precision, scale)
    if name == "fixed_size_binary":
        return pa.binary(j.length or 0)
    if name in ("list", "large_list", "fixed_size_list"):
        if not j.fields:
            raise InvalidSpecError(f"JSON type {name!r} needs one inner field")
        inner = _field_from_json(j.fields[0])
        if name == "list":
            return pa.list_(inner)
        if name == "large_list":
            return pa.large_list(inner)
        return pa.list_(inner, j.length or 0)
    if name == "struct":
        return pa.struct([_field_from_json(f) for f in (j.fields or [])])
    if name == "map":
        if not j.fields or not pa.types.is_struct(entries := _field_from_json(j.fields[0]).type):
            raise InvalidSpecError("JSON type 'map' needs one struct entries field")
        return pa.map_(entries.field(0), entries.field(1))
    raise InvalidSpecError(f"unsupported Arrow type name {j.type!r} in JSON")


_TYPE_ALIASES = {"string": "utf8", "large_string": "large_utf8", "str": "utf8", "int": "int32", "long": "int64",
                 "float": "float32", "double": "float64", "boolean": "bool", "binary": "binary"}
_DECIMAL_RE = re.compile(r"decimal(128|256)?\(\s*(\d+)\s*,\s*(\d+)\s*\)", flags=re.IGNORECASE)


def arrow_type_from_text(text: str) -> pa.DataType:
    """A column type as people write it: a JSON type name (``int64``, ``date32``,
    ``large_utf8``), a common alias (``string``, ``long``, ``double``, ``boolean``),
    ``decimal(12,2)`` / ``decimal256(40,4)`` or a JSON Arrow type (``{"type": "large_utf8"}``).

    >>> arrow_type_from_text("decimal(12,2)"), arrow_type_from_text("string")
    (Decimal128Type(decimal128(12, 2)), DataType(string))
    """
    t = text.strip()
    m = _DECIMAL_RE.fullmatch(t)
    try:
        if m:
            make = pa.decimal256 if m.group(1) == "256" else pa.decimal128
            return make(int(m.group(2)), int(m.group(3)))
        if t.startswith("{"):
            return arrow_type_from_json(json.loads(t))
        return arrow_type_from_json({"type": _TYPE_ALIASES.get(t.lower(), t.lower())})
    except (ValueError, TypeError, InvalidSpecError) as e:
        raise InvalidSpecError(f"{text!r} is not a column type ({e})") from None


def _field_to_json(f: pa.Field) -> _m.JsonArrowField:
    md = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()} or None
    return _m.JsonArrowField(name=f.name, nullable=f.nullable, type=arrow_type_to_json(f.type), metadata=md)


def _field_from_json(j: _m.JsonArrowField) -> pa.Field:
    return pa.field(j.name, arrow_type_from_json(j.type), nullable=j.nullable, metadata=j.metadata or None)


# --------------------------------------------------------------------------- namespace schema


def field_id_of(field: pa.Field) -> int | None:
    """The ``lance:field_id`` of a field, or None when it has none."""
    raw = (field.metadata or {}).get(FIELD_ID_KEY_BYTES)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidSpecError(f"column {field.name!r}: {FIELD_ID_KEY}={raw.decode()!r} is not an integer") from None


def _walk(fields: Iterable[pa.Field], prefix: str = ""):
    for f in fields:
        yield prefix + f.name, f
        t = f.type
        if pa.types.is_struct(t):
            yield from _walk((t.field(i) for i in range(t.num_fields)), prefix + f.name + ".")
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            yield from _walk([t.value_field], prefix + f.name + ".")


def assign_field_ids(schema: pa.Schema, next_id: int | None = None) -> pa.Schema:
    """Give every field without ``lance:field_id`` a fresh id, depth-first; keep existing ids.

    Ids are never reused: new ids start above ``next_id`` (the namespace's high-water mark)
    or above the highest id present. Duplicate ids raise :class:`InvalidSpecError`.

    >>> s = assign_field_ids(pa.schema([("id", pa.int64()), ("d", pa.date32())]))
    >>> [f.metadata[b"lance:field_id"] for f in s]
    [b'0', b'1']
    """
    seen: dict[int, str] = {}
    for path, f in _walk(schema):
        fid = field_id_of(f)
        if fid is None:
            continue
        if fid < 0:
            raise InvalidSpecError(f"column {path!r}: {FIELD_ID_KEY} must be >= 0, got {fid}")
        if fid in seen:
            raise InvalidSpecError(f"{FIELD_ID_KEY}={fid} is used by both {seen[fid]!r} and {path!r}")
        seen[fid] = path
    counter = [max(max(seen, default=-1) + 1, next_id or 0)]

    def fix(f: pa.Field) -> pa.Field:
        md = dict(f.metadata or {})
        if FIELD_ID_KEY_BYTES not in md:
            md[FIELD_ID_KEY_BYTES] = str(counter[0]).encode()
            counter[0] += 1
        t = f.type
        if pa.types.is_struct(t):
            t = pa.struct([fix(t.field(i)) for i in range(t.num_fields)])
        elif pa.types.is_list(t):
            t = pa.list_(fix(t.value_field))
        elif pa.types.is_large_list(t):
            t = pa.large_list(fix(t.value_field))
        elif pa.types.is_fixed_size_list(t):
            t = pa.list_(fix(t.value_field), t.list_size)
        return pa.field(f.name, t, f.nullable, md)

    return pa.schema([fix(f) for f in schema], metadata=schema.metadata)


def schema_to_json(schema: pa.Schema) -> dict[str, Any]:
    """Namespace schema -> JsonArrowSchema dict (the ``schema`` root property)."""
    names = [f.name for f in schema]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise InvalidSpecError(f"duplicate column names in schema: {dup}")
    md = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()} or None
    return _m.JsonArrowSchema(fields=[_field_to_json(f) for f in schema], metadata=md).to_dict()


def schema_from_json(value: str | Mapping[str, Any]) -> pa.Schema:
    """The ``schema`` root property (JSON string or dict) -> pyarrow schema with field ids."""
    try:
        obj = json.loads(value) if isinstance(value, str) else dict(value)
        model = _m.JsonArrowSchema.from_dict(obj)
    except (ValueError, ValidationError) as e:
        raise InvalidSpecError(f"namespace schema is not a valid JsonArrowSchema: {e}") from None
    schema = pa.schema([_field_from_json(f) for f in model.fields], metadata=model.metadata or None)
    for path, f in _walk(schema):
        if field_id_of(f) is None:
            raise InvalidSpecError(f"namespace schema column {path!r} has no {FIELD_ID_KEY}")
    assign_field_ids(schema)  # duplicate-id check
    return schema


# --------------------------------------------------------------------------- partition spec


@dataclass(frozen=True)
class Transform:
    """A well-known transform: ``type`` plus ``num_buckets`` (bucket kinds) or ``width`` (truncate)."""

    type: str
    num_buckets: int | None = None
    width: int | None = None

    def to_json(self) -> dict[str, Any]:
        return _m.PartitionTransform(type=self.type, num_buckets=self.num_buckets, width=self.width).to_dict()

    def __str__(self) -> str:
        arg = self.num_buckets if self.num_buckets is not None else self.width
        return self.type if arg is None else f"{self.type}[{arg}]"


class PartitionField:
    """One partition field (spec "Partition Field Schema").

    >>> f = PartitionField(field_id="b", source_ids=[0], transform={"type": "bucket", "num_buckets": 8},
    ...                    result_type={"type": "int32"})
    >>> f.to_json()["transform"]
    {'type': 'bucket', 'num_buckets': 8}
    """

    __slots__ = ("_model", "result_type", "transform")

    def __init__(
        self,
        field_id: str,
        source_ids: Sequence[int],
        transform: Transform | Mapping[str, Any] | None = None,
        expression: str | None = None,
        result_type: pa.DataType | Mapping[str, Any] | None = None,
    ) -> None:
        where = f"partition field {field_id!r}"
        if not isinstance(field_id, str) or not _FIELD_ID_RE.match(field_id):
            raise InvalidSpecError(
                f"{where}: field_id must match {_FIELD_ID_RE.pattern} (it names the "
                f"__manifest column partition_field_<field_id>)"
            )
        if (transform is None) == (expression is None):
            raise InvalidSpecError(f"{where}: exactly one of 'transform' or 'expression' must be given")
        if result_type is None:
            raise InvalidSpecError(f"{where}: 'result_type' is required")
        if isinstance(source_ids, (str, bytes)) or not isinstance(source_ids, Sequence) or not source_ids:
            raise InvalidSpecError(f"{where}: 'source_ids' must be a non-empty list of field ids")
        if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in source_ids):
            raise InvalidSpecError(f"{where}: 'source_ids' must be non-negative integers, got {list(source_ids)}")
        if len(set(source_ids)) != len(source_ids):
            raise InvalidSpecError(f"{where}: 'source_ids' repeats a field id: {list(source_ids)}")
        try:
            rt = result_type if isinstance(result_type, pa.DataType) else arrow_type_from_json(result_type)
        except InvalidSpecError as e:
            raise InvalidSpecError(f"{where}: result_type: {e}") from None
        tf: Transform | None = None
        if transform is not None:
            tf = transform if isinstance(transform, Transform) else _transform_from_mapping(transform, where)
            _check_transform(tf, len(source_ids), where)
        if expression is not None:
            _check_expression(expression, len(source_ids), where)
        try:
            self._model = _m.PartitionField(
                field_id=field_id,
                source_ids=list(source_ids),
                transform=None if tf is None else _m.PartitionTransform.from_dict(tf.to_json()),
                expression=expression,
                result_type=arrow_type_to_json(rt),
            )
        except ValidationError as e:
            raise InvalidSpecError(f"{where}: {e.errors()[0]['msg']}") from None
        self.transform = tf
        self.result_type = rt

    # -- accessors in the spec's own words
    @property
    def field_id(self) -> str:
        return self._model.field_id

    @property
    def source_ids(self) -> list[int]:
        return list(self._model.source_ids)

    @property
    def expression(self) -> str | None:
        return self._model.expression

    @property
    def column_name(self) -> str:
        """Its ``__manifest`` column: ``partition_field_<field_id>``."""
        return f"partition_field_{self.field_id}"

    def same_definition(self, other: PartitionField) -> bool:
        """Same source_ids and transform (or expression): spec "Field ID Reuse"."""
        return (
            self.source_ids == other.source_ids
            and self.transform == other.transform
            and (self.expression or "").strip() == (other.expression or "").strip()
        )

    def to_json(self) -> dict[str, Any]:
        return self._model.to_dict()

    @classmethod
    def from_json(cls, value: str | Mapping[str, Any]) -> PartitionField:
        obj = _loads(value, "partition field")
        unknown = set(obj) - {"field_id", "source_ids", "transform", "expression", "result_type"}
        if unknown:
            raise InvalidSpecError(f"partition field {obj.get('field_id')!r}: unknown keys {sorted(unknown)}")
        return cls(
            field_id=obj.get("field_id"),  # type: ignore[arg-type]
            source_ids=obj.get("source_ids"),  # type: ignore[arg-type]
            transform=obj.get("transform"),
            expression=obj.get("expression"),
            result_type=obj.get("result_type"),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionField) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))

    def __repr__(self) -> str:
        what = str(self.transform) if self.transform else repr(self.expression)
        return f"PartitionField({self.field_id!r}, {what} of {self.source_ids} -> {self.result_type})"


class PartitionSpec:
    """A partition spec version: ``partition_spec_v<id>`` (spec "Partition Spec Schema").

    >>> s = PartitionSpec.from_json({"id": 1, "fields": [{"field_id": "event_date", "source_ids": [1],
    ...     "transform": {"type": "identity"}, "result_type": {"type": "date32"}}]})
    >>> s.key, [f.field_id for f in s.fields]
    ('partition_spec_v1', ['event_date'])
    """

    __slots__ = ("fields", "id")

    def __init__(self, id: int, fields: Sequence[PartitionField]) -> None:
        if not isinstance(id, int) or isinstance(id, bool) or id < 1:
            raise InvalidSpecError(f"partition spec id must be an integer >= 1, got {id!r}")
        fields = [f if isinstance(f, PartitionField) else PartitionField.from_json(f) for f in fields]
        if not fields:
            raise InvalidSpecError(f"partition spec v{id} has no fields")
        ids = [f.field_id for f in fields]
        if dup := sorted({i for i in ids if ids.count(i) > 1}):
            raise InvalidSpecError(f"partition spec v{id}: field_id {dup[0]!r} appears more than once")
        for i, a in enumerate(fields):
            for b in fields[i + 1:]:
                if a.same_definition(b):
                    raise InvalidSpecError(
                        f"partition spec v{id}: fields {a.field_id!r} and {b.field_id!r} have the same definition"
                    )
        self.id = id
        self.fields = tuple(fields)

    @property
    def key(self) -> str:
        """Its root property name, ``partition_spec_v<id>``."""
        return f"partition_spec_v{self.id}"

    @property
    def namespace(self) -> str:
        """Its spec version namespace, ``v<id>``."""
        return f"v{self.id}"

    def field(self, field_id: str) -> PartitionField:
        for f in self.fields:
            if f.field_id == field_id:
                return f
        raise KeyError(field_id)

    def to_model(self) -> _m.PartitionSpec:
        return _m.PartitionSpec(id=self.id, fields=[f._model for f in self.fields])

    def to_json(self) -> dict[str, Any]:
        return self.to_model().to_dict()

    def to_json_string(self) -> str:
        """Compact JSON as stored in ``__manifest`` metadata (Appendix E shows this form)."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, value: str | Mapping[str, Any]) -> PartitionSpec:
        obj = _loads(value, "partition spec")
        unknown = set(obj) - {"id", "fields"}
        if unknown:
            raise InvalidSpecError(f"partition spec: unknown keys {sorted(unknown)}")
        fields = obj.get("fields")
        if not isinstance(fields, list):
            raise InvalidSpecError(f"partition spec v{obj.get('id')}: 'fields' must be a JSON array")
        return cls(id=obj.get("id"), fields=[PartitionField.from_json(f) for f in fields])  # type: ignore[arg-type]

    def check_source_ids(self, schema: pa.Schema) -> None:
        """Every source id must name a top-level column of the namespace schema."""
        top = {field_id_of(f): f.name for f in schema}
        for f in self.fields:
            for sid in f.source_ids:
                if sid not in top:
                    raise InvalidSpecError(
                        f"partition field {f.field_id!r}: source id {sid} is not a top-level column "
                        f"of the namespace schema (known ids: {sorted(k for k in top if k is not None)})"
                    )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionSpec):
            return NotImplemented  # the other side may know (EvolveResult); else False
        return self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(self.to_json_string())

    def __repr__(self) -> str:
        return f"PartitionSpec(v{self.id}, {list(self.fields)})"


def check_field_id_reuse(new: PartitionSpec, existing: Iterable[PartitionSpec]) -> None:
    """Spec "Field ID Reuse": a field with the definition of an earlier field must reuse its
    field_id; a field_id may never be reused for a different definition."""
    known: dict[str, PartitionField] = {}
    for spec in existing:
        for f in spec.fields:
            known.setdefault(f.field_id, f)
    for f in new.fields:
        old = known.get(f.field_id)
        if old is not None and not old.same_definition(f):
            raise InvalidSpecError(
                f"partition field {f.field_id!r}: field_id already names a different definition "
                f"({old!r}); field ids are never reused"
            )
        if old is not None and old.result_type != f.result_type:
            raise InvalidSpecError(
                f"partition field {f.field_id!r}: result_type {f.result_type} differs from the "
                f"earlier {old.result_type} of the same field"
            )
        for other in known.values():
            if other.field_id != f.field_id and other.same_definition(f):
                raise InvalidSpecError(
                    f"partition field {f.field_id!r}: same source_ids and transform as existing field "
                    f"{other.field_id!r}, whose field_id must be reused"
                )


# --------------------------------------------------------------------------- helpers


def _loads(value: str | Mapping[str, Any], what: str) -> dict[str, Any]:
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise InvalidSpecError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(value, Mapping):
        raise InvalidSpecError(f"{what} must be a JSON object, got {type(value).__name__}")
    return dict(value)


def _transform_from_mapping(obj: Mapping[str, Any], where: str) -> Transform:
    unknown = set(obj) - {"type", "num_buckets", "width"}
    if unknown:
        raise InvalidSpecError(f"{where}: unknown transform keys {sorted(unknown)}")
    return Transform(type=obj.get("type"), num_buckets=obj.get("num_buckets"), width=obj.get("width"))  # type: ignore[arg-type]


def _check_transform(tf: Transform, n_sources: int, where: str) -> None:
    if tf.type not in TRANSFORM_TYPES:
        raise InvalidSpecError(f"{where}: unknown transform type {tf.type!r} (known: {sorted(TRANSFORM_TYPES)})")
    param, arity = TRANSFORM_TYPES[tf.type]
    for name in ("num_buckets", "width"):
        value = getattr(tf, name)
        if name == param:
            if value is None:
                raise InvalidSpecError(f"{where}: transform {tf.type!r} requires '{name}'")
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidSpecError(f"{where}: '{name}' must be a positive integer, got {value!r}")
            if name == "num_buckets" and value > 2**31 - 1:
                raise InvalidSpecError(f"{where}: 'num_buckets' must fit int32, got {value}")
        elif value is not None:
            raise InvalidSpecError(f"{where}: transform {tf.type!r} takes no '{name}'")
    if arity == "one" and n_sources != 1:
        raise InvalidSpecError(f"{where}: transform {tf.type!r} takes exactly one source id, got {n_sources}")
    if arity == "many" and n_sources < 2:
        raise InvalidSpecError(f"{where}: transform 'multi_bucket' takes two or more source ids, got {n_sources}")


def _check_expression(expression: str, n_sources: int, where: str) -> None:
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidSpecError(f"{where}: 'expression' must be a non-empty SQL string")
    code = _STRING_LIT_RE.sub("''", expression)  # identifiers inside literals do not count
    for m in _IDENT_CALL_RE.finditer(code):
        name = m.group(1).lower()
        if name in VOLATILE_FUNCTIONS:
            raise InvalidSpecError(
                f"{where}: expression uses {m.group(1)!r}, which is not deterministic and stateless "
                f"(spec requirements 1-2)"
            )
        if re.fullmatch(r"col\d+", name) and not m.group(2):
            idx = int(name[3:])
            if idx >= n_sources:
                raise InvalidSpecError(
                    f"{where}: expression references {m.group(1)} but there are only {n_sources} source ids"
                )
