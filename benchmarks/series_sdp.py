"""Peer: the series benchmark's three series as Spark Declarative Pipelines.

Each series is a materialized view of a pipeline run with PySpark's own ``spark-pipelines``
CLI (a Spark Connect session in a process of its own); a materialized view over files is
recomputed in full at every refresh, as open-source SDP does. Every day the pipeline's
spec names the Parquet files of each view's window (``strata.window.*`` in its
configuration) and the run refreshes the views that are due (the weekly one every
seventh day). I/O comes from the run's Spark event log (task input bytes, shuffle bytes
written, output bytes); seconds are the run's wall time, JVM start included, and the time
from its first job's start to its last job's end. Used by ``benchmarks/series.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

SPEC = """name: strata_series_peer
storage: file://{storage}
configuration:
  spark.sql.shuffle.partitions: "{partitions}"
{windows}
libraries:
  - glob:
      include: transformations/**
"""

# the series' SQL (benchmarks/series.py SERIES) as DataFrame code: a pipeline's
# definitions may not register temporary views
TRANSFORMATIONS = '''
from pyspark import pipelines as dp
from pyspark.sql import functions as F


def _window(key):
    return spark.read.parquet(*spark.conf.get("strata.window." + key).split(","))


@dp.materialized_view(name="q1")
def q1():
    return _window("q1").where("E <= 3").groupBy("A", "B", "E").agg(F.count("*").alias("n"))


@dp.materialized_view(name="q2")
def q2():
    return _window("q2").groupBy("A", "B").agg(F.count("*").alias("n"))


@dp.materialized_view(name="q3")
def q3():
    today = _window("q3_today").groupBy("D").agg(F.count("*").alias("today"))
    yesterday = _window("q3_yesterday").groupBy("D").agg(F.count("*").alias("yesterday"))
    return today.join(yesterday, "D")
'''


def run_sdp(files: list[str], tmp: Path, partitions: int, windows, due, log
            ) -> tuple[list[dict], dict[str, dict[int, list[dict]]]]:
    """One pipeline run per day; ``windows(name, n)`` gives the segment numbers each
    table of a series reads on day ``n``, ``due(name, n)`` whether it is due. The days'
    figures, and each refreshed view's rows by day (read from its table's files)."""
    project = tmp / "sdp"
    (project / "transformations").mkdir(parents=True)
    (project / "transformations" / "series.py").write_text(TRANSFORMATIONS)
    events, storage = project / "events", project / "storage"
    events.mkdir()
    storage.mkdir()
    conf_dir = project / "conf"
    conf_dir.mkdir()
    cli = Path(sys.executable).parent / "spark-pipelines"
    days = []
    answers: dict[str, dict[int, list[dict]]] = {}
    for n in range(1, len(files) + 1):
        refresh = [q for q in ("q1", "q2", "q3") if due(q, n)]
        if not refresh:
            days.append({"day": n, "seconds": 0.0, "job_seconds": 0.0, "read": 0,
                         "shuffled": 0, "written": 0, "io": 0})
            continue
        # a view not due still gets files (every definition is analyzed): today's
        keys = {"q1": ("q1", "log"), "q2": ("q2", "log"), "q3_today": ("q3", "today"),
                "q3_yesterday": ("q3", "yesterday")}
        paths = {k: [files[j - 1] for j in windows(q, n)[t]] if q in refresh
                 else [files[n - 1]] for k, (q, t) in keys.items()}
        lines = "\n".join(f'  strata.window.{k}: "{",".join(p)}"' for k, p in paths.items())
        # confs a session cannot set go to the process: the event log, Parquet read
        # without vectored reads (with them Spark's input bytes count only footers), and
        # a warehouse of the day's own (each process starts with an empty catalog, so
        # the views are created anew: a full refresh)
        (conf_dir / "spark-defaults.conf").write_text(
            "spark.eventLog.enabled true\nspark.eventLog.compress false\n"
            f"spark.eventLog.dir file://{events}\n"
            f"spark.sql.warehouse.dir file://{project}/warehouse-{n}\n"
            "spark.hadoop.parquet.hadoop.vectored.io.enabled false\n"
            "spark.sql.adaptive.enabled false\n")
        spec = project / "spark-pipeline.yml"
        spec.write_text(SPEC.format(storage=storage, partitions=partitions, windows=lines))
        before = set(events.iterdir())
        t0 = time.perf_counter()
        done = subprocess.run([str(cli), "run", "--spec", str(spec), "--refresh",
                               ",".join(refresh)], capture_output=True, text=True,
                              env={**os.environ, "PYSPARK_PYTHON": sys.executable,
                                   "SPARK_CONF_DIR": str(conf_dir)},
                              timeout=900)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"spark-pipelines failed on day {n}: "
                               f"{(done.stdout + done.stderr)[-3000:]}")
        [event_log] = set(events.iterdir()) - before
        days.append({"day": n, "seconds": round(seconds, 3), **_io_of(event_log)})
        for q in refresh:
            answers.setdefault(q, {})[n] = pq.read_table(
                project / f"warehouse-{n}" / q).to_pylist()
        log(f"sdp day {n}: {days[-1]}")
    return days, answers


def _events(event_log: Path):
    """The events of a run's log: one file, or a rolling log's directory of parts."""
    parts = sorted(event_log.glob("events_*")) if event_log.is_dir() else [event_log]
    for part in parts:
        with open(part) as f:
            yield from map(json.loads, f)


def _io_of(event_log: Path) -> dict:
    """Bytes read, shuffled and written by a run's tasks, and its jobs' span in seconds."""
    read = shuffled = written = 0
    starts, ends = [], []
    for e in _events(event_log):
        kind = e.get("Event")
        if kind == "SparkListenerTaskEnd" and e.get("Task Metrics"):
            m = e["Task Metrics"]
            read += m.get("Input Metrics", {}).get("Bytes Read", 0)
            shuffled += m.get("Shuffle Write Metrics", {}).get("Shuffle Bytes Written", 0)
            written += m.get("Output Metrics", {}).get("Bytes Written", 0)
        elif kind == "SparkListenerJobStart":
            starts.append(e["Submission Time"])
        elif kind == "SparkListenerJobEnd":
            ends.append(e["Completion Time"])
    span = (max(ends) - min(starts)) / 1000 if starts and ends else 0.0
    return {"job_seconds": round(span, 3), "read": read, "shuffled": shuffled,
            "written": written, "io": read + shuffled + written}
