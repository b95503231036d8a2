"""Benchmark: does per-epoch work stay proportional to the increment (docs/architecture.md,
"State is never re-shuffled")?

Runs the URL-count stage (``strata.apps.urlcount``) with its state pre-loaded to S records,
then E epochs of I new records each, in both execution modes (``direct`` over the default
columnar state store, ``indexed``: direct over the indexed store, ``blackbox``), and as the
vectorized stage (``vectorized``: ``count_urls_vectorized`` over columnar state
runs), with both state groupings (``outer``, ``inner``), for several values of S. Per epoch
it records the wall time of ``run_epoch``, Spark's own shuffle bytes for the epoch's jobs (read from
Spark's event log through :class:`strata.observability.spark_metrics.SparkMetrics`), the state
bytes read / on disk reported by the runner, and the exact number of state records.

    python benchmarks/incremental_shuffle.py [--quick] --json PATH [--plot PATH.png]
                                             [--master URL]

The JSON goes to ``PATH`` and to stdout; a short human summary (and progress) goes to
stderr. The target ratios are computed between the smallest and the largest
S (the largest must be at least 4x the smallest):

* direct shuffle bytes at 4xS / at S            <= 1.1 (only the increment is shuffled)
* black-box shuffle bytes at 4xS / at S         grows (the whole state is shuffled)
* inner direct state_bytes_read / state_bytes_total, run with I <= 1% of S  <= 5%
  (epochs 2..E: runs stay in the memory of the worker that read or wrote them, and in
  the machine's shared decoded copy, ``storage/machine_runs.py``, so storage is read only
  for runs neither holds; the first epoch's figure is reported too, and the bytes found
  on the machine as ``from_machine``. ``--machine-run-cache-mb 0`` turns the machine's
  copy off.)
* direct per-epoch seconds at 4xS / at S        <= 1.25 (mean of epochs 2..E)
* vectorized shuffle bytes at 4xS / at S        <= 1.1
* state bytes on disk / the same state as one Parquet file (snappy), inner at the
  largest S, direct and vectorized             <= 1.5
* outer epoch seconds at the largest S, direct (and vectorized) / black-box  <= 0.5

Each ``direct`` figure is also given for the indexed store (``indexed_…``; the read
fraction as ``inner_indexed_state_read_fraction``).

Outer grouping calls ``translate`` for every stored key each epoch, so its per-epoch time
and state bytes read necessarily grow with S; the time target is met (or not) by the inner
grouping, and is reported for outer only for comparison.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from common import emit, event_log_dir, save  # benchmarks/common.py (this script's folder)

MODES = ("direct", "indexed", "blackbox", "vectorized")
DIRECT_STORES = ("direct", "indexed")  # direct mode over the columnar / the indexed store
GROUPINGS = ("outer", "inner")
URL_SCHEMA = pa.schema([("url", pa.string())])

# Full and --quick sizes. I = 1% of the largest S, so the inner run at the largest S
# touches at most 1% of the keys.
FULL = {"states": (250_000, 1_000_000), "increment": 10_000, "epochs": 5}
QUICK = {"states": (10_000, 40_000), "increment": 400, "epochs": 2}

TARGET_DIRECT_SHUFFLE = 1.1
TARGET_STATE_READ = 0.05
TARGET_DIRECT_TIME = 1.25
TARGET_STATE_OVER_PARQUET = 1.5  # state bytes on disk / the same records in Parquet
TARGET_OUTER_VS_BLACKBOX = 0.5  # outer epoch seconds / black-box outer epoch seconds


def url(n: int) -> str:
    """A realistic URL for id ``n`` (500 sites, one page per id). Ids are zero-padded to
    seven digits so that an increment has the same bytes at every S: unpadded, the larger
    run's URLs were a digit longer, and its shuffle grew with the data, not the state."""
    return f"https://site{n % 500:03d}.example.com/page/{n:07d}"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- input data ------------------------------------------------------------------------------
