"""Parquet files ingested by reference: read in place, checked at ingest and before each
epoch, never deleted by strata."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from strata.apps.urlcount import urlcount_dataflow
from strata.controller import Controller, IngestError
from strata.model.errors import StrataError


def _write(path: Path, urls: list[str]) -> Path:
    pq.write_table(pa.table({"url": urls}), path)
    return path


def test_referenced_files_are_read_in_place_and_never_deleted(spark, tmp_path):
    landed = tmp_path / "landing"
    landed.mkdir()
    days = [_write(landed / "d1.parquet", ["a", "b", "a"]),
            _write(landed / "d2.parquet", ["b", "c"])]
    copied = tmp_path / "copy"
    with Controller(tmp_path / "home", urlcount_dataflow(), spark=spark,
                    num_partitions=2) as c, \
            Controller(copied, urlcount_dataflow(), spark=spark, num_partitions=2) as twin:
        n = c.ingest("urls", [days[0]], by_reference=True)
        [(epoch, inc)] = c.stored_increments("urls")
        assert (n, epoch) == (1, 1)
        assert inc.files == (str(days[0]),) and inc.records == 3
        assert inc.bytes == days[0].stat().st_size
        c.run()
        c.ingest("urls", [days[1]], by_reference=True)
        c.run()
        for day in days:
            twin.ingest("urls", [day])
            twin.run()
        by_reference, by_copy = c.read_flow("counts"), twin.read_flow("counts")
        # consumed, so forgotten by the catalog; the files and their folder stay
        assert c.stored_increments("urls") == []
    assert all(d.exists() for d in days) and sorted(p.name for p in landed.iterdir()) == [
        "d1.parquet", "d2.parquet"]
    assert not list((tmp_path / "home").rglob("d1.parquet"))  # nothing copied
    rows = sorted((r["url"], r["count"]) for r in by_reference.to_pylist())
    assert rows == sorted((r["url"], r["count"]) for r in by_copy.to_pylist())
    assert rows == [("a", 2), ("b", 1), ("b", 2), ("c", 1)]


@pytest.mark.parametrize("columns, expect", [
    ({"url": ["a"], "n": [1]}, "columns ['url', 'n'] are not those of flow 'urls'"),
    ({"url": [1]}, "column 'url': the file's type int64 is not flow 'urls''s type string"),
])
def test_a_file_that_does_not_match_the_schema_exactly_is_refused(spark, tmp_path,
                                                                   columns, expect):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), bad)
    with Controller(tmp_path / "home", urlcount_dataflow(), spark=spark) as c:
        with pytest.raises(IngestError) as e:
            c.ingest("urls", [bad], by_reference=True)
        assert expect in str(e.value) and "without --by-reference" in str(e.value)
        assert c.stored_increments("urls") == []
        csv = tmp_path / "urls.csv"
        csv.write_text("url\na\n")
        with pytest.raises(IngestError, match="only Parquet files"):
            c.ingest("urls", [csv], by_reference=True)
        with pytest.raises(IngestError, match="only files"):
            c.ingest("urls", [{"url": "a"}], by_reference=True)
        inside = _write(tmp_path / "home" / "mine.parquet", ["a"])
        with pytest.raises(IngestError, match="is inside the home"):
            c.ingest("urls", [inside], by_reference=True)


def test_a_referenced_file_gone_or_changed_stops_the_epoch_before_it_commits(spark, tmp_path):
    day = _write(tmp_path / "d1.parquet", ["a", "b"])
    with Controller(tmp_path / "home", urlcount_dataflow(), spark=spark,
                    num_partitions=2) as c:
        c.ingest("urls", [day], by_reference=True)
        kept = day.read_bytes()
        day.unlink()
        with pytest.raises(StrataError) as gone:
            c.run()
        msg = str(gone.value)
        assert "stage 'count', epoch 1, flow 'urls'" in msg and "is gone" in msg
        assert "Nothing was committed" in msg
        _write(day, ["a", "b", "c", "d"])  # rewritten with other rows
        with pytest.raises(StrataError, match="changed since ingest"):
            c.run()
        assert c.catalog.stage_row("count").epochs == 0 and c.read_flow("counts").num_rows == 0
        day.write_bytes(kept)  # put back as it was: the epoch runs
        [report] = c.run()
        assert report.epoch == 1
        assert sorted(r["url"] for r in c.read_flow("counts").to_pylist()) == ["a", "b"]


def test_ingest_by_reference_from_the_cli(spark, tmp_path):
    from strata.cli import app

    pipeline = tmp_path / "p.py"
    pipeline.write_text("from strata.apps.urlcount import urlcount_dataflow\n"
                        "dataflow = urlcount_dataflow()\n")
    home, day = tmp_path / "home", _write(tmp_path / "d1.parquet", ["a", "a"])
    cli = CliRunner()
    assert cli.invoke(app, ["run", str(pipeline), "--home", str(home)]).exit_code == 0
    done = cli.invoke(app, ["ingest", "urls", str(day), "--by-reference", "--home", str(home),
                            "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["by_reference"] is True
    status = json.loads(cli.invoke(app, ["status", "--home", str(home), "--json"]).stdout)
    assert status["referenced_files"] == [{"flow": "urls", "increment": 1, "file": str(day)}]
    table = cli.invoke(app, ["status", "--home", str(home)], env={"COLUMNS": "250"}).stdout
    assert "files ingested by reference" in table and str(day) in table
    refused = cli.invoke(app, ["ingest", "urls", "--sql", "SELECT 'a' AS url",
                               "--by-reference", "--home", str(home)])
    assert refused.exit_code == 1 and "--by-reference takes Parquet files" in refused.output
    assert cli.invoke(app, ["run", str(pipeline), "--home", str(home)]).exit_code == 0
    shown = cli.invoke(app, ["show", "counts", "--home", str(home), "--format", "jsonl"])
    assert [json.loads(line) for line in shown.stdout.splitlines()] == [{"url": "a",
                                                                         "count": 2}]
    assert day.exists()
    status = json.loads(cli.invoke(app, ["status", "--home", str(home), "--json"]).stdout)
    assert status["referenced_files"] == []  # read and consumed: the file is free again


# after-spark-commit with plain increments: tests/test_recovery.py; here in the slow tier
@pytest.mark.parametrize("crash_at", ["ingest-before-commit",
                                      pytest.param("after-spark-commit", marks=pytest.mark.slow)])
def test_kill_9_with_a_referenced_file_loses_nothing_and_leaves_it_alone(spark, tmp_path,
                                                                         crash_at):
    """``strata ingest --by-reference`` killed before its commit records nothing; ``strata
    run`` killed after its epoch's Spark commit is finished by the next run. Either way the
    referenced file is byte for byte what it was."""
    import os
    import subprocess
    import sys

    from strata.cli import app

    pipeline = tmp_path / "p.py"
    pipeline.write_text("from strata.apps.urlcount import urlcount_dataflow\n"
                        "dataflow = urlcount_dataflow()\n")
    home, day = tmp_path / "home", _write(tmp_path / "d1.parquet", ["a", "b", "a"])
    before = day.read_bytes()
    cli = CliRunner()

    def strata(*args: str, crash: str | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        if crash:
            env["STRATA_CRASH_AT"] = crash
        return subprocess.run([sys.executable, "-m", "strata.cli", *args, "--home",
                               str(home)], env=env, capture_output=True, text=True)

    assert cli.invoke(app, ["run", str(pipeline), "--home", str(home)]).exit_code == 0
    ingest = ("ingest", "urls", str(day), "--by-reference")
    if crash_at == "ingest-before-commit":
        assert strata(*ingest, crash=crash_at).returncode == -9
        assert not (home / "incoming").exists() or not any((home / "incoming").rglob("*"))
        status = json.loads(cli.invoke(app, ["status", "--home", str(home), "--json"]).stdout)
        assert status["connectors"][0]["queued"] == 0
        assert strata(*ingest).returncode == 0
    else:
        assert strata(*ingest).returncode == 0
        assert strata("run", str(pipeline), crash=crash_at).returncode == -9
    done = strata("run", str(pipeline))
    assert done.returncode == 0, done.stderr[-2000:]
    shown = cli.invoke(app, ["show", "counts", "--home", str(home), "--format", "jsonl"])
    assert sorted((r["url"], r["count"]) for r in map(json.loads, shown.stdout.splitlines())
                  ) == [("a", 2), ("b", 1)]
    assert day.read_bytes() == before
