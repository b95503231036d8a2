"""Window queries under the controller: after every epoch, every window result equals
DuckDB's aggregate over exactly the raw records of the cells its C2 says it includes."""

from __future__ import annotations

import operator
import random
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata import Dataflow
from strata.controller import Controller
from strata.windows import (
    Eviction,
    Fidelity,
    MapReduce,
    Shedding,
    WindowQuery,
    add_window,
    from_sql,
)
from strata.windows.query import WindowPlan
from tests.windows.weblog import DDL, LOOP_STORES, SQL, check_epoch, increments, net, write


def _window_sql(range_: int, slide: int) -> str:
    return SQL.replace("GROUP BY url", f"GROUP BY url, WINDOW(ts, {range_}, {slide}, host)")


@contextmanager
def _run(spark, tmp_path, query, raw, sql=SQL, shed=False, source="host"):
    """Run ``raw`` epoch by epoch, checking every result after each: (controller,
    results checked, each epoch's metrics)."""
    df = Dataflow("weblog")
    df.source("log", DDL)
    add_window(df, query)
    plan = df.stages[query.name].program.plan
    width = plan.width
    checked, metrics = 0, []
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for e, batch in enumerate(raw, 1):
            c.ingest("log", [write(tmp_path, batch)])
            metrics += [r.metrics for r in c.run()]
            checked += check_epoch(c, query.name, e, raw, width, sql, shed, source,
                                   plan.disorder, query.sources)
        yield c, checked, metrics


@LOOP_STORES
@pytest.mark.usefixtures("store")
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), slide=st.integers(1, 4), ratio=st.integers(1, 4),
       hosts=st.integers(1, 3), deadline=st.sampled_from([None, 0, 3]),
       invertible=st.booleans())
def test_random_windows_equal_duckdb_over_their_c2_cells(spark, tmp_path_factory, seed,
                                                         slide, ratio, hosts, deadline,
                                                         invertible):
    """Random ranges, slides, sources, late and missing data; with max (Two-Stacks) or
    without (combine/uncombine)."""
    rng = random.Random(seed)
    raw = increments(rng, hosts, epochs=5, span=6)
    sql = SQL.replace(" max(bytes) AS biggest,", "") if invertible else SQL
    window = sql.replace("GROUP BY url", f"GROUP BY url, WINDOW(ts, "
                         f"{slide * ratio + rng.randrange(2)}, {slide}, host)")
    query = from_sql("w", window, eviction=Eviction(deadline=deadline, lateness=6))
    with _run(spark, tmp_path_factory.mktemp("w"), query, raw, sql=sql) as (_, checked, m):
        assert checked or deadline is None
        if not invertible:  # max has no inverse: Two-Stacks never uncombines
            assert m[-1]["uncombines"] == 0


def test_late_data_refines_emitted_windows_as_changes(spark, store, tmp_path):
    rng = random.Random(5)
    raw = increments(rng, 3, epochs=4, span=6, silent=0.0, late=0.0)
    late = raw[1][:3]  # h0's first records of epoch 2 arrive two epochs late
    raw[1] = raw[1][3:]
    raw[3] = raw[3] + late
    # two epochs (12) late is within the allowed disorder: the cells were not complete
    query = from_sql("w", _window_sql(4, 2), eviction=Eviction(deadline=0, lateness=20),
                     disorder=12)
    with _run(spark, tmp_path, query, raw) as (c, checked, metrics):
        assert checked >= 5
        refined = [r for e, _ in c.stored_increments("w_windows")
                   for r in c.read_flow("w_windows", e).to_pylist() if r["_mult"] == -1]
        assert refined, "late cells must retract the results emitted without them"
        assert any(m["windows_refined"] for m in metrics)


def test_a_window_query_written_with_a_cte_reads_its_flow(spark, store, tmp_path):
    """``WITH`` inlined: the query reads ``log`` through the CTE, and every result equals
    DuckDB's over the plain query's cells."""
    cte = ("WITH big AS (SELECT ts, host, url, bytes, user FROM log WHERE bytes > 5) "
           + SQL.replace("FROM log WHERE bytes > 5 GROUP BY url",
                         "FROM big GROUP BY url, WINDOW(ts, 4, 2, host)"))
    query = from_sql("w", cte, eviction=Eviction(deadline=0, lateness=6))
    assert query.flow == "log"
    raw = increments(random.Random(3), 2, epochs=3, span=6)
    with _run(spark, tmp_path, query, raw) as (_, checked, _m):
        assert checked


