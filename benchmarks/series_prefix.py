"""Benchmark: can two group-bys whose keys share a prefix share one Spark exchange?

Comet (He et al., SoCC 2010, §4) shuffles once on a shared key prefix — (A, B) serves a
grouping on (A, B, E) and one on (A, B) — and aggregates both per partition. This
script measures what that plan costs in Spark on one day of ``benchmarks/series.py``'s
click log, for the two per-segment views of its series q1 (``count(*) WHERE E <= 3
GROUP BY A, B, E``) and q2 (``count(*) GROUP BY A, B``), each written to Parquet:

* ``separate``: each view its own plan (scan, map-side partial aggregation, exchange on
  its own keys), as the series stage runs them;
* ``prefix_exchange``: one DataFrame, ``repartition(n, A, B)`` of the scanned rows, both
  aggregations above it (Spark needs no further exchange: hash partitioning on (A, B)
  satisfies both groupings), the two results unioned into one write;
* ``prefix_combined``: the same, with a map-side combine on (A, B, E) before the exchange
  (a ``mapInArrow`` with pyarrow's group-by, since Spark does not aggregate partially
  below an explicit repartition);
* ``reordered``: operator reordering instead — q1's filter pulled above one shared
  ``count(*) GROUP BY A, B, E`` of every row (cached), q1's view its rows with
  ``E <= 3``, q2's its roll-up to (A, B): one scan, a wider first exchange and one more.

Per plan: bytes read, shuffled and written (Spark's metrics, the median of ``--repeat``
runs, which agree), seconds, and the scans and exchanges in Spark's executed plan (a
``ReusedExchange`` is an exchange shared by both branches). Every plan's rows are
checked equal to ``separate``'s (``answers_equal``).

    python benchmarks/series_prefix.py [--quick] --json PATH [--plot PATH.png]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import emit, parser, save  # benchmarks/common.py (this script's folder)
from series import FULL, QUICK, segments

ROOT = Path(__file__).resolve().parents[1]
PLANS = ("separate", "prefix_exchange", "prefix_combined", "reordered")


def combine(batches):
    """Map-side partial aggregation of one task's rows on (A, B, E): the count of all
    rows (q2's part) and of those with ``E <= 3`` (q1's)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    table = table.append_column("q1", pc.less_equal(table["E"], 3).cast(pa.int64()))
    g = table.group_by(["A", "B", "E"]).aggregate([("q1", "sum"), ("E", "count")])
    yield from pa.table({"A": g["A"], "B": g["B"], "E": g["E"], "n": g["E_count"],
                         "n1": g["q1_sum"]}).to_batches()


def frames(spark, plan: str, path: str, partitions: int) -> list:
    """The DataFrames ``plan`` writes (one per job)."""
    from pyspark.sql import functions as F

    seg = spark.read.parquet(path)
    if plan == "separate":
        return [seg.where("E <= 3").groupBy("A", "B", "E").agg(F.count("*").alias("n")),
                seg.groupBy("A", "B").agg(F.count("*").alias("n"))]
    if plan == "reordered":  # the cache is dropped after each run (measure)
        shared = seg.groupBy("A", "B", "E").agg(F.count("*").alias("n")).cache()
        return [shared.where("E <= 3"), shared.groupBy("A", "B").agg(F.sum("n").alias("n"))]
    if plan == "prefix_exchange":
        base = seg.select("A", "B", "E", F.lit(1).cast("bigint").alias("n"),
                          F.when(F.col("E") <= 3, 1).otherwise(0).cast("bigint").alias("n1"))
    else:
        base = seg.select("A", "B", "E").mapInArrow(
            combine, "A string, B bigint, E bigint, n bigint, n1 bigint")
    base = base.repartition(partitions, "A", "B")
    q1 = base.groupBy("A", "B", "E").agg(F.sum("n1").alias("n")).where("n > 0")
    q2 = base.groupBy("A", "B").agg(F.sum("n").alias("n"))
    return [q1.select(F.lit(1).alias("_v"), "A", "B", "E", "n").unionByName(
        q2.select(F.lit(2).alias("_v"), "A", "B", F.lit(None).cast("bigint").alias("E"),
                  "n"))]


