"""kill -9 during ``strata pipelines run`` (while ingesting, before publishing, in the
middle of replacing a table): the next run leaves every view as a recomputation has it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sdp.shop import ORACLE, copy_project, oracle, same, table, write_day


def run_cli(spec: Path, warehouse: Path, crash: str | None = None
            ) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env.pop("STRATA_CRASH_AT", None)
    if crash:
        env["STRATA_CRASH_AT"] = crash
    return subprocess.run([sys.executable, "-m", "strata.cli", "pipelines", "run", "--spec",
                           str(spec), "--warehouse", str(warehouse), "--master", "local[2]",
                           "--json"], capture_output=True, text=True, timeout=600, env=env)


CRASHES = ["sdp-publish:3", pytest.param("ingest-before-commit", marks=pytest.mark.slow),
           pytest.param("sdp-before-publish", marks=pytest.mark.slow)]


@pytest.mark.spark
@pytest.mark.parametrize("crash", CRASHES)
def test_a_killed_refresh_is_made_good_by_the_next(tmp_path, crash):
    project = tmp_path / "shop"
    spec, wh = copy_project(project), tmp_path / "warehouse"
    write_day(project, 1, 600)
    assert run_cli(spec, wh).returncode == 0
    write_day(project, 2, 600)
    died = run_cli(spec, wh, crash)
    assert died.returncode == -9, (died.stdout + died.stderr)[-2000:]
    again = run_cli(spec, wh)
    assert again.returncode == 0, (again.stdout + again.stderr)[-2000:]
    for view in ORACLE:
        same(table(wh / view), oracle(project, view), f"{view} after the crash at {crash}")
