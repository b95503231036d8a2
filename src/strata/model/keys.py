"""Group keys: canonical encoding, hashing and partitioning.

A route key may be ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes`` or a
tuple of these. Two keys are the same group when their canonical encodings are
equal, so keys are compared by type and value (``1``, ``1.0`` and ``True`` are three
different groups, as they are three different values in a typed Spark column).

The encoding is stable across processes and Python runs (unlike ``hash()``), so it
can decide partitions that must survive a restart.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from hashlib import blake2b
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KEY_TYPES = (type(None), bool, int, float, str, bytes, tuple)


class KeyTypeError(TypeError):
    """A route key of a type strata cannot group by."""


def encode_key(key: Any) -> bytes:
    """Canonical bytes of a route key; equal keys give equal bytes."""
    t = type(key)
    if t is str:
        return b"s" + key.encode("utf-8", "surrogatepass")
    if t is int:
        return b"i" + str(key).encode()
    if t is tuple:
        parts = [encode_key(k) for k in key]
        return b"t" + b"".join(struct.pack(">I", len(p)) + p for p in parts)
    if t is bool:
        return b"T" if key else b"F"
    if t is float:
        return b"f" + repr(key).encode()
    if t is bytes:
        return b"b" + key
    if key is None:
        return b"n"
    raise KeyTypeError(
        f"route key {key!r} has type {t.__name__}; keys must be None, bool, int, "
        "float, str, bytes or tuples of these"
    )


def encode_column(values: pa.Array | pa.ChunkedArray) -> list[bytes]:
    """``[encode_key(v) for v in values.to_pylist()]``, computed by Arrow for string and
    integer columns without nulls (their encodings are a type tag before the UTF-8 text
    or the decimal digits); other columns take the per-value path."""
    kind = values.type
    if values.null_count == 0 and len(values):
        tag = None
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            tag, text = "s", values
        elif pa.types.is_integer(kind):
            tag, text = "i", pc.cast(values, pa.string())
        if tag is not None:
            tagged = pc.binary_join_element_wise(pa.scalar(tag, text.type), text,
                                                pa.scalar("", text.type))
            return tagged.cast(pa.large_binary()).to_pylist()
    return [encode_key(v) for v in values.to_pylist()]


def partition_of(enc: bytes, num_partitions: int) -> int:
    """The partition (0..num_partitions-1) that owns the encoded key."""
    return zlib.crc32(enc) % num_partitions


def partitions_of(encs: Sequence[bytes], num_partitions: int) -> np.ndarray:
    """:func:`partition_of` of each encoded key, as one array."""
    crcs = np.fromiter(map(zlib.crc32, encs), dtype=np.uint32, count=len(encs))
    return crcs % num_partitions


def hash64(enc: bytes) -> int:
    """A 64-bit hash of an encoded key, for state indexes."""
    return int.from_bytes(blake2b(enc, digest_size=8).digest(), "little")
