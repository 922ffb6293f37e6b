"""Tests of lancepart.model.murmur3 (docs/design.md §1: Iceberg-compatible 32-bit MurmurHash3 of canonical bytes).

Every expectation is computed independently: values are canonicalised here in plain Python
(``_ref_bytes``) and hashed per row with ``mmh3.hash(b, 0, signed=True)``; nothing is compared
against the module's own output.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
import zlib

import mmh3
import numpy as np
import pyarrow as pa
import pytest

from lancepart.errors import InvalidSpecError
from lancepart.model import murmur3 as M

N = 10_000
INT32_MIN = -(2**31)
WIDE = decimal.Context(prec=200)  # the default 28-digit context would round decimal256 values


# --------------------------------------------------------------------------------------------
# Independent reference.
# --------------------------------------------------------------------------------------------
def _q(v: int) -> bytes:
    return struct.pack("<q", v)


def _java_bigint_bytes(x: int) -> bytes:
    """Java BigInteger.toByteArray(): minimal big-endian two's complement."""
    n = (x if x >= 0 else ~x).bit_length() // 8 + 1
    return x.to_bytes(n, "big", signed=True)


def _raw_ints(arr: pa.Array, width: int) -> list[int | None]:
    """The stored integers of a temporal array (exact, no datetime round trip)."""
    valid = arr.is_valid().to_pylist()
    raw = arr.view(pa.int64() if width == 8 else pa.int32()).to_pylist()
    return [r if v else None for r, v in zip(raw, valid, strict=True)]


