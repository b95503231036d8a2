"""A Spark standalone cluster on this machine for the ``cluster`` tests.

The session fixture ``cluster`` starts a master and two workers with
``scripts/local_cluster.sh`` (1 core, 2g each, bound to 127.0.0.1, on free ports) and
always stops them. The tests run strata against it in *subprocesses* (``strata run
--master spark://…``): the test process keeps its one in-process local session (the
``spark`` fixture of tests/conftest.py), which the tests use for the local-mode reference
runs.

The homes live in ``tmp_path`` on the local disk. That works only because the master,
the workers and the driver all run on this machine: on a real cluster the home must be
on a filesystem every worker and the driver see (NFS, a mounted object store, …).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strata.physical.class_archive import use_options
from tests.recovery.harness import QUICK_JVM

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "local_cluster.sh"
BIN = Path(sys.executable).parent
STRATA = str(BIN / "strata") if (BIN / "strata").exists() else None


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# -- processes (from /proc: no psutil needed) ------------------------------------------
def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids[ppid].append(int(d.name))
    return kids


def descendants(pid: int) -> list[int]:
    kids, out, todo = children_map(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append(pid)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@dataclass
class Cluster:
    """The running cluster: its master URL, run dir and the environment to reach it."""

    master: str
    run_dir: Path
    env: dict[str, str]
    json_url: str
    restarts: int = 0
    log: list[str] = field(default_factory=list)

    def script(self, verb: str, timeout: float = 180) -> str:
        done = subprocess.run([str(SCRIPT), verb], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        assert done.returncode == 0, (verb, done.stdout, done.stderr)
        return done.stdout

    def worker_pids(self) -> dict[str, int]:
        return {f.stem: int(f.read_text()) for f in sorted(self.run_dir.glob("worker-*.pid"))}

    def executors(self, worker_pid: int) -> list[int]:
        return [p for p in descendants(worker_pid)
                if "CoarseGrainedExecutorBackend" in cmdline(p)]

    def python_workers(self, worker_pid: int) -> list[int]:
        return [p for p in descendants(worker_pid)
                if "pyspark.daemon" in cmdline(p) or "pyspark.worker" in cmdline(p)]

    def worker_of(self, pid: int) -> str | None:
        up = set(ancestors(pid))
        return next((name for name, wp in self.worker_pids().items() if wp in up), None)

    def master_state(self) -> dict:
        with urllib.request.urlopen(self.json_url, timeout=5) as r:
            return json.load(r)

    def alive_workers(self) -> int:
        return sum(w["state"] == "ALIVE" for w in self.master_state()["workers"])

    def ensure_whole(self) -> None:
        """Restart whatever is down (after a test killed a worker) and wait for it."""
        if self.alive_workers() < 2 or not all(map(alive, self.worker_pids().values())):
            self.script("start")
            self.restarts += 1


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("the cluster tests need Java (a JDK 17+ on PATH or JAVA_HOME); not found")
    run_dir = tmp_path_factory.mktemp("spark-cluster")
    port, ui, w1, w2 = _free_ports(4)
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "STRATA_CLUSTER_DIR": str(run_dir),
        "STRATA_CLUSTER_PORT": str(port),
        "STRATA_CLUSTER_WEBUI_PORT": str(ui),
        "STRATA_CLUSTER_WORKER_WEBUI_PORTS": f"{w1} {w2}",
        "STRATA_CLUSTER_TIMEOUT": "150",
        # the daemons and the executors they start (the class archive once it is built)
        "JAVA_TOOL_OPTIONS": f"{QUICK_JVM} {use_options()}".strip(),
    }
    c = Cluster("", run_dir, env, f"http://127.0.0.1:{ui}/json")
    try:
        t0 = time.perf_counter()
        c.master = c.script("start").split()[-1]
        print(f"\ncluster {c.master} up in {time.perf_counter() - t0:.1f} s (run dir {run_dir})")
        yield c
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


# -- running strata in a subprocess ----------------------------------------------------
def driver_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "STRATA_DRIVER_MEMORY": "1g", "PYTHONPATH": str(REPO),
           "JAVA_TOOL_OPTIONS": QUICK_JVM}
    env.pop("STRATA_MASTER", None)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    env.update(extra or {})
    return env


def strata_cmd(*args: object) -> list[str]:
    head = [STRATA] if STRATA else [sys.executable, "-m", "strata.cli"]
    return head + [str(a) for a in args]


def sh(*args: object, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """Run ``strata ARGS`` in a subprocess; return its stdout (fails the test on exit != 0)."""
    done = subprocess.run(strata_cmd(*args), env=env or driver_env(), capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


def submit_args(*confs: str) -> dict[str, str]:
    """Spark configuration for a driver subprocess (strata run has no --conf)."""
    return {"PYSPARK_SUBMIT_ARGS": " ".join(f"--conf {c}" for c in confs) + " pyspark-shell"}


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def records(home: Path, target: str, history: bool = True) -> list[dict]:
    """A flow's stored records (``history``: every increment, with ``_epoch``), a
    query's answer or a state (``NAME.state``), sorted."""
    extra = ("--all",) if history and not target.endswith(".state") else ()
    out = jsonl(local("show", target, "--home", home, "--format", "jsonl", *extra))
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


def epochs_of(home: Path) -> dict[str, int]:
    info = json.loads(local("status", "--home", home, "--json"))
    return {s["stage"]: s["epochs"] for s in info["stages"]}


cli = CliRunner()


def local(*args: object) -> str:
    """``strata ARGS`` in-process: ``run`` uses the test session's local Spark."""
    from strata.cli import app

    result = cli.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout


def events(log_dir: Path) -> list[dict]:
    """The events of the one application's Spark event log in ``log_dir`` (uncompressed):
    a file ``app-…``, or the numbered ``events_N_app-…`` files of a rolling log (the
    default since Spark 4)."""
    files = [p for p in log_dir.rglob("*") if p.is_file()
             and p.name.startswith(("app-", "events_"))]
    assert files, f"no Spark event log in {log_dir}"
    files.sort(key=lambda p: int(p.name.split("_")[1]) if p.name.startswith("events_") else 0)
    return [json.loads(line) for f in files for line in f.read_text().splitlines()
            if line.strip()]


def kill9(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
