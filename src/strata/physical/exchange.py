"""How a vectorized epoch's records reach the partitions of its stage: two exchanges.

The row exchange, ``repartition(n, keys)``, ships one Spark row per record: each is
converted to Spark's row format (8-byte aligned), compressed by the shuffle a block at a
time, and converted back to Arrow for the task that reads it. The Arrow exchange ships
compressed Arrow buffers instead: a ``mapInArrow`` on the map side computes
each record's partition with Spark's own hash (:mod:`strata.physical.spark_hash`, the
partition ``repartition(n, keys)`` would give), and packs each partition's records into
one zstd-compressed Arrow IPC stream per map task: a row ``(__p, __s, __b)``. The rows are
repartitioned on ``__s``, a number chosen per partition so that Spark's hash sends it to
partition ``__p`` (:func:`salts`), and the task of partition *p* unpacks its buffers
(:func:`unpack`). Records, keys and partitions are those of the row route, so the state
layout is the same; only fewer, smaller rows cross the shuffle
(docs/vectorized.md, "How an epoch runs").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata import config
from strata.model.errors import DataflowError
from strata.physical import spark_hash

PACKED_SCHEMA = "__p int, __s bigint, __b binary"
_PACKED = pa.schema([("__p", pa.int32()), ("__s", pa.int64()), ("__b", pa.binary())])
FLUSH_ROWS = 1 << 18  # records a map task holds before it ships its buffers
FLUSH_BYTES = 64 << 20  # ... or bytes (one buffer stays far below Arrow's 2 GiB binary)
_CODEC = "zstd"


def exchange_kind(spark: Any, records: int) -> str:
    """How an epoch of ``records`` input records crosses the shuffle: ``"arrow"`` or
    ``"rows"``, as ``spark.strata.vectorized.exchange`` says (``"auto"``: packed from
    ``spark.strata.vectorized.exchangeMinRecords`` records; below that the map side's
    Python stage costs more than it saves: on 2 cores, 0.15 s more per epoch at 10,000
    records, even at 50,000, 5% less at 200,000; docs/vectorized.md, "Measurements",
    and docs/configuration.md)."""
    try:
        kind = config.conf(spark, config.EXCHANGE)
        if kind == "auto":
            least = config.conf(spark, config.EXCHANGE_MIN_RECORDS)
            return "arrow" if records >= least else "rows"
    except config.SettingError as e:
        raise DataflowError(str(e)) from None
    return kind


def with_partition(rows: DataFrame, kcols: Sequence[str], n: int) -> DataFrame:
    """``rows`` with the partition each belongs to in ``__p``: Spark's
    ``pmod(hash(keys), n)``, the one its hash partitioning into ``n`` gives."""
    return rows.withColumn("__p", F.pmod(F.hash(*kcols), F.lit(n)))


def partitioned(rows: DataFrame, kcols: Sequence[str], n: int) -> DataFrame:
    """The row exchange: ``rows`` hash-partitioned on the key columns into ``n``
    partitions, with the partition each row must reach in ``__p`` (each task checks it)."""
    return with_partition(rows, kcols, n).repartition(n, *kcols)


def hash_partitioned(spark: Any, rows: DataFrame, kcols: Sequence[str],
                     key_types: Sequence[pa.DataType] | None, n: int,
                     records: int) -> DataFrame:
    """``rows`` (``records`` input records) hash-partitioned on ``kcols`` into ``n``
    partitions: by the Arrow exchange when the keys' types are known (``key_types``) and
    hashed by the map side and :func:`exchange_kind` says so, else by the row one."""
    if (key_types is not None and exchange_kind(spark, records) == "arrow"
            and supported(key_types)):
        return arrow_exchange(rows, kcols, n)
    return partitioned(rows, kcols, n)


def supported(key_types: Sequence[pa.DataType]) -> bool:
    """Whether the map side can compute Spark's partition of keys of these types."""
    return spark_hash.spark_hash([pa.array([], t) for t in key_types]) is not None


