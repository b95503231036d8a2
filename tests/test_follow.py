"""``strata run --follow``: one warm process takes increments as another process
ingests them, and stops cleanly between epochs on SIGTERM; ``--watch`` lands files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import strata
from strata.controller.ingest import ingest
from strata.storage.catalog import Catalog
from strata.storage.home import Home

# the followers run `strata run --follow` on Spark in subprocesses
pytestmark = pytest.mark.spark

PIPELINE = Path(__file__).parent / "pipelines" / "urlcount_pipeline.py"
SAMPLE = Path(strata.__file__).parent / "data" / "sample" / "urls"
DAYS = sorted(SAMPLE.glob("day-*.jsonl"))


def follower(home: Path, *extra: object) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "STRATA_MASTER": "local[2]",
           "STRATA_DRIVER_MEMORY": "1g"}
    return subprocess.Popen([sys.executable, "-m", "strata.cli", "run", str(PIPELINE),
                             "--home", str(home), "--follow", "--poll", "0.2", "--json",
                             *map(str, extra)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def epochs_of(home: Path) -> int:
    catalog = Catalog(Home(home).catalog_path)
    try:
        return catalog.stage_row("count").epochs
    finally:
        catalog.close()


def wait_for(predicate, proc: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the follower exited ({proc.returncode}) before {what}: "
                        f"{proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> dict:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_follow_takes_five_increments_from_another_process(tmp_path):
    home = tmp_path / "home"
    proc = follower(home)
    wait_for(lambda: (home / "catalog.sqlite").exists() and _registered(home), proc,
             "the home is registered")
    committed = []
    files = [DAYS[i % len(DAYS)] for i in range(5)]
    for i, day in enumerate(files, 1):
        ingest(home, "urls", [str(day)])  # this test process is the other process
        committed.append(time.time())
        wait_for(lambda i=i: epochs_of(home) == i, proc, f"epoch {i}")
    ran = stop(proc)
    assert ran["epochs"] == 5 and ran["stopped"] == "stopped"
    assert [r["records_in"]["urls"] for r in ran["reports"]] == [
        sum(1 for line in f.read_text().splitlines() if line.strip()) for f in files]
    latencies = [r["finished"] - t for r, t in zip(ran["reports"], committed, strict=True)]
    assert all(x > 0 for x in latencies)  # each epoch came after its ingest
    print("ingest-to-epoch seconds:", [round(x, 2) for x in latencies])


def test_follow_watches_a_landing_directory(tmp_path):
    home, landing = tmp_path / "home", tmp_path / "landing"
    proc = follower(home, "--watch", landing)
    wait_for(lambda: (landing / "urls").is_dir(), proc, "the landing directory")
    (landing / "urls" / "bad.jsonl.tmp").write_text('{"url": 1}\n')
    os.replace(landing / "urls" / "bad.jsonl.tmp", landing / "urls" / "bad.jsonl")
    partial = landing / "urls" / "day.jsonl.part"
    partial.write_text(DAYS[0].read_text())
    wait_for(lambda: (landing / ".rejected" / "urls" / "bad.jsonl").exists(), proc,
             "the bad file rejected")
    why = (landing / ".rejected" / "urls" / "bad.jsonl.error.txt").read_text()
    assert "bad.jsonl, line 1" in why and "'urls'" in why and "Nothing was ingested" in why
    assert partial.exists()  # not complete yet: left alone
    os.replace(partial, landing / "urls" / "day-1.jsonl")
    wait_for(lambda: epochs_of(home) == 1, proc, "epoch 1")
    ran = stop(proc)
    assert ran["epochs"] == 1
    assert (landing / ".ingested" / "urls" / "day-1.jsonl").exists()
    counts = {r["url"]: r["count"] for r in _state(home)}
    assert counts == Counter(json.loads(x)["url"] for x in DAYS[0].read_text().splitlines()
                             if x.strip())


def _registered(home: Path) -> bool:
    catalog = Catalog(Home(home).catalog_path)
    try:
        return "urls" in catalog.flows()
    finally:
        catalog.close()


def _state(home: Path) -> list[dict]:
    from strata.controller.inspection import state_records

    return state_records(Home(home), "count")[1]
