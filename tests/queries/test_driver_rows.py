"""The Arrow operations on rows the driver holds agree with the DataFrame operations
they replace (run on the same rows as Spark plans)."""

from __future__ import annotations

import math

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from strata.config import QUERY_DRIVER_ROWS
from strata.queries.arrow import driver_rows
from strata.queries.arrow.rows import Rows
from strata.queries.spark import dispatch
from strata.queries.spark.frames import cut, local_rows
from tests.helpers import counting_jobs, session_confs

SCHEMA = "`_g` struct<a: bigint, b: string>, `v` double, `_cnt` bigint"
ARROW = pa.schema([("_g", pa.struct([("a", pa.int64()), ("b", pa.string())])),
                   ("v", pa.float64()), ("_cnt", pa.int64())])

keys = st.tuples(st.none() | st.integers(-3, 3), st.none() | st.sampled_from(["x", "y", ""]))
rows = st.dictionaries(keys, st.tuples(st.floats(-5, 5, allow_nan=False),
                                       st.none() | st.integers(-1, 2)), max_size=8)


def frames(spark, by_key: dict) -> tuple:
    """The same keyed rows held by the driver and as a plain (Spark-planned) DataFrame."""
    table = pa.Table.from_pylist([{"_g": {"a": a, "b": b}, "v": v, "_cnt": c}
                                  for (a, b), (v, c) in by_key.items()], schema=ARROW)
    plain = spark.createDataFrame(table.to_pylist(), SCHEMA)
    return Rows.of_arrow(spark, table, plain.schema), Rows.of_frame(plain.where("true"))


def rows_of(rows) -> list:
    df = rows.frame() if isinstance(rows, Rows) else rows
    return sorted((r.asDict(recursive=True) for r in df.collect()), key=repr)


@settings(max_examples=12, deadline=None)
@given(old=rows, new=rows, count=st.sampled_from([None, "_cnt"]))
def test_upserting_held_rows_matches_the_spark_plan(spark, old, new, count):
    old_held, old_plain = frames(spark, old)
    new_held, new_plain = frames(spark, new)
    assert not new_plain.is_held
    with_live = driver_rows.with_live(new_held, count)
    assert with_live.is_held
    assert rows_of(with_live) == rows_of(driver_rows.with_live(new_plain, count))
    old_live = driver_rows.with_live(old_held, None)
    merged = driver_rows.replace_by_key(old_live, with_live, "_g")
    assert merged is not None and local_rows(merged) == merged.frame().count()
    plain_old = driver_rows.with_live(old_plain, None)
    plain_new = driver_rows.with_live(new_plain, count)
    want = plain_old.frame().join(plain_new.frame().select("_g"), "_g", "left_anti") \
        .unionByName(plain_new.frame())
    assert rows_of(merged) == rows_of(want)
    assert driver_rows.replace_by_key(plain_old, plain_new, "_g") is None  # not held


@settings(max_examples=6, deadline=None)
@given(a=rows, b=rows)
def test_projections_unions_and_struct_fields_of_held_rows(spark, a, b):
    (ha, pa_), (hb, pb) = frames(spark, a), frames(spark, b)
    for df, plain in ((ha, pa_), (hb, pb)):
        got = driver_rows.select(df, ["v", "_cnt"], {"_mult": -1})
        assert got.is_held
        assert got.schema == driver_rows.select(plain, ["v", "_cnt"], {"_mult": -1}).schema
        assert rows_of(got) == rows_of(driver_rows.select(plain, ["v", "_cnt"], {"_mult": -1}))
        flagged = driver_rows.with_live(df, "_cnt", "keep")
        fields = driver_rows.fields_of(flagged, "_g", where="keep")
        assert rows_of(fields) == rows_of(plain.frame().where("_cnt <> 0").select("_g.*"))
    both = driver_rows.union([ha, hb])
    assert both.is_held
    assert rows_of(both) == rows_of(pa_.frame().unionByName(pb.frame()))
    assert rows_of(driver_rows.union([ha, pb])) == rows_of(pa_.frame().unionByName(pb.frame()))


