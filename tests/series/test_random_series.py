"""Random series definitions over random segments (hypothesis): every occurrence, from
views computed per segment (alone or in a pass with the other series' views: the jumbo
pass, the shared shuffle on a key they share, or one grouping on the keys they all have
with their filters pulled above it), equals DuckDB's answer of the same SQL over the raw
segments of its window."""

from __future__ import annotations

import functools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.queries.front.sql import parse_sql
from strata.series.evaluate import (
    jumbo_branch,
    jumbo_eligible,
    jumbo_partials,
    occurrence,
    prefix_group,
    prefix_partials,
    reorder_group,
    reordered_partials,
    view_of_segment,
)
from strata.series.normalize import plan_series
from strata.series.windows import Schedule, Segments
from tests.series.clicklog import COLUMNS, canon, duckdb_answer, segment

AGGREGATES = ["count(*)", "sum(B)", "min(E)", "max(A)", "avg(E)", "count(DISTINCT C)",
              "max(D) - min(D)"]
FILTERS = ["", "WHERE A <> 'gb'", "WHERE B < 4 AND C <> 'x'", "WHERE E > 5.0"]
KEYS = ["A", "C", "D"]
SEGMENTS = 5


@st.composite
def series(draw):
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=2))
    aggs = draw(st.lists(st.sampled_from(AGGREGATES), unique=True, min_size=1, max_size=3))
    where = draw(st.sampled_from(FILTERS))
    last = draw(st.integers(1, 3))
    offset = draw(st.integers(-1, 0))
    period = draw(st.integers(1, 2))
    cols = [*keys, *(f"{a} AS v{i}" for i, a in enumerate(aggs))]
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    having = draw(st.sampled_from(["", " HAVING count(*) > 1"])) if keys else ""
    sql = f"SELECT {', '.join(cols)} FROM log {where}{group}{having}"
    spec = f"log[{offset - last + 1}:{offset}]"
    return sql, spec, period


def _frames(spark, seed):
    rng = random.Random(seed)
    tables = [segment(rng, rng.choice([0, 3, 25])) for _ in range(SEGMENTS)]
    return tables, [spark.createDataFrame(t.to_pandas(), schema=", ".join(
        f"{c} {t}" for c, t in COLUMNS.items())) for t in tables]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(defs=st.lists(series(), min_size=2, max_size=3), seed=st.integers(0, 10_000),
       pass_plan=st.sampled_from(["jumbo", "prefix", "reordered"]))
def test_random_series_equal_duckdb(spark, defs, seed, pass_plan):
    tables, frames = _frames(spark, seed)
    plans = [(plan_series(parse_sql(sql, {"log": COLUMNS}),
                          Schedule({"log": Segments.parse(spec)}, period), COLUMNS), sql)
             for sql, spec, period in defs]
    views = {v.fingerprint: v for p, _ in plans for v in p.view_list()}
    stored = {}
    for j, seg in enumerate(frames, 1):
        eligible = [v for v in views.values() if jumbo_eligible(v)]
        passed, rows = _pass(pass_plan, eligible, seg)
        for i, v in enumerate(passed):  # a pass's views, as the series stage reads them
            stored[(v.fingerprint, j)] = jumbo_branch(v, i, rows.where(f"_b = {i}"))
        for v in views.values():
            stored.setdefault((v.fingerprint, j), view_of_segment(v, seg))

    def read(view, window):
        parts = [stored[(view.fingerprint, j)] for j in window]
        return functools.reduce(lambda a, b: a.unionByName(b), parts)

    for plan, sql in plans:
        for n in plan.schedule.occurrences(range(1, SEGMENTS + 1)):
            got = [r.asDict(recursive=True) for r in occurrence(plan, n, read, spark).collect()]
            want = duckdb_answer(sql, plan.schedule.window(n), tables)
            assert canon(got) == canon(want), (sql, n)


def _pass(plan, eligible, seg):
    """The views one pass of ``plan`` computes over ``seg``, and its rows (none: no pass,
    fewer than two views could share it)."""
    if plan == "prefix":
        group, shared = prefix_group(eligible)
        views = [eligible[i] for i in group]
        if len(views) < 2:
            return [], None
        return views, prefix_partials(views, seg, shared, 2).localCheckpoint()
    if plan == "reordered":
        views = [eligible[i] for i in reorder_group(eligible)]
        if len(views) < 2:
            return [], None
        return views, reordered_partials(views, seg).localCheckpoint()
    if len(eligible) < 2:
        return [], None
    return eligible, jumbo_partials(eligible, seg).localCheckpoint()