def test_a_flow_without_a_source_column_is_one_source(spark, tmp_path):
    """WINDOW(ts, range, slide) over a flow with no ``source`` column: its records are one
    source (named like the flow), and every result equals DuckDB's over its cells."""
    query = from_sql("w", SQL.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 4, 2)"),
                     eviction=Eviction(deadline=0, lateness=6))
    raw = increments(random.Random(12), 3, epochs=3, span=6)
    with _run(spark, tmp_path, query, raw, source=None) as (c, checked, _m):
        assert checked
        assert {r["source"] for r in c.read_flow("w_c2").to_pylist()} == {"log"}


def test_failure_eviction_emits_without_a_silent_source_then_fills_the_gap(spark, tmp_path):
    rng = random.Random(9)
    raw = increments(rng, 3, epochs=5, span=6, silent=0.0, late=0.0)
    gone = [r for batch in raw[1:4] for r in batch if r["host"] == "h2"]
    raw[1:4] = [[r for r in batch if r["host"] != "h2"] for batch in raw[1:4]]
    raw[4] += gone  # h2 comes back: gap recovery
    query = from_sql("w", _window_sql(6, 3), eviction=Eviction(failure_timeout=6,
                                                               lateness=40))
    with _run(spark, tmp_path, query, raw) as (c, checked, metrics):
        assert checked
        boards = [r for e, _ in c.stored_increments("w_c2")
                  for r in c.read_flow("w_c2", e).to_pylist()]
        assert any(r["status"] == "failed" and r["_mult"] == 1 for r in boards)
        assert any("failure" in m["emit_reasons"] for m in metrics)
        # h2's data came back: the windows emitted without it were refined with its cells
        final = net(c, "w_c2", 5)
        assert any(dict(k)["source"] == "h2" and dict(k)["records"] > 0
                   for w, cells in final.items() if 6 <= w[0] < 24 for k in cells)


def test_fidelity_policy_waits_for_its_spec(spark, tmp_path):
    rng = random.Random(2)
    raw = increments(rng, 2, epochs=4, span=6, silent=0.0, late=0.0)
    held = [r for batch in raw[1:3] for r in batch if r["host"] == "h1"]
    raw[1:3] = [[r for r in batch if r["host"] != "h1"] for batch in raw[1:3]]
    raw[3] += held
    query = from_sql("w", _window_sql(6, 6), eviction=Eviction(
        fidelity=Fidelity("spatial", 0.5), lateness=12))
    with _run(spark, tmp_path, query, raw) as (c, checked, metrics):
        assert checked
        assert metrics[2]["emit_reasons"] == {"fidelity": 1}  # h1's half is not there
        assert metrics[3]["windows_refined"]  # and refines it when it comes
        first = net(c, "w_windows", 3)
        assert all(dict(k)["c2_spatial"] == 0.5 for k in first[(6, 12)])


def test_map_reduce_word_count_with_uncombine(spark, tmp_path):
    rng = random.Random(4)
    raw = increments(rng, 2, epochs=3, span=6, silent=0.0, late=0.0)
    query = WindowQuery("mr", "log", 6, 3, time="ts", source="host", mapreduce=MapReduce(
        map=lambda r: [(r["url"], 1)], combine=operator.add, uncombine=operator.sub,
        reduce=lambda k, n: n, key="url", result="n", result_type="bigint"),
        eviction=Eviction(deadline=0))
    sql = "SELECT url, count(*) AS n FROM log GROUP BY url"
    with _run(spark, tmp_path, query, raw, sql=sql) as (_, checked, metrics):
        assert checked >= 3
        assert metrics[-1]["uncombines"] > 0  # slid with uncombine, not re-combined


