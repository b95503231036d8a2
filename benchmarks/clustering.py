"""Benchmark: data shuffled by the clustering-coefficients dataflow with and without
multicast and inner state (CBP paper §3.1.1, Figures 6-7).

The dataflow is ``examples/clustering/pipeline.py`` (one stateful stage ``cluster`` keyed by
node, a loopback flow ``adjacency`` carrying neighbour lists); the input is
``examples/clustering/generate.py`` (a Holme-Kim social graph growing by ``size`` edges per
increment; the first ``--preload`` increments are ingested together as the graph so far,
reported as increment 0 and left out of the totals). Four variants run the same increments,
each in its own home, direct mode:

* ``multicast_inner`` — as shipped: a node whose adjacency grew writes **one** record,
  routed to ``Multicast(("nbhd", node))``, delivered once per partition; inner state;
* ``per_neighbour_inner`` — no multicast: one copy of the neighbour list per neighbour,
  routed to it (the paper's Figure 7); inner state;
* ``multicast_outer`` / ``per_neighbour_outer`` — the same with outer-grouped state
  (translate called, and state read, for every node every epoch).

Each increment is ingested and then run epoch by epoch (``Controller.run(max_epochs=1)``
until idle: an epoch for the edges, one more for the last messages). Per epoch: wall
seconds, Spark shuffle write bytes (:class:`strata.observability.spark_metrics.SparkMetrics`), state
bytes read (and the part of them read to compact the inner state's runs) and on disk, keys
called, records in and out. All variants must end with identical coefficients (state and
the latest ``coefficients`` output per node), equal to ``networkx.clustering`` when
networkx is installed.

    python benchmarks/clustering.py [--quick] --json PATH [--plot PATH.png]

JSON to ``PATH`` and stdout, progress and a summary to stderr. Expectations (reported with
the measured ratios): per-neighbour messages shuffle more than multicast; outer grouping
reads more state than inner to call translate (compaction reads are reported apart).
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import emit, event_log_dir, parser, save  # benchmarks/common.py (this script's folder)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.clustering.generate import generate_increments  # noqa: E402
from examples.clustering.pipeline import build_dataflow  # noqa: E402

# preload: generated increments ingested together first (the graph so far; its epochs are
# reported as increment 0 and left out of the totals), then ``increments`` measured ones
FULL = {"increments": 6, "size": 500, "preload": 40}
QUICK = {"increments": 3, "size": 100, "preload": 4}
VARIANTS = {  # name -> (multicast, grouping)
    "multicast_inner": (True, "inner"),
    "per_neighbour_inner": (False, "inner"),
    "multicast_outer": (True, "outer"),
    "per_neighbour_outer": (False, "outer"),
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_variant(spark, metrics, home: Path, name: str, increments: list[list[dict]],
                partitions: int, quiet: bool = False, first: int = 1) -> dict:
    """Run every increment through one variant (numbered from ``first``; 0 is the preload);
    per-epoch measurements and final results."""
    from strata.controller import Controller

    multicast, grouping = VARIANTS[name]
    epochs: list[dict] = []
    with Controller(home, build_dataflow(multicast, grouping), spark=spark, mode="direct",
                    num_partitions=partitions) as c:
        for i, edges in enumerate(increments, first):
            c.ingest("edges", edges)
            while True:
                with metrics.measure(f"clustering-{name}-{len(epochs)}") as m:
                    t0 = time.perf_counter()
                    reports = c.run(max_epochs=1)
                    seconds = time.perf_counter() - t0
                if not reports:
                    break
                (r,) = reports
                ep = {"increment": i, "epoch": r.epoch, "seconds": round(seconds, 4),
                      "shuffle_bytes": m.shuffle_write_bytes,
                      "state_bytes_read": r.metrics.get("state_bytes_read", 0),
                      "state_bytes_compaction_read": r.metrics.get(
                          "state_bytes_compaction_read", 0),
                      "state_bytes_total": r.metrics.get("state_bytes_total", 0),
                      "keys_called": r.metrics.get("keys_called", 0),
                      "edges_in": r.records_in.get("edges", 0),
                      "adjacency_in": r.records_in.get("adjacency", 0),
                      "adjacency_out": r.records_out.get("adjacency", 0),
                      "coefficients_out": r.records_out.get("coefficients", 0)}
                epochs.append(ep)
                if not quiet:
                    log(f"[{name}] increment {i} epoch {r.epoch}: {seconds:.2f} s, shuffle "
                        f"{ep['shuffle_bytes']:,} B, state read {ep['state_bytes_read']:,} of "
                        f"{ep['state_bytes_total']:,} B, {ep['keys_called']:,} keys called, "
                        f"adjacency {ep['adjacency_in']:,} in / {ep['adjacency_out']:,} out")
        state = {r["node"]: r["coef"] for r in c.state_records("cluster")}
        latest: dict[int, float] = {}
        for rec in c.read_flow("coefficients").to_pylist():  # oldest increment first
            latest[rec["node"]] = rec["coef"]
    keys = ("seconds", "shuffle_bytes", "state_bytes_read", "state_bytes_compaction_read",
            "keys_called", "adjacency_out")
    measured = [e for e in epochs if e["increment"] > 0]
    totals = {k: round(sum(e[k] for e in measured), 4) for k in keys}
    totals["state_bytes_read_for_translate"] = (totals["state_bytes_read"]
                                                - totals["state_bytes_compaction_read"])
    totals["epochs"] = len(measured)
    return {"multicast": multicast, "grouping": grouping, "epochs": epochs, "totals": totals,
            "_state": state, "_latest": latest}


def check_results(runs: dict, increments: list[list[dict]]) -> dict:
    """All variants agree (state and latest output per node); compared with networkx too."""
    ref = runs["multicast_inner"]
    out: dict[str, Any] = {"identical_coefficients": all(
        r["_state"] == ref["_state"] and r["_latest"] == ref["_latest"] for r in runs.values())}
    out["nodes"] = len(ref["_state"])
    try:
        import networkx as nx
    except ImportError:
        out["networkx"] = "not installed"
        return out
    g = nx.Graph((e["src"], e["dst"]) for inc in increments for e in inc)
    expected = nx.clustering(g)
    err = max((abs(ref["_state"].get(n, -1.0) - x) for n, x in expected.items()), default=0.0)
    out["networkx_max_abs_error"] = err
    out["matches_networkx"] = expected.keys() == ref["_state"].keys() and err <= 1e-9
    return out


def summarize(runs: dict) -> dict:
    def total(name: str, key: str) -> float:
        return runs[name]["totals"][key]

    s: dict[str, Any] = {"totals": {n: r["totals"] for n, r in runs.items()}, "ratios": {}}
    for g in ("inner", "outer"):
        v = total(f"per_neighbour_{g}", "shuffle_bytes") / max(1, total(f"multicast_{g}",
                                                                         "shuffle_bytes"))
        s["ratios"][f"shuffle_per_neighbour_over_multicast_{g}"] = {
            "value": round(v, 3), "expectation": "> 1", "met": v > 1,
            "what": f"total shuffle bytes, per-neighbour messages / multicast, {g} state"}
    for m in ("multicast", "per_neighbour"):
        key = "state_bytes_read_for_translate"
        v = total(f"{m}_outer", key) / max(1, total(f"{m}_inner", key))
        s["ratios"][f"state_read_outer_over_inner_{m}"] = {
            "value": round(v, 3), "expectation": "> 1", "met": v > 1,
            "what": f"state bytes read to call translate (lookups or scans, pending files; "
                    f"not compaction), outer / inner grouping, {m}"}
        v = total(f"{m}_outer", "state_bytes_read") / max(1, total(f"{m}_inner",
                                                                    "state_bytes_read"))
        s["ratios"][f"state_read_with_compaction_outer_over_inner_{m}"] = {
            "value": round(v, 3),
            "what": f"all state bytes read (compaction of inner state's runs included), "
                    f"outer / inner, {m}"}
        v = total(f"{m}_outer", "seconds") / total(f"{m}_inner", "seconds")
        s["ratios"][f"seconds_outer_over_inner_{m}"] = {"value": round(v, 3)}
    for g in ("inner", "outer"):
        v = total(f"per_neighbour_{g}", "seconds") / total(f"multicast_{g}", "seconds")
        s["ratios"][f"seconds_per_neighbour_over_multicast_{g}"] = {"value": round(v, 3)}
    return s


def human(result: dict) -> str:
    lines = ["", f"{'variant':22s} {'epochs':>6s} {'seconds':>9s} {'shuffle B':>14s} "
                 f"{'state read B':>14s} {'(compaction)':>14s} {'adjacency out':>14s}"]
    for n, t in result["summary"]["totals"].items():
        lines.append(f"{n:22s} {t['epochs']:6d} {t['seconds']:9.2f} {t['shuffle_bytes']:14,.0f} "
                     f"{t['state_bytes_read']:14,.0f} {t['state_bytes_compaction_read']:14,.0f} "
                     f"{t['adjacency_out']:14,.0f}")
    for n, r in result["summary"]["ratios"].items():
        mark = "" if "met" not in r else ("[ok ] " if r["met"] else "[MISS] ")
        lines.append(f"  {mark}{n}: {r['value']}")
    c = result["check"]
    lines.append(f"identical coefficients: {c['identical_coefficients']}; networkx: "
                 f"{c.get('matches_networkx', c.get('networkx'))}; load average "
                 f"{result['load_average_1m']}; wall {result['wall_seconds']} s")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    styles = {"inner": "-", "outer": "--"}
    colors = {True: "tab:blue", False: "tab:orange"}
    for name, r in result["variants"].items():
        xs = range(1, len(r["epochs"]) + 1)
        kw = {"linestyle": styles[r["grouping"]], "color": colors[r["multicast"]],
              "marker": "o", "label": name}
        axes[0].plot(xs, [max(e["shuffle_bytes"], 1) for e in r["epochs"]], **kw)
        axes[1].plot(xs, [max(e["state_bytes_read"], 1) for e in r["epochs"]], **kw)
        axes[2].plot(xs, [e["seconds"] for e in r["epochs"]], **kw)
    for ax, title in zip(axes, ("Spark shuffle write bytes", "state bytes read", "seconds"),
                         strict=True):
        ax.set_title(f"{title} per epoch")
        ax.set_xlabel("epoch (2 per increment: edges, then messages)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[2].set_ylim(bottom=0)
    axes[0].legend(fontsize=8.5)
    fig.suptitle(f"clustering coefficients: {result['increments']} increments of "
                 f"~{result['edges_per_increment']:,} edges, with/without multicast and "
                 "inner state")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=7)
    ap.add_argument("--increments", type=int)
    ap.add_argument("--size", type=int, help="new edges per increment (about)")
    ap.add_argument("--preload", type=int,
                    help="generated increments ingested together before the measured ones")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    n, size = args.increments or sizes["increments"], args.size or sizes["size"]
    preload = sizes["preload"] if args.preload is None else args.preload

    wall0, load0 = time.perf_counter(), os.getloadavg()
    import pyspark

    from strata.config import DRIVER_EPOCH_ROWS
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark
    DRIVER_ROWS = DRIVER_EPOCH_ROWS.name

    batches = generate_increments(preload + n, size, args.seed)
    head = [[e for b in batches[:preload] for e in b]] if preload else []
    increments = head + batches[preload:]
    log(f"clustering benchmark: a preload of {sum(map(len, head)):,} edges, then {n} "
        f"increments of ~{size:,} edges ({sum(map(len, increments)):,} edges in all); "
        f"load average {load0[0]:.2f}")
    spark = get_spark(args.master, app_name="strata-bench-clustering",
                      event_log_dir=event_log_dir())
    # what this compares is Spark's shuffle and the tasks' state reads: every epoch runs
    # as Spark tasks, none in the driver (docs/architecture.md, "Small epochs in the driver")
    spark.conf.set(DRIVER_ROWS, "-1")
    metrics = SparkMetrics(spark)
    tmp = Path(tempfile.mkdtemp(prefix="strata-clustering-"))
    runs: dict[str, dict] = {}
    try:
        # warm-up, not reported: JVM, Python workers, imports
        run_variant(spark, metrics, tmp / "warm", "multicast_inner",
                    generate_increments(1, 50, args.seed + 1), args.partitions, quiet=True)
        for name in VARIANTS:
            runs[name] = run_variant(spark, metrics, tmp / name, name, increments,
                                     args.partitions, first=0 if preload else 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    check = check_results(runs, increments)
    for r in runs.values():
        del r["_state"], r["_latest"]
    result = {
        "increments": n, "edges_per_increment": size,
        "preload_edges": len(increments[0]) if preload else 0,
        "edges": sum(map(len, increments)),
        "variants": runs,
        "summary": summarize(runs),
        "check": check,
        "config": {"partitions": args.partitions, "seed": args.seed, "mode": "direct",
                   DRIVER_ROWS: "-1",
                   "master": spark.sparkContext.master, "quick": args.quick},
        "machine": {"cores": os.cpu_count(), "spark": pyspark.__version__,
                    "python": platform.python_version()},
        "command": shlex.join([Path(sys.argv[0]).as_posix(),
                               *(sys.argv[1:] if argv is None else argv)]),
        "load_average_1m": {"start": round(load0[0], 2), "end": round(os.getloadavg()[0], 2)},
        "wall_seconds": round(time.perf_counter() - wall0, 1),
    }
    emit(result, args.json, args.plot, plot)
    log(human(result))
    if not check["identical_coefficients"] or check.get("matches_networkx") is False:
        log("ERROR: the variants' coefficients differ (or differ from networkx)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
