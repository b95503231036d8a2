"""Benchmark: a group-by on the general plan writes by the change as its state grows.

A group-by query that the vectorized route does not take (``HAVING``) keeps a row per
group in a bucketed table; each epoch on Spark's plans appends only the groups its
increment touches, as new versions, and the table is written whole only when it has
twice the rows of its last whole write (docs/architecture.md, "Group state by the
change"). Increments of ``--rows`` records, half of them of new keys, half updating keys
seen before, with every driver path off: per epoch the seconds, whether it wrote the
table whole, the rows it wrote to the table against the groups it touched, and Spark
SQL recomputing the same answer over all data so far (a job reading every increment).
The strata answer equals Spark SQL's after the last increment.

    python benchmarks/group_state.py --json benchmarks/results/group_state.json \
        --plot benchmarks/results/group_state.png
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import emit, parser, save, target_figure

FULL = {"rows": 1_000_000, "increments": 8}
QUICK = {"rows": 50_000, "increments": 4}
SQL = "SELECT k, count(*) AS n, sum(v) AS s FROM events GROUP BY k HAVING count(*) > 1"
DRIVER_OFF = {"spark.strata.driverEpoch.maxRows": "-1", "spark.strata.query.driverRows": "0",
              "spark.strata.query.driverTableRows": "0", "spark.strata.arrow": "false"}


def increment(rng: np.random.Generator, i: int, rows: int) -> pa.Table:
    """Increment ``i`` (from 0): half its records of keys new in it, half of keys of
    earlier increments (all new in the first)."""
    fresh = rng.integers(i * rows, (i + 1) * rows, rows)
    old = rng.integers(0, max(i * rows, 1), rows)
    keys = np.where(rng.random(rows) < 0.5, fresh, old) if i else fresh
    return pa.table({"k": keys.astype(np.int64), "v": rng.integers(0, 100, rows)})


def group_table(home: Path) -> dict:
    from strata.storage.home import Home
    from strata.storage.manifest import StateDir

    tables = StateDir(Home(str(home)).stage("q")).current().state["tables"]
    return next(t for t in tables.values() if t["lineage"] == ["_g"])


def run(cfg: dict, tmp: Path, partitions: int, master: str | None, seed: int) -> dict:
    from strata import Dataflow
    from strata.controller.controller import Controller
    from strata.physical.session import get_spark
    from strata.queries import add_query

    spark = get_spark(master or "local[2]", app_name="group-state")
    for k, v in DRIVER_OFF.items():
        spark.conf.set(k, v)
    df = Dataflow("group_state")
    df.source("events", "k bigint, v bigint")
    add_query(df, "q", SQL)
    rng = np.random.default_rng(seed)
    files, epochs = [], []
    with Controller(str(tmp / "home"), df, spark=spark, num_partitions=partitions) as c:
        for i in range(cfg["increments"]):
            table = increment(rng, i, cfg["rows"])
            files.append(str(tmp / f"events-{i}.parquet"))
            pq.write_table(table, files[-1])
            c.ingest_new("events", [files[-1]])
            before = set(group_table(tmp / "home")["files"]) if i else set()
            t0 = time.perf_counter()
            c.run()
            seconds = time.perf_counter() - t0
            entry = group_table(tmp / "home")
            new = [f for f in entry["files"] if f not in before]
            t0 = time.perf_counter()
            spark.read.parquet(*files).createOrReplaceTempView("events")
            recomputed = spark.sql(SQL).toArrow()
            epochs.append({
                "seconds": round(seconds, 3), "whole": not entry.get("versions"),
                "rows_written": sum(pq.read_metadata(f).num_rows for f in new),
                "groups_touched": len(set(table.column("k").to_pylist())),
                "rows_stored": sum(pq.read_metadata(f).num_rows for f in entry["files"]),
                "recompute_seconds": round(time.perf_counter() - t0, 3)})
            print(f"increment {i + 1}: {epochs[-1]}", file=sys.stderr, flush=True)
        got = sorted(tuple(r.values()) for r in c.answer("q").to_pylist())
    want = sorted(tuple(r.values()) for r in recomputed.to_pylist())
    spark.stop()
    return {"params": {**cfg, "partitions": partitions, "sql": SQL,
                       "driver_off_confs": DRIVER_OFF}, "epochs": epochs,
            "answers_match": got == want}


def summarize(result: dict) -> dict:
    later = result["epochs"][1:]  # the first writes the table whole, as any first epoch
    versioned = [e for e in later if not e["whole"]]
    third = max(1, len(versioned) // 3)
    first = statistics.median(e["seconds"] for e in versioned[:third]) if versioned else None
    last = statistics.median(e["seconds"] for e in versioned[-third:]) if versioned else None
    growth = round(last / first, 3) if first and last else None
    written = max((e["rows_written"] / e["groups_touched"] for e in versioned), default=None)
    stored = [e["rows_stored"] for e in later]
    last_epoch = result["epochs"][-1]
    return {
        "versioned_epoch_growth": target_figure(
            growth, "<=", 1.25, state_growth=round(stored[-1] / stored[0], 2) if stored
            else None),
        "rows_written_over_groups_touched": target_figure(
            None if written is None else round(written, 4), "<=", 1.0),
        "whole_writes_after_the_first": sum(e["whole"] for e in later),
        "mean_epoch_seconds": round(statistics.mean(e["seconds"] for e in later), 3)
        if later else None,
        "recompute_over_epoch_last": round(
            last_epoch["recompute_seconds"] / last_epoch["seconds"], 3),
        "answers_match": {"value": result["answers_match"], "target": True,
                          "met": result["answers_match"]},
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = result["epochs"]
    x = range(1, len(epochs) + 1)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, [e["seconds"] for e in epochs], "o-", label="strata epoch")
    ax.plot([i for i, e in zip(x, epochs, strict=True) if e["whole"]],
            [e["seconds"] for e in epochs if e["whole"]], "s", ms=10, mfc="none",
            label="table written whole")
    ax.plot(x, [e["recompute_seconds"] for e in epochs], "^--", label="Spark SQL recomputation")
    ax.set(xlabel="increment", ylabel="seconds", title="general group-by as its state grows")
    ax.legend()
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, seed=1).parse_args(argv)
    cfg = QUICK if args.quick else FULL
    tmp = Path(tempfile.mkdtemp(prefix="strata-bench-group-state-"))
    try:
        result = run(cfg, tmp, args.partitions, args.master, args.seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["summary"] = summarize(result)
    emit(result, args.json, args.plot, plot)
    return 0 if result["answers_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
