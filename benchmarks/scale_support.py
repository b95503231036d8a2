"""What ``benchmarks/scale.py`` measures with besides Spark's metrics: the driver's resident
memory, independent answers computed by DuckDB over the raw data, and the series run as
``strata ingest`` + ``strata run`` processes from the shell (each starting Spark, or each
connecting to a Spark Connect server kept running, :func:`connect_server`).

Resident memory is read from ``/proc`` (Linux; elsewhere every figure is 0): the Python
driver itself, the JVMs among its descendants (in a classic session the driver's JVM is
its child; in local mode that JVM also runs the executors and Structured Streaming's
state store) and those JVMs' own descendants (PySpark's Python workers).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark

ROOT = Path(__file__).resolve().parents[1]
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# -- resident memory ---------------------------------------------------------------------
def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _process_tree() -> tuple[dict[int, list[int]], dict[int, str]]:
    """Children of every process and every process's command name, from ``/proc``."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        close = stat.rindex(")")  # the name may hold spaces and parentheses
        pid, ppid = int(entry), int(stat[close + 2:].split()[1])
        names[pid] = stat[stat.index("(") + 1:close]
        children.setdefault(ppid, []).append(pid)
    return children, names


def rss_now() -> dict[str, int]:
    """Resident bytes now: ``python`` (this process), ``jvm`` (JVMs below it) and
    ``workers`` (the processes below those JVMs)."""
    out = {"python": _rss(os.getpid()), "jvm": 0, "workers": 0}
    if not os.path.isdir("/proc"):
        return out
    children, names = _process_tree()
    stack = [(pid, False) for pid in children.get(os.getpid(), [])]
    while stack:
        pid, below_jvm = stack.pop()
        is_jvm = names.get(pid) == "java" and not below_jvm
        if below_jvm:
            out["workers"] += _rss(pid)
        elif is_jvm:
            out["jvm"] += _rss(pid)
        stack.extend((c, below_jvm or is_jvm) for c in children.get(pid, []))
    return out


@contextmanager
def peak_rss(interval: float = 0.2) -> Iterator[dict[str, int]]:
    """Sample :func:`rss_now` every ``interval`` seconds while the block runs; the dict
    yielded holds, once the block is done, the peaks in bytes: ``python_rss_peak``,
    ``jvm_rss_peak``, ``workers_rss_peak`` and ``driver_rss_peak`` (python + JVM)."""
    peak = {"python_rss_peak": 0, "jvm_rss_peak": 0, "workers_rss_peak": 0,
            "driver_rss_peak": 0}
    stop = threading.Event()

    def sample() -> None:
        now = rss_now()
        for kind, value in now.items():
            peak[f"{kind}_rss_peak"] = max(peak[f"{kind}_rss_peak"], value)
        peak["driver_rss_peak"] = max(peak["driver_rss_peak"], now["python"] + now["jvm"])

    def loop() -> None:
        while not stop.wait(interval):
            sample()

    sample()
    thread = threading.Thread(target=loop, daemon=True, name="peak-rss")
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
        sample()


# -- independent answers -----------------------------------------------------------------
def _arrow(relation) -> pa.Table:
    out = relation.arrow()  # a Table, or a RecordBatchReader in newer DuckDB
    return out.read_all() if hasattr(out, "read_all") else out


def duckdb_url_counts(files: list[Path]) -> pa.Table:
    """``(url, count)`` over the raw increments, by DuckDB, sorted by url."""
    import duckdb

    names = [str(f) for f in files]
    t = _arrow(duckdb.sql(f"SELECT url, count(*)::BIGINT AS count FROM read_parquet({names!r})"
                          " GROUP BY url"))
    return t.cast(pa.schema([("url", pa.string()), ("count", pa.int64())])).sort_by("url")


def windows_match(files: list[str], results, ratio: int, slide: int = 1) -> dict:
    """strata's net window results (a pandas frame of ``w_windows``: window_start, url, n,
    _mult) against DuckDB over the raw records, as ``benchmarks/windows.py``'s
    ``check_duckdb`` compares them (every complete window from strata's first on: a record
    counts in the windows starting at its slide's start and the ratio − 1 before), all in
    DuckDB so that it holds at millions of (window, url) rows. ``{"match", "windows",
    "differ"}``."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("raw", pa.concat_tables([pq.read_table(f) for f in files]))
    con.register("res", pa.Table.from_pandas(results[["window_start", "url", "n", "_mult"]],
                                             preserve_index=False))
    step, span = f"INTERVAL '{slide} minutes'", f"INTERVAL '{ratio * slide} minutes'"
    mine_n, differ = con.execute(f"""
        WITH mine AS (SELECT window_start, url, sum(n * _mult)::BIGINT AS n FROM res
                      GROUP BY ALL HAVING sum(n * _mult) <> 0),
             lim AS (SELECT (SELECT max(ts) FROM raw) AS last,
                            (SELECT min(window_start) FROM mine) AS first),
             m AS (SELECT window_start, url, n FROM mine, lim
                   WHERE window_start + {span} <= last),
             t AS (SELECT time_bucket({step}, ts) - k * {step} AS window_start, url,
                          count(*)::BIGINT AS n
                   FROM raw, range({ratio}) r(k) GROUP BY ALL),
             want AS (SELECT window_start, url, n FROM t, lim
                      WHERE window_start + {span} <= last AND window_start >= first)
        SELECT (SELECT count(*) FROM m),
               (SELECT count(*) FROM (SELECT * FROM m EXCEPT ALL SELECT * FROM want))
             + (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM m))
    """).fetchone()
    return {"match": bool(mine_n) and differ == 0, "windows": int(mine_n),
            "differ": int(differ)}


# -- the series from the shell -----------------------------------------------------------
PIPELINE = '''"""The query series of benchmarks/scale.py's shell part (benchmarks/series.py)."""
from strata import Dataflow
from strata.series import Series, add_series

