"""Series under the controller: one jumbo stage per stream, an occurrence per due
segment as an increment of the series' flow, equal to DuckDB over the raw segments."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest

from strata.cli.series_explain import scan_lines
from strata.controller import Controller
from strata.model.errors import EpochError, StrataError
from strata.series import Series, series_stage_name
from strata.series.adhoc import ad_hoc
from tests.series.clicklog import (
    OUTER_JOINS,
    SERIES,
    SET_OPERATIONS,
    canon,
    dataflow,
    duckdb_answer,
    segment,
)


def _ingest(c, tmp_path, seg):
    """A segment as a Parquet file (an empty day too: records must be at least one)."""
    path = tmp_path / f"seg-{len(list(tmp_path.glob('seg-*')))}.parquet"
    pq.write_table(seg, path)
    c.ingest("log", [str(path)])


@pytest.mark.usefixtures("spark_plans")
def test_every_occurrence_is_an_increment_equal_to_duckdb(spark, tmp_path):
    rng = random.Random(7)
    segments = [segment(rng, rng.choice([0, 6, 30])) for _ in range(6)]
    series = [Series(name, sql, tables, period) for name, sql, tables, period in SERIES]
    df = dataflow(series, shared_scan=True)
    stage = series_stage_name("log")
    program = df.stages[stage].program
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for seg in segments:
            _ingest(c, tmp_path, seg)
        reports = c.run()
        # one jumbo pass per segment computes the partial views (one scan, one exchange)
        assert all(r.metrics["views_in_jumbo_pass"] >= 2 for r in reports), reports
        checked = 0
        for s in series:
            plan = program.plans[s.name]
            got = {e: c.read_flow(s.name, e) for e, _ in c.stored_increments(s.name)}
            due = plan.schedule.occurrences(range(1, len(segments) + 1))
            assert sorted(got) == due, s.name  # epoch n = the occurrence at segment n
            for n, table in got.items():
                expected = duckdb_answer(s.sql, plan.schedule.window(n), segments)
                assert canon(table.to_pylist()) == canon(expected), (s.name, n)
                checked += 1
        assert checked > 20
        # views nobody reads again are gone: only what the windows after segment 6 need
        views = c.state_records(stage)
        assert views and max(v["segment"] for v in views) == 6
        assert min(v["segment"] for v in views) >= 6 - 3  # the longest window is 4
        first = c.flow_dataframe("q1_daily_grouping", 6).toPandas()
        assert len(first) == c.read_flow("q1_daily_grouping", 6).num_rows
        # ad hoc: a query matching a view of the last jumbo pass reads it from its files
        total = next(sql for name, sql, _, _ in SERIES if name == "total")
        answer, how = ad_hoc(str(tmp_path / "home"), spark, "log", total, newest=6,
                             dataflow=c.dataflow)
        want = duckdb_answer(total, {"log": range(6, 7)}, segments)
        assert canon(r.asDict() for r in answer.collect()) == canon(want)
        assert how[0].endswith("6: stored view (jumbo pass)"), how


def test_set_operation_and_outer_join_series_equal_duckdb(spark, tmp_path):
    """UNION ALL, EXCEPT and INTERSECT series (a partial view per branch, kept per
    segment) and outer joins of views: every occurrence equals DuckDB's over the raw
    segments of its window."""
    rng = random.Random(11)
    segments = [segment(rng, rng.choice([0, 25])) for _ in range(4)]
    series = [Series(name, sql, tables, period) for name, sql, tables, period in
              [*SET_OPERATIONS, *OUTER_JOINS]]
    df = dataflow(series, shared_scan=True)
    program = df.stages[series_stage_name("log")].program
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for seg in segments:
            _ingest(c, tmp_path, seg)
        reports = c.run()
        assert [r.metrics["answered"] for r in reports][-1] == [s.name for s in series]
        for s in series:
            plan = program.plans[s.name]
            got = {e: c.read_flow(s.name, e) for e, _ in c.stored_increments(s.name)}
            assert sorted(got) == plan.schedule.occurrences(range(1, len(segments) + 1))
            for n, table in got.items():
                expected = duckdb_answer(s.sql, plan.schedule.window(n), segments)
                assert canon(table.to_pylist()) == canon(expected), (s.name, n)


def test_a_series_added_later_reads_kept_segments(spark, tmp_path):
    rng = random.Random(3)
    segments = [segment(rng, 20) for _ in range(5)]
    daily = Series("daily", "SELECT A, count(*) AS n FROM log GROUP BY A", {})
    weekly = Series("last3", "SELECT A, sum(B) AS s FROM log GROUP BY A",
                    {"log": "log[-2:0]"}, 1)
    home = str(tmp_path / "home")
    with Controller(home, dataflow([daily, weekly]), spark=spark, num_partitions=2) as c:
        for seg in segments[:3]:
            _ingest(c, tmp_path, seg)
        c.run()
    late = Series("pairs", "SELECT t.A AS A, count(*) AS n FROM t JOIN y ON t.D = y.D "
                  "GROUP BY t.A", {"t": "log", "y": "log[-1]"})
    with Controller(home, dataflow([daily, weekly, late]), spark=spark,
                    num_partitions=2) as c:
        for seg in segments[3:]:
            _ingest(c, tmp_path, seg)
        c.run()
        plan = c.dataflow.stages[series_stage_name("log")].program.plans["pairs"]
        for n in (4, 5):  # its first occurrence reads segment 3, kept raw for last3
            expected = duckdb_answer(late.sql, plan.schedule.window(n), segments)
            assert canon(c.read_flow("pairs", n).to_pylist()) == canon(expected)
        expected = duckdb_answer(weekly.sql, {"log": range(3, 6)}, segments)
        assert canon(c.read_flow("last3", 5).to_pylist()) == canon(expected)

        # ad hoc: last3's stored views where they match, kept raw segments otherwise
        answer, how = ad_hoc(home, spark, "log", weekly.sql, {"log": "log[-1:0]"},
                             dataflow=c.dataflow)
        want = duckdb_answer(weekly.sql, {"log": range(4, 6)}, segments)
        assert canon(r.asDict() for r in answer.collect()) == canon(want)
        assert how == [f"view {plan_view(c, 'last3')} (partial) of segments 4: stored "
                       "view; 5: stored view"]
        other = "SELECT C, count(*) AS n FROM log WHERE B > 2 GROUP BY C"
        answer, how = ad_hoc(home, spark, "log", other, {"log": "log[-1:0]"}, newest=5,
                             dataflow=c.dataflow)
        want = duckdb_answer(other, {"log": range(4, 6)}, segments)
        assert canon(r.asDict() for r in answer.collect()) == canon(want)
        assert how[0].endswith("4: raw segment; 5: raw segment")
        with pytest.raises(StrataError, match="segment 3 .* is no longer kept"):
            ad_hoc(home, spark, "log", other, {"log": "log[-2:0]"}, dataflow=c.dataflow)


def plan_view(c, series):
    [view] = c.dataflow.stages[series_stage_name("log")].program.plans[series].view_list()
    return view.fingerprint


def test_bad_data_in_a_window_names_the_series_and_commits_nothing(spark, tmp_path):
    ratio = Series("ratio", "SELECT A, sum(B) / sum(B - B) AS r FROM log GROUP BY A", {})
    fine = Series("fine", "SELECT A, count(*) AS n FROM log GROUP BY A", {})
    with Controller(str(tmp_path / "home"), dataflow([fine, ratio]), spark=spark,
                    num_partitions=2) as c:
        _ingest(c, tmp_path, segment(random.Random(1), 10))
        with pytest.raises(EpochError) as e:
            c.run()
        text = str(e.value)
        assert "series 'ratio'" in text and "'log_series'" in text and "epoch 1" in text
        assert "DIVIDE_BY_ZERO" in text
        assert c.runner.committed(c.dataflow.stages["log_series"]).epoch == 0
        assert not c.stored_increments("fine")  # no answer of the failed epoch


@pytest.mark.usefixtures("spark_plans")
def test_views_sharing_a_key_share_one_exchange_and_answer_as_duckdb(spark, tmp_path):
    """``shared_scan="prefix"``: the new segment's stored views that group by a shared key
    (here A) are computed in one pass whose one exchange hashes A; the others (D) by
    plans of their own. Every occurrence equals DuckDB's."""
    rng = random.Random(5)
    segments = [segment(rng, rng.choice([0, 40])) for _ in range(5)]
    series = [
        Series("abc", "SELECT A, B, C, count(*) AS n FROM log WHERE E > 2.0 GROUP BY A, B, C",
               {"log": "log[-1:0]"}),
        Series("ba", "SELECT B, A, sum(E) AS s, max(D) AS m FROM log WHERE A <> 'gb' "
               "GROUP BY B, A", {"log": "log[-2:0]"}),
        Series("d", "SELECT D, max(B) AS m FROM log GROUP BY D", {"log": "log[-1:0]"}),
        Series("a", "SELECT A, min(E) AS lo FROM log WHERE C = 'x' GROUP BY A",
               {"log": "log[-2:0]"}, 2),
    ]
    reports, scan = _answered_as_duckdb(spark, tmp_path, series, segments, "prefix")
    assert [(r.metrics["scan_plan"], r.metrics["views_in_jumbo_pass"])
            for r in reports] == [("prefix", 3)] * 5  # abc, ba and a; d on its own
    assert scan["plan"] == "prefix" and scan["forced"]
    assert scan_lines(scan)[0] == (
        "scan of the last segment: 3 stored partial views in one pass exchanging rows "
        "on their shared group key (set by the stage)")


