"""Benchmark: strata at bulk sizes, its driver fast paths off, against the peer a user would pick.

Every strata route at sizes above its driver limits, with every driver-side path switched
off by session conf (``DRIVER_OFF``: no epoch in the driver, no query changes or tables
through the driver, no series segment answered from rows the driver kept), in one run on
one Spark session. Three sections (``--sections`` picks some), each reusing its own
benchmark's code:

* ``urlcount`` (``benchmarks/peer_structured_streaming.py``): increments of URL
  sightings (Zipf 0.9 over ``keys`` URLs, so the counted state grows every increment;
  after the second, ``bulk_increments`` unmeasured increments add ``bulk_urls`` new URLs,
  so that the last increment meets 16 times the second's state) through strata's
  per-group direct stage, the vectorized stage and the SQL query, against Structured
  Streaming's JVM ``groupBy().count()`` (RocksDB state store) and Spark SQL recomputation
  over all increments so far, interleaved increment by increment; wall seconds per
  increment and the driver's peak resident memory during each step
  (``scale_support.peak_rss``).
* ``windows`` (``benchmarks/windows.py`` and ``windows_spark.py``): a web log from 4
  servers over ``urls`` distinct URLs (uniform), count and average bytes per URL over
  sliding windows of range/slide 12 and 60 (slide one minute) against Structured
  Streaming's ``window()`` on the RocksDB state store (an increment it has not finished
  after ``peer_timeout_s`` stops it, and the speedup is then a lower bound); the
  driver's peak RSS during the epochs over the same records at ``urls_small`` and at
  ``urls`` URLs (the harness reads the results to check them after);
  windows.py's load shedding at twice the sustainable rate.
* ``series`` (``benchmarks/series.py``): the paper's Q1/Q2/Q3 over daily Parquet segments
  ingested by reference, Original (Spark SQL per occurrence) against strata Full: bytes
  read + shuffled + written from Spark's metrics, and seconds; then the first
  ``cli_days`` days as ``strata ingest`` + ``strata run`` processes from the shell
  against the same epochs in the warm process: each starting Spark, and each connecting
  to a Spark Connect server kept running (``scale_support.connect_server``).

Spark's metrics come from the session's event log (``strata.observability.spark_metrics``
over ``get_spark(event_log_dir=...)``), never the UI's REST API, whose answers time out at
these sizes. Every route's answers are checked against DuckDB over the raw data
(``answers_match``). Sizes are in ``FULL`` and ``QUICK`` (the JSON's ``params``); the
full sizes are chosen to run in about 30 minutes on 2 cores, below the sizes
issue 54 names where those would not fit (the JSON's ``params.issue_sizes``). The session
gets ``DRIVER_MEMORY`` (in local mode one JVM holds the driver and the executors, which
aggregate bulk increments of millions of new URLs).

    python benchmarks/scale.py [--quick] [--sections urlcount,windows,series]
        [--master URL] [--out PATH.json] [--plot PATH.png]

Without ``--quick`` the results go to ``benchmarks/results/scale.json`` and ``scale.png``
(``scale_cluster.*`` with a ``spark://`` master: a cluster from
``scripts/local_cluster.sh``, started with ``STRATA_CLUSTER_PYTHONPATH=src`` so that its
workers import this strata); with ``--quick`` only stdout, unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import numpy as np
import peer_structured_streaming as peer
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import series as ser
import windows as win
from common import emit, event_log_dir, run_record, save, target_figure
from scale_support import (
    answers_of,
    connect_server,
    duckdb_url_counts,
    peak_rss,
    rss_now,
    series_from_shell,
    windows_match,
)

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("urlcount", "windows", "series")
FULL = {
    "urlcount": {"records": 2_000_000, "keys": 20_000_000, "increments": 4, "skew": 0.9,
                 "bulk_urls": 16_000_000, "bulk_increments": 4, "partitions": 2},
    "windows": {"rows": 500_000, "increments": 3, "urls": 1_000_000, "urls_small": 100_000,
                "users": 20_000, "minutes": 5, "shed_increments": 8, "shed_rows": 500_000,
                "partitions": 2, "peer_timeout_s": 180},
    "series": {**ser.FULL, "rows": 2_000_000, "cli_days": 5, "partitions": 4},
}
QUICK = {
    "urlcount": {"records": 5_000, "keys": 100_000, "increments": 3, "skew": 0.9,
                 "bulk_urls": 20_000, "bulk_increments": 1, "partitions": 2},
    "windows": {"rows": 4_000, "increments": 2, "urls": 2_000, "urls_small": 200,
                "users": 500, "minutes": 5, "shed_increments": 2, "shed_rows": 4_000,
                "partitions": 2, "peer_timeout_s": 120},
    # no day from the shell: each cold `strata` process costs 10-20 s even at these sizes
    "series": {**ser.QUICK, "days": 3, "week": 3, "rows": 10_000, "cli_days": 0,
               "partitions": 2},
}
ISSUE_SIZES = {  # issue 54, item 5: where the full sizes above are smaller, these did not fit
    "urlcount": "increments of 2,000,000 records, state from 1M to >= 16M keys",
    "windows": "increments of 2,000,000 records over >= 1,000,000 distinct URLs",
    "series": "14 daily segments of >= 2,000,000 rows; 7 days from the shell",
}
DRIVER_MEMORY = "12g"  # unless STRATA_DRIVER_MEMORY says otherwise
CONNECT_MEMORY = "4g"  # the Spark Connect server's driver, for the series from the shell
URL_METHODS = ["strata_direct", "strata_vectorized", "strata_query", "ss_builtin_count",
               "full_recompute"]
URL_ROUTES_OF_STRATA = ("strata_direct", "strata_vectorized", "strata_query")
# (comparison, bound) of each summary figure (issue 54)
TARGETS = {
    "urlcount_direct_over_ss_jvm": ("<=", 0.7),
    "urlcount_vectorized_over_ss_jvm": ("<=", 0.4),
    "urlcount_query_over_ss_jvm": ("<=", 0.5),
    "urlcount_epoch_growth_state_x16": ("<=", 1.2),
    "urlcount_driver_rss_growth_state_x16": ("<=", 1.2),
    "windows_speedup_vs_spark_r12": (">=", 3),
    "windows_speedup_vs_spark_r60": (">=", 10),
    "windows_driver_rss_growth_keys_x10": ("<=", 1.2),
    "windows_shedding_p95_latency_over_slide": ("<=", 1.5),
    "windows_shedding_min_c2": (">=", 0.5),
    "series_parquet_io_over_original": ("<=", 0.6),
    "series_parquet_seconds_over_original": ("<=", 0.6),
    "series_cli_run_over_warm_epoch": ("<=", 1.5),
    "series_cli_run_over_warm_epoch_connect": ("<=", 1.5),  # the same over a kept server
}

_STARTED = time.perf_counter()


def log(msg: str) -> None:
    print(f"[scale {time.perf_counter() - _STARTED:6.1f} s] {msg}", file=sys.stderr,
          flush=True)


def driver_off() -> dict[str, str]:
    """Session confs that turn every driver-side path of strata off (docs/configuration.md)."""
    from strata import config

    return {config.DRIVER_EPOCH_ROWS.name: "-1", config.DRIVER_EPOCH_STATE_BYTES.name: "0",
            config.TRANSLATE_DRIVER_RECORDS.name: "-1", config.QUERY_DRIVER_ROWS.name: "0",
            config.QUERY_TABLE_ROWS.name: "0", config.HELD_SEGMENT_ROWS.name: "-1",
            config.ARROW.name: "false"}


# -- urlcount ------------------------------------------------------------------------------
def make_bulk(root: Path, first_id: int, urls: int, parts: int, seed: int) -> list[Path]:
    """``urls`` new URLs (ids from ``first_id`` on, none a Zipf increment draws), each
    sighted once, shuffled over ``parts`` Parquet files: increments that grow the counted
    state without being measured."""
    rng = np.random.default_rng([seed, first_id, urls])
    ids = pa.array(first_id + rng.permutation(urls), pa.int64())
    site = pc.cast(pc.remainder(ids, 500), pa.string())
    page = pc.cast(ids, pa.string())
    col = pc.binary_join_element_wise("https://site", site, ".example.com/page/", page, "")
    root.mkdir(parents=True, exist_ok=True)
    files = []
    for i, part in enumerate(np.array_split(np.arange(urls), parts), 1):
        path = root / f"bulk-{i:02d}.parquet"
        pq.write_table(pa.table({"url": col.take(pa.array(part))}), path, compression="zstd")
        files.append(path)
    return files


def url_increments(p: dict, tmp: Path, seed: int) -> tuple[list[Path], list[dict]]:
    """The Zipf increments, with ``bulk_increments`` files of ``bulk_urls`` new URLs after
    the second: the first measured increment (the second) meets the first increment's
    state, the last meets that plus every bulk URL (stats marked ``bulk`` are not
    measured)."""
    files, stats = peer.make_increments(tmp / "increments", p["records"], p["keys"],
                                        p["increments"], p["skew"], seed)
    bulk = make_bulk(tmp / "bulk", p["keys"], p["bulk_urls"], p["bulk_increments"], seed)
    per = p["bulk_urls"] // p["bulk_increments"]
    bulk_stats = [{"distinct_urls": per, "urls_so_far": stats[1]["urls_so_far"] + per * i,
                   "bulk": True} for i in range(1, len(bulk) + 1)]
    later = [{**st, "urls_so_far": st["urls_so_far"] + p["bulk_urls"]} for st in stats[2:]]
    gc.collect()  # the generators' arrays, before any step measures the driver's memory
    pa.default_memory_pool().release_unused()
    return ([*files[:2], *bulk, *files[2:]], [*stats[:2], *bulk_stats, *later])


def measured(stats: list[dict]) -> list[int]:
    """Indices of the increments the figures use: not the first (it starts each method's
    query or stage) and not a bulk one."""
    return [i for i, st in enumerate(stats) if i > 0 and not st.get("bulk")]


def section_urlcount(spark, metrics, p: dict, tmp: Path, quick: bool, seed: int) -> dict:
    spark.conf.set("spark.sql.shuffle.partitions", str(p["partitions"]))
    files, stats = url_increments(p, tmp, seed)
    log(f"urlcount: {len(files)} increments ({p['bulk_increments']} of them bulk); URLs "
        f"after each {[s['urls_so_far'] for s in stats]}")
    # millions of URLs: Structured Streaming on the RocksDB state store, as Spark's guide
    # advises for millions of keys (with the in-memory store the local JVM grew to 9.9 GB
    # during its step at 9.7M URLs)
    ctx = {"spark": spark, "metrics": metrics, "tmp": tmp, "records": p["records"],
           "partitions": p["partitions"], "rocksdb": True}
    if not quick:  # JVM, Python workers, imports, a first streaming query: not reported
        warm, _ = peer.make_increments(tmp / "warm-inc", 2000, 20_000, 1, p["skew"], seed + 1)
        peer.run_interleaved(URL_METHODS, {**ctx, "records": 2000, "tmp": tmp / "warm"},
                             warm, 1)
    want: list[pa.Table] = []  # DuckDB's counts, once every step ran (not in their RSS)

    def matches(got: pa.Table) -> bool:
        want[:] = want or [duckdb_url_counts(files)]
        return bool(got.equals(want[0]))

    rows, matched, skipped, loads = peer.run_interleaved(
        URL_METHODS, ctx, files, len(files), around=lambda m, e: peak_rss(),
        reduce_counts=matches)
    per = {m: [r["seconds"] for r in rs] for m, rs in rows.items()}
    steady_at = measured(stats)
    return {"per_increment_seconds": per,
            "median_seconds": {m: round(statistics.median([x[i] for i in steady_at]), 3)
                               for m, x in per.items()},
            "measured_increments": [i + 1 for i in steady_at],
            "per_increment": rows, "increment_stats": stats, "skipped": skipped,
            "answers_match_duckdb": matched,
            "final_urls": want[0].num_rows if want else None,
            "load_average_by_step": loads}


# -- windows -------------------------------------------------------------------------------
def window_files(cfg: dict, urls: int, tmp: Path, seed: int) -> list[str]:
    """windows.py's web log, its URL column redrawn uniformly over ``urls`` URLs."""
    rng = np.random.default_rng(seed)
    tmp.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(cfg["increments"]):
        t = win.records(rng, cfg, i)
        ids = rng.integers(0, urls, t.num_rows)
        t = t.set_column(t.schema.get_field_index("url"), "url",
                         pa.array([f"/u{k}" for k in ids], pa.string()))
        out.append(win.write(t, tmp / f"inc{i}.parquet"))
    return out