@dataclass
class Workload:
    """The input increments of one value of S, shared by every mode and grouping."""

    initial: Any  # Increment with S distinct URLs (the pre-load epoch)
    epochs: list[Any]  # Increment per epoch
    state_records: list[int]  # exact number of distinct URLs after each epoch
    distinct_in: list[int]  # distinct URLs per increment (= records the epoch outputs)


def _write_urls(uri: str, ids: np.ndarray) -> tuple[str, int, int]:
    from strata.storage.increments import write_table

    table = pa.table({"url": pa.array([url(int(n)) for n in ids], pa.string())}, URL_SCHEMA)
    return uri, len(ids), write_table(uri, table)


def _increment(root: Path, name: str, ids: np.ndarray, files: int):
    from strata.storage.increments import Increment

    parts = [
        _write_urls(str(root / f"{name}-part{i}.parquet"), chunk)
        for i, chunk in enumerate(np.array_split(ids, files))
        if len(chunk)
    ]
    return Increment(
        tuple(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts)
    )


def make_workload(
    root: Path, s: int, inc: int, epochs: int, existing: float, seed: int, preload_files: int,
    increment_files: int,
) -> Workload:
    """Pre-load ids 0..S-1; each epoch draws ``existing`` of I from the ids seen so far
    (uniformly, with replacement) and the rest as new ids, shuffled, with a fixed seed."""
    rng = np.random.default_rng([seed, s, inc])
    initial = _increment(root, "initial", rng.permutation(s), preload_files)
    next_id, incs, counts, distinct = s, [], [], []
    n_old = round(inc * existing)
    for e in range(1, epochs + 1):
        old = rng.integers(0, next_id, size=n_old)
        new = np.arange(next_id, next_id + inc - n_old)
        ids = rng.permutation(np.concatenate([old, new]))
        next_id += len(new)
        incs.append(_increment(root, f"epoch{e:03d}", ids, increment_files))
        counts.append(next_id)
        distinct.append(len(np.unique(ids)))
    return Workload(initial, incs, counts, distinct)


# -- one run ---------------------------------------------------------------------------------
def count_state(runner, stage) -> tuple[int, int]:
    """(records, sum of counts) in the committed state, read back from its files."""
    recs = runner.state_records(stage)
    return len(recs), sum(r["count"] for r in recs)


