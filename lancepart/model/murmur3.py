"""Vectorised 32-bit MurmurHash3 (x86_32, seed 0) over Arrow arrays, Iceberg-compatible.

Semantics (docs/design.md §1): every value is first turned into *canonical bytes*, which are then
hashed with ``MurmurHash3_x86_32`` and seed 0; the result is a signed int32 (equal to
``mmh3.hash(canonical, 0, signed=True)``).

=============================================  ============================================================
Arrow type                                     canonical bytes
=============================================  ============================================================
int8..int64, uint8..uint32, bool (0/1)         the value as int64, 8 bytes little-endian
uint64                                         the 8 bytes little-endian of the value
date32, date64                                 days since 1970-01-01 as int64 (date64: floor(ms / 86.4e6))
timestamp (any unit, any tz)                   microseconds since the epoch as int64 (ns floored; s/ms
                                               multiplied up, wrapping modulo 2**64 on overflow)
float32, float64                               float64 bits LE; -0.0 -> 0.0; every NaN -> 0x7ff8000000000000
utf8, large_utf8, string_view                  the UTF-8 bytes
binary, large_binary, binary_view, fixed_size  the bytes
decimal128, decimal256                         unscaled integer, minimal big-endian two's complement
dictionary<...>                                hash of the dictionary value
=============================================  ============================================================

Any other type raises :class:`lancepart.errors.InvalidSpecError`.

Implementation: no per-row Python loop.

* 8-byte canonical types go through a numpy kernel on uint32 lanes, processed in blocks of
  ``_FIXED_BLOCK`` rows with preallocated scratch and in-place ufuncs so that the working set
  stays in L1/L2.
* Variable-length values are processed per chunk of rows: the chunk's bytes are copied into four
  aligned uint32 "phase" arrays (byte offset 0..3) so that the 4-byte block ``j`` of any value is a
  single aligned gather; rows are sorted by block count so that step ``j`` touches a contiguous
  suffix of still-active rows. Values longer than ``_SHORT_MAX_BLOCKS`` blocks form a separate pool
  processed in lock-step; only the last few stragglers of that pool fall back to a per-block Python
  chain (unavoidable: the hash state is sequential within one value).

Everything is single-threaded numpy.

ChunkedArray inputs are accepted everywhere; results are always a single (combined) ``Int32Array``.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lancepart.errors import InvalidSpecError

__all__ = [
    "bucket",
    "bucket_of_hash",
    "canonical_bytes",
    "hash_scalar",
    "multi_bucket",
    "murmur3",
    "murmur3_multi",
]

# --------------------------------------------------------------------------------------------
# Constants. All numpy uint32 scalars so that no ufunc ever upcasts (wrap-around mod 2**32 is the
# point of the algorithm).
# --------------------------------------------------------------------------------------------
_U32 = np.uint32
_C1 = _U32(0xCC9E2D51)
_C2 = _U32(0x1B873593)
_N1 = _U32(0xE6546B64)
_F1 = _U32(0x85EBCA6B)
_F2 = _U32(0xC2B2AE35)
_FIVE = _U32(5)
_R13, _R19, _R15, _R17, _R16 = _U32(13), _U32(19), _U32(15), _U32(17), _U32(16)
_EIGHT = _U32(8)
_CANON_NAN = np.uint64(0x7FF8000000000000)
_TAIL_MASK = np.array([0x0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)
_M32 = 0xFFFFFFFF

# Rows per block of the fixed-width kernel: ~5 uint32 scratch arrays of 128 KiB stay in L2.
_FIXED_BLOCK = 32768
# Variable-length kernel: rows per chunk and a byte budget per chunk (the 4 phase copies are 4x it).
_VAR_ROWS = 32768
_VAR_BYTES = 1 << 19
# Values with more 4-byte blocks than this are hashed in the lock-step "long" pool, so one long
# value does not make every short row of its chunk wait through its many steps.
_SHORT_MAX_BLOCKS = 16
# Rows per lock-step group of the long pool, and below how many active rows the remaining blocks
# are chained in plain Python ints (cheaper than ~12 numpy calls of a few elements each).
_LONG_GROUP = 16384
_PY_CHAIN_BELOW = 24
# Rows per chunk of the generic (byte-concatenating) murmur3_multi path.
_MULTI_ROWS = 16384

_TS_TO_US = {"s": (1_000_000, 1), "ms": (1000, 1), "us": (1, 1), "ns": (1, 1000)}


# --------------------------------------------------------------------------------------------
# Kernel primitives (all in place on uint32 arrays; ``t`` is scratch of the same shape).
# --------------------------------------------------------------------------------------------
def _mix_k(k: np.ndarray, t: np.ndarray) -> None:
    """k = rotl32(k * c1, 15) * c2."""
    np.multiply(k, _C1, out=k)
    np.left_shift(k, _R15, out=t)
    np.right_shift(k, _R17, out=k)
    np.bitwise_or(k, t, out=k)
    np.multiply(k, _C2, out=k)


def _mix_h(h: np.ndarray, t: np.ndarray) -> None:
    """h = rotl32(h, 13) * 5 + 0xe6546b64 (the caller has already xor-ed k into h)."""
    np.left_shift(h, _R13, out=t)
    np.right_shift(h, _R19, out=h)
    np.bitwise_or(h, t, out=h)
    np.multiply(h, _FIVE, out=h)
    np.add(h, _N1, out=h)


def _fmix(h: np.ndarray, t: np.ndarray, out: np.ndarray) -> None:
    """Final avalanche; the last step writes straight into ``out`` to save a copy."""
    np.right_shift(h, _R16, out=t)
    np.bitwise_xor(h, t, out=h)
    np.multiply(h, _F1, out=h)
    np.right_shift(h, _R13, out=t)
    np.bitwise_xor(h, t, out=h)
    np.multiply(h, _F2, out=h)
    np.right_shift(h, _R16, out=t)
    np.bitwise_xor(h, t, out=out)


def _py_chain(h: int, ks: Sequence[int]) -> int:
    """Block loop of one value in Python ints (only for the few stragglers of the long pool)."""
    for k in ks:
        h ^= k
        h = ((h << 13) | (h >> 19)) & _M32
        h = (h * 5 + 0xE6546B64) & _M32
    return h


# --------------------------------------------------------------------------------------------
# Fixed-width (8-byte canonical) sources.
# --------------------------------------------------------------------------------------------
class _Fixed:
    """Lazily canonicalised 8-byte values of one array: ``block(a, b, scratch)`` returns rows
    [a, b) as a 1-D 8-byte numpy array (int64/uint64/float64 bits), converting block by block so
    the conversion also runs in cache."""

    __slots__ = ("_conv", "_src", "n")

    def __init__(self, src: np.ndarray, conv: Callable[[np.ndarray, np.ndarray], np.ndarray] | None) -> None:
        self._src = src
        self._conv = conv
        self.n = src.shape[0]

    def block(self, a: int, b: int, scratch: np.ndarray) -> np.ndarray:
        part = self._src[a:b]
        if self._conv is None:
            return part
        return self._conv(part, scratch[: b - a])


def _conv_int64(part: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, part, casting="unsafe")
    return out


def _conv_scale(mul: int, div: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def conv(part: np.ndarray, out: np.ndarray) -> np.ndarray:
        # numpy floor_divide floors toward -inf, which is what the spec requires for ns -> us.
        if div != 1:
            np.floor_divide(part, np.int64(div), out=out)
        else:
            np.multiply(part, np.int64(mul), out=out)
        return out

    return conv


def _conv_float(part: np.ndarray, out: np.ndarray) -> np.ndarray:
    f = out.view(np.float64)
    # Signalling NaNs raise "invalid" warnings in cast/add; they are canonicalised below anyway.
    with np.errstate(invalid="ignore"):
        np.copyto(f, part, casting="unsafe")
        # -0.0 + 0.0 == +0.0 under IEEE round-to-nearest, and every other value is unchanged.
        np.add(f, 0.0, out=f)
    bits = out.view(np.uint64)
    np.copyto(bits, _CANON_NAN, where=np.isnan(f))
    return bits


def _values(arr: pa.Array, dtype: Any) -> np.ndarray:
    """Zero-copy numpy view of a primitive array's values, honouring the slice offset. Null
    slots contain whatever the buffer holds; callers mask them out."""
    buf = arr.buffers()[1]
    if len(arr) == 0 or buf is None:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype, count=len(arr) + arr.offset)[arr.offset :]


def _fixed_source(arr: pa.Array) -> _Fixed | None:
    """The 8-byte canonical source for fixed-width types, or None if the type is not one."""
    t = arr.type
    if pa.types.is_boolean(t):
        bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
        unpacked = np.unpackbits(bits, bitorder="little", count=len(arr) + arr.offset)[arr.offset :]
        return _Fixed(unpacked, _conv_int64)
    if pa.types.is_integer(t):
        np_t = np.dtype(t.to_pandas_dtype())
        src = _values(arr, np_t)
        if np_t.itemsize == 8:
            return _Fixed(src, None)  # int64 / uint64: already the canonical 8 bytes
        return _Fixed(src, _conv_int64)
    if pa.types.is_date32(t):
        return _Fixed(_values(arr, np.int32), _conv_int64)
    if pa.types.is_date64(t):
        return _Fixed(_values(arr, np.int64), _conv_scale(1, 86_400_000))
    if pa.types.is_timestamp(t):
        mul, div = _TS_TO_US[t.unit]
        src = _values(arr, np.int64)
        return _Fixed(src, None if mul == div == 1 else _conv_scale(mul, div))
    if pa.types.is_float32(t):
        return _Fixed(_values(arr, np.float32), _conv_float)
    if pa.types.is_float64(t):
        return _Fixed(_values(arr, np.float64), _conv_float)
    return None


def _hash_fixed(sources: list[_Fixed], out: np.ndarray, post: Callable[[np.ndarray, np.ndarray], None] | None) -> None:
    """Hash the row-wise concatenation of the canonical 8-byte values of ``sources`` (length
    8 * len(sources)) into ``out`` (uint32). ``post(h_block, out_block)`` may transform the block
    while it is still in cache (used by bucket)."""
    n = out.shape[0]
    length = _U32(8 * len(sources))
    blk = min(_FIXED_BLOCK, max(n, 1))
    h = np.empty(blk, np.uint32)
    k = np.empty(blk, np.uint32)
    t = np.empty(blk, np.uint32)
    scratch = np.empty(blk, np.int64)
    for a in range(0, n, blk):
        b = min(a + blk, n)
        r = b - a
        hb, kb, tb = h[:r], k[:r], t[:r]
        first = True
        for src in sources:
            # Strided reads of the low / high word columns; all writes are contiguous.
            words = src.block(a, b, scratch).view(np.uint32).reshape(r, 2)
            for c in (0, 1):
                if first:
                    np.multiply(words[:, c], _C1, out=hb)
                    np.left_shift(hb, _R15, out=tb)
                    np.right_shift(hb, _R17, out=hb)
                    np.bitwise_or(hb, tb, out=hb)
                    np.multiply(hb, _C2, out=hb)  # seed 0: h ^= k is just h = k
                    first = False
                else:
                    np.multiply(words[:, c], _C1, out=kb)
                    np.left_shift(kb, _R15, out=tb)
                    np.right_shift(kb, _R17, out=kb)
                    np.bitwise_or(kb, tb, out=kb)
                    np.multiply(kb, _C2, out=kb)
                    np.bitwise_xor(hb, kb, out=hb)
                _mix_h(hb, tb)
        np.bitwise_xor(hb, length, out=hb)
        if post is None:
            _fmix(hb, tb, out[a:b])
        else:
            _fmix(hb, tb, hb)
            post(hb, out[a:b])


# --------------------------------------------------------------------------------------------
# Variable-length kernel.
# --------------------------------------------------------------------------------------------
def _unaligned_u32(data: np.ndarray) -> np.ndarray:
    """uint32 view of ``data`` readable at any byte offset p <= len(data) - 4 (stride 1 byte)."""
    return np.ndarray(shape=(data.shape[0] - 3,), dtype="<u4", buffer=data, strides=(1,))


def _hash_short_chunk(
    st: np.ndarray, ln: np.ndarray, data: np.ndarray, lo: int, hi: int, out: np.ndarray, rows: np.ndarray | None
) -> None:
    """Hash rows with <= _SHORT_MAX_BLOCKS blocks whose bytes lie in data[lo:hi].

    ``st``/``ln`` are int64 absolute starts / lengths; results go to ``out[rows]`` (or ``out`` if
    rows is None, in which case st/ln cover exactly out's rows)."""
    r = st.shape[0]
    if r == 0:
        return
    # Four aligned copies of the chunk bytes shifted by 0..3, so a 4-byte read at any offset is an
    # aligned gather (numpy's unaligned gather is ~5x slower). +8 bytes of zero padding make the
    # tail read of the last value safe.
    m = (hi - lo) // 4 + 2
    phases = np.empty((4, m), dtype=np.uint32)
    p8 = phases.view(np.uint8)
    total = data.shape[0]
    for s in range(4):
        avail = max(0, min(4 * m, total - (lo + s)))
        p8[s, :avail] = data[lo + s : lo + s + avail]
        p8[s, avail:] = 0
    flat = phases.reshape(-1)
    rel = st - lo
    fidx = (rel & 3) * m + (rel >> 2)
    nb = (ln >> 2).astype(np.uint8)  # <= _SHORT_MAX_BLOCKS
    # Sort by block count (stable radix sort for uint8) so block j is a contiguous suffix.
    order = np.argsort(nb, kind="stable")
    nb_s = nb[order]
    fidx_s = fidx[order]
    ln_s = ln[order]
    maxnb = int(nb_s[-1])
    firsts = np.searchsorted(nb_s, np.arange(maxnb, dtype=np.uint8), side="right")
    h = np.zeros(r, np.uint32)
    k = np.empty(r, np.uint32)
    t = np.empty(r, np.uint32)
    ti = np.empty(r, np.intp)
    for j in range(maxnb):
        s = int(firsts[j])
        ks, ts, hs = k[s:], t[s:], h[s:]
        np.add(fidx_s[s:], j, out=ti[s:])
        np.take(flat, ti[s:], out=ks)
        _mix_k(ks, ts)
        np.bitwise_xor(hs, ks, out=hs)
        _mix_h(hs, ts)
    # Tail (0..3 bytes): read a whole word and mask; for an empty tail k stays 0 and h ^= 0.
    np.add(fidx_s, nb_s, out=ti)
    np.take(flat, ti, out=k)
    tl = ln_s & 3
    np.bitwise_and(k, _TAIL_MASK[tl], out=k)
    _mix_k(k, t)
    np.bitwise_xor(h, k, out=h)
    np.bitwise_xor(h, ln_s.astype(np.uint32), out=h)
    _fmix(h, t, h)
    if rows is None:
        out[order] = h
    else:
        out[rows[order]] = h


def _tail_words(data: np.ndarray, pos: np.ndarray, tl: np.ndarray) -> np.ndarray:
    """Little-endian word of the tl (0..3) bytes at pos, built from byte gathers (no padding)."""
    last = data.shape[0] - 1
    w = np.zeros(pos.shape[0], np.uint32)
    for i in range(3):
        has = tl > i
        if not has.any():
            break
        b = data[np.minimum(pos + i, last)].astype(np.uint32)
        b[~has] = 0
        np.bitwise_or(w, b << _U32(8 * i), out=w)
    return w


def _hash_long(st: np.ndarray, ln: np.ndarray, data: np.ndarray, out: np.ndarray, rows: np.ndarray) -> None:
    """Lock-step hashing of long values (> _SHORT_MAX_BLOCKS blocks), longest first."""
    w_all = _unaligned_u32(data)  # every block read st + 4j (j < nb) is in range
    nb = ln >> 2
    order = np.argsort(-nb, kind="stable")
    for g in range(0, order.shape[0], _LONG_GROUP):
        sel = order[g : g + _LONG_GROUP]
        gst, gln, gnb = st[sel], ln[sel], nb[sel]
        r = sel.shape[0]
        # gnb is descending: rows active at step j are the prefix [0, cnt[j]).
        neg = -gnb
        h = np.zeros(r, np.uint32)
        k = np.empty(r, np.uint32)
        t = np.empty(r, np.uint32)
        maxnb = int(gnb[0])
        j = 0
        while j < maxnb:
            cnt = int(np.searchsorted(neg, -j, side="left"))  # rows with nb > j
            if cnt < _PY_CHAIN_BELOW:
                # Few stragglers: mix their remaining blocks vectorised, chain in Python ints.
                for i in range(cnt):
                    p0 = int(gst[i]) + 4 * j
                    ws = np.array(w_all[p0 : int(gst[i]) + 4 * int(gnb[i]) : 4], dtype=np.uint32)
                    tmp = np.empty_like(ws)
                    _mix_k(ws, tmp)
                    h[i] = _py_chain(int(h[i]), ws.tolist())
                break
            ks, ts, hs = k[:cnt], t[:cnt], h[:cnt]
            # Unaligned gather is acceptable here: each long row pays it once per 4 bytes.
            ks[:] = w_all[gst[:cnt] + 4 * j]
            _mix_k(ks, ts)
            np.bitwise_xor(hs, ks, out=hs)
            _mix_h(hs, ts)
            j += 1
        tl = gln & 3
        np.copyto(k, _tail_words(data, gst + 4 * gnb, tl))
        _mix_k(k, t)
        np.bitwise_xor(h, k, out=h)
        np.bitwise_xor(h, gln.astype(np.uint32), out=h)
        _fmix(h, t, h)
        out[rows[sel]] = h


def _hash_var(offsets: np.ndarray, data: np.ndarray, out: np.ndarray) -> None:
    """MurmurHash3 of data[offsets[i]:offsets[i+1]] for every row i, into ``out`` (uint32)."""
    n = offsets.shape[0] - 1
    if n <= 0:
        return
    data = data if data.shape[0] else np.zeros(1, np.uint8)
    long_st: list[np.ndarray] = []
    long_ln: list[np.ndarray] = []
    long_rows: list[np.ndarray] = []
    a = 0
    while a < n:
        # Chunk boundary: at most _VAR_ROWS rows and (unless it is a single row) _VAR_BYTES bytes.
        b = min(a + _VAR_ROWS, n)
        if int(offsets[b]) - int(offsets[a]) > _VAR_BYTES:
            # Search only this chunk's window: searchsorted over the whole array would convert
            # all of it (int32 offsets vs an int64 key) on every chunk, i.e. quadratic time.
            window = offsets[a : b + 1].astype(np.int64)
            b = a + int(np.searchsorted(window, window[0] + _VAR_BYTES, side="right")) - 1
            b = min(max(b, a + 1), n)
        off = offsets[a : b + 1].astype(np.int64, copy=False)
        st = off[:-1]
        ln = np.diff(off)
        nbmax = int(ln.max()) >> 2
        if nbmax <= _SHORT_MAX_BLOCKS:
            _hash_short_chunk(st, ln, data, int(off[0]), int(off[-1]), out[a:b], None)
        else:
            is_long = (ln >> 2) > _SHORT_MAX_BLOCKS
            short_rows = np.flatnonzero(~is_long)
            long_idx = np.flatnonzero(is_long)
            long_st.append(st[long_idx])
            long_ln.append(ln[long_idx])
            long_rows.append(long_idx + a)
            if short_rows.shape[0]:
                sst = st[short_rows]
                sln = ln[short_rows]
                # The phase copies only need the short rows' byte range.
                lo = int(sst.min())
                hi = int((sst + sln).max())
                _hash_short_chunk(sst, sln, data, lo, hi, out[a:b], short_rows)
        a = b
    if long_rows:
        _hash_long(np.concatenate(long_st), np.concatenate(long_ln), data, out, np.concatenate(long_rows))


# --------------------------------------------------------------------------------------------
# Canonicalisation of variable-length types.
# --------------------------------------------------------------------------------------------
def _var_source(arr: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets, data) of string/binary-like arrays (offsets index ``data``), or None."""
    t = arr.type
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        arr = arr.cast(pa.large_binary())
        t = arr.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        off_t: Any = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        off_t = np.int64
    elif pa.types.is_fixed_size_binary(t):
        w = t.byte_width
        n = len(arr)
        offsets = (np.arange(n + 1, dtype=np.int64) + arr.offset) * w
        buf = arr.buffers()[1]
        data = np.frombuffer(buf, dtype=np.uint8) if buf is not None and buf.size else np.zeros(0, np.uint8)
        return offsets, data
    elif pa.types.is_decimal128(t) or pa.types.is_decimal256(t):
        return _decimal_bytes(arr)
    else:
        return None
    bufs = arr.buffers()
    if bufs[1] is None:  # only possible for empty arrays
        return np.zeros(len(arr) + 1, np.int64), np.zeros(0, np.uint8)
    offsets = np.frombuffer(bufs[1], dtype=off_t, count=len(arr) + 1 + arr.offset)[arr.offset :]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(0, np.uint8)
    return offsets, data


def _decimal_bytes(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Minimal big-endian two's complement of the unscaled integers (Java BigInteger.toByteArray)."""
    width = arr.type.byte_width
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(n + arr.offset) * width)
    le = raw[arr.offset * width :].reshape(n, width)
    be = le[:, ::-1]  # big-endian view, most significant byte first
    sign = np.where(be[:, 0] >= 0x80, np.uint8(0xFF), np.uint8(0))
    differs = be != sign[:, None]
    # Index of the first (most significant) byte that is not pure sign extension.
    first = np.where(differs.any(axis=1), differs.argmax(axis=1), width - 1)
    # One extra leading byte if that byte's top bit does not match the sign.
    top = be[np.arange(n), first]
    need_pad = (top >> 7) != (sign >> 7)
    start = first - need_pad.astype(np.int64)
    lengths = width - start
    keep = np.arange(width)[None, :] >= start[:, None]
    data = np.ascontiguousarray(be)[keep]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, data


