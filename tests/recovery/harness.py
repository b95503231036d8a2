"""Run a recovery pipeline in a fresh process and kill it with SIGKILL (at a named crash
point of :mod:`strata.faults` or after a delay).

A *pipeline* is a module with ``build_dataflow()`` and ``batches()`` (the increments
to ingest: ``(flow, records, end_frame)``); it may define ``setup()``, which the worker
calls before it runs, for settings the test process sets with ``monkeypatch``.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from strata.controller import Controller, ingest
from strata.storage.home import Home

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = "tests.recovery.pipeline"

# JVM options for short workers on a small machine: no C2 compiler and one GC thread,
# which otherwise compete with the job for the cores. Measured on the 2-core machine: a
# Spark start 14.3 -> 8.4 CPU seconds; Spark start plus four small query epochs 58-70 s
# -> 27-33 s wall (load average about 9 from other jobs).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def worker_env(crash: str | None = None, jvm_options: str | None = None) -> dict[str, str]:
    """The environment of a worker: strata from this checkout's ``src/`` (not from the
    checkout the venv's editable install points at, which may be another worktree), the
    tests package from its root, ``STRATA_CRASH_AT`` only if ``crash`` is given, and
    ``jvm_options`` for Spark's JVM."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("STRATA_CRASH_AT", None)
    if crash:
        env["STRATA_CRASH_AT"] = crash
    if jvm_options:
        env["JAVA_TOOL_OPTIONS"] = jvm_options
    return env


def ingest_all(home: Path | str, pipeline: str = PIPELINE, catalog: str | None = None) -> None:
    """Register the pipeline's dataflow in ``home`` (a path or a URI; its catalog at
    ``catalog`` if given) and ingest all its batches."""
    mod = importlib.import_module(pipeline)
    Controller(home, mod.build_dataflow(), catalog=catalog).close()
    for flow, records, end in mod.batches():
        ingest(Home(str(home), catalog), flow, records, end_frame=end)


def run_worker(home: Path | str, crash: str | None = None, kill_after: float | None = None,
               pipeline: str = PIPELINE, jvm_options: str | None = None,
               catalog: str | None = None) -> tuple[int, str, str]:
    """Run ``pipeline`` over ``home`` until idle in a new process: (returncode, stdout,
    stderr); stdout names where strata came from and each epoch run."""
    cmd = [sys.executable, "-m", "tests.recovery.worker", str(home), pipeline,
           *([catalog] if catalog else [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=worker_env(crash, jvm_options),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    imported = out.partition("strata from ")[2].split("\n", 1)[0]
    assert not imported or imported.startswith(str(ROOT / "src")), (
        f"the worker imported strata from {imported}, not from {ROOT / 'src'}")
    return proc.returncode, out, err


def crash_run(home: Path | str, crash: str | None, kill_after: float | None = None,
              pipeline: str = PIPELINE, jvm_options: str | None = QUICK_JVM,
              catalog: str | None = None) -> bool:
    """Ingest everything, then run a controller process that is killed with SIGKILL
    (by default on a JVM for short workers, ``QUICK_JVM``). True if it was killed (it
    may finish first when killed after a delay)."""
    ingest_all(home, pipeline, catalog)
    rc, _, err = run_worker(home, crash=crash, kill_after=kill_after, pipeline=pipeline,
                            jvm_options=jvm_options, catalog=catalog)
    crashed = rc == -signal.SIGKILL
    assert crashed or (kill_after is not None and rc == 0), f"{crash}: rc={rc}\n{err[-2000:]}"
    return crashed


def kill_at_each(home: Path, points: list[str], pipeline: str) -> list[str]:
    """Run a worker process over ``home`` per crash point in turn, each killed there with
    SIGKILL (asserted); a line per process, naming the point, its time and the epochs it
    ran, for assertion messages."""
    logs = []
    for point in points:
        t0 = time.perf_counter()
        rc, out, err = run_worker(home, crash=point, pipeline=pipeline, jvm_options=QUICK_JVM)
        assert rc == -signal.SIGKILL, f"{point}: rc={rc}\n{err[-2000:]}"
        logs.append(f"killed at {point} after {time.perf_counter() - t0:.1f} s: "
                    + ", ".join(line for line in out.splitlines() if line.startswith("epoch")))
    return logs


def run_here(home: Path | str, pipeline: str, spark, flows: tuple[str, ...],
             states: tuple[str, ...] = (), catalog: str | None = None) -> tuple[dict, dict]:
    """Run ``pipeline`` over ``home`` in this process until idle (after crashes: recover
    and finish), check that no commit is left unapplied, and return its ``flows`` by epoch
    (:func:`flow_epochs`) and the sorted record reprs of the ``states``' state."""
    mod = importlib.import_module(pipeline)
    with Controller(home, mod.build_dataflow(), spark=spark, num_partitions=2,
                    catalog=catalog) as c:
        c.run()
        assert not c.catalog.unapplied()
        return flow_epochs(c, flows), {s: sorted(map(repr, c.state_records(s)))
                                       for s in states}


def flow_epochs(controller: Controller, flows: tuple[str, ...]) -> dict[str, dict[int, list]]:
    """Every stored increment of ``flows``, by epoch, as sorted record reprs: two runs'
    results compare equal when they wrote the same records in the same epochs."""
    return {f: {e: sorted(map(repr, controller.read_flow(f, e).to_pylist()))
                for e, _ in controller.stored_increments(f)} for f in flows}
