"""Small query epochs in the driver (``EvalMode.DRIVER``): the increment and the state
tables read with pyarrow, the operators run in Arrow, the tables and changes written by
the driver. They give the same changes and answers as the Spark plan, epoch by epoch, on
every shape of the general plan, and a join-group-by's epoch runs no Spark job at all."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from strata import Dataflow
from strata.controller.controller import Controller
from strata.queries import add_query
from strata.queries.spark.evaluator import EvalMode, Evaluator
from strata.queries.spark.tables import COMPACT_FILES_PER_BUCKET
from tests.helpers import counting_jobs, epochs_in
from tests.queries.oracle import cell, duckdb_answer, normalized
from tests.queries.test_shapes import D_SCHEMA, P_SCHEMA, R_SCHEMA, SHAPES, SUMSQ, VECTORIZED
from tests.rows import Rows

# the shapes the general plan runs, and one whose keys Arrow leaves to Spark (doubles)
GENERAL = {name: sql for name, (sql, _) in SHAPES.items()
           if name not in VECTORIZED and not name.startswith("many_to_many")}
GENERAL["double_key"] = ("SELECT y / 2 AS h, count(*) AS c FROM R GROUP BY y / 2 "
                         "HAVING count(*) > 0")
# every other shape in `make test` (double_key among them), the rest in the slow tier
HALVES = [dict(list(GENERAL.items())[-1::-2]), dict(list(GENERAL.items())[-2::-2])]


def history() -> list[dict[str, list[dict]]]:
    """Three increments of R (with deletes of earlier rows), D (updates) and P."""
    out, live = [], []
    for e in range(3):
        r = [{"x": (i * 5 + e) % 6, "y": None if (i + e) % 7 == 0 else (i * 3 + e) % 10,
              "_mult": 1} for i in range(12 + e)]
        gone = live[e::3][:3]
        r += [{**g, "_mult": -1} for g in gone]
        live = [x for x in live if x not in gone] + r[:12 + e]
        d = [{"id": i, "name": f"n{(i + e) % 3}", "grp": "ab"[(i + e) % 2], "_mult": 1}
             for i in range(e, e + 3)]
        if e:  # the previous version of id e goes
            d.append({"id": e, "name": f"n{(e + e - 1) % 3}", "grp": "ab"[(2 * e - 1) % 2],
                      "_mult": -1})
        out.append({"R": r, "D": d, "P": [{"x": i % 4, "y": i} for i in range(e + 3)]})
    return out


def netted(changes: list[dict]) -> Rows:
    """A changelog's net effect: each row's multiplicities summed (a row retracted and
    inserted again in one epoch is no change), rows netting to 0 dropped; each row with
    its multiplicity last."""
    bag: Counter = Counter()
    for r in changes:
        bag[tuple(cell(v) for k, v in r.items() if k != "_mult")] += r["_mult"]
    return Rows((*row, n) for row, n in bag.items() if n)


def run(spark, home, where: str, shapes: dict[str, str], increments: int) -> dict[str, list]:
    df = Dataflow("driver_epochs")
    df.source("R", R_SCHEMA)
    df.source("D", D_SCHEMA)
    df.source("P", P_SCHEMA)
    for name, sql in shapes.items():
        add_query(df, name, sql, keys={"D": ["id"]}, aggregates={"sumsq": SUMSQ})
    seen: dict[str, list[dict]] = defaultdict(list)
    got: dict[str, list] = defaultdict(list)
    with epochs_in(spark, where), Controller(str(home), df, spark=spark,
                                                     num_partitions=2) as c:
        for e, inc in enumerate(history()[:increments], 1):
            for flow, recs in inc.items():
                c.ingest(flow, recs)
                seen[flow] += recs
            c.run()
            for name, sql in shapes.items():
                changes = c.read_flow(f"{name}_changes", e).to_pylist()
                answer = normalized(tuple(r.values()) for r in c.answer(name).to_pylist())
                if name in ("double_key", "user_aggregate"):
                    want = None  # DuckDB divides and names aggregates differently
                else:
                    want = duckdb_answer(sql, seen)
                assert want is None or answer == want, (where, name, e)
                got[name].append((netted(changes), answer))
    return got


# `make test`: half the shapes over two increments (the second deletes and updates rows of
# the first); the slow tier: the other half over all three
@pytest.mark.parametrize(("half", "increments"),
                         [(0, 2), pytest.param(1, 3, marks=pytest.mark.slow)])
def test_driver_epochs_give_the_spark_plans_changes(spark, tmp_path, monkeypatch, half,
                                                    increments):
    shapes = HALVES[half]
    modes: dict[str, list] = defaultdict(list)
    real = Evaluator.__init__

    def recorded(self, program, *args, **kwargs):
        real(self, program, *args, **kwargs)
        modes[program.output].append(self.mode)
    monkeypatch.setattr(Evaluator, "__init__", recorded)
    driver = run(spark, tmp_path / "driver", "driver", shapes, increments)
    taken = dict(modes)
    modes.clear()
    plan = run(spark, tmp_path / "spark", "driver-spark", shapes, increments)
    assert driver == plan  # net changes and answers, epoch by epoch
    assert all(m is EvalMode.EPOCH for ms in modes.values() for m in ms)
    assert taken and all(m == [EvalMode.DRIVER] * increments for m in taken.values()), taken


def test_a_join_group_by_epoch_runs_no_spark_job(spark, tmp_path):
    """After the first epoch (whose tables Spark writes) each epoch of the benchmark's
    join-group-by runs in the driver without one Spark job, compacting its join inputs
    in Arrow when they have many files (R's, a lookup table: S's keeps only unmatched
    rows, none here); the answer equals Spark SQL's over all rows."""
    df = Dataflow("jg")
    df.source("R", "k bigint, x bigint")
    df.source("S", "k bigint, v bigint")
    sql = ("SELECT R.x, sum(S.v) AS s, count(*) AS n FROM R JOIN S ON R.k = S.k "
           "GROUP BY R.x")
    add_query(df, "q", sql, keys={"R": ["k"]})
    r_all: list[dict] = []
    s_all: list[dict] = []
    jobs: list[int] = []
    files: list[int] = []
    epochs = COMPACT_FILES_PER_BUCKET + 3
    with epochs_in(spark, "driver"), Controller(str(tmp_path), df, spark=spark,
                                                       num_partitions=1) as c:
        for e in range(epochs):
            r = [{"k": 10 * e + i, "x": (i * 7 + e) % 4} for i in range(10)]
            s = [{"k": (13 * i + e) % (10 * e + 10), "v": i - 5} for i in range(25)]
            r_all += r
            s_all += s
            c.ingest("R", r)
            c.ingest("S", s)
            with counting_jobs(spark) as count:
                c.run()
            jobs += count
            tables = c.runner.committed("q").state["tables"]
            files.append(len(tables["join0_left"]["files"]))
            # R is the join's lookup table (insert-only, keyed): S's table keeps only rows
            # without a match, and every S row has its R row
            assert not [r for r in c.state_records("q") if r["_table"] == "join0_right"]
        answer = normalized(tuple(r.values()) for r in c.answer("q").to_pylist())
    assert jobs[1:] == [0] * (epochs - 1), jobs
    spark.createDataFrame(r_all, "k bigint, x bigint").createOrReplaceTempView("R")
    spark.createDataFrame(s_all, "k bigint, v bigint").createOrReplaceTempView("S")
    assert answer == normalized(tuple(r) for r in spark.sql(sql).collect())
    assert duckdb_answer(sql, {"R": r_all, "S": s_all},
                         {"R": ["k", "x"], "S": ["k", "v"]}) == answer
    # R's join input (the lookup table) grew a file per epoch until it was compacted
    k = COMPACT_FILES_PER_BUCKET
    assert files[:k + 2] == [*range(1, k + 1), 1, 2], files