def test_timestamps_and_a_total_aggregate(spark, store, tmp_path):
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    df = Dataflow("ts")
    df.source("log", "ts timestamp, host string, bytes bigint")
    add_window(df, from_sql("t", "SELECT count(*) AS n, sum(bytes) AS b FROM log "
                                 "GROUP BY WINDOW(ts, '1 minute', '30 seconds', host)"))
    base = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for i in range(3):
            rows = [{"ts": base + dt.timedelta(seconds=30 * i + j), "host": "a",
                     "bytes": j} for j in range(30)]
            path = tmp_path / f"{i}.parquet"
            pq.write_table(pa.Table.from_pylist(rows), path)
            c.ingest("log", [str(path)])
            c.run()
        got = sorted((r["window_start"], r["n"], r["b"]) for e, _ in c.stored_increments(
            "t_windows") for r in c.read_flow("t_windows", e).to_pylist())
    # complete windows only (no deadline): [-30 s, 30 s) and [0, 60 s); [30 s, 90 s) is
    # open until the source sends a time past 90 s
    assert [(w - base).total_seconds() for w, _, _ in got] == [-30, 0]
    assert [(n, b) for _, n, b in got] == [(30, 435), (60, 870)]


def test_bad_window_queries_are_refused_clearly():
    df = Dataflow("bad")
    df.source("log", DDL)
    with pytest.raises(Exception, match="WINDOW"):
        from_sql("w", "SELECT url, count(*) FROM log GROUP BY url")
    with pytest.raises(Exception, match="no column 'moment'"):
        add_window(df, from_sql("w", "SELECT url, count(*) AS n FROM log "
                                     "GROUP BY url, WINDOW(moment, 4, 2, host)"))
    with pytest.raises(Exception, match="shorter than its slide"):
        add_window(df, from_sql("w", _window_sql(2, 4)))
    with pytest.raises(Exception, match="duration"):
        add_window(df, from_sql("w", _window_sql(4, 2).replace("4, 2", "'4 minutes', 2")))
    with pytest.raises(Exception, match="not a UNION"):
        from_sql("w", _window_sql(4, 2) + " UNION ALL SELECT url, 1 FROM log")


def test_several_windows_share_one_pane_store(spark, store, tmp_path):
    rng = random.Random(11)
    raw = increments(rng, 3, epochs=4, span=12)
    sql = SQL.replace(" max(bytes) AS biggest,", "")
    windowed = sql.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 6, 2, host), "
                           "WINDOW(ts, 6, 3, host), WINDOW(ts, 12, 12, host)")
    # the stragglers (a span late) within the allowed disorder: none is refused
    query = from_sql("w", windowed, eviction=Eviction(deadline=0, lateness=12),
                     disorder=12, sources=("h0", "h1", "h2"))
    plan = WindowPlan(query, {"ts": "bigint", "host": "string", "url": "string",
                              "bytes": "bigint", "user": "string"})
    assert plan.width == 1 and [s.per_window for s in plan.specs] == [6, 6, 12]
    with _run(spark, tmp_path, query, raw, sql=sql) as (c, checked, metrics):
        assert checked > 10
        # every record is aggregated once, into one pane store, whatever the windows
        assert all(m["rows_aggregated"] == m["input_rows"] for m in metrics)
        ends = {w[1] - w[0] for w in net(c, "w_windows", len(raw))}
        assert ends == {6, 12}
        # [0, 6) is a window of both 6/2 and 6/3: emitted once
        firsts = [r for r in c.read_flow("w_windows").to_pylist()
                  if (r["window_start"], r["window_end"]) == (0, 6) and r["_mult"] == 1]
        assert len(firsts) == len({r["url"] for r in firsts})


def test_load_shedding_skips_cells_records_them_in_c2_and_is_deterministic(spark, store,
                                                                           tmp_path):
    rng = random.Random(8)
    raw = increments(rng, 4, epochs=4, span=6, silent=0.0, late=0.0, per_epoch=200)
    sql = SQL.replace(" max(bytes) AS biggest,", "")
    windowed = sql.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 6, 3, host)")
    query = from_sql("w", windowed, eviction=Eviction(deadline=0, lateness=6),
                     shedding=Shedding(budget_seconds=1e-9, kind="spatial", seed=3))
    shed_runs = []
    for attempt in ("a", "b"):
        with _run(spark, tmp_path / attempt, query, raw, sql=sql, shed=True) as (
                c, checked, metrics):
            assert checked
            assert metrics[0]["rows_shed"] == 0  # no cost model before the first epoch
            # one epoch's cost is all taken per record: the second sheds every cell it can
            assert metrics[1]["rows_shed"] > 0
            # the second, which aggregated nothing, showed the fixed part alone exceeds
            # the budget: shedding could not meet it, and sheds nothing after
            assert metrics[-1]["epoch_cost"]["fixed"] > 1e-9
            assert all(m["rows_shed"] == 0 for m in metrics[2:])
            boards = [r for e, _ in c.stored_increments("w_c2")
                      for r in c.read_flow("w_c2", e).to_pylist()]
            skipped = {(r["source"], r["pane_start"]) for r in boards
                       if r["status"] == "skipped" and r["_mult"] == 1}
            assert skipped and all(r["shed"] > 0 for r in boards if r["status"] == "skipped")
            shed_runs.append((skipped, [m["rows_shed"] for m in metrics]))
    assert shed_runs[0] == shed_runs[1]  # the same seed sheds the same cells


