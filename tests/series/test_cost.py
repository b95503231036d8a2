"""The cost model keeps views where windows overlap and reads the raw window where they
do not, from statistics of earlier segments; a series runs under either plan with the
same answers."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest

from strata.cli.series_explain import scan_lines
from strata.controller import Controller
from strata.queries.front.sql import parse_sql
from strata.queries.spark.bucketed import bucket_of, read_bucketed, write_bucketed
from strata.queries.spark.frames import ddl_of
from strata.series import Series, series_stage_name
from strata.series.cost import (
    Estimate,
    choose,
    epoch_estimates,
    learned,
    measured,
    scan_plan,
    scan_sharing,
    through_spark,
    view_columns,
    view_fields,
)
from strata.series.evaluate import (
    group_plan,
    jumbo_branch,
    jumbo_partials,
    merge_partials,
    prefix_group,
    prefix_partials,
    reorder_group,
    reordered_partials,
    view_of_segment,
)
from strata.series.normalize import plan_series
from strata.series.stored import branch_buckets, branch_entries, branch_rows
from strata.series.windows import Schedule, Segments
from tests.series.clicklog import COLUMNS, canon, dataflow, duckdb_answer, segment

SQL = "SELECT A, B, count(*) AS n FROM log WHERE E > 2.0 GROUP BY A, B"


def _plan(spec, period):
    return plan_series(parse_sql(SQL, {"log": COLUMNS}),
                       Schedule({"log": Segments.parse(spec)}, period), COLUMNS)


def test_views_read_the_columns_of_their_filters_keys_and_aggregates():
    [view] = _plan("log", 1).view_list()
    assert view_columns(view) == {"A", "B", "E"}


# With shuffles of one byte per view byte either way (α = β = 1):
@pytest.mark.parametrize(("spec", "period", "view_bytes", "expected"), [
    ("log[-6:0]", 7, 500.0, "raw"),    # tumbling week: views written and read back for nothing
    ("log[-6:0]", 1, 500.0, "views"),  # sliding week: each segment aggregated once, not 7 times
    ("log[-6:0]", 1, 20_000.0, "raw"),  # ... unless a view outweighs six scans of its columns
    ("log", 1, 500.0, "views"),        # a daily series' view is never written: both cost alike
])
def test_choices(spec, period, view_bytes, expected):
    plan = _plan(spec, period)
    [view] = plan.view_list()
    columns = {"A": 300.0, "B": 600.0, "E": 900.0, "C": 10_000.0}
    got, estimates = choose(plan, columns, {view.fingerprint: view_bytes}, 1.0, 1.0)
    assert got == expected, estimates
    assert estimates[got]["io"] <= min(e["io"] for e in estimates.values())
    # the tumbling week by the formulas: views 7·(1,800 + 500) + 7·500 + 6·500, raw 7·2,300
    if (spec, period, view_bytes) == ("log[-6:0]", 7, 500.0):
        assert (estimates["views"]["io"], estimates["raw"]["io"]) == (22_600, 16_100)


def _views(*sqls):
    return [_plan_of(sql).view_list()[0] for sql in sqls]


def _plan_of(sql):
    return plan_series(parse_sql(sql, {"log": COLUMNS}),
                       Schedule({"log": Segments.parse("log[-1:0]")}, 1), COLUMNS)


def test_a_shared_scan_pays_when_it_saves_more_scan_than_it_widens_the_shuffle():
    a, b = _views("SELECT A, count(*) AS n FROM log WHERE E > 2.0 GROUP BY A",
                  "SELECT A, sum(B) AS s FROM log WHERE E > 2.0 GROUP BY A")
    assert (view_fields(a), view_fields(b)) == (3, 4)  # key, parts, row count
    columns = {"A": 3_000.0, "B": 6_000.0, "E": 9_000.0}
    shared, est = scan_sharing([a, b], columns, {a.fingerprint: 100.0, b.fingerprint: 100.0},
                               alpha=1.0)
    # separate reads A,E and A,B,E; shared reads A,B,E once, and the other view's NULL
    # fields widen its rows by ν·5/3 and ν·4/4, ν = 0.05 (its views are co-located too)
    assert est["separate"] == {"read": 30_000, "shuffled": 200, "written": 200,
                               "io": 30_400}
    assert est["shared"] == {"read": 18_000, "shuffled": 213, "written": 200, "io": 18_413}
    assert shared == "shared" and set(est) == {"separate", "shared"}  # no key group given
    big = {a.fingerprint: 200_000.0, b.fingerprint: 200_000.0}  # widening > scans saved
    shared, est = scan_sharing([a, b], columns, big, alpha=1.0)
    assert shared == "separate" and est["shared"]["io"] > est["separate"]["io"]
    assert scan_sharing([a, b], columns, {a.fingerprint: 1.0}) == ("separate", {})  # no stats
    assert scan_sharing([a], columns, {a.fingerprint: 1.0}) == ("separate", {})


def test_views_sharing_a_group_key_are_grouped_with_the_keys_they_all_share():
    a, b, c, d = _views("SELECT A, B, C, count(*) AS n FROM log GROUP BY A, B, C",
                        "SELECT B, A, sum(E) AS s FROM log WHERE E > 2.0 GROUP BY B, A",
                        "SELECT D, count(*) AS n FROM log GROUP BY D",
                        "SELECT upper(A) AS u, B, min(E) AS lo FROM log GROUP BY upper(A), B")
    assert prefix_group([a, b, c, d]) == ([0, 1, 3], ["`B`"])  # B: the most shared key
    assert prefix_group([a, b, c]) == ([0, 1], ["`A`", "`B`"])  # in the first view's order
    assert prefix_group([c, d]) == ([], [])
    assert prefix_group([a, d])[1] == ["`B`"]  # upper(A) is not A


def test_a_prefix_exchange_pays_for_rows_once_instead_of_each_views_partial_groups():
    a, b, c = _views("SELECT C, D, count(*) AS n FROM log GROUP BY C, D",
                     "SELECT D, C, A, sum(E) AS s FROM log GROUP BY D, C, A",
                     "SELECT A, count(*) AS n FROM log GROUP BY A")
    columns = {"A": 1_000.0, "B": 1_000.0, "C": 10_000.0, "D": 10_000.0, "E": 10_000.0}
    # a and b have nearly a group per row: their views are as big as their columns
    sizes = {a.fingerprint: 20_000.0, b.fingerprint: 20_000.0, c.fingerprint: 10.0}
    group, keys = prefix_group([a, b, c])
    assert (group, keys) == ([0, 1], ["`C`", "`D`"])
    plan, est = scan_sharing([a, b, c], columns, sizes, alpha=1.0, group=group,
                             shared=keys, delta=0.5)
    # c stays separate (reads A: 1,000, shuffles α·10); a and b read C, D, A, E once
    # (31,000) and exchange those rows at δ = 0.5 per byte, and nothing more
    assert est["prefix"] == {"read": 32_000, "shuffled": 15_510, "written": 40_010,
                             "io": 87_520}
    assert est["separate"] == {"read": 52_000, "shuffled": 40_010, "written": 40_010,
                               "io": 132_020}
    assert plan == "prefix" and est["shared"]["io"] > est["prefix"]["io"]  # wide rows
    plan, est = scan_sharing([a, b, c], columns, sizes, alpha=1.0, group=group,
                             shared=keys, delta=2.0)  # rows cost twice a view's α
    assert plan != "prefix" and est["prefix"]["io"] > est["separate"]["io"]
    small = {**sizes, a.fingerprint: 1_000.0, b.fingerprint: 1_000.0}  # few groups
    assert scan_sharing([a, b, c], columns, small, alpha=1.0, group=group, shared=keys,
                        delta=0.5)[0] == "shared"


@pytest.mark.parametrize("sqls, shared, hashed, not_hashed", [
    (("SELECT A, B, C, count(*) AS n FROM log WHERE E > 2.0 GROUP BY A, B, C",
      "SELECT B, A, sum(E) AS s, max(D) AS m FROM log GROUP BY B, A"), ["`A`", "`B`"],
     "hashpartitioning(A", "hashpartitioning(B"),
    # a shared key that is an expression is computed once, below the exchange
    (("SELECT upper(A) AS u, count(*) AS n FROM log WHERE B > 1 GROUP BY upper(A)",
      "SELECT C, upper(A) AS u, min(E) AS lo FROM log GROUP BY C, upper(A)"),
     ["UPPER(`A`)"], "hashpartitioning(_s0", "hashpartitioning(C"),
])
def test_a_prefix_pass_is_one_scan_and_one_exchange(spark, tmp_path, sqls, shared, hashed,
                                                    not_hashed):
    views = _views(*sqls)
    group, keys = prefix_group(views)
    assert (group, keys) == ([0, 1], shared)
    rows = segment(random.Random(2), 200)
    pq.write_table(rows, tmp_path / "seg.parquet")
    seg = spark.read.parquet(str(tmp_path / "seg.parquet"))
    pass_ = prefix_partials(views, seg, keys, 3)
    plan = pass_._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan parquet") == 1 and plan.count("Exchange ") == 1, plan
    assert hashed in plan and not_hashed not in plan, plan
    # each view as a plan of its own computes it (same groups, same monoid parts)
    for i, v in enumerate(views):
        got = jumbo_branch(v, i, pass_.where(f"_b = {i}"))
        want = view_of_segment(v, seg)
        assert sorted(map(str, got.collect())) == sorted(map(str, want.collect()))


@pytest.mark.parametrize("pass_plan", ["jumbo", "prefix", "reordered"])
def test_a_pass_stores_its_views_bucketed_so_merging_them_shuffles_nothing(
        spark, tmp_path, pass_plan):
    """A pass writes each row into its view's bucket: an occurrence merging segment 1's
    view (stored co-located by its own plan) with segment 2's (from the pass) reads both
    where they lie, with no exchange, and merges them to what plain plans give."""
    keys = "B, E, A" if pass_plan == "reordered" else "B, A"  # reordered: the same keys
    views = _views("SELECT A, B, E, count(*) AS n FROM log WHERE E > 2.0 GROUP BY A, B, E",
                   f"SELECT {keys}, sum(D) AS s, max(C) AS m FROM log GROUP BY {keys}")
    n, rng = 3, random.Random(5)
    segs = []
    for j in (1, 2):
        pq.write_table(segment(rng, 300), tmp_path / f"seg{j}.parquet")
        segs.append(spark.read.parquet(str(tmp_path / f"seg{j}.parquet")))
    if pass_plan == "prefix":
        pass_ = prefix_partials(views, segs[1], prefix_group(views)[1], n)
    elif pass_plan == "reordered":
        assert reorder_group(views) == [0, 1]
        pass_ = reordered_partials(views, segs[1])
    else:
        pass_ = jumbo_partials(views, segs[1])
    files = write_bucketed(spark, pass_, branch_buckets(2, n), str(tmp_path / "pass"), n, "_b")
    assert set(files) == {"_b=0", "_b=1"} and all(
        f.rsplit("_", 1)[1].split(".")[0].isdigit()
        for fs in files.values() for f in fs)  # named by bucket, as bucketBy names them
    entries = branch_entries(str(tmp_path / "pass"), ddl_of(pass_.drop("_b").schema), 2, n)
    for i, v in enumerate(views):
        first = view_of_segment(v, segs[0])
        write_bucketed(spark, first, bucket_of(["_g"], n), str(tmp_path / f"v{i}"), n)
        stored = read_bucketed(spark, str(tmp_path / f"v{i}"), ddl_of(first.schema), ["_g"], n)
        assert entries[i]["files"] == files[f"_b={i}"]
        own = view_of_segment(v, segs[1])
        assert entries[i]["records"] == own.count() > 0  # its rows, from the footers
        both = stored.unionByName(jumbo_branch(v, i, branch_rows(spark, entries[i])))
        gp = group_plan(v.node, v.monoids)
        merged = merge_partials(gp, both)
        plan = merged._jdf.queryExecution().executedPlan().toString()
        assert "Exchange" not in plan and plan.count("Bucketed: true") == 2, plan
        want = merge_partials(gp, first.unionByName(own))
        assert sorted(map(str, merged.collect())) == sorted(map(str, want.collect()))


def test_with_the_measured_shuffles_views_win_the_tumbling_week():
    plan = _plan("log[-6:0]", 7)
    [view] = plan.view_list()
    got, estimates = choose(plan, {"A": 300.0, "B": 600.0, "E": 900.0},
                            {view.fingerprint: 500.0})
    assert got == "views", estimates  # raw aggregation shuffles 3 bytes per view byte


def test_without_statistics_a_series_keeps_views():
    assert choose(_plan("log[-6:0]", 7), {}, {}) == ("views", {})


def test_raw_and_auto_plans_answer_as_views_do(spark, tmp_path):
    rng = random.Random(9)
    segments = [segment(rng, 40) for _ in range(6)]
    series = [Series("raw3", SQL, {"log": "log[-2:0]"}, 3, plan="raw"),
              Series("auto3", SQL.replace("E > 2.0", "E > 3.0"), {"log": "log[-2:0]"}, 3),
              Series("views2", SQL, {"log": "log[-1:0]"}, 1, plan="views")]
    df = dataflow(series)
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for i, seg in enumerate(segments):
            pq.write_table(seg, tmp_path / f"s{i}.parquet")
            c.ingest("log", [str(tmp_path / f"s{i}.parquet")])
        c.run()
        program = c.dataflow.stages[series_stage_name("log")].program
        for s in series:
            schedule = program.plans[s.name].schedule
            for n, _ in c.stored_increments(s.name):
                want = duckdb_answer(s.sql, schedule.window(n), segments)
                assert canon(c.read_flow(s.name, n).to_pylist()) == canon(want), (s.name, n)
        state = c.state_records(series_stage_name("log"))
        stage = c.dataflow.stages[series_stage_name("log")]
        choices = c.runner.committed(stage).state["choices"]  # those of the last epoch
        assert choices["raw3"]["plan"] == "raw" and choices["raw3"]["forced"]
        assert choices["auto3"]["plan"] == "views"  # with the measured shuffle factors
        assert choices["auto3"]["estimates"] and not choices["auto3"]["forced"]
        assert choices["views2"]["plan"] == "views"
        # raw3 keeps no views (auto3's next window starts after segment 6)
        kept = {r["view"] for r in state}
        assert kept == {v.fingerprint for v in program.plans["views2"].view_list()}


def test_kappa_learns_measured_over_estimated_per_part():
    kappa = learned({}, {"read": 100.0, "shuffled": 50.0, "written": 0.0},
                    {"read": 200.0, "shuffled": 25.0, "written": 7.0})
    assert kappa == {"read": 2.0, "shuffled": 0.5}  # nothing estimated: nothing learned
    kappa = learned(kappa, {"read": 100.0, "shuffled": 50.0, "written": 10.0},
                    {"read": 100.0, "shuffled": 50.0, "written": 30.0})
    assert kappa == {"read": 1.5, "shuffled": 0.75, "written": 3.0}  # an EWMA
    assert learned(kappa, None, {"read": 1.0}) == kappa
    scan = {"shared": {"read": 10.0, "shuffled": 40.0, "written": 5.0},
            "separate": {"read": 30.0, "shuffled": 8.0, "written": 5.0}}
    est = epoch_estimates(scan, Estimate(4.0, 0.0, 1.0), kappa)
    assert est["shared"] == {"read": 21, "shuffled": 30, "written": 18, "io": 69}
    assert est["separate"] == {"read": 51, "shuffled": 6, "written": 18, "io": 75}
    # the runner's measurement, with the files the driver wrote
    assert measured({"spark_io": {"read": 1, "shuffled": 2, "written": 3},
                     "driver_bytes_written": 4}) == {"read": 1, "shuffled": 2, "written": 7}
    assert measured({}) is None


@pytest.mark.usefixtures("spark_plans")
def test_the_stage_estimates_its_epochs_and_learns_from_sparks_metrics(spark, tmp_path):
    rng = random.Random(4)
    segments = [segment(rng, 60) for _ in range(4)]
    series = [Series(f"k{i}", f"SELECT {k}, count(*) AS n, sum(B) AS s FROM log GROUP BY {k}",
                     {"log": "log[-1]"}) for i, k in enumerate(["A", "C", "D"])]
    df = dataflow(series, shared_scan="auto")
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        reports = []
        for i, seg in enumerate(segments):
            pq.write_table(seg, tmp_path / f"s{i}.parquet")
            c.ingest("log", [str(tmp_path / f"s{i}.parquet")])
            reports += c.run()
        io = [r.metrics["spark_io"] for r in reports]
        assert all(x["read"] > 0 and x["shuffled"] > 0 for x in io), io
        assert not reports[0].metrics["epoch_estimates"]  # no statistics yet
        for r in reports[1:]:
            est = r.metrics["epoch_estimates"]
            assert set(est) == {"shared", "separate"}
            cheaper = min(est, key=lambda p: est[p]["io"])
            assert (r.metrics["views_in_jumbo_pass"] == 3) == (cheaper == "shared")
        state = c.runner.committed(c.dataflow.stages[series_stage_name("log")]).state
        assert set(state["stats"]["kappa"]) == {"read", "shuffled", "written"}
        assert state["scan"]["estimates"] and not state["scan"]["forced"]
        for s in series:
            for n, _ in c.stored_increments(s.name):
                want = duckdb_answer(s.sql, {"log": range(n - 1, n)}, segments)
                assert canon(c.read_flow(s.name, n).to_pylist()) == canon(want), (s.name, n)


@pytest.mark.usefixtures("spark_plans")
def test_a_session_with_vectored_parquet_reads_records_no_reads_and_kappa_learns_none(
        spark, tmp_path):
    """Spark's default since 4.0: Parquet's vectored reads bypass the statistics behind
    its input bytes (footers only). An epoch in such a session records what it shuffled
    and wrote, not a read figure the cost model would take for the reads."""
    from strata.physical.spark_io import VECTORED_READS, reads_counted

    assert reads_counted(spark)  # get_spark turns vectored reads off
    rng = random.Random(5)
    series = [Series(f"k{i}", f"SELECT {k}, count(*) AS n FROM log GROUP BY {k}",
                     {"log": "log[-1]"}) for i, k in enumerate(["A", "C", "D"])]
    before = spark.conf.get(VECTORED_READS)
    spark.conf.set(VECTORED_READS, "true")
    try:
        assert not reads_counted(spark)
        with Controller(str(tmp_path / "home"), dataflow(series, shared_scan="auto"),
                        spark=spark, num_partitions=2) as c:
            reports, segments = [], []
            for i in range(3):
                segments.append(segment(rng, 40))
                pq.write_table(segments[-1], tmp_path / f"s{i}.parquet")
                c.ingest("log", [str(tmp_path / f"s{i}.parquet")])
                reports += c.run()
            io = [r.metrics["spark_io"] for r in reports]
            assert all(set(x) == {"shuffled", "written"} and x["shuffled"] > 0 for x in io)
            state = c.runner.committed(c.dataflow.stages[series_stage_name("log")]).state
            assert set(state["stats"]["kappa"]) == {"shuffled", "written"}
            # what `strata series explain` shows of the last epoch
            shown = scan_lines({**state["scan"], "measured": measured(reports[-1].metrics)})
            assert any("measured by Spark" in x and "read not measured" in x for x in shown)
            for s in series:
                for n, _ in c.stored_increments(s.name):
                    want = duckdb_answer(s.sql, {"log": range(n - 1, n)}, segments)
                    assert canon(c.read_flow(s.name, n).to_pylist()) == canon(want), n
    finally:
        spark.conf.set(VECTORED_READS, before)


def test_views_with_the_same_keys_are_grouped_once_when_their_keys_cost_more_than_a_scan():
    a, b, c = _views("SELECT A, B, count(*) AS n FROM log WHERE E > 2.0 GROUP BY A, B",
                     "SELECT B, A, sum(D) AS s FROM log WHERE C = 'x' GROUP BY B, A",
                     "SELECT D, count(*) AS n FROM log GROUP BY D")
    assert reorder_group([a, b, c]) == [0, 1] and reorder_group([c, a, b]) == [1, 2]
    assert reorder_group([a, c]) == []  # the same keys in any order; D is not A, B
    assert (view_fields(a), view_fields(b)) == (4, 5)
    columns = {k: 1_000.0 for k in "ABCDE"}
    sizes = {a.fingerprint: 3_000.0, b.fingerprint: 3_000.0}  # nearly a group per row
    plan, est = scan_sharing([a, b], columns, sizes, alpha=1.0, reorder=[0, 1])
    # one scan of A-E; the shared groups: halfway between nested (3,000 and a's 3,000
    # without its two keys of four fields: 4,500) and disjoint (6,000)
    assert est["reordered"] == {"read": 5_000, "shuffled": 5_250, "written": 6_000,
                                "io": 16_250}
    # the jumbo pass shuffles each view's rows widened by the other's NULL fields
    assert est["shared"] == {"read": 5_000, "shuffled": 6_375, "written": 6_000,
                             "io": 17_375}
    assert plan == "reordered" and est["separate"]["io"] == 19_000
    # with a third view outside the group, that view's separate scan costs more than
    # the keys saved: the jumbo pass wins
    sizes = {a.fingerprint: 1_000.0, b.fingerprint: 3_000.0, c.fingerprint: 10.0}
    plan, est = scan_sharing([a, b, c], columns, sizes, alpha=1.0, reorder=[0, 1])
    assert est["reordered"] == {"read": 6_000, "shuffled": 3_760, "written": 4_010,
                                "io": 13_770}
    assert plan == "shared" and est["shared"]["io"] == 13_374


def test_the_scan_plan_follows_the_setting_and_else_the_least_estimated_io():
    est = {"separate": {"io": 30}, "shared": {"io": 20}, "prefix": {"io": 25}}
    assert scan_plan("auto", est, 3, True) == "shared"
    assert scan_plan("auto", {}, 3, True) == "separate"  # no statistics yet
    assert scan_plan("auto", est, 1, True) == "separate"  # nothing to share
    assert scan_plan("prefix", est, 3, True) == "prefix"
    assert scan_plan("prefix", est, 3, False) == "shared"  # no two views share a key
    assert scan_plan("reorder", est, 3, True, True) == "reordered"
    assert scan_plan("reorder", est, 3, True, False) == "shared"  # no two keys alike
    assert scan_plan("auto", {**est, "reordered": {"io": 10}}, 3, True, True) == "reordered"
    assert scan_plan(True, est, 3, True) == "shared"
    assert scan_plan(False, est, 3, True) == "separate"


def test_an_answer_goes_through_spark_when_expected_larger_than_the_driver_takes():
    # its last answers decide, once it has answered
    assert through_spark(120.0, 1.0, 100)
    assert not through_spark(80.0, 180.0, 100)
    # before: the rows of its window's views bound an aggregate's groups
    assert through_spark(None, 110.0, 100)
    assert not through_spark(None, 100.0, 100)
    # a view of unknown rows (window_rows gives None), or no views: the driver tries first
    assert not through_spark(None, None, 100)
    assert not through_spark(None, 0.0, 100)
    # a stored view by the same rule: its rows so far, else its segment's rows bound it;
    # driverRows 0 sends everything through Spark
    assert not through_spark(50_000.0, 400_000.0, 100_000)
    assert through_spark(None, 400_000.0, 100_000)
    assert through_spark(None, None, 0) and through_spark(10.0, 10.0, 0)
