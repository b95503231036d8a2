"""``strata series``: add, list, explain, run, show and drop against a home."""

from __future__ import annotations

import json
import random

import pyarrow.parquet as pq
import pytest

from tests.series.clicklog import DDL, canon, duckdb_answer, segment
from tests.test_cli import invoke, ok

WEEKLY = "SELECT A, B, count(*) AS hits FROM log WHERE A <> 'gb' GROUP BY A, B"
DAILY = "SELECT A, B, count(*) AS n FROM log WHERE A <> 'gb' GROUP BY A, B"


def _clicks_home(tmp_path):
    """A pipeline with the stream ``log`` only, registered in a new home."""
    pipeline = tmp_path / "clicks.py"
    pipeline.write_text("from strata import Dataflow\n\ndataflow = Dataflow('clicks')\n"
                        f"dataflow.source('log', {DDL!r})\n")
    home = tmp_path / "home"
    ok("run", pipeline, "--home", home)
    return pipeline, home


def test_series_from_the_cli(spark, tmp_path):
    pipeline, home = _clicks_home(tmp_path)
    rng = random.Random(5)
    segments = [segment(rng, 25) for _ in range(4)]

    def ingest(seg, i):
        path = tmp_path / f"seg{i}.parquet"
        pq.write_table(seg, path)
        ok("ingest", "log", path, "--home", home)

    for i, seg in enumerate(segments[:3]):  # stored before the series exist: backfilled
        ingest(seg, i)
    added = json.loads(ok("series", "add", "last2", WEEKLY, "--table", "log=log[-1:0]",
                          "--plan", "views", "--home", home, "--json").stdout)
    assert added["registered"] and added["decomposed"]
    explained = ok("series", "add", "daily", DAILY, "--shared-scan", "auto",
                   "--home", home).stdout
    assert "shared with last2" in explained  # the same filtered partial: one view
    assert "--shared-scan auto" in explained  # the stream's stage's, for both series
    refused = invoke("series", "add", "daily", DAILY, "--home", home)
    assert refused.exit_code == 1 and "--replace" in refused.output
    bad = invoke("series", "add", "odd", "SELECT A FROM log", "--table", "log=log[1]",
                 "--home", home)
    assert bad.exit_code == 1 and "≤ 0" in bad.output
    listed = json.loads(ok("series", "list", "--home", home, "--json").stdout)["series"]
    assert {s["name"] for s in listed} == {"last2", "daily"}
    assert {s["shared_scan"] for s in listed} == {"auto"}
    ok("run", pipeline, "--home", home)
    ingest(segments[3], 3)
    ok("run", pipeline, "--home", home)

    for n in (2, 3, 4):
        out = ok("series", "show", "last2", "--occurrence", n, "--home", home,
                 "--format", "jsonl").stdout
        got = [json.loads(line) for line in out.splitlines()]
        assert canon(got) == canon(duckdb_answer(WEEKLY, {"log": range(n - 1, n + 1)},
                                                 segments)), n
    daily = ok("series", "show", "daily", "--home", home, "--format", "jsonl").stdout
    assert canon([json.loads(line) for line in daily.splitlines()]) == canon(
        duckdb_answer(DAILY, {"log": range(4, 5)}, segments))
    # ad hoc: last2's stored partials where the query matches them, raw segments else
    asked = json.loads(ok("series", "query", WEEKLY, "--newest", 4, "--home", home,
                          "--json").stdout)
    assert asked["stream"] == "log" and asked["columns"] == ["A", "B", "hits"]
    assert canon(asked["records"]) == canon(duckdb_answer(WEEKLY, {"log": range(4, 5)},
                                                          segments))
    assert asked["sources"] == [f"view {asked['sources'][0].split()[1]} (partial) of "
                                "segments 4: stored view"]
    other = "SELECT C, max(B) AS top FROM log GROUP BY C"
    table = ok("series", "query", other, "--home", home).stdout
    assert "ad hoc query over log" in table and "segments 4: raw segment" in table
    gone = invoke("series", "query", other, "--table", "log=log[-1:0]", "--home", home)
    assert gone.exit_code == 1 and "segment 3 of 'log' is no longer kept" in gone.output
    assert "raw segments kept: 4;" in " ".join(gone.output.split())
    lines = ok("series", "query", other, "--home", home, "--format", "jsonl").stdout
    assert canon([json.loads(line) for line in lines.splitlines()]) == canon(
        duckdb_answer(other, {"log": range(4, 5)}, segments))
    unread = invoke("series", "query", other, "--newest", 9, "--home", home)
    assert unread.exit_code == 1 and "segment 9 of 'log' has not been read" in unread.output
    explained = ok("series", "explain", "last2", "--home", home).stdout
    assert "merge (⊗) the 2 partial(s)" in explained
    assert "plan at segment 4: views (forced by the series)" in explained
    assert "last epoch's I/O, measured by Spark" in explained  # beside any estimates
    daily = json.loads(ok("series", "explain", "daily", "--home", home, "--json").stdout)
    assert daily["plan"] in ("views", "raw")  # the cost model's, with both estimates
    assert set(daily["estimates"]) == {"views", "raw"}
    # per operator (the one view both series read): rows in and out per segment, as
    # exponential averages over the four segments read (weight 0.5 on the newest)
    [(fp, stats)] = daily["statistics"].items()
    groups = [len({(a, b) for a, b in zip(seg["A"].to_pylist(), seg["B"].to_pylist(),
                                           strict=True) if a != "gb"}) for seg in segments]
    rows = groups[0]
    for g in groups[1:]:
        rows = 0.5 * g + 0.5 * rows
    assert stats["rows_in"] == 25 and stats["rows"] == pytest.approx(rows)
    assert stats["selectivity"] == pytest.approx(rows / 25)
    assert stats["bytes_in"] > 0 and stats["bytes_out"] > 0
    text = " ".join(ok("series", "explain", "daily", "--home", home).stdout.split())
    assert f"view {fp} per segment: {rows:,.0f} rows out of 25 in" in text
    # the catalog's statistics, per epoch and operator: exact, not averaged
    views = {r["segment"]: r for r in daily["recorded"] if r["operator"] == f"view {fp}"}
    assert {j: (r["rows_in"], r["rows_out"]) for j, r in views.items()} == {
        j: (25, groups[j - 1]) for j in range(1, 5)}
    assert all(r["bytes_in"] > 0 and r["bytes_out"] > 0 for r in views.values())
    answers = [r for r in daily["recorded"] if r["operator"] == "answer daily"]
    assert [(r["segment"], r["rows_out"]) for r in answers] == [
        (n, len(duckdb_answer(DAILY, {"log": range(n, n + 1)}, segments)))
        for n in range(1, 5)]
    assert all(r["seconds"] >= 0 for r in answers)
    assert "recorded in the catalog, epoch 4 (segment 4):" in text
    assert f"view {fp}: 25 rows in, {groups[3]:,} rows out" in text
    stage = json.loads(ok("status", "--home", home, "--json").stdout)["stages"][0]
    assert stage["stage"] == "log_series" and stage["epochs"] == 4
    assert stage["summary"].startswith("segments 1–4 of the stream read")
    assert "log_series: segments 1–4" in ok("status", "--home", home).stdout
    ok("series", "drop", "daily", "--home", home)
    listed = json.loads(ok("series", "list", "--home", home, "--json").stdout)["series"]
    assert [(s["name"], s["shared_scan"]) for s in listed] == [("last2", "auto")]  # kept
    ok("series", "add", "daily2", DAILY, "--shared-scan", "prefix", "--home", home)
    again = json.loads(ok("series", "explain", "last2", "--home", home, "--json").stdout)
    assert again["shared_scan"] == "prefix"
    ok("series", "add", "daily2", DAILY, "--shared-scan", "reorder", "--replace",
       "--home", home)
    listed = json.loads(ok("series", "list", "--home", home, "--json").stdout)["series"]
    assert {s["shared_scan"] for s in listed} == {"reorder"}
    missing = invoke("series", "explain", "daily", "--home", home)
    assert missing.exit_code == 1 and "no series 'daily'" in missing.output


