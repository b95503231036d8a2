"""Late and corrected segments: a correction replaces a segment the stage has read, its
views are recomputed, and the occurrences whose windows contain it are re-emitted as
changes; every answer, as corrected, equals DuckDB's over the corrected segments."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest

from strata import Dataflow
from strata.controller import Controller
from strata.model.errors import StrataError
from strata.series import Series, add_series, series_stage_name
from strata.series.adhoc import ad_hoc
from strata.series.answers import series_answer
from strata.series.corrections import correction
from strata.series.registry import check_correction
from tests.series.clicklog import DDL, SERIES, canon, duckdb_answer, segment

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
    df = Dataflow("clicks")
    df.source("log", DDL)
    add_series(df, "log", series)
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
        [report] = c.run()
        assert report.epoch == 6
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
