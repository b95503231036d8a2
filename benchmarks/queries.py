"""Benchmark: incremental queries against full recomputation (Fegaras et al., TKDE 2016).

Two of the paper's queries, each as a strata query maintained increment by increment and
as the same SQL recomputed by Spark SQL over all data so far (written to Parquet, as the
incremental answer is):

* ``groupby``: ``SELECT x, avg(y) FROM pairs GROUP BY x`` over 1M initial pairs of ints
  in 0..10,000, then nine increments of 40K pairs (the paper's largest);
* ``join_groupby``: ``SELECT R.x, sum(S.v), count(*) FROM R JOIN S ON R.k = S.k GROUP BY
  R.x`` over two 100K inputs (R keyed by ``k``), then nine increments of 10K rows each.

Per increment it records wall seconds and Spark's shuffle write bytes
(:class:`strata.observability.spark_metrics.SparkMetrics`), and checks that the incremental answer
equals the recomputed one. It also times the *Spark floor*: one job reading the increment
into the driver, less than any epoch run as Spark jobs can cost.

    python benchmarks/queries.py [--quick] --json PATH [--plot PATH.png]

and the paper's two iterative queries (``iterate()``, the diffusion scheme), each against
the same loop recomputed from scratch by Spark DataFrames over all data so far:

* ``kmeans``: four clusters of points in the [2,4]/[6,8] squares, 10 steps from fixed
  seeds; 1M initial points, then five increments of 40K. Reports the largest centroid
  difference from recomputation after each increment (target ≤ 1e-2).
* ``pagerank``: an R-MAT graph (a=0.30, b=0.25, c=0.25, d=0.20) of 20K links over 4,096
  ids, then two increments of 200 links touching 50 new pages; up to 40 steps per
  increment, changes under 1e-5 not propagated. Reports the L1 distance between the
  normalized incremental and recomputed ranks (target ≤ 1e-3).

``--quick`` runs every part at small sizes in about a minute; its iterations take a few
steps only, so their errors are not comparable with the targets.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import emit, event_log_dir, parser, save  # benchmarks/common.py (this script's folder)

ROOT = Path(__file__).resolve().parents[1]

# the paper's sizes (section 8): 1M initial pairs, increments of 10-40K tuples
FULL = {"groupby_initial": 1_000_000, "groupby_increment": 40_000, "join_initial": 100_000,
        "join_increment": 10_000, "increments": 9, "key_range": 10_000,
        "kmeans_initial": 1_000_000, "kmeans_increment": 40_000, "kmeans_increments": 5,
        "kmeans_steps": 10, "pagerank_scale": 12, "pagerank_initial_edges": 20_000,
        "pagerank_increments": 2, "pagerank_increment_edges": 200, "pagerank_new_pages": 50,
        "pagerank_steps": 40, "pagerank_tolerance": 1e-5}
# a smoke run of every part in about a minute: iterations of a few steps, whose errors
# against recomputation are not the targets' (those need the full run's 40 steps)
QUICK = {"groupby_initial": 50_000, "groupby_increment": 5_000, "join_initial": 5_000,
         "join_increment": 1_000, "increments": 2, "key_range": 1_000,
         "kmeans_initial": 5_000, "kmeans_increment": 500, "kmeans_increments": 1,
         "kmeans_steps": 3, "pagerank_scale": 5, "pagerank_initial_edges": 60,
         "pagerank_increments": 1, "pagerank_increment_edges": 8,
         "pagerank_new_pages": 2, "pagerank_steps": 3, "pagerank_tolerance": 1e-5}
SEEDS = [(0, 2.5, 2.5), (1, 2.5, 7.5), (2, 7.5, 2.5), (3, 7.5, 7.5)]
PAGERANK_STEP = (
    "SELECT e.dst AS node, 0.15 + 0.85 * sum(x.rank / d.deg) AS rank FROM edges e "
    "JOIN ranks x ON e.src = x.node "
    "JOIN (SELECT src, count(*) AS deg FROM edges GROUP BY src) d ON e.src = d.src "
    "GROUP BY e.dst")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write(path: Path, columns: dict[str, np.ndarray]) -> str:
    pq.write_table(pa.table(columns), path)
    return str(path)


def batches(cfg: dict, seed: int = 7, only: Iterable[str] = ("groupby", "join_groupby")
            ) -> dict[str, list[dict[str, str]]]:
    """Parquet files per increment (index 0 is the initial data), per flow, for the
    queries in ``only``."""
    rng = np.random.default_rng(seed)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-data-"))
    out: dict[str, list[dict[str, str]]] = {"groupby": [], "join_groupby": []}
    kr = cfg["key_range"]
    r_next = 0
    for e in range(cfg["increments"] + 1):
        n = cfg["groupby_initial"] if e == 0 else cfg["groupby_increment"]
        if "groupby" in only:
            out["groupby"].append({"pairs": write(tmp / f"pairs-{e}.parquet", {
                "x": rng.integers(0, kr + 1, n), "y": rng.integers(0, kr + 1, n)})})
        if "join_groupby" not in only:
            continue
        n = cfg["join_initial"] if e == 0 else cfg["join_increment"]
        nr = n if e == 0 else n // 10  # R grows slower: new keys for new S rows
        r_keys = np.arange(r_next, r_next + nr)
        r_next += nr
        out["join_groupby"].append({
            "R": write(tmp / f"R-{e}.parquet", {"k": r_keys, "x": rng.integers(0, 1000, nr)}),
            "S": write(tmp / f"S-{e}.parquet", {"k": rng.integers(0, r_next, n),
                                               "v": rng.integers(0, 100, n)})})
    return {k: v for k, v in out.items() if k in only}


QUERIES = {
    "groupby": ("SELECT x, avg(y) AS a FROM pairs GROUP BY x", {}),
    "join_groupby": ("SELECT R.x, sum(S.v) AS s, count(*) AS n FROM R JOIN S ON R.k = S.k "
                     "GROUP BY R.x", {"R": ["k"]}),
}
ITERATIVE = ("kmeans", "pagerank")
SCHEMAS = {"pairs": "x bigint, y bigint", "R": "k bigint, x bigint", "S": "k bigint, v bigint"}


def run_incremental(spark, metrics, home: Path, name: str, incs, partitions: int):
    from strata import Dataflow
    from strata.controller import Controller
    from strata.queries import add_query

    sql, keys = QUERIES[name]
    df = Dataflow(name)
    for flow in incs[0]:
        df.source(flow, SCHEMAS[flow])
    add_query(df, name, sql, keys=keys)
    rows, answer = [], None
    with Controller(home, df, spark=spark, num_partitions=partitions) as c:
        for e, files in enumerate(incs):
            for flow, path in files.items():
                c.ingest(flow, [path], fmt="parquet")
            with metrics.measure(f"{name}-incremental-{e}") as m:
                t0 = time.perf_counter()
                c.run()
                secs = time.perf_counter() - t0
            rows.append({"seconds": round(secs, 4), "shuffle_bytes": m.shuffle_write_bytes})
            if e:
                log(f"[{name} incremental] increment {e}: {secs:.2f} s, shuffle "
                    f"{m.shuffle_write_bytes:,} B")
        answer = c.answer(name).to_pylist()
    return rows, answer


@contextmanager
def shuffle_partitions(spark, n: int):
    """Recomputation shuffles into as many partitions as strata's state has (Spark's
    default of 200 would slow it down on these inputs, as AQE is off in strata's session)."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


