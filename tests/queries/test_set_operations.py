"""UNION [ALL], INTERSECT [ALL] and EXCEPT [ALL]: the SQL front end's plans, the Python API, the
output changelog and the refusals. (Their answers under random increments with deletes
are checked against DuckDB with the other shapes in test_shapes.py.)"""

from __future__ import annotations

import pytest

from strata import Dataflow
from strata.controller.controller import Controller
from strata.queries import add_query, derive, parse_sql, table
from strata.queries.plan.errors import QueryError
from tests.helpers import epochs_in
from tests.queries.oracle import check_history, duckdb_answer, net_changes, normalized

FLOWS = {"R": {"x": "bigint", "y": "bigint", "_mult": "bigint"},
         "P": {"x": "int", "y": "double"},
         "D": {"id": "bigint", "name": "string", "grp": "string", "_mult": "bigint"}}


def test_a_union_keeps_no_state_and_widens_by_position():
    inc = derive(parse_sql("SELECT x, y AS v FROM R UNION ALL SELECT x, y FROM P "
                           "ORDER BY v DESC LIMIT 2", FLOWS))
    assert inc.query.columns == {"x": "bigint", "v": "double"}  # named by the first branch
    assert inc.query.order_by == (("v", False),) and inc.query.limit == 2
    assert not inc.groups and not inc.joins
    text = inc.explain()
    assert "union all of 2 inputs" in text and "no state" in text
    assert "CAST(`x` AS BIGINT)" in text and "CAST(`y` AS DOUBLE)" in text


@pytest.mark.parametrize("sql, having", [
    ("SELECT x FROM R UNION SELECT x FROM P", None),
    ("SELECT x FROM R INTERSECT SELECT id FROM D", "_a0 > 0 AND _a1 > 0"),
    ("SELECT x FROM R EXCEPT SELECT id FROM D", "_a0 > 0 AND _a1 = 0"),
])
def test_distinct_set_operations_are_group_bys_over_a_union(sql, having):
    root = derive(parse_sql(sql, FLOWS)).root
    assert str(root.child) == "union all of 2 inputs"
    assert [n for n, _ in root.keys] == ["x"] and root.key == ("x",)
    assert (root.having.sql() if root.having is not None else None) == having


@pytest.mark.parametrize("sql, message", [
    ("SELECT x FROM R UNION ALL SELECT x, y FROM P", "select 1 and 2 columns"),
    ("SELECT x FROM R UNION ALL SELECT name FROM D", "is bigint in one branch and string"),
    ("SELECT x FROM R UNION ALL (SELECT x FROM P ORDER BY x LIMIT 1)",
     "inside a branch of UNION"),
    ("SELECT x FROM R UNION ALL SELECT x FROM P ORDER BY y", "order by an output column"),
])
def test_set_operations_refused_say_why(sql, message):
    with pytest.raises(QueryError, match=message):
        parse_sql(sql, FLOWS)


R_ROWS = [{"x": i % 5, "y": i, "_mult": 1} for i in range(12)]
P_ROWS = [{"x": i % 7, "y": float(i % 3)} for i in range(10)]
D_ROWS = [{"id": i, "name": f"n{i}", "grp": "ab"[i % 2], "_mult": 1} for i in (1, 3, 8)]


def test_the_python_api_builds_set_operations(spark, tmp_path):
    """union/intersect/except_ give the SQL's answers, and DuckDB's."""
    built = {
        "api_union": table("R").where("y > 3").select_("x", "y").union(
            table("P").select_("x", "y")).group_by("x").agg(n="count(*)", s="sum(y)"),
        "api_union_distinct": table("R").select_("x").union(table("P").select_("x"),
                                                            distinct=True),
        "api_intersect": table("R").select_("x").intersect(table("D").select_("id")),
        "api_except": table("P").select_("x").except_(table("R").select_("x")),
        "api_except_all": table("P").select_("x").except_(table("R").select_("x"),
                                                          distinct=False),
    }
    sql = {
        "api_union": "SELECT x, count(*) AS n, sum(y) AS s FROM (SELECT x, y FROM R WHERE "
                     "y > 3 UNION ALL SELECT x, y FROM P) u GROUP BY x",
        "api_union_distinct": "SELECT x FROM R UNION SELECT x FROM P",
        "api_intersect": "SELECT x FROM R INTERSECT SELECT id FROM D",
        "api_except": "SELECT x FROM P EXCEPT SELECT x FROM R",
        "api_except_all": "SELECT x FROM P EXCEPT ALL SELECT x FROM R",
    }
    df = Dataflow("setops")
    for name, ddl in FLOWS.items():
        df.source(name, ", ".join(f"{c} {t}" for c, t in ddl.items()))
    for name, q in built.items():
        add_query(df, name, q)
        add_query(df, name + "_sql", sql[name])
    seen = {"R": R_ROWS, "P": P_ROWS, "D": D_ROWS}
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        for flow, rows in seen.items():
            c.ingest(flow, rows)
        c.run()
        for name in built:
            got = normalized(tuple(r.values()) for r in c.answer(name).to_pylist())
            same = normalized(tuple(r.values()) for r in c.answer(name + "_sql").to_pylist())
            assert got == same == duckdb_answer(sql[name], seen), name
            assert got, name  # the data makes every answer non-empty


