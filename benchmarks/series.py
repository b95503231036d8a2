"""Benchmark: query series run together (Comet, He et al., SoCC 2010) against one by one.

A synthetic click log shaped like a search engine's (market A, query B, URL C, user D,
position E; Zipf-skewed), one segment a day, written twice: as raw CSV text, the
paper's setting (its queries parse every row of a segment with an extractor), and as
Parquet, whose column pruning already spares a query the columns it does not use.
Three series, as in the paper's micro-benchmark:

* ``q1``: every day, a custom grouping on (A, B, E) of the day's top-3 clicks;
* ``q2``: every 7 days, a histogram on (A, B) over the last 7 segments;
* ``q3``: every day, today's clicks per user joined with yesterday's on D.

Three configurations run the same series over the same segments:

* ``original``: each occurrence as plain Spark SQL over the raw segments of its window;
* ``logical``: normalization (per-segment views, merged per occurrence), each series its
  own strata stage (its own scan of each segment);
* ``full``: one strata stage for the stream (views shared between series and stored
  bucketed by their key, so merging a window's views shuffles nothing more);
* ``full_shared_scan``: the same with the jumbo pass (the new segment's stored views in
  one job: one scan, one exchange).

and, as a peer, ``cache_by_hand``: Spark SQL per occurrence with the day's segment (and
yesterday's) ``cache()``d by hand and shared by the three queries.

Over the raw CSV segments, ``original_raw_csv``, ``logical_raw_csv`` and
``full_raw_csv`` run as ``original``, ``logical`` and ``full``; the summary's I/O,
seconds and read targets are taken from them, and the same figures over the Parquet
segments are reported under ``parquet_segments_…`` names. ``--quick`` (a smoke run on
four small segments, under a minute, whose weekly series is every four segments over
four) runs only ``original_raw_csv`` and ``full_raw_csv``, one sweep point and a trace
of 200 series; ``not_run`` lists the rest.

Per day and configuration: bytes read (Spark's input bytes), shuffle bytes written,
bytes written (output bytes; view and answer files written by the driver are counted from
their sizes), seconds; every strata answer is checked against DuckDB over the raw
segments. I/O = read + shuffled + written. A strata configuration's day includes its
ingest of the day's segment, seconds and bytes: a CSV segment is read by pyarrow in the
driver and written into the home as Parquet (the file's bytes as read, the increment's
as written); a Parquet segment is taken by reference (``by_reference=True``: its footer
read and checked, the file then read in place by the stage, only the columns it needs).
The driver keeps a CSV segment's parsed rows after its ingest, so over CSV the strata
stages compute views and answers from them in Arrow (``strata.series.held``) and Spark
reads nothing; view tables the driver reads from storage are counted as read. Over
Parquet segments the stages run Spark's plans.
In a full run a warm-up (the original and a strata run over the first days, not
reported) runs first: no configuration runs cold.

    python benchmarks/series.py [--quick] --json PATH [--plot PATH.png]

The trace replay runs the real planner over a generated trace of 1,000 series on 50
streams (``strata.series.simulate``: sizes from the trace, an analytic model, as the
paper's simulator). The cost-model sweep (the paper's Figures 13-14) runs the scan-
sharing choice against measurement (``benchmarks/series_sweep.py``). The peer
``spark_declarative_pipelines`` runs the three series as materialized views with
PySpark's ``spark-pipelines`` (``benchmarks/series_sdp.py``), a process per day; if it
cannot run, ``not_run`` says why.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from common import emit, event_log_dir, parser, save  # benchmarks/common.py (this script's folder)
from series_sdp import run_sdp
from series_sweep import FULL as SWEEP_FULL
from series_sweep import QUICK as SWEEP_QUICK
from series_sweep import sweep, sweep_segments

ROOT = Path(__file__).resolve().parents[1]
# "week": q2's period and window in segments (the smoke run's "week" is four days)
FULL = {"days": 14, "rows": 400_000, "queries": 20_000, "urls": 200_000, "users": 50_000,
        "week": 7}
QUICK = {"days": 4, "rows": 20_000, "queries": 2_000, "urls": 5_000, "users": 2_000,
         "week": 4}
TRACE_FULL = {"series": 1000, "streams": 50, "days": 28}
TRACE_QUICK = {"series": 200, "streams": 10, "days": 14}
DDL = "A string, B bigint, C bigint, D bigint, E bigint"


def weekly(week: int) -> tuple:
    """q2: the histogram on (A, B) of the newest ``week`` segments, every ``week``."""
    return ("SELECT A, B, count(*) AS n FROM log GROUP BY A, B",
            {"log": f"log[-{week - 1}:0]"}, week)


SERIES = {
    "q1": ("SELECT A, B, E, count(*) AS n FROM log WHERE E <= 3 GROUP BY A, B, E",
           {"log": "log"}, 1),
    "q2": weekly(FULL["week"]),
    "q3": ("SELECT t.D AS D, t.n AS today, y.n AS yesterday FROM "
           "(SELECT D, count(*) AS n FROM today GROUP BY D) t JOIN "
           "(SELECT D, count(*) AS n FROM yesterday GROUP BY D) y ON t.D = y.D",
           {"today": "log", "yesterday": "log[-1]"}, 1),
}
MARKETS = [f"m{i:02d}" for i in range(30)]
WARMUP_DAYS = 3  # full runs only: --quick reports no seconds anyone quotes


_STARTED = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f} s] {msg}", file=sys.stderr, flush=True)


def zipf(rng: np.random.Generator, n: int, size: int, a: float = 1.2) -> np.ndarray:
    ranks = np.arange(1, n + 1, dtype=float)
    p = ranks ** -a
    return rng.choice(n, size=size, p=p / p.sum())


def segments(cfg: dict, tmp: Path, seed: int,
             formats: tuple[str, ...] = ("parquet", "csv")) -> dict[str, list[str]]:
    """The days' segments, the same rows as Parquet and as CSV (or only the ``formats``
    given): ``{format: paths}``."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {f: [] for f in formats}
    for d in range(1, cfg["days"] + 1):
        n = cfg["rows"]
        table = pa.table({
            "A": pa.array(np.array(MARKETS)[zipf(rng, len(MARKETS), n)]),
            "B": zipf(rng, cfg["queries"], n).astype(np.int64),
            "C": zipf(rng, cfg["urls"], n, 1.0).astype(np.int64),
            "D": rng.integers(0, cfg["users"], n),
            "E": (zipf(rng, 10, n, 0.8) + 1).astype(np.int64),
        })
        path = tmp / f"day-{d:02d}"
        for fmt in formats:
            (pq.write_table if fmt == "parquet" else pcsv.write_csv)(table, f"{path}.{fmt}")
            out[fmt].append(f"{path}.{fmt}")
    return out


