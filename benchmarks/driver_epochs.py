"""Benchmark: a translate stage's epochs in the driver against the same epochs as Spark tasks.

A direct-mode epoch with few input records runs in the driver (docs/architecture.md,
"Small epochs in the driver"): no job, no pickling, no shuffle, but one core for the
per-key Python where Spark's tasks use them all. This script measures where that stops
paying, to set the translate program's own limit (the session conf
``spark.strata.translate.driverRecords``, docs/configuration.md). Per increment size it
runs the URL count of ``peer_structured_streaming.py`` (its data: Zipf-skewed URLs,
one Parquet file per increment) in two fresh homes, ``driver`` (every epoch in the
driver; the limit lifted for the measurement) and ``tasks``
(``spark.strata.driverEpoch.maxRows=-1``), and takes the median seconds of
``Controller.run()`` over increments 2..n.

    python benchmarks/driver_epochs.py [--quick] --json PATH [--plot PATH.png]

The JSON (to ``PATH`` and stdout): ``rows`` (per size: the medians and their ratio),
``summary.crossover_records`` (the smallest size measured at which the driver was the
slower, or null) and ``summary.driver_records`` (the limit strata uses) with
``summary.limit_below_crossover`` (``met`` when the limit is below the crossover).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import emit, parser, save  # benchmarks/common.py (this script's folder)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_structured_streaming as peer  # its data and its strata method

FULL = {"sizes": [10_000, 25_000, 50_000, 100_000, 200_000], "keys": 2_000_000,
        "increments": 6}
QUICK = {"sizes": [2_000, 10_000], "keys": 50_000, "increments": 3}
ALL_TASKS = {"spark.strata.driverEpoch.maxRows": "-1"}
IN_DRIVER = {"spark.strata.driverEpoch.maxRows": str(1 << 40)}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median_seconds(spark, tmp: Path, files: list[Path], records: int, where: str,
                   partitions: int) -> float:
    """Median seconds of ``Controller.run()`` over increments 2.. in a fresh home."""
    confs = IN_DRIVER if where == "driver" else ALL_TASKS
    for k, v in confs.items():
        spark.conf.set(k, v)
    ctx = {"spark": spark, "metrics": None, "tmp": tmp / where, "records": records,
           "partitions": partitions}
    method = peer.Strata(f"direct-{where}", ctx, "direct")
    method.start()
    secs = []
    for e, f in enumerate(files, 1):
        method.c.ingest("urls", [str(f)])
        t0 = time.perf_counter()
        (report,) = method.c.run()
        secs.append(time.perf_counter() - t0)
        if report.metrics.get("in_driver") != (where == "driver"):
            raise RuntimeError(f"{where}: increment {e} ran elsewhere ({report.metrics})")
    method.finish()
    for k in confs:
        spark.conf.unset(k)
    return round(statistics.median(secs[1:]), 4)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["records"] for r in result["rows"]]
    for where in ("driver", "tasks"):
        ax.plot(xs, [r[f"{where}_seconds"] for r in result["rows"]], marker="o", label=where)
    limit = result["summary"]["driver_records"]["value"]
    ax.axvline(limit, color="grey", linestyle="--", label=f"strata's limit ({limit:,})")
    ax.set_xscale("log")
    ax.set_xlabel("input records per increment")
    ax.set_ylabel("median seconds per increment")
    ax.set_title("URL count, direct mode: epochs in the driver vs as Spark tasks")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=1, master="local[2]")
    args = ap.parse_args(argv)
    size = QUICK if args.quick else FULL
    from strata import config
    from strata.physical.session import get_spark

    wall0, load0 = time.perf_counter(), os.getloadavg()
    spark = get_spark(args.master, app_name="strata-bench-driver-epochs")
    limit = config.conf(spark, config.TRANSLATE_DRIVER_RECORDS)
    # measured past strata's own limit
    spark.conf.set(config.TRANSLATE_DRIVER_RECORDS.name, str(1 << 40))
    tmp = Path(tempfile.mkdtemp(prefix="strata-driver-epochs-"))
    rows = []
    try:
        for records in size["sizes"]:
            files, _ = peer.make_increments(tmp / f"inc-{records}", records, size["keys"],
                                            size["increments"], 0.9, args.seed)
            row = {"records": records}
            for where in ("driver", "tasks"):
                row[f"{where}_seconds"] = median_seconds(spark, tmp / str(records), files,
                                                         records, where, args.partitions)
            row["driver_over_tasks"] = round(row["driver_seconds"] / row["tasks_seconds"], 3)
            rows.append(row)
            log(f"{records:>9,} records: driver {row['driver_seconds']:.3f} s, tasks "
                f"{row['tasks_seconds']:.3f} s ({row['driver_over_tasks']}x)")
    finally:
        spark.conf.unset(config.TRANSLATE_DRIVER_RECORDS.name)
        shutil.rmtree(tmp, ignore_errors=True)
    crossover = next((r["records"] for r in rows if r["driver_over_tasks"] > 1), None)
    result = {
        "config": {"sizes": size["sizes"], "keys": size["keys"],
                   "increments": size["increments"], "skew": 0.9, "seed": args.seed,
                   "partitions": args.partitions, "master": args.master,
                   "quick": args.quick},
        "machine": {"cores": os.cpu_count(), "load_average_1m": {
            "start": round(load0[0], 2), "end": round(os.getloadavg()[0], 2)}},
        "rows": rows,
        "summary": {
            "statistic": "median seconds of Controller.run() over increments 2..n",
            "crossover_records": crossover,
            "driver_records": {"value": limit, "what": config.TRANSLATE_DRIVER_RECORDS.name},
            "limit_below_crossover": {
                "value": limit, "target": f"< {crossover}" if crossover else "-",
                "met": crossover is None or limit < crossover},
        },
        "wall_seconds": round(time.perf_counter() - wall0, 1),
    }
    emit(result, args.json, args.plot, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