def test_deletes_retract_records_from_their_panes(spark, store, tmp_path):
    """A flow with deletes (``_mult`` −1): windows equal DuckDB over the net records,
    min/max kept as multisets so that a deleted extreme is replaced."""
    import duckdb
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("ts", pa.int64()), ("host", pa.string()), ("url", pa.string()),
                        ("bytes", pa.int64()), ("_mult", pa.int64())])
    rng = random.Random(12)
    first = [{"ts": rng.randrange(12), "host": f"h{rng.randrange(2)}",
              "url": f"/u{rng.randrange(3)}", "bytes": rng.randrange(50), "_mult": 1}
             for _ in range(60)]
    # the second increment deletes a third of the first and moves both hosts past 12
    second = [{**r, "_mult": -1} for r in first[::3]] + [
        {"ts": 13, "host": h, "url": "/u0", "bytes": 1, "_mult": 1} for h in ("h0", "h1")]
    sql = ("SELECT url, count(*) AS n, sum(bytes) AS total, min(bytes) AS least, "
           "max(bytes) AS most FROM log GROUP BY url")
    df = Dataflow("deletes")
    df.source("log", "ts bigint, host string, url string, bytes bigint, _mult bigint")
    add_window(df, from_sql("w", sql.replace("GROUP BY url",
                                             "GROUP BY url, WINDOW(ts, 6, 3, host)"),
                            eviction=Eviction(deadline=0, lateness=20), disorder=12))
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for i, batch in enumerate((first, second)):
            path = tmp_path / f"{i}.parquet"
            pq.write_table(pa.Table.from_pylist(batch, schema), path)
            c.ingest("log", [str(path)])
            reports = c.run()
        assert reports[0].metrics["windows_refined"]  # the deletes changed emitted windows
        results = net(c, "w_windows", 2)
    rows = pd.DataFrame(first + second)
    netted = rows.groupby(["ts", "host", "url", "bytes"], as_index=False)["_mult"].sum()
    checked = 0
    for (start, end), got in results.items():
        log = netted[(netted["ts"] >= start) & (netted["ts"] < end)]
        log = log.loc[log.index.repeat(log["_mult"])]  # DuckDB reads it
        want = sorted(tuple(int(v) if not isinstance(v, str) else v for v in r)
                      for r in duckdb.sql(sql).fetchall())
        mine = sorted((dict(k)["url"], dict(k)["n"], dict(k)["total"], dict(k)["least"],
                       dict(k)["most"]) for k in got)
        assert mine == want, (start, mine, want)
        checked += 1
    assert checked >= 3


def test_a_window_stage_declares_its_time_and_source_not_null():
    """The flow's schema, as the catalog keeps it, says which columns ingest must find
    a value in (docs/windows.md); a flow that is one source needs only the time."""
    from strata.model.schema import parse_ddl, to_ddl

    df = Dataflow("weblog")
    df.source("log", DDL)
    df.source("other", DDL)
    add_window(df, from_sql("w", SQL.replace("GROUP BY url", "GROUP BY url, "
                                             "WINDOW(ts, 6, 3, host)")))
    assert to_ddl(df.flows["log"].schema) == ("ts bigint NOT NULL, host string NOT NULL, "
                                              "url string, bytes bigint, user string")
    assert parse_ddl(to_ddl(df.flows["log"].schema)) == df.flows["log"].schema
    assert to_ddl(df.flows["other"].schema) == DDL  # a flow no window reads: unchanged
