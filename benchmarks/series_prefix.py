"""Benchmark: can two group-bys whose keys share a prefix share one Spark exchange, or two
with the same keys one grouping?

Comet (He et al., SoCC 2010, §4) shuffles once on a shared key prefix — (A, B) serves a
grouping on (A, B, E) and one on (A, B) — and aggregates both per partition. This
script measures what that costs in Spark on one day of ``benchmarks/series.py``'s click
log, for four pairs of per-segment views, each written to Parquet:

* ``market_query``: q1's view (``count(*) WHERE E <= 3 GROUP BY A, B, E``) and q2's
  (``count(*) GROUP BY A, B``): few groups, so Spark's partial aggregation before an
  exchange shrinks each task's rows a lot;
* ``url_user``: ``count(*) GROUP BY C, D`` and ``sum(E) WHERE E > 1 GROUP BY D, C, A``:
  nearly a group per row (URL and user), so it shrinks them little;
* ``market_query_filters`` and ``url_user_filters``: the same two shapes with the same
  keys in both views (A, B; C, D in either order), each view with its own filter
  (``E <= 3``, ``E > 1``), where operator reordering applies.

The series stage's plans run on every pair (``strata.series.evaluate``):

* ``strata_separate``: each view its own plan (scan, partial aggregation, exchange on
  its own keys);
* ``strata_shared``: the jumbo pass (one scan, one exchange on the view and its key);
* ``strata_prefix``: the shared shuffle (one scan, one exchange hashing the shared keys,
  both views aggregated above it);
* ``strata_reordered``: operator reordering, where both views have the same keys (one
  scan, one grouping on the keys with each view's filter pulled above it into its
  aggregates, one exchange of partial groups carrying both views' parts).

A strata plan's run includes what the occurrence that reads the views later pays: it
reads them and merges them per group. Every plan stores its views co-located, as the
stage does: separate views bucketed by their keys, and a pass's rows each in its view's
bucket (``strata.queries.spark.bucketed.write_bucketed``), read back as bucketed tables, so the
merge shuffles nothing. ``pass_shuffled`` and ``read_back_shuffled`` split the shuffle.
For ``market_query``, hand-built plans run too:

* ``separate``: the two views as plain DataFrames;
* ``prefix_exchange``: one DataFrame, ``repartition(n, A, B)`` of the scanned rows, both
  aggregations above it, the two results unioned into one write (Spark plans the
  branches apart: two exchanges);
* ``prefix_combined``: the same, with a map-side combine on (A, B, E) before the exchange
  (a ``mapInArrow`` with pyarrow's group-by);
* ``reordered``: operator reordering instead — q1's filter pulled above one shared
  ``count(*) GROUP BY A, B, E`` of every row (cached), q1's view its rows with
  ``E <= 3``, q2's its roll-up to (A, B): one scan, a wider first exchange and one more.

Per plan: bytes read, shuffled and written (Spark's metrics, the median of ``--repeat``
runs, which agree), seconds, and the scans and exchanges in Spark's executed plan (a
``ReusedExchange`` is an exchange shared by both branches). Every plan's views are
checked equal to the first plan's of its kind (``answers_equal``). ``--quick`` (a smoke
run on a small segment) runs the strata plans only, once each, without a warm-up. Per pair, the cost
model's estimates (``strata.series.cost.scan_sharing``, each part scaled by κ as the
stage does after an epoch that ran separate plans) pick a plan, checked against the
cheapest measured (``cost_model_picks_the_cheapest``); ``delta_over_alpha`` is the
measured ratio behind the model's δ.

    python benchmarks/series_prefix.py [--quick] --json PATH [--plot PATH.png]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import emit, event_log_dir, parser, save  # benchmarks/common.py (this script's folder)
from series import FULL, QUICK, segments

ROOT = Path(__file__).resolve().parents[1]
HAND_BUILT = ("separate", "prefix_exchange", "prefix_combined", "reordered")
STRATA = ("strata_separate", "strata_shared", "strata_prefix", "strata_reordered")
# two views each: few groups (partial aggregation shrinks a task's rows a lot), and groups
# nearly as many as rows (it shrinks them little)
PAIRS = {
    "market_query": ("SELECT A, B, E, count(*) AS n FROM log WHERE E <= 3 GROUP BY A, B, E",
                     "SELECT A, B, count(*) AS n FROM log GROUP BY A, B"),
    "url_user": ("SELECT C, D, count(*) AS n FROM log GROUP BY C, D",
                 "SELECT D, C, A, sum(E) AS s FROM log WHERE E > 1 GROUP BY D, C, A"),
    # the same keys, a filter each: operator reordering applies
    "market_query_filters": (
        "SELECT A, B, count(*) AS n FROM log WHERE E <= 3 GROUP BY A, B",
        "SELECT B, A, sum(E) AS s, max(D) AS m FROM log WHERE E > 1 GROUP BY B, A"),
    "url_user_filters": (
        "SELECT C, D, count(*) AS n FROM log WHERE E <= 3 GROUP BY C, D",
        "SELECT D, C, sum(E) AS s FROM log WHERE E > 1 GROUP BY D, C"),
}


def views(pair: str):
    """The pair's per-segment partial views, as the series stage plans them."""
    from series import DDL

    from strata.model.schema import parse_ddl, type_ddl
    from strata.queries.front import parse_sql
    from strata.series.normalize import plan_series
    from strata.series.windows import Schedule, Segments

    columns = {f.name: type_ddl(f.type) for f in parse_ddl(DDL)}
    schedule = Schedule({"log": Segments.parse("log[-1:0]")}, 1)
    return [plan_series(parse_sql(sql, {"log": columns}), schedule, columns).view_list()[0]
            for sql in PAIRS[pair]]