def test_correcting_a_segment_from_the_cli(spark, tmp_path):
    pipeline, home = _clicks_home(tmp_path)
    rng = random.Random(8)
    segments = [segment(rng, 20) for _ in range(3)]
    for i, seg in enumerate(segments):
        pq.write_table(seg, tmp_path / f"seg{i}.parquet")
        ok("ingest", "log", tmp_path / f"seg{i}.parquet", "--home", home)
    unset = invoke("series", "correct", "log", 2, tmp_path / "seg0.parquet", "--home", home)
    assert unset.exit_code == 1 and "no series on 'log' takes corrections" in unset.output
    nowhere = invoke("series", "correct", "logs", 2, tmp_path / "seg0.parquet", "--home", home)
    assert nowhere.exit_code == 1 and "no stream 'logs' (flows: log)" in nowhere.output
    ok("series", "add", "last2", WEEKLY, "--table", "log=log[-1:0]", "--lateness", 2,
       "--home", home)
    listed = json.loads(ok("series", "list", "--home", home, "--json").stdout)["series"]
    assert listed[0]["lateness"] == 2
    ok("run", pipeline, "--home", home)
    fixed = segment(rng, 30)
    pq.write_table(fixed, tmp_path / "fixed.parquet")
    old = invoke("series", "correct", "log", 1, tmp_path / "fixed.parquet", "--home", home)
    assert old.exit_code == 1 and "too old to correct" in old.output
    done = json.loads(ok("series", "correct", "log", 2, tmp_path / "fixed.parquet",
                         "--home", home, "--json").stdout)
    assert done == {"stream": "log", "segment": 2, "flow": "log_corrections",
                    "increment": 1, "records": 30, "emptied": False}
    ok("run", pipeline, "--home", home)
    corrected = [segments[0], fixed, segments[2]]
    for n in (2, 3):  # both occurrences read segment 2
        out = ok("series", "show", "last2", "--occurrence", n, "--home", home,
                 "--format", "jsonl").stdout
        assert canon([json.loads(line) for line in out.splitlines()]) == canon(
            duckdb_answer(WEEKLY, {"log": range(n - 1, n + 1)}, corrected)), n
    changes = ok("show", "last2_changes", "--home", home, "--format", "jsonl").stdout
    assert {json.loads(line)["_occurrence"] for line in changes.splitlines()} == {2, 3}
    status = json.loads(ok("status", "--home", home, "--json").stdout)["stages"][0]
    assert "1 correction epoch(s)" in status["summary"]
    # a segment whose rows were all wrong is emptied
    neither = invoke("series", "correct", "log", 3, "--home", home)
    assert neither.exit_code == 1 and "--empty" in neither.output
    both = invoke("series", "correct", "log", 3, tmp_path / "fixed.parquet", "--empty",
                  "--home", home)
    assert both.exit_code == 1 and "one of the two" in both.output
    emptied = ok("series", "correct", "log", 3, "--empty", "--home", home).stdout
    assert "segment 3 of log emptied" in " ".join(emptied.split())
    ok("run", pipeline, "--home", home)
    corrected[2] = segments[2].slice(0, 0)
    out = ok("series", "show", "last2", "--occurrence", 3, "--home", home,
             "--format", "jsonl").stdout
    assert canon([json.loads(line) for line in out.splitlines()]) == canon(
        duckdb_answer(WEEKLY, {"log": range(2, 4)}, corrected))


