"""Spark's ``hash()`` (Murmur3, seed 42) over Arrow columns, computed with numpy.

Spark places a row in partition ``pmod(hash(keys), n)`` when it hash-partitions or buckets
by ``keys``. A driver that writes a bucketed table or splits an increment into a stage's
partitions from rows it holds as Arrow computes the same numbers here, with no Spark job.
It must agree with Spark bit for bit (a row in the wrong bucket is a wrong join): the
tests compare it with Spark's own ``hash`` on random rows of every type it accepts.

Supported: integers of up to 64 bits, booleans, dates, timestamps, floats and doubles,
strings and binaries, structs of these, NULL anywhere. Anything else (decimals, arrays,
maps, ...) gives None, and the caller lets Spark compute it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 42  # the seed of Spark's hash() and of its hash partitioning
MAX_STRING_MATRIX = 64 << 20  # bytes: strings longer than this per column go to Spark

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
_M1, _M2 = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)
_N, _FIVE = np.uint32(0xE6546B64), np.uint32(5)


class _Unsupported(Exception):
    pass


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k: np.ndarray) -> np.ndarray:
    return _rotl(k * _C1, 15) * _C2


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    return _rotl(h ^ k, 13) * _FIVE + _N


def _fmix(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h = h ^ np.asarray(length, dtype=np.uint32)
    h = (h ^ (h >> np.uint32(16))) * _M1
    h = (h ^ (h >> np.uint32(13))) * _M2
    return h ^ (h >> np.uint32(16))


def _hash_int(v: np.ndarray, seed: np.ndarray) -> np.ndarray:
    return _fmix(_mix_h1(seed, _mix_k1(v.astype(np.int64).astype(np.uint32))), 4)


def _hash_long(v: np.ndarray, seed: np.ndarray) -> np.ndarray:
    u = v.astype(np.int64).view(np.uint64)
    low, high = (u & np.uint64(0xFFFFFFFF)).astype(np.uint32), (u >> np.uint64(32)).astype(
        np.uint32)
    return _fmix(_mix_h1(_mix_h1(seed, _mix_k1(low)), _mix_k1(high)), 8)


def _hash_bytes(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashUnsafeBytes``: 4-byte little-endian words, then each tail byte
    (sign-extended) mixed on its own, then ``fmix`` with the length. Vectorized over rows,
    one word of every row at a time: the data buffer is viewed as 32-bit words at each of
    the four byte alignments, so word *j* of every row is one gather (no row × width byte
    matrix: that cost twice the time, in memory traffic)."""
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], np.int64 if wide else np.int32)[
        arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    aligned = lengths // 4
    width = int(lengths.max(initial=0))
    if len(arr) * (width + -width % 4) > MAX_STRING_MATRIX:
        raise _Unsupported
    h = seed.copy()
    words = int(aligned.max(initial=0))
    if words:
        padded = np.zeros(len(data) + 8, np.uint8)
        padded[:len(data)] = data
        m = (len(padded) - 3) // 4
        by_alignment = np.empty((4, m), np.uint32)
        for a in range(4):
            by_alignment[a] = padded[a:a + 4 * m].view("<u4")
        alignment, first = starts & 3, starts >> 2
        for j in range(words):
            word = by_alignment[alignment, np.minimum(first + j, m - 1)]
            h = np.where(j < aligned, _mix_h1(h, _mix_k1(word)), h)
    last = max(len(data) - 1, 0)
    tail = starts + aligned * 4
    for t in range(3):
        active = aligned * 4 + t < lengths
        if not active.any():
            break
        k = data[np.minimum(tail + t, last)].view(np.int8).astype(np.int32).view(np.uint32)
        h = np.where(active, _mix_h1(h, _mix_k1(k)), h)
    return _fmix(h, lengths.astype(np.uint32))


def _column(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """The running hash after column ``arr``: Spark's ``hash(..., arr)`` leaves the seed
    of a NULL value as it is."""
    t = arr.type
    if pa.types.is_struct(t):
        h = seed  # a struct's fields in order, each with the hash so far as its seed
        for field in arr.flatten():  # (a NULL struct's fields are NULL: its seed stays)
            h = _column(field, h)
        out = h
    elif pa.types.is_boolean(t):
        out = _hash_int(np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False),
                                   np.int32), seed)
    elif pa.types.is_integer(t) and t.bit_width <= 32 or pa.types.is_date32(t):
        out = _hash_int(_values(arr.cast(pa.int32()) if pa.types.is_date32(t) else arr), seed)
    elif pa.types.is_integer(t) and t.bit_width == 64 or pa.types.is_timestamp(t):
        if pa.types.is_uint64(t):
            raise _Unsupported
        ts = arr.cast(pa.int64()) if pa.types.is_timestamp(t) else arr
        out = _hash_long(_values(ts), seed)
    elif pa.types.is_float32(t):
        v = _values(arr).astype(np.float32)
        bits = np.where(v == 0, np.float32(0), v).view(np.int32)  # -0.0 hashes as 0.0
        bits = np.where(np.isnan(v), np.int32(0x7FC00000), bits)  # Java's canonical NaN
        out = _hash_int(bits, seed)
    elif pa.types.is_float64(t):
        v = _values(arr).astype(np.float64)
        bits = np.where(v == 0, 0.0, v).view(np.int64)
        bits = np.where(np.isnan(v), np.int64(0x7FF8000000000000), bits)
        out = _hash_long(bits, seed)
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(
            t) or pa.types.is_large_binary(t):
        out = _hash_bytes(arr, seed)
    else:
        raise _Unsupported
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)
        out = np.where(valid, out, seed)
    return out


def _values(arr: pa.Array) -> np.ndarray:
    """The values of a fixed-width column, NULLs as 0 (their hash is discarded)."""
    return np.asarray(pc.fill_null(arr, 0).to_numpy(zero_copy_only=False))


def spark_hash(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray | None:
    """Spark's ``hash(c1, c2, ...)`` of each row as int32, or None if a column's type is
    not supported (module docstring)."""
    if not columns:
        raise ValueError("hash of no columns")
    rows = len(columns[0])
    h = np.full(rows, SEED, np.uint32)
    try:
        for c in columns:
            arr = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
            if isinstance(arr, pa.ChunkedArray):  # no chunks: an empty column
                arr = pa.array([], arr.type)
            h = _column(arr, h)
    except _Unsupported:
        return None
    return h.view(np.int32)


def partitions(columns: Sequence[pa.Array | pa.ChunkedArray], n: int) -> np.ndarray | None:
    """Each row's partition among ``n``: Spark's ``pmod(hash(columns), n)`` (the bucket of
    ``bucketBy`` and the partition of ``repartition(n, columns)``); None if a column's type
    is not supported."""
    h = spark_hash(columns)
    if h is None:
        return None
    return np.mod(h.astype(np.int64), n).astype(np.int32)