def _ref_bytes(arr: pa.Array) -> list[bytes | None]:
    t = arr.type
    if pa.types.is_dictionary(t):
        return _ref_bytes(arr.dictionary_decode())
    if pa.types.is_timestamp(t):
        scale = {"s": 10**6, "ms": 10**3, "us": 1}
        out = []
        for v in _raw_ints(arr, 8):
            if v is None:
                out.append(None)
            elif t.unit == "ns":
                out.append(_q(v // 1000))  # Python // floors toward -inf
            else:
                out.append(_q(v * scale[t.unit]))
        return out
    if pa.types.is_date64(t):
        return [None if v is None else _q(v // 86_400_000) for v in _raw_ints(arr, 8)]
    if pa.types.is_date32(t):
        return [None if v is None else _q(v) for v in _raw_ints(arr, 4)]
    vals = arr.to_pylist()
    if pa.types.is_boolean(t):
        return [None if v is None else _q(int(v)) for v in vals]
    if pa.types.is_integer(t):
        return [None if v is None else (v & (2**64 - 1)).to_bytes(8, "little") for v in vals]
    if pa.types.is_floating(t):
        out = []
        for v in vals:
            if v is None:
                out.append(None)
            elif v != v:
                out.append(struct.pack("<Q", 0x7FF8000000000000))
            else:
                out.append(struct.pack("<d", 0.0 if v == 0 else v))
        return out
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return [None if v is None else v.encode("utf-8") for v in vals]
    if pa.types.is_decimal(t):
        return [None if v is None else _java_bigint_bytes(int(v.scaleb(t.scale, context=WIDE))) for v in vals]
    return [None if v is None else bytes(v) for v in vals]  # binary-like


def _ref_hash(arr: pa.Array | pa.ChunkedArray) -> list[int | None]:
    if isinstance(arr, pa.ChunkedArray):
        return [h for c in arr.chunks for h in _ref_hash(c)]
    return [None if b is None else mmh3.hash(b, 0, signed=True) for b in _ref_bytes(arr)]


def _ref_bucket(hashes: list[int | None], n: int) -> list[int | None]:
    return [None if h is None else abs(h) % n for h in hashes]


# --------------------------------------------------------------------------------------------
# Random inputs (seeded), with NULLs mixed in.
# --------------------------------------------------------------------------------------------
def _mask(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random(n) < 0.1


def _rand_strings(rng: np.random.Generator, n: int, max_len: int = 40) -> list[str | None]:
    alphabet = [*"abcxyzABC019 _-", "é", "ß", "中", "文", "\U0001f600", "\u0000", "Ω"]
    out: list[str | None] = []
    for i in range(n):
        if rng.random() < 0.1:
            out.append(None)
        else:
            k = int(rng.integers(0, max_len + 1))
            out.append("".join(alphabet[j] for j in rng.integers(0, len(alphabet), k)))
        if i % 97 == 0:
            out[-1] = ""  # plenty of empty strings
    return out


def _make(kind: str, rng: np.random.Generator, n: int = N) -> pa.Array:
    m = _mask(rng, n)
    ints = {
        "int8": (np.int8, pa.int8()),
        "int16": (np.int16, pa.int16()),
        "int32": (np.int32, pa.int32()),
        "int64": (np.int64, pa.int64()),
        "uint8": (np.uint8, pa.uint8()),
        "uint16": (np.uint16, pa.uint16()),
        "uint32": (np.uint32, pa.uint32()),
        "uint64": (np.uint64, pa.uint64()),
    }
    if kind in ints:
        np_t, pa_t = ints[kind]
        info = np.iinfo(np_t)
        v = rng.integers(info.min, info.max, n, dtype=np_t, endpoint=True)
        v[:4] = [info.min, info.max, 0, 1]
        if kind == "uint64":
            v[4:8] = [2**63, 2**63 + 1, 2**64 - 2, 2**63 - 1]
        return pa.array(v, type=pa_t, mask=m)
    if kind == "bool":
        return pa.array(rng.random(n) < 0.5, mask=m)
    if kind == "date32":
        return pa.array(rng.integers(-800_000, 800_000, n).astype(np.int32), type=pa.date32(), mask=m)
    if kind == "date64":
        # Includes values that are not whole days and negative ones, to pin floor division.
        v = rng.integers(-(10**14), 10**14, n)
        v[:3] = [-1, -86_400_000, -86_400_001]
        return pa.array(v, type=pa.date64(), mask=m)
    if kind.startswith("timestamp"):
        _, unit, tz = kind.split("/", 2)
        bound = {"s": 9 * 10**12, "ms": 9 * 10**15, "us": 2**62, "ns": 2**63 - 1}[unit]
        v = rng.integers(-bound, bound, n)
        v[:4] = [-1, -999, -1000, -1001]
        return pa.array(v, type=pa.timestamp(unit, tz=tz or None), mask=m)
    if kind in ("float32", "float64"):
        if kind == "float64":
            f = rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, n)
            special = np.array(
                [
                    0x8000000000000000,
                    0x7FF0000000000001,
                    0xFFF8000000000000,
                    0x7FF8000000000123,
                    0x7FF0000000000000,
                    0xFFF0000000000000,
                    0x7FFFFFFFFFFFFFFF,
                    0x0000000000000001,
                ],
                dtype=np.uint64,
            ).view(np.float64)  # -0.0, sNaN, -qNaN, qNaN payload, +inf, -inf, NaN all-ones, subnormal
        else:
            f = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
            special = np.array(
                [0x80000000, 0x7F800001, 0xFFC00000, 0x7FC00123, 0x7F800000, 0xFF800000, 0x00000001],
                dtype=np.uint32,
            ).view(np.float32)
        f[: special.size] = special
        f[special.size : special.size + 3] = [0.0, 1.0, 1.5]
        return pa.array(f, mask=m)
    if kind in ("utf8", "large_utf8", "string_view"):
        t = {"utf8": pa.string(), "large_utf8": pa.large_string(), "string_view": pa.string_view()}[kind]
        return pa.array(_rand_strings(rng, n), type=t)
    if kind in ("binary", "large_binary"):
        vals = [None if mm else rng.bytes(int(rng.integers(0, 41))) for mm in m]
        return pa.array(vals, type=pa.binary() if kind == "binary" else pa.large_binary())
    if kind.startswith("fixed_size_binary"):
        w = int(kind.split("/")[1])
        return pa.array([None if mm else rng.bytes(w) for mm in m], type=pa.binary(w))
    if kind.startswith("decimal"):
        bits, prec, scale = (128, 38, 4) if kind == "decimal128" else (256, 76, 10)
        t = pa.decimal128(prec, scale) if bits == 128 else pa.decimal256(prec, scale)
        mags = rng.integers(0, prec + 1, n)
        vals: list[decimal.Decimal | None] = []
        for i, mm in enumerate(m):
            if mm:
                vals.append(None)
                continue
            digits = int(mags[i])
            u = int(rng.integers(0, 10 ** min(digits, 18))) * 10 ** max(0, digits - 18) if digits else 0
            u = min(u, 10**prec - 1)
            u = -u if rng.random() < 0.5 else u
            vals.append(decimal.Decimal(u).scaleb(-scale, context=WIDE))
        edge = [0, 1, -1, 127, 128, -128, -129, 255, 256, -256, 10**prec - 1, -(10**prec - 1)]
        vals[: len(edge)] = [decimal.Decimal(e).scaleb(-scale, context=WIDE) for e in edge]
        return pa.array(vals, type=t)
    raise AssertionError(kind)


KINDS = [
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "date32", "date64",
    *[f"timestamp/{u}/{tz}" for u in ("s", "ms", "us", "ns") for tz in ("", "UTC", "America/Los_Angeles")],
    "float32", "float64", "utf8", "large_utf8", "string_view", "binary", "large_binary",
    "fixed_size_binary/1", "fixed_size_binary/7", "fixed_size_binary/16", "decimal128", "decimal256",
]  # fmt: skip


@pytest.fixture(params=["default-blocks", "tiny-blocks"])
def block_sizes(request, monkeypatch):
    """Run twice: once with production block sizes, once with tiny ones so that every block,
    chunk, long-pool and straggler boundary is crossed many times."""
    if request.param == "tiny-blocks":
        monkeypatch.setattr(M, "_FIXED_BLOCK", 1000)
        monkeypatch.setattr(M, "_VAR_ROWS", 333)
        monkeypatch.setattr(M, "_VAR_BYTES", 2000)
        monkeypatch.setattr(M, "_SHORT_MAX_BLOCKS", 3)
        monkeypatch.setattr(M, "_LONG_GROUP", 150)
        monkeypatch.setattr(M, "_PY_CHAIN_BELOW", 5)
        monkeypatch.setattr(M, "_MULTI_ROWS", 777)
    return request.param


# --------------------------------------------------------------------------------------------
# Iceberg test vectors.
# --------------------------------------------------------------------------------------------
ICEBERG_VECTORS = [
    ("long 34", pa.array([34], pa.int64()), 2017239379),
    ("int 34 (promoted to long)", pa.array([34], pa.int32()), 2017239379),
    ("date 2017-11-16", pa.array([dt.date(2017, 11, 16)], pa.date32()), -653330422),
    ("date64 2017-11-16", pa.array([dt.date(2017, 11, 16)], pa.date64()), -653330422),
    ("timestamp 2017-11-16T22:31:08", pa.array([1510871468000000], pa.timestamp("us")), -2047944441),
    ("timestamp_ns 2017-11-16T22:31:08", pa.array([1510871468000000000], pa.timestamp("ns")), -2047944441),
    (
        "timestamptz 2017-11-16T14:31:08-08:00",
        pa.array(
            [dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(dt.timedelta(hours=-8)))],
            pa.timestamp("us", tz="-08:00"),
        ),
        -2047944441,
    ),
    ("string iceberg", pa.array(["iceberg"]), 1210000089),
    ("large_string iceberg", pa.array(["iceberg"], pa.large_string()), 1210000089),
    ("bytes 00 01 02 03", pa.array([b"\x00\x01\x02\x03"]), -188683207),
    ("fixed[4] 00 01 02 03", pa.array([b"\x00\x01\x02\x03"], pa.binary(4)), -188683207),
    ("decimal 14.20", pa.array([decimal.Decimal("14.20")], pa.decimal128(9, 2)), -500754589),
    ("decimal256 14.20", pa.array([decimal.Decimal("14.20")], pa.decimal256(40, 2)), -500754589),
    ("float 1.0", pa.array([1.0], pa.float32()), -142385009),
    ("double 1.0", pa.array([1.0], pa.float64()), -142385009),
]


@pytest.mark.parametrize(("name", "arr", "expected"), ICEBERG_VECTORS, ids=[v[0] for v in ICEBERG_VECTORS])
def test_iceberg_vectors(name, arr, expected):
    """docs/design.md §1: the Iceberg spec's bucket-hash test vectors (Appendix B)."""
    assert mmh3.hash(_ref_bytes(arr)[0], 0, signed=True) == expected  # the vector itself holds
    assert M.murmur3(arr).to_pylist() == [expected]
    assert M.hash_scalar(arr[0], arr.type) == expected


def test_iceberg_vectors_from_python_literals():
    """docs/design.md §1: hash_scalar on plain Python literals reproduces the Iceberg vectors."""
    assert M.hash_scalar(34, pa.int64()) == 2017239379
    assert M.hash_scalar(34, pa.int32()) == 2017239379
    assert M.hash_scalar(dt.date(2017, 11, 16), pa.date32()) == -653330422
    assert M.hash_scalar(dt.datetime(2017, 11, 16, 22, 31, 8), pa.timestamp("us")) == -2047944441
    assert M.hash_scalar(dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=dt.timezone.utc), pa.timestamp("ms", "UTC")) == (
        -2047944441
    )
    assert M.hash_scalar("iceberg", pa.string()) == 1210000089
    assert M.hash_scalar(b"\x00\x01\x02\x03", pa.binary()) == -188683207
    assert M.hash_scalar(decimal.Decimal("14.20"), pa.decimal128(9, 2)) == -500754589
    assert M.hash_scalar(1.0, pa.float32()) == -142385009
    assert M.hash_scalar(None, pa.int64()) is None
    assert M.hash_scalar(pa.scalar(None, pa.int64()), pa.int64()) is None


def test_iceberg_negative_zero_float():
    """docs/design.md §1: -0.0 hashes as 0.0 (Iceberg spec: 0.0F and -0.0F -> 1669671676)."""
    expected = mmh3.hash(bytes(8), 0, signed=True)
    assert expected == 1669671676
    assert M.murmur3(pa.array([0.0, -0.0], pa.float64())).to_pylist() == [expected, expected]
    assert M.murmur3(pa.array([0.0, -0.0], pa.float32())).to_pylist() == [expected, expected]


# --------------------------------------------------------------------------------------------
# Random equality with the per-row mmh3 reference.
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_random_matches_mmh3(kind, block_sizes):
    """docs/design.md §1: murmur3 == per-row mmh3 of the canonical bytes, incl. NULLs, slices, chunks."""
    rng = np.random.default_rng(zlib.crc32(kind.encode()))  # str hash() is salted per process
    arr = _make(kind, rng)
    assert arr.null_count > 0 or kind.startswith("utf8")
    ref = _ref_hash(arr)
    got = M.murmur3(arr)
    assert got.type == pa.int32()
    assert got.to_pylist() == ref
    # Canonical bytes agree with the independent canonicalisation.
    assert M.canonical_bytes(arr).to_pylist() == _ref_bytes(arr)
    # Sliced arrays: Arrow offsets must be honoured (odd offsets hit unaligned bitmaps too).
    for off in (1, 3, 8, 13, 4097):
        sl = arr.slice(off, N - off - 5)
        assert M.murmur3(sl).to_pylist() == ref[off : N - 5]
    # Chunked arrays (chunks that are themselves slices).
    chunked = pa.chunked_array([arr.slice(0, 1234), arr.slice(1234, 1), arr.slice(1235)])
    res = M.murmur3(chunked)
    assert isinstance(res, pa.Int32Array)
    assert res.to_pylist() == ref
    # bucket agrees with abs(h) % n on the same data.
    for n in (1, 7, 16, 1000, 2**31 - 1):
        assert M.bucket(arr, n).to_pylist() == _ref_bucket(ref, n)


def test_nan_payloads_all_hash_alike():
    """docs/design.md §1: every NaN (any payload/sign, float32 or float64) hashes as canonical NaN."""
    canon = mmh3.hash(struct.pack("<Q", 0x7FF8000000000000), 0, signed=True)
    f64 = np.array([0x7FF8000000000000, 0x7FF0000000000001, 0xFFF8000000000000, 0xFFFFFFFFFFFFFFFF], np.uint64)
    f32 = np.array([0x7FC00000, 0x7F800001, 0xFFC00000, 0xFFFFFFFF], np.uint32)
    assert M.murmur3(pa.array(f64.view(np.float64))).to_pylist() == [canon] * 4
    assert M.murmur3(pa.array(f32.view(np.float32))).to_pylist() == [canon] * 4


def test_long_and_mixed_length_values(block_sizes):
    """docs/design.md §1: values of any length (long pool, stragglers, huge single values)."""
    rng = np.random.default_rng(7)
    lens = np.where(rng.random(3000) < 0.05, rng.integers(100, 5000, 3000), rng.integers(0, 70, 3000))
    vals = [rng.bytes(int(k)) if i % 11 else None for i, k in enumerate(lens)]
    vals += [b"z" * 200_001, b"y" * 70_003]  # a couple of huge values at the very end of the buffer
    for t in (pa.binary(), pa.large_binary()):
        arr = pa.array(vals, t)
        ref = _ref_hash(arr)
        assert M.murmur3(arr).to_pylist() == ref
        assert M.murmur3(arr.slice(5)).to_pylist() == ref[5:]
    one = pa.array(["ä" * 50_000])
    assert M.murmur3(one).to_pylist() == _ref_hash(one)


def test_null_slots_with_bytes_behind_them():
    """docs/design.md §1: NULL slots whose offsets span bytes are still NULL and excluded from multi."""
    data = b"aaaabbbbbcc"
    offsets = np.array([0, 4, 9, 11], np.int32)
    validity = np.packbits(np.array([1, 0, 1], bool), bitorder="little")
    arr = pa.Array.from_buffers(pa.string(), 3, [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)])
    assert arr.to_pylist() == ["aaaa", None, "cc"]
    assert M.murmur3(arr).to_pylist() == [mmh3.hash(b"aaaa", 0, signed=True), None, mmh3.hash(b"cc", 0, signed=True)]
    assert M.canonical_bytes(arr).to_pylist() == [b"aaaa", None, b"cc"]
    other = pa.array([1, 2, 3], pa.int64())
    assert M.murmur3_multi(arr, other).to_pylist() == [
        mmh3.hash(b"aaaa" + _q(1), 0, signed=True),
        mmh3.hash(_q(2), 0, signed=True),
        mmh3.hash(b"cc" + _q(3), 0, signed=True),
    ]


def test_dictionary_arrays(block_sizes):
    """docs/design.md §1: dictionary-encoded arrays hash their decoded values; null indices -> NULL."""
    rng = np.random.default_rng(3)
    words = _rand_strings(rng, 50, 30)
    words = [w for w in words if w is not None]
    idx = pa.array(rng.integers(0, len(words), N), pa.int32(), mask=_mask(rng, N))
    arr = pa.DictionaryArray.from_arrays(idx, pa.array(words))
    ref = _ref_hash(arr.dictionary_decode())
    assert M.murmur3(arr).to_pylist() == ref
    assert M.murmur3(arr.slice(17)).to_pylist() == ref[17:]
    assert M.bucket(arr, 13).to_pylist() == _ref_bucket(ref, 13)
    assert M.canonical_bytes(arr).to_pylist() == _ref_bytes(arr)
    ints = pa.DictionaryArray.from_arrays(pa.array([1, 0, None, 1], pa.int8()), pa.array([5, None], pa.int16()))
    assert M.murmur3(ints).to_pylist() == [None, mmh3.hash(_q(5), 0, signed=True), None, None]


# --------------------------------------------------------------------------------------------
# Type promotion.
# --------------------------------------------------------------------------------------------
def test_promotion_int32_int64():
    """docs/design.md §1: int32(5) and int64(5) hash alike (all integers hash as int64)."""
    hs = {M.murmur3(pa.array([5], t)).to_pylist()[0] for t in (pa.int8(), pa.int32(), pa.int64(), pa.uint16())}
    assert hs == {mmh3.hash(_q(5), 0, signed=True)}


def test_promotion_float32_float64():
    """docs/design.md §1: float32(1.5) and float64(1.5) hash alike (floats hash as double bits)."""
    a = M.murmur3(pa.array([1.5], pa.float32())).to_pylist()
    b = M.murmur3(pa.array([1.5], pa.float64())).to_pylist()
    assert a == b == [mmh3.hash(struct.pack("<d", 1.5), 0, signed=True)]


def test_promotion_timestamp_units():
    """docs/design.md §1: the same instant in s / ms / us / ns (any tz) hashes alike."""
    secs = [1510871468, -86_401, 0]
    expected = [mmh3.hash(_q(s * 10**6), 0, signed=True) for s in secs]
    for unit, mul in (("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)):
        for tz in (None, "UTC", "Asia/Kolkata"):
            arr = pa.array([s * mul for s in secs], pa.timestamp(unit, tz=tz))
            assert M.murmur3(arr).to_pylist() == expected, (unit, tz)


def test_timestamp_ns_floors_negative():
    """docs/design.md §1: ns -> us is floor division (toward -inf), not truncation."""
    arr = pa.array([-1, -999, -1000, -1001, 999, 1000], pa.timestamp("ns"))
    assert M.murmur3(arr).to_pylist() == [mmh3.hash(_q(u), 0, signed=True) for u in (-1, -1, -1, -2, 0, 1)]


def test_bool_and_uint64_canonical():
    """docs/design.md §1: bool hashes as int64 0/1; uint64 above 2**63 hashes its raw 8 bytes."""
    assert M.murmur3(pa.array([True, False, None])).to_pylist() == [
        mmh3.hash(_q(1), 0, signed=True),
        mmh3.hash(_q(0), 0, signed=True),
        None,
    ]
    big = pa.array([2**64 - 1, 2**63], pa.uint64())
    assert M.murmur3(big).to_pylist() == [mmh3.hash(_q(-1), 0, signed=True), mmh3.hash(_q(-(2**63)), 0, signed=True)]


def test_decimal_canonical_bytes():
    """docs/design.md §1: decimals hash the minimal big-endian two's complement unscaled value."""
    vals = [0, 127, 128, -1, -129, 1420, -32768, 32767, 32768]
    expected = [
        b"\x00",
        b"\x7f",
        b"\x00\x80",
        b"\xff",
        b"\xff\x7f",
        b"\x05\x8c",
        b"\x80\x00",
        b"\x7f\xff",
        b"\x00\x80\x00",
    ]
    for t in (pa.decimal128(10, 0), pa.decimal256(50, 0)):
        arr = pa.array([decimal.Decimal(v) for v in vals], t)
        assert M.canonical_bytes(arr).to_pylist() == expected
        assert M.murmur3(arr).to_pylist() == [mmh3.hash(b, 0, signed=True) for b in expected]


# --------------------------------------------------------------------------------------------
# bucket.
# --------------------------------------------------------------------------------------------
def test_bucket_of_int32_min():
    """docs/design.md §1: abs(h) % n in 64-bit: h = INT32_MIN gives 2147483648 % n, never negative."""
    h = pa.array([INT32_MIN, None, -1, 2**31 - 1, 0], pa.int32())
    for n in (1, 2, 3, 7, 10, 16, 1000, 2**31 - 1):
        got = M.bucket_of_hash(h, n).to_pylist()
        assert got == [2147483648 % n, None, 1 % n, (2**31 - 1) % n, 0], n
        assert all(0 <= g < n for g in got if g is not None)
    assert M.bucket_of_hash(h, 10).type == pa.int32()
    assert M.bucket_of_hash(h.slice(1), 3).to_pylist() == [None, 1, 1, 0]


def test_bucket_range_and_nulls(block_sizes):
    """docs/design.md §1: bucket results lie in [0, n) and NULLs are preserved."""
    rng = np.random.default_rng(11)
    arr = _make("int64", rng, 50_000)
    ref = _ref_hash(arr)
    for n in (1, 5, 16, 97, 2**20, 2**31 - 1):
        got = M.bucket(arr, n)
        assert got.type == pa.int32()
        vals = got.to_numpy(zero_copy_only=False)
        assert got.null_count == arr.null_count
        assert got.to_pylist() == _ref_bucket(ref, n)
        assert np.nanmin(vals) >= 0 and np.nanmax(vals) < n
    hashes = pa.array(rng.integers(INT32_MIN, 2**31, 20_000, endpoint=False).astype(np.int32), mask=_mask(rng, 20_000))
    assert M.bucket_of_hash(hashes, 37).to_pylist() == _ref_bucket(hashes.to_pylist(), 37)


@pytest.mark.parametrize("bad", [0, -3, 2**31, 1.5, True, "8"])
def test_bucket_rejects_bad_num_buckets(bad):
    """docs/design.md §1: num_buckets must be an int in [1, 2**31 - 1]."""
    with pytest.raises(InvalidSpecError):
        M.bucket(pa.array([1]), bad)


# --------------------------------------------------------------------------------------------
# murmur3_multi.
# --------------------------------------------------------------------------------------------
def test_multi_concatenates_non_null_arguments(block_sizes):
    """docs/design.md §1: murmur3_multi hashes the concatenated canonical bytes of non-NULL args."""
    rng = np.random.default_rng(5)
    n = 5000
    cols = [_make("int32", rng, n), _make("utf8", rng, n), _make("float64", rng, n), _make("decimal128", rng, n)]
    per_col = [_ref_bytes(c) for c in cols]
    expected = []
    for row in zip(*per_col, strict=True):
        parts = [b for b in row if b is not None]
        expected.append(mmh3.hash(b"".join(parts), 0, signed=True) if parts else None)
    assert M.murmur3_multi(*cols).to_pylist() == expected
    assert M.multi_bucket(cols, 11).to_pylist() == _ref_bucket(expected, 11)
    # Chunked + sliced arguments give the same rows.
    chunked = [pa.chunked_array([c.slice(0, 100), c.slice(100)]) for c in cols]
    assert M.murmur3_multi(*chunked).to_pylist() == expected


def test_multi_all_null_is_null_and_fixed_fast_path(block_sizes):
    """docs/design.md §1: all-NULL rows give NULL; the no-NULL fixed-width path agrees with mmh3."""
    a = pa.array([1, None, None, 4], pa.int64())
    b = pa.array([None, None, 3.0, 4.0], pa.float64())
    assert M.murmur3_multi(a, b).to_pylist() == [
        mmh3.hash(_q(1), 0, signed=True),
        None,
        mmh3.hash(struct.pack("<d", 3.0), 0, signed=True),
        mmh3.hash(_q(4) + struct.pack("<d", 4.0), 0, signed=True),
    ]
    rng = np.random.default_rng(9)
    x = pa.array(rng.integers(-(2**63), 2**63 - 1, 5000))
    y = pa.array(rng.integers(0, 2**31, 5000).astype(np.int32))
    z = pa.array(rng.integers(-(10**15), 10**15, 5000), pa.timestamp("ns"))
    refs = [_ref_bytes(c) for c in (x, y, z)]
    expected = [mmh3.hash(p + q + r, 0, signed=True) for p, q, r in zip(*refs, strict=True)]
    assert M.murmur3_multi(x, y, z).to_pylist() == expected
    assert M.multi_bucket([x, y, z], 16).to_pylist() == _ref_bucket(expected, 16)


@pytest.mark.parametrize("kind", ["int64", "utf8", "binary", "decimal256", "timestamp/ns/UTC", "bool"])
def test_multi_single_argument_equals_murmur3(kind):
    """docs/design.md §1: murmur3_multi(x) == murmur3(x) (incl. NULLs)."""
    arr = _make(kind, np.random.default_rng(2), 3000)
    assert M.murmur3_multi(arr).to_pylist() == M.murmur3(arr).to_pylist() == _ref_hash(arr)


def test_multi_equals_hash_of_concatenated_canonical_bytes():
    """docs/design.md §1: murmur3_multi(a, b) == murmur3 of the concatenated canonical bytes."""
    a = pa.array(["x", None, "", "long value " * 9], pa.string())
    b = pa.array([dt.date(2020, 1, 1), dt.date(1969, 12, 31), None, None], pa.date32())
    concat = [
        (x or b"") + (y or b"")
        for x, y in zip(M.canonical_bytes(a).to_pylist(), M.canonical_bytes(b).to_pylist(), strict=True)
    ]
    assert M.murmur3_multi(a, b).to_pylist() == M.murmur3(pa.array(concat, pa.binary())).to_pylist()
    assert M.murmur3_multi(a, b).to_pylist() == [
        mmh3.hash(b"x" + _q(18262), 0, signed=True),
        mmh3.hash(_q(-1), 0, signed=True),
        mmh3.hash(b"", 0, signed=True),
        mmh3.hash(("long value " * 9).encode(), 0, signed=True),
    ]


def test_multi_rejects_mismatched_lengths():
    """docs/design.md §1: multi arguments must have one length."""
    with pytest.raises(InvalidSpecError):
        M.murmur3_multi(pa.array([1, 2]), pa.array([1]))


# --------------------------------------------------------------------------------------------
# Unsupported types and edge cases.
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arr",
    [
        pa.array([[1, 2], None], pa.list_(pa.int32())),
        pa.array([{"a": 1}], pa.struct([("a", pa.int64())])),
        pa.array([None, None], pa.null()),
        pa.array([1], pa.duration("s")),
        pa.array([1], pa.time64("us")),
        pa.array([1.0], pa.float16()),
    ],
    ids=lambda a: str(a.type),
)
def test_unsupported_type_raises(arr):
    """docs/design.md §1: any type outside the canonical-bytes table raises InvalidSpecError naming it."""
    for fn in (M.murmur3, M.canonical_bytes, M.murmur3_multi, lambda x: M.bucket(x, 4)):
        with pytest.raises(InvalidSpecError, match=str(arr.type).replace("[", r"\[").replace("(", r"\(")):
            fn(arr)
        with pytest.raises(InvalidSpecError):
            fn(pa.chunked_array([], arr.type))
    with pytest.raises(InvalidSpecError):
        M.murmur3_multi(pa.array([1]), arr.slice(0, 1))


def test_non_arrow_input_is_a_type_error():
    """docs/design.md §1: inputs must be pyarrow Arrays or ChunkedArrays."""
    for fn in (
        M.murmur3,
        M.canonical_bytes,
        M.murmur3_multi,
        lambda x: M.bucket(x, 4),
        lambda x: M.bucket_of_hash(x, 4),
    ):
        with pytest.raises(TypeError):
            fn([1, 2, 3])


def test_empty_inputs():
    """docs/design.md §1: empty arrays / chunk-less chunked arrays give empty int32 results."""
    for t in (pa.int64(), pa.string(), pa.decimal128(5, 2), pa.float32()):
        assert M.murmur3(pa.array([], t)).type == pa.int32()
        assert len(M.murmur3(pa.array([], t))) == 0
        assert len(M.murmur3(pa.chunked_array([], t))) == 0
        assert len(M.bucket(pa.array([], t), 3)) == 0
        assert len(M.murmur3_multi(pa.array([], t), pa.array([], pa.int8()))) == 0
