"""Inputs routed by one column cross the shuffle as Arrow batches.

An input declared with ``route_by="<column>"`` over a string or integer column needs no
user function to route: its key is the column's value. The map side then splits each
Arrow batch it reads by the partition owning each row's key and sends one Arrow IPC
buffer per partition and batch (a ``KEYED_BATCH`` item, ``records.py``) instead of one
pickled ``(KEYED, flow, enc, key, record)`` tuple per record. The task of that partition
turns the buffer into the same ``(enc, key, record)`` triples the tuples carried: the
records are what :func:`~strata.model.schema.records_of` makes of the rows, as on the
per-record path, and the keys are the column's values.

Inputs routed by a function, several columns or another column type, and inputs of
fused record-wise stages (whose records exist only as Python dicts) keep the per-record
path (``docs/architecture.md``, "The shuffle of a translate epoch").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from strata.model.keys import encode_column, partitions_of
from strata.model.schema import records_of

_ROUTABLE = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer)


def route_column(route_by: Any, schema: pa.Schema) -> str | None:
    """The column whose value is each record's key, if rows of ``schema`` can be routed
    as Arrow batches; None when the route needs the per-record path."""
    if not isinstance(route_by, str) or route_by not in schema.names:
        return None
    kind = schema.field(route_by).type
    return route_by if any(test(kind) for test in _ROUTABLE) else None


def split_by_partition(batch: pa.RecordBatch, column: str, num_partitions: int
                       ) -> Iterator[tuple[int, bytes]]:
    """``(partition, IPC bytes)`` of ``batch``'s rows, grouped by the partition that owns
    each row's key (``strata.model.keys.partition_of``); partitions without rows are left
    out, and rows keep their order."""
    if batch.num_rows == 0:
        return
    if num_partitions == 1:
        yield 0, to_ipc(batch)
        return
    owner = partitions_of(encode_column(batch.column(column)), num_partitions)
    for p in np.unique(owner).tolist():
        rows = np.flatnonzero(owner == p)
        yield p, to_ipc(batch if len(rows) == batch.num_rows else batch.take(rows))


def keyed_rows(data: bytes, column: str) -> Iterator[tuple[bytes, Any, dict]]:
    """``(encoded key, key, record)`` of each row of an IPC buffer from
    :func:`split_by_partition`: what a ``KEYED`` item of the per-record path carries."""
    with pa.ipc.open_stream(data) as reader:
        for batch in reader:
            keys = batch.column(column)
            yield from zip(encode_column(keys), keys.to_pylist(), records_of(batch),
                           strict=True)


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """One batch as an Arrow IPC stream (uncompressed: Spark compresses its shuffle)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()
