"""Late and corrected segments: a correction replaces a segment the stage has read, its
views are recomputed, and the occurrences whose windows contain it are re-emitted as
changes; every answer, as corrected, equals DuckDB's over the corrected segments."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.controller import Controller
from strata.model.errors import StrataError
from strata.series import Series, series_stage_name
from strata.series.adhoc import ad_hoc
from strata.series.answers import series_answer
from strata.series.corrections import correction, latest_per_segment
from strata.series.registry import check_correction
from strata.storage.increments import Increment
from tests.series.clicklog import SERIES, canon, dataflow, duckdb_answer, segment
from tests.series.test_random_series import series as random_series

LATENESS = 3


def _series() -> list[Series]:
    out = [Series(name, sql, tables, period, lateness=LATENESS)
           for name, sql, tables, period in SERIES]
    out[0] = Series(*SERIES[0][:3], lateness=0)  # later occurrences read corrected views
    out.append(Series("raw_window", "SELECT C, max(B) AS top, count(*) AS n FROM log "
                      "GROUP BY C", {"log": "log[-1:0]"}, plan="raw", lateness=2))
    return out


def _write(tmp_path, table, name):
    path = tmp_path / f"{name}.parquet"
    pq.write_table(table, path)
    return str(path)


def test_corrections_reemit_every_occurrence_they_touch(spark, tmp_path):
    rng = random.Random(11)
    segments = [segment(rng, rng.choice([6, 30])) for _ in range(7)]
    fixed = {4: segment(rng, 25), 5: segment(rng, 4)}
    series = _series()
    df = dataflow(series)
    assert "log_corrections" in df.flows and "raw_window_changes" in df.flows
    assert "q1_daily_grouping_changes" not in df.flows  # lateness 0: nothing re-emitted
    home = str(tmp_path / "home")
    stage = series_stage_name("log")
    program = df.stages[stage].program
    with Controller(home, df, spark=spark, num_partitions=2) as c:
        for i, seg in enumerate(segments[:5]):
            c.ingest("log", [_write(tmp_path, seg, f"seg{i}")])
        c.run()
        with pytest.raises(StrataError, match="segment 6 of 'log' has not been read"):
            check_correction(c.catalog, c.layout, "log", 6, LATENESS)
        with pytest.raises(StrataError, match="too old to correct.*newest 3 segment"):
            check_correction(c.catalog, c.layout, "log", 2, LATENESS)
        # one increment corrects 4 (and 1, too old: dropped); a later one 4 again and 5
        c.ingest("log_corrections", [_write(tmp_path, correction(segment(rng, 9), 4), "f1"),
                                     _write(tmp_path, correction(segments[0], 1), "f2")])
        c.ingest("log_corrections", [_write(tmp_path, correction(fixed[4], 4), "f3"),
                                     _write(tmp_path, correction(fixed[5], 5), "f4")])
        before = c.runner.committed(df.stages[stage]).state["stats"]
        [report] = c.run()
        assert report.epoch == 6
        _assert_statistics_take_corrections(before, c.runner.committed(df.stages[stage]).state)
        assert report.metrics["corrected_segments"] == [4, 5]
        assert report.metrics["corrections_too_late"] == [1]
        corrected = [fixed.get(j, s) for j, s in enumerate(segments, 1)]
        reemitted = report.metrics["reemitted"]
        assert reemitted["raw_window"] == [4, 5]  # windows 3-4 and 4-5 (lateness 2 covers 4)
        assert "q2_weekly_histogram" not in reemitted  # due at 3 (segments 1-3), then 6
        checked = 0
        for s in series:
            plan = program.plans[s.name]
            for m in plan.schedule.occurrences(range(1, 6)):
                window = plan.schedule.window(m)
                touched = s.lateness and any(
                    k in run and 5 - k < s.lateness for k in fixed for run in window.values())
                assert (m in reemitted.get(s.name, [])) == bool(touched), (s.name, m)
                data = corrected if touched else segments
                _, got = series_answer(home, s.name, m)
                assert canon(got.to_pylist()) == canon(duckdb_answer(s.sql, window, data)), \
                    (s.name, m)
                checked += 1
        assert checked > 20
        changes = c.read_flow("raw_window_changes", 6).to_pylist()
        assert {r["_occurrence"] for r in changes} == {4, 5}
        assert all(r["_mult"] != 0 for r in changes)

        # later segments read the corrected ones: views and kept raw segments alike
        for i, seg in enumerate(segments[5:], 6):
            c.ingest("log", [_write(tmp_path, seg, f"seg{i}")])
        c.run()
        for s in series:
            plan = program.plans[s.name]
            for m in plan.schedule.occurrences(range(6, 8)):
                window = plan.schedule.window(m)
                occurrence, got = series_answer(home, s.name, m)
                assert occurrence == m
                assert canon(got.to_pylist()) == canon(duckdb_answer(s.sql, window,
                                                                     corrected)), (s.name, m)
        newest, _ = series_answer(home, "raw_window")
        assert newest == 7
        assert [e for e, _ in c.stored_increments("raw_window")][-1] == 8  # shifted by one
        sql = "SELECT A, count(*) AS n FROM log GROUP BY A"
        answer, how = ad_hoc(home, spark, "log", sql, {"log": "log[-3:0]"}, dataflow=c.dataflow)
        want = duckdb_answer(sql, {"log": range(4, 8)}, corrected)
        assert canon(r.asDict() for r in answer.collect()) == canon(want)
        assert "4: raw segment" in how[0]


def _assert_statistics_take_corrections(before: dict, state: dict) -> None:
    """The cost model's statistics after corrections of segments 4 then 5: each corrected
    segment's column bytes (from its files' footers) and its recomputed views' bytes
    folded in, as a new segment's would be (an average weighing the newest by half)."""
    want = {"columns": dict(before["columns"]), "views": dict(before["views"])}
    for k in ("4", "5"):
        sizes: dict[str, int] = {}
        for f in state["replaced"][k]["files"]:
            meta = pq.read_metadata(f)
            for g in range(meta.num_row_groups):
                for i in range(meta.num_columns):
                    col = meta.row_group(g).column(i)
                    sizes[col.path_in_schema] = sizes.get(col.path_in_schema, 0) + \
                        col.total_compressed_size
        views = {fp: e[k]["bytes"] for fp, e in state["views"].items() if k in e}
        assert views, f"segment {k}'s views were recomputed and kept"
        for part, new in (("columns", sizes), ("views", views)):
            for name, size in new.items():
                old = want[part].get(name)
                want[part][name] = size if old is None else (size + old) / 2
    got = state["stats"]
    assert got["columns"] == pytest.approx(want["columns"])
    assert got["views"] == pytest.approx(want["views"])
    assert got["columns"] != before["columns"]
    assert got["answers"] == before["answers"]  # changes are not answers


