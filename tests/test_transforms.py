"""Partition transforms on hand-made cases: spec/partitioning.md "Partition Expression",
"Supported Transforms", "Hash Functions", docs/design.md §1-§3, and the validation rules."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal

import datafusion as dfn
import mmh3
import pyarrow as pa
import pytest

from lancepart.errors import ExpressionEvaluationError, InvalidSpecError, SchemaMismatchError
from lancepart.model import datafusion_udfs as ldf
from lancepart.model import transforms
from lancepart.model.spec import PartitionField, PartitionSpec
from lancepart.model.transforms import (
    BucketTransform,
    DayTransform,
    ExpressionTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    MultiBucketTransform,
    TruncateTransform,
    YearTransform,
)

INT32_MIN = -(2**31)


def fid(i: int) -> dict[bytes, bytes]:
    return {b"lance:field_id": str(i).encode()}


SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False, metadata=fid(0)),
    pa.field("event_date", pa.date32(), metadata=fid(1)),
    pa.field("country", pa.utf8(), metadata=fid(2)),
    pa.field("ts", pa.timestamp("us", tz="America/New_York"), metadata=fid(3)),
    pa.field("amount", pa.decimal128(10, 2), metadata=fid(4)),
    pa.field("payload", pa.binary(), metadata=fid(5)),
    pa.field("score", pa.float64(), metadata=fid(6)),
    pa.field("tags", pa.list_(pa.field("item", pa.utf8(), metadata=fid(8))), metadata=fid(7)),
    pa.field("loc", pa.struct([pa.field("lat", pa.float64(), metadata=fid(10))]), metadata=fid(9)),
    pa.field("big", pa.large_utf8(), metadata=fid(11)),
    pa.field("n8", pa.int8(), metadata=fid(12)),
    pa.field("naive", pa.timestamp("s"), metadata=fid(13)),
    pa.field("d64", pa.date64(), metadata=fid(14)),
])


def field(tf: dict | None = None, sources: list[int] | None = None, rt: dict | pa.DataType | None = None,
          expression: str | None = None, field_id: str = "f") -> PartitionField:
    return PartitionField(field_id, sources or [0], transform=tf, expression=expression,
                          result_type=rt if rt is not None else {"type": "int32"})


def int64_with_murmur3(target: int) -> int:
    """An int64 whose canonical bytes (8 bytes LE, docs/design.md §1) hash to ``target``.

    MurmurHash3_x86_32 is a bijection per 4-byte block, so it can be run backwards: an
    independent construction (pure Python), checked with mmh3 below."""
    m32 = 0xFFFFFFFF
    c1, c2 = 0xCC9E2D51, 0x1B873593

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m32

    def rotr(x: int, r: int) -> int:
        return ((x >> r) | (x << (32 - r))) & m32

    def inv(a: int) -> int:
        return pow(a, -1, 2**32)

    first = 0
    h1 = rotl(rotl((first * c1) & m32, 15) * c2 & m32, 13)
    h1 = (h1 * 5 + 0xE6546B64) & m32
    h = target & m32  # undo fmix
    h ^= h >> 16
    h = (h * inv(0xC2B2AE35)) & m32
    h ^= (h >> 13) ^ (h >> 26)
    h = (h * inv(0x85EBCA6B)) & m32
    h ^= h >> 16
    h ^= 8  # length
    h = ((h - 0xE6546B64) * inv(5)) & m32
    k2 = (rotr(((rotr(h, 13) ^ h1) * inv(c2)) & m32, 15) * inv(c1)) & m32
    return struct.unpack("<q", struct.pack("<II", first, k2))[0]


INT32_MIN_PREIMAGE = int64_with_murmur3(INT32_MIN)


def test_preimage_really_hashes_to_int32_min():
    assert mmh3.hash(struct.pack("<q", INT32_MIN_PREIMAGE), 0, signed=True) == INT32_MIN


# --------------------------------------------------------------------------- identity


def test_identity_returns_the_source_value_and_type():
    """Supported Transforms: identity = col0, result type same as source."""
    a = pa.array(["US", None, "日本"], pa.utf8())
    assert IdentityTransform().apply([a]).equals(a)
    assert IdentityTransform().result_type([pa.date32()]) == pa.date32()
    f = field({"type": "identity"}, [2], {"type": "utf8"})
    out = transforms.apply(f, pa.table({"country": a}), SCHEMA)
    assert out.type == pa.utf8() and out.to_pylist() == ["US", None, "日本"]


def test_identity_decodes_dictionary_columns():
    a = pa.array(["a", "b", None, "a"]).dictionary_encode()
    assert IdentityTransform().apply([a]).to_pylist() == ["a", "b", None, "a"]


# --------------------------------------------------------------------------- time transforms


def test_year_month_day_are_calendar_values_not_epoch_ordinals():
    """docs/design.md §3: calendar year, month 1-12, day 1-31 (not Iceberg's ordinals)."""
    days = pa.array([20432, -1, 19782, -135140, -719528, None], pa.date32())  # 2025-12-10, 1969-12-31, 2024-02-29
    assert YearTransform().apply([days]).to_pylist() == [2025, 1969, 2024, 1600, 0, None]
    assert MonthTransform().apply([days]).to_pylist() == [12, 12, 2, 1, 1, None]
    assert DayTransform().apply([days]).to_pylist() == [10, 31, 29, 1, 1, None]
    assert YearTransform().result_type([pa.date32()]) == pa.int32()


def test_date64_counts_milliseconds_like_datafusion():
    """date64 -1 ms is 1969-12-31 in DataFusion's date_part (it does not round to whole days)."""
    a = pa.array([-1, 0, 86_400_000 * 365], pa.date64())
    assert YearTransform().apply([a]).to_pylist() == [1969, 1970, 1971]
    assert DayTransform().apply([a]).to_pylist() == [31, 1, 1]


def test_hour_uses_the_local_time_of_the_zone():
    """date_part on a zoned timestamp reads the wall clock of that zone (checked against DataFusion)."""
    epoch = [0]
    cases = {None: 0, "UTC": 0, "+05:30": 5, "-03:00": 21, "Asia/Kolkata": 5, "America/New_York": 19}
    for tz, hour in cases.items():
        a = pa.array(epoch, pa.timestamp("s", tz=tz))
        assert HourTransform().apply([a]).to_pylist() == [hour], tz
    ny = pa.timestamp("s", tz="America/New_York")
    assert DayTransform().apply([pa.array(epoch, ny)]).to_pylist() == [31]
    assert YearTransform().apply([pa.array(epoch, ny)]).to_pylist() == [1969]


def test_daylight_saving_time_follows_datafusion_including_its_2099_horizon():
    """DataFusion (chrono-tz) applies US DST through 2099 and not after; pyarrow's pc.hour stops
    after 2037 on most hosts. Ours must be DataFusion's answer."""
    def utc(y: int, m: int) -> int:
        return int(dt.datetime(y, m, 1, 12, tzinfo=dt.timezone.utc).timestamp())

    a = pa.array([utc(2025, 1), utc(2025, 7), utc(2050, 7), utc(2099, 7), utc(2150, 7)],
                 pa.timestamp("s", tz="America/New_York"))
    assert HourTransform().apply([a]).to_pylist() == [7, 8, 8, 8, 7]


def test_time_transforms_past_1970_and_at_the_ns_limits():
    ns = pa.array([-(2**63) + 1, 2**63 - 1], pa.timestamp("ns"))  # 1677-09-21T00:12:43, 2262-04-11T23:47:16
    assert YearTransform().apply([ns]).to_pylist() == [1677, 2262]
    assert HourTransform().apply([ns]).to_pylist() == [0, 23]
    # adding +05:30 to int64 max nanoseconds must not overflow
    ist = pa.array([2**63 - 1], pa.timestamp("ns", tz="+05:30"))
    assert DayTransform().apply([ist]).to_pylist() == [12]


def test_instants_datafusion_cannot_represent_are_null():
    """DataFusion's date_part is NULL outside -262143-01-01 .. +262142-12-31 (chrono's range)."""
    lo, hi = transforms._MIN_SECONDS, transforms._MAX_SECONDS
    a = pa.array([lo - 1, lo, hi, hi + 1, 2**62], pa.timestamp("s"))
    assert YearTransform().apply([a]).to_pylist() == [None, -262143, 262142, None, None]
    d = pa.array([2**31 - 1, -(2**31)], pa.date32())
    assert MonthTransform().apply([d]).to_pylist() == [None, None]


def test_time_transforms_null_in_null_out():
    for t in (YearTransform(), MonthTransform(), DayTransform(), HourTransform()):
        assert t.apply([pa.array([None], pa.timestamp("ms"))]).to_pylist() == [None]
        assert t.apply([pa.nulls(2)]).to_pylist() == [None, None]


# --------------------------------------------------------------------------- bucket


def test_bucket_matches_icebergs_published_hash_vectors():
    """docs/design.md §1: 34 (long) -> 2017239379, 'iceberg' -> 1210000089; bucket = abs(h) % N."""
    assert BucketTransform(16).apply([pa.array([34], pa.int64())]).to_pylist() == [2017239379 % 16]
    assert BucketTransform(1000).apply([pa.array(["iceberg"])]).to_pylist() == [1210000089 % 1000]


def test_bucket_is_type_promotion_resistant():
    """Spec requirement 3: int32(5) and int64(5) land in the same bucket."""
    b = BucketTransform(7)
    assert b.apply([pa.array([5], pa.int32())]).equals(b.apply([pa.array([5], pa.int64())]))
    assert b.apply([pa.array(["x"], pa.utf8())]).equals(b.apply([pa.array(["x"], pa.large_utf8())]))


@pytest.mark.parametrize("n", [1, 7, 16, 1000, 2**31 - 1])
def test_bucket_of_int32_min_hash_is_never_negative(n):
    """abs(-2147483648) in 64 bits is 2147483648 (docs/design.md §1): bucket = 2**31 % N >= 0."""
    a = pa.array([INT32_MIN_PREIMAGE, None], pa.int64())
    assert BucketTransform(n).apply([a]).to_pylist() == [2**31 % n, None]
    # DataFusion's derived expression agrees, because our murmur3 UDF returns Int64
    out = ldf.evaluate(f"abs(murmur3(col0)) % {n}", [a])
    assert out.to_pylist() == [2**31 % n, None]


def test_int32_murmur3_udf_would_break_abs_in_datafusion():
    """Why murmur3 returns Int64: with an Int32 result DataFusion's abs() overflows and fails."""
    ctx = dfn.SessionContext()
    h32 = dfn.udf(lambda a: pa.array([INT32_MIN] * len(a), pa.int32()), [pa.int64()], pa.int32(), "immutable", "h32")
    ctx.register_udf(h32)
    ctx.register_record_batches("t", [[pa.record_batch({"x": pa.array([INT32_MIN_PREIMAGE])})]])
    with pytest.raises(Exception, match="overflow"):
        ctx.sql("SELECT abs(h32(x)) % 7 FROM t").to_arrow_table()
    ldf.register_udfs(ctx)
    assert ctx.sql("SELECT murmur3(x) AS h, abs(murmur3(x)) % 7 AS b FROM t").to_pydict() == {
        "h": [INT32_MIN], "b": [2**31 % 7]}


def test_bucket_null_in_null_out():
    assert BucketTransform(4).apply([pa.array([None, "a"])]).to_pylist()[0] is None
    assert BucketTransform(4).apply([pa.nulls(3)]).to_pylist() == [None] * 3


def test_multi_bucket_ignores_null_columns_and_is_null_when_all_are():
    """Spec requirement 5 / Hash Functions: NULL fields are ignored; NULL only if all inputs are NULL."""
    mb = MultiBucketTransform(1000)
    a = pa.array([34, None, 34], pa.int64())
    b = pa.array(["iceberg", None, None])
    out = mb.apply([a, b]).to_pylist()
    both = mmh3.hash(struct.pack("<q", 34) + b"iceberg", 0, signed=True)
    assert out == [abs(both) % 1000, None, 2017239379 % 1000]
    assert mb.apply([a, pa.nulls(3)]).to_pylist() == [2017239379 % 1000, None, 2017239379 % 1000]
    assert mb.apply([pa.nulls(2), pa.nulls(2)]).to_pylist() == [None, None]


# --------------------------------------------------------------------------- truncate


def test_truncate_follows_the_derived_expression_not_iceberg_floor():
    """docs/design.md §2: col0 - (col0 % W), remainder signed like the dividend: truncate(-11, 10) = -10."""
    a = pa.array([-11, 11, -1, 0, 19, None], pa.int64())
    assert TruncateTransform(10).apply([a]).to_pylist() == [-10, 10, 0, 0, 10, None]


def test_truncate_integers_at_their_limits_keep_the_source_type():
    out = TruncateTransform(3).apply([pa.array([-128, 127, None], pa.int8())])
    assert out.type == pa.int8() and out.to_pylist() == [-126, 126, None]
    out = TruncateTransform(10).apply([pa.array([2**64 - 1], pa.uint64())])
    assert out.to_pylist() == [2**64 - 6]
    assert TruncateTransform(2**63 - 1).apply([pa.array([-(2**63)], pa.int64())]).to_pylist() == [-(2**63) + 1]


def test_truncate_decimal_counts_whole_units_of_the_value():
    """DataFusion's col0 % 10 on a decimal is the remainder of the value by 10, not of the unscaled int."""
    a = pa.array([Decimal("-11.05"), Decimal("11.99"), Decimal("-0.99"), None], pa.decimal128(10, 2))
    assert TruncateTransform(10).apply([a]).to_pylist() == [Decimal("-10.00"), Decimal("10.00"), Decimal("0.00"), None]
    assert TruncateTransform(1).apply([a]).to_pylist() == [Decimal("-11.00"), Decimal("11.00"), Decimal("0.00"), None]
    assert TruncateTransform(3).apply([a]).type == pa.decimal128(10, 2)


def test_truncate_strings_keeps_code_points_like_left():
    """docs/design.md §2: the first W Unicode code points (combining marks count on their own)."""
    a = pa.array(["héllo", "😀😀x", "", "e\u0301e\u0301", None, "日本語テキスト"])
    assert TruncateTransform(3).apply([a]).to_pylist() == ["hél", "😀😀x", "", "e\u0301e", None, "日本語"]
    big = TruncateTransform(1).apply([a.cast(pa.large_utf8())])
    assert big.type == pa.large_utf8() and big.to_pylist()[:2] == ["h", "😀"]


def test_truncate_decimal256_needs_room_for_the_division():
    """W * trunc(x / W) is computed in decimal256: at most 76 digits (W = 1 needs no division)."""
    t = pa.decimal256(76, 0)
    TruncateTransform(1).check_source_types([t])
    with pytest.raises(InvalidSpecError, match="not supported"):
        TruncateTransform(3).check_source_types([t])
    TruncateTransform(3).check_source_types([pa.decimal256(72, 0)])


def test_truncate_binary_keeps_bytes_even_when_not_utf8():
    """left() on Binary would cast to UTF-8 and fail on these bytes; the byte form does not."""
    a = pa.array([b"\xff\xfe\x80", "é".encode(), None], pa.binary())
    assert TruncateTransform(1).apply([a]).to_pylist() == [b"\xff", b"\xc3", None]
    with pytest.raises(ExpressionEvaluationError):
        ldf.evaluate("left(col0, 1)", [a])
    sql = ldf.derived_expression(field({"type": "truncate", "width": 1}, [5], {"type": "binary"}), [pa.binary()])
    assert ldf.evaluate(sql, [a]).to_pylist() == [b"\xff", b"\xc3", None]


# --------------------------------------------------------------------------- contract apply()


def test_apply_resolves_sources_by_field_id_not_by_name():
    """Schema: source_ids are lance:field_id values, so a renamed column still resolves."""
    renamed = SCHEMA.set(1, pa.field("day_of_event", pa.date32(), metadata=fid(1)))
    f = field({"type": "year"}, [1])
    out = transforms.apply(f, pa.table({"day_of_event": pa.array([20432], pa.date32())}), renamed)
    assert out.to_pylist() == [2025]


def test_missing_source_reads_as_null():
    """Spec requirement 4: a source id not in the schema (or a column not in the data) is NULL."""
    data = pa.table({"id": [1, 2]})
    assert transforms.apply(field({"type": "year"}, [1]), data, SCHEMA).to_pylist() == [None, None]
    assert transforms.apply(field({"type": "bucket", "num_buckets": 4}, [99]), data, SCHEMA).to_pylist() == [None] * 2
    ident = transforms.apply(field({"type": "identity"}, [2], {"type": "utf8"}), data, SCHEMA)
    assert ident.type == pa.utf8() and ident.null_count == 2
    mb = field({"type": "multi_bucket", "num_buckets": 1000}, [0, 99])
    assert transforms.apply(mb, pa.table({"id": pa.array([34])}), SCHEMA).to_pylist() == [2017239379 % 1000]
    # the schema's type is used for a known but absent column
    [arr] = transforms.source_arrays(field({"type": "year"}, [1]), data, SCHEMA)
    assert arr.type == pa.date32() and arr.null_count == 2
    expr = field(expression="CASE WHEN col0 IS NULL THEN -1 ELSE col0 % 5 END", sources=[99], rt={"type": "int64"})
    assert transforms.apply(expr, data, SCHEMA).to_pylist() == [-1, -1]


def test_apply_casts_data_to_the_namespace_schema_type():
    f = field({"type": "truncate", "width": 10}, [0], {"type": "int64"})
    out = transforms.apply(f, pa.table({"id": pa.array([-11], pa.int32())}), SCHEMA)
    assert out.type == pa.int64() and out.to_pylist() == [-10]
    # a UTC timestamp column read against the New York schema type: New York's hour
    h = transforms.apply(field({"type": "hour"}, [3]), pa.table({"ts": pa.array([0], pa.timestamp("us", "UTC"))}),
                         SCHEMA)
    assert h.to_pylist() == [19]
    with pytest.raises(SchemaMismatchError, match="'id'"):
        transforms.apply(f, pa.table({"id": pa.array(["x"])}), SCHEMA)


def test_apply_accepts_record_batches_and_chunked_tables():
    f = field({"type": "bucket", "num_buckets": 16}, [0])
    t = pa.Table.from_batches([pa.record_batch({"id": pa.array([34])}), pa.record_batch({"id": pa.array([34])})])
    assert transforms.apply(f, t, SCHEMA).to_pylist() == [3, 3]
    assert transforms.apply(f, t.to_batches()[0], SCHEMA).to_pylist() == [3]


def test_expression_fields_evaluate_through_datafusion():
    f = field(expression="lower(col0)", sources=[2], rt={"type": "utf8"})
    out = transforms.apply(f, pa.table({"country": ["US", None, "ÉTÉ"]}), SCHEMA)
    assert out.type == pa.utf8() and out.to_pylist() == ["us", None, "été"]
    ym = field(expression="date_part('year', col0) * 100 + date_part('month', col0)", sources=[1],
               rt={"type": "int64"})
    assert transforms.apply(ym, pa.table({"event_date": pa.array([20432], pa.date32())}), SCHEMA).to_pylist() == [
        202512]
    # Utf8View output is declared as utf8
    v = field(expression="CAST(col0 AS VARCHAR)", sources=[0], rt={"type": "utf8"})
    assert transforms.apply(v, pa.table({"id": [7]}), SCHEMA).type == pa.utf8()


def test_transform_for_builds_one_object_per_transform_type():
    assert transforms.transform_for(field({"type": "bucket", "num_buckets": 8})) == BucketTransform(8)
    assert transforms.transform_for(field({"type": "truncate", "width": 4}, rt={"type": "int64"})) == TruncateTransform(
        4)
    assert transforms.transform_for(field({"type": "multi_bucket", "num_buckets": 2}, [0, 1])) == MultiBucketTransform(
        2)
    e = transforms.transform_for(field(expression="col0 % 3", rt={"type": "int64"}))
    assert e == ExpressionTransform("col0 % 3", pa.int64())


# --------------------------------------------------------------------------- derived expressions


def test_derived_expressions_are_the_spec_table():
    """Supported Transforms: the Derived Expression column."""
    d = ldf.derived_expression
    assert d(field({"type": "identity"}, rt={"type": "int64"})) == "col0"
    for part in ("year", "month", "day", "hour"):
        assert d(field({"type": part})) == f"date_part('{part}', col0)"
    assert d(field({"type": "bucket", "num_buckets": 16})) == "abs(murmur3(col0)) % 16"
    assert d(field({"type": "multi_bucket", "num_buckets": 8}, [0, 1, 2])) == "abs(murmur3_multi(col0, col1, col2)) % 8"
    tr = field({"type": "truncate", "width": 3}, rt={"type": "utf8"})
    assert d(tr, [pa.utf8()]) == "left(col0, 3)"
    assert d(tr, [pa.int64()]) == "col0 - (col0 % 3)"
    assert d(tr, [pa.large_binary()]) == "decode(left(encode(col0, 'hex'), 6), 'hex')"
    with pytest.raises(InvalidSpecError, match="source_types"):
        d(tr)
    assert d(field(expression="lower(col0)", rt={"type": "utf8"})) == "lower(col0)"


# --------------------------------------------------------------------------- datafusion.evaluate


def test_evaluate_hashes_every_supported_type_through_rewritten_udfs():
    ts = pa.array([1_000_000], pa.timestamp("us", tz="UTC"))
    out = ldf.evaluate("murmur3_multi(col0, lower(col1), col2)", [pa.array([34]), pa.array(["ICEBERG"]), ts])
    expected = mmh3.hash(struct.pack("<q", 34) + b"iceberg" + struct.pack("<q", 1_000_000), 0, signed=True)
    assert out.to_pylist() == [expected]
    assert ldf.evaluate("murmur3(murmur3(col0))", [pa.array(["iceberg"])]).to_pylist() == [
        mmh3.hash(struct.pack("<q", 1210000089), 0, signed=True)]


def test_evaluate_leaves_murmur3_inside_string_literals_alone():
    assert ldf.evaluate("concat('murmur3(', col0, ')')", [pa.array(["x"])]).to_pylist() == ["murmur3(x)"]
    assert ldf.referenced_columns("concat(col1, 'col7', \"col9\", col0)") == [0, 1]


def test_evaluate_reports_the_failing_row():
    with pytest.raises(ExpressionEvaluationError, match=r"CAST\(col0 AS INT\).*row 2.*'x'"):
        ldf.evaluate("CAST(col0 AS INT)", [pa.array(["1", "2", "x", "4"])])


def test_evaluate_keeps_row_order_across_batches():
    """DataFusion repartitions round-robin with target_partitions > 1; we must not."""
    a = pa.array(range(200_000), pa.int64())
    assert ldf.evaluate("col0 + 1", [a]).to_pylist()[:3] == [1, 2, 3]
    assert ldf.evaluate("col0 + 1", [a]).equals(pa.array(range(1, 200_001), pa.int64()))


def test_evaluate_caches_the_plan_per_expression_and_schema():
    ldf.evaluate("col0 * 7", [pa.array([1])])
    before = ldf._prepare.cache_info().hits
    ldf.evaluate("col0 * 7", [pa.array([2, 3])])
    assert ldf._prepare.cache_info().hits == before + 1


def test_register_udfs_for_hand_written_sql():
    ctx = dfn.SessionContext()
    ldf.register_udfs(ctx, [pa.utf8()], [pa.int64(), pa.utf8()])
    got = ctx.sql("SELECT murmur3('iceberg') AS a, murmur3_multi(34, 'iceberg') AS b").to_pydict()
    assert got == {"a": [1210000089], "b": [mmh3.hash(struct.pack("<q", 34) + b"iceberg", 0, signed=True)]}
    with pytest.raises(InvalidSpecError, match="unsupported"):
        ldf.register_udfs(ctx, [pa.list_(pa.int64())])


# --------------------------------------------------------------------------- validation

VALID = [
    ({"type": "identity"}, [2], {"type": "utf8"}),
    ({"type": "identity"}, [6], {"type": "float64"}),
    ({"type": "year"}, [1], {"type": "int32"}),
    ({"type": "month"}, [14], {"type": "int32"}),
    ({"type": "hour"}, [3], {"type": "int32"}),
    ({"type": "hour"}, [13], {"type": "int32"}),
    ({"type": "bucket", "num_buckets": 16}, [6], {"type": "int32"}),
    ({"type": "multi_bucket", "num_buckets": 16}, [1, 2, 4], {"type": "int32"}),
    ({"type": "truncate", "width": 3}, [11], {"type": "large_utf8"}),
    ({"type": "truncate", "width": 10}, [4], {"type": "decimal128", "length": 10002}),
    ({"type": "truncate", "width": 4}, [5], {"type": "binary"}),
]


@pytest.mark.parametrize(("tf", "sources", "rt"), VALID)
def test_valid_fields_pass(tf, sources, rt):
    transforms.validate_field(field(tf, sources, rt), SCHEMA)


@pytest.mark.parametrize(
    ("tf", "sources", "rt", "message"),
    [
        # source ids
        ({"type": "identity"}, [42], {"type": "int64"}, "source id 42 is not a column"),
        ({"type": "identity"}, [10], {"type": "float64"}, "nested column 'loc.lat'"),
        # unsupported source types, per transform
        ({"type": "identity"}, [7], {"type": "int32"}, "does not support source type list"),
        ({"type": "identity"}, [9], {"type": "int32"}, "does not support source type struct"),
        ({"type": "year"}, [0], {"type": "int32"}, "'year' does not support source type int64"),
        ({"type": "day"}, [2], {"type": "int32"}, "'day' does not support source type string"),
        ({"type": "hour"}, [1], {"type": "int32"}, "'hour' does not support source type date32"),
        ({"type": "hour"}, [14], {"type": "int32"}, "'hour' does not support source type date64"),
        ({"type": "bucket", "num_buckets": 4}, [7], {"type": "int32"}, "'bucket' does not support source type list"),
        ({"type": "multi_bucket", "num_buckets": 4}, [0, 9], {"type": "int32"}, "'multi_bucket' does not support"),
        ({"type": "truncate", "width": 4}, [6], {"type": "float64"}, "floats cannot be truncated"),
        ({"type": "truncate", "width": 4}, [1], {"type": "date32"}, "'truncate' does not support source type date32"),
        ({"type": "truncate", "width": 2**63}, [0], {"type": "int64"}, "too large"),
        # result_type inconsistent with what the transform yields
        ({"type": "identity"}, [2], {"type": "large_utf8"}, "yields string, but result_type is large_string"),
        ({"type": "identity"}, [0], {"type": "int32"}, "yields int64, but result_type is int32"),
        ({"type": "truncate", "width": 2}, [12], {"type": "int64"}, "yields int8, but result_type is int64"),
        ({"type": "year"}, [1], {"type": "int64"}, "yields int32, but result_type is int64"),
        ({"type": "bucket", "num_buckets": 4}, [0], {"type": "int64"}, "yields int32"),
    ],
)
def test_invalid_fields_are_rejected_naming_the_field(tf, sources, rt, message):
    with pytest.raises(InvalidSpecError, match=r"partition field 'f'") as e:
        transforms.validate_field(field(tf, sources, rt), SCHEMA)
    assert message in str(e.value)


def test_unknown_time_zone_is_rejected():
    s = pa.schema([pa.field("t", pa.timestamp("s", tz="Mars/Olympus_Mons"), metadata=fid(0))])
    with pytest.raises(InvalidSpecError, match="Mars/Olympus_Mons"):
        transforms.validate_field(field({"type": "year"}), s)


@pytest.mark.parametrize(
    ("expression", "sources", "rt", "message"),
    [
        ("nosuch(col0)", [2], {"type": "utf8"}, "Invalid function 'nosuch'"),
        ("col0 + ", [0], {"type": "int64"}, "cannot parse"),
        ("col0 - 'x'", [1], {"type": "int64"}, "cannot plan"),
        ("input_file_name()", [0], {"type": "utf8"}, "not deterministic"),
        ("sum(col0)", [0], {"type": "int64"}, "aggregate or window"),
        ("row_number() OVER ()", [0], {"type": "int64"}, "aggregate or window"),
        ("abs(col0) OVER ()", [0], {"type": "int64"}, "OVER is not allowed"),
        ("(SELECT 1)", [0], {"type": "int64"}, "SELECT is not allowed"),
        ("col0 FROM other", [0], {"type": "int64"}, "cannot parse"),
        # output type inconsistent with result_type
        ("lower(col0)", [2], {"type": "int32"}, "yields string but result_type is int32"),
        ("col0 + 1", [0], {"type": "int32"}, "yields int64 but result_type is int32"),
        ("date_part('year', col0) * 100 + date_part('month', col0)", [1], {"type": "int32"}, "yields int64"),
        ("murmur3(col0)", [2], {"type": "int32"}, "yields int64"),
    ],
)
def test_invalid_expressions_are_rejected(expression, sources, rt, message):
    with pytest.raises(InvalidSpecError, match=r"partition field 'f'") as e:
        transforms.validate_field(field(expression=expression, sources=sources, rt=rt), SCHEMA)
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("expression", "sources", "rt"),
    [
        ("CAST(col0 AS VARCHAR)", [0], {"type": "utf8"}),  # Utf8View -> utf8
        ("col0", [12], {"type": "int64"}),  # int8 widened
        ("date_part('year', col0) * 100 + date_part('month', col0)", [1], {"type": "int64"}),
        ("abs(murmur3(col0)) % 10", [2], {"type": "int64"}),
        ("CAST(murmur3(col0) AS INT)", [2], {"type": "int32"}),
        ("CASE WHEN col0 IS NULL THEN -1 ELSE col0 % 5 END", [0], {"type": "int64"}),
    ],
)
def test_valid_expressions_pass(expression, sources, rt):
    transforms.validate_field(field(expression=expression, sources=sources, rt=rt), SCHEMA)