def salts(n: int) -> list[int]:
    """For each partition ``p < n`` the smallest non-negative bigint ``v`` with
    ``pmod(hash(v), n) == p``: a row carrying ``v`` goes to partition ``p`` under
    ``repartition(n, column)``."""
    out = np.full(n, -1, np.int64)
    start, width = 0, 8 * n + 64
    while (out < 0).any():
        candidates = np.arange(start, start + width, dtype=np.int64)
        parts = spark_hash.partitions([pa.array(candidates)], n)
        assert parts is not None  # bigints are always supported
        first, index = np.unique(parts, return_index=True)
        missing = out[first] < 0
        out[first[missing]] = candidates[index[missing]]
        start += width
    return out.tolist()


def arrow_exchange(rows: DataFrame, key_columns: Sequence[str], n: int) -> DataFrame:
    """``rows`` packed per map task and partition, and repartitioned so that partition
    ``p`` gets the buffers of its records (module docstring)."""
    pack = PackTask(list(key_columns), n, salts(n))
    return rows.mapInArrow(pack, PACKED_SCHEMA).repartition(n, "__s")


def is_packed(batches: Sequence[pa.RecordBatch]) -> bool:
    """Whether a task's batches are packed buffers rather than rows."""
    return bool(batches) and "__b" in batches[0].schema.names


def unpack(batches: Sequence[pa.RecordBatch]) -> tuple[list[int], list[pa.RecordBatch]]:
    """The partitions the buffers were packed for, and their records."""
    partitions: list[int] = []
    records: list[pa.RecordBatch] = []
    for batch in batches:
        partitions += batch.column("__p").to_pylist()
        blobs = batch.column("__b")
        for i in range(len(blobs)):
            records += ipc.open_stream(blobs[i].as_buffer()).read_all().to_batches()
    return partitions, records


class KeyTooLong(Exception):  # a record the map side cannot hash
    """A key whose bytes are beyond what :mod:`spark_hash` hashes in one piece."""


@dataclass
class PackTask:
    """The map side: shipped to the executors by ``mapInArrow``."""

    keys: list[str]
    n: int
    salts: list[int]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        held: list[list[pa.RecordBatch]] = [[] for _ in range(self.n)]  # per partition
        rows = size = 0
        for batch in batches:
            if not batch.num_rows:
                continue
            self._split(batch, self._partitions(batch), held)
            rows, size = rows + batch.num_rows, size + batch.nbytes
            if rows >= FLUSH_ROWS or size >= FLUSH_BYTES:
                yield from self._flush(held)
                rows = size = 0
        yield from self._flush(held)

    def _partitions(self, batch: pa.RecordBatch) -> np.ndarray:
        parts = spark_hash.partitions([batch.column(k) for k in self.keys], self.n)
        if parts is not None:
            return parts
        if batch.num_rows == 1:  # the types are supported (checked): the key is too long
            raise KeyTooLong(
                f"a record's key is {batch.nbytes:,} bytes, more than the vectorized route "
                f"hashes ({spark_hash.MAX_STRING_MATRIX:,}); key the stage by a shorter "
                "column (a hash of this one, say)")
        half = batch.num_rows // 2
        return np.concatenate([self._partitions(batch.slice(0, half)),
                               self._partitions(batch.slice(half))])

    def _split(self, batch: pa.RecordBatch, parts: np.ndarray,
               held: list[list[pa.RecordBatch]]) -> None:
        order = np.argsort(parts, kind="stable")  # arrival order within each partition
        bounds = np.searchsorted(parts[order], np.arange(self.n + 1))
        for p in range(self.n):
            lo, hi = int(bounds[p]), int(bounds[p + 1])
            if hi > lo:
                held[p].append(batch.take(pa.array(order[lo:hi])))

    def _flush(self, held: list[list[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
        options = ipc.IpcWriteOptions(compression=_CODEC)
        for p, batches in enumerate(held):
            if not batches:
                continue
            sink = pa.BufferOutputStream()
            with ipc.new_stream(sink, batches[0].schema, options=options) as writer:
                writer.write_table(pa.Table.from_batches(batches).combine_chunks())
            yield pa.RecordBatch.from_arrays(
                [pa.array([p], pa.int32()), pa.array([self.salts[p]], pa.int64()),
                 _one_binary(sink.getvalue())], schema=_PACKED)
            batches.clear()


def _one_binary(buf: pa.Buffer) -> pa.Array:
    """A binary array of one value, ``buf``, without copying it."""
    offsets = np.array([0, buf.size], np.int32)
    return pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(offsets), buf])
