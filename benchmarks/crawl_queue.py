"""Benchmark: the incremental crawl queue (CBP paper §5.1, Figure 12) in three ways.

The dataflow is ``examples/crawlqueue/pipeline.py`` (extract → count in-links → crawled →
merge → score → threshold; three Spark jobs per increment after fusion). The input is
``examples/crawlqueue/generate.py``: an initial crawl (``initial_increments`` batches'
worth of pages, ingested and run before the measured increments, not timed), then
``increments`` batches of newly crawled pages, so the state is large next to each
increment, as for a crawler that has been running a while. Per increment it measures
the wall time of ``Controller.run()`` (ingest not included) and Spark's own shuffle
write bytes for its jobs (:class:`strata.observability.spark_metrics.SparkMetrics`):

* ``landmark`` — recompute from all data so far: the *same dataflow* in a fresh home, in
  direct mode, with one ingest of the initial crawl and increments 1..e (its queue is then the full
  queue: every uncrawled linked URL over the threshold);
* ``blackbox`` — one controller, black-box mode (the whole state is shuffled each epoch);
* ``direct`` — one controller, direct mode (only the increment is shuffled), its small
  epochs run in the driver as by default (docs/architecture.md, "Small epochs in the
  driver");
* ``direct_tasks`` — the same with every epoch as Spark tasks
  (``spark.strata.driverEpoch.maxRows=-1``), which measures what the driver saves and
  is the run the state-shuffle estimate below uses (in the driver nothing is shuffled).

    python benchmarks/crawl_queue.py [--quick] --json PATH [--plot PATH.png]

The JSON goes to ``PATH`` and stdout; progress and a summary go to stderr. ``modes.*`` are
lists of ``{"seconds", "shuffle_bytes"}`` per increment. The summary has the targets:

* direct seconds, last ÷ second increment                 <= 1.25
* cumulative seconds, landmark ÷ direct                    >= 5
* cumulative seconds, blackbox ÷ direct                    >= 2
  (``cumulative_blackbox_over_direct_tasks`` beside it, no target)
* state bytes shuffled by direct mode (estimate)          ~ 0 (< 5% of its shuffle)

State bytes shuffled are estimated from Spark's shuffle write bytes of ``direct_tasks``:
the bytes per routed input record are taken from its increment 1 (direct mode shuffles
input only), and
increment e's estimate is ``shuffle_bytes - routed_records * that``, where routed records
are known from the data (each distinct link goes to two count groups; crawled and merge
route each of their inputs once). (PySpark batches records before Spark's shuffle writer, so
Spark's ``shuffleWriteRecords`` counts batches and cannot be used.)
Direct and black-box queues are checked to be equal increment by increment, and the final
in-link counts against the last landmark run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import emit, event_log_dir, parser, save  # benchmarks/common.py (this script's folder)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.crawlqueue.generate import generate  # noqa: E402
from examples.crawlqueue.pipeline import build_dataflow  # noqa: E402

# the initial crawl (pages crawled before increment 1) is this many increments' worth
# full: a state (the initial crawl) 50x each increment, as the blackbox/direct target asks
FULL = {"increments": 10, "size": 2000, "initial_increments": 50}
QUICK = {"increments": 3, "size": 200, "initial_increments": 2}
MODES = ("landmark", "blackbox", "direct", "direct_tasks")
ALL_TASKS = {"spark.strata.driverEpoch.maxRows": "-1"}  # direct_tasks: no epoch in the driver
TARGETS = {"direct_last_over_second": 1.25, "landmark_over_direct": 5.0,
           "blackbox_over_direct": 2.0}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def routed_records(batches: list[list[dict]], reports) -> int:
    """Input records the epochs of one run send through the shuffle (not state)."""
    links = sum(len(set(p["links"])) for b in batches for p in b)
    by = {r.stage: r for r in reports}
    return 2 * links + sum(sum(by[s].records_in.values()) for s in ("crawled", "merge"))


def measured_run(c, metrics, label: str, batches: list[list[dict]]) -> tuple[dict, dict]:
    with metrics.measure(label) as m:
        t0 = time.perf_counter()
        reports = c.run()
        seconds = time.perf_counter() - t0
    stages = [r.stage for r in reports]
    if stages != ["count", "crawled", "merge"]:
        raise RuntimeError(f"{label}: expected epochs of count, crawled, merge; ran {stages}")
    extra = {"routed_records": routed_records(batches, reports),
             "shuffle_write_records": m.shuffle_write_records,
             "queue_records": reports[-1].records_out.get("crawl_queue", 0),
             "stage_seconds": [round(r.seconds, 3) for r in reports]}
    return {"seconds": round(seconds, 4), "shuffle_bytes": m.shuffle_write_bytes}, extra


def run_incremental(spark, metrics, tmp: Path, name: str, batches, partitions: int,
                    quiet: bool = False, initial: list[dict] | None = None):
    from strata.controller import Controller

    rows, extras, queues = [], [], []
    mode = "direct" if name == "direct_tasks" else name
    confs = ALL_TASKS if name == "direct_tasks" else {}
    for k, v in confs.items():
        spark.conf.set(k, v)
    with Controller(tmp / f"home-{name}", build_dataflow(), spark=spark, mode=mode,
                    num_partitions=partitions) as c:
        if initial:  # the crawl so far: builds the state, not timed
            c.ingest("pages", initial)
            c.run()
        first = 1 if initial else 0
        for e, batch in enumerate(batches, 1):
            c.ingest("pages", batch)
            row, extra = measured_run(c, metrics, f"crawl-{name}-{e}", [batch])
            rows.append(row)
            extras.append(extra)
            queues.append(sorted(c.read_flow("crawl_queue", e + first).to_pylist(),
                                 key=lambda r: r["url"]))
            if not quiet:
                log(f"[{name}] increment {e}: {row['seconds']:.2f} s, shuffle "
                    f"{row['shuffle_bytes']:,} B, {extra['routed_records']:,} input records "
                    f"routed, queue {extra['queue_records']:,}")
        counts = {r["key"]: r["inlinks"] for r in c.state_records("count")}
    for k in confs:
        spark.conf.unset(k)
    return rows, extras, queues, counts


def run_landmark(spark, metrics, tmp: Path, batches, partitions: int, initial: list[dict]):
    from strata.controller import Controller

    rows, extras, counts = [], [], {}
    for e in range(1, len(batches) + 1):
        home = tmp / f"home-landmark-{e}"
        with Controller(home, build_dataflow(), spark=spark, mode="direct",
                        num_partitions=partitions) as c:
            c.ingest("pages", initial + [p for b in batches[:e] for p in b])
            row, extra = measured_run(c, metrics, f"crawl-landmark-{e}",
                                      [initial, *batches[:e]])
            if e == len(batches):
                counts = {r["key"]: r["inlinks"] for r in c.state_records("count")}
        shutil.rmtree(home, ignore_errors=True)
        rows.append(row)
        extras.append(extra)
        log(f"[landmark] increments 1..{e}: {row['seconds']:.2f} s, shuffle "
            f"{row['shuffle_bytes']:,} B, queue {extra['queue_records']:,}")
    return rows, extras, counts


def summarize(modes: dict, extras: dict, load: tuple, wall: float) -> dict:
    def total(m: str) -> float:
        return sum(r["seconds"] for r in modes[m])

    d = modes["direct"]
    out: dict = {}
    if len(d) >= 2:
        v = d[-1]["seconds"] / d[1]["seconds"]
        out["direct_last_over_second"] = {
            "value": round(v, 3), "target": "<= 1.25",
            "met": v <= TARGETS["direct_last_over_second"]}
    for m, key in (("landmark", "landmark_over_direct"), ("blackbox", "blackbox_over_direct")):
        v = total(m) / total("direct")
        out[f"cumulative_{key}"] = {"value": round(v, 3),
                                    "target": f">= {TARGETS[key]:g}", "met": v >= TARGETS[key]}
    out["cumulative_blackbox_over_direct_tasks"] = {
        "value": round(total("blackbox") / total("direct_tasks"), 3),
        "what": "the same ratio with every direct epoch run as Spark tasks (no target)"}
    # bytes per routed input record, from direct_tasks' first increment (direct shuffles
    # input only; with an initial crawl black-box already shuffles state in increment 1)
    per = modes["direct_tasks"][0]["shuffle_bytes"] / extras["direct_tasks"][0]["routed_records"]

    def state_bytes(m: str) -> list[int]:
        return [round(r["shuffle_bytes"] - x["routed_records"] * per)
                for r, x in zip(modes[m], extras[m], strict=True)]

    ds = state_bytes("direct_tasks")
    share = sum(ds[1:]) / max(1, sum(r["shuffle_bytes"] for r in modes["direct_tasks"][1:]))
    out["direct_state_shuffle_bytes"] = {
        "value": round(share, 4), "per_increment_bytes": ds,
        "what": "estimated state bytes shuffled / shuffle bytes, direct_tasks, increments 2..",
        "target": "~ 0 (< 0.05)", "met": abs(share) < 0.05}
    out["blackbox_state_shuffle_bytes"] = state_bytes("blackbox")
    out["cumulative_seconds"] = {m: round(total(m), 2) for m in modes}
    out["queue_records"] = [x["queue_records"] for x in extras["direct"]]
    out["stage_seconds_direct"] = [x["stage_seconds"] for x in extras["direct"]]
    out["stage_seconds_direct_tasks"] = [x["stage_seconds"] for x in extras["direct_tasks"]]
    out["stage_seconds_blackbox"] = [x["stage_seconds"] for x in extras["blackbox"]]
    out["landmark"] = ("the same dataflow, direct mode, in a fresh home over one ingest of "
                       "all pages so far (Controller.run() time; ingest not timed)")
    out["load_average_1m"] = {"start": round(load[0], 2), "end": round(os.getloadavg()[0], 2)}
    out["cores"] = os.cpu_count()
    out["wall_seconds"] = round(wall, 1)
    return out


def human(result: dict) -> str:
    lines = ["", "incr  " + "".join(f"{m:>24s}" for m in MODES)]
    for i in range(result["increments"]):
        rows = [result["modes"][m][i] for m in MODES]
        lines.append(f"{i + 1:4d}  " + "".join(
            f"{r['seconds']:9.2f} s {r['shuffle_bytes']:11,d} B" for r in rows))
    s = result["summary"]
    lines.append("cumulative seconds: " + ", ".join(f"{m} {v}" for m, v in
                                                     s["cumulative_seconds"].items()))
    for k in ("direct_last_over_second", "cumulative_landmark_over_direct",
              "cumulative_blackbox_over_direct", "cumulative_blackbox_over_direct_tasks",
              "direct_state_shuffle_bytes"):
        if k in s:
            r = s[k]
            mark = ("ok " if r["met"] else "MISS") if "met" in r else "   "
            lines.append(f"  [{mark}] {k:38s} {r['value']:>10}  "
                         f"target {r.get('target', '-')}")
    lines.append(f"load average (1 min) {s['load_average_1m']}, wall {s['wall_seconds']} s")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.8))
    xs = range(1, result["increments"] + 1)
    for m in MODES:
        secs = [r["seconds"] for r in result["modes"][m]]
        ax1.plot(xs, secs, marker="o", label=m)
        ax2.plot(xs, [sum(secs[: i + 1]) for i in range(len(secs))], marker="o", label=m)
        ax3.plot(xs, [max(r["shuffle_bytes"], 1) for r in result["modes"][m]], marker="o",
                 label=m)
    ax1.set_title("seconds per increment")
    ax2.set_title("cumulative seconds")
    ax3.set_title("Spark shuffle write bytes per increment")
    ax3.set_yscale("log")
    for ax in (ax1, ax2, ax3):
        ax.set_xlabel("increment")
        ax.grid(True, alpha=0.3)
        ax.legend()
    ax1.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    fig.suptitle(f"strata crawl queue: {result['records_per_increment']:,} pages per increment")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=1)
    ap.add_argument("--increments", type=int)
    ap.add_argument("--size", type=int, help="pages per increment")
    ap.add_argument("--initial-increments", type=int,
                    help="the initial crawl, in increments' worth of pages (not timed)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    n, size = args.increments or sizes["increments"], args.size or sizes["size"]

    wall0, load = time.perf_counter(), os.getloadavg()
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    t0 = time.perf_counter()
    k = sizes["initial_increments"] if args.initial_increments is None else \
        args.initial_increments
    generated = generate(args.seed, k + n, size)
    initial, batches = [p for b in generated[:k] for p in b], generated[k:]
    log(f"crawl-queue benchmark: an initial crawl of {len(initial):,} pages, then "
        f"{n} increments of {size:,} pages "
        f"({sum(len(p['links']) for b in batches for p in b):,} links) generated in "
        f"{time.perf_counter() - t0:.1f} s; load average {load[0]:.2f}")
    spark = get_spark(args.master, app_name="strata-bench-crawl-queue",
                      event_log_dir=event_log_dir())
    metrics = SparkMetrics(spark)
    tmp = Path(tempfile.mkdtemp(prefix="strata-crawl-"))
    modes, extras = {}, {}
    try:
        # warm-up, not reported: JVM, Python workers, imports
        run_incremental(spark, metrics, tmp / "warm", "direct", generate(args.seed + 1, 1, 100),
                        args.partitions, True)
        modes["landmark"], extras["landmark"], landmark_counts = run_landmark(
            spark, metrics, tmp, batches, args.partitions, initial)
        results = {}
        for mode in ("blackbox", "direct", "direct_tasks"):
            rows, ex, queues, counts = run_incremental(spark, metrics, tmp, mode, batches,
                                                       args.partitions, initial=initial)
            modes[mode], extras[mode], results[mode] = rows, ex, (queues, counts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for mode in ("direct", "direct_tasks"):
        if results[mode][0] != results["blackbox"][0]:
            raise RuntimeError(f"{mode} and black-box crawl queues differ")
    if results["direct"][1] != landmark_counts:
        raise RuntimeError("direct in-link counts differ from the landmark recomputation")
    result = {"increments": n, "records_per_increment": size, "initial_pages": len(initial),
              "config": {"initial_pages": len(initial), "pages_per_increment": size,
                         "initial_over_increment_pages": round(len(initial) / size, 2),
                         "increments": n, "partitions": args.partitions,
                         "master": args.master, "seed": args.seed},
              "modes": {m: modes[m] for m in MODES}}
    result["summary"] = summarize(result["modes"], extras, load, time.perf_counter() - wall0)
    emit(result, args.json, args.plot, plot)
    log(human(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