def section_windows(spark, metrics, p: dict, tmp: Path, quick: bool, seed: int) -> dict:
    spark.conf.set("spark.sql.shuffle.partitions", str(p["partitions"]))
    parts = p["partitions"]
    small = window_files(p, p["urls_small"], tmp / "small", seed)
    files = window_files(p, p["urls"], tmp / "many", seed)
    out: dict = {"distinct_urls": {"small": _distinct(small), "many": _distinct(files)}}
    log(f"windows: driver RSS at {out['distinct_urls']['small']:,} URLs (range/slide 12)")
    # the peaks of the epochs alone: the harness then reads every result into pandas
    # (rows per window and URL) to check it, which is not strata's memory
    # unmeasured: the first run and check load what every later one holds (DuckDB too)
    _, results = win.strata_run(spark, small[:1], tmp / "rss-warm", win.windowed([(12, 1)]),
                                parts, deadline=0)
    windows_match(small[:1], results, 12)
    del results
    released()
    rss_small: dict = {}
    runs, results = win.strata_run(spark, small, tmp / "rss-small", win.windowed([(12, 1)]),
                                   parts, epochs=measured_rss(rss_small), deadline=0)
    out["rss_small_keys"] = {**rss_small, "runs": runs,
                             "match": windows_match(small, results, 12)}
    del results
    released()  # first: memory a process keeps can only raise the second
    for ratio in (12, 60):
        log(f"windows range/slide {ratio}: strata, {out['distinct_urls']['many']:,} URLs")
        rss: dict = {}
        runs, results = win.strata_run(spark, files, tmp / f"r{ratio}",
                                       win.windowed([(ratio, 1)]), parts,
                                       epochs=measured_rss(rss), deadline=0)
        match = windows_match(files, results, ratio)
        del results
        released()
        log(f"windows range/slide {ratio}: Structured Streaming window() (RocksDB state)")
        spark_runs, timed_out = peer_windows(spark, files, tmp / f"ss{ratio}", ratio,
                                             p["peer_timeout_s"])
        out[f"r{ratio}"] = {"strata": runs, "spark": spark_runs, "rss": rss, "match": match,
                            **compare_windows(runs, spark_runs, timed_out)}
    log("windows: load shedding at twice the sustainable rate")
    (tmp / "shed").mkdir()
    out["shedding"] = win.part_shedding(spark, p, tmp / "shed", parts, seed)
    return out


