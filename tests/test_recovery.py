"""kill -9 at many points of a run, then run again: the result equals an uninterrupted run."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from strata.controller import Controller
from strata.physical.runner import SparkStageRunner
from strata.storage.increments import read_records
from tests.recovery.harness import crash_run, ingest_all
from tests.recovery.pipeline import build_dataflow

DRIVER_PIPELINE = "tests.recovery.driver_pipeline"

# Named crash points (strata.faults) and which occurrence to die at: before and after
# the write-ahead intent, during the Spark job, around the state manifest switch,
# inside the catalog transaction that applies an epoch, in framing, in GC. `make test`
# kills at each point once, at an occurrence with epochs committed before it where the
# point has one; the other occurrences and two kills after a delay are `slow`.
CRASH_POINTS = [
    "after-intent:1", "during-job:3", "before-manifest:3", "between-manifest-and-current:2",
    "after-manifest:2", "after-spark-commit:6", "inside-apply:2", "after-apply:3",
    "gc-after-commit:4", "framing-before-commit:1",
]
MORE_CRASH_POINTS = [
    "after-intent:2", "after-intent:4", "during-job:1", "before-manifest:1",
    "between-manifest-and-current:1", "between-manifest-and-current:5",
    "after-spark-commit:1", "after-spark-commit:3", "inside-apply:1", "inside-apply:5",
    "gc-after-commit:1", "after-apply:1",
]


def _results(home: Path, spark) -> dict:
    """Every stored output increment and every stage's state, sorted, as JSON text."""
    df = build_dataflow()
    with Controller(home, df, spark=spark, num_partitions=2) as c:
        assert not c.catalog.unapplied()
        outputs = {
            flow: [(s.producer, s.epoch, sorted(json.dumps(r, sort_keys=True)
                                                for r in read_records(s.increment.files)))
                   for s in c.catalog.flow_increments(flow)]
            for flow in ("counts", "hourly")
        }
        queued = {f"{f}->{s}": len(c.catalog.queue(f, s, framed=None))
                  for f, s in c.catalog.connectors()}
    runner = SparkStageRunner(str(home), spark)
    state = {s: sorted(json.dumps(r, sort_keys=True) for r in runner.state_records(df.stages[s]))
             for s in ("count", "per_hour")}
    return {"outputs": outputs, "state": state, "queued": queued}


@pytest.fixture(scope="module")
def expected(spark, tmp_path_factory):
    home = tmp_path_factory.mktemp("uninterrupted")
    ingest_all(home)
    with Controller(home, build_dataflow(), spark=spark, num_partitions=2) as c:
        c.run()
    res = _results(home, spark)
    assert [e for _, e, _ in res["outputs"]["counts"]] == [1, 2, 3]
    assert len(res["outputs"]["hourly"]) == 3 and res["state"]["per_hour"]
    return res


def test_kill_9_between_the_partitions_of_an_epoch_in_the_driver(spark, tmp_path, expected):
    """A small epoch runs every partition in the driver, one after another: killed after
    some partitions wrote their files, the run resumes to the uninterrupted result."""
    points = ["driver-partition:1", "driver-partition:4", "driver-partition:7"]
    for i, point in enumerate(points):
        assert crash_run(tmp_path / f"d{i}", point, pipeline=DRIVER_PIPELINE), point
    for i, point in enumerate(points):
        with Controller(tmp_path / f"d{i}", build_dataflow(), spark=spark,
                        num_partitions=2) as c:
            c.run()
        assert _results(tmp_path / f"d{i}", spark) == expected, f"after kill at {point}"


def _kill_then_resume(spark, tmp_path: Path, expected: dict,
                      cases: list[tuple[str | None, float | None]]) -> None:
    """Kill a run per case (a crash point, or a delay in seconds), two processes at a
    time; then `strata run` each home again: the result is the uninterrupted one."""
    with ThreadPoolExecutor(max_workers=2) as pool:  # the crashing processes, two at a time
        crashed = list(pool.map(lambda i_case: crash_run(tmp_path / f"case{i_case[0]}",
                                                         *i_case[1]), enumerate(cases)))
    # every named point was reached and killed
    assert all(c for c, (point, _) in zip(crashed, cases, strict=True) if point)
    for i, (point, delay) in enumerate(cases):
        home = tmp_path / f"case{i}"
        # `strata run` again (here in this process, on the test session's Spark)
        with Controller(home, build_dataflow(), spark=spark, num_partitions=2) as c:
            c.run()
        assert _results(home, spark) == expected, f"after kill at {point or f'{delay}s'}"


def test_kill_9_at_each_point_then_resume_gives_the_uninterrupted_result(spark, tmp_path,
                                                                         expected):
    _kill_then_resume(spark, tmp_path, expected, [(p, None) for p in CRASH_POINTS])


@pytest.mark.slow
def test_kill_9_anywhere_then_resume_gives_the_uninterrupted_result(spark, tmp_path, expected):
    _kill_then_resume(spark, tmp_path, expected,
                      [(p, None) for p in MORE_CRASH_POINTS] + [(None, t) for t in (10.0, 14.0)])