def test_cut_holds_what_it_brings_to_the_driver(spark):
    df = spark.range(5).selectExpr("named_struct('a', id, 'b', 'k') AS _g", "id * 1.5 AS v",
                                   "id AS _cnt")
    held, rows = cut(df)
    assert rows == 5 and held.is_held and held.num_rows == 5
    assert local_rows(held) == 5
    projected = held.frame().where("v > 2").select("_g")  # a local relation, not held
    assert local_rows(projected) is None or local_rows(projected) == 3
    again, rows = cut(projected)  # held again, so what follows can run in Arrow
    assert rows == 3 and again.num_rows == 3
    assert sorted(r._g.a for r in again.frame().collect()) == [2, 3, 4]
    empty, rows = cut(held.frame().where("v < 0"))  # no rows: held without a Spark job
    assert rows == 0 and empty.num_rows == 0 and empty.frame().count() == 0


def test_held_rows_become_one_local_frame_when_spark_needs_them(spark):
    """A held table answers its schema and size itself; its DataFrame is made once, when
    first asked for, and has the same rows. A frame's rows are not held."""
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    schema = spark.createDataFrame(table).schema
    held = Rows.of_arrow(spark, table, schema)
    assert held.is_held and held.num_rows == 3 and held.columns == ["x"]
    assert held.arrow() is table
    frame = held.frame()
    assert held.frame() is frame and sorted(r.x for r in frame.collect()) == [1, 2, 3]
    plain = Rows.of_frame(frame.where("x > 1"))
    assert not plain.is_held and plain.num_rows is None and plain.arrow() is None
    assert Rows.of_frame(plain) is plain and local_rows(plain) in (None, 2)
    assert cut(plain)[0].arrow().column("x").to_pylist() == [2, 3]


def test_float_keys_are_left_to_spark(spark):
    """Spark equates -0.0 with 0.0 in join keys; Arrow's grouping would not."""
    t = pa.table({"_g": pa.array([{"f": -0.0}]), "v": [1]})
    df = Rows.of_arrow(spark, t, spark.createDataFrame(t).schema)
    assert driver_rows.replace_by_key(df, df, "_g") is None


def test_a_union_keeps_the_nulls_of_any_held_frame(spark):
    """The first frame's column may be declared non-nullable; a later one's nulls stay."""
    first = cut(spark.range(2).selectExpr("id", "1L AS c"))[0]
    assert not first.schema["c"].nullable
    later = cut(spark.createDataFrame([(5, None)], "id bigint, c bigint"))[0]
    both = driver_rows.union([first, later])
    assert both.is_held and both.schema["c"].nullable
    assert sorted(tuple(r) for r in both.frame().where("c IS NULL").collect()) == [(5, None)]


def test_spark_reads_every_row_of_a_held_table_with_empty_batches(spark):
    """PySpark's createDataFrame of an Arrow table whose first batches are empty gives no
    rows (PySpark 4.1); held frames drop empty batches before Spark reads them."""
    rows = pa.table({"x": pa.array([2, 3], pa.int64()), "_mult": pa.array([1, -1], pa.int64())})
    empty = rows.slice(0, 0)
    chunked = pa.concat_tables([empty, empty, rows])
    schema = spark.createDataFrame(rows).schema
    assert [b.num_rows for b in chunked.to_batches()] == [0, 0, 2]
    held = Rows.of_arrow(spark, chunked, schema).frame()
    assert sorted(tuple(r) for r in held.collect()) == [(2, 1), (3, -1)]
    assert held.groupBy().sum("_mult").collect()[0][0] == 0
    assert Rows.of_arrow(spark, pa.concat_tables([empty, empty]), schema).frame().count() == 0


join_rows = st.lists(st.tuples(st.none() | st.integers(-2, 2),
                               st.none() | st.sampled_from([0.0, -0.0, 1.5, math.nan]),
                               st.integers(-2, 2)), max_size=8)


