"""Window functions (``OVER (PARTITION BY … ORDER BY …)``): maintained over random
increments with deletes, equal to DuckDB recomputing the same SQL after every increment;
the output flow is the changelog of the answer; refusals say what to do instead."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from strata import Dataflow
from strata.controller.controller import Controller
from strata.queries import QueryError, add_query, derive, parse_sql
from tests.helpers import epochs_in
from tests.queries.oracle import check_history, net_changes, normalized
from tests.queries.test_shapes import D_SCHEMA, P_SCHEMA, R_SCHEMA, histories

# Spark orders NULLs first ascending and last descending; DuckDB is told the same
QUERIES = {
    "numbered": "SELECT x, y, row_number() OVER (PARTITION BY x ORDER BY y DESC NULLS LAST) "
                "AS rn FROM R",
    "top_two": "SELECT x, y FROM (SELECT x, y, rank() OVER (PARTITION BY x ORDER BY y "
               "ASC NULLS FIRST) AS r FROM R) t WHERE r <= 2",
    "running": "SELECT x, y, sum(y) OVER (PARTITION BY x ORDER BY y ASC NULLS FIRST) AS run, "
               "count(*) OVER (PARTITION BY x) AS n, avg(y) OVER (PARTITION BY x) AS a FROM R "
               "WHERE y IS NULL OR y > -3",
    "neighbours": "SELECT x, y, lag(y) OVER (PARTITION BY x ORDER BY y ASC NULLS FIRST) AS "
                  "prev, lead(y, 1) OVER (PARTITION BY x ORDER BY y ASC NULLS FIRST) AS nxt, "
                  "dense_rank() OVER (PARTITION BY x ORDER BY y ASC NULLS FIRST) AS dr FROM R",
    "one_partition": "SELECT x, y, percent_rank() OVER (ORDER BY y ASC NULLS FIRST) AS pr, "
                     "min(x) OVER () AS lo FROM R",
    "null_partitions": "SELECT x, y, count(*) OVER (PARTITION BY y) AS c FROM R",
    "over_a_join": "SELECT D.grp, R.y, row_number() OVER (PARTITION BY D.grp ORDER BY R.y "
                   "ASC NULLS FIRST, R.x ASC) AS rn FROM R JOIN D ON R.x = D.id",
}


def build() -> Dataflow:
    df = Dataflow("windowed")
    df.source("R", R_SCHEMA)
    df.source("D", D_SCHEMA)
    df.source("P", P_SCHEMA)
    for name, sql in QUERIES.items():
        add_query(df, name, sql, keys={"D": ["id"]})
    return df


_WHERE = itertools.cycle(["tasks", "driver"])


@settings(max_examples=2, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=histories())
def test_window_functions_agree_with_duckdb(spark, tmp_path_factory, history):
    """Every query after every increment (rows inserted and deleted, ties, NULLs, rows
    present twice), epochs as Spark tasks and in the driver in turn."""
    with epochs_in(spark, next(_WHERE)):
        check_history(spark, tmp_path_factory.mktemp("windows"), build(), history, QUERIES)


def test_the_output_flow_is_the_changelog_and_touches_only_changed_rows(spark, tmp_path):
    """A new row at the top of a partition renumbers that partition only: the other
    partitions' rows are neither retracted nor inserted again."""
    df = Dataflow("numbered")
    df.source("R", R_SCHEMA)
    add_query(df, "numbered", QUERIES["numbered"])
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        c.ingest("R", [{"x": x, "y": y, "_mult": 1} for x in (1, 2) for y in (5, 7)])
        c.run()
        c.ingest("R", [{"x": 1, "y": 9, "_mult": 1}])
        c.run()
        second = c.read_flow("numbered_changes", 2).to_pylist()
        c.ingest("R", [{"x": 1, "y": 9, "_mult": -1}])
        c.run()
        answer = c.answer("numbered").to_pylist()
        changes = c.read_flow("numbered_changes").to_pylist()
    assert {r["x"] for r in second} == {1}  # partition 2 untouched
    assert sorted((r["y"], r["rn"], r["_mult"]) for r in second) == [
        (5, 2, -1), (5, 3, 1), (7, 1, -1), (7, 2, 1), (9, 1, 1)]
    assert sorted((r["x"], r["y"], r["rn"]) for r in answer) == [
        (1, 5, 2), (1, 7, 1), (2, 5, 2), (2, 7, 1)]
    assert net_changes(changes) == normalized(tuple(r.values()) for r in answer)


