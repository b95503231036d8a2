"""Every occurrence of a series, computed from per-segment views, equals DuckDB's answer
of the same SQL over the raw segments of its window."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow.parquet as pq
import pytest

from strata.queries.front.sql import parse_sql
from strata.series.evaluate import occurrence, view_of_segment
from strata.series.normalize import explain, plan_series
from strata.series.windows import Schedule, Segments
from tests.series.clicklog import (
    COLUMNS,
    SERIES,
    SET_OPERATIONS,
    canon,
    duckdb_answer,
    segment,
)

# the paper's q3 written with common table expressions (DuckDB runs the same SQL)
WITH_CTES = ("q3_with_ctes",
             "WITH t AS (SELECT D, max(B) AS m FROM today WHERE A <> 'ru' GROUP BY D), "
             "y AS (SELECT D, max(B) AS m FROM yesterday WHERE A <> 'ru' GROUP BY D) "
             "SELECT t.D AS D, t.m AS today, y.m AS yesterday FROM t JOIN y ON t.D = y.D",
             {"today": "log", "yesterday": "log[-1]"}, 1)

def plans_of(series) -> dict:
    plans = {}
    for name, sql, tables, period in series:
        runs = {t: Segments.parse(s) for t, s in tables.items()}
        plan = plan_series(parse_sql(sql, {t: COLUMNS for t in runs}), Schedule(runs, period),
                           COLUMNS)
        plans[name] = (plan, sql)
    return plans


def check_occurrences(spark, tmp_path, plans: dict, segments: list) -> None:
    """Every view of every segment written once per fingerprint; every due occurrence
    computed from the views equals DuckDB's answer over its window's raw segments."""
    seg_dir = tmp_path / "segments"
    for i, t in enumerate(segments, 1):
        (seg_dir / str(i)).mkdir(parents=True)
        pq.write_table(t, seg_dir / str(i) / "part-0.parquet")
    views = tmp_path / "views"
    written: Counter = Counter()

    def read_views(view, window):
        paths = [str(views / view.fingerprint / str(i)) for i in window]
        return spark.read.parquet(*paths)

    checked = 0
    for i in range(1, len(segments) + 1):
        seg = spark.read.parquet(str(seg_dir / str(i)))
        for plan, _ in plans.values():  # every view of the segment, once per fingerprint
            for v in plan.view_list():
                target = views / v.fingerprint / str(i)
                if not target.exists():
                    view_of_segment(v, seg).write.parquet(str(target))
                    written[v.fingerprint] += 1
        for name, (plan, sql) in plans.items():
            if not plan.schedule.due(i):
                continue
            got = [r.asDict(recursive=True)
                   for r in occurrence(plan, i, read_views, spark).collect()]
            expected = duckdb_answer(sql, plan.schedule.window(i), segments)
            assert canon(got) == canon(expected), (name, i)
            checked += 1
    numbers = range(1, len(segments) + 1)
    assert checked == sum(len(p.schedule.occurrences(numbers)) for p, _ in plans.values())
    assert all(n == len(segments) for n in written.values())  # one view per segment, shared


def test_occurrences_equal_duckdb_over_raw_segments(spark, tmp_path):
    rng = random.Random(1)
    segments = [segment(rng, rng.choice([0, 5, 40])) for _ in range(5)]  # the widest window: 4
    plans = plans_of([*SERIES, WITH_CTES])
    assert not plans["join_grouped_not_decomposable"][0].decomposed
    assert any("does not decompose" in line
               for line in explain(plans["join_grouped_not_decomposable"][0]))
    q3 = plans["q3_today_join_yesterday"][0].view_list()
    assert [v.kind for v in q3] == ["partial", "partial"]
    assert q3[0].fingerprint == q3[1].fingerprint  # yesterday's view is today's, reused
    # the CTEs inlined, the same subplans: the same views
    assert {v.fingerprint for v in plans["q3_with_ctes"][0].view_list()} == {q3[0].fingerprint}
    check_occurrences(spark, tmp_path, plans, segments)


def test_set_operation_series_decompose_and_equal_duckdb(spark, tmp_path):
    rng = random.Random(2)
    segments = [segment(rng, rng.choice([0, 30])) for _ in range(4)]
    plans = plans_of(SET_OPERATIONS)
    for name in ("union_grouped", "except_yesterday", "intersect_week"):
        plan = plans[name][0]
        assert plan.decomposed and [v.kind for v in plan.view_list()] == ["partial"] * 2
        assert any("partials of every branch" in line for line in explain(plan))
    assert [v.kind for v in plans["union_rows"][0].view_list()] == ["rows"] * 2
    check_occurrences(spark, tmp_path, plans, segments)


def test_plans_cut_where_the_operators_decompose(spark):
    def cut(sql, tables, period=1):
        runs = {t: Segments.parse(s) for t, s in tables.items()}
        return plan_series(parse_sql(sql, {t: COLUMNS for t in runs}), Schedule(runs, period),
                           COLUMNS)

    weekly = cut("SELECT A, B, count(*) AS hits FROM log WHERE A <> 'gb' GROUP BY A, B",
                 {"log": "log[-6:0]"}, 7)
    [v] = weekly.view_list()
    assert v.kind == "partial" and weekly.decomposed
    assert "merge (⊗) the 7 partial(s)" in "\n".join(explain(weekly))
    daily = cut("SELECT A, B, count(*) AS n FROM log WHERE A <> 'gb' GROUP BY A, B",
                {"log": "log"})
    assert daily.view_list()[0].fingerprint == v.fingerprint  # same subplan, same view
    other_filter = cut("SELECT A, B, count(*) AS hits FROM log WHERE A <> 'ru' GROUP BY A, B",
                       {"log": "log"})
    assert other_filter.view_list()[0].fingerprint != v.fingerprint
    raw_join = cut("SELECT t.A AS A, y.B AS B FROM today t JOIN yesterday y ON t.D = y.D",
                   {"today": "log", "yesterday": "log[-1]"})
    kinds = sorted(v.kind for v in raw_join.view_list())
    assert kinds == ["rows", "rows"]
    # the two sides scan the same stream with different prefixes: one shared rows view
    assert len({v.fingerprint for v in raw_join.view_list()}) == 1


def test_unbound_tables_are_refused():
    from strata.queries.plan.errors import QueryError

    with pytest.raises(QueryError, match="does not bind"):
        plan_series(parse_sql("SELECT A FROM other", {"other": COLUMNS}),
                    Schedule({"log": Segments("log")}), COLUMNS)
