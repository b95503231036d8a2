"""The cost model's scan-sharing choice against measurement (the paper's Figures 13-14).

At each point of a sweep over the selectivity of a filter and the number of branches
(series whose per-segment partial views read the same new segment), the series stage
runs twice over the same segments: every view by its own plan (``separate``), and all of
them in one jumbo pass (``shared``: one scan, one exchange). Each branch groups the
filtered click log on its own keys and answers over the segment before the newest, so
that every epoch computes and stores the new segment's views (the plans differ there)
and answers from yesterday's stored views (alike in both); Spark's metrics of the epoch
are the plan's I/O.

From the second segment on the stage has statistics of views and answers, and its cost
model estimates the epoch under both plans (``epoch_estimates`` in its metrics), each
part scaled by the ratio of the bytes Spark measured to the bytes it estimated in the
epochs before (κ, learned from the third segment on). Per
point: the choice (the cheaper estimate of the stage running without sharing, its
default), the cheaper measured plan (a tie within ``TIE`` of each other agrees with
either), the regret of the choice against not sharing, and the relative error of the
chosen plan's estimate as the stage running that plan makes it. Used by
``benchmarks/series.py``.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pyarrow.parquet as pq

KEYS = [list(c) for r in (1, 2, 3) for c in itertools.combinations("ABCDE", r)]
TIE = 0.02  # plans measured within 2% of each other: either choice agrees
FULL = {"selectivities": [0.01, 0.1, 0.5, 0.9], "branches": [1, 2, 4, 8, 16],
        "segments": 5, "rows": 200_000}
QUICK = {"selectivities": [0.1], "branches": [2], "segments": 4, "rows": 20_000}


def branch_series(branches: int, selectivity: float) -> list:
    """``branches`` series grouping the clicks whose user passes the filter (D is
    uniform: ``D % 100 < p`` keeps p%) on their own keys."""
    from strata.series import Series

    cut = max(1, round(selectivity * 100))
    out = []
    for i, keys in enumerate(KEYS[:branches]):
        cols = ", ".join(keys)
        sql = (f"SELECT {cols}, count(*) AS n, sum(E) AS s FROM log WHERE D % 100 < {cut} "
               f"GROUP BY {cols}")
        out.append(Series(f"b{i}", sql, {"log": "log[-1]"}))
    return out


def run_point(spark, metrics, files: list[str], home: Path, branches: int,
              selectivity: float, shared: bool, partitions: int) -> list[dict]:
    """The epochs of one plan at one point: measured I/O and the cost model's estimates."""
    from strata import Dataflow
    from strata.config import HELD_SEGMENT_ROWS
    from strata.controller import Controller
    from strata.series import add_series
    HELD_ROWS = HELD_SEGMENT_ROWS.name

    df = Dataflow("sweep")
    df.source("log", "A string, B bigint, C bigint, D bigint, E bigint")
    add_series(df, "log", branch_series(branches, selectivity), shared_scan=shared)
    epochs = []
    # the sweep compares Spark's scan plans: no segment is taken from the driver's memory
    # (strata.series.held), as for one ingested by reference or by another process
    spark.conf.set(HELD_ROWS, "-1")
    with Controller(str(home), df, spark=spark, num_partitions=partitions) as c:
        for n, path in enumerate(files, 1):
            c.ingest("log", [path])
            t0 = time.perf_counter()
            with metrics.measure(f"sweep-{branches}-{selectivity}-{shared}-{n}") as m:
                [report] = c.run()
            written = m.output_bytes + report.metrics["driver_bytes_written"]
            epochs.append({"segment": n, "seconds": round(time.perf_counter() - t0, 3),
                           "read": m.input_bytes, "shuffled": m.shuffle_write_bytes,
                           "written": written,
                           "io": m.input_bytes + m.shuffle_write_bytes + written,
                           "jumbo": report.metrics["views_in_jumbo_pass"],
                           "estimates": report.metrics["epoch_estimates"]})
    spark.conf.unset(HELD_ROWS)
    return epochs


def sweep(spark, metrics, files: list[str], tmp: Path, cfg: dict, partitions: int,
          log) -> dict:
    """Every point of the sweep, and the summary figures over them."""
    points = []
    # the stage estimates from the second segment on, and scales its formulas by what it
    # measured from the third (κ); the fourth segment is the first it has seen it all for
    measured_from = 4
    for selectivity, branches in itertools.product(cfg["selectivities"], cfg["branches"]):
        log(f"sweep: selectivity {selectivity}, {branches} branch(es)")
        runs = {plan: run_point(spark, metrics, files, tmp / f"sw-{branches}-{selectivity}-"
                                f"{plan}", branches, selectivity, plan == "shared",
                                partitions)
                for plan in ("separate", "shared")}
        measured = {p: sum(e["io"] for e in runs[p][measured_from - 1:]) for p in runs}

        # the choice as the stage makes it without sharing; each plan's estimate as the
        # stage running that plan makes it (κ learned from its own measurements)
        has_estimates = all(e["estimates"] for e in runs["separate"][measured_from - 1:])
        ahead = _estimated(runs["separate"][measured_from - 1:])
        choice = "shared" if has_estimates and ahead["shared"] < ahead["separate"] \
            else "separate"
        estimated = {p: _estimated(runs[p][measured_from - 1:])[p] for p in runs}
        cheaper = min(measured, key=measured.__getitem__)
        tie = abs(measured["shared"] - measured["separate"]) <= TIE * min(measured.values())
        error = {p: abs(estimated[p] - measured[p]) / measured[p] if has_estimates else None
                 for p in runs}
        points.append({
            "selectivity": selectivity, "branches": branches, "choice": choice,
            "cheaper_measured": "tie" if tie else cheaper,
            "agrees": tie or choice == cheaper,
            "regret_vs_not_sharing": round(measured[choice] / measured["separate"] - 1, 4),
            "measured_io": measured, "estimated_io": estimated,
            "estimated_io_without_sharing": ahead,
            "relative_error": {p: None if e is None else round(e, 4) for p, e in error.items()},
            "runs": runs})
    errors = [p["relative_error"][p["choice"]] for p in points
              if p["relative_error"][p["choice"]] is not None]
    return {
        "config": cfg, "tie": TIE, "measured_from_segment": measured_from,
        "points": points,
        "choice_agreement": round(sum(p["agrees"] for p in points) / len(points), 3),
        "worst_regret": max(p["regret_vs_not_sharing"] for p in points),
        "max_relative_error": round(max(errors), 4) if errors else None,
        "max_relative_error_any_plan": round(max(
            e for p in points for e in p["relative_error"].values() if e is not None), 4),
    }


def _estimated(epochs: list[dict]) -> dict[str, float]:
    """Both plans' estimated I/O summed over ``epochs`` of one run."""
    return {p: sum(e["estimates"].get(p, {}).get("io", 0) for e in epochs)
            for p in ("separate", "shared")}


def sweep_segments(all_files: list[str], cfg: dict, tmp: Path) -> list[str]:
    """The first segments of the click log, cut to the sweep's row count."""
    out = []
    for i, path in enumerate(all_files[: cfg["segments"]]):
        target = tmp / f"sweep-{i + 1}.parquet"
        pq.write_table(pq.read_table(path).slice(0, cfg["rows"]), target)
        out.append(str(target))
    return out