def run_one(
    spark, metrics, home: Path, mode: str, grouping: str, s: int, work: Workload,
    partitions: int, verify: bool, quiet: bool = False,
) -> dict:
    from strata.apps.urlcount import urlcount_dataflow, urlcount_vectorized_dataflow
    from strata.physical.runner import SparkStageRunner

    build = urlcount_vectorized_dataflow if mode == "vectorized" else urlcount_dataflow
    stage = build(grouping).stages["count"]
    runner = SparkStageRunner(str(home), spark, num_partitions=partitions,
                              mode="blackbox" if mode == "blackbox" else "direct",
                              store="indexed" if mode == "indexed" else "columns")
    tag = f"{mode}/{grouping} S={s:,}"
    t0 = time.perf_counter()
    runner.run_epoch(stage, {"urls": work.initial})  # pre-load: not timed, not reported
    preload = time.perf_counter() - t0
    if not quiet:
        log(f"[{tag}] pre-loaded {s:,} URLs in {preload:.1f} s")
    epochs = []
    for e, inc in enumerate(work.epochs):
        with metrics.measure(f"bench-{mode}-{grouping}-{s}-e{e + 1}") as m:
            t0 = time.perf_counter()
            res = runner.run_epoch(stage, {"urls": inc})
            seconds = time.perf_counter() - t0
        if res.outputs["counts"].records != work.distinct_in[e]:
            raise RuntimeError(
                f"[{tag}] epoch {e + 1} wrote {res.outputs['counts'].records} counts, "
                f"expected {work.distinct_in[e]}"
            )
        rm = res.metrics
        ep = {
            "seconds": round(seconds, 4),
            "shuffle_bytes": m.shuffle_write_bytes,
            "state_bytes_read": rm["state_bytes_read"],
            "state_bytes_from_machine": rm.get("state_bytes_from_machine", 0),
            "state_bytes_total": rm["state_bytes_total"],
            "state_records": work.state_records[e],
            "keys_called": rm["keys_called"],
            "shuffle_read_bytes": m.shuffle_read_bytes,
            "shuffle_write_records": m.shuffle_write_records,
            "spark_jobs": m.jobs,
            "spark_tasks": m.tasks,
            "output_records": res.outputs["counts"].records,
        }
        epochs.append(ep)
        if not quiet:
            log(
                f"[{tag}] epoch {e + 1}: {seconds:.2f} s, shuffle {m.shuffle_write_bytes:,} B, "
                f"state read {rm['state_bytes_read']:,} of {rm['state_bytes_total']:,} B, "
                f"{rm['keys_called']:,} keys called"
            )
    run = {
        "mode": mode, "state_grouping": grouping, "initial_state_records": s,
        "increment_records": work.epochs[0].records, "preload_seconds": round(preload, 3),
        "epochs": epochs,
    }
    if verify:  # the state really holds state_records URLs and all sightings
        t0 = time.perf_counter()
        n, total = count_state(runner, stage)
        run["verify_seconds"] = round(time.perf_counter() - t0, 3)
        want = (work.state_records[-1], s + sum(i.records for i in work.epochs))
        if (n, total) != want:
            raise RuntimeError(f"[{tag}] state has {n} records / {total} sightings; want {want}")
        run["state_verified"] = True
        run["state_bytes_parquet"] = parquet_bytes(runner.state_table(stage), home)
        run["state_bytes_total"] = epochs[-1]["state_bytes_total"]
    return run


def parquet_bytes(table: pa.Table, home: Path) -> int:
    """The size of ``table`` as one Parquet file with Spark's default codec (snappy)."""
    import pyarrow.parquet as pq

    path = home / "state-as-parquet.parquet"
    pq.write_table(table, path, compression="snappy")
    return path.stat().st_size


# -- summary ---------------------------------------------------------------------------------
def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _steady(run: dict) -> list[dict]:
    """Epochs 2..E (epoch 1 after the pre-load is warm-up), or all if there is only one."""
    return run["epochs"][1:] or run["epochs"]


def _read_fraction(run: dict, what: str = "state_bytes_read") -> float:
    """Of epochs 2..E, the mean of ``what`` (bytes read from storage, or
    ``state_bytes_from_machine``: stored bytes of runs found in the machine's decoded
    copy instead) over the state's bytes. Epoch 1 after the pre-load finds no run in the
    workers' memory (``RUN_CACHE``), only the machine's copies of the runs the pre-load
    wrote (reported apart, as ``cold_first_epoch``)."""
    return _mean([e.get(what, 0) / e["state_bytes_total"] for e in _steady(run)
                  if e["state_bytes_total"]])


