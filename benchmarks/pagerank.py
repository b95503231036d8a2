"""Benchmark: incremental PageRank (CBP paper §5.4) against full recomputation.

The dataflow is ``examples/pagerank/pipeline.py``; the input is
``examples/pagerank/generate.py``: an initial web graph, then ``batches`` insertion batches
of ``size`` links each (some to or from new pages). After each batch it measures, for

* ``incremental`` — one controller (direct mode) that has processed the initial graph and
  every earlier batch, running the round of this batch;
* ``recompute`` — the *same dataflow* in a fresh home (direct mode) over one ingest of the
  whole graph so far: every page is new, so it computes PageRank from scratch;

the wall time of ``Controller.run()`` (ingest not included), Spark's own shuffle write bytes
for its jobs (:class:`strata.observability.spark_metrics.SparkMetrics`), the fraction of pages the
round recomputed (from the dataflow's ``rounds`` summary: pages whose score the round
changed, or that received a changed contribution) and the L1 distance of its ranks from
``networkx.pagerank(G, alpha=0.85)``.

Why the same dataflow and not a plain Spark DataFrame PageRank as the recomputation: both
sides then run the same translate code with the same per-epoch overhead and the same
convergence test, so the ratios measure what incrementality saves (which pages iterate,
how many epochs, which messages move) rather than the difference between Python
translators and Spark SQL joins; a DataFrame PageRank would also shuffle the link table in
every iteration and so move more data, making the comparison look better than it is.

    python benchmarks/pagerank.py [--quick] --json PATH [--plot PATH.png]

The JSON goes to ``PATH`` and stdout; progress and a summary go to stderr. The targets:

* shuffle bytes, recompute ÷ incremental (summed over batches)   >= 2
* L1 error against networkx, every batch, both sides             <= 1e-3
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

from examples.pagerank.generate import generate_increments  # noqa: E402
from examples.pagerank.pipeline import ALPHA, build_dataflow  # noqa: E402

FULL = {"initial": 5000, "batches": 5, "size": 100}
QUICK = {"initial": 300, "batches": 1, "size": 20}
SIDES = ("incremental", "recompute")
TARGETS = {"shuffle_ratio_recompute_over_incremental": 2.0, "max_l1_error": 1e-3}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def l1_error(c, graph) -> float:
    """L1 distance between the last ``ranks`` increment and networkx's PageRank."""
    import networkx as nx

    epoch, _ = c.stored_increments("ranks")[-1]
    ranks = {r["node"]: r["rank"] for r in c.read_flow("ranks", epoch).to_pylist()}
    expected = nx.pagerank(graph, alpha=ALPHA, tol=1e-10, max_iter=1000)
    if ranks.keys() != expected.keys():
        raise RuntimeError(f"ranks cover {len(ranks)} pages, the graph has {len(expected)}")
    return sum(abs(ranks[v] - expected[v]) for v in expected)


def measured_round(c, metrics, label: str, graph) -> dict:
    """Run one round (until idle) and measure it."""
    with metrics.measure(label) as m:
        t0 = time.perf_counter()
        reports = c.run()
        seconds = time.perf_counter() - t0
    summary = c.read_flow("rounds").to_pylist()[-1]
    return {"seconds": round(seconds, 3), "shuffle_bytes": m.shuffle_write_bytes,
            "fraction_touched": round(summary["touched"] / summary["pages"], 4),
            "l1_error": l1_error(c, graph), "epochs": len(reports),
            "pages": summary["pages"]}


def run(spark, metrics, tmp: Path, increments: list[list[dict]], partitions: int) -> dict:
    import networkx as nx

    from strata.controller import Controller

    graph = nx.DiGraph((r["src"], r["dst"]) for r in increments[0])
    rows: dict[str, list[dict]] = {s: [] for s in SIDES}
    with Controller(tmp / "home-incremental", build_dataflow(), spark=spark,
                    num_partitions=partitions) as c:
        c.ingest("links", increments[0])
        initial = measured_round(c, metrics, "pagerank-initial", graph)
        log(f"[initial] {initial['pages']:,} pages: {initial['seconds']:.1f} s, "
            f"{initial['epochs']} epochs, shuffle {initial['shuffle_bytes']:,} B, "
            f"L1 {initial['l1_error']:.1e}")
        for b, batch in enumerate(increments[1:], 1):
            graph.add_edges_from((r["src"], r["dst"]) for r in batch)
            c.ingest("links", batch)
            rows["incremental"].append(measured_round(c, metrics, f"pagerank-inc-{b}", graph))
            home = tmp / f"home-recompute-{b}"
            with Controller(home, build_dataflow(), spark=spark,
                            num_partitions=partitions) as full:
                full.ingest("links", [r for inc in increments[: b + 1] for r in inc])
                rows["recompute"].append(
                    measured_round(full, metrics, f"pagerank-full-{b}", graph))
            shutil.rmtree(home, ignore_errors=True)
            for side in SIDES:
                r = rows[side][-1]
                log(f"[{side}] batch {b}: {r['seconds']:.1f} s, {r['epochs']} epochs, "
                    f"shuffle {r['shuffle_bytes']:,} B, touched {r['fraction_touched']:.1%}, "
                    f"L1 {r['l1_error']:.1e}")
    return {"initial": initial, **rows}


