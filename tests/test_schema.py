"""Namespace schema <-> JsonArrowSchema with lance:field_id (spec/partitioning.md "Schema", Appendix A)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from lance_namespace_urllib3_client import models as official

from lancepart import InvalidSpecError
from lancepart.model.spec import (
    arrow_type_from_json,
    arrow_type_to_json,
    assign_field_ids,
    field_id_of,
    schema_from_json,
    schema_to_json,
)


def test_appendix_a_schema_round_trip(appendix_a):
    schema = schema_from_json(appendix_a["schema"])
    assert schema.names == ["id", "event_date", "country"]
    assert [field_id_of(f) for f in schema] == [0, 1, 2]
    assert not schema.field("id").nullable and schema.field("event_date").type == pa.date32()
    assert schema_to_json(schema) == appendix_a["schema"]
    assert schema_to_json(schema) == official.JsonArrowSchema.from_dict(appendix_a["schema"]).to_dict()
    assert schema_from_json(json.dumps(appendix_a["schema"])) == schema


def test_field_ids_assigned_when_missing_and_never_reused():
    s = assign_field_ids(pa.schema([("a", pa.int64()), pa.field("b", pa.utf8(), metadata={"lance:field_id": "7"}),
                                    ("c", pa.struct([("x", pa.int32())]))]))
    assert [field_id_of(f) for f in s] == [8, 7, 9]
    assert field_id_of(s.field("c").type.field(0)) == 10
    # a high-water mark from the namespace keeps dropped ids retired
    s2 = assign_field_ids(pa.schema([("a", pa.int64())]), next_id=42)
    assert field_id_of(s2.field("a")) == 42
    assert assign_field_ids(s) == s  # idempotent


def test_duplicate_field_ids_rejected():
    md = {"lance:field_id": "1"}
    with pytest.raises(InvalidSpecError, match="lance:field_id=1 is used by both 'a' and 'b'"):
        assign_field_ids(pa.schema([pa.field("a", pa.int64(), metadata=md), pa.field("b", pa.int64(), metadata=md)]))


def test_schema_without_field_id_rejected():
    with pytest.raises(InvalidSpecError, match="column 'x' has no lance:field_id"):
        schema_from_json({"fields": [{"name": "x", "nullable": True, "type": {"type": "int64"}}]})


@pytest.mark.parametrize(
    "t",
    [pa.bool_(), pa.int8(), pa.uint64(), pa.float16(), pa.float64(), pa.utf8(), pa.large_utf8(), pa.binary(),
     pa.large_binary(), pa.binary(16), pa.date32(), pa.date64(), pa.timestamp("us"), pa.timestamp("ns"),
     pa.timestamp("ms", "UTC"), pa.timestamp("us", "America/New_York"), pa.decimal128(10, 2),
     pa.decimal256(40, 5), pa.decimal128(5, -2), pa.duration("s"), pa.time64("ns"),
     pa.list_(pa.int32()), pa.large_list(pa.utf8()), pa.list_(pa.float32(), 4),
     pa.struct([("a", pa.int32()), ("b", pa.utf8())]), pa.map_(pa.utf8(), pa.int64())],
)
def test_arrow_type_json_round_trip(t):
    j = arrow_type_to_json(t)
    assert arrow_type_from_json(j.to_dict()) == t
    official.JsonArrowDataType.from_dict(j.to_dict())  # the official model accepts it


def test_lance_type_names():
    """Names as Lance writes them: bare 'timestamp' is microseconds, decimals encode p*1000+s."""
    assert arrow_type_to_json(pa.timestamp("us")).to_dict() == {"type": "timestamp"}
    assert arrow_type_to_json(pa.decimal128(10, 2)).to_dict() == {"type": "decimal128", "length": 10002}
    assert arrow_type_from_json({"type": "boolean"}) == pa.bool_()
    assert arrow_type_to_json(pa.dictionary(pa.int32(), pa.utf8())).to_dict() == {"type": "utf8"}