def _answered_as_duckdb(spark, tmp_path, series, segments, shared_scan):
    """Run ``series`` over ``segments`` with ``shared_scan``, check every occurrence
    against DuckDB's, and give the epochs' reports and the last epoch's scan state."""
    df = dataflow(series, shared_scan=shared_scan)
    stage = df.stages[series_stage_name("log")]
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for seg in segments:
            _ingest(c, tmp_path, seg)
        reports = c.run()
        for s in series:
            plan = stage.program.plans[s.name]
            for n, _ in c.stored_increments(s.name):
                want = duckdb_answer(s.sql, plan.schedule.window(n), segments)
                assert canon(c.read_flow(s.name, n).to_pylist()) == canon(want), (s.name, n)
        return reports, c.runner.committed(stage).state["scan"]


@pytest.mark.usefixtures("spark_plans")
def test_views_with_the_same_keys_share_one_grouping_and_answer_as_duckdb(spark, tmp_path):
    """``shared_scan="reorder"``: the new segment's stored views that group by the same
    keys (A, B in either order), each with its own filter, are grouped once with the
    filters pulled above the grouping; the others (D) by plans of their own. Every
    occurrence equals DuckDB's, over segments where a group passes one filter, both or
    neither."""
    rng = random.Random(11)
    segments = [segment(rng, rng.choice([0, 40])) for _ in range(5)]
    series = [
        Series("ab", "SELECT A, B, count(*) AS n, sum(E) AS s FROM log WHERE E > 2.0 "
               "GROUP BY A, B", {"log": "log[-1:0]"}),
        Series("ba", "SELECT B, A, max(D) AS m, min(E) AS lo FROM log WHERE C = 'x' "
               "GROUP BY B, A", {"log": "log[-2:0]"}),
        Series("all", "SELECT A, B, avg(E) AS e, count(*) AS n FROM log GROUP BY A, B "
               "HAVING count(*) > 1", {"log": "log[-1:0]"}),
        Series("d", "SELECT D, max(B) AS m FROM log WHERE A <> 'gb' GROUP BY D",
               {"log": "log[-1:0]"}),
    ]
    reports, scan = _answered_as_duckdb(spark, tmp_path, series, segments, "reorder")
    assert [(r.metrics["scan_plan"], r.metrics["views_in_jumbo_pass"])
            for r in reports] == [("reordered", 3)] * 5  # ab, ba and all; d alone
    assert scan_lines(scan)[0] == (
        "scan of the last segment: 3 stored partial views in one grouping on their "
        "shared keys, filters pulled above it (set by the stage)")


