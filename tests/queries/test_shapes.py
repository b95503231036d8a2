"""Every supported query shape, maintained over random increments with deletes, agrees
with DuckDB recomputing the same SQL over all data so far after every increment."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from strata import Dataflow
from strata.controller.controller import Controller
from strata.model.errors import EpochError, StrataError, TranslateError
from strata.queries import UserAggregate, add_query, table
from strata.queries.programs.vector_route import VectorQueryProgram
from tests.helpers import epochs_in
from tests.queries.oracle import check_history as run_history
from tests.queries.oracle import net_changes, normalized

R_SCHEMA = "x bigint, y bigint, _mult bigint"  # facts, with deletes
D_SCHEMA = "id bigint, name string, grp string, _mult bigint"  # a dimension keyed by id
P_SCHEMA = "x bigint, y bigint"  # insert-only

SUMSQ = UserAggregate("sumsq", lift="x * x", merge="a + b", zero="0", inverse="-a",
                      state_type="bigint")

# name -> (strata SQL, DuckDB SQL when it differs)
SHAPES: dict[str, tuple[str, str | None]] = {
    "groupby_all_aggregates": (
        "SELECT x, count(*) AS c, count(y) AS cy, sum(y) AS s, avg(y) AS a, min(y) AS mn, "
        "max(y) AS mx, count(distinct y) AS d, stddev(y) AS sd, var_pop(y) AS vp "
        "FROM R GROUP BY x", None),
    "total_aggregate": ("SELECT count(*) AS c, sum(y) AS s, min(y) AS m FROM R", None),
    "filter_project": ("SELECT x, y * 2 AS y2 FROM R WHERE y > 3", None),
    "having": ("SELECT x, sum(y) AS s FROM R GROUP BY x HAVING count(*) > 2", None),
    "group_by_expression": ("SELECT x % 3 AS b, sum(y) AS s FROM R GROUP BY x % 3", None),
    "output_aliases": (  # GROUP BY and HAVING name the SELECT's outputs, as Spark allows
        "SELECT y % 4 AS b, sum(x) AS total, count(*) AS n FROM R GROUP BY b "
        "HAVING total > 2 AND n > 1", None),
    "distinct": ("SELECT DISTINCT x FROM R WHERE y IS NOT NULL", None),
    "join_one_to_many": ("SELECT D.name, R.y FROM R JOIN D ON R.x = D.id", None),
    "join_two_columns": ("SELECT D.name, R.x FROM R JOIN D ON R.x = D.id AND R.y = D.id",
                         None),
    "join_group_by": (
        "SELECT D.grp, sum(R.y) AS s, count(*) AS c, max(R.y) AS m "
        "FROM R JOIN D ON R.x = D.id GROUP BY D.grp", None),
    "nested_group_by": (
        "SELECT c, count(*) AS n FROM (SELECT x, count(*) AS c FROM R GROUP BY x) t "
        "GROUP BY c", None),
    "with_ctes": (  # CTEs inlined as subqueries; the second reads the first
        "WITH big AS (SELECT x, y FROM R WHERE y > 1), named AS (SELECT id, grp FROM D), "
        "hits AS (SELECT named.grp AS g, big.y AS y FROM big JOIN named ON big.x = named.id) "
        "SELECT g, count(*) AS c, sum(y) AS s FROM hits GROUP BY g", None),
    "date_keys": (  # date functions as group keys (no time zone in play)
        "SELECT trunc(date_add(DATE'2026-01-01', CAST(x * 20 AS INT)), 'MM') AS m, "
        "weekofyear(date_add(DATE'2026-01-01', CAST(x * 20 AS INT))) AS w, count(*) AS c, "
        "sum(y) AS s FROM R GROUP BY 1, 2",
        "SELECT CAST(date_trunc('month', DATE '2026-01-01' + CAST(x * 20 AS INT)) AS DATE) "
        "AS m, weekofyear(DATE '2026-01-01' + CAST(x * 20 AS INT)) AS w, count(*) AS c, "
        "sum(y) AS s FROM R GROUP BY 1, 2"),
    "in_subquery": ("SELECT x, y FROM R WHERE x IN (SELECT id FROM D WHERE grp = 'a')", None),
    "user_aggregate": ("SELECT x, sumsq(y) AS q FROM R GROUP BY x",
                       "SELECT x, coalesce(sum(y * y), 0) AS q FROM R GROUP BY x"),
    "insert_only_min_max": ("SELECT x, min(y) AS mn, max(y) AS mx FROM P GROUP BY x", None),
    # insert-only group-bys: the vectorized route (NULL keys, filters, key expressions)
    "insert_only_aggregates": (
        "SELECT y, x % 2 AS odd, count(*) AS c, count(y) AS cy, sum(x) AS s, avg(y) AS a, "
        "min(x) AS mn, max(y) AS mx FROM P WHERE x > 0 GROUP BY y, x % 2", None),
    "insert_only_string_key": (
        "SELECT CASE WHEN y > 4 THEN 'big' WHEN y > 0 THEN 'small' END AS size, "
        "sum(y) AS s, avg(x) AS a FROM P GROUP BY CASE WHEN y > 4 THEN 'big' "
        "WHEN y > 0 THEN 'small' END", None),
    # group-bys of a flow with deletes, sums and counts only: the vectorized route too
    "deletes_aggregates": (
        "SELECT y, count(*) AS c, count(x) AS cx, sum(x) AS s, avg(x) AS a FROM R "
        "WHERE x > 0 GROUP BY y", None),
    # set operations: a bag union of the branches (columns by position, widened types)
    "union_all_rows": ("SELECT x, y FROM R WHERE y > 2 UNION ALL SELECT x, y FROM P", None),
    "union_then_group": (
        "SELECT k, count(*) AS c, sum(v) AS s FROM (SELECT x AS k, y AS v FROM R UNION ALL "
        "SELECT id, NULL FROM D UNION ALL SELECT x, y * 1.5 FROM P) u GROUP BY k", None),
    "union_distinct": ("SELECT y FROM R UNION SELECT y FROM P ORDER BY y", None),
    "intersect": ("SELECT x FROM R INTERSECT SELECT id FROM D", None),
    "except": ("SELECT x, y FROM P EXCEPT SELECT x, y FROM R", None),
    # outer joins: unmatched rows padded with NULLs, taken back when a match arrives
    "left_join_group_by": (
        "SELECT D.grp, count(*) AS c, count(D.id) AS matched, sum(R.y) AS s FROM R "
        "LEFT JOIN D ON R.x = D.id AND D.name <> 'n3' GROUP BY D.grp", None),
    "anti_join": ("SELECT R.x, R.y FROM R LEFT JOIN D ON R.x = D.id WHERE D.id IS NULL",
                  None),
    "right_join": ("SELECT D.name, R.y FROM D RIGHT JOIN R ON R.x = D.id WHERE R.y > 0",
                   None),
    "left_join_grouped_right": (
        "SELECT D.id, D.grp, t.s, t.n FROM D LEFT JOIN (SELECT x, sum(y) AS s, count(*) AS n "
        "FROM R GROUP BY x) t ON D.id = t.x", None),
    # many-to-many joins: recomputed every epoch, as their stages opted in
    "many_to_many_group_by": (
        "SELECT R.x, count(*) AS c, sum(P.y) AS s FROM R JOIN P ON R.x = P.x GROUP BY R.x",
        None),
    "many_to_many_rows": ("SELECT R.y, P.y AS py FROM R JOIN P ON R.x = P.x WHERE R.y > 2",
                          None),
}
RECOMPUTED = {"many_to_many_group_by", "many_to_many_rows"}
VECTORIZED = {"insert_only_min_max", "insert_only_aggregates", "insert_only_string_key",
              "group_by_expression", "deletes_aggregates", "distinct", "date_keys"}


def build(shapes=SHAPES) -> Dataflow:
    df = Dataflow("shapes")
    df.source("R", R_SCHEMA)
    df.source("D", D_SCHEMA)
    df.source("P", P_SCHEMA)
    for name, (sql, _) in shapes.items():
        add_query(df, name, sql, keys={"D": ["id"]}, aggregates={"sumsq": SUMSQ},
                  allow_recompute=name in RECOMPUTED)
    return df


rows_r = st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(-4, 9))),
                  min_size=1, max_size=12)


@st.composite
def histories(draw, n_increments=3):
    """Increments of R, D and P; deletes remove rows present at the time; D keeps one row
    per id (an update deletes the old row and inserts the new)."""
    bag: Counter = Counter()
    dims: dict[int, tuple[str, str]] = {}
    out = []
    for _ in range(n_increments):
        r = [{"x": x, "y": y, "_mult": 1} for x, y in draw(rows_r)]
        present = sorted((k for k, n in bag.items() if n > 0), key=repr)
        for x, y in draw(st.lists(st.sampled_from(present), max_size=4, unique=True)
                         ) if present else []:
            r.append({"x": x, "y": y, "_mult": -1})
        d = []
        for i in draw(st.lists(st.integers(0, 6), max_size=4, unique=True)):
            new = (draw(st.sampled_from(["n1", "n2", "n3"])), draw(st.sampled_from("ab")))
            if i in dims:
                d.append({"id": i, "name": dims[i][0], "grp": dims[i][1], "_mult": -1})
            dims[i] = new
            d.append({"id": i, "name": new[0], "grp": new[1], "_mult": 1})
        p = [{"x": x, "y": y} for x, y in draw(rows_r)]
        for rec in r:
            bag[(rec["x"], rec["y"])] += rec["_mult"]
        out.append({"R": r, "D": d, "P": p})
    return out


def check_history(spark, home, history, shapes=SHAPES) -> None:
    run_history(spark, home, build(shapes), history,
                {name: ddb or sql for name, (sql, ddb) in shapes.items()})


_WHERE = itertools.cycle(["tasks", "driver", "driver-spark"])
_SETTINGS = {"deadline": None, "derandomize": True, "phases": [Phase.generate],
             "suppress_health_check": [HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow]}


@settings(max_examples=2, **_SETTINGS)
@given(history=histories(n_increments=2))
def test_shapes_agree_with_duckdb(spark, tmp_path_factory, history):
    """Every shape against DuckDB over two increments (the second deletes and updates rows
    of the first); the epochs run as Spark tasks and in the driver in turn, example by
    example (the driver with Spark's plans: test_driver_epochs.py, and the slow tier)."""
    with epochs_in(spark, next(_WHERE)):
        check_history(spark, tmp_path_factory.mktemp("shapes"), history)


@pytest.mark.slow
@settings(max_examples=6, **_SETTINGS)
@given(history=histories(n_increments=4))
def test_shapes_agree_with_duckdb_over_longer_histories(spark, tmp_path_factory, history):
    """The same over four increments, twice per place an epoch runs (``make test-slow``)."""
    with epochs_in(spark, next(_WHERE)):
        check_history(spark, tmp_path_factory.mktemp("shapes"), history)


def test_python_api_builds_the_same_query(spark, tmp_path):
    df = Dataflow("api")
    df.source("R", R_SCHEMA)
    df.source("D", D_SCHEMA)
    q = (table("R").join(table("D", key="id"), on=("x", "id")).where("y > 0")
         .group_by("grp").agg(s="sum(y)", n="count(*)"))
    add_query(df, "api", q)
    add_query(df, "sql", "SELECT grp, sum(y) AS s, count(*) AS n FROM R JOIN D ON R.x = D.id "
                         "WHERE y > 0 GROUP BY grp", keys={"D": ["id"]})
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        c.ingest("R", [{"x": i % 4, "y": i - 3, "_mult": 1} for i in range(20)])
        c.ingest("D", [{"id": i, "name": f"n{i}", "grp": "ab"[i % 2], "_mult": 1}
                       for i in range(4)])
        c.run()
        api = c.answer("api").to_pylist()
        sql = c.answer("sql").to_pylist()
    assert sorted(api, key=repr) == sorted(sql, key=repr)
    assert {r["grp"] for r in api} == {"a", "b"}


def dimension_updates(epoch: int, ids: range) -> list[dict]:
    """Epoch 0 inserts each id; later epochs move every id to the other group."""
    def row(j: int, e: int, mult: int) -> dict:
        return {"id": j, "name": f"n{j}", "grp": "ab"[(e + j) % 2], "_mult": mult}
    if epoch == 0:
        return [row(j, 0, 1) for j in ids]
    return [r for j in ids for r in (row(j, epoch - 1, -1), row(j, epoch, 1))]


def test_a_dimension_update_in_a_driver_epoch_moves_the_fact(spark, tmp_path):
    """A regression: the join's changes were held in Arrow as a table whose first
    batches were empty, and Spark (which ran the group-by's max) read no rows of it."""
    history = [
        {"R": [{"x": 2, "y": 3, "_mult": 1}, {"x": 5, "y": -2, "_mult": 1}],
         "D": [{"id": 4, "name": "n1", "grp": "a", "_mult": 1},
               {"id": 2, "name": "n3", "grp": "b", "_mult": 1}]},
        {"R": [{"x": 3, "y": None, "_mult": 1}, {"x": 5, "y": -2, "_mult": -1}],
         "D": [{"id": 2, "name": "n3", "grp": "b", "_mult": -1},
               {"id": 2, "name": "n1", "grp": "a", "_mult": 1}]},
    ]
    with epochs_in(spark, "driver"):
        check_history(spark, tmp_path, history, {"join_group_by": SHAPES["join_group_by"]})


@pytest.mark.parametrize("name", ["groupby_all_aggregates", "join_group_by"])
def test_output_flow_is_the_changelog_of_the_answer(spark, tmp_path, name):
    """Netting the output flow's changes gives the answer (what a downstream reader sees)."""
    df = build({name: SHAPES[name]})
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        for e in range(3):
            c.ingest("R", [{"x": j % 3, "y": j * e, "_mult": 1} for j in range(8)])
            c.ingest("D", dimension_updates(e, range(3)))
            c.run()
        changes = c.read_flow(f"{name}_changes").to_pylist()
        answer = c.answer(name).to_pylist()
    assert any(r["_mult"] == -1 for r in changes)  # answers changed, so old rows retracted
    assert net_changes(changes) == normalized(tuple(r.values()) for r in answer)


def test_insert_only_group_bys_take_the_vectorized_route():
    """Exactly the shapes the route can run take it; the rest keep the general plan."""
    df = build()
    for name in SHAPES:
        program = df.stages[name].program
        assert isinstance(program, VectorQueryProgram) == (name in VECTORIZED), name
        if name in VECTORIZED:  # explain says where its epochs run
            text = program.explain()
            assert "vectorized route" in text and "driverEpoch.maxRows" in text, text
    off = Dataflow("off")
    off.source("P", P_SCHEMA)
    add_query(off, "q", SHAPES["insert_only_min_max"][0], vectorized=False)
    assert not isinstance(off.stages["q"].program, VectorQueryProgram)


@pytest.mark.parametrize("where", ["tasks", "driver"])
def test_vectorized_route_changes_equal_the_general_plans(spark, tmp_path, where):
    """Both routes emit the same changes epoch by epoch (an unchanged answer row is
    neither retracted nor inserted again) and read the same answer, ORDER BY and LIMIT
    applied; NULL keys form one group. The route's epochs run as Spark tasks or in the
    driver (``where``)."""
    with epochs_in(spark, where):
        route_against_general_plan(spark, tmp_path)


def test_the_driver_aggregates_only_lifts_arrow_can():
    """A part's lift is aggregated in Arrow when it is a sum, min or max of a row
    expression; any other form leaves ``h`` to Spark's aggregation."""
    from strata.queries.arrow.arrow_lift import split_lift

    assert split_lift("sum(CAST((`y`) AS double) * `_mult`)") == (
        "sum", "CAST((`y`) AS DOUBLE) * `_mult`")
    assert split_lift("min((`x` % 3))") == ("min", "(`x` % 3)")
    assert split_lift("max(`s`)") == ("max", "`s`")
    for other in ("count(`y`)", "sum(`y`) + 1", "avg(`y`)", "`y`"):
        assert split_lift(other) is None, other


def both_routes(name: str, flow: str, schema: str, sqls: dict[str, str]) -> Dataflow:
    """Each query twice: ``<q>_vec`` on the vectorized route, ``<q>_gen`` on the general
    plan."""
    df = Dataflow(name)
    df.source(flow, schema)
    for q, sql in sqls.items():
        add_query(df, f"{q}_vec", sql)
        add_query(df, f"{q}_gen", sql, vectorized=False)
        assert isinstance(df.stages[f"{q}_vec"].program, VectorQueryProgram), q
    return df


def same_changes(c: Controller, q: str, epoch: int) -> None:
    """``q``'s two stages emitted the same changes in ``epoch`` and read the same answer."""
    vec, gen = (c.read_flow(f"{q}_{r}_changes", epoch).to_pylist() for r in ("vec", "gen"))
    assert normalized(tuple(r.values()) for r in vec) == \
        normalized(tuple(r.values()) for r in gen), (q, epoch)
    vec, gen = (c.answer(f"{q}_{r}").to_pylist() for r in ("vec", "gen"))
    assert normalized(tuple(r.values()) for r in vec) == \
        normalized(tuple(r.values()) for r in gen), (q, epoch)


def test_route_epochs_in_the_driver_and_as_tasks_share_one_state(spark, tmp_path,
                                                                 monkeypatch):
    """The route's epochs go round the driver reading the increment with Arrow (no Spark
    job), the driver reading it with Spark, and Spark tasks, on one home; its changes and
    answer equal the general plan's every epoch. The Arrow epochs took the Arrow path."""
    real, read = VectorQueryProgram._arrow_lifted_rows, []

    def counted(self, *args):
        out = real(self, *args)
        read.append(out is not None)
        return out
    monkeypatch.setattr(VectorQueryProgram, "_arrow_lifted_rows", counted)
    df = both_routes("mixed", "P", P_SCHEMA, {
        "q": "SELECT y AS k, count(*) AS c, sum(x) AS s, min(x) AS lo FROM P WHERE x <> 3 "
             "GROUP BY y",
        "e": "SELECT x % 3 = 0 AS k3, CASE WHEN y > 4 THEN 'hi' END AS k, count(y) AS c, "
             "avg(x + y) AS a, max(x * 2) AS m FROM P GROUP BY x % 3 = 0, "
             "CASE WHEN y > 4 THEN 'hi' END"})
    where = ("driver", "driver-spark", "tasks")
    with Controller(str(tmp_path), df, spark=spark, num_partitions=3) as c:
        for e in range(1, 8):
            c.ingest("P", [{"x": (j * 7 + e) % 9, "y": None if j % 5 == 0 else j % 11}
                           for j in range(10 + e)])
            with epochs_in(spark, where[e % 3]):
                c.run()
            same_changes(c, "q", e)
            same_changes(c, "e", e)
    assert read and all(read), read  # in the driver with Arrow: both queries, every time


@pytest.mark.parametrize("where", ["tasks", "driver"])
def test_deleting_a_groups_rows_retracts_it_on_the_route(spark, tmp_path, where):
    """A flow with deletes: when every row of a group is deleted the group leaves the
    state and its answer row is retracted, also for an answer of keys only; both routes
    emit the same changes epoch by epoch and read the same answer."""
    df = both_routes("deletes", "R", R_SCHEMA, {
        "sums": "SELECT y AS k, count(*) AS c, sum(x) AS s, avg(x) AS a FROM R GROUP BY y",
        "keys": "SELECT y FROM R GROUP BY y"})
    rows = [{"x": x, "y": x % 3 or None, "_mult": 1} for x in range(1, 9)]
    epochs = [rows, [{**r, "_mult": -1} for r in rows if r["y"] == 1],
              [{"x": 20, "y": 1, "_mult": 1}, {**rows[2], "_mult": -1}],
              [{**r, "_mult": -1} for r in rows if r["y"] is None and r != rows[2]]]
    with epochs_in(spark, where), Controller(str(tmp_path), df, spark=spark,
                                                     num_partitions=2) as c:
        for e, batch in enumerate(epochs, 1):
            c.ingest("R", batch)
            c.run()
            for q in ("sums", "keys"):
                same_changes(c, q, e)
        assert sorted(r["y"] for r in c.answer("keys_vec").to_pylist()) == [1, 2]
        retracted = c.read_flow("keys_vec_changes", 2).to_pylist()
        assert {r["y"]: r["_mult"] for r in retracted} == {1: -1}  # all of group 1 deleted


def route_against_general_plan(spark, tmp_path) -> None:
    df = both_routes("routes", "P", P_SCHEMA, {
        "q": "SELECT y AS k, count(*) AS c, max(x) AS m, avg(x) AS a FROM P GROUP BY y "
             "ORDER BY c DESC, k LIMIT 4"})
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        for e in range(1, 4):
            c.ingest("P", [{"x": (j * 7 + e - 1) % 5, "y": None if j % 4 == 0 else j % 3}
                           for j in range(6 + 3 * (e - 1))])
            c.run()
            same_changes(c, "q", e)
            assert c.answer("q_vec").to_pylist() == c.answer("q_gen").to_pylist(), e
        assert any(r["_mult"] == -1 for r in c.read_flow("q_vec_changes").to_pylist())
        assert any(r["k"] is None for r in c.read_flow("q_vec_changes").to_pylist())


def test_an_overflowing_sum_stops_the_epoch_naming_the_group(spark, tmp_path):
    """A bigint sum that overflows across epochs is an error naming the stage, epoch and
    group (as Spark's ANSI arithmetic is within one), and nothing is committed."""
    df = Dataflow("overflow")
    df.source("P", P_SCHEMA)
    add_query(df, "q", "SELECT x, sum(y) AS s FROM P GROUP BY x")
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        c.ingest("P", [{"x": 7, "y": 2**62}, {"x": 8, "y": 1}])
        c.run()
        c.ingest("P", [{"x": 7, "y": 2**62}, {"x": 8, "y": 1}])
        with pytest.raises(TranslateError) as info:
            c.run()
        text = str(info.value)
        assert "stage 'q'" in text and "epoch 2" in text and "overflows bigint" in text, text
        assert "key [7, False]" in text and "CAST(col AS double)" in text  # group x = 7
        assert sorted(c.answer("q").to_pylist(), key=lambda r: r["x"]) == [
            {"x": 7, "s": 2**62}, {"x": 8, "s": 1}]  # epoch 1's answer, as committed


@pytest.mark.parametrize("where", ["tasks", "driver"])
def test_a_sum_overflowing_within_one_increment_stops_the_epoch(spark, tmp_path, where):
    """Within one increment, Spark's ANSI sum (as tasks) or Arrow's decimal sum checked
    against bigint's range (in the driver; it names the group) stops the epoch."""
    df = Dataflow("overflow")
    df.source("P", P_SCHEMA)
    add_query(df, "q", "SELECT x, sum(y) AS s FROM P GROUP BY x")
    with epochs_in(spark, where), Controller(str(tmp_path), df, spark=spark,
                                                     num_partitions=2) as c:
        c.ingest("P", [{"x": 8, "y": 1}])
        c.run()
        c.ingest("P", [{"x": 7, "y": 2**62}, {"x": 7, "y": 2**62}, {"x": 8, "y": 1}])
        with pytest.raises(EpochError) as info:
            c.run()
        text = str(info.value)
        assert "stage 'q'" in text and "epoch 2" in text, text
        assert ("key [7, False]" in text and "overflows bigint" in text if where == "driver"
                else "ARITHMETIC_OVERFLOW" in text), text
        assert c.answer("q").to_pylist() == [{"x": 8, "s": 1}]  # epoch 1's, as committed


def test_a_query_home_from_the_general_plan_is_not_read_as_the_route(spark, tmp_path):
    """A stage that ran on the general plan is refused by the vectorized route (their
    states differ), with the way to keep running it."""
    sql = "SELECT x, count(*) AS c FROM P GROUP BY x"
    old = Dataflow("before")
    old.source("P", P_SCHEMA)
    add_query(old, "q", sql, vectorized=False)
    with Controller(str(tmp_path), old, spark=spark, num_partitions=2) as c:
        c.ingest("P", [{"x": 1, "y": 2}])
        c.run()
    new = Dataflow("after")
    new.source("P", P_SCHEMA)
    add_query(new, "q", sql)
    with Controller(str(tmp_path), new, spark=spark, num_partitions=2) as c:
        c.ingest("P", [{"x": 1, "y": 3}])
        with pytest.raises(StrataError, match=r"vectorized=False\) keeps the plan it ran with"):
            c.run()
        assert c.answer("q").to_pylist() == [{"x": 1, "c": 1}]  # nothing lost