def read_segment(spark, path: str):
    """One raw segment as a DataFrame; CSV is parsed with the log's schema."""
    if path.endswith(".csv"):
        return spark.read.schema(DDL).option("header", True).csv(path)
    return spark.read.parquet(path)


def window(tables: dict, newest: int) -> dict[str, range]:
    from strata.series.windows import Segments

    return {t: Segments.parse(s).indices(newest) for t, s in tables.items()}


def due(tables: dict, period: int, n: int) -> bool:
    from strata.series.windows import Schedule, Segments

    return Schedule({t: Segments.parse(s) for t, s in tables.items()}, period).due(n)


def io_of(m, extra_written: int = 0, extra_read: int = 0) -> dict:
    """A day's I/O from Spark's metrics ``m`` plus bytes the driver read and wrote."""
    read, written = m.input_bytes + extra_read, m.output_bytes + extra_written
    return {"read": read, "shuffled": m.shuffle_write_bytes, "written": written,
            "io": read + m.shuffle_write_bytes + written}


# -- the configurations ------------------------------------------------------------------
def run_original(spark, metrics, files: list[str], tmp: Path, cache_by_hand: bool) -> list:
    """Every occurrence as Spark SQL over its window's raw segments."""
    days = []
    cached: dict[int, object] = {}
    for n in range(1, len(files) + 1):
        t0 = time.perf_counter()
        with metrics.measure(f"original-{n}") as m:
            if cache_by_hand:  # today's and yesterday's segments, kept by hand
                for j in [j for j in cached if j < n - 1]:
                    cached.pop(j).unpersist()
                cached[n] = read_segment(spark, files[n - 1]).cache()
            for name, (sql, tables, period) in SERIES.items():
                if not due(tables, period, n):
                    continue
                for table, idx in window(tables, n).items():
                    parts = [cached[j] if j in cached else read_segment(spark, files[j - 1])
                             for j in idx]
                    frame = parts[0]
                    for p in parts[1:]:
                        frame = frame.unionByName(p)
                    frame.createOrReplaceTempView(table)
                out = tmp / f"{'cache' if cache_by_hand else 'orig'}-{name}-{n}"
                spark.sql(sql).write.mode("overwrite").parquet(str(out))
        days.append({"day": n, "seconds": round(time.perf_counter() - t0, 3), **io_of(m)})
    for frame in cached.values():
        frame.unpersist()
    return days