def measured_rss(into: dict) -> Callable[[], AbstractContextManager]:
    """A context for :func:`windows.strata_run`'s epochs that puts their peak RSS
    (``scale_support.peak_rss``) into ``into``."""
    @contextmanager
    def measure() -> Iterator[None]:
        into["python_rss_start"] = rss_now()["python"]
        with peak_rss() as peak:
            yield
        into.update(peak)
    return measure


def released() -> None:
    """Give back what the harness read: Python's garbage, Arrow's unused pool memory."""
    gc.collect()
    pa.default_memory_pool().release_unused()


def peer_windows(spark, files: list[str], workdir: Path, ratio: int,
                 timeout_s: float) -> tuple[list[dict], dict | None]:
    """Structured Streaming's ``window()`` over ``files`` (range ``ratio`` minutes, slide
    one), on the RocksDB state store (the one Spark's docs name for state this large): its
    per-increment rows, and ``{"increment", "after_seconds"}`` if an increment had not
    finished after ``timeout_s`` seconds (the query is then stopped, and later increments
    not fed)."""
    from common import ROCKSDB
    from windows_spark import FeedTimedOut, SparkWindowStream

    stream = SparkWindowStream(spark, str(workdir), ratio * 60, 60, f"scale_r{ratio}",
                               state_store=ROCKSDB)
    runs: list[dict] = []
    try:
        for f in files:
            try:
                runs.append(stream.feed(f, timeout_s=timeout_s))
            except FeedTimedOut as e:
                log(f"  {e}: stopped")
                return runs, {"increment": len(runs) + 1, "after_seconds": e.seconds}
    finally:
        stream.stop()
    return runs, None