@pytest.mark.usefixtures("spark_plans")
def test_an_answer_expected_large_is_computed_once(spark, tmp_path, monkeypatch, request):
    """An occurrence whose answer is expected to exceed what the driver writes (its
    window's views hold more rows together, or its last answer had more) is written by
    Spark at once: its window is read once, where collecting it first read it twice. A
    segment's stored view goes by the same rule (its segment's rows bound it), so every
    epoch reads less than when each tries the driver first. The answers equal DuckDB's
    either way; a one-row answer still goes by the driver."""
    import strata.series.epoch as epoch
    from strata.config import QUERY_DRIVER_ROWS

    spark.conf.set(QUERY_DRIVER_ROWS.name, "5")
    request.addfinalizer(lambda: spark.conf.unset(QUERY_DRIVER_ROWS.name))
    rng = random.Random(5)
    segments = [segment(rng, 40) for _ in range(6)]
    series = [Series("weekly", "SELECT A, B, count(*) AS n FROM log GROUP BY A, B",
                     {"log": "log[-2:0]"}, 3),
              Series("total", "SELECT count(*) AS n FROM log", {})]
    read = {}
    for route in ("expected", "collect first"):
        if route == "collect first":
            monkeypatch.setattr(epoch, "through_spark", lambda *a: False)
            monkeypatch.setattr(epoch, "view_through_spark", lambda *a: False)
        (tmp_path / route).mkdir()
        reports, _ = _answered_as_duckdb(spark, tmp_path / route, series, segments, False)
        read[route] = [r.metrics["spark_io"]["read"] for r in reports]
        assert [sorted(r.metrics["answered"]) for r in reports][2::3] == \
            [["total", "weekly"]] * 2
    # every epoch's views, and the weekly occurrences' answers, are computed once
    assert all(a < b for a, b in zip(read["expected"], read["collect first"], strict=True)), read
    home = tmp_path / "expected" / "home"
    files = {p.parent.parent.name: p.name for p in home.glob("flows/*/*/*.parquet")}
    assert files["total"] == "part-00000.parquet"  # written by the driver
    assert files["weekly"].endswith(".snappy.parquet")  # written by Spark