def run_recompute(spark, metrics, out: Path, name: str, incs):
    sql, _ = QUERIES[name]
    rows = []
    for e in range(len(incs)):
        with metrics.measure(f"{name}-recompute-{e}") as m:
            t0 = time.perf_counter()
            for flow in incs[0]:
                spark.read.parquet(*[i[flow] for i in incs[: e + 1]]).createOrReplaceTempView(
                    flow)
            spark.sql(sql).write.mode("overwrite").parquet(str(out / f"{name}-{e}"))
            secs = time.perf_counter() - t0
        rows.append({"seconds": round(secs, 4), "shuffle_bytes": m.shuffle_write_bytes})
        if e:
            log(f"[{name} recompute] increments 0..{e}: {secs:.2f} s, shuffle "
                f"{m.shuffle_write_bytes:,} B")
    answer = [r.asDict() for r in spark.read.parquet(str(out / f"{name}-{len(incs) - 1}"))
              .collect()]
    return rows, answer


def spark_floor(spark, incs, repeats: int = 5) -> list[dict]:
    """Per increment, the least that any epoch run as Spark jobs must do: one job reading
    the increment's files into the driver, without aggregating or writing anything (the
    best of ``repeats`` runs). Recomputation's time over this bounds the speed-up of any
    such epoch, however cheap the rest of it is made. None for the initial data."""
    rows: list[dict] = [{"seconds": None}]
    for files in incs[1:]:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            frames = [spark.read.parquet(path) for path in files.values()]
            df = frames[0].selectExpr(f"`{frames[0].columns[0]}` AS k")
            for other in frames[1:]:  # one job for all the flows' files
                df = df.union(other.selectExpr(f"`{other.columns[0]}` AS k"))
            df.toArrow()
            best = min(best, time.perf_counter() - t0)
        rows.append({"seconds": round(best, 4)})
    return rows