def compare_windows(runs: list[dict], spark_runs: list[dict], timed_out: dict | None) -> dict:
    """strata's and the peer's median seconds per increment after the first, and their
    ratio; where the peer gave up on an increment, the ratio is a lower bound: the seconds
    it had spent on it over strata's seconds for the same increment."""
    strata_s = win.median_after_first([r["seconds"] for r in runs])
    if timed_out is None:
        spark_s = win.median_after_first([r["seconds"] for r in spark_runs])
        return {"strata_seconds": strata_s, "spark_seconds": spark_s,
                "speedup": round(spark_s / strata_s, 2), "speedup_is_lower_bound": False}
    same = runs[timed_out["increment"] - 1]["seconds"]
    return {"strata_seconds": strata_s, "spark_seconds": None, "spark_timed_out": timed_out,
            "speedup": round(timed_out["after_seconds"] / same, 2),
            "speedup_is_lower_bound": True}


def _distinct(files: list[str]) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    return len(pc.unique(pa.concat_tables([pq.read_table(f, columns=["url"])
                                           for f in files])["url"]))


# -- series --------------------------------------------------------------------------------
def section_series(spark, metrics, p: dict, tmp: Path, quick: bool, seed: int, *,
                   master: str, confs: dict[str, str]) -> dict:
    spark.conf.set("spark.sql.shuffle.partitions", str(p["partitions"]))
    ser.SERIES["q2"] = ser.weekly(p["week"])
    (tmp / "segments").mkdir(parents=True)
    files = ser.segments(p, tmp / "segments", seed, formats=("parquet",))["parquet"]
    parts, names = p["partitions"], list(ser.SERIES)
    if not quick:  # warm-up, not reported
        log("series: warm-up")
        ser.run_original(spark, metrics, files[:3], tmp / "warm", cache_by_hand=False)
        ser.run_strata(spark, metrics, files[:3], tmp / "warm", [names], parts)
    log(f"series: original over {len(files)} Parquet segments of {p['rows']:,} rows")
    original = ser.run_original(spark, metrics, files, tmp, cache_by_hand=False)
    log("series: strata full, segments by reference")
    full, answers = ser.run_strata(spark, metrics, files, tmp / "full", [names], parts)
    match = {"full": ser.check_answers(files, answers)}
    shell, warm = None, None
    if p["cli_days"]:
        log(f"series: {p['cli_days']} days from the shell")
        on_cluster = master.startswith("spark://")
        if on_cluster:  # a standalone master gives an application every free core: the
            spark.stop()  # shell's runs would wait for executors while this one holds them
        shell = series_from_shell(files[:p["cli_days"]], tmp / "shell", dict(ser.SERIES),
                                  ser.DDL, master=master, partitions=parts, confs=confs, log=log)
        log(f"series: {p['cli_days']} days from the shell over a Spark Connect server")
        with connect_server(master, CONNECT_MEMORY, tmp / "connect-server") as url:
            shell["over_connect"] = series_from_shell(
                files[:p["cli_days"]], tmp / "shell-connect", dict(ser.SERIES), ser.DDL,
                master=master, partitions=parts, confs=confs, log=log, remote=url)
        if on_cluster:  # series is the last section: this session only reads the answers
            from strata.physical.session import get_spark

            spark = get_spark(master, app_name="strata-bench-scale-answers")
        match["shell"] = ser.check_answers(files, answers_of(tmp / "shell", spark))
        match["shell_over_connect"] = ser.check_answers(
            files, answers_of(tmp / "shell-connect", spark))
        warm = round(statistics.median(d["run_seconds"] for d in full[:p["cli_days"]]), 3)
    return {"original": original, "full": full, "shell": shell, "answers_match_duckdb": match,
            "warm_median_run_seconds_same_days": warm,
            "totals": {n: {k: ser.total(d, k) for k in ("read", "shuffled", "written", "io",
                                                        "seconds")}
                       for n, d in (("original", original), ("full", full))}}