@pytest.mark.parametrize("where", ["driver", "tasks"])
def test_a_deleted_join_row_leaves_the_answer(spark, tmp_path, where):
    """Deletes on both sides of a join retract the pairs they made, in the driver's epoch
    as in Spark's."""
    df = Dataflow("del")
    df.source("R", R_SCHEMA)
    df.source("D", D_SCHEMA)
    add_query(df, "q", SHAPES["join_group_by"][0], keys={"D": ["id"]})
    r = [{"x": i % 3, "y": i, "_mult": 1} for i in range(9)]
    d = [{"id": i, "name": f"n{i}", "grp": "ab"[i % 2], "_mult": 1} for i in range(3)]
    with epochs_in(spark, where), Controller(str(tmp_path), df, spark=spark,
                                                     num_partitions=2) as c:
        c.ingest("R", r)
        c.ingest("D", d)
        c.run()
        c.ingest("R", [{**r[0], "_mult": -1}, {**r[4], "_mult": -1}])
        c.ingest("D", [{**d[1], "_mult": -1}])
        c.run()
        got = normalized(tuple(x.values()) for x in c.answer("q").to_pylist())
    rows = [x for x in r if x not in (r[0], r[4])]
    want = duckdb_answer(SHAPES["join_group_by"][0], {"R": rows, "D": [d[0], d[2]], "P": []})
    assert got == want


def test_a_small_epoch_on_sparks_plans_writes_from_one_action(spark, tmp_path):
    """With the epochs on Spark's plans (driver epochs off) but small, a join-group-by's
    state tables and changes come to the driver from one Spark action: every job of an
    epoch after the first is that action's (the call site of ``collect_together``); the
    answer equals DuckDB's."""
    df = Dataflow("one_action")
    df.source("R", R_SCHEMA)
    df.source("D", D_SCHEMA)
    sql = "SELECT D.grp, sum(R.y) AS s, count(*) AS c FROM R JOIN D ON R.x = D.id GROUP BY D.grp"
    add_query(df, "q", sql, keys={"D": ["id"]})
    sc, tracker = spark.sparkContext, spark.sparkContext.statusTracker()
    seen: dict[str, list[dict]] = defaultdict(list)
    sites = []
    with epochs_in(spark, "tasks"), Controller(str(tmp_path), df, spark=spark,
                                               num_partitions=2) as c:
        for e, inc in enumerate(history()):
            for flow in ("R", "D"):
                c.ingest(flow, inc[flow])
                seen[flow] += inc[flow]
            sc.setJobGroup(f"one-action-{e}", "epoch")
            try:
                c.run()
            finally:
                sc.setJobGroup("", "")
            jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(f"one-action-{e}")]
            sites.append({tracker.getStageInfo(s).name.split(" at ")[1].split(":")[0]
                          for j in jobs if j for s in j.stageIds if tracker.getStageInfo(s)})
        answer = normalized(tuple(r.values()) for r in c.answer("q").to_pylist())
    assert answer == duckdb_answer(sql, seen)
    assert all(s and {p.rsplit("/", 1)[-1] for p in s} == {"frames.py"} for s in sites[1:]), sites
