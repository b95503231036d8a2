"""Benchmark: a cold ``strata run`` from the shell, against what Spark's own start costs.

A daily job started by cron pays, every run, for a fresh Python process, a fresh Spark
driver JVM and the first Spark jobs of that JVM. Each of these is measured in a process
of its own, by wall time from outside:

* ``spark_start``: strata's ``get_spark("local[2]")`` and one ``range(10).count()``, what
  any PySpark job started from the shell pays before its own work;
* ``run_nothing_to_do``: ``strata run`` over a home with nothing queued (it starts no
  Spark session);
* ``run_one_segment``: ``strata run`` with one daily segment of ``benchmarks/series.py``'s
  click log queued (ingested by reference) for the paper's three series; every sample
  starts from a copy of the same home;

and ``warm_epoch``: the same epoch in this process, on a session that has run it before.
Spark's start and the one-segment run are measured with the driver's class-data-sharing
archive (``strata.physical.class_archive``) and without it (``STRATA_CLASS_ARCHIVE=off``),
in turn (A B A B …), so that a drift in the machine's speed falls on both. The cold
runs' answers are checked against DuckDB over the segment (``answers_match``).

    python benchmarks/cold_run.py [--quick] [--json PATH] [--plot PATH.png]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import series as ser
from common import emit, save, target_figure
from scale_support import PIPELINE, answers_of, cli_seconds, python_seconds

ROOT = Path(__file__).resolve().parents[1]
FULL = {"rows": 200_000, "rounds": 5}
QUICK = {"rows": 20_000, "rounds": 1}
TARGETS = {  # (comparison, bound)
    "nothing_to_do_over_spark_start": ("<=", 0.3),
    "one_segment_over_spark_start_plus_warm_epoch": ("<=", 1.25),
    "class_archive_speedup_spark_start": (">=", 1.2),
    "class_archive_speedup_one_segment": (">=", 1.1),
}
SPARK_START = ("from strata.physical.session import get_spark; "
               "s = get_spark('local[2]'); s.range(10).count(); s.stop()")
ARCHIVE = {"with_archive": {"STRATA_CLASS_ARCHIVE": "auto"},
           "without_archive": {"STRATA_CLASS_ARCHIVE": "off"}}


def log(msg: str) -> None:
    print(f"[cold_run] {msg}", file=sys.stderr, flush=True)


def template(work: Path, rows: int) -> tuple[Path, list[str], list[str]]:
    """A home with one segment queued (and the ``strata run`` arguments over it)."""
    cfg = {**ser.QUICK, "days": 1, "rows": rows}
    files = ser.segments(cfg, work, 1, formats=("parquet",))["parquet"]
    (work / "pipeline.py").write_text(PIPELINE.format(series=dict(ser.SERIES), ddl=ser.DDL))
    home = work / "home"
    run = ["run", f"{work / 'pipeline.py'}:dataflow", "--home", str(home), "--master",
           "local[2]", "--partitions", "2", "--json"]
    cli_seconds(run, {})  # creates the home
    cli_seconds(["ingest", "log", "--home", str(home), "--by-reference", files[0]], {})
    shutil.copytree(home, work / "template")
    return home, run, files


def fresh(home: Path) -> None:
    """The home as it was with the segment queued."""
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(home.parent / "template", home)


def cold_samples(home: Path, run: list[str], rounds: int) -> dict:
    out: dict = {"spark_start": {k: [] for k in ARCHIVE},
                 "run_one_segment": {k: [] for k in ARCHIVE}, "run_nothing_to_do": []}
    for r in range(rounds):
        for name, env in ARCHIVE.items():
            out["spark_start"][name].append(python_seconds(["-c", SPARK_START], env))
            fresh(home)
            out["run_one_segment"][name].append(cli_seconds(run, {}, env))
            log(f"round {r + 1} {name}: spark start {out['spark_start'][name][-1]} s, "
                f"run one segment {out['run_one_segment'][name][-1]} s")
        out["run_nothing_to_do"].append(cli_seconds(run, {}, ARCHIVE["with_archive"]))
    return out


def warm_epoch(home: Path) -> float:
    """Seconds of the one-segment epoch in this process, the second time it runs."""
    from strata.controller import Controller
    from strata.physical.session import get_spark
    from strata.pipeline import load_dataflow

    spark = get_spark("local[2]", app_name="strata-bench-cold-run")
    dataflow = load_dataflow(f"{home.parent / 'pipeline.py'}:dataflow")
    seconds = []
    for _ in range(2):
        fresh(home)
        with Controller(str(home), dataflow, spark=spark, num_partitions=2) as c:
            t0 = time.perf_counter()
            c.run()
            seconds.append(time.perf_counter() - t0)
    return round(seconds[-1], 3)


def entry(name: str, value: float) -> dict:
    return target_figure(round(value, 3), *TARGETS[name])


def summarize(cold: dict, warm: float, match: bool) -> dict:
    med = statistics.median
    start = cold["spark_start"]
    one = cold["run_one_segment"]

    def paired(xs: dict) -> float:  # per round, without over with the archive
        return med(b / a for a, b in zip(xs["with_archive"], xs["without_archive"],
                                          strict=True))

    return {
        "nothing_to_do_over_spark_start": entry(
            "nothing_to_do_over_spark_start",
            med(cold["run_nothing_to_do"]) / med(start["with_archive"])),
        "one_segment_over_spark_start_plus_warm_epoch": entry(
            "one_segment_over_spark_start_plus_warm_epoch",
            med(one["with_archive"]) / (med(start["with_archive"]) + warm)),
        "class_archive_speedup_spark_start": entry("class_archive_speedup_spark_start",
                                                   paired(start)),
        "class_archive_speedup_one_segment": entry("class_archive_speedup_one_segment",
                                                   paired(one)),
        "answers_match": {"value": match, "target": True, "met": match},
        "median_seconds": {
            "spark_start": {k: med(v) for k, v in start.items()},
            "run_one_segment": {k: med(v) for k, v in one.items()},
            "run_nothing_to_do": med(cold["run_nothing_to_do"]), "warm_epoch": warm},
    }


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = result["summary"]["median_seconds"]
    bars = {"Spark start\n(archive)": m["spark_start"]["with_archive"],
            "Spark start\n(no archive)": m["spark_start"]["without_archive"],
            "strata run,\none segment\n(archive)": m["run_one_segment"]["with_archive"],
            "strata run,\none segment\n(no archive)": m["run_one_segment"]["without_archive"],
            "strata run,\nnothing to do": m["run_nothing_to_do"],
            "the epoch in a\nwarm process": m["warm_epoch"]}
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.bar(list(bars), list(bars.values()), color=["C0", "C7", "C0", "C7", "C2", "C1"])
    ax.set(ylabel="median wall seconds", title=f"a cold run from the shell "
           f"({result['params']['rows']:,}-row segment, {result['params']['rounds']} rounds)")
    save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round, a small segment")
    ap.add_argument("--json", metavar="PATH", help="write the results here (default "
                    "without --quick: benchmarks/results/cold_run.json)")
    ap.add_argument("--plot", metavar="PATH.png", help="draw the figure here")
    args = ap.parse_args(argv)
    if args.json is None and not args.quick:
        args.json = str(ROOT / "benchmarks" / "results" / "cold_run.json")
        args.plot = args.plot or str(Path(args.json).with_suffix(".png"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, str(ROOT / "src"))
    params = QUICK if args.quick else FULL
    work = Path(tempfile.mkdtemp(prefix="strata-bench-cold-"))
    try:
        home, run, files = template(work, params["rows"])
        log(f"{params['rounds']} rounds over a {params['rows']:,}-row segment")
        cold = cold_samples(home, run, params["rounds"])
        from strata.physical.session import get_spark

        answers = answers_of(work, get_spark("local[2]"))
        match = bool(answers.get("q1")) and ser.check_answers(files, answers)
        warm = warm_epoch(home)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"params": params, "samples": cold, "warm_epoch_seconds": warm,
              "summary": summarize(cold, warm, match)}
    if args.json:
        emit(result, args.json, args.plot, plot)
    else:
        import json

        print(json.dumps(result, indent=1))
    for name, e in result["summary"].items():
        if "met" in e:
            log(f"[{'ok ' if e['met'] else 'MISS'}] {name} {e['value']} (target {e['target']})")
    return 0 if result["summary"]["answers_match"]["value"] else 1


if __name__ == "__main__":
    sys.exit(main())