@st.composite
def _corrections(draw, newest):
    """Distinct segments among the first ``newest`` (older ones may be too late), each
    with a row count for its replacement."""
    ks = draw(st.lists(st.integers(1, newest), unique=True, min_size=1, max_size=3))
    return [(k, draw(st.sampled_from([0, 1, 7, 20]))) for k in ks]  # 0: emptied


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(defs=st.lists(random_series(), min_size=1, max_size=3),
       lateness=st.tuples(st.integers(1, 3), st.integers(0, 3), st.integers(0, 3)),
       first=_corrections(4), second=_corrections(6), seed=st.integers(0, 10_000))
def test_random_series_with_late_segments_equal_duckdb(spark, defs, lateness, first,
                                                       second, seed):
    """Random series and corrections at two points of the stream: every occurrence's
    answer is DuckDB's over the segments as they were when it was last (re-)answered."""
    rng = random.Random(seed)
    series = [Series(f"s{i}", sql, {"log": spec}, period, lateness=lateness[i])
              for i, (sql, spec, period) in enumerate(defs)]
    df = dataflow(series)
    program = df.stages[series_stage_name("log")].program
    horizon = max(s.lateness for s in series)
    current: list = []
    expected: dict[tuple[str, int], list] = {}  # the segments an answer was computed on

    def answered(upto):
        for s in series:
            for m in program.plans[s.name].schedule.occurrences(range(1, upto + 1)):
                expected.setdefault((s.name, m), list(current))

    with tempfile.TemporaryDirectory() as tmp, \
            Controller(f"{tmp}/home", df, spark=spark, num_partitions=2) as c:
        def grow(count):
            for _ in range(count):
                current.append(segment(rng, rng.choice([0, 5, 25])))
                c.ingest("log", [_write(Path(tmp), current[-1], f"seg{len(current)}")])
            c.run()
            answered(len(current))

        def correct(fixes):
            n = len(current)
            rows = {k: segment(rng, count) for k, count in fixes}
            c.ingest("log_corrections", [_write(Path(tmp), correction(
                t, k, empty=t.num_rows == 0), f"fix{n}-{k}") for k, t in rows.items()])
            [report] = c.run()
            taken = sorted(k for k in rows if k > n - horizon)
            assert report.metrics["corrected_segments"] == taken
            for k in taken:
                current[k - 1] = rows[k]
            for s in series:
                schedule = program.plans[s.name].schedule
                for m in schedule.occurrences(range(1, n + 1)):
                    if any(k in r and n - k < s.lateness for k in taken
                           for r in schedule.window(m).values()):
                        expected[(s.name, m)] = list(current)

        grow(4)
        correct(first)
        grow(2)
        correct(second)
        for (name, m), segments in expected.items():
            sql = next(s.sql for s in series if s.name == name)
            _, got = series_answer(c.home, name, m)
            want = duckdb_answer(sql, program.plans[name].schedule.window(m), segments)
            assert canon(got.to_pylist()) == canon(want), (name, m)


