"""Benchmark: incremental queries against full recomputation (Fegaras et al., TKDE 2016).

Two of the paper's queries, each as a strata query maintained increment by increment and
as the same SQL recomputed by Spark SQL over all data so far (written to Parquet, as the
incremental answer is):

* ``groupby``: ``SELECT x, avg(y) FROM pairs GROUP BY x`` over 1M initial pairs of ints
  in 0..10,000, then nine increments of 40K pairs (the paper's largest);
* ``join_groupby``: ``SELECT R.x, sum(S.v), count(*) FROM R JOIN S ON R.k = S.k GROUP BY
  R.x`` over two 100K inputs (R keyed by ``k``), then nine increments of 10K rows each.

Per increment it records wall seconds and Spark's shuffle write bytes
(:class:`strata.physical.metrics.SparkMetrics`), and checks that the incremental answer
equals the recomputed one.

    python benchmarks/queries.py [--quick] --json PATH [--plot PATH.png]

``kmeans`` and ``pagerank`` (iteration with the diffusion scheme) are not implemented
yet; the JSON says so instead of giving numbers.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import emit, parser, save  # benchmarks/common.py (this script's folder)

ROOT = Path(__file__).resolve().parents[1]

# the paper's sizes (section 8): 1M initial pairs, increments of 10-40K tuples
FULL = {"groupby_initial": 1_000_000, "groupby_increment": 40_000, "join_initial": 100_000,
        "join_increment": 10_000, "increments": 9, "key_range": 10_000}
QUICK = {"groupby_initial": 50_000, "groupby_increment": 5_000, "join_initial": 5_000,
         "join_increment": 1_000, "increments": 3, "key_range": 1_000}
NOT_YET = {"status": "not implemented",
           "reason": "iterative queries (the diffusion scheme) are not built yet"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write(path: Path, columns: dict[str, np.ndarray]) -> str:
    pq.write_table(pa.table(columns), path)
    return str(path)


def batches(cfg: dict, seed: int = 7) -> dict[str, list[dict[str, str]]]:
    """Parquet files per increment (index 0 is the initial data), per flow."""
    rng = np.random.default_rng(seed)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-data-"))
    out: dict[str, list[dict[str, str]]] = {"groupby": [], "join_groupby": []}
    kr = cfg["key_range"]
    r_next = 0
    for e in range(cfg["increments"] + 1):
        n = cfg["groupby_initial"] if e == 0 else cfg["groupby_increment"]
        out["groupby"].append({"pairs": write(tmp / f"pairs-{e}.parquet", {
            "x": rng.integers(0, kr + 1, n), "y": rng.integers(0, kr + 1, n)})})
        n = cfg["join_initial"] if e == 0 else cfg["join_increment"]
        nr = n if e == 0 else n // 10  # R grows slower: new keys for new S rows
        r_keys = np.arange(r_next, r_next + nr)
        r_next += nr
        out["join_groupby"].append({
            "R": write(tmp / f"R-{e}.parquet", {"k": r_keys, "x": rng.integers(0, 1000, nr)}),
            "S": write(tmp / f"S-{e}.parquet", {"k": rng.integers(0, r_next, n),
                                               "v": rng.integers(0, 100, n)})})
    return out


QUERIES = {
    "groupby": ("SELECT x, avg(y) AS a FROM pairs GROUP BY x", {}),
    "join_groupby": ("SELECT R.x, sum(S.v) AS s, count(*) AS n FROM R JOIN S ON R.k = S.k "
                     "GROUP BY R.x", {"R": ["k"]}),
}
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


def same_answers(a: list[dict], b: list[dict]) -> bool:
    def norm(rows):
        return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in r.values())
                      for r in rows)
    return norm(a) == norm(b)


def summarize(result: dict) -> dict:
    out = {}
    for name in QUERIES:
        inc = [r["seconds"] for r in result["queries"][name]["incremental"][1:]]
        rec = [r["seconds"] for r in result["queries"][name]["recompute"][1:]]
        if len(inc) >= 2:
            flat = inc[-1] / inc[1]
            out[f"{name}_incremental_last_over_second"] = {
                "value": round(flat, 3), "target": "<= 1.25", "met": flat <= 1.25}
        speedup = rec[-1] / inc[-1]
        out[f"{name}_recompute_over_incremental_last"] = {
            "value": round(speedup, 2), "target": ">= 5", "met": speedup >= 5}
    return out


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(QUERIES)
    fig, axes = plt.subplots(2, len(names), figsize=(6 * len(names), 8), squeeze=False)
    for j, name in enumerate(names):
        for how in ("incremental", "recompute"):
            rows = result["queries"][name][how][1:]
            xs = range(1, len(rows) + 1)
            axes[0][j].plot(xs, [r["seconds"] for r in rows], marker="o", label=how)
            axes[1][j].plot(xs, [max(r["shuffle_bytes"], 1) for r in rows], marker="o",
                            label=how)
        axes[0][j].set_title(f"{name}: seconds per increment")
        axes[1][j].set_title(f"{name}: shuffle write bytes")
        axes[1][j].set_yscale("log")
        for ax in axes[:, j]:
            ax.set_xlabel("increment")
            ax.legend()
    fig.suptitle(f"strata incremental queries vs recomputation ({result['machine']})")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, partitions=4, master="local[2]")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    from strata.physical.metrics import SparkMetrics
    from strata.physical.session import get_spark

    cfg = QUICK if args.quick else FULL
    spark = get_spark(args.master, app_name="strata-bench-queries")
    metrics = SparkMetrics(spark)
    data = batches(cfg)
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-queries-"))
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    result: dict = {"machine": f"{os.cpu_count()} cores, {args.master}",
                    "command": " ".join(["benchmarks/queries.py", *(argv or sys.argv[1:])]),
                    "config": cfg, "queries": {}}
    try:
        for name in QUERIES:
            inc, a = run_incremental(spark, metrics, tmp / f"home-{name}", name, data[name],
                                     args.partitions)
            rec, b = run_recompute(spark, metrics, tmp, name, data[name])
            result["queries"][name] = {"incremental": inc, "recompute": rec,
                                       "answers_equal": same_answers(a, b)}
            if not result["queries"][name]["answers_equal"]:
                raise SystemExit(f"{name}: incremental and recomputed answers differ")
        result["queries"]["kmeans"] = NOT_YET
        result["queries"]["pagerank"] = NOT_YET
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
