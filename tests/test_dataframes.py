"""DataFrames in (an increment from a Spark DataFrame, table or query) and tables out
(temporary views, Parquet exports)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import strata
from strata.apps.urlcount import urlcount_dataflow
from strata.cli import app
from strata.controller import Controller
from strata.controller.readers import IngestError

SAMPLE = Path(strata.__file__).parent / "data" / "sample" / "urls"
runner = CliRunner()


def ok(*args: object):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result


def test_a_dataframe_is_one_increment_and_flows_come_back_as_views(spark, tmp_path):
    urls = spark.read.json(str(SAMPLE / "day-1.jsonl")).select("url")
    with Controller(tmp_path / "home", urlcount_dataflow(), spark=spark) as c:
        assert c.ingest("urls", urls) == 1
        assert c.stored_increments("urls")[0][1].records == urls.count()
        c.run()
        names = c.create_temp_views()
        assert "counts" in names  # urls: its increment was read and deleted
        got = {r["url"]: r["n"] for r in spark.sql(
            "SELECT url, max(count) AS n FROM counts GROUP BY url").collect()}
    assert got == Counter(r["url"] for r in urls.collect())


def test_a_dataframe_that_does_not_fit_is_refused_whole(spark, tmp_path):
    with Controller(tmp_path / "home", urlcount_dataflow(), spark=spark) as c:
        bad = spark.createDataFrame([(1, "x")], "url long, extra string")
        with pytest.raises(IngestError) as e:
            c.ingest("urls", bad)
        assert "column 'url' is bigint, the flow's is string" in str(e.value)
        assert "extra column(s) extra" in str(e.value)
        assert c.stored_increments("urls") == []
        assert not list((tmp_path / "home" / "incoming").glob("urls/*"))


def test_widening_casts_are_applied(spark, tmp_path):
    from strata import Dataflow

    df = Dataflow("nums")
    df.source("n", "k long, x double")
    with Controller(tmp_path / "home", df, spark=spark) as c:
        c.ingest("n", spark.createDataFrame([(1, 2.5)], "k int, x float"))
        assert c.read_flow("n").to_pylist() == [{"k": 1, "x": 2.5}]


def test_cli_ingests_a_table_and_a_query_and_exports_parquet(spark, tmp_path):
    home = tmp_path / "home"
    pipeline = Path(__file__).parent / "pipelines" / "urlcount_pipeline.py"
    ok("run", pipeline, "--home", home)
    spark.read.json(str(SAMPLE / "day-1.jsonl")).select("url").createOrReplaceTempView("day1")
    ok("ingest", "urls", "--home", home, "--from-table", "day1")
    ok("ingest", "urls", "--home", home, "--sql", "SELECT url FROM day1 WHERE url LIKE '%a%'")
    bad = runner.invoke(app, ["ingest", "urls", "--home", str(home), "--sql", "SELECT nope"])
    assert bad.exit_code == 1 and "Spark cannot read query" in bad.stderr
    both = runner.invoke(app, ["ingest", "urls", "--home", str(home), "--from-table", "day1",
                               str(SAMPLE / "day-1.jsonl")])
    assert both.exit_code == 1 and "exactly one source" in both.stderr
    ok("run", pipeline, "--home", home)
    out = json.loads(ok("export", "counts", "--home", home, "--all", "--out",
                        tmp_path / "export", "--json").stdout)
    table = pq.read_table(tmp_path / "export")
    assert out["rows"] == table.num_rows and set(table.column_names) == {"url", "count",
                                                                          "_epoch"}
    day1 = [r["url"] for r in spark.table("day1").collect()]
    latest = {}
    for r in sorted(table.to_pylist(), key=lambda r: r["_epoch"]):
        latest[r["url"]] = r["count"]
    assert latest == Counter(day1 + [u for u in day1 if "a" in u])
