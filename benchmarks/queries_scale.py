"""Benchmark: at what input size an incremental query beats recomputation by 5×.

``queries.py`` runs the paper's group-by and join-group-by at the paper's sizes. This
script runs them again with the initial data multiplied by each of ``--factors`` (the
increments keep the paper's sizes), and records per size the seconds of the last
increment incrementally, by Spark SQL recomputation over all data so far, and the Spark
floor (one job reading the increment into the driver: less than any epoch run by
Spark can cost). Recomputation rescans and re-shuffles all data so far; an incremental
group-by epoch reads the increment and the small state of its groups, and a join epoch
reads the stored join inputs where they lie (no shuffle). So the speed-up grows with the
initial size; the result says where it reaches 5×.

    python benchmarks/queries_scale.py [--quick] --json PATH [--plot PATH.png]

JSON: ``{"queries": {"groupby": [{"initial": N, "incremental": [s…], "recompute": [s…],
"spark_floor": [s…], "speedup_last": x, "floor_bound_last": y, "answers_equal": b}, …],
"join_groupby": […]}, "summary": {…}}`` (seconds per increment, the initial epoch first;
the floor has none for the initial data).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import queries as q  # benchmarks/queries.py (this script's folder)
from common import emit, event_log_dir, parser, save

ROOT = Path(__file__).resolve().parents[1]
FULL_FACTORS = [1, 4, 16, 64, 256]
QUICK_FACTORS = [1, 4]
INITIAL = {"groupby": "groupby_initial", "join_groupby": "join_initial"}


def run_size(spark, metrics, name: str, cfg: dict, partitions: int) -> dict:
    """One query at one size: incremental, recomputed and floor seconds per increment."""
    data = q.batches(cfg, only=[name])[name]
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-scale-"))
    try:
        got = q.compare(spark, metrics, tmp, name, data, partitions)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for files in data:
            for p in files.values():
                Path(p).unlink(missing_ok=True)
    secs = {k: [r["seconds"] for r in got[k]]
            for k in ("incremental", "recompute", "spark_floor")}
    return {"initial": cfg[INITIAL[name]], **secs,
            "speedup_last": round(secs["recompute"][-1] / secs["incremental"][-1], 2),
            "floor_bound_last": round(secs["recompute"][-1] / secs["spark_floor"][-1], 2),
            "answers_equal": got["answers_equal"]}


def summarize(result: dict) -> dict:
    out = {}
    for name, sizes in result["queries"].items():
        reached = [s["initial"] for s in sizes if s["speedup_last"] >= 5]
        out[name] = {"best_speedup": max(s["speedup_last"] for s in sizes),
                     "smallest_initial_with_5x": min(reached) if reached else None}
    return out


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["queries"])
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        sizes = result["queries"][name]
        xs = [s["initial"] for s in sizes]
        ax.plot(xs, [s["speedup_last"] for s in sizes], marker="o",
                label="recompute ÷ incremental")
        ax.plot(xs, [s["floor_bound_last"] for s in sizes], marker="s", ls="--",
                color="grey", label="recompute ÷ Spark floor")
        ax.axhline(5, color="red", lw=0.8, label="5× target")
        ax.set_xscale("log")
        ax.set_xlabel("initial rows")
        ax.set_ylabel("speed-up at the last increment")
        ax.set_title(name)
        ax.legend()
    fig.suptitle(f"strata incremental queries: speed-up by input size ({result['machine']})")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, partitions=4, master="local[2]")
    ap.add_argument("--factors", type=int, nargs="+", metavar="F",
                    help=f"multiples of the paper's initial sizes (default "
                         f"{' '.join(map(str, FULL_FACTORS))}; --quick "
                         f"{' '.join(map(str, QUICK_FACTORS))})")
    ap.add_argument("--increments", type=int, help="increments per size (4; --quick: 2)")
    ap.add_argument("--only", nargs="+", choices=list(INITIAL), metavar="QUERY")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    base = q.QUICK if args.quick else q.FULL
    factors = args.factors or (QUICK_FACTORS if args.quick else FULL_FACTORS)
    args.increments = args.increments or (2 if args.quick else 4)
    spark = get_spark(args.master, app_name="strata-bench-queries-scale",
                      event_log_dir=event_log_dir())
    metrics = SparkMetrics(spark)
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    result: dict = {"machine": f"{os.cpu_count()} cores, {args.master}",
                    "command": " ".join(["benchmarks/queries_scale.py",
                                         *(argv or sys.argv[1:])]),
                    "factors": factors, "increments": args.increments, "queries": {}}
    for name in args.only or list(INITIAL):
        result["queries"][name] = []
        # not recorded (full runs only): the first sizes would otherwise pay for warming
        # up the JVM
        if not args.quick:
            run_size(spark, metrics, name, {**q.QUICK, "increments": 2}, args.partitions)
        for f in factors:
            cfg = {**base, "increments": args.increments,
                   INITIAL[name]: base[INITIAL[name]] * f}
            size = run_size(spark, metrics, name, cfg, args.partitions)
            result["queries"][name].append(size)
            q.log(f"[{name}] initial {size['initial']:,}: incremental "
                     f"{size['incremental'][-1]:.2f} s, recompute {size['recompute'][-1]:.2f}"
                     f" s ({size['speedup_last']}×), floor {size['spark_floor'][-1]:.2f} s")
    result["summary"] = summarize(result)
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    result["load_average_1m"] = {"start": round(load0, 2), "end": round(os.getloadavg()[0], 2)}
    emit(result, args.json, args.plot, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
