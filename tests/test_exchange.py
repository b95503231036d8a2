"""The Arrow exchange of vectorized epochs (strata.physical.exchange): packed
buffers reach the partition Spark's own hash gives their records, whole and in order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from strata.config import EXCHANGE, EXCHANGE_MIN_RECORDS
from strata.physical import exchange, spark_hash
from strata.physical.exchange import KeyTooLong, PackTask, salts, unpack


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 64, 200])
def test_each_salt_lands_in_its_partition_by_sparks_own_hash(spark, n):
    values = salts(n)
    assert len(values) == n and min(values) >= 0
    got = (spark.createDataFrame([(v,) for v in values], "v bigint")
           .select(F.pmod(F.hash("v"), F.lit(n)).alias("p")).collect())
    assert [r["p"] for r in got] == list(range(n))


def _batches(rng: np.random.Generator, sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for size in sizes:
        ids = rng.integers(0, 50, size)
        out.append(pa.record_batch({
            "__k0": pa.array([f"key-{i}" if i % 7 else None for i in ids], pa.string()),
            "__k1": pa.array(ids * 3, pa.int64()),
            "seq": pa.array(np.arange(start, start + size), pa.int64())}))
        start += size
    return out


@pytest.mark.parametrize("flush_rows", [1 << 18, 5])
def test_packed_records_reach_their_partition_whole_and_in_order(monkeypatch, flush_rows):
    monkeypatch.setattr(exchange, "FLUSH_ROWS", flush_rows)
    n = 5
    batches = _batches(np.random.default_rng(7), [13, 0, 40, 1])
    packed = list(PackTask(["__k0", "__k1"], n, salts(n))(iter(batches)))
    assert all(b.num_rows == 1 for b in packed)
    if flush_rows == 5:  # flushed after every batch: several buffers per partition
        assert len(packed) > n
    everything = pa.Table.from_batches(batches)
    want = spark_hash.partitions([everything["__k0"], everything["__k1"]], n)
    for p in range(n):
        mine = [b for b in packed if b.column("__p")[0].as_py() == p]
        assert all(b.column("__s")[0].as_py() == salts(n)[p] for b in mine)
        packed_for, records = unpack(mine)
        assert packed_for == [p] * len(mine)
        got = pa.Table.from_batches(records, everything.schema) if records else None
        expected = everything.filter(pa.array(want == p))
        assert (got.to_pylist() if got else []) == expected.to_pylist()  # arrival order


def test_a_key_longer_than_the_hash_takes_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(spark_hash, "MAX_STRING_MATRIX", 64)
    short = pa.record_batch({"__k0": pa.array([f"k{i}" for i in range(40)])})
    packed = list(PackTask(["__k0"], 3, salts(3))(iter([short])))  # split until it fits
    _, records = unpack(packed)
    assert sum(b.num_rows for b in records) == 40
    long = pa.record_batch({"__k0": pa.array(["x" * 100])})
    with pytest.raises(KeyTooLong, match="key the stage by a shorter column"):
        list(PackTask(["__k0"], 3, salts(3))(iter([long])))


def test_key_types_the_map_side_cannot_hash_keep_the_row_exchange():
    assert exchange.supported([pa.string(), pa.int64(), pa.date32()])
    assert not exchange.supported([pa.decimal128(10, 2)])


def test_auto_packs_only_epochs_large_enough_to_pay_and_a_bad_value_is_named(spark):
    from strata.model.errors import DataflowError
    from tests.helpers import session_confs

    big = EXCHANGE_MIN_RECORDS.default
    with session_confs(spark, {EXCHANGE.name: "auto"}):
        assert exchange.exchange_kind(spark, big - 1) == "rows"
        assert exchange.exchange_kind(spark, big) == "arrow"
    with session_confs(spark, {EXCHANGE.name: "rows"}):
        assert exchange.exchange_kind(spark, 10 * big) == "rows"
    with session_confs(spark, {EXCHANGE.name: "Arrow"}):
        assert exchange.exchange_kind(spark, 1) == "arrow"
    with session_confs(spark, {EXCHANGE.name: "packed"}), pytest.raises(
            DataflowError, match="'auto', 'arrow' or 'rows', not 'packed'"):
        exchange.exchange_kind(spark, 1)