def test_correct_refuses_what_the_stage_would_drop(spark, tmp_path):
    """A series a pipeline declares (not registered with `strata series add`): a segment
    older than its lateness, or rows of other types than the stream's, are refused at
    the command, and nothing reaches the home."""
    pipeline = tmp_path / "clicks.py"
    pipeline.write_text(
        "from strata import Dataflow\nfrom strata.series import Series, add_series\n\n"
        f"dataflow = Dataflow('clicks')\ndataflow.source('log', {DDL!r})\n"
        f"add_series(dataflow, 'log', [Series('last2', {WEEKLY!r}, {{'log': 'log[-1:0]'}}, "
        "lateness=1)])\n")
    home = tmp_path / "home"
    ok("run", pipeline, "--home", home)
    rng = random.Random(3)
    for i in range(3):
        pq.write_table(segment(rng, 10), tmp_path / f"seg{i}.parquet")
        ok("ingest", "log", tmp_path / f"seg{i}.parquet", "--home", home)
    ok("run", pipeline, "--home", home)
    fixed = segment(rng, 5)
    pq.write_table(fixed, tmp_path / "fixed.parquet")
    before = json.loads(ok("status", "--home", home, "--json").stdout)
    old = invoke("series", "correct", "log", 2, tmp_path / "fixed.parquet", "--home", home)
    assert old.exit_code == 1 and "Traceback" not in old.output
    assert "segment 2 of 'log' is too old to correct" in " ".join(old.output.split())
    assert "newest 1 segment(s) (3–3)" in " ".join(old.output.split())
    texts = fixed.set_column(1, "B", fixed["B"].cast("string"))  # B is a bigint
    pq.write_table(texts, tmp_path / "texts.parquet")
    typed = invoke("series", "correct", "log", 3, tmp_path / "texts.parquet", "--home", home)
    assert typed.exit_code == 1 and "Traceback" not in typed.output
    assert "column 'B': file type string is not the flow's type int64" in " ".join(
        typed.output.split())
    assert json.loads(ok("status", "--home", home, "--json").stdout) == before
    done = json.loads(ok("series", "correct", "log", 3, tmp_path / "fixed.parquet",
                         "--home", home, "--json").stdout)
    assert done["increment"] == 1 and done["records"] == 5


