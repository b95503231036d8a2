"""Inputs routed by one column cross the shuffle as Arrow batches.

An input declared with ``route_by="<column>"`` over a string or integer column needs no
user function to route: its key is the column's value. The map side then splits each
Arrow batch it reads by the partition owning each row's key and sends one Arrow IPC
buffer per partition and batch (a ``KEYED_BATCH`` item, ``records.py``) instead of one
pickled ``(KEYED, flow, enc, key, record)`` tuple per record. The task of that partition
groups the rows of all its buffers of a flow by key with Arrow and hands over the groups
the tuples would have made: the records are what :func:`~strata.model.schema.records_of`
makes of the rows, as on the per-record path, in arrival order, and the keys are the
column's values.

Inputs routed by a function, several columns or another column type, and inputs of
fused record-wise stages (whose records exist only as Python dicts) keep the per-record
path (``docs/architecture.md``, "The shuffle of a translate epoch").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


def grouped_rows(buffers: Sequence[bytes], column: str
                 ) -> Iterator[tuple[bytes, Any, list[dict]]]:
    """``(encoded key, key, records)`` per distinct key of the rows of IPC buffers from
    :func:`split_by_partition`, keys in order of first appearance and each key's records
    in arrival order: the groups the per-record path builds from ``KEYED`` items, but
    grouped by Arrow (a dictionary encoding and a stable sort of its codes) so that no
    Python runs per row except making its record."""
    tables = [pa.ipc.open_stream(data).read_all() for data in buffers]
    table = (pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1
             else tables[0])
    if table.num_rows == 0:
        return
    coded = pc.dictionary_encode(table[column].combine_chunks(), null_encoding="encode")
    codes = coded.indices.to_numpy()
    counts = np.bincount(codes, minlength=len(coded.dictionary))
    ends = np.cumsum(counts)
    records = records_of(table.take(np.argsort(codes, kind="stable")))
    keys = coded.dictionary
    for enc, key, start, end in zip(encode_column(keys), keys.to_pylist(),
                                    (ends - counts).tolist(), ends.tolist(), strict=True):
        yield enc, key, records[start:end]


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """One batch as an Arrow IPC stream (uncompressed: Spark compresses its shuffle)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()
