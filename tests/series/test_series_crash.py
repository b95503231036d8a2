"""kill -9 inside the series stage's epochs: after recovery every occurrence equals
DuckDB's answer, each is delivered once, and no view file is left that the manifest does
not name.

A chain of worker processes runs the series pipeline (:mod:`tests.recovery.series_pipeline`)
over one home, each killed with SIGKILL at a crash point: after a jumbo pass wrote the
views of a segment (before any answer), before the manifest, between the manifest and
``CURRENT``, and after the commit before the catalog applied it; then inside the epoch
that corrects two segments, after it replaced their views and after it re-emitted the
occurrences that read them. This process finishes, and every answer, with the changes
re-emitted, equals DuckDB's over the corrected segments."""

from __future__ import annotations

import pytest

from strata.controller import Controller
from strata.series import series_stage_name
from strata.series.answers import series_answer
from strata.storage import fs
from strata.storage.home import Home
from strata.storage.manifest import StateDir
from tests.recovery import series_pipeline
from tests.recovery.harness import ingest_all, kill_at_each
from tests.series.clicklog import canon, duckdb_answer

PIPELINE = "tests.recovery.series_pipeline"
POINTS = ["series-after-views:2", "before-manifest:2", "between-manifest-and-current:2",
          "after-spark-commit:1", "series-after-corrected-views:1", "series-after-reemit:1"]
# `make test` kills at the points only a series epoch has (the others are killed at in
# every kind's tests/test_recovery.py); all of them in the slow tier
SERIES_POINTS = [p for p in POINTS if p.startswith("series-")]


@pytest.mark.parametrize("points", [
    pytest.param(SERIES_POINTS, id="own-points"),
    pytest.param(POINTS, id="all-points", marks=pytest.mark.slow)])
def test_kill_9_inside_series_epochs(spark, tmp_path, points):
    home = tmp_path / "home"
    ingest_all(home, PIPELINE)
    logs = kill_at_each(home, points, PIPELINE)
    stage = series_stage_name("log")
    segments, corrected = series_pipeline.segments(), series_pipeline.corrected()
    with Controller(home, series_pipeline.build_dataflow(), spark=spark,
                    num_partitions=2) as c:
        c.run()
        assert not c.catalog.unapplied()
        assert c.catalog.stage_row(stage).epochs == len(segments) + 1, logs  # + correction
        program = c.dataflow.stages[stage].program
        for s in series_pipeline.SERIES:
            schedule = program.plans[s.name].schedule
            stored = [e for e, _ in c.stored_increments(s.name)]
            assert stored == schedule.occurrences(range(1, len(segments) + 1)), (s.name, logs)
            for n in stored:  # daily does not re-emit, the others do for 4 and 5
                touched = s.lateness and any(k in r for k in series_pipeline.CORRECTED
                                             for r in schedule.window(n).values())
                want = duckdb_answer(s.sql, schedule.window(n),
                                     corrected if touched else segments)
                _, got = series_answer(c.home, s.name, n)
                assert canon(got.to_pylist()) == canon(want), (s.name, n, logs)
        layout = Home(c.home).stage(stage)
        snap = StateDir(layout).current()
        named = {f for by_segment in snap.state["views"].values()
                 for e in by_segment.values() for f in e["files"]}
        assert named, logs
        root = layout.program_dir("views")  # jumbo passes: views/<attempt>/_b=<i>/<file>
        on_disk = {fs.join(root, a, v, f) for a in fs.list_dir(root)
                   for v in fs.list_dir(fs.join(root, a))
                   for f in fs.list_dir(fs.join(root, a, v))}
        on_disk |= {fs.join(layout.table_dir(t), f) for t in fs.list_dir(layout.tables_root)
                    for f in fs.list_dir(layout.table_dir(t))}  # co-located views
        fixed = layout.program_dir("segments")  # corrected raw segments
        on_disk |= {fs.join(fixed, d, f) for d in fs.list_dir(fixed)
                    for f in fs.list_dir(fs.join(fixed, d))}
        named |= {f for e in snap.state["replaced"].values() for f in e["files"]}
        assert len(snap.state["replaced"]) == 2, logs
        assert on_disk == named, (sorted(on_disk ^ named), logs)
        assert not fs.list_dir(layout.staging_dir()), logs