def run_strata(spark, metrics, files: list[str], home: Path, groups: list[list[str]],
               partitions: int, shared_scan: bool = False) -> tuple[list, dict]:
    """The series in ``groups``: each group one stream stage in a home of its own.
    Parquet segments are ingested by reference (read in place: strata reads only their
    footers at ingest); CSV segments are parsed and copied into each home."""
    from strata import Dataflow
    from strata.controller import Controller
    from strata.series import Series, add_series

    controllers = []
    for i, names in enumerate(groups):
        df = Dataflow(f"clicks-{i}")
        df.source("log", DDL)
        add_series(df, "log", [Series(nm, *SERIES[nm]) for nm in names],
                   shared_scan=shared_scan)
        controllers.append(Controller(str(home / f"h{i}"), df, spark=spark,
                                      num_partitions=partitions))
    days = []
    try:
        for n in range(1, len(files) + 1):
            segment = os.path.getsize(files[n - 1])
            t0 = time.perf_counter()
            driver_read = driver_written = 0
            with metrics.measure(f"strata-{n}") as m:
                for c in controllers:  # each home takes the segment in: its own read
                    if files[n - 1].endswith(".parquet"):
                        c.ingest("log", [files[n - 1]], by_reference=True)
                        driver_read += footer_bytes(files[n - 1])
                    else:
                        c.ingest("log", [files[n - 1]])
                        driver_read += segment
                        driver_written += c.stored_increments("log")[-1][1].bytes
                t1 = time.perf_counter()
                for c in controllers:
                    for report in c.run():
                        driver_written += report.metrics["driver_bytes_written"]
                        driver_read += report.metrics.get("driver_bytes_read", 0)
                run_seconds = time.perf_counter() - t1
            days.append({"day": n, "seconds": round(time.perf_counter() - t0, 3),
                         "run_seconds": round(run_seconds, 3),  # the epochs, ingest apart
                         "segment_bytes": segment, **io_of(m, driver_written, driver_read)})
        answers = {nm: {e: c.read_flow(nm, e).to_pylist() for e, _ in c.stored_increments(nm)}
                   for c, names in zip(controllers, groups, strict=True) for nm in names}
    finally:
        for c in controllers:
            c.close()
    return days, answers


def footer_bytes(path: str) -> int:
    """What reading a Parquet file's footer reads: the footer, its length and magic."""
    return pq.read_metadata(path).serialized_size + 8


def check_answers(files: list[str], *answer_sets: dict) -> bool:
    """Does every answer of each ``{series: {segment: rows}}`` equal DuckDB's over the raw
    segments of its window? Each occurrence is computed by DuckDB once for all sets."""
    sys.path.insert(0, str(ROOT))
    from tests.series.clicklog import canon, duckdb_answer

    segments = [pq.read_table(f) for f in files]
    ok = True
    occurrences = sorted({(name, n) for answers in answer_sets
                          for name, by_day in answers.items() for n in by_day})
    for name, n in occurrences:
        sql, tables, _ = SERIES[name]
        want = canon(duckdb_answer(sql, window(tables, n), segments))
        for i, answers in enumerate(answer_sets):
            rows = answers.get(name, {}).get(n)
            if rows is not None and canon(rows) != want:
                log(f"MISMATCH {name} at segment {n} (answer set {i + 1})")
                ok = False
    return ok


# -- summary and figure ------------------------------------------------------------------
def total(days: list, key: str) -> float:
    return sum(d[key] for d in days)


def target(value, goal, met) -> dict:
    return {"value": value, "target": goal, "met": met}