def test_an_except_retracts_a_row_once_the_right_side_has_it(spark, tmp_path):
    """EXCEPT is not monotone: a row of the right side removes an answer row, deleting it
    brings the row back; the output flow carries both changes."""
    df = Dataflow("except")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("P", "x int, y double")
    add_query(df, "only_p", "SELECT x FROM P EXCEPT SELECT x FROM R")
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        c.ingest("P", [{"x": 1, "y": 0.0}, {"x": 2, "y": 0.0}])
        c.run()
        assert sorted(r["x"] for r in c.answer("only_p").to_pylist()) == [1, 2]
        c.ingest("R", [{"x": 2, "y": 5, "_mult": 1}])
        c.run()
        assert [r["x"] for r in c.answer("only_p").to_pylist()] == [1]
        c.ingest("R", [{"x": 2, "y": 5, "_mult": -1}])
        c.run()
        assert sorted(r["x"] for r in c.answer("only_p").to_pylist()) == [1, 2]
        changes = c.read_flow("only_p_changes").to_pylist()
    assert [(r["x"], r["_mult"]) for r in changes if r["x"] == 2] == [(2, 1), (2, -1), (2, 1)]
    assert net_changes(changes) == [(1,), (2,)]


def test_all_variants_are_copies_counted_on_both_sides():
    """INTERSECT ALL and EXCEPT ALL group the tagged union, count each side's copies and
    explode a row once per copy it keeps: least(l, r), or l - r."""
    for sql, copies in [("SELECT x FROM R INTERSECT ALL SELECT x FROM P", "LEAST(_a0, _a1)"),
                        ("SELECT x FROM R EXCEPT ALL SELECT x FROM P", "_a0 - _a1")]:
        root = derive(parse_sql(sql, FLOWS)).root
        assert list(root.columns) == ["x"]
        explode = root.child
        assert str(explode) == "explode SEQUENCE(1, _setop_copies) as _setop_copy"
        group = explode.child
        assert dict(group.outputs)["_setop_copies"].sql() == copies
        assert group.having.sql() == f"{copies} > 0"


@pytest.mark.parametrize("where", ["tasks", "driver"])
def test_all_variants_follow_deletes_on_both_sides(spark, tmp_path, where):
    """Copies come and go as either side gains or loses them; every epoch's answer is
    DuckDB's."""
    queries = {"intersect_all": "SELECT x FROM R INTERSECT ALL SELECT x FROM P",
               "except_all": "SELECT x FROM R EXCEPT ALL SELECT x FROM P",
               "except_all_rows": "SELECT x, y FROM R EXCEPT ALL SELECT id, id AS y FROM D"}
    df = Dataflow("all")
    for name, ddl in FLOWS.items():
        df.source(name, ", ".join(f"{c} {t}" for c, t in ddl.items()))
    for name, sql in queries.items():
        add_query(df, name, sql)
    r1 = [{"x": x, "y": x, "_mult": 1} for x in (1, 1, 1, 2, 2, 3)]
    increments = [
        {"R": r1, "P": [{"x": x, "y": 0.0} for x in (1, 2, 2, 2, 4)],
         "D": [{"id": 1, "name": "a", "grp": "a", "_mult": 1}]},
        {"R": [{"x": 1, "y": 1, "_mult": -1}, {"x": 2, "y": 2, "_mult": -1},
               {"x": 4, "y": 4, "_mult": 1}], "P": [{"x": 1, "y": 1.0}], "D": []},
        {"R": [{"x": 1, "y": 1, "_mult": -1}, {"x": 3, "y": 3, "_mult": 1}],
         "P": [{"x": 3, "y": 2.0}],
         "D": [{"id": 1, "name": "a", "grp": "a", "_mult": -1},
               {"id": 3, "name": "c", "grp": "b", "_mult": 1}]},
    ]
    with epochs_in(spark, where):
        check_history(spark, tmp_path, df, increments, queries)
    everything = {f: [r for inc in increments for r in inc[f]] for f in FLOWS}
    # the data keeps copies on both sides: R ends with 1, 2, 3×2, 4; P with 1×2, 2×3, 3, 4
    assert duckdb_answer(queries["intersect_all"], everything) == [(1,), (2,), (3,), (4,)]
    assert duckdb_answer(queries["except_all"], everything) == [(3,)]
