"""The types the SQL front end gives function calls equal the types Spark gives them (the
answer's schema is declared before Spark runs the query, so a wrong guess would be a
wrong flow schema)."""

from __future__ import annotations

import pytest
import sqlglot

from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import type_of

COLUMNS = {"x": "bigint", "i": "int", "y": "double", "s": "string", "t": "timestamp",
           "d": "date"}
ROW = ("SELECT * FROM VALUES (7L, 3, 2.5D, 'https://a.example.org/p/q?x=1', "
       "TIMESTAMP'2026-11-27 10:11:12', DATE'2026-11-27') AS r(x, i, y, s, t, d)")
CALLS = [
    # strings
    "lower(s)", "upper(s)", "trim(s)", "ltrim(s)", "concat(s, 'a')", "concat_ws('-', s, s)",
    "substr(s, 2, 3)", "substring(s, 2)", "lpad(s, 40, '0')", "replace(s, 'a', 'b')",
    "regexp_extract(s, 'a(.)', 1)", "regexp_replace(s, 'a', 'b')", "parse_url(s, 'HOST')",
    "substring_index(s, '/', 3)", "md5(s)", "sha1(s)", "sha2(s, 256)", "initcap(s)",
    "left(s, 3)", "right(s, 2)", "translate(s, 'a', 'b')", "reverse(s)", "repeat(s, 2)",
    "split_part(s, '/', 3)", "date_format(t, 'yyyy-MM')", "from_unixtime(x)",
    # arrays from split, and their elements
    "split(s, '/')", "split(s, '/')[2]", "element_at(split(s, '/'), 3)",
    "upper(split(s, '/')[2])",
    # numbers
    "length(s)", "instr(s, 'a')", "abs(x)", "abs(y)", "round(y, 1)", "floor(y)", "ceil(y)",
    "sqrt(y)", "ln(y)", "log10(y)", "exp(y)", "pow(y, 2)", "greatest(x, i)", "least(i, 2)",
    "coalesce(i, 0)", "nvl(x, 1)", "nullif(x, 1)", "sign(y)", "signum(x)", "pmod(x, 3)",
    "hash(s)", "size(split(s, '/'))", "x div 2", "x % 3", "i + 1", "y / 2",
    # dates and times
    "year(t)", "month(d)", "day(t)", "dayofweek(t)", "hour(t)", "minute(t)", "second(t)",
    "quarter(d)", "weekofyear(t)", "dayofyear(d)", "date_trunc('HOUR', t)", "trunc(d, 'MM')",
    "to_date(t)", "date_add(d, 1)", "date_sub(d, 1)", "datediff(d, to_date(t))",
    "unix_timestamp(t)", "last_day(d)", "add_months(d, 1)", "months_between(t, d)",
    "timestamp_seconds(x)", "make_date(2026, 1, i)", "unix_seconds(t)",
    # predicates
    "startswith(s, 'h')", "endswith(s, '1')", "contains(s, 'a')", "s rlike 'a.*'",
    "s like 'h%'", "x between 1 and 9", "i in (1, 3)", "s is null",
]


@pytest.fixture(scope="module")
def spark_types(spark):
    row = spark.sql(ROW)
    return {c: row.selectExpr(c).schema.fields[0].dataType.simpleString() for c in CALLS}


@pytest.mark.parametrize("call", CALLS)
def test_a_function_is_typed_as_spark_types_it(spark_types, call):
    assert type_of(sqlglot.parse_one(call, read="spark"), COLUMNS) == spark_types[call]


@pytest.mark.parametrize("call", ["current_date()", "rand()", "uuid()", "foo(s)"])
def test_an_unknown_or_nondeterministic_function_is_refused(call):
    with pytest.raises(QueryError, match="is not supported"):
        type_of(sqlglot.parse_one(call, read="spark"), COLUMNS)