def io_targets(orig: list | None, logical: list | None, full: list | None,
               prefix: str = "") -> dict:
    """Against original: logical's and full's I/O saving, full's seconds on days 2..
    and its reads per segment; {} if original or full did not run (``--quick``)."""
    if not orig or not full:
        return {}
    saving = 1 - total(full, "io") / total(orig, "io")
    logical_saving = 1 - total(logical, "io") / total(orig, "io") if logical else None
    secs = total(full[1:], "seconds") / total(orig[1:], "seconds")  # day 1 starts Spark up
    read_ratio = max(d["read"] / d["segment_bytes"] for d in full if d["segment_bytes"])
    return {
        f"{prefix}full_io_saving_vs_original": target(round(saving, 3), ">= 0.5",
                                                      saving >= 0.5),
        f"{prefix}logical_io_saving_vs_original": target(
            None if logical_saving is None else round(logical_saving, 3), None, None),
        f"{prefix}full_seconds_over_original": target(round(secs, 3), "<= 0.6", secs <= 0.6),
        f"{prefix}bytes_read_over_new_segment_max": target(round(read_ratio, 3), "<= 1.1",
                                                           read_ratio <= 1.1),
    }


def summarize(runs: dict, answers_ok: bool, trace: dict, swept: dict) -> dict:
    """The summary's I/O figures are over the raw CSV segments (the paper's setting)."""
    error, agreement, regret = (swept["max_relative_error"], swept["choice_agreement"],
                                swept["worst_regret"])
    return {
        **io_targets(*(runs.get(f"{c}_raw_csv") for c in ("original", "logical", "full"))),
        **io_targets(*(runs.get(c) for c in ("original", "logical", "full")),
                     "parquet_segments_"),
        "cost_model_max_relative_error": target(error, "<= 0.15",
                                                error is not None and error <= 0.15),
        "cost_model_choice_agreement": target(agreement, ">= 0.85", agreement >= 0.85),
        "cost_model_worst_regret": target(regret, "<= 0.10", regret <= 0.10),
        "trace_io_saving": target(trace["io_saving"], ">= 0.5", trace["io_saving"] >= 0.5),
        "answers_match_duckdb": target(answers_ok, True, answers_ok),
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    fig, axes = plt.subplots(1, 4, figsize=(23, 4.8))
    for name, days in runs.items():
        xs = [d["day"] for d in days]
        axes[0].plot(xs, [d["io"] / 2**20 for d in days], marker="o", label=name)
        axes[1].plot(xs, [d["seconds"] for d in days], marker="o", label=name)
    names = list(runs)
    parts = ("read", "shuffled", "written")
    bottom = np.zeros(len(names))
    for part in parts:
        vals = np.array([total(runs[n], part) / 2**20 for n in names])
        axes[2].bar(names, vals, bottom=bottom, label=part)
        bottom += vals
    points = result.get("cost_model_sweep", {}).get("points", [])
    for sel in sorted({p["selectivity"] for p in points}):
        at = sorted((p for p in points if p["selectivity"] == sel),
                    key=lambda p: p["branches"])
        xs = [p["branches"] for p in at]
        line, = axes[3].plot(xs, [p["measured_io"]["shared"] / p["measured_io"]["separate"]
                                  for p in at], marker="o", label=f"{sel:.0%} measured")
        known = [p for p in at if p["estimated_io"]["separate"]]  # one branch: none
        axes[3].plot([p["branches"] for p in known],
                     [p["estimated_io"]["shared"] / p["estimated_io"]["separate"]
                      for p in known], ls="--", color=line.get_color(),
                     label=f"{sel:.0%} estimated")
    axes[3].axhline(1.0, color="grey", lw=0.8)
    axes[3].set_xscale("log", base=2)
    axes[3].set_xlabel("branches sharing the scan")
    axes[3].set_title("sweep: I/O shared ÷ separate, by filter selectivity")
    axes[0].set_title("I/O per day (MiB: read + shuffled + written)")
    axes[1].set_title("seconds per day")
    axes[1].set_yscale("log")  # a process per day puts the pipelines peer far above
    axes[2].set_title("total I/O (MiB)")
    plt.setp(axes[2].get_xticklabels(), rotation=35, ha="right")
    for ax in axes[:2]:
        ax.set_xlabel("day (segment)")
    for ax in axes:
        ax.legend(fontsize=7)
    week = result["config"].get("week", 7)
    fig.suptitle(f"query series q1 (daily), q2 (every {week} segments over {week}), q3 "
                 f"(today ⋈ yesterday): {result['machine']}")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=11, partitions=4, master="local[2]")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    cfg = QUICK if args.quick else FULL
    SERIES["q2"] = weekly(cfg["week"])
    # get_spark turns Parquet's vectored reads off: with them Spark counts only footers
    spark = get_spark(args.master, app_name="strata-bench-series", event_log_dir=event_log_dir(),
                      **{"spark.ui.retainedStages": "100000",
                         "spark.ui.retainedJobs": "100000"})
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    metrics = SparkMetrics(spark)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-series-"))
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    try:
        by_format = segments(cfg, tmp, args.seed)
        files = by_format["parquet"]
        # warm-up, not reported: the JVM's JIT, Python workers and imports would
        # otherwise slow whichever configuration runs first
        if not args.quick:
            log("warm-up")
            warm = files[:WARMUP_DAYS]
            run_original(spark, metrics, warm, tmp / "warm", cache_by_hand=False)
            run_strata(spark, metrics, warm, tmp / "warm", [list(SERIES)], args.partitions)
        runs, not_run, peer_ok, answers = {}, {}, None, {}
        if args.quick:  # a smoke run: the configurations of the summary's targets only
            for name in ("original", "logical", "full", "full_shared_scan", "cache_by_hand",
                         "logical_raw_csv"):
                not_run[name] = "skipped by --quick"
        else:
            log("original")
            runs["original"] = run_original(spark, metrics, files, tmp, cache_by_hand=False)
            log("logical")
            runs["logical"], _ = run_strata(spark, metrics, files, tmp / "logical",
                                            [[n] for n in SERIES], args.partitions)
            log("full")
            runs["full"], answers = run_strata(spark, metrics, files, tmp / "full",
                                               [list(SERIES)], args.partitions)
            log("full with a shared scan")
            runs["full_shared_scan"], _ = run_strata(spark, metrics, files, tmp / "shared",
                                                     [list(SERIES)], args.partitions, True)
            log("cache by hand")
            runs["cache_by_hand"] = run_original(spark, metrics, files, tmp,
                                                 cache_by_hand=True)
        log("original over raw CSV segments")
        runs["original_raw_csv"] = run_original(spark, metrics, by_format["csv"], tmp,
                                                cache_by_hand=False)
        if not args.quick:
            log("logical over raw CSV segments")
            runs["logical_raw_csv"], _ = run_strata(spark, metrics, by_format["csv"],
                                                    tmp / "logical-csv",
                                                    [[n] for n in SERIES], args.partitions)
        log("full over raw CSV segments")
        runs["full_raw_csv"], csv_answers = run_strata(
            spark, metrics, by_format["csv"], tmp / "full-csv", [list(SERIES)],
            args.partitions)
        answers_ok = check_answers(files, answers, csv_answers)
        if args.quick:  # a process per day, about 25 s each
            not_run["spark_declarative_pipelines"] = "skipped by --quick"
        else:
            log("Spark Declarative Pipelines")
            try:
                runs["spark_declarative_pipelines"], peer = run_sdp(
                    files, tmp, args.partitions, lambda q, n: window(SERIES[q][1], n),
                    lambda q, n: due(*SERIES[q][1:], n), log)
                peer_ok = check_answers(files, peer)
            except (RuntimeError, OSError, ValueError) as e:
                not_run["spark_declarative_pipelines"] = str(e)
        log("cost-model sweep")
        sweep_cfg = SWEEP_QUICK if args.quick else SWEEP_FULL
        swept = sweep(spark, metrics, sweep_segments(files, sweep_cfg, tmp), tmp, sweep_cfg,
                      args.partitions, log)
        from strata.series.simulate import generate_trace, simulate

        trace = simulate(generate_trace(**(TRACE_QUICK if args.quick else TRACE_FULL),
                                        seed=args.seed))
        result = {
            "machine": f"{os.cpu_count()} cores, {args.master}",
            "command": " ".join(["benchmarks/series.py", *(argv or sys.argv[1:])]),
            "config": cfg, "load_before": round(load0, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "seconds": round(time.perf_counter() - t0, 1),
            "runs": runs,
            "totals": {n: {k: total(d, k) for k in ("read", "shuffled", "written", "io",
                                                    "seconds")} for n, d in runs.items()},
            "trace": trace,
            "cost_model_sweep": swept,
            "summary": summarize(runs, answers_ok, trace, swept),
            "not_run": not_run,
            "spark_declarative_pipelines_answers_match_duckdb": peer_ok,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    emit(result, args.json, args.plot, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
