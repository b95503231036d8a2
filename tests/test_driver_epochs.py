"""Small translate epochs run in the driver, with no Spark job; larger ones, black-box
ones and outer groupings over many stored keys run as Spark tasks (docs/architecture.md,
"Small epochs in the driver"). The results do not depend on where an epoch ran: the
property tests (test_properties.py) check that against the reference executor."""

from __future__ import annotations

from collections import Counter

import pytest

from strata.apps.urlcount import urlcount_dataflow
from strata.config import DRIVER_EPOCH_ROWS, DRIVER_EPOCH_STATE_BYTES, TRANSLATE_DRIVER_RECORDS
from strata.observability.spark_metrics import SparkMetrics
from strata.physical.runner import SparkStageRunner
from tests.helpers import increment, session_confs


def run(spark, runner, stage, tmp_path, urls: list[str], values: dict[str, str] | None = None):
    """One epoch of ``urls``: (its result, Spark's metrics of it)."""
    inc = increment(tmp_path, stage.inputs[0].flow, [{"url": u} for u in urls])
    with session_confs(spark, values or {}), SparkMetrics(spark).measure("epoch") as m:
        res = runner.run_epoch(stage, {"urls": inc})
    return res, m


def test_a_small_direct_epoch_runs_in_the_driver_below_both_limits(spark, tmp_path):
    stage = urlcount_dataflow("inner").stages["count"]
    runner = SparkStageRunner(str(tmp_path / "home"), spark, num_partitions=2)
    urls = [f"u{i % 7}" for i in range(30)]
    for values, here in (({}, True), ({DRIVER_EPOCH_ROWS.name: "29"}, False),
                         ({DRIVER_EPOCH_STATE_BYTES.name: "10"}, False), ({}, True)):
        res, m = run(spark, runner, stage, tmp_path, urls, values)
        assert res.metrics["in_driver"] is here, values
        assert m.jobs == (0 if here else 1), (values, m.to_json())
        assert (m.shuffle_write_bytes == 0) is here, (values, m.to_json())
    state = {r["url"]: r["count"] for r in runner.state_records(stage)}
    assert state == {u: 4 * n for u, n in Counter(urls).items()}


def test_black_box_epochs_always_run_as_spark_tasks(spark, tmp_path):
    stage = urlcount_dataflow("inner").stages["count"]
    runner = SparkStageRunner(str(tmp_path / "home"), spark, mode="blackbox", num_partitions=2)
    for _ in range(2):
        res, m = run(spark, runner, stage, tmp_path, ["a", "b", "a"])
        assert res.metrics["in_driver"] is False and m.jobs == 1
    assert {r["url"]: r["count"] for r in runner.state_records(stage)} == {"a": 4, "b": 2}


@pytest.mark.parametrize(("grouping", "here"), [("inner", True), ("outer", False)])
def test_outer_grouping_counts_its_stored_keys_as_calls(spark, tmp_path, grouping, here):
    """Outer grouping calls translate on every stored key: 50 stored URLs and 5 new
    records are 55 calls, over a limit of 40 that the 5 records alone are under."""
    limit = {TRANSLATE_DRIVER_RECORDS.name: "40"}
    stage = urlcount_dataflow(grouping).stages["count"]
    runner = SparkStageRunner(str(tmp_path / "home"), spark, num_partitions=2)
    first, _ = run(spark, runner, stage, tmp_path, [f"u{i}" for i in range(50)], limit)
    assert first.metrics["in_driver"] is False  # 50 records: over the limit
    res, m = run(spark, runner, stage, tmp_path, ["u1", "u2", "new", "new", "u1"], limit)
    assert res.metrics["in_driver"] is here and m.jobs == (0 if here else 1)
    state = {r["url"]: r["count"] for r in runner.state_records(stage)}
    assert state == {**{f"u{i}": 1 for i in range(50)}, "u1": 3, "u2": 2, "new": 2}
