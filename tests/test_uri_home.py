"""Homes given as URIs (``file://`` here, standing in for ``hdfs://`` and object stores),
with the SQLite catalog and lock at a local path named by ``--catalog``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from strata import demo
from strata.storage import fs
from tests.recovery.harness import PIPELINE, crash_run, ingest_all, run_here
from tests.test_cli import DAYS, URLCOUNT, invoke, ok

REMEDY = "give --catalog PATH, a local path for the SQLite catalog"


def test_one_spelling_for_each_location(tmp_path):
    plain = str(tmp_path / "h")
    for spelt in (plain, plain + "/", f"file:{plain}", f"file://{plain}",
                  f"file://localhost{plain}"):
        assert fs.key(fs.normalize(spelt)) == plain, spelt
        assert fs.is_local(spelt)
        assert fs.resolve(fs.normalize(spelt))[1] == plain
    assert fs.normalize(f"file:{plain}") == f"file://{plain}"
    assert fs.normalize("hdfs://nn:8020/data/h/") == "hdfs://nn:8020/data/h"
    assert not fs.is_local("s3a://bucket/x") and fs.scheme("S3A://b") == "s3a"


def _counts(home: str, *catalog: str) -> dict[str, int]:
    lines = ok("show", "counts", "--home", home, *catalog, "--all", "--format",
               "jsonl").stdout.splitlines()
    got: dict[str, int] = {}
    for r in map(json.loads, lines):
        got[r["url"]] = got.get(r["url"], 0) + r["count"]
    return got


def _run_two_days(home: str, *catalog: str) -> dict:
    ok("run", URLCOUNT, "--home", home, *catalog)
    for day in DAYS[:2]:
        ok("ingest", "--home", home, *catalog, "urls", day)
    return json.loads(ok("run", URLCOUNT, "--home", home, *catalog, "--json").stdout)


def test_file_uri_home_gives_the_plain_paths_answer(spark, tmp_path):
    ran = _run_two_days(f"file://{tmp_path}/uri")
    assert ran["epochs"] == 2 and ran["home"] == f"file://{tmp_path}/uri"
    _run_two_days(str(tmp_path / "plain"))
    assert (tmp_path / "uri" / "catalog.sqlite").is_file()
    got = _counts(f"file://{tmp_path}/uri")
    assert got and got == _counts(str(tmp_path / "plain"))
    # the same directory spelt as a plain path is the same home (nothing swept)
    assert _counts(str(tmp_path / "uri")) == got


def test_catalog_elsewhere_and_a_second_run_reads_it(spark, tmp_path):
    home, cat = f"file://{tmp_path}/shared/h", str(tmp_path / "local" / "h.sqlite")
    assert _run_two_days(home, "--catalog", cat)["epochs"] == 2
    assert Path(cat).is_file() and Path(cat + ".lock").is_file()
    assert not (tmp_path / "shared" / "h" / "catalog.sqlite").exists()
    ok("ingest", "--home", home, "--catalog", cat, "urls", DAYS[2])
    again = json.loads(ok("run", URLCOUNT, "--home", home, "--catalog", cat, "--json").stdout)
    assert again["epochs"] == 1 and [r["epoch"] for r in again["reports"]] == [3]
    status = json.loads(ok("status", "--home", home, "--catalog", cat, "--json").stdout)
    assert status["stages"][0]["epochs"] == 3
    # without its catalog the home is refused, not opened with a fresh (empty) one
    for verb in (["status"], ["run", URLCOUNT]):
        res = invoke(*verb, "--home", home)
        assert res.exit_code == 1 and "Traceback" not in res.output
        assert f"keeps its catalog at {cat}" in res.output and f"--catalog {cat}" in res.output
    assert json.loads(ok("status", "--home", home, "--catalog", cat, "--json").stdout
                      )["stages"][0]["epochs"] == 3


def test_object_store_home_needs_a_local_catalog(tmp_path):
    for verb in (["status"], ["run", URLCOUNT], ["ingest", "urls", DAYS[0]],
                 ["show", "counts"]):
        res = invoke(*verb, "--home", "s3a://bucket/x")
        assert res.exit_code == 1, (verb, res.output)
        assert REMEDY in " ".join(res.output.split()) and "Traceback" not in res.output
    res = invoke("status", "--home", "s3a://bucket/x", "--catalog", "s3a://bucket/c.sqlite")
    assert res.exit_code == 1 and "needs a local (or mounted) path" in res.output
    assert "Traceback" not in res.output


def test_demo_with_a_file_uri_home(spark, tmp_path):
    assert demo.main(["--home", f"file://{tmp_path}/demo"]) == 0  # counts match Spark SQL
    assert sorted(os.listdir(tmp_path / "demo")) == ["flows", "inbox", "state"]


# inside-apply is killed on a plain home in tests/test_recovery.py; here in the slow tier
@pytest.mark.parametrize("point", ["after-spark-commit:3",
                                   pytest.param("inside-apply:2", marks=pytest.mark.slow)])
def test_kill_9_on_a_uri_home_with_the_catalog_elsewhere(spark, tmp_path, point):
    """Killed with SIGKILL mid-run, the run after it recovers to an uninterrupted run's
    result (outputs by epoch and state), on a file:// home with the catalog elsewhere."""
    flows, states = ("counts", "hourly"), ("count", "per_hour")
    home, cat = f"file://{tmp_path}/uri", str(tmp_path / "cat" / "c.sqlite")
    assert crash_run(home, point, catalog=cat), point
    got = run_here(home, PIPELINE, spark, flows, states, catalog=cat)
    ingest_all(tmp_path / "plain")
    expected = run_here(tmp_path / "plain", PIPELINE, spark, flows, states)
    assert got == expected and got[0]["counts"], f"after kill at {point}"
