"""The rule of docs/design.md §3, as a property: for every transform and supported type, the value
computed on executors (``transforms.apply``) equals DataFusion's evaluation of the spec's derived
expression (spec/partitioning.md "Supported Transforms") on the same input.

The reference is a plain DataFusion ``SessionContext`` running the derived SQL, with only the
public ``register_udfs`` added for the spec's murmur3 extensions; it does not go through
``lancepart.model.datafusion_udfs.evaluate``. Inputs: 10^4 seeded random rows per (transform, type) with
NULLs, negatives, type limits, timestamps far before 1970 and at the limits of every unit,
dates ±10^5 days and beyond DataFusion's range, non-ASCII strings (emoji, CJK, combining marks),
empty strings and non-UTF-8 bytes. Expression fields are checked against independent
computations (numpy datetime64, Python str, mmh3, zoneinfo).
"""

from __future__ import annotations

import datetime as dt
import functools
import struct
import zlib
import zoneinfo
from collections.abc import Sequence
from decimal import Decimal

import datafusion as dfn
import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lancepart.model import transforms
from lancepart.model.datafusion_udfs import derived_expression, register_udfs
from lancepart.model.spec import PartitionField

N = 10_000
NULL_RATE = 0.05
ZONES = [None, "UTC", "America/New_York", "Asia/Kolkata", "+05:30", "-03:00"]
UNITS = ["s", "ms", "us", "ns"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
DECIMALS = {"decimal128(10,2)": pa.decimal128(10, 2), "decimal128(38,0)": pa.decimal128(38, 0),
            "decimal128(38,10)": pa.decimal128(38, 10), "decimal128(4,4)": pa.decimal128(4, 4),
            "decimal256(50,5)": pa.decimal256(50, 5)}
# Characters of every UTF-8 length, combining marks, a ZWJ sequence, the last code point.
ALPHABET = [*"abcXYZ09 -_.", "é", "ß", "ñ", "Ω", "Σ", "İ", "\u0301", "\u0308", "日", "本", "語", "😀", "🎉",
            "👩\u200d💻", "\U0010ffff", "É", "Ä"]


# --------------------------------------------------------------------------- reference and comparison


def datafusion_reference(sql: str, arrays: Sequence[pa.Array]) -> pa.Array:
    """``SELECT <sql> FROM t`` in a fresh DataFusion session, columns col0..colN."""
    ctx = dfn.SessionContext(dfn.SessionConfig().with_target_partitions(1))  # keeps row order
    types = [a.type for a in arrays]
    register_udfs(ctx, types[:1], types if len(types) > 1 else None)
    ctx.register_record_batches("t", [[pa.record_batch({f"col{i}": a for i, a in enumerate(arrays)})]])
    return ctx.sql(f"SELECT {sql} AS v FROM t").to_arrow_table().column(0).combine_chunks()


def assert_same(got: pa.Array, expected: pa.Array, arrays: Sequence[pa.Array], label: str) -> None:
    assert got.type == expected.type, (label, got.type, expected.type)
    g, e = got, expected
    if pa.types.is_floating(got.type):  # NaN == NaN bit for bit
        width = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[got.type.bit_width]
        g, e = got.view(width), expected.view(width)
    if g.equals(e):
        return
    same = pc.fill_null(pc.equal(g, e), False).to_numpy(zero_copy_only=False)
    same |= (g.is_null().to_numpy(zero_copy_only=False) & e.is_null().to_numpy(zero_copy_only=False))
    bad = np.nonzero(~same)[0]
    rows = [([_show(a, int(i)) for a in arrays], got[int(i)].as_py(), expected[int(i)].as_py()) for i in bad[:5]]
    pytest.fail(f"{label}: {len(bad)} of {len(got)} rows differ; (inputs, ours, DataFusion): {rows}")


def _show(a: pa.Array, i: int):
    if pa.types.is_timestamp(a.type) or pa.types.is_date64(a.type):
        return a.view(pa.int64())[i].as_py()
    if pa.types.is_date32(a.type):
        return a.view(pa.int32())[i].as_py()
    return a[i].as_py()


def check(tf: dict, arrays: Sequence[pa.Array], result_type: pa.DataType | None = None) -> None:
    f = PartitionField("f", list(range(len(arrays))), transform=tf,
                       result_type=result_type if result_type is not None else pa.int32())
    types = [a.type for a in arrays]
    transforms.validate_field(f, pa.schema([pa.field(f"c{i}", t, metadata={"lance:field_id": str(i)})
                                            for i, t in enumerate(types)]))
    got = transforms.transform_for(f).apply(arrays).cast(f.result_type)
    sql = derived_expression(f, types)
    expected = datafusion_reference(sql, arrays).cast(f.result_type)
    assert_same(got, expected, arrays, f"{tf} of {types} ({sql})")


# --------------------------------------------------------------------------- seeded generators


def rng_for(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def null_mask(rng: np.random.Generator, n: int = N) -> np.ndarray:
    return rng.random(n) < NULL_RATE


def _fill(rng: np.random.Generator, parts: list[np.ndarray], lo: int, hi: int) -> np.ndarray:
    v = np.concatenate(parts)
    if len(v) < N:
        v = np.concatenate([v, rng.integers(lo, hi, N - len(v), endpoint=True)])
    return rng.permutation(v[:N])


@functools.cache
def integers(name: str) -> pa.Array:
    t = pa.type_for_alias(name)
    dtype = t.to_pandas_dtype()
    info = np.iinfo(dtype)
    rng = rng_for("int", name)
    limits = [info.min, info.max, info.min + 1, info.max - 1, 0, 1, -1 if info.min < 0 else 2, 10, 11]
    parts = [np.array(limits, dtype=dtype),
             rng.integers(info.min, info.max, N // 2, endpoint=True, dtype=dtype),
             rng.integers(max(int(info.min), -2000), min(int(info.max), 2000), N // 3, endpoint=True).astype(dtype)]
    parts.append(rng.integers(0, 100, N - sum(len(x) for x in parts), dtype=dtype))
    v = rng.permutation(np.concatenate(parts))
    assert v.dtype == dtype
    return pa.array(v, t, mask=null_mask(rng))


@functools.cache
def timestamps(unit: str, tz: str | None) -> pa.Array:
    rng = rng_for("ts", unit, tz)
    per = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    i64 = (-(2**63), 2**63 - 1)
    lo = max(transforms._MIN_SECONDS * per, i64[0])  # DataFusion's range (NULL outside)
    hi = min(transforms._MAX_SECONDS * per + per - 1, i64[1])
    edges = [lo, hi, 0, -1, 1, i64[0], i64[1], i64[0] + 1]
    if lo > i64[0]:
        edges += [lo - 1, hi + 1]
    parts = [np.array(edges, np.int64),
             rng.integers(lo, hi, N // 4, endpoint=True),  # the whole representable range
             rng.integers(*i64, N // 8, endpoint=True),  # mostly out of range for s/ms/us
             # 1875 .. 2096: DST rules, pre-1970 history, second-precision LMT offsets
             rng.integers(-3 * 10**9 * per if unit != "ns" else lo, min(4 * 10**9 * per, hi), N // 2)]
    return pa.array(_fill(rng, parts, lo, hi), pa.timestamp(unit, tz=tz), mask=null_mask(rng))


@functools.cache
def date32s() -> pa.Array:
    rng = rng_for("date32")
    lo, hi = transforms._MIN_DAYS, transforms._MAX_DAYS
    parts = [np.array([lo, hi, lo - 1, hi + 1, -(2**31), 2**31 - 1, 0, -1, -719528]),
             rng.integers(-(10**5), 10**5, N // 2), rng.integers(lo, hi, N // 4),
             rng.integers(-(2**31), 2**31 - 1, 500)]
    return pa.array(_fill(rng, parts, -(10**5), 10**5).astype(np.int32), pa.date32(), mask=null_mask(rng))


@functools.cache
def date64s() -> pa.Array:
    rng = rng_for("date64")
    day = 86_400_000
    lo, hi = transforms._MIN_SECONDS * 1000, transforms._MAX_SECONDS * 1000 + 999
    parts = [np.array([lo, hi, lo - 1, hi + 1, 0, -1, -(2**63), 2**63 - 1], np.int64),
             rng.integers(-(10**5), 10**5, N // 4) * day,  # whole days, as date64 should be
             rng.integers(-(10**5) * day, 10**5 * day, N // 4),  # and not: sub-day milliseconds
             rng.integers(lo, hi, N // 4), rng.integers(-(2**63), 2**63 - 1, 500, endpoint=True)]
    return pa.array(_fill(rng, parts, lo, hi), pa.date64(), mask=null_mask(rng))


def _random_strings(rng: np.random.Generator, n: int = N) -> list[str]:
    lengths = rng.integers(0, 12, n)
    lengths[:50] = 0  # empty strings
    picks = rng.integers(0, len(ALPHABET), int(lengths.sum()))
    out, pos = [], 0
    for ln in lengths:
        out.append("".join(ALPHABET[c] for c in picks[pos:pos + ln]))
        pos += ln
    return out


@functools.cache
def strings(name: str) -> pa.Array:
    rng = rng_for("str", name)
    return pa.array(_random_strings(rng), pa.type_for_alias(name), mask=null_mask(rng))


@functools.cache
def binaries(name: str) -> pa.Array:
    rng = rng_for("bin", name)
    lengths = rng.integers(0, 12, N)
    raw = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8).tobytes()  # mostly not UTF-8
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = [raw[offsets[i]:offsets[i + 1]] for i in range(N)]
    t = pa.binary(5) if name == "fixed_size_binary" else pa.type_for_alias(name)
    if name == "fixed_size_binary":
        values = [(v + b"\0" * 5)[:5] for v in values]
    return pa.array(values, t, mask=null_mask(rng))


@functools.cache
def floats(name: str) -> pa.Array:
    rng = rng_for("float", name)
    dtype = pa.type_for_alias(name).to_pandas_dtype()
    v = rng.standard_normal(N) * 10.0 ** rng.integers(-300, 300, N)
    v[:16] = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 5e-324, -5e-324, 1.0, -1.0, 2.0**53, 3.4e38, 1e-45,
              0.1, 1e308, -1e308]
    with np.errstate(over="ignore"):
        v = v.astype(dtype)
    return pa.array(v, pa.type_for_alias(name), mask=null_mask(rng))


@functools.cache
def decimals(name: str) -> pa.Array:
    t = DECIMALS[name]
    rng = rng_for("decimal", name)
    p, s = t.precision, t.scale
    n_digits = rng.integers(0, p + 1, N)
    signs = rng.integers(0, 2, N)
    digits = rng.integers(0, 10, int(n_digits.sum()))
    values, pos = [], 0
    for k, sign in zip(n_digits, signs, strict=True):
        values.append(Decimal((int(sign), tuple(int(d) for d in digits[pos:pos + k]) or (0,), -s)))
        pos += k
    values[:4] = [Decimal((0, (9,) * p, -s)), Decimal((1, (9,) * p, -s)), Decimal(0), Decimal((1, (1, 1), -s))]
    return pa.array(values, t, mask=null_mask(rng))


@functools.cache
def booleans() -> pa.Array:
    rng = rng_for("bool")
    return pa.array(rng.random(N) < 0.5, mask=null_mask(rng))


def data(name: str) -> pa.Array:
    if name in INTS:
        return integers(name)
    if name in DECIMALS:
        return decimals(name)
    if name in ("utf8", "large_utf8"):
        return strings(name)
    if name in ("binary", "large_binary", "fixed_size_binary"):
        return binaries(name)
    if name in ("float32", "float64"):
        return floats(name)
    if name == "bool":
        return booleans()
    if name == "date32":
        return date32s()
    if name == "date64":
        return date64s()
    _, unit, tz = name.split("|")
    return timestamps(unit, tz or None)


def ts_name(unit: str, tz: str | None) -> str:
    return f"ts|{unit}|{tz or ''}"


TIMESTAMPS = [ts_name(u, z) for u in UNITS for z in ZONES]
HASHABLE = [*INTS, "bool", "float32", "float64", *DECIMALS, "utf8", "large_utf8", "binary", "large_binary",
            "fixed_size_binary", "date32", "date64", ts_name("s", None), ts_name("ms", "UTC"),
            ts_name("us", "America/New_York"), ts_name("ns", "Asia/Kolkata"), ts_name("ns", None)]


# --------------------------------------------------------------------------- the property, per transform


# hour of a date is rejected at validation (spec: "Extract hour (0-23) from timestamp")
TIME_CASES = [(p, x) for x in ["date32", "date64", *TIMESTAMPS] for p in ("year", "month", "day", "hour")
              if not (p == "hour" and x.startswith("date"))]


@pytest.mark.parametrize(("part", "name"), TIME_CASES)
def test_time_transforms_equal_date_part(part, name):
    """docs/design.md §3: year/month/day/hour == date_part(part, col0), dates and every unit and zone."""
    check({"type": part}, [data(name)])


@pytest.mark.parametrize("name", [*HASHABLE, "ts|s|+05:30"])
def test_identity_equals_col0(name):
    a = data(name)
    check({"type": "identity"}, [a], a.type)


@pytest.mark.parametrize("n", [1, 7, 16, 1000])
@pytest.mark.parametrize("name", HASHABLE)
def test_bucket_equals_abs_murmur3_mod_n(name, n):
    check({"type": "bucket", "num_buckets": n}, [data(name)])


MULTI = [("int32", "utf8"), ("utf8", "int64", "date32"), ("binary", "decimal128(10,2)"),
         ("float64", ts_name("us", "UTC"), "large_utf8"), ("uint64", "bool"), ("int8", "int8", "int8")]


@pytest.mark.parametrize("n", [1, 7, 16, 1000])
@pytest.mark.parametrize("names", MULTI, ids=["+".join(m) for m in MULTI])
def test_multi_bucket_equals_abs_murmur3_multi_mod_n(names, n):
    arrays = [data(x) for x in names]
    if names[1] == names[0]:  # same type, independent values and NULLs
        arrays = [integers("int8"), pa.array(np.roll(integers("int8").to_numpy(zero_copy_only=False), 7)),
                  pa.nulls(N, pa.int8())]
    check({"type": "multi_bucket", "num_buckets": n}, arrays)


@pytest.mark.parametrize("w", [1, 3, 10, 1000])
@pytest.mark.parametrize("name", [*INTS, *DECIMALS, "utf8", "large_utf8", "binary", "large_binary"])
def test_truncate_equals_derived_expression(name, w):
    """docs/design.md §2: numbers col0 - (col0 % W), strings left(col0, W), binary the byte form."""
    a = data(name)
    check({"type": "truncate", "width": w}, [a], a.type)


@pytest.mark.parametrize("w", [1, 3, 10, 1000])
def test_truncate_at_the_widest_decimal(w):
    # the widest decimal256 TruncateTransform accepts for this width (see _decimal_truncate_fits)
    t = pa.decimal256(76 - max(4, len(str(w)) + 1), 0) if w > 1 else pa.decimal256(76, 0)
    a = pa.array([Decimal("9" * t.precision), Decimal("-" + "9" * t.precision), Decimal(-11), None], t)
    check({"type": "truncate", "width": w}, [a], t)


def test_missing_column_equals_derived_expression_on_null():
    """Spec requirement 4 and 5: a removed column is NULL; DataFusion agrees on the NULL input."""
    for tf in ({"type": "year"}, {"type": "bucket", "num_buckets": 7}):
        check(tf, [pa.nulls(5, pa.date32())])
    check({"type": "multi_bucket", "num_buckets": 7}, [pa.array([1, None, 3, None, 5], pa.int64()),
                                                       pa.nulls(5, pa.utf8())])


# --------------------------------------------------------------------------- independent checks


@pytest.mark.parametrize("tz", ["America/New_York", "Asia/Kolkata", "Europe/London"])
def test_named_zones_are_local_wall_clock_per_zoneinfo(tz):
    """Named zones go through DataFusion (transforms docstring); check the meaning independently
    with Python's zoneinfo over 1900-2099, where chrono-tz and the tz database agree."""
    rng = rng_for("zoneinfo", tz)
    lo = int(dt.datetime(1900, 1, 1, tzinfo=dt.timezone.utc).timestamp())
    hi = int(dt.datetime(2099, 12, 31, tzinfo=dt.timezone.utc).timestamp())
    secs = rng.integers(lo, hi, 2_000)
    a = pa.array(secs, pa.timestamp("s", tz=tz))
    zone = zoneinfo.ZoneInfo(tz)
    local = [dt.datetime.fromtimestamp(int(s), zone) for s in secs]
    for t, attr in ((transforms.YearTransform(), "year"), (transforms.MonthTransform(), "month"),
                    (transforms.DayTransform(), "day"), (transforms.HourTransform(), "hour")):
        assert t.apply([a]).to_pylist() == [getattr(x, attr) for x in local], attr


def test_naive_dates_agree_with_numpy_datetime64():
    """An independent calendar: numpy's datetime64 (no pyarrow, no DataFusion)."""
    a = date32s()
    valid = a.is_valid().to_numpy(zero_copy_only=False)
    days = a.view(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    valid &= np.abs(days) <= 10**6  # datetime64[D] years stay within 4 digits there
    d = days.astype("datetime64[D]")
    years = d.astype("datetime64[Y]").astype(np.int64) + 1970
    months = d.astype("datetime64[M]").astype(np.int64) % 12 + 1
    mday = (d - d.astype("datetime64[M]")).astype(np.int64) + 1
    for t, want in ((transforms.YearTransform(), years), (transforms.MonthTransform(), months),
                    (transforms.DayTransform(), mday)):
        got = t.apply([a]).to_numpy(zero_copy_only=False)
        np.testing.assert_array_equal(got[valid], want[valid])


def _field(expression: str, sources: int, result_type: pa.DataType) -> PartitionField:
    return PartitionField("e", list(range(sources)), expression=expression, result_type=result_type)


def _apply_expression(expression: str, arrays: Sequence[pa.Array], result_type: pa.DataType) -> pa.Array:
    f = _field(expression, len(arrays), result_type)
    schema = pa.schema([pa.field(f"c{i}", a.type, metadata={"lance:field_id": str(i)}) for i, a in enumerate(arrays)])
    transforms.validate_field(f, schema)
    return transforms.apply(f, pa.table({f"c{i}": a for i, a in enumerate(arrays)}), schema)


def test_expression_year_month():
    a = date32s()
    got = _apply_expression("date_part('year', col0) * 100 + date_part('month', col0)", [a], pa.int64())
    days = a.view(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    ok = a.is_valid().to_numpy(zero_copy_only=False) & (np.abs(days) <= 10**6)
    d = days.astype("datetime64[D]")
    year = d.astype("datetime64[Y]").astype(np.int64) + 1970
    want = year * 100 + d.astype("datetime64[M]").astype(np.int64) % 12 + 1
    np.testing.assert_array_equal(got.to_numpy(zero_copy_only=False)[ok], want[ok])
    out_of_range = (days < transforms._MIN_DAYS) | (days > transforms._MAX_DAYS)
    assert got.null_count == a.null_count + int(np.sum(a.is_valid().to_numpy(zero_copy_only=False) & out_of_range))


def test_expression_lower_on_unicode_strings():
    a = strings("utf8")
    got = _apply_expression("lower(col0)", [a], pa.utf8())
    assert got.to_pylist() == [None if s is None else s.lower() for s in a.to_pylist()]


def test_expression_case_when_null():
    a = integers("int64")
    got = _apply_expression("CASE WHEN col0 IS NULL THEN -1 ELSE col0 % 5 END", [a], pa.int64())
    x = a.fill_null(0).to_numpy(zero_copy_only=False)
    want = np.where(a.is_valid().to_numpy(zero_copy_only=False), np.fmod(x, 5), -1)
    np.testing.assert_array_equal(got.to_numpy(zero_copy_only=False), want)


def test_expression_murmur3_on_strings_matches_mmh3():
    a = strings("large_utf8")
    got = _apply_expression("abs(murmur3(col0)) % 1000", [a], pa.int64())
    assert got.to_pylist() == [None if s is None else abs(mmh3.hash(s.encode(), 0, signed=True)) % 1000
                               for s in a.to_pylist()]


def test_expression_murmur3_multi_skips_nulls_like_mmh3():
    a, b = integers("int32"), strings("utf8")
    got = _apply_expression("murmur3_multi(col0, col1)", [a, b], pa.int64())

    def expected(x, s):
        if x is None and s is None:
            return None
        raw = (b"" if x is None else struct.pack("<q", x)) + (b"" if s is None else s.encode())
        return mmh3.hash(raw, 0, signed=True)

    assert got.to_pylist() == [expected(x, s) for x, s in zip(a.to_pylist(), b.to_pylist(), strict=True)]


@pytest.mark.parametrize("name", ["int64", "utf8", "binary", ts_name("us", None)])
def test_bucket_matches_mmh3_on_canonical_bytes(name):
    """Independent of lancepart.model.murmur3: mmh3 over docs/design.md §1 canonical bytes, abs in 64 bits."""
    a = data(name)
    got = transforms.BucketTransform(1000).apply([a]).to_pylist()

    def canonical(v):
        if isinstance(v, int):
            return struct.pack("<q", v)
        return v.encode() if isinstance(v, str) else v

    values = a.view(pa.int64()).to_pylist() if pa.types.is_timestamp(a.type) else a.to_pylist()
    assert got == [None if v is None else abs(mmh3.hash(canonical(v), 0, signed=True)) % 1000 for v in values]
