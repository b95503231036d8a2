"""State survives a restart of Spark and is read back without being shuffled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from strata.apps.urlcount import urlcount_dataflow
from strata.physical.runner import SparkStageRunner
from tests import restart_worker as worker

ROOT = Path(__file__).resolve().parent.parent


def _in_new_process(home: Path, mode: str, phase: str) -> dict:
    # each process as if on a machine of its own: no decoded runs shared between them
    machine = home.parent / f"machine-{mode}-{phase}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STRATA_MACHINE_RUN_CACHE_DIR": str(machine)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "restart_worker.py"), str(home), mode, phase],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_direct_state_is_not_reshuffled_after_restart(spark, tmp_path):
    direct = tmp_path / "direct"
    load = _in_new_process(direct, "direct", "load")
    after = _in_new_process(direct, "direct", "increment")  # another driver, another JVM
    assert (load["epoch"], after["epoch"]) == (1, 2)

    blackbox = tmp_path / "blackbox"
    worker.run(spark, str(blackbox), "blackbox", "load")
    bb = worker.run(spark, str(blackbox), "blackbox", "increment")

    # same answers: old URLs seen twice, new ones once
    expected = {r["url"]: 1 for r in worker.increment_records()}
    for url in expected:
        if "site" in url:
            expected[url] = 2
    assert after["counts"] == expected == bb["counts"]

    # Spark's own metrics: black-box shuffles the whole state again, direct only the increment
    state_bytes = after["state_bytes_total_before"]
    assert after["shuffle_write_bytes"] * 10 < bb["shuffle_write_bytes"]
    assert after["shuffle_write_bytes"] * 20 < state_bytes
    # and the restarted process read the state from the partition files: an outer scan
    # reads every data file whole (the index is not needed for it)
    assert after["state_data_bytes_before"] > 0
    assert after["state_bytes_read"] >= after["state_data_bytes_before"]

    runner = SparkStageRunner(str(direct), spark)
    stage = urlcount_dataflow().stages["count"]
    state = {r["url"]: r["count"] for r in runner.state_records(stage)}
    assert len(state) == worker.STATE_URLS + 100
    assert all(state[u] == c for u, c in expected.items())
