"""The CTE pass: SQL in, SQL out (``WITH`` inlined as subqueries); and what the SQL front
end refuses, with the reason it gives."""

from __future__ import annotations

import pytest
import sqlglot

from strata.queries.front.ctes import inline_ctes
from strata.queries.front.sql import parse_sql, tables_read
from strata.queries.plan.errors import QueryError


def inlined(sql: str) -> str:
    return inline_ctes(sqlglot.parse_one(sql, read="spark")).sql(dialect="spark")


@pytest.mark.parametrize(("sql", "expected"), [
    ("WITH t AS (SELECT a FROM r WHERE a > 1) SELECT a FROM t",
     "SELECT a FROM (SELECT a FROM r WHERE a > 1) AS t"),
    # a reference's own alias is kept; a CTE reads an earlier one
    ("WITH t AS (SELECT a FROM r), u AS (SELECT a FROM t) SELECT x.a FROM u AS x",
     "SELECT x.a FROM (SELECT a FROM (SELECT a FROM r) AS t) AS x"),
    # a CTE read twice becomes two subqueries
    ("WITH t AS (SELECT a FROM r) SELECT p.a FROM t AS p JOIN t AS q ON p.a = q.a",
     "SELECT p.a FROM (SELECT a FROM r) AS p JOIN (SELECT a FROM r) AS q ON p.a = q.a"),
    # a WITH inside a subquery, and a CTE name that shadows a flow
    ("SELECT a FROM (WITH r AS (SELECT a FROM s) SELECT a FROM r) AS z",
     "SELECT a FROM (SELECT a FROM (SELECT a FROM s) AS r) AS z"),
    # a table qualified by a database is not a CTE
    ("WITH r AS (SELECT a FROM s) SELECT a FROM db.r",
     "SELECT a FROM db.r"),
    ("SELECT a FROM r", "SELECT a FROM r"),
])
def test_ctes_are_inlined_as_subqueries(sql, expected):
    assert inlined(sql) == expected


def test_the_flows_a_query_reads_are_its_tables_without_ctes():
    assert tables_read("WITH t AS (SELECT a FROM r), u AS (SELECT a FROM s) "
                       "SELECT t.a FROM t JOIN u ON t.a = u.a") == ["r", "s"]


@pytest.mark.parametrize(("sql", "message"), [
    ("WITH RECURSIVE t AS (SELECT 1 AS a) SELECT a FROM t", "WITH RECURSIVE is not supported"),
    ("WITH t AS (SELECT a FROM r), t AS (SELECT a FROM s) SELECT a FROM t", "names 't' twice"),
    ("SELEC a FROM r", "cannot parse the query"),
    ("SELEC nonsense", "is not a SELECT"),
    ("DELETE FROM r", "only SELECT queries are supported, not DELETE"),
    ("SELECT a FROM r WHERE a NOT IN (SELECT a FROM s)", "NOT IN, EXISTS"),
    ("SELECT a FROM r WHERE EXISTS (SELECT a FROM s WHERE s.a = r.a)", "NOT IN, EXISTS"),
    ("SELECT a, count(*) AS c FROM r GROUP BY a HAVING nope > 1", "unknown column 'nope'"),
    ("SELECT current_date() AS d, count(*) AS n FROM r GROUP BY 1", "CURRENT_DATE is not"),
    ("SELECT approx_count_distinct(a) AS n FROM r", "aggregate APPROX_COUNT_DISTINCT"),
])
def test_what_is_not_a_query_is_refused_with_a_reason(sql, message):
    with pytest.raises(QueryError, match=message):
        parse_sql(sql, {"r": {"a": "bigint"}, "s": {"a": "bigint"}})
