"""The driver's Spark hash agrees with Spark's ``hash()`` and ``pmod(hash(...), n)`` bit for
bit: random rows of every supported type (NULLs, -0.0, NaN, multi-byte strings,
structs) hashed by both. A wrong hash would put a row in the wrong bucket."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.physical.spark_hash import partitions, spark_hash

SCHEMA = pa.schema([
    ("i", pa.int32()), ("b", pa.int64()), ("t", pa.int8()), ("h", pa.int16()),
    ("f", pa.bool_()), ("x", pa.float64()), ("y", pa.float32()), ("s", pa.string()),
    ("d", pa.date32()), ("bin", pa.binary()),
    ("g", pa.struct([("k", pa.int64()), ("n", pa.string())]))])

floats = st.none() | st.floats(width=64) | st.sampled_from([0.0, -0.0, math.nan, 1.5])
row = st.fixed_dictionaries({
    "i": st.none() | st.integers(-2**31, 2**31 - 1),
    "b": st.none() | st.integers(-2**63, 2**63 - 1) | st.integers(-3, 3),
    "t": st.none() | st.integers(-128, 127), "h": st.none() | st.integers(-2**15, 2**15 - 1),
    "f": st.none() | st.booleans(), "x": floats,
    "y": st.none() | st.floats(width=32) | st.sampled_from([-0.0, math.nan]),
    "s": st.none() | st.text(max_size=9) | st.sampled_from(["", "é", "abcd", "日本語x"]),
    "d": st.none() | st.dates(),
    "bin": st.none() | st.binary(max_size=7),
    "g": st.none() | st.fixed_dictionaries({"k": st.none() | st.integers(-9, 9),
                                             "n": st.none() | st.text(max_size=5)})})


def spark_hashes(spark, table: pa.Table, columns: list[str], n: int) -> list[tuple]:
    df = spark.createDataFrame(table, schema=_ddl()).coalesce(1)
    cols = ", ".join(f"`{c}`" for c in columns)
    got = df.selectExpr(f"hash({cols}) AS h", f"pmod(hash({cols}), {n}) AS p").collect()
    return [(r["h"], r["p"]) for r in got]


def _ddl() -> str:
    return ("i int, b bigint, t tinyint, h smallint, f boolean, x double, y float, "
            "s string, d date, bin binary, g struct<k: bigint, n: string>")


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=20),
       columns=st.lists(st.sampled_from(SCHEMA.names), min_size=1, max_size=4),
       n=st.integers(1, 17))
def test_hash_matches_spark(spark, rows, columns, n):
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    want = spark_hashes(spark, table, columns, n)
    got_h = spark_hash([table.column(c) for c in columns])
    got_p = partitions([table.column(c) for c in columns], n)
    assert got_h is not None and got_p is not None
    assert list(zip(got_h.tolist(), got_p.tolist(), strict=True)) == want


def test_sliced_and_chunked_columns_hash_as_their_rows(spark):
    table = pa.Table.from_pylist(
        [{"s": f"key-{i}" * (i % 4), "b": i * 7919, "g": {"k": i, "n": None}} for i in range(50)],
        schema=pa.schema([("s", pa.string()), ("b", pa.int64()),
                          ("g", pa.struct([("k", pa.int64()), ("n", pa.string())]))]))
    chunked = pa.concat_tables([table.slice(0, 13), table.slice(13, 20), table.slice(33)])
    whole = spark_hash([table.column(c) for c in table.column_names])
    parts = spark_hash([chunked.column(c) for c in chunked.column_names])
    sliced = spark_hash([table.slice(13, 20).column(c) for c in table.column_names])
    assert whole is not None and parts is not None and sliced is not None
    assert np.array_equal(whole, parts) and np.array_equal(sliced, whole[13:33])
    df = spark.createDataFrame(table, "s string, b bigint, g struct<k: bigint, n: string>"
                               ).coalesce(1)
    assert [r[0] for r in df.selectExpr("hash(s, b, g)").collect()] == whole.tolist()


@pytest.mark.parametrize("array", [pa.array([Decimal("1.5")], pa.decimal128(10, 2)),
                                   pa.array([[1]], pa.list_(pa.int64())),
                                   pa.array([1], pa.uint64())])
def test_unsupported_types_are_left_to_spark(array):
    assert spark_hash([array]) is None and partitions([array], 4) is None


def test_long_strings_at_every_alignment_hash_as_spark_does(spark):
    rng = np.random.default_rng(3)
    words = [f"https://site{i % 7}.example.com/" + "p/" * int(rng.integers(0, 30)) + "é" * (i % 3)
             for i in range(301)]
    column = pa.array(words, pa.string()).slice(1)  # rows start at every byte alignment
    df = spark.createDataFrame(pa.table({"s": column}), "s string").coalesce(1)
    want = [r["h"] for r in df.selectExpr("hash(s) AS h").collect()]
    got = spark_hash([column])
    assert got is not None and got.tolist() == want