def test_lossless_casts_stay_within_a_family():
    ok = transforms.losslessly_castable
    assert ok(pa.string_view(), pa.utf8()) and ok(pa.large_utf8(), pa.utf8()) and ok(pa.int32(), pa.int64())
    assert ok(pa.uint32(), pa.int64()) and ok(pa.decimal128(10, 2), pa.decimal128(12, 3)) and ok(pa.null(), pa.int8())
    assert not ok(pa.int64(), pa.int32()) and not ok(pa.uint64(), pa.int64()) and not ok(pa.int32(), pa.utf8())
    assert not ok(pa.float64(), pa.float32()) and not ok(pa.decimal128(10, 2), pa.decimal128(10, 3))


def test_validate_spec_checks_every_field_and_field_id_reuse():
    """Spec "Field ID Reuse": same source_ids + transform must reuse the field_id; ids are never reused."""
    year = field({"type": "year"}, [1], field_id="event_year")
    v1 = PartitionSpec(1, [year])
    transforms.validate_spec(PartitionSpec(2, [year, field({"type": "identity"}, [2], {"type": "utf8"}, field_id="c")]),
                             SCHEMA, [v1])
    with pytest.raises(InvalidSpecError, match="must be reused"):
        transforms.validate_spec(PartitionSpec(2, [field({"type": "year"}, [1], field_id="yr")]), SCHEMA, [v1])
    with pytest.raises(InvalidSpecError, match="never reused"):
        transforms.validate_spec(PartitionSpec(2, [field({"type": "month"}, [1], field_id="event_year")]), SCHEMA,
                                 [v1])
    with pytest.raises(InvalidSpecError, match="'hour' does not support"):
        transforms.validate_spec(PartitionSpec(2, [field({"type": "hour"}, [1], field_id="h")]), SCHEMA, [v1])