# -- summary -------------------------------------------------------------------------------
def entry(name: str, value, *, lower_bound: bool = False, **extra) -> dict:
    """A summary figure against its target; a ``lower_bound`` value (the peer gave up) can
    show a ``>=`` target met but never missed."""
    op, bound = TARGETS[name]
    figure = target_figure(value, op, bound, **extra)
    if lower_bound:
        figure |= {"met": True if figure["met"] and op == ">=" else None,
                   "value_is_lower_bound": True}
    return figure


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def summarize_urlcount(u: dict) -> dict:
    med, rows, stats = u["median_seconds"], u["per_increment"], u["increment_stats"]
    ss = med.get("ss_builtin_count")
    out = {f"urlcount_{m.removeprefix('strata_')}_over_ss_jvm": entry(
        f"urlcount_{m.removeprefix('strata_')}_over_ss_jvm", _ratio(med.get(m), ss))
        for m in URL_ROUTES_OF_STRATA}
    # increment 2 (state of the first increment's URLs) against the last (the most state)
    state = {"state_urls_smallest": stats[0]["urls_so_far"],
             "state_urls_largest": stats[-2]["urls_so_far"] if len(stats) > 1 else None}
    growth = {m: _ratio(rows[m][-1]["seconds"], rows[m][1]["seconds"])
              for m in URL_ROUTES_OF_STRATA if len(rows.get(m, ())) > 1}
    rss = {m: {k: _ratio(rows[m][-1][k], rows[m][1][k])
               for k in ("python_rss_peak", "jvm_rss_peak", "driver_rss_peak")}
           for m in URL_ROUTES_OF_STRATA if len(rows.get(m, ())) > 1}
    state["state_growth"] = _ratio(state["state_urls_largest"], state["state_urls_smallest"])
    out["urlcount_epoch_growth_state_x16"] = entry(
        "urlcount_epoch_growth_state_x16", max(growth.values(), default=None),
        by_route=growth, **state)
    out["urlcount_driver_rss_growth_state_x16"] = entry(
        "urlcount_driver_rss_growth_state_x16",
        max((r["python_rss_peak"] for r in rss.values() if r["python_rss_peak"]), default=None),
        measure="the Python driver's peak RSS (in local mode the JVM also holds the "
                "executors and Structured Streaming's state: its growth is beside)",
        by_route=rss, **state)
    return out


