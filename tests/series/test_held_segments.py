"""A segment the driver still holds after its ingest: views and answers in Arrow
(``strata.series.held``), equal to DuckDB, and no Spark job reads the segment again."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.csv as pcsv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.cli.series_explain import scan_lines
from strata.config import HELD_SEGMENT_ROWS
from strata.controller import Controller
from strata.queries.arrow import driver_rows
from strata.queries.arrow.rows import Rows
from strata.queries.front.sql import parse_sql
from strata.series import Series, series_stage_name
from strata.series.evaluate import occurrence, view_of_segment
from strata.series.held import held_occurrence, held_view
from strata.series.normalize import plan_series
from strata.series.stored import spark_schema
from strata.series.windows import Schedule, Segments
from tests.series.clicklog import (
    COLUMNS,
    DDL,
    OUTER_JOINS,
    SERIES,
    SET_OPERATIONS,
    canon,
    dataflow,
    duckdb_answer,
    segment,
)
from tests.series.test_random_series import SEGMENTS, series

PAPER = SERIES[:3]  # a daily grouping, a histogram over three segments, today ⋈ yesterday


def _csv(tmp_path, i: int, table: pa.Table) -> str:
    path = tmp_path / f"seg-{i}.csv"
    pcsv.write_csv(table, path)
    return str(path)


def test_the_papers_series_read_a_held_segment_once_at_its_ingest(spark, tmp_path):
    rng = random.Random(3)
    segments = [segment(rng, rng.choice([6, 30])) for _ in range(5)]
    series_ = [Series(name, sql, tables, period) for name, sql, tables, period in PAPER]
    df = dataflow(series_, shared_scan="auto")
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        reports = []
        for i, seg in enumerate(segments):
            c.ingest("log", [_csv(tmp_path, i, seg)])
            reports += c.run()
        for r in reports:
            # every view in Arrow, every answer from them: Spark read, shuffled and wrote
            # nothing, and the driver read no file back (its file cache had them all)
            assert r.metrics["views_in_arrow"] == r.metrics["views_computed"] > 0, r.metrics
            assert r.metrics["spark_io"] == {"read": 0, "shuffled": 0, "written": 0}, r.epoch
            assert r.metrics["driver_bytes_read"] == 0
            assert set(r.metrics["answered"]) <= {s.name for s in series_}
        stage = df.stages[series_stage_name("log")]
        state = c.runner.committed(stage).state
        assert state["estimate"] is None  # κ learns only from epochs Spark's plans ran
        scan = scan_lines(state["scan"])
        assert "none, the driver held its rows" in scan[0] and "in Arrow" in scan[0], scan
        checked = 0
        for s in series_:
            for n, _ in c.stored_increments(s.name):
                plan = stage.program.plans[s.name]
                want = duckdb_answer(s.sql, plan.schedule.window(n), segments)
                assert canon(c.read_flow(s.name, n).to_pylist()) == canon(want), (s.name, n)
                checked += 1
        assert checked >= 10


def test_held_and_spark_epochs_mix_in_one_home_and_answer_as_duckdb(spark, tmp_path):
    """Epochs alternate between a held segment and Spark's plans, over the stored view
    tables both write: every shape of series answers as DuckDB does."""
    rng = random.Random(11)
    segments = [segment(rng, rng.choice([0, 6, 30])) for _ in range(6)]
    defs = [*SERIES, *SET_OPERATIONS, *OUTER_JOINS]
    series_ = [Series(name, sql, tables, period) for name, sql, tables, period in defs]
    df = dataflow(series_)
    held_epochs = []
    try:
        with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
            for i, seg in enumerate(segments):
                spark.conf.set(HELD_SEGMENT_ROWS.name, "-1" if i % 2 else "1000000")
                c.ingest("log", [_csv(tmp_path, i, seg)])
                held_epochs += [r.metrics["views_in_arrow"] for r in c.run() if not i % 2]
            program = df.stages[series_stage_name("log")].program
            for s in series_:
                plan = program.plans[s.name]
                for n, _ in c.stored_increments(s.name):
                    want = duckdb_answer(s.sql, plan.schedule.window(n), segments)
                    got = c.read_flow(s.name, n).to_pylist()
                    assert canon(got) == canon(want), (s.name, n)
    finally:
        spark.conf.unset(HELD_SEGMENT_ROWS.name)
    assert all(held_epochs), held_epochs  # the held epochs computed views in Arrow


def _held(spark, table: pa.Table):
    schema = spark_schema(COLUMNS)
    return Rows.of_arrow(spark, table.cast(driver_rows.arrow_schema(schema)), schema)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(defs=st.lists(series(), min_size=1, max_size=3), seed=st.integers(0, 10_000))
def test_random_series_in_arrow_equal_duckdb(spark, defs, seed):
    """Views of held segments and the occurrences over them in Arrow (or, where Arrow
    declines, Spark's plan over the same held views) equal DuckDB's answers."""
    rng = random.Random(seed)
    tables = [segment(rng, rng.choice([0, 3, 25])) for _ in range(SEGMENTS)]
    empty = spark.createDataFrame([], spark_schema(COLUMNS))
    for sql, spec, period in defs:
        plan = plan_series(parse_sql(sql, {"log": COLUMNS}),
                           Schedule({"log": Segments.parse(spec)}, period), COLUMNS)
        views = {}
        for j, t in enumerate(tables, 1):
            for v in plan.view_list():
                views[(v.fingerprint, j)] = held_view(v, _held(spark, t),
                                                      view_of_segment(v, empty).schema)
        arrow_only = "DISTINCT" not in sql and "GROUP BY" in sql
        if arrow_only:  # sum, min, max and count over keys: every view in Arrow
            assert all(f is not None for f in views.values()), sql

        def read(view, window, views=views):
            parts = [views[(view.fingerprint, j)] for j in window]
            if any(p is None for p in parts):
                return None
            return driver_rows.union(parts)

        def read_spark(view, window, views=views):
            return driver_rows.union([views[(view.fingerprint, j)] or Rows.of_frame(
                view_of_segment(view, spark.createDataFrame(tables[j - 1].to_pandas(), DDL)))
                for j in window]).frame()

        for n in plan.schedule.occurrences(range(1, SEGMENTS + 1)):
            want = canon(duckdb_answer(sql, plan.schedule.window(n), tables))
            table = held_occurrence(plan, n, read)
            if arrow_only:
                assert table is not None, (sql, n)
            got = table.to_pylist() if table is not None else [
                r.asDict(recursive=True) for r in occurrence(plan, n, read_spark, spark).collect()]
            assert canon(got) == want, (sql, n)
