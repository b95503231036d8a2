"""Spark Declarative Pipelines: PySpark's spark-pipelines against strata pipelines.

The shop pipeline (examples/sdp_shop: five materialized views, a temporary view and a
DataFrame body) over an orders source that grows by one day's files per run. Each run,
both tools refresh the pipeline in a process of their own, as a cron job would:
``spark-pipelines run`` recomputes every view (open-source SDP's refresh),
``strata pipelines run`` changes them by the new day. Per run: wall seconds (JVM start
included) and Spark's bytes read, shuffled and written (each process's event log); after
every run every view of the two is compared. strata's driver-side reads (its answers and
state footers, read with pyarrow) are not Spark task metrics and are not counted; its
published tables' bytes are added to its writes.

    python benchmarks/sdp.py --json benchmarks/results/sdp.json --plot benchmarks/results/sdp.png
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import emit, parser, save
from benchmarks.series_sdp import _io_of
from tests.sdp.shop import copy_project, same, table, write_day

BIN = Path(sys.executable).parent
VIEWS = ("daily_revenue", "country_totals", "active_users", "products_sold", "top_products",
         "big_orders")


def _conf_dir(root: Path, events: Path, warehouse: Path | None, partitions: int) -> Path:
    conf = root / f"conf-{time.monotonic_ns()}"
    conf.mkdir()
    lines = ["spark.eventLog.enabled true", "spark.eventLog.compress false",
             f"spark.eventLog.dir file://{events}", "spark.ui.enabled false",
             "spark.hadoop.parquet.hadoop.vectored.io.enabled false",
             f"spark.sql.shuffle.partitions {partitions}"]
    if warehouse is not None:
        lines.append(f"spark.sql.warehouse.dir file://{warehouse}")
    (conf / "spark-defaults.conf").write_text("\n".join(lines) + "\n")
    return conf


def _timed(cmd: list[str], cwd: Path, conf: Path, events: Path) -> dict:
    before = set(events.iterdir())
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable,
                               "SPARK_CONF_DIR": str(conf)})
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {(done.stdout + done.stderr)[-3000:]}")
    logs = set(events.iterdir()) - before
    io = {"read": 0, "shuffled": 0, "written": 0, "io": 0, "job_seconds": 0.0}
    for log in logs:
        for k, v in _io_of(log).items():
            io[k] += v
    return {"seconds": round(seconds, 3), **io}


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*.parquet"))


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="strata-bench-sdp-"))
    sdp_project, strata_project = work / "sdp", work / "strata"
    copy_project(sdp_project)
    spec = copy_project(strata_project)
    events = work / "events"
    events.mkdir()
    runs, equal, total = [], True, 0
    for day in range(1, args.runs + 1):
        for project in (sdp_project, strata_project):  # the same day's files in both
            write_day(project, day, args.rows, files=args.files)
        total += args.rows
        sdp_wh = work / f"sdp-warehouse-{day}"  # a fresh process cannot reuse a table folder
        sdp = _timed([str(BIN / "spark-pipelines"), "run", "--spec",
                      str(sdp_project / "spark-pipeline.yml")], sdp_project,
                     _conf_dir(work, events, sdp_wh, args.partitions), events)
        strata_wh = work / "strata-warehouse"
        before = _bytes_under(strata_wh) if strata_wh.exists() else 0
        st = _timed([str(BIN / "strata"), "pipelines", "run", "--spec", str(spec),
                     "--warehouse", str(strata_wh), "--master", args.master or "local[2]",
                     "--json"], strata_project,
                    _conf_dir(work, events, None, args.partitions), events)
        published = max(0, _bytes_under(strata_wh) - before)
        st["written"] += published
        st["io"] += published
        for view in VIEWS:
            try:
                same(table(strata_wh / view), table(sdp_wh / view), view)
            except AssertionError as e:
                equal = False
                print(f"day {day}: {view} differs: {str(e)[:500]}", file=sys.stderr)
        runs.append({"run": day, "rows_in_all": total, "sdp": sdp, "strata": st})
        print(f"run {day} ({total} rows): sdp {sdp['seconds']} s, strata {st['seconds']} s",
              file=sys.stderr)
    described = subprocess.run([str(BIN / "strata"), "pipelines", "explain", "--spec",
                                str(spec), "--json"], capture_output=True, text=True,
                               env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    import json

    views = json.loads(described.stdout)["views"]
    return {
        "benchmark": "sdp",
        "config": {"runs": args.runs, "rows_per_run": args.rows, "files_per_run": args.files,
                   "partitions": args.partitions, "views": list(VIEWS)},
        "runs": runs,
        "views": [{k: v[k] for k in ("name", "incremental", "why_full")} for v in views],
        "summary": summarize(runs, views, equal),
    }


TARGETS = {"sdp_over_strata_seconds_last_run": (">= 5", lambda v: v >= 5),
           "sdp_over_strata_io_last_run": (">= 10", lambda v: v >= 10),
           "strata_run_growth_last_over_second": ("<= 1.25", lambda v: v <= 1.25)}


def summarize(runs: list[dict], views: list[dict], equal: bool) -> dict:
    """The issue's figures, each with its target and whether it was met."""
    last, second = runs[-1], runs[1] if len(runs) > 1 else runs[-1]
    values = {
        "sdp_over_strata_seconds_last_run": last["sdp"]["seconds"] / last["strata"]["seconds"],
        "sdp_over_strata_io_last_run": last["sdp"]["io"] / max(1, last["strata"]["io"]),
        "strata_run_growth_last_over_second":
            last["strata"]["seconds"] / second["strata"]["seconds"],
    }
    out: dict = {name: {"value": round(v, 2), "target": TARGETS[name][0],
                        "met": TARGETS[name][1](v)} for name, v in values.items()}
    incremental = all(v["incremental"] for v in views)
    out["views_incremental"] = {"value": incremental, "target": True, "met": incremental}
    out["answers_equal"] = {"value": equal, "target": True, "met": equal}
    out["rows_in_all"] = last["rows_in_all"]
    return out


def plot(result: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    runs = result["runs"]
    x = [r["rows_in_all"] / 1e6 for r in runs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for tool, style in (("sdp", "o-"), ("strata", "s-")):
        a.plot(x, [r[tool]["seconds"] for r in runs], style, label=tool)
        b.plot(x, [r[tool]["io"] / 1e6 for r in runs], style, label=tool)
    a.set(xlabel="rows in the source (millions)", ylabel="seconds per refresh (process)",
          title="refresh time")
    b.set(xlabel="rows in the source (millions)", ylabel="MB read + shuffled + written",
          title="Spark I/O per refresh")
    for ax in (a, b):
        ax.legend()
        ax.set_ylim(bottom=0)
    save(fig, path)


def main() -> None:
    ap = parser(__doc__, partitions=4)
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--rows", type=int, default=None, help="orders per run")
    ap.add_argument("--files", type=int, default=4, help="files per run")
    args = ap.parse_args()
    args.runs = args.runs or (2 if args.quick else 10)
    args.rows = args.rows or (5_000 if args.quick else 1_000_000)
    emit(run(args), args.json, args.plot, plot)


if __name__ == "__main__":
    main()
