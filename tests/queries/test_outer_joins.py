"""LEFT and RIGHT [OUTER] joins: plans, refusals, and the padded rows' changes as matches
come and go. (Their answers under random increments with deletes are checked against
DuckDB with the other shapes in test_shapes.py.)"""

from __future__ import annotations

import pytest

from strata import Dataflow
from strata.controller.controller import Controller
from strata.queries import add_query, derive, parse_sql, table
from strata.queries.plan.errors import NotIncrementalError, QueryError
from tests.helpers import epoch_jobs, epochs_in
from tests.queries.oracle import duckdb_answer, net_changes, normalized

FLOWS = {"R": {"x": "bigint", "y": "bigint", "_mult": "bigint"},
         "P": {"x": "bigint", "y": "bigint"},
         "D": {"id": "bigint", "name": "string", "_mult": "bigint"}}
KEYS = {"D": ["id"]}


def test_filters_above_a_left_join_stay_above_it_on_the_padded_side():
    """``WHERE D.id IS NULL`` (an anti-join) must see the padding, so it is not pushed
    into D; a filter on the kept side is pushed below the join as usual."""
    root = derive(parse_sql("SELECT R.x FROM R LEFT JOIN D ON R.x = D.id "
                            "WHERE D.id IS NULL AND R.y > 1", FLOWS, KEYS)).root
    assert "IS NULL" in str(root)  # still above the join
    join = root.child
    # D is not filtered, only narrowed to the column used above the join
    assert join.how == "left" and "R__y` > 1" in str(join.left) and str(join.right) == \
        "map select D__id" and str(join.right.child) == "scan D as D"


def test_a_right_join_is_a_left_join_with_its_columns_in_order():
    inc = derive(parse_sql("SELECT * FROM D RIGHT JOIN R ON R.x = D.id", FLOWS, KEYS))
    assert list(inc.root.columns) == ["id", "name", "x", "y"]
    assert "left join (one-to-many) on R__x = D__id" in inc.explain()
    assert "NULL-padded" in inc.explain()


@pytest.mark.parametrize("sql, error, message", [
    ("SELECT R.x FROM R FULL JOIN D ON R.x = D.id AND D.name = 'a'", QueryError,
     "ON may only equate"),
    ("SELECT R.x FROM R LEFT JOIN D ON R.x = D.id AND R.y > 1", QueryError,
     "ON 'R.y > 1' reads the columns of the side whose every row is kept"),
    ("SELECT R.x FROM R LEFT ANTI JOIN D ON R.x = D.id", QueryError, "LEFT JOIN … WHERE"),
    ("SELECT R.x FROM R CROSS JOIN D", QueryError, "CROSS JOIN is not supported"),
    ("SELECT R.x FROM R LEFT JOIN P ON R.x = P.x", NotIncrementalError, "many-to-many"),
])
def test_outer_joins_refused_say_why(sql, error, message):
    with pytest.raises(error, match=message):
        derive(parse_sql(sql, FLOWS, KEYS))


def test_padded_rows_are_taken_back_when_a_match_arrives_and_return_when_it_goes(
        spark, tmp_path):
    df = Dataflow("outer")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("D", "id bigint, name string, _mult bigint")
    add_query(df, "named", "SELECT R.y, D.name FROM R LEFT JOIN D ON R.x = D.id",
              keys=KEYS)
    add_query(df, "orphans", "SELECT R.y FROM R LEFT JOIN D ON R.x = D.id "
                             "WHERE D.id IS NULL", keys=KEYS)
    add_query(df, "orphans_api", table("R").join(table("D", key="id"), on=("x", "id"),
                                                 how="left").where("D.id IS NULL")
              .select_("y"))

    def answers(c):
        orphans = sorted(r["y"] for r in c.answer("orphans").to_pylist())
        assert sorted(r["y"] for r in c.answer("orphans_api").to_pylist()) == orphans
        return (sorted((r["y"], r["name"]) for r in c.answer("named").to_pylist()), orphans)

    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        c.ingest("R", [{"x": 1, "y": 10, "_mult": 1}, {"x": 1, "y": 11, "_mult": 1},
                       {"x": 2, "y": 20, "_mult": 1}, {"x": None, "y": 99, "_mult": 1}])
        c.run()
        assert answers(c) == ([(10, None), (11, None), (20, None), (99, None)],
                              [10, 11, 20, 99])
        c.ingest("D", [{"id": 1, "name": "one", "_mult": 1}])
        c.run()  # both rows of key 1 lose their padding
        assert answers(c) == ([(10, "one"), (11, "one"), (20, None), (99, None)], [20, 99])
        c.ingest("D", [{"id": 1, "name": "one", "_mult": -1},
                       {"id": 1, "name": "uno", "_mult": 1}])
        c.ingest("R", [{"x": 1, "y": 12, "_mult": 1}])
        c.run()  # a renamed match: no padding comes back
        assert answers(c) == ([(10, "uno"), (11, "uno"), (12, "uno"), (20, None),
                               (99, None)], [20, 99])
        c.ingest("D", [{"id": 1, "name": "uno", "_mult": -1}])
        c.ingest("R", [{"x": 2, "y": 20, "_mult": -1}])
        c.run()  # the match is gone: the padding returns; a deleted orphan leaves
        assert answers(c) == ([(10, None), (11, None), (12, None), (99, None)],
                              [10, 11, 12, 99])
        changes = c.read_flow("named_changes").to_pylist()
        final = c.answer("named").to_pylist()
    assert net_changes(changes) == sorted(((r["y"], r["name"]) for r in final), key=repr)