@settings(max_examples=15, deadline=None)
@given(parts=st.lists(join_rows, min_size=1, max_size=3))
def test_netting_held_join_inputs_keeps_every_rows_multiplicity(spark, parts):
    """Rows that cancel go; what is left has, per distinct row, the summed multiplicity
    Spark's grouping gives (identical values only merge: -0.0 and NaN rows may stay
    apart, never merge wrongly)."""
    schema = "a int, x double, _mult bigint"
    arrow = pa.schema([("a", pa.int32()), ("x", pa.float64()), ("_mult", pa.int64())])
    held = [Rows.of_arrow(spark, pa.Table.from_pylist(
        [dict(zip(("a", "x", "_mult"), r, strict=True)) for r in p], schema=arrow),
        spark.createDataFrame([], schema).schema) for p in parts]
    got = driver_rows.netted(held)
    assert got is not None and got.is_held
    assert all(r["_mult"] != 0 for r in got.frame().collect())

    def totals(df):  # per row as Spark groups it
        return {(r.a, r.x if r.x is None or r.x == r.x else "nan"): r.m for r in
                df.groupBy("a", "x").agg(F.sum("_mult").alias("m")).where("m <> 0").collect()}
    union = held[0].frame()
    for h in held[1:]:
        union = union.unionByName(h.frame())
    assert totals(got.frame()) == totals(union)


ordered_rows = st.lists(st.tuples(
    st.none() | st.integers(-2, 2),
    st.none() | st.sampled_from([0.0, -0.0, 1.5, -1.0, math.inf, math.nan])), max_size=12)


@settings(max_examples=25, deadline=None)
@given(data=ordered_rows, by=st.permutations(["i", "f"]),
       ascending=st.tuples(st.booleans(), st.booleans()), limit=st.none() | st.integers(0, 5))
def test_ordering_held_rows_matches_sparks_order_by(spark, data, by, ascending, limit):
    """``driver_rows.ordered`` orders as Spark's ``ORDER BY`` does: ascending NULLs first,
    descending NULLs last, NaN above every number, -0.0 equal to 0.0; then ``LIMIT``."""
    table = pa.table({"i": [i for i, _ in data], "f": [f for _, f in data]},
                     schema=pa.schema([("i", pa.int64()), ("f", pa.float64())]))
    order_by = list(zip(by, ascending, strict=True))
    df = spark.createDataFrame(table.to_pylist(), "i bigint, f double").orderBy(*[
        F.col(c).asc_nulls_first() if asc else F.col(c).desc_nulls_last()
        for c, asc in order_by])
    if limit is not None:
        df = df.limit(limit)

    def keys(rows: list[dict]) -> list[tuple]:  # NaN as a string: NaN != NaN in Python
        return [tuple("nan" if isinstance(r[c], float) and math.isnan(r[c]) else r[c]
                      for c in by) for r in rows]

    got = driver_rows.ordered(table, order_by, limit).to_pylist()
    assert keys(got) == keys([r.asDict() for r in df.collect()])


def test_driver_rows_zero_never_tries_the_driver(spark):
    """``spark.strata.query.driverRows`` 0 means always Spark: a cut checkpoints its rows
    on the executors in one job (a try in the driver first would compute them twice),
    and an epoch's tables append through Spark whatever its size."""
    df = spark.range(50).selectExpr("id AS k", "id * 2 AS v").where("k % 3 = 0")
    with session_confs(spark, {QUERY_DRIVER_ROWS.name: "0"}):
        assert not dispatch.driver_may_hold(spark, 1)
        with counting_jobs(spark) as jobs:
            kept, rows = cut(df)
        assert rows is None and not kept.is_held
        assert jobs == [1]
        assert sorted(r.k for r in kept.frame().collect()) == list(range(0, 50, 3))
    with session_confs(spark, {QUERY_DRIVER_ROWS.name: "100"}):
        assert dispatch.driver_may_hold(spark, 100)
        assert not dispatch.driver_may_hold(spark, 101)