def reorderable(pair: str) -> bool:
    """Whether the pair's views group by the same keys (operator reordering applies)."""
    from strata.series.evaluate import reorder_group

    return reorder_group(views(pair)) == [0, 1]


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


def frames(spark, plan: str, path: str, partitions: int, pair: str = "market_query"
           ) -> list:
    """The DataFrames ``plan`` writes (one per job)."""
    from pyspark.sql import functions as F

    seg = spark.read.parquet(path)
    if plan in STRATA:  # the series stage's plans, as it runs them
        from strata.series.evaluate import (
            jumbo_partials,
            prefix_group,
            prefix_partials,
            reordered_partials,
            view_of_segment,
        )

        vs = views(pair)
        if plan == "strata_separate":
            return [view_of_segment(v, seg) for v in vs]
        if plan == "strata_shared":
            return [jumbo_partials(vs, seg)]
        if plan == "strata_reordered":
            return [reordered_partials(vs, seg)]
        group, keys = prefix_group(vs)
        assert group == [0, 1], group
        return [prefix_partials(vs, seg, keys, partitions)]
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


def shape(spark, plan: str, path: str, partitions: int, pair: str) -> dict:
    """Scans and exchanges in the executed plans."""
    text = "\n".join(d._jdf.queryExecution().executedPlan().toString()
                     for d in frames(spark, plan, path, partitions, pair))
    spark.catalog.clearCache()
    return {"scans": text.count("FileScan parquet"),
            "exchanges": text.count("Exchange hashpartitioning") - text.count(
                "ReusedExchange"), "reused_exchanges": text.count("ReusedExchange")}


def measure(spark, metrics, plan: str, path: str, out: Path, partitions: int,
            repeat: int, pair: str, warm_up: bool = True) -> dict:
    runs = []
    for r in range(1 - warm_up, repeat + 1):  # run 0 warms the JVM up, not counted
        t0 = time.perf_counter()
        with metrics.measure(f"{pair}-{plan}-{r}") as m:
            for i, d in enumerate(frames(spark, plan, path, partitions, pair)):
                write(spark, plan, d, run_dir(out, r) / f"{pair}-{plan}-{i}", partitions)

        spark.catalog.clearCache()  # each run computes what it caches again
        with metrics.measure(f"{pair}-{plan}-{r}-read-back") as back:
            if plan in STRATA:
                read_back(spark, plan, run_dir(out, r), pair, partitions)
        if r:
            runs.append({"seconds": time.perf_counter() - t0,
                         "read": m.input_bytes + back.input_bytes,
                         "shuffled": m.shuffle_write_bytes + back.shuffle_write_bytes,
                         "written": m.output_bytes,
                         "pass_shuffled": m.shuffle_write_bytes,
                         "read_back_shuffled": back.shuffle_write_bytes})
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["io"] = med["read"] + med["shuffled"] + med["written"]
    med["seconds"] = round(med["seconds"], 3)
    return {**med, **shape(spark, plan, path, partitions, pair)}


def run_dir(out: Path, run: int) -> Path:
    """Where run ``run`` of each plan writes: a directory of its own, as the stage writes
    each pass into a new directory (it registers a pass's files with Spark's catalog once
    and never lists them again)."""
    return out / f"run{run}"


