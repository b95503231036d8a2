"""strata over Spark Connect: queries run end to end against a Connect server this test
session starts (with PySpark's own sbin/spark-daemon.sh), and agree with the same
runs on classic Spark and with DuckDB, and so do translate stages (the Arrow route),
vectorized stages, window queries and series.

The test process already holds a classic Spark session (the ``spark`` fixture), and a
process cannot hold a classic and a Connect session at once: strata runs against the
server in subprocesses (``strata … --remote sc://127.0.0.1:PORT``)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest
from typer.testing import CliRunner

from strata.cli import app
from strata.model.errors import StrataError
from strata.physical.class_archive import use_options
from strata.physical.session import get_spark
from strata.storage.home import Home
from strata.storage.manifest import StateDir
from tests.queries.oracle import duckdb_answer, normalized
from tests.series.clicklog import DDL as CLICKS_DDL
from tests.series.clicklog import canon, segment
from tests.series.clicklog import duckdb_answer as series_answer
from tests.windows.weblog import DDL as WEBLOG_DDL
from tests.windows.weblog import SQL
from tests.windows.weblog import increments as weblog_increments

pytestmark = pytest.mark.connect

ROOT = Path(__file__).parents[1]
PIPELINE = ROOT / "tests" / "pipelines" / "query_pipeline.py"  # queries only
TRANSLATE_PIPELINE = ROOT / "tests" / "pipelines" / "urlcount_pipeline.py"
VECTORIZED_PIPELINE = ROOT / "tests" / "pipelines" / "vectorized_pipeline.py"
TASKS = ("--conf", "spark.strata.driverEpoch.maxRows=-1")  # vectorized epochs: Spark tasks
PAGERANK_PIPELINE = ROOT / "tests" / "pipelines" / "pagerank_query_pipeline.py"
STRATA = str(Path(sys.executable).with_name("strata"))
SBIN = Path(pyspark.__file__).parent / "sbin"
# what Spark's sbin/start-connect-server.sh runs, which PySpark 4.0's wheel lacks
# (docs/cli.md): spark-daemon.sh, in every PySpark, with the server's class
SERVER = ("org.apache.spark.sql.connect.service.SparkConnectServer", "1")
START_TIMEOUT_S = 90.0

TOTALS = "SELECT x, count(*) AS c, sum(y) AS s FROM R GROUP BY x"  # in the pipeline file
BYGRP = "SELECT D.grp, sum(R.y) AS s, count(*) AS c FROM R JOIN D ON R.x = D.id GROUP BY D.grp"
TABLES = {"R": ["x", "y"], "D": ["id", "name", "grp"]}
# two increments of each input flow; the second deletes and changes rows
INCREMENTS = [
    {"R": [{"x": 1, "y": 10, "_mult": 1}, {"x": 1, "y": 5, "_mult": 1},
           {"x": 2, "y": 7, "_mult": 1}, {"x": 3, "y": 1, "_mult": 1}],
     "D": [{"id": 1, "name": "one", "grp": "a", "_mult": 1},
           {"id": 2, "name": "two", "grp": "b", "_mult": 1},
           {"id": 3, "name": "three", "grp": "a", "_mult": 1},
           {"id": 4, "name": "four", "grp": "b", "_mult": 1}]},
    {"R": [{"x": 1, "y": 5, "_mult": -1}, {"x": 2, "y": 8, "_mult": 1},
           {"x": 4, "y": 2, "_mult": 1}, {"x": 5, "y": 9, "_mult": 1}],
     "D": [{"id": 4, "name": "four", "grp": "b", "_mult": -1},
           {"id": 4, "name": "four", "grp": "c", "_mult": 1}]},
]


def _env(**extra: str) -> dict[str, str]:
    """This environment without anything that picks a Spark (strata's, PySpark's)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("STRATA_REMOTE", "STRATA_MASTER", "SPARK_REMOTE", "SPARK_HOME",
                        "SPARK_CONNECT_MODE_ENABLED", "MASTER")}
    return {**env, **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class ConnectServer:
    """A Spark Connect server being started; :attr:`url` waits until it accepts
    connections (so that the classic session can start meanwhile)."""

    def __init__(self, port: int, logs: Path) -> None:
        self.port, self.logs = port, logs
        self._ready = False

    def log_tail(self) -> str:
        text = "".join(p.read_text(errors="replace") for p in self.logs.glob("*.out"))
        return "\n".join(text.splitlines()[-25:])

    @property
    def url(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready and not _accepts(self.port):
            pids = list(self.logs.glob("*.pid"))
            alive = pids and Path(f"/proc/{pids[0].read_text().strip()}").exists()
            if not alive or time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not accept connections on "
                            f"127.0.0.1:{self.port} within {START_TIMEOUT_S:g} s "
                            f"({'still starting' if alive else 'it exited'}); its log:\n"
                            f"{self.log_tail()}")
            time.sleep(0.25)
        self._ready = True
        return f"sc://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server on 127.0.0.1 (a free port), started from PySpark's own
    sbin/spark-daemon.sh (it daemonizes: this returns while the server starts) and always
    stopped (spark-daemon.sh stop, same environment)."""
    port = _free_port()
    logs = tmp_path_factory.mktemp("connect-server")
    env = _env(SPARK_LOG_DIR=str(logs), SPARK_PID_DIR=str(logs), SPARK_CONNECT_MODE="0",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    start = [str(SBIN / "spark-daemon.sh"), "submit", *SERVER,
             "--name", "Spark Connect server", "--master", "local[2]",
             "--driver-memory", "1g",
             *(["--driver-java-options", shared] if (shared := use_options()) else []),
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.adaptive.enabled=false"]
    try:
        started = subprocess.run(start, env=env, capture_output=True, text=True, timeout=60)
        assert started.returncode == 0, (
            f"spark-daemon.sh submit failed ({started.returncode}): {started.stdout}"
            f"{started.stderr}")
        yield ConnectServer(port, logs)
    finally:
        subprocess.run([str(SBIN / "spark-daemon.sh"), "stop", *SERVER], env=env,
                       capture_output=True, timeout=60)


@pytest.fixture
def connect_url(connect_server):
    return connect_server.url


def strata(*args: object, check: bool = True) -> subprocess.CompletedProcess:
    """``strata ARGS`` in a subprocess (where a Connect session can be made)."""
    return finish(start_strata(*args), check)


def start_strata(*args: object) -> tuple[tuple, subprocess.Popen]:
    return args, subprocess.Popen([STRATA, *map(str, args)], env=_env(), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(started: tuple[tuple, subprocess.Popen],
           check: bool = True) -> subprocess.CompletedProcess:
    args, proc = started
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


runner = CliRunner()


def strata_here(*args: object) -> str:
    """``strata ARGS`` in this process: on its classic session (the ``spark`` fixture)."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout


def _write_increments(folder: Path) -> list[dict[str, Path]]:
    files = []
    for i, inc in enumerate(INCREMENTS, 1):
        files.append({})
        for flow, rows in inc.items():
            path = folder / f"{flow}-{i}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            files[-1][flow] = path
    return files


def _answer(jsonl: str, cols: list[str]) -> list[tuple]:
    return normalized([tuple(json.loads(line)[c] for c in cols)
                       for line in jsonl.splitlines() if line.strip()])


def test_queries_run_over_spark_connect_like_on_classic_spark(connect_server, spark,
                                                              tmp_path):
    """Only ``strata run`` starts Spark: it runs in a subprocess over Connect, while the
    same run on the classic session runs here; ``query``, ``ingest``, ``show`` and
    ``status`` read and write the home's files only."""
    url = connect_server.url
    increments = _write_increments(tmp_path)
    remote, classic = tmp_path / "remote", tmp_path / "classic"
    # the home is made and the query registered the same way for both
    strata("run", PIPELINE, "--home", remote, "--remote", url)
    registered = json.loads(strata("query", BYGRP, "--home", remote, "--name", "bygrp",
                                   "--key", "D=id", "--json").stdout)
    assert registered["registered"] and list(registered["columns"]) == ["grp", "s", "c"]
    strata_here("run", PIPELINE, "--home", classic)
    strata_here("query", BYGRP, "--home", classic, "--name", "bygrp", "--key", "D=id")

    seen: dict[str, list[dict]] = {"R": [], "D": []}
    for files in increments:
        for flow, path in files.items():
            for home in (remote, classic):
                strata_here("ingest", flow, path, "--home", home)
            seen[flow] += [json.loads(line) for line in path.read_text().splitlines()]
        over_connect = start_strata("run", PIPELINE, "--home", remote, "--remote", url,
                                    "--json")
        strata_here("run", PIPELINE, "--home", classic)  # meanwhile
        ran = json.loads(finish(over_connect).stdout)
        assert sorted(r["stage"] for r in ran["reports"]) == ["bygrp", "totals"], ran
        for name, sql, cols in (("totals", TOTALS, ["x", "c", "s"]),
                                ("bygrp", BYGRP, ["grp", "s", "c"])):
            answers = [_answer(strata_here("show", name, "--home", home, "--format", "jsonl"),
                               cols) for home in (remote, classic)]
            assert answers[0] == answers[1] == duckdb_answer(sql, seen, TABLES), name

    status = json.loads(strata_here("status", "--home", remote, "--json"))
    assert {s["stage"]: s["epochs"] for s in status["stages"]} == {"totals": 2, "bygrp": 2}
    shown = strata("show", "bygrp", "--home", remote, "--format", "jsonl").stdout
    assert _answer(shown, ["grp", "s", "c"]) == answers[0]  # a fresh process reads it too


def test_a_translate_stage_runs_over_spark_connect_like_on_classic_spark(connect_url,
                                                                         tmp_path):
    """Per-group translate stages take the Arrow route over Connect (mapInArrow and a
    repartition by the partitions' salts, physical/translate_arrow.py): the URL counts'
    state and outputs equal the classic run's (in the driver) and the URLs' own counts,
    and the report says which route ran."""
    days = [[f"https://s{i % 3}.example.com/{i % 7}" for i in range(d, 40 + d)]
            for d in range(3)]
    batches = [[{"url": u} for u in urls] for urls in days]
    for d, (remote, classic) in enumerate(_run_on_both(connect_url, TRANSLATE_PIPELINE,
                                                       "urls", batches, tmp_path, TASKS)):
        seen = Counter(u for day in days[: d + 1] for u in day)
        states = [sorted(_answer(strata_here("show", "count.state", "--home", home,
                                             "--format", "jsonl"), ["url", "count"]))
                  for home in (remote, classic)]
        assert states[0] == states[1] == sorted(seen.items()), d
        counts = [strata_here("show", "counts", "--home", home, "--all", "--format", "jsonl")
                  for home in (remote, classic)]
        assert sorted(counts[0].splitlines()) == sorted(counts[1].splitlines()), d
    status = json.loads(strata_here("status", "--home", remote, "--json"))
    assert {s["stage"]: s["epochs"] for s in status["stages"]} == {"count": 3}
    both = strata("run", TRANSLATE_PIPELINE, "--home", remote, "--master", "local[1]",
                  "--remote", connect_url, check=False)
    assert both.returncode == 1 and "either --master or --remote" in both.stderr + both.stdout


def test_the_route_of_a_translate_epoch_over_spark_connect(connect_url, tmp_path):
    """``$STRATA_REMOTE`` picks Connect too; the run's report names the Arrow route, and
    asking for the RDD route over Connect is an error that says what to set instead."""
    home = tmp_path / "home"
    path = tmp_path / "urls.jsonl"
    path.write_text("".join(json.dumps({"url": f"u{i % 5}"}) + "\n" for i in range(20)))
    strata_here("run", TRANSLATE_PIPELINE, "--home", home)
    strata_here("ingest", "urls", path, "--home", home)
    rdd = subprocess.run([STRATA, "run", str(TRANSLATE_PIPELINE), "--home", str(home), *TASKS,
                          "--conf", "spark.strata.translate.route=rdd"],
                         env=_env(STRATA_REMOTE=connect_url), capture_output=True, text=True,
                         timeout=300)
    message = " ".join((rdd.stdout + rdd.stderr).split())
    assert rdd.returncode == 1 and "spark.strata.translate.route=rdd needs a classic" in message
    assert "Traceback" not in message
    done = subprocess.run([STRATA, "run", str(TRANSLATE_PIPELINE), "--home", str(home), *TASKS,
                           "--json"], env=_env(STRATA_REMOTE=connect_url),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["reports"][0]
    assert report["metrics"]["route"] == "arrow" and report["records_out"] == {"counts": 5}


def test_the_api_refuses_a_second_kind_of_session(spark, tmp_path):
    with pytest.raises(StrataError, match="already runs a classic Spark session"):
        get_spark(remote="sc://127.0.0.1:1")
    with pytest.raises(StrataError, match="write sc://HOST:PORT"):
        get_spark(remote="127.0.0.1:15002")


METRICS_SCRIPT = """
import json, sys
from strata.observability.spark_metrics import SparkMetrics
from strata.physical.session import default_parallelism, get_spark, is_connect
spark = get_spark(remote=sys.argv[1])
metrics = SparkMetrics(spark)
with metrics.measure("connect") as m:
    rows = spark.range(1000).count()
print(json.dumps({"connect": is_connect(spark), "available": metrics.available,
                  "jobs": m.jobs, "rows": rows, "parallelism": default_parallelism(spark)}))
"""


def test_spark_metrics_measure_nothing_over_spark_connect(connect_url):
    done = subprocess.run([sys.executable, "-c", METRICS_SCRIPT, connect_url], env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"connect": True, "available": False, "jobs": 0, "rows": 1000,
                   "parallelism": 2}


def test_ingest_reads_a_spark_sql_query_over_spark_connect(connect_url, spark, tmp_path):
    home = tmp_path / "home"
    strata_here("run", PIPELINE, "--home", home)
    done = strata("ingest", "R", "--home", home, "--remote", connect_url, "--json",
                  "--sql", "SELECT id AS x, id * 10 AS y, 1 AS _mult FROM range(3)")
    assert json.loads(done.stdout)["records"] == 3
    shown = strata_here("show", "R", "--home", home, "--format", "jsonl")
    assert _answer(shown, ["x", "y", "_mult"]) == [(0, 0, 1), (1, 10, 1), (2, 20, 1)]


def _run_on_both(connect_url: str, pipeline: Path, flow: str, batches: list[list[dict]],
                 folder: Path, remote_args: tuple[str, ...] = (),
                 setup: Callable[[Path], object] | None = None
                 ) -> Iterator[tuple[Path, Path]]:
    """Run ``pipeline`` in two homes, over Connect (with ``remote_args`` for its `strata
    run`) and on the classic session, one batch of rows of ``flow`` at a time; yields
    both homes after each batch's runs. ``setup(home)`` runs once the pipeline is
    registered in a home (adding a window query or a series, say)."""
    remote, classic = folder / "remote", folder / "classic"
    for home in (remote, classic):
        strata_here("run", pipeline, "--home", home)
        if setup is not None:
            setup(home)
    for d, rows in enumerate(batches):
        path = folder / f"{flow}-{d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        for home in (remote, classic):
            strata_here("ingest", flow, path, "--home", home)
        strata("run", pipeline, "--home", remote, "--remote", connect_url, *remote_args)
        strata_here("run", pipeline, "--home", classic)
        yield remote, classic


def test_a_vectorized_stage_runs_over_spark_connect_like_on_classic_spark(connect_url,
                                                                           tmp_path):
    """Vectorized stages take the DataFrame route (mapInArrow) over Connect; the
    function is shipped from the pipeline file, and counts and state equal the classic
    run's and the words' own counts. Over Connect the epochs run as Spark tasks, on the
    classic session (small) in the driver."""
    days = [[f"https://s{i % 3}.example.com/{i % 7}" for i in range(d, 40 + d)]
            for d in range(2)]
    remote, classic = list(_run_on_both(connect_url, VECTORIZED_PIPELINE, "urls",
                                        [[{"url": u} for u in urls] for urls in days],
                                        tmp_path, TASKS))[-1]
    states = [sorted(_answer(strata_here("show", "count.state", "--home", home, "--format",
                                         "jsonl"), ["url", "count"]))
              for home in (remote, classic)]
    assert states[0] == states[1] == sorted(Counter(u for day in days for u in day).items())
    counts = [strata_here("show", "counts", "--home", home, "--all", "--format", "jsonl")
              for home in (remote, classic)]
    assert sorted(counts[0].splitlines()) == sorted(counts[1].splitlines())


def test_an_iteration_runs_over_spark_connect_like_on_classic_spark(connect_url, tmp_path):
    """An iteration's steps combine the tables the driver holds in Arrow (overlays, the
    iterate's changes); over Connect those are local relations sent to the server. The
    ranks equal the classic run's after each increment."""
    links = [[(1, 2), (2, 3), (3, 1), (3, 4), (4, 1)], [(4, 5), (5, 1), (2, 5)]]
    batches = [[{"src": s, "dst": t} for s, t in b] for b in links]
    for d, homes in enumerate(_run_on_both(connect_url, PAGERANK_PIPELINE, "edges", batches,
                                           tmp_path)):
        ranks = [dict(_answer(strata_here("show", "pagerank", "--home", home, "--format",
                                          "jsonl"), ["node", "rank"]))
                 for home in homes]
        assert set(ranks[0]) == set(ranks[1]) == {s for b in links[: d + 1] for s, _ in b}
        assert all(abs(ranks[0][n] - ranks[1][n]) < 1e-12 for n in ranks[0]), ranks
        assert len(set(ranks[0].values())) > 1  # the steps moved the ranks


WINDOWED = SQL.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 6, 3, host)")
SOURCES = "from strata import Dataflow\n\ndataflow = Dataflow({name!r})\n" \
    "dataflow.source('log', {ddl!r})\n"


# a window query with a Python MapReduce aggregate beside the same count in SQL
MAP_REDUCE_PIPELINE = """import operator

from strata import Dataflow
from strata.windows import Eviction, MapReduce, WindowQuery, add_window, from_sql

dataflow = Dataflow("weblog")
dataflow.source("log", {ddl!r})
options = dict(eviction=Eviction(deadline=0, lateness=6), disorder=3)
add_window(dataflow, WindowQuery("mr", "log", 6, 3, time="ts", source="host", **options,
    mapreduce=MapReduce(map=lambda r: [(r["url"], 1)] if r["bytes"] > 5 else [],
                        combine=operator.add, uncombine=operator.sub,
                        reduce=lambda url, n: n, key="url", result="n")))
add_window(dataflow, from_sql("sq", "SELECT url, count(*) AS n FROM log WHERE bytes > 5 "
                                    "GROUP BY url, WINDOW(ts, 6, 3, host)", **options))
"""


@pytest.mark.parametrize("store", [pytest.param("driver", marks=pytest.mark.slow), "executors"])
def test_window_queries_run_over_spark_connect_like_on_classic_spark(connect_url, tmp_path,
                                                                      store):
    """A window stage's lift is a DataFrame aggregation, and a MapReduce aggregate's map
    and combine are DataFrame tasks (mapInArrow): over Connect (a SQL window's pane store
    in the driver, or on the executors) the results and C2 scoreboards equal the classic
    run's (the driver's store) after every increment, late data included; and the
    MapReduce count equals the same count in SQL (the query layer's monoids)."""
    pipeline = tmp_path / "weblog.py"
    pipeline.write_text(MAP_REDUCE_PIPELINE.format(ddl=WEBLOG_DDL))
    raw = weblog_increments(random.Random(3), 3, epochs=3, span=6)
    columns = ("window_start", "window_end", "url", "n", "_mult")
    emitted = 0
    for remote, classic in _run_on_both(
            connect_url, pipeline, "log", raw, tmp_path,
            remote_args=("--conf", f"spark.strata.window.store={store}"),
            setup=lambda home: strata_here(
                "window", "add", "late", WINDOWED, "--home", home, "--deadline", "0",
                "--lateness", "6", "--disorder", "3")):
        shown = {(flow, home): strata_here("show", flow, "--all", "--home", home,
                                           "--format", "jsonl").splitlines()
                 for flow in ("late_windows", "late_c2", "mr_windows", "mr_c2", "sq_windows")
                 for home in (remote, classic)}
        for flow in ("late_windows", "late_c2", "mr_windows", "mr_c2"):
            assert sorted(shown[flow, remote]) == sorted(shown[flow, classic]), flow
        assert shown["late_windows", remote]
        mr, sq = (Counter(tuple(json.loads(line)[c] for c in columns)
                          for line in shown[flow, remote]) for flow in ("mr_windows", "sq_windows"))
        assert mr == sq
        emitted = sum(mr.values())
    assert emitted > 0
    for name, kept in (("late", store), ("mr", "driver")):
        assert StateDir(Home(str(remote)).stage(name)).current().state["store"] == kept


def test_a_series_runs_over_spark_connect_like_on_classic_spark(connect_url, tmp_path):
    """A series' views and answers are DataFrame plans: over Connect each occurrence
    equals the classic run's and DuckDB's over the segments it covers (a grouping over
    two segments, and today's groups left-joined to yesterday's)."""
    pipeline = tmp_path / "clicks.py"
    pipeline.write_text(SOURCES.format(name="clicks", ddl=CLICKS_DDL))
    rng = random.Random(5)
    segments = [segment(rng, 25) for _ in range(3)]
    weekly = "SELECT A, B, count(*) AS hits FROM log WHERE A <> 'gb' GROUP BY A, B"
    joined = ("SELECT t.D AS D, t.m AS today, y.m AS yesterday FROM (SELECT D, max(B) AS m "
              "FROM today GROUP BY D) t LEFT JOIN (SELECT D, max(B) AS m FROM yesterday "
              "WHERE A = 'us' GROUP BY D) y ON t.D = y.D")
    series = {"last2": (weekly, ["log=log[-1:0]"]),
              "q3": (joined, ["today=log", "yesterday=log[-1]"])}

    def setup(home: Path) -> None:
        for name, (sql, tables) in series.items():
            strata_here("series", "add", name, sql, *[a for t in tables for a in ("--table", t)],
                        "--plan", "views", "--home", home)

    for n, homes in enumerate(_run_on_both(
            connect_url, pipeline, "log", [s.to_pylist() for s in segments], tmp_path,
            setup=setup), 1):
        if n < 2:  # the first occurrences are due at segment 2
            continue
        windows = {"last2": {"log": range(n - 1, n + 1)},
                   "q3": {"today": range(n, n + 1), "yesterday": range(n - 1, n)}}
        for name, (sql, _) in series.items():
            answers = [canon(json.loads(line) for line in strata_here(
                "series", "show", name, "--home", home, "--format", "jsonl").splitlines())
                for home in homes]
            assert answers[0] == answers[1] == canon(series_answer(
                sql, windows[name], segments)), (name, n)