def compare(spark, metrics, tmp: Path, name: str, incs, partitions: int) -> dict:
    """Query ``name`` over ``incs`` incrementally (home under ``tmp``), by recomputation and
    as the Spark floor: ``{"incremental", "recompute", "spark_floor", "answers_equal"}``.
    Stops the benchmark if the two answers differ."""
    inc, a = run_incremental(spark, metrics, tmp / f"home-{name}", name, incs, partitions)
    with shuffle_partitions(spark, partitions):
        rec, b = run_recompute(spark, metrics, tmp, name, incs)
        floor = spark_floor(spark, incs)
    if not same_answers(a, b):
        raise SystemExit(f"{name}: incremental and recomputed answers differ")
    return {"incremental": inc, "recompute": rec, "spark_floor": floor, "answers_equal": True}


def same_answers(a: list[dict], b: list[dict]) -> bool:
    def norm(rows):
        return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in r.values())
                      for r in rows)
    return norm(a) == norm(b)


def iterative_batches(cfg: dict, only: set[str], seed: int = 11) -> dict[str, list[str]]:
    """Parquet files of points (k-means) and links (PageRank) per increment."""
    rng = np.random.default_rng(seed)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-iter-"))
    out: dict[str, list[str]] = {"kmeans": [], "pagerank": []}
    for e in range(cfg["kmeans_increments"] + 1):
        n = cfg["kmeans_initial"] if e == 0 else cfg["kmeans_increment"]
        out["kmeans"].append(write(tmp / f"points-{e}.parquet", {
            "x": rng.choice([3.0, 7.0], n) + rng.uniform(-1, 1, n),
            "y": rng.choice([3.0, 7.0], n) + rng.uniform(-1, 1, n)}))
    scale, seen = cfg["pagerank_scale"], set()
    for e in range(cfg["pagerank_increments"] + 1):
        m = cfg["pagerank_initial_edges"] if e == 0 else cfg["pagerank_increment_edges"]
        src, dst = rmat(rng, scale, m)
        if e:  # links from and to new pages
            k = cfg["pagerank_new_pages"]
            fresh = (1 << scale) + (e - 1) * k + np.arange(k)
            src[:k], dst[k:2 * k] = fresh, fresh
        pairs = [(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a != b]
        pairs = sorted(set(pairs) - seen)
        seen |= set(pairs)
        out["pagerank"].append(write(tmp / f"links-{e}.parquet", {
            "src": np.array([a for a, _ in pairs], dtype=np.int64),
            "dst": np.array([b for _, b in pairs], dtype=np.int64)}))
    return {k: v for k, v in out.items() if k in only}


def rmat(rng, scale: int, m: int, a=0.30, b=0.25, c=0.25) -> tuple[np.ndarray, np.ndarray]:
    """``m`` R-MAT links over ``2**scale`` ids: each bit of (src, dst) picks a quadrant."""
    r = rng.random((m, scale))
    src_bit = r >= a + b
    dst_bit = ((r >= a) & (r < a + b)) | (r >= a + b + c)
    weights = 1 << np.arange(scale)[::-1]
    return (src_bit * weights).sum(1), (dst_bit * weights).sum(1)


def iteration(name: str, cfg: dict):
    from strata.queries import iterate, table

    if name == "kmeans":
        p, c = table("points", alias="p"), table("centroids", alias="c")
        step = (p.join_nearest(c, "(p.x - c.x) * (p.x - c.x) + (p.y - c.y) * (p.y - c.y)")
                .group_by("c.k").agg(x="avg(p.x)", y="avg(p.y)"))
        return iterate("centroids", "k int, x double, y double", "k",
                       init="SELECT k, x, y FROM seeds", step=step,
                       times=cfg["kmeans_steps"], tolerance=1e-9)
    return iterate("ranks", "node bigint, rank double", "node",
                   init="SELECT src AS node, 0.15 AS rank FROM edges", step=PAGERANK_STEP,
                   times=cfg["pagerank_steps"], tolerance=cfg["pagerank_tolerance"])


class StepTimes(logging.Handler):
    """Collects the seconds of each iteration step from strata's debug log, while in
    its ``with`` block."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seconds: list[float] = []
        self.logger = logging.getLogger("strata.queries.programs.iteration")

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "step_seconds"):
            self.seconds.append(record.step_seconds)

    def __enter__(self) -> StepTimes:
        self.level_before = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)


def run_iterative(spark, metrics, home: Path, name: str, files: list[str], cfg: dict,
                  partitions: int):
    from strata import Dataflow
    from strata.controller import Controller
    from strata.queries import add_query

    df = Dataflow(name)
    flow = "points" if name == "kmeans" else "edges"
    df.source(flow, "x double, y double" if name == "kmeans" else "src bigint, dst bigint")
    if name == "kmeans":
        df.source("seeds", "k int, x double, y double")
    add_query(df, name, iteration(name, cfg))
    rows, answers = [], []
    steps = StepTimes()
    with Controller(home, df, spark=spark, num_partitions=partitions) as c, steps:
        if name == "kmeans":
            c.ingest("seeds", [{"k": k, "x": x, "y": y} for k, x, y in SEEDS])
        for e, path in enumerate(files):
            c.ingest(flow, [path], fmt="parquet")
            steps.seconds.clear()
            with metrics.measure(f"{name}-incremental-{e}") as m:
                t0 = time.perf_counter()
                c.run()
                secs = time.perf_counter() - t0
            rows.append({"seconds": round(secs, 4), "shuffle_bytes": m.shuffle_write_bytes,
                         "step_seconds": [round(x, 4) for x in steps.seconds]})
            answers.append(c.answer(name).to_pylist())
            log(f"[{name} incremental] {'initial' if e == 0 else f'increment {e}'}: "
                f"{secs:.2f} s, shuffle {m.shuffle_write_bytes:,} B")
    return rows, answers


def recompute_kmeans(spark, files: list[str], steps: int) -> dict[int, tuple[float, float]]:
    """Lloyd's loop over all points so far, from the same seeds, as DataFrame jobs."""
    from pyspark.sql import functions as F

    points = spark.read.parquet(*files).persist()
    centers = {k: (x, y) for k, x, y in SEEDS}
    for _ in range(steps):
        dist = [F.struct(((F.col("x") - x) ** 2 + (F.col("y") - y) ** 2).alias("d"),
                         F.lit(k).alias("k")) for k, (x, y) in sorted(centers.items())]
        got = (points.withColumn("k", F.least(*dist).getField("k")).groupBy("k")
               .agg(F.avg("x").alias("x"), F.avg("y").alias("y")).collect())
        centers.update({r["k"]: (r["x"], r["y"]) for r in got})
    points.unpersist()
    return centers


def recompute_pagerank(spark, files: list[str], steps: int) -> dict[int, float]:
    """The same loop over all links so far: sources start at 0.15, each step gives nodes
    with in-links 0.15 + 0.85·Σ rank/outdeg, as DataFrame jobs."""
    from pyspark.sql import functions as F

    edges = spark.read.parquet(*files).persist()
    deg = edges.groupBy("src").agg(F.count("*").alias("deg"))
    ranks = edges.select(F.col("src").alias("node")).distinct().withColumn(
        "rank", F.lit(0.15)).localCheckpoint()
    for _ in range(steps):
        new = (edges.join(deg, "src").join(ranks, edges.src == ranks.node)
               .groupBy("dst").agg((0.15 + 0.85 * F.sum(F.col("rank") / F.col("deg")))
                                   .alias("rank")).withColumnRenamed("dst", "node"))
        ranks = ranks.join(new, "node", "left_anti").unionByName(new).localCheckpoint()
    out = {r["node"]: r["rank"] for r in ranks.collect()}
    edges.unpersist()
    return out


def run_iterative_recompute(spark, metrics, name: str, files: list[str], cfg: dict):
    rows, answers = [], []
    for e in range(len(files)):
        with metrics.measure(f"{name}-recompute-{e}") as m:
            t0 = time.perf_counter()
            if name == "kmeans":
                ans = recompute_kmeans(spark, files[: e + 1], cfg["kmeans_steps"])
            else:
                ans = recompute_pagerank(spark, files[: e + 1], cfg["pagerank_steps"])
            secs = time.perf_counter() - t0
        rows.append({"seconds": round(secs, 4), "shuffle_bytes": m.shuffle_write_bytes})
        answers.append(ans)
        log(f"[{name} recompute] increments 0..{e}: {secs:.2f} s")
    return rows, answers


def kmeans_error(got: list[dict], want: dict[int, tuple[float, float]]) -> float:
    return max(max(abs(r["x"] - want[r["k"]][0]), abs(r["y"] - want[r["k"]][1]))
               for r in got)


def pagerank_l1(got: list[dict], want: dict[int, float]) -> float:
    mine = {r["node"]: r["rank"] for r in got}
    ta, tb = sum(mine.values()), sum(want.values())
    return sum(abs(mine.get(k, 0.0) / ta - want.get(k, 0.0) / tb)
               for k in set(mine) | set(want))


def summarize(result: dict) -> dict:
    out = {}
    for name in [q for q in QUERIES if q in result["queries"]]:
        inc = [r["seconds"] for r in result["queries"][name]["incremental"][1:]]
        rec = [r["seconds"] for r in result["queries"][name]["recompute"][1:]]
        if len(inc) >= 2:
            flat = inc[-1] / inc[1]
            out[f"{name}_incremental_last_over_second"] = {
                "value": round(flat, 3), "target": "<= 1.25", "met": flat <= 1.25}
        speedup = rec[-1] / inc[-1]
        out[f"{name}_recompute_over_incremental_last"] = {
            "value": round(speedup, 2), "target": ">= 2", "met": speedup >= 2}
        if "spark_floor" in result["queries"][name]:  # the most any Spark epoch could gain
            bound = rec[-1] / result["queries"][name]["spark_floor"][-1]["seconds"]
            out[f"{name}_recompute_over_spark_floor_last"] = {
                "value": round(bound, 2), "target": ">= 5 (else the target is out of "
                "reach of any epoch that runs a Spark job)", "met": bound >= 5}
    q = result["queries"]
    if "error" in q.get("kmeans", {}):
        worst = max(q["kmeans"]["error"])
        out["kmeans_max_centroid_error"] = {"value": worst, "target": "<= 1e-2",
                                            "met": worst <= 1e-2}
    if "error" in q.get("pagerank", {}):
        worst = max(q["pagerank"]["error"])
        out["pagerank_max_l1_error"] = {"value": worst, "target": "<= 1e-3",
                                        "met": worst <= 1e-3}
    for name in [n for n in ITERATIVE if "incremental" in q.get(n, {})]:
        inc = sum(r["seconds"] for r in q[name]["incremental"][1:])
        rec = sum(r["seconds"] for r in q[name]["recompute"][1:])
        if inc > 0:
            out[f"{name}_recompute_over_incremental"] = {
                "value": round(rec / inc, 3), "target": ">= 1.5", "met": rec / inc >= 1.5,
                "what": "recomputation's seconds over the incremental epochs', summed over "
                        "the increments (not the initial data)"}
    steps = [s for n in ITERATIVE for r in q.get(n, {}).get("incremental", [])[1:]
             for s in r.get("step_seconds", [])]
    if steps:
        median = float(np.median(steps))
        out["iteration_step_seconds_median"] = {
            "value": round(median, 3), "target": "<= 0.5", "met": median <= 0.5,
            "what": f"median over the {len(steps)} steps of every increment's epoch"}
    return out


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in result["queries"] if "incremental" in result["queries"][n]]
    fig, axes = plt.subplots(2, len(names), figsize=(6 * len(names), 8), squeeze=False)
    for j, name in enumerate(names):
        for how in ("incremental", "recompute"):
            rows = result["queries"][name][how][1:]
            xs = range(1, len(rows) + 1)
            axes[0][j].plot(xs, [r["seconds"] for r in rows], marker="o", label=how)
            axes[1][j].plot(xs, [max(r["shuffle_bytes"], 1) for r in rows], marker="o",
                            label=how)
        if "spark_floor" in result["queries"][name]:
            rows = result["queries"][name]["spark_floor"][1:]
            axes[0][j].plot(range(1, len(rows) + 1), [r["seconds"] for r in rows], ls="--",
                            color="grey", label="Spark floor (one job reading the increment)")
        axes[0][j].set_title(f"{name}: seconds per increment")
        axes[1][j].set_title(f"{name}: shuffle write bytes (0 drawn as 1)")
        axes[1][j].set_yscale("log")
        for ax in axes[:, j]:
            ax.set_xlabel("increment")
            ax.legend()
    fig.suptitle(f"strata incremental queries vs recomputation ({result['machine']})")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, partitions=4, master="local[2]")
    ap.add_argument("--only", nargs="+", choices=[*QUERIES, *ITERATIVE], metavar="QUERY",
                    help=f"run only these queries (of {', '.join([*QUERIES, *ITERATIVE])})")
    args = ap.parse_args(argv)
    only = set(args.only or [*QUERIES, *ITERATIVE])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    cfg = QUICK if args.quick else FULL
    # an iteration's epoch runs thousands of stages: the UI must keep them for the metrics
    spark = get_spark(args.master, app_name="strata-bench-queries", event_log_dir=event_log_dir(),
                      **{"spark.ui.retainedStages": "100000", "spark.ui.retainedJobs": "100000"})
    metrics = SparkMetrics(spark)
    data = batches(cfg)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-queries-"))
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    result: dict = {"machine": f"{os.cpu_count()} cores, {args.master}",
                    "command": " ".join(["benchmarks/queries.py", *(argv or sys.argv[1:])]),
                    "config": cfg, "queries": {}}
    try:
        for name in [q for q in QUERIES if q in only]:
            result["queries"][name] = compare(spark, metrics, tmp, name, data[name],
                                              args.partitions)
        measure = {"kmeans": kmeans_error, "pagerank": pagerank_l1}
        for name, files in iterative_batches(cfg, only).items():
            data[name] = [{"f": f} for f in files]
            inc, got = run_iterative(spark, metrics, tmp / f"home-{name}", name, files, cfg,
                                     args.partitions)
            with shuffle_partitions(spark, args.partitions):
                rec, want = run_iterative_recompute(spark, metrics, name, files, cfg)
            result["queries"][name] = {"incremental": inc, "recompute": rec, "error": [
                measure[name](g, w) for g, w in zip(got, want, strict=True)]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for files in data.values():
            for f in files:
                for p in f.values():
                    Path(p).unlink(missing_ok=True)
    result["summary"] = summarize(result)
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    result["load_average_1m"] = {"start": round(load0, 2), "end": round(os.getloadavg()[0], 2)}
    emit(result, args.json, args.plot, plot)
    for k, v in result["summary"].items():
        log(f"{k}: {v['value']} (target {v['target']}: {'met' if v['met'] else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