def write(spark, plan: str, d, path: Path, partitions: int) -> None:
    """Write one DataFrame of ``plan``: a pass's rows each in its view's bucket, as the
    stage writes them; the other plans' as they are."""
    if plan not in STRATA[1:]:
        d.write.mode("overwrite").parquet(str(path))
        return
    from strata.queries.spark import write_bucketed
    from strata.series.stored import branch_buckets

    shutil.rmtree(path, ignore_errors=True)
    write_bucketed(spark, d, branch_buckets(2, partitions), str(path), partitions, "_b")


def read_back(spark, plan: str, out: Path, pair: str, partitions: int) -> None:
    """What the occurrence that reads the views later pays: it reads them and merges
    them per group where they lie (separate views here: read only; a pass's views read
    as the stage reads them, bucketed by their keys, and merged)."""
    from strata.series.evaluate import group_plan, merge_partials

    if plan == "strata_separate":
        for i in (0, 1):
            spark.read.parquet(str(out / f"{pair}-{plan}-{i}")).write.format("noop").mode(
                "overwrite").save()
        return
    for v, stored in zip(views(pair), pass_views(spark, out / f"{pair}-{plan}-0",
                                                   partitions, pair), strict=True):
        merged = merge_partials(group_plan(v.node, v.monoids), stored)
        merged.write.format("noop").mode("overwrite").save()


def pass_views(spark, path: Path, partitions: int, pair: str) -> list:
    """A pass's views, each read from its files as the stage reads them."""
    from strata.queries.spark import ddl_of
    from strata.series.evaluate import jumbo_branch
    from strata.series.stored import branch_entries, branch_rows

    ddl = ddl_of(spark.read.parquet(str(path)).drop("_b").schema)
    entries = branch_entries(str(path), ddl, 2, partitions)
    return [jumbo_branch(v, i, branch_rows(spark, e))
            for i, (v, e) in enumerate(zip(views(pair), entries, strict=True))]


def answers(spark, plan: str, out: Path, pair: str, partitions: int) -> dict[str, list]:
    """Each view's rows as ``plan`` wrote them, sorted: the hand-built plans' counts, or
    the strata plans' views as the stage reads them back (key struct, monoid parts)."""
    from pyspark.sql import functions as F

    if plan in STRATA:
        if plan == "strata_separate":
            got = [spark.read.parquet(str(out / f"{pair}-{plan}-{i}")) for i in (0, 1)]
        else:
            got = pass_views(spark, out / f"{pair}-{plan}-0", partitions, pair)
        return {f"v{i}": sorted(map(repr, d.select(F.to_json(F.struct("*"))).collect()))
                for i, d in enumerate(got)}
    if plan in ("separate", "reordered"):
        q1, q2 = (spark.read.parquet(str(out / f"{pair}-{plan}-{i}")) for i in (0, 1))
    else:
        both = spark.read.parquet(str(out / f"{pair}-{plan}-0"))
        q1 = both.where("_v = 1").select("A", "B", "E", "n")
        q2 = both.where("_v = 2").select("A", "B", "n")
    return {"q1": sorted(map(tuple, q1.orderBy(*q1.columns).collect())),
            "q2": sorted(map(tuple, q2.orderBy(F.col("A"), F.col("B")).collect()))}


