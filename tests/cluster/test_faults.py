"""Faults on the cluster while an epoch runs: its answer is still exact.

A slow translate (tests/cluster/slow_pipeline.py) runs on the two workers; as soon as
it is under way the test kills, with SIGKILL, one of

- the Python worker running a translate call (the task fails and is retried),
- the executor JVM that runs it (Spark loses the executor, its tasks and its shuffle
  output, and reruns them; the standalone worker starts a new executor),
- the whole standalone worker: its daemon, its executor and their Python workers
  (as if the machine went away; the epoch finishes on the other worker).

The run must exit 0 and leave exactly the counts of its input, with every retried
task's files replaced rather than added. Spark's event log tells how many tasks failed
and executors were lost, so each test knows its fault really hit the epoch.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster.conftest import (
    Cluster,
    alive,
    ancestors,
    cmdline,
    driver_env,
    events,
    kill9,
    local,
    records,
    strata_cmd,
    submit_args,
)

pytestmark = pytest.mark.cluster

PIPELINE = Path(__file__).resolve().parent / "slow_pipeline.py"
URLS = 160  # distinct keys: translate calls of SLOW seconds each, over 4 partitions
SLOW = 0.1


def _increment(tmp: Path, n: int) -> tuple[Path, Counter]:
    seen = Counter({f"https://example.org/{i}": 1 + i % 3 for i in range(n)})
    lines = [json.dumps({"url": u}) for u, c in seen.items() for _ in range(c)]
    (tmp / "urls.jsonl").write_text("\n".join(lines) + "\n")
    return tmp / "urls.jsonl", seen


def _wait_for(predicate, what: str, proc: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"strata run ended before {what}: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def faults(log_dir: Path) -> dict[str, int]:
    """From the run's Spark event log: failed task attempts (by reason), lost executors."""
    out: Counter = Counter()
    for e in events(log_dir):
        if e["Event"] == "SparkListenerTaskEnd":
            reason = e.get("Task End Reason", {}).get("Reason", "Success")
            if reason != "Success":
                out[f"failed tasks ({reason})"] += 1
        elif e["Event"] == "SparkListenerExecutorRemoved":
            out["executors removed"] += 1
        elif e["Event"] == "SparkListenerStageSubmitted" and e["Stage Info"]["Stage Attempt ID"]:
            out["stages resubmitted"] += 1
    return dict(out)


def run_with_fault(cluster: Cluster, tmp_path: Path, victim) -> dict[str, int]:
    """Ingest an increment, run the slow pipeline on the cluster and, once a translate
    call is under way, SIGKILL ``victim(python_worker_pid)``'s process (group)."""
    cluster.ensure_whole()
    home, marks, log_dir = tmp_path / "home", tmp_path / "marks", tmp_path / "events"
    marks.mkdir(), log_dir.mkdir()
    data, seen = _increment(tmp_path, URLS)
    local("run", PIPELINE, "--home", home)  # creates the home
    local("ingest", "urls", data, "--home", home)
    env = driver_env(submit_args(
        "spark.eventLog.enabled=true", f"spark.eventLog.dir=file://{log_dir}",
        "spark.eventLog.compress=false",
        f"spark.executorEnv.STRATA_SLOW_DIR={marks}",
        f"spark.executorEnv.STRATA_SLOW_SECONDS={SLOW}",
    ))
    proc = subprocess.Popen(
        strata_cmd("run", PIPELINE, "--home", home, "--master", cluster.master,
                   "--partitions", "4", "--json",
                   "--conf", "spark.strata.driverEpoch.maxRows=-1"),  # on the workers
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = _wait_for(lambda: sorted(marks.iterdir()), "a translate call", proc)
        victim(int(first[0].name))
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out[-3000:], err[-3000:])
    assert json.loads(out)["epochs"] == 1
    state = {r["url"]: r["count"] for r in records(home, "count.state")}
    assert state == seen
    counts = records(home, "counts")
    assert len(counts) == URLS and {r["_epoch"] for r in counts} == {1}
    found = faults(log_dir)
    print(f"\nfaults seen by Spark: {found}")
    return found


@pytest.mark.slow  # Spark retries the task; the worker test below loses more
def test_a_killed_python_worker_is_retried(cluster, tmp_path):
    found = run_with_fault(cluster, tmp_path, kill9)
    assert any(k.startswith("failed tasks") for k in found), found


@pytest.mark.slow  # a lighter case of losing a whole worker (below)
def test_a_killed_executor_is_replaced(cluster, tmp_path):
    def kill_executor(python_pid: int) -> None:
        [executor] = [p for p in ancestors(python_pid)
                      if "CoarseGrainedExecutorBackend" in cmdline(p)]
        kill9(executor)

    found = run_with_fault(cluster, tmp_path, kill_executor)
    assert found.get("executors removed", 0) >= 1, found


def test_the_epoch_survives_losing_a_whole_worker(cluster, tmp_path):
    def kill_worker(python_pid: int) -> None:
        name = cluster.worker_of(python_pid)
        assert name is not None, "the translate runs under no worker of this cluster"
        os.killpg(cluster.worker_pids()[name], 9)

    try:
        found = run_with_fault(cluster, tmp_path, kill_worker)
    finally:
        cluster.ensure_whole()
    assert found.get("executors removed", 0) >= 1, found
    assert all(map(alive, cluster.worker_pids().values()))