def summarize(runs: list[dict]) -> dict:
    by = {(r["mode"], r["state_grouping"], r["initial_state_records"]): r for r in runs}
    sizes = sorted({r["initial_state_records"] for r in runs})
    lo, hi = sizes[0], sizes[-1]
    out: dict[str, Any] = {"S_small": lo, "S_large": hi, "S_factor": hi / lo, "ratios": {}}
    ratios = out["ratios"]

    def ratio(mode, grouping, value) -> float:
        return value(by[(mode, grouping, hi)]) / value(by[(mode, grouping, lo)])

    def shuffle(r):
        return _mean([e["shuffle_bytes"] for e in r["epochs"]])

    def seconds(r):
        return _mean([e["seconds"] for e in _steady(r)])

    def at_most(v: float, target: float, what: str, digits: int = 4, **extra) -> dict:
        return {"value": round(v, digits), "target": f"<= {target}", "met": v <= target,
                **extra, "what": what}

    for mode in (*DIRECT_STORES, "vectorized"):
        for g in GROUPINGS:
            ratios[f"{mode}_shuffle_bytes_{g}"] = at_most(
                ratio(mode, g, shuffle), TARGET_DIRECT_SHUFFLE,
                f"mean shuffle bytes per epoch, {mode}, S_large / S_small")
    for g in GROUPINGS:
        v = ratio("blackbox", g, shuffle)
        ratios[f"blackbox_shuffle_bytes_{g}"] = {
            "value": round(v, 4), "target": "> 1.5 (grows with S)", "met": v > 1.5,
            "what": "mean shuffle bytes per epoch, black-box mode, S_large / S_small",
        }
    for mode in DIRECT_STORES:
        small_inc = [r for r in runs if r["mode"] == mode and r["state_grouping"] == "inner"
                     and r["increment_records"] <= 0.01 * r["initial_state_records"]]
        if not small_inc:
            continue
        r = max(small_inc, key=lambda r: r["initial_state_records"])
        ratios[f"inner_{mode}_state_read_fraction"] = at_most(
            _read_fraction(r), TARGET_STATE_READ,
            f"mean of state_bytes_read / state_bytes_total per epoch (2..E), {mode} inner, "
            "the run with I <= 1% of S", digits=5, S=r["initial_state_records"],
            I=r["increment_records"],
            max_epoch=round(max(e["state_bytes_read"] / e["state_bytes_total"]
                                for e in _steady(r)), 5),
            cold_first_epoch=round(r["epochs"][0]["state_bytes_read"]
                                   / r["epochs"][0]["state_bytes_total"], 5),
            from_machine=round(_read_fraction(r, "state_bytes_from_machine"), 5),
            cold_first_epoch_from_machine=round(
                r["epochs"][0].get("state_bytes_from_machine", 0)
                / r["epochs"][0]["state_bytes_total"], 5))
    for mode in (*DIRECT_STORES, "vectorized"):
        r = by[(mode, "inner", hi)]
        if "state_bytes_parquet" in r:
            ratios[f"{mode}_state_bytes_over_parquet"] = at_most(
                r["state_bytes_total"] / r["state_bytes_parquet"], TARGET_STATE_OVER_PARQUET,
                f"{mode} inner at S_large: state bytes on disk / the same records as one "
                "Parquet file (snappy)", digits=3)
        ratios[f"{mode}_outer_epoch_over_blackbox"] = at_most(
            seconds(by[(mode, "outer", hi)]) / seconds(by[("blackbox", "outer", hi)]),
            TARGET_OUTER_VS_BLACKBOX,
            f"mean seconds of epochs 2..E at S_large, outer grouping, {mode} / black-box",
            digits=3)
    for mode in DIRECT_STORES:
        for g in GROUPINGS:
            grows = " (outer calls every stored key: expected to grow)" if g == "outer" else ""
            ratios[f"{mode}_epoch_seconds_{g}"] = at_most(
                ratio(mode, g, seconds), TARGET_DIRECT_TIME,
                f"mean seconds of epochs 2..E, {mode} mode, S_large / S_small{grows}")
    return out


def human_summary(result: dict, wall: float) -> str:
    lines = ["", "run                              s/epoch  shuffle B/epoch  state read"
             "  on machine"]
    for r in result["runs"]:
        name = f"{r['mode']:10s} {r['state_grouping']:5s} S={r['initial_state_records']:>9,}"
        lines.append(
            f"{name:32s} {_mean([e['seconds'] for e in r['epochs']]):7.2f}  "
            f"{_mean([e['shuffle_bytes'] for e in r['epochs']]):15,.0f}  "
            f"{100 * _read_fraction(r):9.2f}%"
            f"  {100 * _read_fraction(r, 'state_bytes_from_machine'):9.2f}%"
        )
    s = result["summary"]
    if s is None:
        return "\n".join([*lines, f"\nwall time {wall:.1f} s"])
    lines.append(f"\nratios, S={s['S_large']:,} vs S={s['S_small']:,} "
                 f"(I={result['runs'][0]['increment_records']:,}):")
    for name, r in s["ratios"].items():
        mark = "ok " if r["met"] else "MISS"
        lines.append(f"  [{mark}] {name:36s} {r['value']:9.4f}  target {r['target']}")
    lines.append(f"\nwall time {wall:.1f} s")
    return "\n".join(lines)