def cost_model(pair: str, path: str, out: Path, plans: dict) -> dict:
    """δ as measured (bytes the prefix pass shuffled per compressed byte of the columns
    it exchanges), and the cost model's choice among the stage's three scan plans, with
    its estimates' errors against their measured I/O."""
    from strata.series.cost import (
        Estimate,
        epoch_estimates,
        learned,
        scan_sharing,
        view_columns,
    )
    from strata.series.evaluate import prefix_group, reorder_group
    from strata.series.stored import column_bytes
    from strata.storage.increments import Increment

    vs = views(pair)
    columns = column_bytes(Increment((path,)))
    exchanged = sum(columns[c] for c in set().union(*map(view_columns, vs)))
    sizes = {v.fingerprint: sum(f.stat().st_size for f in (
        out / f"{pair}-strata_separate-{i}").rglob("*.parquet")) for i, v in enumerate(vs)}
    group, keys = prefix_group(vs)
    _, raw = scan_sharing(vs, columns, sizes, group=group, shared=keys,
                          reorder=reorder_group(vs))
    # as the stage does after an epoch that ran separate plans: each part of every
    # estimate scaled by that epoch's measured over estimated bytes (κ)
    kappa = learned({}, raw["separate"], {p: plans["strata_separate"][p]
                                          for p in ("read", "shuffled", "written")})
    est = epoch_estimates(raw, Estimate(0.0, 0.0, 0.0), kappa)
    choice = min(est, key=lambda p: est[p]["io"])
    ran = {p: plans[f"strata_{p}"]["io"] for p in est}
    cheapest = min(ran, key=ran.__getitem__)
    alpha = plans["strata_separate"]["shuffled"] / sum(sizes.values())
    delta = plans["strata_prefix"]["pass_shuffled"] / exchanged
    return {
        "alpha_measured": round(alpha, 3), "delta_measured": round(delta, 3),
        "delta_over_alpha": round(delta / alpha, 3),
        "kappa": {p: round(k, 3) for p, k in kappa.items()},
        "choice": choice, "cheapest_measured": cheapest,
        "regret": round(ran[choice] / ran[cheapest] - 1, 3),
        "estimated_over_measured_io": {p: round(est[p]["io"] / ran[p], 3) for p in ran},
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(result["pairs"]), figsize=(5.5 * len(result["pairs"]), 3.8),
                             gridspec_kw={"width_ratios": [len(r["plans"]) for r in
                                                           result["pairs"].values()]})
    for ax, (pair, res) in zip(axes, result["pairs"].items(), strict=True):
        plans = list(res["plans"])
        bottom = [0.0] * len(plans)
        for part in ("read", "shuffled", "written"):
            vals = [res["plans"][p][part] / 1e6 for p in plans]
            ax.bar(plans, vals, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_title(f"{pair}: the cost model chose {res['cost_model']['choice']}",
                     fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    axes[0].set_ylabel("MB (Spark's metrics)")
    axes[0].legend()
    fig.suptitle("two views of one segment: their own exchanges, or shared ones")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, seed=11, partitions=4, master="local[2]")
    ap.add_argument("--repeat", type=int, default=None,
                    help="measured runs per plan after a warm-up (3; 1 with --quick)")
    args = ap.parse_args(argv)
    args.repeat = args.repeat or (1 if args.quick else 3)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    cfg = {**(QUICK if args.quick else FULL), "days": 1}
    spark = get_spark(args.master, app_name="strata-bench-series-prefix",
                      event_log_dir=event_log_dir(),
                      **{"spark.ui.retainedStages": "100000"})
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    metrics = SparkMetrics(spark)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-series-prefix-"))
    load0 = os.getloadavg()[0]
    [path] = segments(cfg, tmp, args.seed)["parquet"]  # the Parquet segment of one day
    pairs, summary = {}, {}
    for pair in PAIRS:  # --quick: the strata plans only, one measured run each
        names = (HAND_BUILT if pair == "market_query" and not args.quick else ()) + tuple(
            p for p in STRATA if p != "strata_reordered" or reorderable(pair))
        plans = {p: measure(spark, metrics, p, path, tmp, args.partitions, args.repeat, pair,
                            warm_up=not args.quick) for p in names}
        n = args.partitions
        last = run_dir(tmp, args.repeat)
        same = all(answers(spark, p, last, pair, n) == answers(spark, group[0], last, pair, n)
                   for group in (HAND_BUILT, STRATA) for p in group if p in names)
        pairs[pair] = {"sql": PAIRS[pair], "plans": plans, "answers_equal": same,
                       "cost_model": cost_model(pair, path, last, plans)}
        for p in names:  # each plan over the separate plans of its kind
            base = "strata_separate" if p in STRATA else "separate"
            summary |= {f"{pair}_{p}_{k}_over_separate": {
                "value": round(plans[p][k] / plans[base][k], 3), "target": None,
                "met": None} for k in ("shuffled", "io") if p != base}
    same = all(r["answers_equal"] for r in pairs.values())
    summary["answers_equal"] = {"value": same, "target": True, "met": same}
    agree = all(r["cost_model"]["choice"] == r["cost_model"]["cheapest_measured"]
                for r in pairs.values())
    summary["cost_model_picks_the_cheapest"] = {"value": agree, "target": True, "met": agree}
    result = {"machine": "2 cores, local[2]",
              "command": "benchmarks/series_prefix.py " + " ".join(argv or sys.argv[1:]),
              "config": {**cfg, "partitions": args.partitions, "repeat": args.repeat},
              "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
              "pairs": pairs, "summary": summary,
              "not_run": {p: "skipped by --quick" for p in HAND_BUILT} if args.quick else {}}
    emit(result, args.json, args.plot, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