def test_small_left_join_epochs_run_in_the_driver_without_a_spark_job(spark, tmp_path):
    """After the first epoch (whose tables Spark writes), a small left-join epoch runs
    on Arrow in the driver, padding included; the answer equals DuckDB's each time."""
    df = Dataflow("outer_driver")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("D", "id bigint, name string, grp string, _mult bigint")
    sql = ("SELECT D.grp, count(*) AS c, count(D.id) AS matched, sum(R.y) AS s "
           "FROM R LEFT JOIN D ON R.x = D.id GROUP BY D.grp")
    add_query(df, "q", sql, keys=KEYS)
    seen: dict[str, list[dict]] = {"R": [], "D": [], "P": []}  # every record, deletes too
    jobs = []
    with epochs_in(spark, "driver"), Controller(str(tmp_path), df, spark=spark,
                                                num_partitions=1) as c:
        for e in range(4):
            r = [{"x": (i + e) % 6, "y": i * e, "_mult": 1} for i in range(8)]
            if e:  # an earlier row of R leaves
                r.append({**seen["R"][[0, 9, 18][e - 1]], "_mult": -1})
            d = [{"id": e, "name": f"n{e}", "grp": "ab"[e % 2], "_mult": 1}]
            if e >= 2:  # the dimension row of two epochs ago leaves
                d.append({"id": e - 2, "name": f"n{e - 2}", "grp": "ab"[e % 2], "_mult": -1})
            jobs.append(epoch_jobs(spark, c, {"R": r, "D": d}, seen))
            got = normalized(tuple(row.values()) for row in c.answer("q").to_pylist())
            assert got == duckdb_answer(sql, seen), e
    assert jobs[1:] == [0, 0, 0], jobs


def test_a_full_join_equals_duckdb_as_both_sides_come_and_go(spark, tmp_path):
    """FULL OUTER JOIN: the left join UNION ALL the right rows without a match; checked
    against DuckDB after every epoch, in the driver and as Spark jobs."""
    df = Dataflow("full")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("D", "id bigint, name string, grp string, _mult bigint")
    sql = "SELECT R.x, R.y, D.id, D.name FROM R FULL OUTER JOIN D ON R.x = D.id"
    grouped = ("SELECT coalesce(D.grp, '-') AS g, count(*) AS n, count(R.x) AS rows_r "
               "FROM R FULL JOIN D ON R.x = D.id GROUP BY coalesce(D.grp, '-')")
    add_query(df, "full", sql, keys=KEYS)
    add_query(df, "full_grouped", grouped, keys=KEYS)
    seen: dict[str, list[dict]] = {"R": [], "D": [], "P": []}
    steps = [
        ([(1, 10, 1), (2, 20, 1), (None, 30, 1)], [(2, "b", 1), (5, "e", 1)]),
        ([(5, 50, 1)], [(2, "b", -1), (7, "g", 1)]),
        ([(1, 10, -1), (7, 70, 1)], [(1, "a", 1)]),
        ([(5, 50, -1), (None, 30, -1)], [(7, "g", -1), (2, "b", 1)]),
    ]
    for where in ("driver", "tasks"):
        seen = {"R": [], "D": [], "P": []}
        with epochs_in(spark, where), Controller(str(tmp_path / where), df, spark=spark,
                                                 num_partitions=2) as c:
            for r, d in steps:
                rows_r = [{"x": x, "y": y, "_mult": m} for x, y, m in r]
                rows_d = [{"id": i, "name": n, "grp": "ab"[i % 2], "_mult": m}
                          for i, n, m in d]
                c.ingest("R", rows_r)
                c.ingest("D", rows_d)
                seen["R"] += rows_r
                seen["D"] += rows_d
                c.run()
                for name, q in (("full", sql), ("full_grouped", grouped)):
                    got = normalized(tuple(v.values()) for v in c.answer(name).to_pylist())
                    assert got == duckdb_answer(q, seen), (where, name, len(seen["R"]))
