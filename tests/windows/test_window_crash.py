"""kill -9 inside window epochs: after recovery every epoch's results and C2 equal an
uninterrupted run's, and no state file is left that the manifest does not name.

Worker processes run the window pipeline (:mod:`tests.recovery.window_pipeline`) over one
home, each killed with SIGKILL at a crash point: after an epoch wrote its cells (before
its results), before the manifest, between the manifest and ``CURRENT``, and after the
commit before the catalog applied it. This process finishes the run."""

from __future__ import annotations

import pytest

from strata.storage import fs
from strata.storage.home import Home
from strata.storage.manifest import StateDir
from strata.windows.program import WindowProgram
from tests.recovery import window_pipeline
from tests.recovery.harness import ingest_all, kill_at_each, run_here
from tests.windows.weblog import LOOP_STORES

PIPELINE = "tests.recovery.window_pipeline"
EXECUTORS_PIPELINE = "tests.recovery.window_executors_pipeline"
POINTS = ["windows-after-cells:2", "before-manifest:2", "between-manifest-and-current:1",
          "after-spark-commit:1"]
# `make test`: the point only a window epoch has and the switch of its state manifest;
# all of them in the slow tier
WINDOW_POINTS = ["windows-after-cells:2", "between-manifest-and-current:1"]
FLOWS = ("w_windows", "w_c2")


@LOOP_STORES
@pytest.mark.parametrize("points", [
    pytest.param(WINDOW_POINTS, id="own-points"),
    pytest.param(POINTS, id="all-points", marks=pytest.mark.slow)])
def test_kill_9_inside_window_epochs(spark, store, tmp_path, points):
    """Over either pane store: the workers' session gets the test's (the pipeline's
    ``SPARK_CONF``), and a stage keeps the store its first epoch chose."""
    pipeline = PIPELINE if store == "driver" else EXECUTORS_PIPELINE
    clean = tmp_path / "clean"
    ingest_all(clean, pipeline)
    want, _ = run_here(clean, pipeline, spark, FLOWS)
    assert sum(len(v) for v in want.values()) >= 2 * window_pipeline.EPOCHS
    home = tmp_path / "home"
    ingest_all(home, pipeline)
    logs = kill_at_each(home, points, pipeline)
    got, _ = run_here(home, pipeline, spark, FLOWS)
    assert got == want, logs
    layout = Home(home).stage("w")
    snap = StateDir(layout).current()
    assert snap.state["store"] == store
    named = WindowProgram.live_files(snap.state)
    assert named, logs
    assert set(fs.list_dir(layout.program_dir("windows"))) == named, logs