def _segment_copy(
    dst: np.ndarray, dst_starts: np.ndarray, src: np.ndarray, src_starts: np.ndarray, lengths: np.ndarray
) -> None:
    """dst[dst_starts[i]:+lengths[i]] = src[src_starts[i]:+lengths[i]] for all i, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return
    excl = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=excl[1:])
    pos = np.arange(total, dtype=np.int64)
    src_idx = np.repeat(src_starts - excl, lengths) + pos
    dst_idx = np.repeat(dst_starts - excl, lengths) + pos
    dst[dst_idx] = src[src_idx]


# --------------------------------------------------------------------------------------------
# Input handling.
# --------------------------------------------------------------------------------------------
def _unsupported(t: pa.DataType) -> InvalidSpecError:
    return InvalidSpecError(f"murmur3: unsupported Arrow type {t} "
                            "(no canonical hash bytes defined, docs/design.md §1)")


def _require_arrow(arr: Any) -> pa.DataType:
    """The Arrow type of ``arr``; a TypeError for anything that is not an Array / ChunkedArray."""
    if not isinstance(arr, (pa.Array, pa.ChunkedArray)):
        raise TypeError(f"murmur3: expected a pyarrow Array or ChunkedArray, got {type(arr).__name__}")
    return arr.type


def _as_array(arr: Any) -> pa.Array:
    _require_arrow(arr)
    if isinstance(arr, pa.ChunkedArray):
        return arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    return arr


def _valid_mask(arr: pa.Array) -> np.ndarray | None:
    """Boolean validity of each row, or None when there are no nulls."""
    if arr.null_count == 0:
        return None
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little", count=len(arr) + arr.offset)[arr.offset :].view(bool)


def _validity_buffer(arr: pa.Array) -> tuple[pa.Buffer | None, int]:
    """A validity bitmap (offset 0) for a result aligned with ``arr``; zero-copy when possible."""
    nulls = arr.null_count
    if nulls == 0:
        return None, 0
    buf = arr.buffers()[0]
    if arr.offset % 8 == 0:
        return buf.slice(arr.offset // 8), nulls
    mask = _valid_mask(arr)
    assert mask is not None
    return pa.py_buffer(np.packbits(mask, bitorder="little")), nulls


def _int32_result(values: np.ndarray, validity: pa.Buffer | None, null_count: int) -> pa.Int32Array:
    values = values.view(np.int32)
    return pa.Array.from_buffers(pa.int32(), values.shape[0], [validity, pa.py_buffer(values)], null_count)


def _mask_buffer(valid: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    if valid is None:
        return None, 0
    nulls = int(valid.shape[0] - np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _hash_into(arr: pa.Array, post: Callable[[np.ndarray, np.ndarray], None] | None) -> pa.Int32Array:
    """Hash one plain Array; ``post`` maps the uint32 hashes of a block to the uint32 output."""
    n = len(arr)
    t = arr.type
    if pa.types.is_dictionary(t):
        # Hash each dictionary value once, then gather by index; null indices stay null.
        dict_hash = _hash_into(arr.dictionary, post)
        return dict_hash.take(arr.indices)
    if n == 0:
        return pa.array([], type=pa.int32())
    out = np.empty(n, np.uint32)
    fixed = _fixed_source(arr)
    if fixed is not None:
        if n:
            _hash_fixed([fixed], out, post)
    else:
        var = _var_source(arr)
        if var is None:
            raise _unsupported(t)
        if n:
            _hash_var(var[0], var[1], out)
            if post is not None:
                _post_chunked(post, out)
    validity, nulls = _validity_buffer(arr)
    return _int32_result(out, validity, nulls)


def _post_chunked(post: Callable[[np.ndarray, np.ndarray], None], h: np.ndarray) -> None:
    """Apply ``post`` in place over cache-sized blocks."""
    for a in range(0, h.shape[0], _FIXED_BLOCK):
        blk = h[a : a + _FIXED_BLOCK]
        post(blk.copy(), blk)


def _map_chunks(arr: Any, fn: Callable[[pa.Array], pa.Int32Array]) -> pa.Int32Array:
    if isinstance(arr, pa.ChunkedArray):
        parts = [fn(c) for c in arr.chunks]
        if not parts:
            return pa.array([], type=pa.int32())
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    return fn(arr)


def _check_type(t: pa.DataType) -> None:
    """Raise early for unsupported types (also for empty / chunk-less inputs)."""
    if pa.types.is_dictionary(t):
        _check_type(t.value_type)
        return
    ok = (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_date32(t)
        or pa.types.is_date64(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_decimal128(t)
        or pa.types.is_decimal256(t)
    )
    if not ok:
        raise _unsupported(t)


def _bucket_post(num_buckets: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """Block post-processor computing abs(int32 h) % n with 64-bit semantics.

    np.abs on int32 maps -2**31 to itself, whose uint32 reading is 2**31 = |-2**31|, so the
    unsigned remainder equals the 64-bit abs(h) % n, and the result (< n < 2**31) fits int32."""
    n_u = _U32(num_buckets)
    mask = _U32(num_buckets - 1)
    pow2 = num_buckets & (num_buckets - 1) == 0

    def post(h: np.ndarray, out: np.ndarray) -> None:
        hi = h.view(np.int32)
        np.abs(hi, out=hi)
        if pow2:
            np.bitwise_and(h, mask, out=out)
        else:
            np.remainder(h, n_u, out=out)

    return post


def _check_buckets(num_buckets: Any) -> int:
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)):
        raise InvalidSpecError(f"bucket: num_buckets must be an int, got {num_buckets!r}")
    n = int(num_buckets)
    if not 1 <= n <= 2**31 - 1:
        raise InvalidSpecError(f"bucket: num_buckets must be in [1, 2**31 - 1], got {n}")
    return n


# --------------------------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------------------------
def has_canonical_bytes(t: pa.DataType) -> bool:
    """Whether values of type ``t`` have canonical bytes (they can be hashed, and name a partition).

    >>> has_canonical_bytes(pa.int32()), has_canonical_bytes(pa.struct([("x", pa.int32())]))
    (True, False)
    """
    try:
        _check_type(t)
    except InvalidSpecError:
        return False
    return True


def canonical_bytes(arr: pa.Array | pa.ChunkedArray) -> pa.LargeBinaryArray:
    """The canonical bytes that are hashed for each value, as ``large_binary`` (nulls stay null).

    >>> canonical_bytes(pa.array([1, None], pa.int32())).to_pylist()
    [b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00', None]
    """
    _check_type(_require_arrow(arr))
    col = _Prepared(_as_array(arr))
    offsets, data = _canonical_chunk(col, 0, col.n)
    validity, nulls = _mask_buffer(col.valid)
    return pa.Array.from_buffers(pa.large_binary(), col.n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], nulls)


class _Prepared:
    """One column ready for canonicalisation: validity and its fixed or variable source, computed
    once (not per chunk)."""

    __slots__ = ("fixed", "n", "type", "valid", "var")

    def __init__(self, arr: pa.Array) -> None:
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        self.type = arr.type
        self.n = len(arr)
        self.valid = _valid_mask(arr)
        self.fixed = _fixed_source(arr)
        self.var = None if self.fixed is not None else _var_source(arr)
        if self.fixed is None and self.var is None:
            raise _unsupported(arr.type)


def _canonical_chunk(col: _Prepared, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Compact (offsets from 0, data) of canonical bytes of rows [a, b); nulls have length 0."""
    r = b - a
    v = None if col.valid is None else col.valid[a:b]
    if col.fixed is not None:
        scratch = np.empty(r, np.int64)
        vals = col.fixed.block(a, b, scratch).view(np.uint64)
        if v is None:
            return np.arange(0, 8 * r + 1, 8, dtype=np.int64), np.ascontiguousarray(vals).view(np.uint8)
        offsets = np.zeros(r + 1, np.int64)
        np.cumsum(v.astype(np.int64) * 8, out=offsets[1:])
        return offsets, np.ascontiguousarray(vals[v]).view(np.uint8)
    assert col.var is not None
    src_off, data = col.var
    off = src_off[a : b + 1].astype(np.int64)
    src_ln = np.diff(off)
    ln = src_ln.copy()
    if v is not None:
        ln[~v] = 0
    offsets = np.zeros(r + 1, np.int64)
    np.cumsum(ln, out=offsets[1:])
    if v is None or not src_ln[~v].any():
        # Bytes are already contiguous in the source: one slice, no gather.
        return offsets, np.ascontiguousarray(data[int(off[0]) : int(off[-1])])
    out = np.empty(int(offsets[-1]), np.uint8)
    _segment_copy(out, offsets[:-1], data, off[:-1], ln)
    return offsets, out


def murmur3(arr: pa.Array | pa.ChunkedArray) -> pa.Int32Array:
    """Signed 32-bit MurmurHash3 (x86_32, seed 0) of each value's canonical bytes; NULL -> NULL.

    A ChunkedArray is hashed chunk by chunk and the results are combined into one Int32Array.

    >>> murmur3(pa.array(["iceberg"])).to_pylist()
    [1210000089]
    """
    _check_type(_require_arrow(arr))
    return _map_chunks(arr, lambda c: _hash_into(c, None))


def bucket(arr: pa.Array | pa.ChunkedArray, num_buckets: int) -> pa.Int32Array:
    """``abs(murmur3(v)) % num_buckets`` in 64-bit arithmetic (never negative); NULL -> NULL.

    >>> bucket(pa.array([34], pa.int64()), 16).to_pylist()
    [3]
    """
    n = _check_buckets(num_buckets)
    _check_type(_require_arrow(arr))
    post = _bucket_post(n)
    return _map_chunks(arr, lambda c: _hash_into(c, post))


def bucket_of_hash(h: pa.Int32Array | pa.ChunkedArray, num_buckets: int) -> pa.Int32Array:
    """Bucket of already computed int32 hashes: ``abs(h) % num_buckets`` (64-bit), NULL -> NULL.

    >>> bucket_of_hash(pa.array([-2147483648, None], pa.int32()), 10).to_pylist()
    [8, None]
    """
    n = _check_buckets(num_buckets)
    _require_arrow(h)
    post = _bucket_post(n)

    def one(c: pa.Array) -> pa.Int32Array:
        if not pa.types.is_int32(c.type):
            raise InvalidSpecError(f"bucket_of_hash: expected int32 hashes, got {c.type}")
        out = np.array(_values(c, np.uint32), copy=True)  # garbage under nulls is harmless
        _post_chunked(post, out)
        validity, nulls = _validity_buffer(c)
        return _int32_result(out, validity, nulls)

    return _map_chunks(h, one)


def murmur3_multi(*arrs: pa.Array | pa.ChunkedArray) -> pa.Int32Array:
    """Per row, hash the concatenation of the canonical bytes of the non-NULL arguments (in
    argument order); NULL when every argument is NULL.

    >>> murmur3_multi(pa.array([1, None]), pa.array([None, None], pa.int64())).to_pylist()
    [1392991556, None]
    """
    return _multi(arrs, None)


def multi_bucket(arrs: Sequence[pa.Array | pa.ChunkedArray], num_buckets: int) -> pa.Int32Array:
    """``bucket`` of :func:`murmur3_multi`: ``abs(murmur3_multi(*arrs)) % num_buckets``.

    >>> multi_bucket([pa.array([1]), pa.array(["a"])], 8).to_pylist()
    [4]
    """
    return _multi(tuple(arrs), _bucket_post(_check_buckets(num_buckets)))


def _multi(arrs: Sequence[Any], post: Callable[[np.ndarray, np.ndarray], None] | None) -> pa.Int32Array:
    if not arrs:
        raise InvalidSpecError("murmur3_multi: needs at least one argument")
    for x in arrs:
        _check_type(_require_arrow(x))
    cols = [_Prepared(_as_array(x)) for x in arrs]
    n = cols[0].n
    if any(c.n != n for c in cols):
        raise InvalidSpecError(f"murmur3_multi: arguments differ in length {[c.n for c in cols]}")
    out = np.empty(n, np.uint32)
    masks = [c.valid for c in cols]
    fixed = [c.fixed for c in cols]
    if n and all(f is not None for f in fixed) and all(m is None for m in masks):
        # No nulls and all 8-byte canonical: a fixed-length record of 8 * k bytes.
        _hash_fixed(fixed, out, post)  # type: ignore[arg-type]
        return _int32_result(out, None, 0)
    for a in range(0, n, _MULTI_ROWS):
        b = min(a + _MULTI_ROWS, n)
        parts = [_canonical_chunk(c, a, b) for c in cols]
        lens = [np.diff(off) for off, _ in parts]
        offsets = np.zeros(b - a + 1, np.int64)
        np.cumsum(np.sum(lens, axis=0), out=offsets[1:])
        data = np.empty(int(offsets[-1]), np.uint8)
        pos = offsets[:-1].copy()
        for (off, d), ln in zip(parts, lens, strict=True):
            _segment_copy(data, pos, d, off[:-1], ln)
            pos += ln
        _hash_var(offsets, data, out[a:b])
    if post is not None:
        _post_chunked(post, out)
    valid = None
    if all(m is not None for m in masks):
        valid = np.logical_or.reduce(masks)  # type: ignore[arg-type]
    validity, nulls = _mask_buffer(valid)
    return _int32_result(out, validity, nulls)


def hash_scalar(value: Any, arrow_type: pa.DataType) -> int | None:
    """Hash one literal as if it were a value of ``arrow_type`` (None / null scalar -> None).

    >>> hash_scalar(34, pa.int64())
    2017239379
    """
    if value is None:
        return None
    if isinstance(value, pa.Scalar):
        if not value.is_valid:
            return None
        if value.type != arrow_type:
            value = value.cast(arrow_type)
        arr = pa.array([value], type=arrow_type)
    else:
        if isinstance(value, float) and pa.types.is_decimal(arrow_type):
            value = _decimal.Decimal(repr(value))
        if isinstance(value, _dt.datetime) and pa.types.is_date(arrow_type):
            value = value.date()
        arr = pa.array([value], type=arrow_type)
    return murmur3(arr)[0].as_py()