def summarize_windows(w: dict) -> dict:
    rss = _ratio(w["r12"]["rss"]["python_rss_peak"], w["rss_small_keys"]["python_rss_peak"])
    jvm = _ratio(w["r12"]["rss"]["jvm_rss_peak"], w["rss_small_keys"]["jvm_rss_peak"])
    shed = w["shedding"]["shedding"]
    return {
        **{f"windows_speedup_vs_spark_r{r}": entry(
            f"windows_speedup_vs_spark_r{r}", w[f"r{r}"]["speedup"],
            lower_bound=w[f"r{r}"].get("speedup_is_lower_bound", False)) for r in (12, 60)},
        "windows_driver_rss_growth_keys_x10": entry(
            "windows_driver_rss_growth_keys_x10", rss, jvm_growth=jvm,
            distinct_urls=w["distinct_urls"],
            measure="the Python driver's peak RSS during the epochs (after an unmeasured "
                    "warm-up run and check), range/slide 12, same records"),
        "windows_shedding_p95_latency_over_slide": entry(
            "windows_shedding_p95_latency_over_slide", shed["p95_latency_over_slide"]),
        "windows_shedding_min_c2": entry("windows_shedding_min_c2", shed["min_c2"]),
    }


def summarize_series(s: dict) -> dict:
    orig, full = s["original"], s["full"]
    io = _ratio(ser.total(full, "io"), ser.total(orig, "io"))
    secs = _ratio(ser.total(full[1:], "seconds"), ser.total(orig[1:], "seconds"))
    shell, warm = s["shell"], s["warm_median_run_seconds_same_days"]
    cli = None if shell is None else _ratio(shell["median_run_seconds"], warm)
    connect = None if shell is None else _ratio(shell["over_connect"]["median_run_seconds"],
                                                warm)
    not_run = {"not_run": "no day from the shell (cli_days 0)"} if shell is None else {}
    return {"series_parquet_io_over_original": entry("series_parquet_io_over_original", io),
            "series_parquet_seconds_over_original": entry(
                "series_parquet_seconds_over_original", secs, days="2..n (day 1 starts Spark)"),
            "series_cli_run_over_warm_epoch": entry(
                "series_cli_run_over_warm_epoch", cli,
                measure="median wall seconds of `strata run` per day from the shell / "
                        "median seconds of the same days' epochs in the warm process",
                **not_run),
            "series_cli_run_over_warm_epoch_connect": entry(
                "series_cli_run_over_warm_epoch_connect", connect,
                measure="the same, each `strata run` connecting to a Spark Connect server "
                        "kept running (started once, before the first day)",
                **not_run)}