def summarize(result: dict, load: tuple, wall: float) -> tuple[dict, dict]:
    inc, full = result["incremental"], result["recompute"]

    def total(rows: list[dict], key: str) -> float:
        return sum(r[key] for r in rows)

    shuffle_ratio = total(full, "shuffle_bytes") / max(1, total(inc, "shuffle_bytes"))
    max_l1 = max(r["l1_error"] for r in inc + full)
    summary = {
        "shuffle_ratio_recompute_over_incremental": round(shuffle_ratio, 3),
        "shuffle_ratio_per_batch": [round(f["shuffle_bytes"] / max(1, i["shuffle_bytes"]), 3)
                                    for i, f in zip(inc, full, strict=True)],
        "seconds_ratio_recompute_over_incremental": round(
            total(full, "seconds") / total(inc, "seconds"), 3),
        "max_l1_error": max_l1,
        "mean_fraction_touched": round(total(inc, "fraction_touched") / len(inc), 4),
        "epochs": {s: [r["epochs"] for r in result[s]] for s in SIDES},
        "cumulative_seconds": {s: round(total(result[s], "seconds"), 2) for s in SIDES},
        "recompute": "the same dataflow, direct mode, in a fresh home over one ingest of "
                     "the whole graph so far (Controller.run() time; ingest not timed)",
        "load_average_1m": {"start": round(load[0], 2), "end": round(os.getloadavg()[0], 2)},
        "cores": os.cpu_count(),
        "wall_seconds": round(wall, 1),
    }
    ratio_target, l1_target = (TARGETS["shuffle_ratio_recompute_over_incremental"],
                               TARGETS["max_l1_error"])
    targets = {
        "shuffle_ratio_recompute_over_incremental": {
            "value": round(shuffle_ratio, 3), "target": f">= {ratio_target:g}",
            "met": shuffle_ratio >= ratio_target},
        "max_l1_error": {"value": max_l1, "target": f"<= {l1_target:g}",
                         "met": max_l1 <= l1_target},
    }
    return summary, targets


def human(result: dict) -> str:
    lines = ["", "batch " + "".join(f"{s:>44s}" for s in SIDES)]
    for i in range(result["batches"]):
        cells = []
        for s in SIDES:
            r = result[s][i]
            cells.append(f"{r['seconds']:7.1f} s {r['shuffle_bytes']:12,d} B "
                         f"{r['fraction_touched']:6.1%} {r['l1_error']:8.1e}")
        lines.append(f"{i + 1:5d} " + "".join(f"{c:>44s}" for c in cells))
    for k, r in result["targets"].items():
        lines.append(f"  [{'ok ' if r['met'] else 'MISS'}] {k:42s} {r['value']:>10.4g}  "
                     f"target {r['target']}")
    s = result["summary"]
    lines.append(f"cumulative seconds {s['cumulative_seconds']}; load average (1 min) "
                 f"{s['load_average_1m']}, wall {s['wall_seconds']} s")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(18, 4.5))
    xs = range(1, result["batches"] + 1)
    panels = (("seconds", "seconds per batch", False),
              ("shuffle_bytes", "Spark shuffle write bytes per batch", True),
              ("fraction_touched", "fraction of pages recomputed", False),
              ("l1_error", "L1 error vs networkx", True))
    for ax, (key, title, logy) in zip(axes, panels, strict=True):
        for s in SIDES:
            ax.plot(xs, [max(r[key], 1e-12) for r in result[s]], marker="o", label=s)
        if key == "l1_error":
            ax.axhline(TARGETS["max_l1_error"], color="grey", linestyle="--", label="target")
        ax.set_title(title)
        ax.set_xlabel("insertion batch")
        ax.set_xticks(list(xs))
        ax.set_yscale("log" if logy else "linear")
        if not logy:
            ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(f"strata incremental PageRank: {result['nodes']:,} pages, "
                 f"{result['links_per_batch']} links per batch")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=5)
    ap.add_argument("--initial", type=int, help="pages of the initial graph")
    ap.add_argument("--batches", type=int, help="insertion batches")
    ap.add_argument("--size", type=int, help="links per batch")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    initial = args.initial or sizes["initial"]
    batches, size = args.batches or sizes["batches"], args.size or sizes["size"]

    wall0, load = time.perf_counter(), os.getloadavg()
    from strata.config import DRIVER_EPOCH_ROWS
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark
    DRIVER_ROWS = DRIVER_EPOCH_ROWS.name

    increments = generate_increments(initial, batches, size, args.seed)
    log(f"pagerank benchmark: initial graph of {initial:,} pages and "
        f"{len(increments[0]):,} links, then {batches} batch(es) of {size} links; "
        f"load average {load[0]:.2f}")
    spark = get_spark(args.master, app_name="strata-bench-pagerank", event_log_dir=event_log_dir())
    # what this compares is Spark's shuffle: every epoch runs as Spark tasks, none in the
    # driver (docs/architecture.md, "Small epochs in the driver"), where neither side
    # shuffles anything
    spark.conf.set(DRIVER_ROWS, "-1")
    metrics = SparkMetrics(spark)
    tmp = Path(tempfile.mkdtemp(prefix="strata-pagerank-"))
    try:
        rows = run(spark, metrics, tmp, increments, args.partitions)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"nodes": rows["incremental"][-1]["pages"],
              "links": sum(len(inc) for inc in increments), "initial_links": len(increments[0]),
              "batches": batches, "links_per_batch": size, **rows,
              "config": {DRIVER_ROWS: "-1", "partitions": args.partitions, "seed": args.seed}}
    result["summary"], result["targets"] = summarize(result, load, time.perf_counter() - wall0)
    emit(result, args.json, args.plot, plot)
    log(human(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
