"""A small window increment is lifted into cells, and its windows answered, by the driver
in Arrow (the query layer's Arrow backend): the same cells as Spark's plan, and the same
results as a stage whose Arrow steps are off."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata import Dataflow, config
from strata.controller import Controller
from strata.windows import Eviction, add_window, from_sql
from strata.windows.frames import increment_frame, lifted_cells, lifted_in_arrow
from tests.windows.weblog import DDL, SCHEMA, increments, net, write

LIFTED = [
    # filter, sums, count, max; sources a column
    "SELECT url, count(*) AS n, sum(bytes) AS total, max(bytes) AS biggest FROM log "
    "WHERE bytes > 5 GROUP BY url, WINDOW(ts, 4, 2, host)",
    # two keys (one computed), avg and min of an expression; one source (the flow)
    "SELECT host, bytes % 3 AS r, avg(bytes) AS mean, min(bytes + 1) AS least FROM log "
    "GROUP BY host, bytes % 3, WINDOW(ts, 6, 3)",
    # a total aggregate (no key) over a filter no record passes in some panes
    "SELECT count(*) AS n, sum(bytes) AS total FROM log WHERE bytes > 30 "
    "GROUP BY WINDOW(ts, 3, 3, host)",
]


def _plan(sql: str, ddl: str = DDL):
    df = Dataflow("weblog")
    df.source("log", ddl)
    add_window(df, from_sql("w", sql))
    return df.stages["w"].program.plan


def _rows(table: pa.Table) -> list:
    return sorted(repr(sorted(r.items())) for r in table.to_pylist())


def _records(rng: random.Random, n: int) -> list[dict]:
    """Records around time 0 (negative times too: panes are floored), some bytes NULL."""
    return [{"ts": rng.randrange(-20, 20), "host": f"h{rng.randrange(3)}",
             "url": f"/u{rng.randrange(4)}",
             "bytes": None if rng.random() < 0.1 else rng.randrange(40),
             "user": f"v{rng.randrange(5)}"} for _ in range(n)]


@pytest.mark.parametrize("sql", LIFTED)
@pytest.mark.parametrize("floor", [None, -2])
def test_the_arrow_lift_equals_sparks(spark, tmp_path, sql, floor):
    plan = _plan(sql)
    path = str(tmp_path / "inc.parquet")
    pq.write_table(pa.Table.from_pylist(_records(random.Random(7), 300), SCHEMA), path)
    got = lifted_in_arrow(plan, spark, [path], floor)
    assert got is not None
    keep = None if floor is None else f"_pane >= {floor}"
    want = lifted_cells(plan, increment_frame(plan, spark, [path]), keep,
                        stats=True).toArrow()
    assert got.schema.names == want.schema.names
    g, h = got.schema.field("_g").type, want.schema.field("_g").type
    assert [(f.name, f.type) for f in g] == [(f.name, f.type) for f in h]
    assert _rows(got.cast(want.schema)) == _rows(want)
    if floor is not None or "WHERE" in sql:  # some records the filter or floor excludes
        assert not all(got.column("_pass").to_pylist())


def test_a_timestamp_event_time_lifts_in_arrow_as_in_spark(spark, tmp_path):
    plan = _plan("SELECT url, count(*) AS n FROM log GROUP BY url, "
                 "WINDOW(ts, '10 minutes', '5 minutes', host)",
                 "ts timestamp, host string, url string")
    rng, start = random.Random(3), datetime(1969, 12, 31, 23, 30, tzinfo=UTC)
    recs = [{"ts": start + timedelta(seconds=rng.randrange(3600)),
             "host": f"h{rng.randrange(2)}", "url": f"/u{rng.randrange(3)}"}
            for _ in range(200)]
    path = str(tmp_path / "inc.parquet")
    pq.write_table(pa.Table.from_pylist(recs, pa.schema([
        ("ts", pa.timestamp("us", "UTC")), ("host", pa.string()), ("url", pa.string())])),
        path)
    got = lifted_in_arrow(plan, spark, [path], None)
    want = lifted_cells(plan, increment_frame(plan, spark, [path]), None,
                        stats=True).toArrow()
    assert got is not None and _rows(got.cast(want.schema)) == _rows(want)


@pytest.mark.parametrize("sql", [
    # count(DISTINCT …) keeps a multiset per group: not a lift the Arrow backend runs
    "SELECT url, count(DISTINCT user) AS users FROM log GROUP BY url, WINDOW(ts, 4, 2, host)",
    # a function the Arrow backend does not evaluate
    "SELECT upper(url) AS u, count(*) AS n FROM log GROUP BY upper(url), WINDOW(ts, 4, 2)",
])
def test_what_arrow_cannot_lift_is_left_to_spark(spark, tmp_path, sql):
    path = write(tmp_path, _records(random.Random(1), 50))
    assert lifted_in_arrow(_plan(sql), spark, [path], None) is None


def _run(spark, home, sql, raw, arrow: bool):
    """The stage over ``raw`` with Arrow steps on or off: its netted results after each
    epoch, and whether each epoch lifted in the driver."""
    df = Dataflow("weblog")
    df.source("log", DDL)
    add_window(df, from_sql("w", sql, eviction=Eviction(deadline=0, lateness=6)))
    spark.conf.set(config.ARROW.name, str(arrow).lower())
    spark.conf.set(config.WINDOW_STORE.name, "driver")
    try:
        with Controller(str(home), df, spark=spark, num_partitions=2) as c:
            out, where = [], []
            for e, batch in enumerate(raw, 1):
                c.ingest("log", [write(home.parent, batch)])
                where += [r.metrics["in_driver"] for r in c.run()]
                out.append(net(c, "w_windows", e))
            return out, where
    finally:
        spark.conf.unset(config.ARROW.name)
        spark.conf.unset(config.WINDOW_STORE.name)


def test_a_stage_on_arrow_answers_as_one_on_spark(spark, tmp_path):
    raw = increments(random.Random(11), 2, epochs=4, span=6)
    on, where_on = _run(spark, tmp_path / "a" / "home", LIFTED[0], raw, arrow=True)
    off, where_off = _run(spark, tmp_path / "b" / "home", LIFTED[0], raw, arrow=False)
    assert where_on == [True] * len(raw) and not any(where_off)
    assert on == off
    assert any(on[-1].values())  # windows were answered