def summarize(result: dict) -> dict:
    out: dict = {name: target_figure(None, op, b, not_run="section not selected")
                 for name, (op, b) in TARGETS.items()}
    matches: dict = {}
    if "urlcount" in result:
        out |= summarize_urlcount(result["urlcount"])
        matches["urlcount"] = result["urlcount"]["answers_match_duckdb"]
    if "windows" in result:
        out |= summarize_windows(result["windows"])
        w = result["windows"]
        matches["windows"] = {k: w[k]["match"]["match"] for k in ("rss_small_keys", "r12", "r60")}
    if "series" in result:
        out |= summarize_series(result["series"])
        matches["series"] = result["series"]["answers_match_duckdb"]
    ok = bool(matches) and all(v for m in matches.values() for v in m.values())
    out["answers_match"] = {"value": ok, "target": True, "met": ok, "by_route": matches}
    return out


# -- figure --------------------------------------------------------------------------------
def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    if u := result.get("urlcount"):
        for m, xs in u["per_increment_seconds"].items():
            axes[0][0].plot(range(1, len(xs) + 1), xs, marker="o", label=m)
            if m in URL_ROUTES_OF_STRATA:
                axes[0][1].plot(range(1, len(xs) + 1),
                                [r["python_rss_peak"] / 2**20 for r in u["per_increment"][m]],
                                marker="o", label=f"{m} (Python driver)")
        jvm = [r["jvm_rss_peak"] / 2**20 for r in u["per_increment"]["strata_direct"]]
        axes[0][1].plot(range(1, len(jvm) + 1), jvm, "k--", label="JVM during strata_direct")
        bulk = [i for i, st in enumerate(u["increment_stats"], 1) if st.get("bulk")]
        if bulk:
            for ax in axes[0]:
                ax.axvspan(bulk[0] - 0.5, bulk[-1] + 0.5, color="0.9",
                           label="bulk increments (not measured)")
    axes[0][0].set(title="URL count: seconds per increment", xlabel="increment",
                   yscale="log")
    axes[0][1].set(title="URL count: driver peak RSS (MiB) per increment", xlabel="increment")
    if w := result.get("windows"):
        x = np.arange(2)
        axes[1][0].bar(x - 0.2, [w[k]["strata_seconds"] for k in ("r12", "r60")], 0.4,
                       label="strata")
        axes[1][0].bar(x + 0.2, [w[k]["spark_seconds"] or w[k]["spark_timed_out"]
                                 ["after_seconds"] for k in ("r12", "r60")], 0.4,
                       label="Structured Streaming window() (or when stopped)")
        axes[1][0].set_xticks(x, ["range/slide 12", "range/slide 60"])
    axes[1][0].set(title="windows: seconds per increment (median)")
    if s := result.get("series"):
        for name in ("original", "full"):
            axes[1][1].plot([d["day"] for d in s[name]], [d["seconds"] for d in s[name]],
                            marker="o", label=f"{name}: seconds per day")
        days = s["shell"]["days"] if s["shell"] else []
        axes[1][1].plot([d["day"] for d in days], [d["run_seconds"] for d in days],
                        marker="s", label="`strata run` from the shell")
        days = s["shell"]["over_connect"]["days"] if s["shell"] else []
        axes[1][1].plot([d["day"] for d in days], [d["run_seconds"] for d in days],
                        marker="^", label="`strata run` from the shell over Spark Connect")
    axes[1][1].set(title="series over Parquet segments by reference", xlabel="day")
    for ax in axes.flat:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    run = result.get("run", {})
    fig.suptitle(f"strata at scale, driver paths off ({result['params']['master']}, load "
                 f"{run.get('load_average_1m', {}).get('start')}→"
                 f"{run.get('load_average_1m', {}).get('end')})")
    save(fig, path)