SERIES = {series!r}
dataflow = Dataflow("clicks-0")
dataflow.source("log", {ddl!r})
add_series(dataflow, "log", [Series(name, *spec) for name, spec in SERIES.items()])
'''


def python_seconds(args: list[str], env: dict[str, str] | None = None) -> float:
    """Run ``python ARGS`` with the worktree's strata (and ``env`` over this process's
    environment); its wall seconds."""
    full = {**os.environ, **(env or {}), "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"),
                                                      os.environ.get("PYTHONPATH")) if p)}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=full, capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout)[-2000:]}")
    return round(seconds, 3)


def cli_seconds(args: list[str], confs: dict[str, str],
                env: dict[str, str] | None = None) -> float:
    """Run ``python -m strata.cli ARGS`` (``strata run`` with the session ``confs``); its
    wall seconds."""
    conf_args = [a for k, v in confs.items() for a in ("--conf", f"{k}={v}")]
    return python_seconds(["-m", "strata.cli", *args,
                           *(conf_args if args[0] == "run" else [])], env)


def series_from_shell(files: list[str], work: Path, series: dict, ddl: str, *,
                      master: str, partitions: int, confs: dict[str, str],
                      log, remote: str | None = None) -> dict:
    """Each day ``strata ingest log --by-reference DAY.parquet`` then ``strata run``, each a
    fresh process (the cron pattern), after a first ``strata run`` with nothing to do
    (it creates the home) and before a last one (nothing to do again). ``strata run``
    starts Spark on ``master``, or with ``remote`` connects to that Spark Connect server.
    Wall seconds of each process (:func:`answers_of` reads the home's answers)."""
    work.mkdir(parents=True, exist_ok=True)
    pipeline, home = work / "pipeline.py", work / "home"
    pipeline.write_text(PIPELINE.format(series=series, ddl=ddl))
    spark = ["--remote", remote] if remote else ["--master", master]
    run = ["run", f"{pipeline}:dataflow", "--home", str(home), *spark,
           "--partitions", str(partitions), "--json"]
    out: dict = {"run_nothing_to_do_first_seconds": cli_seconds(run, confs), "days": []}
    for n, f in enumerate(files, 1):
        ingest = cli_seconds(["ingest", "log", "--home", str(home), "--by-reference", f], confs)
        seconds = cli_seconds(run, confs)
        out["days"].append({"day": n, "ingest_seconds": ingest, "run_seconds": seconds})
        log(f"shell day {n}: strata ingest {ingest:.1f} s, strata run {seconds:.1f} s")
    out["run_nothing_to_do_last_seconds"] = cli_seconds(run, confs)
    out["median_run_seconds"] = round(statistics.median(
        d["run_seconds"] for d in out["days"]), 3)
    return out


# what Spark's sbin/start-connect-server.sh runs (PySpark 4.0's wheel lacks that script):
# spark-daemon.sh, in every PySpark, with the server's class (docs/cli.md, "Spark Connect")
_SBIN = Path(pyspark.__file__).parent / "sbin"
_SERVER = ("org.apache.spark.sql.connect.service.SparkConnectServer", "1")


@contextmanager
def connect_server(master: str, memory: str, work: Path,
                   start_timeout_s: float = 120.0) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 running on ``master``, as a team keeps one for
    its scheduled runs: its ``sc://`` URL once it accepts connections; always stopped."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_REMOTE", "SPARK_HOME", "SPARK_CONNECT_MODE_ENABLED", "MASTER")}
    env |= {"SPARK_LOG_DIR": str(work), "SPARK_PID_DIR": str(work), "SPARK_CONNECT_MODE": "0",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"),
                                                      os.environ.get("PYTHONPATH")) if p)}
    daemon = str(_SBIN / "spark-daemon.sh")
    subprocess.run([daemon, "submit", *_SERVER, "--name", "strata-bench-connect",
                    "--master", master, "--driver-memory", memory,
                    "--conf", f"spark.connect.grpc.binding.port={port}",
                    "--conf", "spark.connect.grpc.binding.address=127.0.0.1"],
                   env=env, check=True, capture_output=True, timeout=60)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                logs = "".join(p.read_text(errors="replace") for p in work.glob("*.out"))
                raise RuntimeError(f"the Spark Connect server did not accept connections "
                                   f"within {start_timeout_s:g} s: {logs[-2000:]}")
            time.sleep(0.25)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run([daemon, "stop", *_SERVER], env=env, capture_output=True, timeout=60,
                       check=False)


def answers_of(work: Path, spark) -> dict:
    """``{series: {segment: rows}}`` of the home :func:`series_from_shell` ran in ``work``."""
    from strata.controller import Controller
    from strata.pipeline import load_dataflow

    dataflow = load_dataflow(f"{work / 'pipeline.py'}:dataflow")
    with Controller(str(work / "home"), dataflow, spark=spark) as c:
        return {nm: {e: c.read_flow(nm, e).to_pylist() for e, _ in c.stored_increments(nm)}
                for nm in ("q1", "q2", "q3")}