def test_explain_names_the_state_and_the_partitions():
    flows = {"R": {"x": "bigint", "y": "bigint"}}
    text = derive(parse_sql(QUERIES["numbered"], flows)).explain()
    assert "state window0: the input's rows, partitioned by (x)" in text
    # row_number orders ties by every column, so each epoch numbers them alike
    assert "ORDER BY `y` DESC, `x` ASC, `y` ASC" in text
    one = derive(parse_sql(QUERIES["one_partition"], flows)).explain()
    assert "one partition: every epoch reads all of it" in one


@pytest.mark.parametrize(("sql", "says"), [
    ("SELECT x, sum(y) OVER (PARTITION BY x) + 1 AS s FROM R", "as a whole item"),
    ("SELECT x, count(*) AS n, rank() OVER (ORDER BY x) AS r FROM R GROUP BY x",
     "group in a subquery"),
    ("SELECT row_number() OVER (PARTITION BY x % 2 ORDER BY y) AS r FROM R",
     "PARTITION BY columns"),
    ("SELECT rank() OVER (PARTITION BY x ORDER BY y) AS a, "
     "rank() OVER (PARTITION BY y ORDER BY y) AS b FROM R", "share one PARTITION BY"),
    ("SELECT percentile(y, 0.5) OVER (PARTITION BY x) AS p FROM R", "use row_number"),
    ("SELECT k, rank() OVER (ORDER BY k) AS r FROM M", "map columns"),
])
def test_unsupported_windows_are_refused_with_what_to_do(sql, says):
    with pytest.raises(QueryError, match=says):
        parse_sql(sql, {"R": {"x": "bigint", "y": "bigint"},
                        "M": {"k": "string", "v": "map<string,int>"}})


def test_a_series_ranks_each_occurrence_over_its_views(spark, tmp_path):
    """The top two B per market over the last two segments: the group-by below the
    window keeps a partial view per segment; each occurrence merges them and ranks the
    merged groups. Every occurrence equals DuckDB's over the raw window."""
    import random

    import pyarrow.parquet as pq

    from strata.series import Series, add_series, series_stage_name
    from tests.series.clicklog import DDL, canon, segment
    from tests.series.clicklog import duckdb_answer as duckdb_window

    sql = ("SELECT A, B, n FROM (SELECT A, B, n, rank() OVER (PARTITION BY A ORDER BY n "
           "DESC) AS r FROM (SELECT A, B, count(*) AS n FROM log GROUP BY A, B) g) t "
           "WHERE r <= 2")
    rng = random.Random(13)
    segments = [segment(rng, rng.choice([0, 30])) for _ in range(4)]
    df = Dataflow("clicks")
    df.source("log", DDL)
    add_series(df, "log", [Series("top_b", sql, {"log": "log[-1:0]"}, 1)])
    plan = df.stages[series_stage_name("log")].program.plans["top_b"]
    assert [v.kind for v in plan.view_list()] == ["partial"]
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for i, seg in enumerate(segments):
            path = tmp_path / f"seg-{i}.parquet"
            pq.write_table(seg, path)
            c.ingest("log", [str(path)])
        c.run()
        got = {e: c.read_flow("top_b", e) for e, _ in c.stored_increments("top_b")}
    assert sorted(got) == plan.schedule.occurrences(range(1, len(segments) + 1))
    for n, table in got.items():
        want = duckdb_window(sql, plan.schedule.window(n), segments)
        assert canon(table.to_pylist()) == canon(want), n