def test_a_series_not_yet_answered_says_from_which_segment_it_will_be(spark, tmp_path):
    pipeline, home = _clicks_home(tmp_path)
    ok("series", "add", "weekly", "SELECT A, count(*) AS n FROM log GROUP BY A",
       "--table", "log=log[-6:0]", "--period", 7, "--home", home)
    before = invoke("series", "show", "weekly", "--home", home)
    assert before.exit_code == 1
    assert "has not answered an occurrence yet: its occurrences are due from segment 7 of " \
           "'log' on" in " ".join(before.output.split())
    pq.write_table(segment(random.Random(2), 10), tmp_path / "seg.parquet")
    ok("ingest", "log", tmp_path / "seg.parquet", "--home", home)
    ok("run", pipeline, "--home", home)
    after = " ".join(invoke("series", "show", "weekly", "--home", home).output.split())
    assert "due from segment 7 of 'log' on (segments 1–1 read)" in after
    unknown = invoke("series", "show", "nosuch", "--home", home)
    assert unknown.exit_code == 1 and "no series 'nosuch'" in unknown.output


def test_an_empty_answer_shows_zero_records(spark, tmp_path):
    pipeline, home = _clicks_home(tmp_path)
    ok("series", "add", "none", "SELECT A, count(*) AS n FROM log WHERE A = 'zz' GROUP BY A",
       "--home", home)
    pq.write_table(segment(random.Random(4), 10), tmp_path / "seg.parquet")
    ok("ingest", "log", tmp_path / "seg.parquet", "--home", home)
    ok("run", pipeline, "--home", home)
    shown = " ".join(ok("series", "show", "none", "--occurrence", 1, "--home", home)
                     .stdout.split())
    assert "none at occurrence 1: 0 records" in shown and "A" in shown and "n" in shown