# -- plot ------------------------------------------------------------------------------------
def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"direct": "tab:blue", "indexed": "tab:purple", "blackbox": "tab:orange",
              "vectorized": "tab:green"}
    styles = {"outer": "-", "inner": "--"}
    sizes = sorted({r["initial_state_records"] for r in result["runs"]})
    markers = dict(zip(sizes, "os^Dv", strict=False))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    for r in result["runs"]:
        xs = range(1, len(r["epochs"]) + 1)
        kw = {"color": colors[r["mode"]], "linestyle": styles[r["state_grouping"]],
              "marker": markers[r["initial_state_records"]], "markersize": 7,
              "markerfacecolor": "none" if r["state_grouping"] == "inner" else None,
              "alpha": 1.0 if r["initial_state_records"] == sizes[-1] else 0.6,
              "label": f"{r['mode']} / {r['state_grouping']} / S={r['initial_state_records']:,}"}
        ax1.plot(xs, [max(e["shuffle_bytes"], 1) for e in r["epochs"]], **kw)
        ax2.plot(xs, [e["seconds"] for e in r["epochs"]], **kw)
    inc = result["runs"][0]["increment_records"]
    ax1.set_yscale("log")
    ax1.set_title(f"Spark shuffle write bytes per epoch (I={inc:,})")
    ax1.set_ylabel("bytes (log)")
    ax2.set_title("run_epoch wall time")
    ax2.set_ylabel("seconds")
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.set_xlabel("epoch")
        ax.set_xticks(list(range(1, len(result["runs"][0]["epochs"]) + 1)))
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8.5, frameon=False)
    m = result["machine"]
    fig.suptitle("strata URL count: direct (columnar, indexed) vs black-box vs vectorized "
                 f"({m['cores']} cores, Spark {m['spark']}, "
                 f"{result['config']['num_partitions']} partitions)")
    save(fig, path, rect=(0, 0.1, 1, 1))