def test_appendix_a_specs_validate(appendix_a):
    from lancepart.model.spec import schema_from_json

    schema = schema_from_json(appendix_a["schema"])
    v1 = PartitionSpec.from_json(appendix_a["partition_spec_v1"])
    v2 = PartitionSpec.from_json(appendix_a["partition_spec_v2"])
    transforms.validate_spec(v1, schema)
    transforms.validate_spec(v2, schema, [v1])
    data = pa.table({"id": [1], "event_date": pa.array([dt.date(2025, 12, 10)]), "country": ["US"]})
    assert [transforms.apply(f, data, schema).to_pylist() for f in v2.fields] == [[2025], ["US"]]


def _int32_child(name: str) -> dict:
    return {"name": name, "type": {"type": "int32"}, "nullable": True}


@pytest.mark.parametrize(("expression", "rt"), [
    ("named_struct('x', col0)", {"type": "struct", "fields": [_int32_child("x")]}),
    ("make_array(col0)", {"type": "list", "fields": [_int32_child("item")]}),
])
def test_a_result_type_that_cannot_name_a_partition_is_refused_at_create(tmp_path, expression, rt):
    """A partition's namespace id is derived from the canonical bytes of its values, so a
    result_type without them (a struct, a list) could never have a row written: the create
    refuses the spec, naming the field, and leaves no namespace (it used to create one whose
    every write raised "murmur3: unsupported Arrow type")."""
    from lancepart import PartitionedNamespace

    schema = pa.schema([("id", pa.int64()), ("a", pa.int32())])
    spec = {"id": 1, "fields": [{"field_id": "s", "source_ids": [1], "expression": expression, "result_type": rt}]}
    root = tmp_path / "ns"
    with pytest.raises(InvalidSpecError, match=r"partition field 's': result_type .* cannot name a partition"):
        PartitionedNamespace.create(str(root), schema, spec)
    assert not (root / "__manifest").exists()