@pytest.mark.usefixtures("spark_plans")
def test_an_answer_reading_a_view_written_now_is_measured_whole(spark, tmp_path):
    """Today's view is kept (tomorrow's occurrence joins it) and read by today's answer,
    which runs after the view's write: run beside it, the two jobs shared the cached
    view's shuffle stage and Spark's status store recorded it as skipped in both, so
    the epoch's measured I/O (what the cost model learns from) lost the view."""
    rng = random.Random(3)
    segments = [segment(rng, 40) for _ in range(4)]
    joined = Series("joined", "SELECT t.A AS A, t.n AS today, y.n AS yesterday FROM "
                    "(SELECT A, count(*) AS n FROM today GROUP BY A) t JOIN "
                    "(SELECT A, count(*) AS n FROM yesterday GROUP BY A) y ON t.A = y.A",
                    {"today": "log", "yesterday": "log[-1]"})
    reports, _ = _answered_as_duckdb(spark, tmp_path, [joined], segments, False)
    io = [r.metrics["spark_io"] for r in reports]
    assert [r.metrics["answered"] for r in reports] == [[]] + [["joined"]] * 3
    assert all(e["shuffled"] > 0 for e in io), io  # every epoch aggregates its segment
    assert all(e["read"] > io[0]["read"] for e in io[1:]), io  # and reads yesterday's


def test_an_unknown_scan_plan_is_refused():
    with pytest.raises(StrataError, match="shared_scan is True, False, 'prefix', 'reorder'"):
        dataflow([Series("a", "SELECT A, count(*) AS n FROM log GROUP BY A", {})],
                  shared_scan="sometimes")
