"""The trace simulator counts what each way of running series reads and writes."""

from __future__ import annotations

import json

import pytest

from strata.model.errors import StrataError
from strata.series.simulate import generate_trace, simulate
from tests.test_cli import invoke, ok

COLUMNS = {"A": "string", "B": "bigint"}
SQL = "SELECT A, count(*) AS n FROM log GROUP BY A"


def test_a_daily_and_a_two_day_series_sharing_one_view():
    trace = {"days": 3, "streams": {"log": {"segment_bytes": 100, "columns": COLUMNS}},
             "series": [
                 {"name": "daily", "stream": "log", "sql": SQL, "view_ratio": 0.1},
                 {"name": "two", "stream": "log", "sql": SQL, "view_ratio": 0.1,
                  "tables": {"log": "log[-1:0]"}},
             ]}
    got = simulate(trace)
    # raw: daily reads 1 segment on days 1-3, two reads 2 on days 2-3
    assert got["without_sharing"] == {"read": 700, "written": 0}
    # shared: one scan a day; one view a day (two reads it the next day), read once each
    assert got["with_sharing"] == pytest.approx({"read": 320, "written": 30})
    assert got["io_saving"] == pytest.approx(0.5)
    assert got["views_written"] == 3


def test_generated_traces_are_the_papers_shape_and_deterministic():
    trace = generate_trace(series=300, streams=20, seed=3)
    assert trace == generate_trace(series=300, streams=20, seed=3)
    periods = [s["period"] for s in trace["series"]]
    assert 0.55 < periods.count(1) / len(periods) < 0.8
    assert 0 < simulate(trace)["io_saving"] < 1


def test_bad_traces_are_refused():
    with pytest.raises(StrataError, match="needs days"):
        simulate({"series": []})
    with pytest.raises(StrataError, match="unknown stream"):
        simulate({"days": 1, "streams": {}, "series": [
            {"name": "q", "stream": "nope", "sql": SQL}]})


def test_simulate_from_the_cli(tmp_path):
    path = tmp_path / "trace.json"
    ok("series", "trace", path, "--series", 200, "--streams", 10)
    out = json.loads(ok("series", "simulate", path, "--json").stdout)
    assert out["series"] == 200 and 0 < out["io_saving"] < 1
    assert "I/O saved" in ok("series", "simulate", path).stdout
    bad = invoke("series", "simulate", tmp_path / "missing.json")
    assert bad.exit_code != 0
