"""Run one URL-count epoch in a fresh process (a fresh Spark driver), print JSON metrics.

    python tests/restart_worker.py HOME MODE load|increment
"""

from __future__ import annotations

import json
import sys

from strata.apps.urlcount import urlcount_dataflow
from strata.config import DRIVER_EPOCH_ROWS
from strata.observability.spark_metrics import SparkMetrics
from strata.physical.runner import SparkStageRunner
from strata.physical.session import get_spark
from strata.physical.translate import TranslateState
from strata.storage.increments import read_records

STATE_URLS = 20_000
NUM_PARTITIONS = 4


def load_records() -> list[dict]:
    return [{"url": f"https://site{n % 300}.example.com/page/{n}"} for n in range(STATE_URLS)]


def increment_records() -> list[dict]:
    old = [{"url": f"https://site{n % 300}.example.com/page/{n}"} for n in range(0, 20_000, 200)]
    new = [{"url": f"https://new.example.com/{n}"} for n in range(100)]
    return old + new


def run(spark, home: str, mode: str, phase: str) -> dict:
    from tests.helpers import increment

    df = urlcount_dataflow("outer")
    stage = df.stages["count"]
    runner = SparkStageRunner(home, spark, mode=mode, num_partitions=NUM_PARTITIONS)
    recs = load_records() if phase == "load" else increment_records()
    inc = increment(home, df.flows["urls"], recs)
    before = runner.committed(stage)
    runs = TranslateState.from_json(before.state).runs
    data_bytes = sum(r.data_bytes for rs in runs.values() for r in rs)
    with SparkMetrics(spark).measure(f"restart-{phase}") as m:
        res = runner.run_epoch(stage, {"urls": inc})
    counts = {r["url"]: r["count"] for r in read_records(res.outputs["counts"].files)}
    return {"epoch": res.epoch, "shuffle_write_bytes": m.shuffle_write_bytes,
            "increment_bytes": inc.bytes, "state_data_bytes_before": data_bytes,
            "counts": counts, **res.metrics}


if __name__ == "__main__":
    home, mode, phase = sys.argv[1:4]
    spark = get_spark("local[2]")
    # Spark's shuffle across restarts is what is measured
    spark.conf.set(DRIVER_EPOCH_ROWS.name, "-1")
    print(json.dumps(run(spark, home, mode, phase)))