# -- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (under a minute)")
    ap.add_argument("--json", required=True, metavar="PATH", help="write the results here")
    ap.add_argument("--plot", metavar="PATH.png", help="plot shuffle bytes and seconds")
    ap.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    ap.add_argument("--states", type=int, nargs="+", help="initial state sizes S")
    ap.add_argument("--increment", type=int, help="records per increment I")
    ap.add_argument("--epochs", type=int, help="epochs E per run")
    ap.add_argument("--partitions", type=int, default=4, help="num_partitions of every run")
    ap.add_argument("--existing", type=float, default=0.5,
                    help="fraction of each increment drawn from URLs already seen")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--tmp", help="directory for the temporary homes (default: system temp)")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="skip reading back the final state of each run to check it")
    ap.add_argument("--machine-run-cache-mb", type=float, default=2048,
                    help="budget of the decoded runs the machine's processes share "
                         "(STRATA_MACHINE_RUN_CACHE_MB; 0: each worker reads from storage "
                         "the runs it does not hold itself)")
    ap.add_argument("--translate-route", choices=("auto", "rdd", "arrow"), default="auto",
                    help="spark.strata.translate.route of the translate stages' epochs "
                         "(rdd or arrow; auto: rdd on a classic session)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                    help="the runs' modes (default: all)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    states = sorted(args.states or sizes["states"])
    inc = args.increment or sizes["increment"]
    epochs = args.epochs or sizes["epochs"]
    if len(states) < 2 or states[-1] < 4 * states[0]:
        ap.error("need at least two state sizes, the largest >= 4x the smallest")

    wall0 = time.perf_counter()
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-", dir=args.tmp))
    # a cold, private machine cache (storage/machine_runs.py), set before strata is
    # imported and Spark starts its Python workers, which read it from the environment
    os.environ["STRATA_MACHINE_RUN_CACHE_DIR"] = str(tmp / "machine-runs")
    os.environ["STRATA_MACHINE_RUN_CACHE_MB"] = str(args.machine_run_cache_mb)
    import pyspark

    from strata.config import DRIVER_EPOCH_ROWS, TRANSLATE_ROUTE
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark
    DRIVER_ROWS = DRIVER_EPOCH_ROWS.name

    spark = get_spark(args.master, app_name="strata-bench-incremental-shuffle",
                      event_log_dir=event_log_dir())
    # what this measures is Spark's shuffle per epoch: every epoch runs as Spark tasks,
    # none in the driver (docs/architecture.md, "Small epochs in the driver")
    spark.conf.set(DRIVER_ROWS, "-1")
    spark.conf.set(TRANSLATE_ROUTE.name, args.translate_route)
    metrics = SparkMetrics(spark)
    config = {
        "states": states, "increment": inc, "epochs": epochs, "num_partitions": args.partitions,
        "existing_fraction": args.existing, "seed": args.seed,
        "master": spark.sparkContext.master, "quick": args.quick,
        "preload_files": 8, "increment_files": 2, DRIVER_ROWS: "-1",
        TRANSLATE_ROUTE.name: args.translate_route, "modes": args.modes,
        "STRATA_MACHINE_RUN_CACHE_MB": args.machine_run_cache_mb,
    }
    log(f"strata benchmark: S={states}, I={inc:,}, E={epochs}, {args.partitions} partitions, "
        f"master {config['master']}, temp dir {tmp}")
    runs = []
    try:
        # Warm-up (not reported; full runs only): JVM JIT, Python workers and imports, so
        # that the first reported run is not slower than later ones for reasons unrelated
        # to S. A --quick run is a smoke run whose ratios nobody quotes.
        if not args.quick:
            w = max(1000, states[0] // 10)
            warm = make_workload(tmp / "inputs" / "warmup", w, max(10, w // 100), 1,
                                 args.existing, args.seed, config["preload_files"],
                                 config["increment_files"])
            t0 = time.perf_counter()
            for mode in args.modes:
                home = tmp / f"warmup-{mode}"
                run_one(spark, metrics, home, mode, "outer", w, warm, args.partitions, False,
                        quiet=True)
                shutil.rmtree(home, ignore_errors=True)
            log(f"warm-up done in {time.perf_counter() - t0:.1f} s")
        for s in states:
            work = make_workload(tmp / "inputs" / f"S{s}", s, inc, epochs, args.existing,
                                 args.seed, config["preload_files"], config["increment_files"])
            for grouping in GROUPINGS:
                for mode in args.modes:
                    home = tmp / f"home-{mode}-{grouping}-S{s}"
                    runs.append(run_one(spark, metrics, home, mode, grouping, s, work,
                                        args.partitions, args.verify))
                    shutil.rmtree(home, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - wall0
    result = {
        "machine": {"cores": os.cpu_count(), "spark": pyspark.__version__},
        "command": shlex.join([Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None
                                                                else argv)]),
        "python": platform.python_version(),
        "config": config,
        "wall_seconds": round(wall, 1),
        # Other processes on the machine skew the timings: 1-minute load at start and end.
        "load_average_1m": {"start": round(load_start[0], 2), "end": round(os.getloadavg()[0], 2)},
        "runs": runs,
    }
    # the targets compare every mode: a run of some (--modes) reports its runs only
    result["summary"] = summarize(runs) if set(args.modes) == set(MODES) else None
    emit(result, args.json, args.plot, plot)
    log(human_summary(result, wall))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
