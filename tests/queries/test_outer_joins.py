"""LEFT and RIGHT [OUTER] joins: plans, refusals, and the padded rows' changes as matches
come and go. (Their answers under random increments with deletes are checked against
DuckDB with the other shapes in test_shapes.py.)"""

from __future__ import annotations

import pytest

from strata import Dataflow
from strata.controller.controller import Controller
from strata.queries import add_query, derive, parse_sql, table
from strata.queries.errors import NotIncrementalError, QueryError
from tests.queries.oracle import net_changes

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
    assert join.how == "left" and "R__y` > 1" in str(join.left) and str(join.right) == \
        "scan D as D"


def test_a_right_join_is_a_left_join_with_its_columns_in_order():
    inc = derive(parse_sql("SELECT * FROM D RIGHT JOIN R ON R.x = D.id", FLOWS, KEYS))
    assert list(inc.root.columns) == ["id", "name", "x", "y"]
    assert "left join (one-to-many) on R__x = D__id" in inc.explain()
    assert "NULL-padded" in inc.explain()


@pytest.mark.parametrize("sql, error, message", [
    ("SELECT R.x FROM R FULL OUTER JOIN D ON R.x = D.id", QueryError, "FULL OUTER JOIN"),
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
