"""The driver's Arrow evaluation of scalar expressions agrees with Spark's: random
expressions over random rows give Spark's values and types, or are refused
(``Unsupported``) and left to Spark. Spark runs each expression over the same rows."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.queries.arrow.arrow_expr import Unsupported, evaluate, evaluate_all

ARROW = pa.schema([("a", pa.int32()), ("b", pa.int64()), ("t", pa.int8()),
                   ("x", pa.float64()), ("s", pa.string()), ("f", pa.bool_()),
                   ("g", pa.struct([("k", pa.int32())]))])

ints = st.none() | st.integers(-2**31, 2**31 - 1) | st.sampled_from([0, 1, -1, 2**31 - 1])
longs = st.none() | st.integers(-2**63, 2**63 - 1) | st.integers(-5, 5)
doubles = st.none() | st.floats(allow_nan=False, width=64) | st.sampled_from([0.0, -0.0, 1.5])
row = st.fixed_dictionaries({
    "a": ints, "b": longs, "t": st.none() | st.integers(-128, 127),
    "x": doubles | st.just(math.nan), "s": st.none() | st.sampled_from(["", "a", "b", "é"]),
    "f": st.none() | st.booleans(),
    "g": st.fixed_dictionaries({"k": st.none() | st.integers(-3, 3)})})

leaves = st.sampled_from(["a", "b", "t", "x", "s", "f", "g.k", "`g`.`k`", "1", "0", "-7",
                          "2147483647", "9000000000", "NULL", "TRUE", "'a'",
                          "CAST(2.5 AS DOUBLE)", "CAST(0.15 AS DOUBLE)", "CAST(1e-3 AS DOUBLE)",
                          "CAST(NULL AS BIGINT)"])


def compound(inner):
    binary = st.sampled_from(["+", "-", "*", "/", "%", "=", "<>", "<", "<=", ">", ">=", "<=>",
                              "AND", "OR"])
    return (st.tuples(inner, binary, inner).map(lambda p: f"({p[0]} {p[1]} {p[2]})")
            | inner.map(lambda x: f"(- {x})") | inner.map(lambda x: f"(NOT {x})")
            | inner.map(lambda x: f"({x} IS NULL)") | inner.map(lambda x: f"({x} IS NOT NULL)")
            | st.tuples(inner, st.sampled_from(["int", "bigint", "double", "boolean",
                                                "tinyint"]))
            .map(lambda p: f"CAST({p[0]} AS {p[1]})")
            | st.tuples(st.sampled_from(["coalesce", "greatest", "least"]),
                        st.lists(inner, min_size=1, max_size=3))
            .map(lambda p: f"{p[0]}({', '.join(p[1])})")
            | st.tuples(inner, inner, inner).map(
                lambda p: f"CASE WHEN {p[0]} THEN {p[1]} ELSE {p[2]} END")
            | st.tuples(inner, inner, inner).map(lambda p: f"IF({p[0]}, {p[1]}, {p[2]})"))


expressions = st.recursive(leaves, compound, max_leaves=6)


def table_of(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ARROW)


def spark_value(spark, table: pa.Table, text: str):
    """Spark's values and type of ``text`` over ``table``; the error if it fails."""
    try:
        got = spark.createDataFrame(table).selectExpr(f"{text} AS v",
                                                      f"typeof({text}) AS ty").collect()
    except Exception as e:  # noqa: BLE001  (any Spark error is the expected outcome)
        return e
    return [r.v for r in got], (got[0].ty if got else None)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b and type(a) is type(b)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=6), text=expressions)
def test_random_expressions_match_spark(spark, rows, text):
    table = table_of(rows)
    try:
        values, st_type = evaluate(text, table)
    except Unsupported:
        return  # left to Spark: nothing to compare
    want = spark_value(spark, table, text)
    assert not isinstance(want, Exception), f"Spark fails on {text} where Arrow gave " \
        f"{values.to_pylist()}: {str(want).splitlines()[0]}"
    want_values, want_type = want
    if st_type != "void":
        assert st_type == want_type, text
    got = values.to_pylist()
    assert all(same(g, w) for g, w in zip(got, want_values, strict=True)), \
        (text, got, want_values)


ROWS = [{"a": 3, "b": 10, "t": 1, "x": 2.5, "s": "a", "f": True, "g": {"k": 1}},
        {"a": None, "b": -4, "t": None, "x": None, "s": None, "f": None, "g": {"k": None}},
        {"a": -2, "b": 5, "t": 127, "x": -0.0, "s": "b", "f": False, "g": {"k": 3}}]

SUPPORTED = [
    "a + b", "a * 2 - t", "a / b", "x / 4", "(x - g.k) * (x - g.k)", "- a", "a < x",
    "s = 'a'", "a <=> NULL", "f AND a > 0", "NOT f OR x IS NULL", "coalesce(a, b, 0)",
    "greatest(a, t, NULL)", "least(x, 1)", "CASE WHEN a > 0 THEN x ELSE 0 END",
    "IF(f, a, b)", "CAST(a AS BIGINT) + 9000000000", "CAST(t AS DOUBLE) * x",
    "CAST(a AS BOOLEAN)", "`g`.`k` + 1", "a % 2", "b % -3", "x % 2", "t % a = 0",
    "CAST(0.15 AS DOUBLE) + CAST(0.85 AS DOUBLE) * x"]


@pytest.mark.parametrize("text", SUPPORTED)
def test_the_subset_steps_use_is_evaluated_and_matches_spark(spark, text):
    table = table_of(ROWS)
    values, st_type = evaluate(text, table)
    want_values, want_type = spark_value(spark, table, text)
    assert st_type == want_type
    assert all(same(g, w) for g, w in zip(values.to_pylist(), want_values, strict=True))


@pytest.mark.parametrize("text", [
    "t + CAST(127 AS TINYINT)",  # tinyint overflow: Spark's ANSI error
    "b * 9000000000",  # bigint overflow
    "x / (b - b)",  # a zero divisor
    "CAST(b AS INT)",  # 2**40 does not fit an int
    "a % (b - b)",  # a zero divisor of a remainder
    "upper(s)", "CAST(x AS INT)", "CAST(1.5 AS FLOAT) + a", "1.5 + a",
    "x = CAST('NaN' AS DOUBLE)"])
def test_errors_and_the_rest_are_left_to_spark(spark, text):
    table = table_of([*ROWS, {"a": 1, "b": 2**40, "t": 100, "x": math.nan, "s": "c",
                              "f": True, "g": {"k": 0}}])
    with pytest.raises(Unsupported):
        evaluate(text, table)


def test_outputs_are_typed_as_spark_types_them():
    got = evaluate_all({"n": "a + t", "d": "a / 2", "ok": "f OR a > 1"}, table_of(ROWS))
    assert got.schema == pa.schema([("n", pa.int32()), ("d", pa.float64()),
                                    ("ok", pa.bool_())])
    assert got.column("n").to_pylist() == [4, None, 125]
    with pytest.raises(Unsupported):
        evaluate_all({"nothing": "NULL"}, table_of(ROWS))