def shape(spark, plan: str, path: str, partitions: int) -> dict:
    """Scans and exchanges in the executed plans."""
    text = "\n".join(d._jdf.queryExecution().executedPlan().toString()
                     for d in frames(spark, plan, path, partitions))
    spark.catalog.clearCache()
    return {"scans": text.count("FileScan parquet"),
            "exchanges": text.count("Exchange hashpartitioning") - text.count(
                "ReusedExchange"), "reused_exchanges": text.count("ReusedExchange")}


def measure(spark, metrics, plan: str, path: str, out: Path, partitions: int,
            repeat: int) -> dict:
    runs = []
    for r in range(repeat + 1):  # the first run warms the JVM up and is not counted
        t0 = time.perf_counter()
        with metrics.measure(f"{plan}-{r}") as m:
            for i, d in enumerate(frames(spark, plan, path, partitions)):
                d.write.mode("overwrite").parquet(str(out / f"{plan}-{i}"))
        spark.catalog.clearCache()  # each run computes what it caches again
        if r:
            runs.append({"seconds": time.perf_counter() - t0, "read": m.input_bytes,
                         "shuffled": m.shuffle_write_bytes, "written": m.output_bytes})
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["io"] = med["read"] + med["shuffled"] + med["written"]
    med["seconds"] = round(med["seconds"], 3)
    return {**med, **shape(spark, plan, path, partitions)}


def answers(spark, plan: str, out: Path) -> dict[str, list]:
    """Each view's rows as ``plan`` wrote them, sorted."""
    from pyspark.sql import functions as F

    if plan in ("separate", "reordered"):
        q1, q2 = (spark.read.parquet(str(out / f"{plan}-{i}")) for i in (0, 1))
    else:
        both = spark.read.parquet(str(out / f"{plan}-0"))
        q1 = both.where("_v = 1").select("A", "B", "E", "n")
        q2 = both.where("_v = 2").select("A", "B", "n")
    return {"q1": sorted(map(tuple, q1.orderBy(*q1.columns).collect())),
            "q2": sorted(map(tuple, q2.orderBy(F.col("A"), F.col("B")).collect()))}


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plans = list(result["plans"])
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = [0.0] * len(plans)
    for part in ("read", "shuffled", "written"):
        vals = [result["plans"][p][part] / 1e6 for p in plans]
        ax.bar(plans, vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("MB (Spark's metrics)")
    ax.set_title("q1 and q2 views of one segment: own exchanges, one on (A, B), reordered")
    ax.legend()
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=11, partitions=4, master="local[2]")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    cfg = {**(QUICK if args.quick else FULL), "days": 1}
    spark = get_spark(args.master, app_name="strata-bench-series-prefix",
                      **{"spark.ui.retainedStages": "100000"})
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    metrics = SparkMetrics(spark)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-series-prefix-"))
    load0 = os.getloadavg()[0]
    [path] = segments(cfg, tmp, args.seed)["parquet"]  # the Parquet segment of one day
    plans = {p: measure(spark, metrics, p, path, tmp, args.partitions, args.repeat)
             for p in PLANS}
    expected = answers(spark, "separate", tmp)
    same = all(answers(spark, p, tmp) == expected for p in PLANS[1:])
    sep = plans["separate"]
    summary = {f"{p}_{k}_over_separate": {"value": round(plans[p][k] / sep[k], 3),
                                          "target": None, "met": None}
               for p in PLANS[1:] for k in ("shuffled", "io")}
    summary["answers_equal"] = {"value": same, "target": True, "met": same}
    result = {"machine": "2 cores, local[2]",
              "command": "benchmarks/series_prefix.py " + " ".join(argv or sys.argv[1:]),
              "config": {**cfg, "partitions": args.partitions, "repeat": args.repeat},
              "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
              "plans": plans, "summary": summary}
    emit(result, args.json, args.plot, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