# -- main ----------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (under a minute)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    ap.add_argument("--out", "--json", dest="out", metavar="PATH",
                    help="write the JSON here (default without --quick: "
                         "benchmarks/results/scale.json, scale_cluster.json on spark://)")
    ap.add_argument("--plot", metavar="PATH.png",
                    help="draw the figure here (default: beside the JSON, without --quick)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if bad := [s for s in args.sections if s not in SECTIONS]:
        ap.error(f"unknown sections {bad}: choose from {','.join(SECTIONS)}")
    args.sections.sort(key=SECTIONS.index)  # in this order: series stops the session
    if args.out is None and not args.quick:
        stem = "scale_cluster" if args.master.startswith("spark://") else "scale"
        args.out = str(ROOT / "benchmarks" / "results" / f"{stem}.json")
    if args.plot is None and args.out and not args.quick:
        args.plot = str(Path(args.out).with_suffix(".png"))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    sizes = copy.deepcopy(QUICK if args.quick else FULL)
    confs = driver_off()
    os.environ.setdefault("STRATA_DRIVER_MEMORY", DRIVER_MEMORY)
    spark = get_spark(args.master, app_name="strata-bench-scale", event_log_dir=event_log_dir(),
                      **{"spark.sql.session.timeZone": "UTC",
                         "spark.sql.streaming.pollingDelay": peer.POLLING_DELAY,
                         "spark.ui.retainedStages": "100000",
                         "spark.ui.retainedJobs": "100000", **confs})
    for k, v in confs.items():
        spark.conf.set(k, v)
    metrics = SparkMetrics(spark, timeout_s=120)
    result: dict = {"params": {"quick": args.quick, "master": spark.sparkContext.master,
                               "sections": args.sections, "seed": args.seed,
                               "driver_memory": os.environ["STRATA_DRIVER_MEMORY"],
                               "driver_off_confs": confs,
                               **{s: sizes[s] for s in args.sections},
                               "issue_sizes": {s: ISSUE_SIZES[s] for s in args.sections}},
                    "section_seconds": {}}
    runners = {"urlcount": section_urlcount, "windows": section_windows,
               "series": lambda *a: section_series(*a, master=args.master, confs=confs)}
    try:
        for name in args.sections:
            tmp = Path(tempfile.mkdtemp(prefix=f"strata-bench-scale-{name}-"))
            t0 = time.perf_counter()
            try:
                result[name] = runners[name](spark, metrics, sizes[name], tmp, args.quick,
                                             args.seed)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            result["section_seconds"][name] = round(time.perf_counter() - t0, 1)
        result["summary"] = summarize(result)
        result["wall_seconds"] = round(time.perf_counter() - _STARTED, 1)
    finally:
        spark.stop()
    if args.out:
        emit(result, args.out, args.plot, plot)
    else:
        print(json.dumps({**result, "run": run_record()}, indent=1, default=str))
    for name, e in result["summary"].items():
        log(f"[{'ok ' if e['met'] else 'MISS' if e['met'] is False else ' -- '}] {name} "
            f"{e['value']} (target {e['target']})")
    return 0 if result["summary"]["answers_match"]["value"] else 1


if __name__ == "__main__":
    sys.exit(main())
