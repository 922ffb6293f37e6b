"""Partition spec model: spec/partitioning.md "Partition Spec", "Partition Field Schema",
"Transform Schema", "Field ID Reuse", Appendix A."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from lance_namespace_urllib3_client import models as official

from lancepart import InvalidSpecError, PartitionField, PartitionSpec
from lancepart.model.spec import check_field_id_reuse


def test_appendix_a_specs_round_trip_byte_for_byte(appendix_a):
    """Appendix A: both spec versions parse and serialise exactly as the official models do."""
    for key in ("partition_spec_v1", "partition_spec_v2"):
        obj = appendix_a[key]
        spec = PartitionSpec.from_json(obj)
        assert spec.key == key
        assert spec.to_json() == obj
        ours = spec.to_json_string()
        theirs = json.dumps(official.PartitionSpec.from_dict(obj).to_dict(), separators=(",", ":"))
        assert ours == theirs
        assert PartitionSpec.from_json(ours).to_json_string() == ours
        # and from a JSON string
        assert PartitionSpec.from_json(json.dumps(obj)) == spec


def test_appendix_a_field_accessors(appendix_a):
    spec = PartitionSpec.from_json(appendix_a["partition_spec_v2"])
    year, country = spec.fields
    assert (year.field_id, year.source_ids, year.transform.type) == ("event_year", [1], "year")
    assert year.result_type == pa.int32() and country.result_type == pa.utf8()
    assert year.column_name == "partition_field_event_year"
    assert spec.namespace == "v2"


def test_contract_constructor_forms():
    """The public API: PartitionField(field_id=..., source_ids=..., transform=..., result_type=...) or expression=."""
    b = PartitionField(field_id="b", source_ids=[0], transform={"type": "bucket", "num_buckets": 8},
                       result_type={"type": "int32"})
    assert b.to_json() == {"field_id": "b", "source_ids": [0], "transform": {"type": "bucket", "num_buckets": 8},
                           "result_type": {"type": "int32"}}
    e = PartitionField(field_id="ym", source_ids=[1], expression="date_part('year', col0)", result_type=pa.int32())
    assert e.to_json()["expression"] == "date_part('year', col0)" and "transform" not in e.to_json()
    t = PartitionField(field_id="t", source_ids=[2], transform={"type": "truncate", "width": 3},
                       result_type={"type": "utf8"})
    assert t.transform.width == 3


def _field(**kw):
    base = {"field_id": "f", "source_ids": [0], "transform": {"type": "identity"}, "result_type": {"type": "int64"}}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (_field(expression="col0"), "exactly one of 'transform' or 'expression'"),
        (_field(transform=None), "exactly one of 'transform' or 'expression'"),
        (_field(transform={"type": "sha1"}), "unknown transform type 'sha1'"),
        (_field(transform={"type": "bucket"}), "requires 'num_buckets'"),
        (_field(transform={"type": "bucket", "num_buckets": 0}), "'num_buckets' must be a positive integer"),
        (_field(transform={"type": "bucket", "num_buckets": -3}), "'num_buckets' must be a positive integer"),
        (_field(transform={"type": "truncate"}), "requires 'width'"),
        (_field(transform={"type": "truncate", "width": 0}), "'width' must be a positive integer"),
        (_field(transform={"type": "identity", "width": 3}), "takes no 'width'"),
        (_field(transform={"type": "bucket", "num_buckets": 4}, source_ids=[0, 1]), "exactly one source id"),
        (_field(transform={"type": "multi_bucket", "num_buckets": 4}), "two or more source ids"),
        (_field(source_ids=[]), "non-empty list"),
        (_field(source_ids=[0, 0]), "repeats a field id"),
        (_field(field_id="bad id"), "field_id must match"),
        (_field(field_id="a$b"), "field_id must match"),
        (_field(result_type={"type": "no_such_type"}), "unsupported Arrow type name"),
        (_field(result_type=None), "'result_type' is required"),
        (_field(transform=None, expression="random() * col0"), "'random'"),
        (_field(transform=None, expression="date_part('year', now())"), "'now'"),
        (_field(transform=None, expression="uuid()"), "'uuid'"),
        (_field(transform=None, expression="CURRENT_TIMESTAMP"), "'CURRENT_TIMESTAMP'"),
        (_field(transform=None, expression="col0 + col1"), "references col1"),
        (_field(transform=None, expression="   "), "non-empty SQL"),
    ],
)
def test_invalid_field_rules(obj, message):
    """Every structural rule raises InvalidSpecError naming the field."""
    with pytest.raises(InvalidSpecError, match=r"'f'|partition field") as exc:
        PartitionSpec.from_json({"id": 1, "fields": [obj]})
    assert message in str(exc.value)


def test_volatile_name_inside_string_literal_is_fine():
    f = PartitionField.from_json(_field(transform=None, expression="concat('random()', col0)",
                                        result_type={"type": "utf8"}))
    assert f.expression.startswith("concat")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"id": 0, "fields": [_field()]}, "id must be an integer >= 1"),
        ({"id": 1, "fields": []}, "has no fields"),
        ({"id": 1, "fields": [_field(), _field(transform={"type": "bucket", "num_buckets": 2},
                                               result_type={"type": "int32"})]}, "appears more than once"),
        ({"id": 1, "fields": [_field(), _field(field_id="g")]}, "have the same definition"),
        ({"id": 1, "fields": "x"}, "'fields' must be a JSON array"),
        ({"id": 1, "fields": [_field()], "extra": 1}, "unknown keys"),
        ("{not json", "not valid JSON"),
    ],
)
def test_invalid_spec_rules(spec, message):
    with pytest.raises(InvalidSpecError) as exc:
        PartitionSpec.from_json(spec)
    assert message in str(exc.value)


def test_source_ids_must_exist(appendix_a):
    from lancepart.model.spec import schema_from_json

    schema = schema_from_json(appendix_a["schema"])
    PartitionSpec.from_json(appendix_a["partition_spec_v2"]).check_source_ids(schema)
    bad = PartitionSpec.from_json({"id": 1, "fields": [_field(field_id="x", source_ids=[7])]})
    with pytest.raises(InvalidSpecError, match="'x': source id 7 is not a top-level column"):
        bad.check_source_ids(schema)


def test_field_id_reuse_rules(appendix_a):
    """spec "Field ID Reuse": same definition -> same field_id; a field_id never changes meaning."""
    v1 = PartitionSpec.from_json(appendix_a["partition_spec_v1"])
    v2 = PartitionSpec.from_json(appendix_a["partition_spec_v2"])
    check_field_id_reuse(v2, [v1])  # Appendix A is valid
    same_def_new_id = PartitionSpec.from_json({"id": 3, "fields": [
        {"field_id": "day_of_event", "source_ids": [1], "transform": {"type": "identity"},
         "result_type": {"type": "date32"}}]})
    with pytest.raises(InvalidSpecError, match="'event_date', whose field_id must be reused"):
        check_field_id_reuse(same_def_new_id, [v1, v2])
    reused_id_new_def = PartitionSpec.from_json({"id": 3, "fields": [
        {"field_id": "event_date", "source_ids": [1], "transform": {"type": "month"},
         "result_type": {"type": "int32"}}]})
    with pytest.raises(InvalidSpecError, match="'event_date': field_id already names a different definition"):
        check_field_id_reuse(reused_id_new_def, [v1, v2])
    check_field_id_reuse(PartitionSpec.from_json({"id": 3, "fields": [appendix_a["partition_spec_v1"]["fields"][0]]}),
                         [v1, v2])


def test_import_loads_only_the_models_it_needs():
    """`import lancepart` (every CLI process and Spark Python worker) loads the official
    pydantic models without the REST client's API modules; importing the client afterwards
    works and yields the very same model classes."""
    import subprocess
    import sys

    code = ("import sys, lancepart, lancepart.model.spec as s\n"
            "print('lance_namespace_urllib3_client.api' in sys.modules)\n"
            "from lance_namespace_urllib3_client import ApiClient\n"
            "from lance_namespace_urllib3_client.models import PartitionSpec, JsonArrowSchema\n"
            "print(PartitionSpec is s._m.PartitionSpec and JsonArrowSchema is s._m.JsonArrowSchema)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
