"""kill -9 inside vectorized epochs: after recovery every epoch's outputs equal an
uninterrupted run's, and the only columnar runs on disk are those the manifest names.

Worker processes run :mod:`tests.recovery.vectorized_pipeline` over one home, each
killed with SIGKILL at a crash point (during the Spark job, before the manifest, between
the manifest and ``CURRENT``, after the commit before the catalog applied it); this
process finishes the run."""

from __future__ import annotations

import pytest

from strata.storage import fs
from strata.storage.home import Home
from strata.storage.manifest import StateDir
from tests.recovery import vectorized_pipeline
from tests.recovery.harness import ingest_all, kill_at_each, run_here

PIPELINE = "tests.recovery.vectorized_pipeline"
POINTS = ["during-job:2", "before-manifest:3", "between-manifest-and-current:2",
          "after-spark-commit:2"]
# `make test`: during the vectorized job and after its commit; all of them in the slow tier
VECTORIZED_POINTS = ["during-job:2", "after-spark-commit:2"]
FLOWS = ("totals", "decayed")
STATES = ("net", "decay")


@pytest.mark.parametrize("points", [
    pytest.param(VECTORIZED_POINTS, id="own-points"),
    pytest.param(POINTS, id="all-points", marks=pytest.mark.slow)])
def test_kill_9_inside_vectorized_epochs(spark, tmp_path, points):
    clean = tmp_path / "clean"
    ingest_all(clean, PIPELINE)
    want, want_state = run_here(clean, PIPELINE, spark, FLOWS, STATES)
    assert all(len(v) == vectorized_pipeline.EPOCHS for v in want.values())
    home = tmp_path / "home"
    ingest_all(home, PIPELINE)
    logs = kill_at_each(home, points, PIPELINE)
    got, got_state = run_here(home, PIPELINE, spark, FLOWS, STATES)
    assert got == want, logs
    for stage in STATES:
        assert got_state[stage] == want_state[stage], logs
        layout = Home(home).stage(stage)
        snap = StateDir(layout).current()
        named = {f"{r['run_id']}.arrow" for rs in snap.state["runs"].values() for r in rs}
        on_disk = {name for p in fs.list_dir(layout.program_dir("columns"))
                   for name in fs.list_dir(fs.join(layout.program_dir("columns"), p))}
        assert named and on_disk == named, (stage, logs)