def test_an_emptying_correction_is_a_marker_no_segment_reads(tmp_path):
    rows = segment(random.Random(2), 5)
    marker = correction(rows.slice(0, 0), 4, empty=True)
    assert marker.num_rows == 1 and marker.column("_segment").to_pylist() == [-4]
    assert marker.drop_columns(["_segment"]).to_pylist() == [
        dict.fromkeys(rows.column_names)]
    with pytest.raises(StrataError, match="--empty"):
        correction(rows.slice(0, 0), 4)
    with pytest.raises(StrataError, match="emptying segment 4 has no rows; 5"):
        correction(rows, 4, empty=True)
    # the later increment wins: segment 4 emptied, then given rows again; 5 emptied
    first = Increment((_write(tmp_path, marker, "a"),), 1, 0)
    second = Increment((_write(tmp_path, correction(rows, 4), "b"),
                        _write(tmp_path, correction(rows.slice(0, 0), 5, empty=True), "c")),
                       6, 0)
    assert latest_per_segment([first, second]) == {4: second, 5: second}
    assert latest_per_segment([second, first]) == {4: first, 5: second}


def test_a_series_that_changed_plans_retracts_exactly_the_rows_it_wrote(
        spark, tmp_path, monkeypatch):
    """Occurrences answered from views, re-emitted after the cost model moved the series
    to its raw plan: the changes retract the written rows (whose float averages the other
    plan computes differently in the last bits), so each answer as corrected is exact."""
    import strata.series.program as program_module

    rng = random.Random(5)
    segments = [segment(rng, 40) for _ in range(5)]
    fixed = segment(rng, 30)
    s = Series("means", "SELECT A, avg(E) AS mean, sum(B) AS s, count(*) AS n FROM log "
               "GROUP BY A", {"log": "log[-2:0]"}, lateness=3)
    df = dataflow([s])
    home = str(tmp_path / "home")
    stage = series_stage_name("log")
    with Controller(home, df, spark=spark, num_partitions=2) as c:
        monkeypatch.setattr(program_module, "choose", lambda *a, **k: ("views", {}))
        for i, seg in enumerate(segments):
            c.ingest("log", [_write(tmp_path, seg, f"seg{i}")])
        c.run()
        written = {m: canon(series_answer(home, "means", m)[1].to_pylist()) for m in (3, 4, 5)}
        monkeypatch.setattr(program_module, "choose", lambda *a, **k: ("raw", {}))
        c.ingest("log_corrections", [_write(tmp_path, correction(fixed, 4), "fix")])
        [report] = c.run()
        assert c.runner.committed(df.stages[stage]).state["choices"]["means"]["plan"] == "raw"
        assert report.metrics["reemitted"] == {"means": [4, 5]}
        corrected = [fixed if j == 4 else seg for j, seg in enumerate(segments, 1)]
        for m in (3, 4, 5):
            window = {"log": range(m - 2, m + 1)}
            _, got = series_answer(home, "means", m)
            data = corrected if m >= 4 else segments
            assert canon(got.to_pylist()) == canon(duckdb_answer(s.sql, window, data)), m
            assert len(got) == len({r["A"] for r in got.to_pylist()}), m  # one row per group
        assert canon(series_answer(home, "means", 3)[1].to_pylist()) == written[3]
