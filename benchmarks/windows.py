"""Benchmark: windows from panes (iMR, Logothetis et al.) against Spark's window().

A web log from 4 servers (``ts`` timestamp, ``source``, ``url`` Zipf-skewed, ``bytes``,
``user``) arrives in increments of ``minutes`` minutes of event time each. Six parts:

1. **Spark window()**: count and average bytes per URL over sliding windows with
   range/slide 12 and 60 (slide one minute), the same increments fed to strata (a window
   query, deadline 0) and to Structured Streaming (``benchmarks/windows_spark.py``: a
   Parquet file stream, ``window()``, update mode). Rows entering the aggregation per
   input row (strata: rows into panes; Spark: the Expand node's output rows, from its
   SQL metrics) and seconds per increment (median of increments 2..k).
2. **Concurrent windows**: 1, 4 and 16 windows of different ranges and slides in one
   strata query (one pane store); the 16 as separate Structured Streaming queries (over
   the first 2 increments: they take minutes per increment; not in ``--quick``).
3. **Work per slide**: combine + uncombine calls per slide for a sum (invertible) and
   combines for max (Two-Stacks), range/slide 4, 12, 60, 240 (the sliders themselves).
4. **Fidelity**: relative error of a count (scaled by C2) and of a distinct-user count
   against C2 10%…100%, uniform and skewed data across sources, cells chosen temporally,
   spatially or at random (the selection load shedding uses).
5. **Failure eviction**: one of 4 sources stops; with failure eviction every result goes
   out by its deadline with a C2 naming exactly the cells it includes; goodput (results
   on time) with and without it.
6. **Load shedding**: increments arriving twice as fast as strata processes them (a
   virtual clock over measured processing times); p95 result latency over the slide and
   the least C2, with shedding and without.

    python benchmarks/windows.py [--quick] --json PATH [--plot PATH.png]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import emit, parser, save  # benchmarks/common.py (this script's folder)

ROOT = Path(__file__).resolve().parents[1]
FULL = {"increments": 6, "rows": 2_000_000, "urls": 2_000, "users": 20_000, "minutes": 5,
        "shed_increments": 10, "shed_rows": 1_000_000}
QUICK = {"increments": 2, "rows": 8_000, "urls": 200, "users": 500, "minutes": 5,
         "shed_increments": 4, "shed_rows": 8_000}
SOURCES = 4
DDL = "ts timestamp, source string, url string, bytes bigint, user string"
SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("source", pa.string()),
                    ("url", pa.string()), ("bytes", pa.int64()), ("user", pa.string())])
BASE = datetime(2026, 1, 1, tzinfo=UTC)
SQL = "SELECT url, count(*) AS n, avg(bytes) AS avg_bytes FROM log GROUP BY url"


_STARTED = time.perf_counter()


def log(msg: str) -> None:
    print(f"[windows {time.perf_counter() - _STARTED:6.1f} s] {msg}", file=sys.stderr,
          flush=True)


def records(rng: np.random.Generator, cfg: dict, i: int, rows: int | None = None,
            skip_source: str | None = None) -> pa.Table:
    """Increment ``i``: ``rows`` records over minutes [i·m, (i+1)·m)."""
    n = rows or cfg["rows"]
    span = cfg["minutes"] * 60_000_000
    ts = i * span + rng.integers(0, span, n)
    urls = np.minimum(rng.zipf(1.2, n), cfg["urls"])
    sources = rng.integers(0, SOURCES, n)
    table = pa.table({
        "ts": pa.array(np.int64(BASE.timestamp() * 1e6) + ts, pa.int64()).cast(
            pa.timestamp("us", tz="UTC")),
        "source": [f"s{k}" for k in sources], "url": [f"/u{k}" for k in urls],
        "bytes": rng.integers(100, 10_000, n), "user": [f"v{k}" for k in rng.integers(
            0, cfg["users"], n)]}, schema=SCHEMA)
    if skip_source is not None:
        table = table.filter(np.array([s != skip_source for s in table["source"].to_pylist()]))
    return table


def write(table: pa.Table, path: Path) -> str:
    pq.write_table(table, path)
    return str(path)


def windowed(specs: list[tuple[int, int]]) -> str:
    terms = ", ".join(f"WINDOW(ts, '{r} minutes', '{s} minutes', source)" for r, s in specs)
    return SQL.replace("GROUP BY url", f"GROUP BY url, {terms}")


def strata_run(spark, files: list[str], home: Path, sql: str, partitions: int,
               epochs: Callable[[], AbstractContextManager] = nullcontext,
               **eviction) -> tuple[list[dict], object]:
    """Run a window query over ``files``, one increment per epoch: per-epoch seconds
    and metrics, and the final net results (read once the epochs are done, outside
    ``epochs()``, the context the epochs run in: a measurement of them alone)."""
    from strata import Dataflow
    from strata.controller import Controller
    from strata.windows import Eviction, add_window, from_sql

    df = Dataflow("weblog")
    df.source("log", DDL)
    add_window(df, from_sql("w", sql, eviction=Eviction(**eviction)))
    out = []
    with Controller(str(home), df, spark=spark, num_partitions=partitions) as c:
        with epochs():
            for f in files:
                c.ingest("log", [f])
                t0 = time.perf_counter()
                reports = c.run()
                out.append({"seconds": round(time.perf_counter() - t0, 3),
                            **{k: reports[0].metrics[k] for k in (
                                "input_rows", "rows_aggregated", "cells", "changed_rows")}})
        results = c.read_flow("w_windows").to_pandas()
    return out, results


def median_after_first(values: list[float]) -> float:
    return round(statistics.median(values[1:] if len(values) > 1 else values), 3)


# -- part 1 and 2: against Structured Streaming window() ------------------------------------
def part_spark(spark, cfg: dict, files: list[str], tmp: Path, partitions: int) -> dict:
    from windows_spark import SparkWindowStream

    out = {}
    for ratio in (12, 60):
        log(f"range/slide {ratio}: strata")
        runs, results = strata_run(spark, files, tmp / f"r{ratio}", windowed([(ratio, 1)]),
                                   partitions, deadline=0)
        log(f"range/slide {ratio}: Spark window()")
        stream = SparkWindowStream(spark, str(tmp / f"ss{ratio}"), ratio * 60, 60, f"r{ratio}")
        try:
            spark_runs = [stream.feed(f) for f in files]
            spark_results = stream.results()
        finally:
            stream.stop()
        strata_s = median_after_first([r["seconds"] for r in runs])
        spark_s = median_after_first([r["seconds"] for r in spark_runs])
        out[f"r{ratio}"] = {
            "strata": runs, "spark": spark_runs, "strata_seconds": strata_s,
            "spark_seconds": spark_s, "speedup": round(spark_s / strata_s, 2),
            "strata_rows_aggregated_per_input": round(
                sum(r["rows_aggregated"] for r in runs) / sum(r["input_rows"] for r in runs), 3),
            "spark_rows_aggregated_per_input": round(
                sum(r["expand_output_rows"] for r in spark_runs)
                / max(1, sum(r["input_rows"] for r in spark_runs)), 3),
            "results_match_duckdb": check_duckdb(files, results, ratio, 1),
            "strata_equals_spark": same_as_spark(results, spark_results),
        }
    return out


def part_concurrent(spark, cfg: dict, files: list[str], tmp: Path, partitions: int,
                    with_spark: bool) -> dict:
    specs = [(r, s) for s in (1, 2, 3, 4) for r in (4, 8, 12, 24)]  # 16 (range, slide)
    out: dict = {}
    for n in (1, 4, 16):
        log(f"{n} concurrent window(s): strata")
        runs, _ = strata_run(spark, files, tmp / f"c{n}", windowed(specs[:: 16 // n][:n]),
                             partitions, deadline=0)
        out[str(n)] = {"strata_seconds": median_after_first([r["seconds"] for r in runs]),
                       "runs": runs}
    if with_spark:
        from windows_spark import SparkWindowStream

        log("16 concurrent windows: 16 Structured Streaming queries (first 2 increments)")
        streams = [SparkWindowStream(spark, str(tmp / f"cs{i}"), r * 60, s * 60, f"c{i}")
                   for i, (r, s) in enumerate(specs)]
        try:
            per = []
            for f in files[:2]:
                t0 = time.perf_counter()
                for st in streams:
                    st.feed(f)
                per.append(time.perf_counter() - t0)
        finally:
            for st in streams:
                st.stop()
        out["16"]["spark_separate_queries_seconds"] = median_after_first(per)
    return out


def check_duckdb(files: list[str], results, ratio: int, slide: int) -> bool:
    """Every complete window strata emitted equals DuckDB over the raw records (a record
    counts in the windows starting at its slide's start and the ratio − 1 before)."""
    import duckdb

    log_ = pa.concat_tables([pq.read_table(f) for f in files])  # DuckDB reads it
    want = duckdb.sql(f"""
        SELECT time_bucket(INTERVAL '{slide} minutes', ts) - k * INTERVAL '{slide} minutes'
               AS window_start, url, count(*) AS n, avg(bytes) AS avg_bytes
        FROM log_, range({ratio}) t(k) GROUP BY ALL""").df()
    last = pa.compute.max(log_["ts"]).as_py()
    net = results.groupby(["window_start", "url"]).apply(
        lambda g: (g["n"] * g["_mult"]).sum(), include_groups=False)
    mine = {(w.timestamp(), u): int(n) for (w, u), n in net.items() if n}
    first = min(w for w, _ in mine)
    span = timedelta(minutes=ratio * slide)
    theirs = {(r.window_start.timestamp(), r.url): int(r.n) for r in want.itertuples()
              if r.window_start + span <= last and r.window_start.timestamp() >= first}
    mine = {k: v for k, v in mine.items()
            if datetime.fromtimestamp(k[0], UTC) + span <= last}
    if mine != theirs:
        log(f"DuckDB disagrees on {len(set(mine.items()) ^ set(theirs.items()))} "
            "(window, url) counts")
    return bool(mine) and mine == theirs


def same_as_spark(results, spark_table: pa.Table) -> bool:
    """strata's net results agree with Spark's last value of the windows both have."""
    got = results[results["_mult"] > 0].groupby(["window_start", "url"])["n"].sum()
    theirs = spark_table.to_pandas().set_index(["window_start", "url"])["count"]
    common = got.index.intersection(theirs.index)
    return len(common) > 0 and bool((got[common] == theirs[common]).mean() > 0.95)


# -- part 3: work per slide ------------------------------------------------------------------
def part_work_per_slide() -> dict:
    from strata.windows.aggregates import PartsAlgebra
    from strata.windows.sliding import Counted, slider

    out = {}
    for kind, kinds in (("sum", ["add", "add"]), ("max", ["add", "greatest"])):
        for ratio in (4, 12, 60, 240):
            counted = Counted(PartsAlgebra.of_kinds(kinds, kind))
            tables = [{(k,): [1, (p * 7 + k) % 23] for k in range(50)}
                      for p in range(ratio * 21 + 1)]
            agg = slider(counted, tables.__getitem__)
            agg.query(0, ratio)
            counted.combines = counted.uncombines = 0
            slides = 20 * ratio
            for lo in range(1, slides + 1):
                agg.query(lo, lo + ratio)
            out[f"{kind}_r{ratio}"] = {"combines": counted.combines / slides,
                                       "uncombines": counted.uncombines / slides}
    return out


# -- part 4: fidelity -------------------------------------------------------------------------
def part_fidelity(seed: int) -> dict:
    from strata.windows.policies import EpochCost, plan_shedding

    rng = np.random.default_rng(seed)
    sources, panes = 10, 12
    out: dict = {}
    for data in ("uniform", "skewed"):
        weights = np.ones(sources) if data == "uniform" else 1 / np.arange(1, sources + 1)
        per_source = rng.multinomial(120_000, weights / weights.sum())
        users: dict = {}
        rows = {}
        for s in range(sources):
            for p in range(panes):
                n = int(per_source[s] / panes)
                rows[(f"s{s}", p)] = n
                pool = 5_000 if data == "uniform" else 500 + 500 * s  # sources see own users
                users[(f"s{s}", p)] = set(rng.integers(s * 200, s * 200 + pool, n).tolist())
        total = sum(rows.values())
        distinct = len(set().union(*users.values()))
        for policy in ("temporal", "spatial", "random"):
            curve = []
            for c2 in np.linspace(0.1, 1.0, 10):
                shed = plan_shedding(rows, EpochCost(0.0, 1.0), c2 * total, policy, seed)
                kept = [c for c in rows if c not in shed]
                fraction = len(kept) / len(rows)
                count = sum(rows[c] for c in kept) / max(fraction, 1e-9)
                seen = len(set().union(*(users[c] for c in kept))) if kept else 0
                curve.append({"c2": round(fraction, 3),
                              "count_error": round(abs(count - total) / total, 4),
                              "distinct_error": round(abs(seen - distinct) / distinct, 4)})
            out[f"{data}_{policy}"] = curve
    return out


# -- part 5: failure eviction -------------------------------------------------------------------
def part_failure(spark, cfg: dict, tmp: Path, partitions: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n = cfg["increments"] + 2
    files = [write(records(rng, cfg, i, cfg["rows"] // 4,
                           skip_source="s3" if i >= 2 else None), tmp / f"f{i}.parquet")
             for i in range(n)]
    deadline = 2  # minutes after a window's end
    out = {}
    for name, eviction in (("failure_eviction", {"failure_timeout": 1 * 60_000_000,
                                                 "deadline": deadline * 60_000_000}),
                           ("complete_only", {})):
        runs, results = strata_run(spark, files, tmp / name, windowed([(4, 1)]), partitions,
                                   **eviction)
        emitted = results[results["_mult"] > 0].groupby(["window_start", "window_end"]).agg(
            c2=("c2_fraction", "first"))
        end = BASE + timedelta(minutes=n * cfg["minutes"] - deadline)
        due = [BASE + timedelta(minutes=k) for k in range(-3, n * cfg["minutes"])
               if BASE + timedelta(minutes=k + 4) <= end]
        on_time = len([w for w in due if any(emitted.index.get_level_values(0) == w)])
        out[name] = {"windows_due": len(due), "on_time": on_time,
                     "runs": runs, "min_c2": float(emitted["c2"].min()) if len(emitted) else 0}
    out["c2_exact"] = c2_exact(files, tmp / "failure_eviction")
    return out


def c2_exact(files: list[str], home: Path) -> bool:
    """Each emitted scoreboard's record counts equal the raw records of its cells."""
    from strata import Dataflow
    from strata.controller import Controller
    from strata.windows import add_window, from_sql

    df = Dataflow("weblog")
    df.source("log", DDL)
    add_window(df, from_sql("w", windowed([(4, 1)])))
    raw = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
    raw["pane"] = raw["ts"].dt.floor("1min")
    counts = raw.groupby(["source", "pane"]).size()
    with Controller(str(home), df) as c:
        boards = c.read_flow("w_c2").to_pandas()
    live = boards.groupby(["window_start", "window_end", "source", "pane_start", "status",
                           "records"])["_mult"].sum()
    live = live[live > 0].reset_index()
    live = live[live["records"] > 0]
    return bool(len(live)) and all(
        counts.get((r.source, r.pane_start), 0) == r.records for r in live.itertuples())


# -- part 6: load shedding ------------------------------------------------------------------
WARM_EPOCHS = 5  # the sustainable rate's epochs, the first two not counted


def part_shedding(spark, cfg: dict, tmp: Path, partitions: int, seed: int) -> dict:
    """Increments arrive every ``interval`` seconds, half the time strata needs per
    increment; a virtual clock: an epoch starts when its increment has arrived and the
    previous epoch is done, and each result's latency is its epoch's end minus the
    arrival of the increment that completed it. One increment per epoch, as in iMR's
    experiment: without shedding, latency grows."""
    from strata import Dataflow
    from strata.controller import Controller
    from strata.windows import Eviction, Shedding, add_window, from_sql

    rng = np.random.default_rng(seed)
    n = cfg["shed_increments"]
    files = [write(records(rng, cfg, i, cfg["shed_rows"]), tmp / f"s{i}.parquet")
             for i in range(n)]
    # the sustainable rate: one increment per epoch, once a session's first epochs (their
    # plans' first compilation) are past
    warm, _ = strata_run(spark, files[:WARM_EPOCHS], tmp / "warm",
                         windowed([(cfg["minutes"], cfg["minutes"])]), partitions, deadline=0)
    interval = statistics.median(r["seconds"] for r in warm[2:] or warm) / 2
    out: dict = {"interval_seconds": round(interval, 3)}
    for name, shedding in (("shedding", Shedding(interval * 0.8, "random", seed)),
                           ("no_shedding", None)):
        df = Dataflow("weblog")
        df.source("log", DDL)
        add_window(df, from_sql("w", windowed([(cfg["minutes"], cfg["minutes"])]),
                                eviction=Eviction(deadline=0), shedding=shedding))
        clock, latencies, cost = 0.0, [], None
        with Controller(str(tmp / name), df, spark=spark, num_partitions=partitions) as c:
            for i, f in enumerate(files):
                arrival = i * interval
                c.ingest("log", [f])
                start = max(clock, arrival)
                t0 = time.perf_counter()
                reports = c.run()
                clock = start + time.perf_counter() - t0
                m = reports[0].metrics
                if m["windows_emitted"]:
                    latencies.append(clock - arrival)
                cost = m["epoch_cost"]  # the model after the last epoch
                out.setdefault(f"{name}_rows_shed", []).append(m["rows_shed"])
            got = c.read_flow("w_windows").to_pandas()
        emitted = got[got["_mult"] > 0].groupby("window_start")["c2_fraction"].first()
        c2s = emitted.tolist()
        out[name] = {"latencies": [round(x, 3) for x in latencies],
                     "epoch_cost": cost,
                     "p95_latency_over_slide": round(float(np.percentile(latencies, 95))
                                                     / interval, 3) if latencies else None,
                     "min_c2": round(min(c2s), 3) if c2s else 0.0,
                     "latency_growth": round(latencies[-1] / latencies[0], 3)
                     if len(latencies) > 1 and latencies[0] else None}
    return out


# -- summary and figure ---------------------------------------------------------------------
def summarize(r: dict) -> dict:
    def target(value, goal, met):
        return {"value": value, "target": goal, "met": bool(met)}

    sp, work, fail, shed = r["spark"], r["work_per_slide"], r["failure"], r["shedding"]
    rows = max(sp[k]["strata_rows_aggregated_per_input"] for k in sp)
    conc = r["concurrent"]
    ratio16 = round(conc["16"]["strata_seconds"] / conc["1"]["strata_seconds"], 3)
    inv = max(v["combines"] + v["uncombines"] for k, v in work.items() if k.startswith("sum"))
    mx = max(v["combines"] for k, v in work.items() if k.startswith("max"))
    fe = fail["failure_eviction"]
    on_time = round(fe["on_time"] / max(1, fe["windows_due"]), 3)
    s, ns = shed["shedding"], shed["no_shedding"]
    return {
        "rows_aggregated_per_input": target(rows, "<= 1.05", rows <= 1.05),
        "speedup_vs_spark_window_r12": target(sp["r12"]["speedup"], ">= 3",
                                              sp["r12"]["speedup"] >= 3),
        "speedup_vs_spark_window_r60": target(sp["r60"]["speedup"], ">= 10",
                                              sp["r60"]["speedup"] >= 10),
        "seconds_16_windows_over_1": target(ratio16, "<= 1.25", ratio16 <= 1.25),
        "combines_per_slide_invertible_max": target(inv, "<= 2", inv <= 2),
        "combines_per_slide_max_amortized": target(mx, "<= 3", mx <= 3),
        "c2_exact_under_failure": target(fail["c2_exact"], "true", fail["c2_exact"]),
        "on_time_fraction_under_failure": target(on_time, "1.0", on_time == 1.0),
        "shedding_p95_latency_over_slide": target(s["p95_latency_over_slide"], "<= 1.5",
                                                  (s["p95_latency_over_slide"] or 99) <= 1.5),
        "shedding_min_c2": target(s["min_c2"], ">= 0.5", s["min_c2"] >= 0.5),
        "no_shedding_latency_growth": target(ns["latency_growth"], "> 1.5",
                                             (ns["latency_growth"] or 0) > 1.5),
        "results_match_duckdb": target(all(sp[k]["results_match_duckdb"] for k in sp),
                                       "true", all(sp[k]["results_match_duckdb"] for k in sp)),
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    sp = result["spark"]
    ax = axes[0][0]
    labels = list(sp)
    x = np.arange(len(labels))
    ax.bar(x - 0.2, [sp[k]["strata_seconds"] for k in labels], 0.4, label="strata (panes)")
    ax.bar(x + 0.2, [sp[k]["spark_seconds"] for k in labels], 0.4, label="Spark window()")
    ax.set_xticks(x, [f"range/slide {k[1:]}" for k in labels])
    ax.set_ylabel("seconds per increment (median)")
    ax.set_title("1. against Structured Streaming window()")
    ax.legend()
    ax = axes[0][1]
    conc = result["concurrent"]
    ax.plot([1, 4, 16], [conc[k]["strata_seconds"] for k in ("1", "4", "16")], "o-",
            label="strata, one pane store")
    if "spark_separate_queries_seconds" in conc["16"]:
        ax.plot([16], [conc["16"]["spark_separate_queries_seconds"]], "s",
                label="16 Spark queries")
    ax.set_xlabel("concurrent windows")
    ax.set_ylabel("seconds per increment")
    ax.set_title("2. concurrent windows")
    ax.legend()
    ax = axes[0][2]
    work = result["work_per_slide"]
    ratios = [4, 12, 60, 240]
    ax.plot(ratios, [work[f"sum_r{r}"]["combines"] + work[f"sum_r{r}"]["uncombines"]
                     for r in ratios], "o-", label="sum: combine + uncombine")
    ax.plot(ratios, [work[f"max_r{r}"]["combines"] for r in ratios], "s-",
            label="max: Two-Stacks combines")
    ax.set_xscale("log")
    ax.set_ylim(0, 4)
    ax.set_xlabel("range / slide")
    ax.set_ylabel("calls per slide")
    ax.set_title("3. work per slide")
    ax.legend()
    ax = axes[1][0]
    for key, curve in result["fidelity"].items():
        ax.plot([c["c2"] for c in curve], [c["distinct_error"] for c in curve], "o-",
                label=f"{key} distinct", markersize=3)
    ax.set_xlabel("C2 (fraction of cells)")
    ax.set_ylabel("relative error")
    ax.set_title("4. fidelity: distinct users")
    ax.legend(fontsize=6)
    ax = axes[1][1]
    fail = result["failure"]
    names = ["failure_eviction", "complete_only"]
    ax.bar(names, [fail[n]["on_time"] / max(1, fail[n]["windows_due"]) for n in names])
    ax.set_ylabel("results on time (goodput)")
    ax.set_title("5. one of 4 sources stops")
    ax = axes[1][2]
    shed = result["shedding"]
    for n in ("shedding", "no_shedding"):
        ax.plot(np.array(shed[n]["latencies"]) / shed["interval_seconds"], "o-", label=n)
    ax.axhline(1.5, color="grey", linestyle=":")
    ax.set_xlabel("result")
    ax.set_ylabel("latency / slide")
    ax.set_title("6. input at 2x the sustainable rate")
    ax.legend()
    fig.suptitle(f"strata windows: {result['machine']}, load {result['load_before']}→"
                 f"{result['load_after']}")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=5, partitions=2, master="local[2]")
    ap.add_argument("--no-spark-concurrent", action="store_true",
                    help="skip the 16 Structured Streaming queries of part 2")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.physical.session import get_spark

    cfg = QUICK if args.quick else FULL
    spark = get_spark(args.master, app_name="strata-bench-windows",
                      **{"spark.sql.session.timeZone": "UTC",
                         "spark.sql.streaming.pollingDelay": "50ms"})
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-windows-"))
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    try:
        rng = np.random.default_rng(args.seed)
        files = [write(records(rng, cfg, i), tmp / f"inc{i}.parquet")
                 for i in range(cfg["increments"])]
        result = {"machine": f"{os.cpu_count()} cores, {args.master}",
                  "command": " ".join(["benchmarks/windows.py", *(argv or sys.argv[1:])]),
                  "config": cfg, "load_before": round(load0, 2)}
        result["spark"] = part_spark(spark, cfg, files, tmp, args.partitions)
        result["concurrent"] = part_concurrent(spark, cfg, files, tmp, args.partitions,
                                               not (args.no_spark_concurrent or args.quick))
        result["work_per_slide"] = part_work_per_slide()
        result["fidelity"] = part_fidelity(args.seed)
        log("failure eviction")
        result["failure"] = part_failure(spark, cfg, tmp, args.partitions, args.seed)
        log("load shedding")
        result["shedding"] = part_shedding(spark, cfg, tmp, args.partitions, args.seed)
        result["load_after"] = round(os.getloadavg()[0], 2)
        result["seconds"] = round(time.perf_counter() - t0, 1)
        result["summary"] = summarize(result)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    emit(result, args.json, args.plot, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
