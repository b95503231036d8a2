"""strata inside the user's own Spark session: a notebook or job creates its session with
Spark's defaults (adaptive execution, partition coalescing, skew joins, its own shuffle
partitions and SQL confs) and strata runs on it as it is. Every stage kind gives the same
answers as an independent computation, and the session's confs are as they were after
each run (docs/architecture.md, "The life of one epoch")."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from strata import Dataflow, Input, State
from strata.apps.urlcount import COUNTS_SCHEMA, count_urls, count_urls_vectorized
from strata.config import DRIVER_EPOCH_ROWS, HELD_SEGMENT_ROWS
from strata.controller import Controller
from strata.model.vectorized import VectorResult
from strata.physical.vectorized import vectorized_stage
from strata.queries import add_query
from strata.series import Series, add_series
from strata.windows import Eviction, add_window, from_sql
from tests.helpers import session_confs
from tests.windows.weblog import DDL, check_epoch, write

# Spark's own defaults where strata's get_spark sets others, and confs a user may set
USER_SESSION = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",
    "spark.sql.adaptive.localShuffleReader.enabled": "true",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "1k",
    "spark.sql.session.timeZone": "America/New_York",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.files.maxPartitionBytes": "4k",
    # the driver's paths off: every epoch runs as Spark jobs (any large increment does)
    DRIVER_EPOCH_ROWS.name: "-1",
    HELD_SEGMENT_ROWS.name: "-1",
}
COUNT_SQL = "SELECT url, count(*) AS n FROM log GROUP BY url"
WINDOW_SQL = ("SELECT url, count(*) AS n, sum(bytes) AS total FROM log WHERE bytes > 5 "
              "GROUP BY url, WINDOW(ts, 4, 2, host)")


def _count_vectorized(state, inputs) -> VectorResult:
    """``count_urls_vectorized`` over the log, writing ``vcounts``."""
    result = count_urls_vectorized(state, {"urls": inputs["log"]})
    return VectorResult({"vcounts": result.outputs["counts"]}, result.state)


def _dataflow() -> Dataflow:
    """The URL count five ways over one web log: per group, vectorized, as a SQL query,
    as a series over the newest two segments and as a sliding window."""
    df = Dataflow("user_session")
    log = df.source("log", DDL)
    df.stage("per_group", count_urls, inputs=[Input(log, route_by="url")],
             outputs={"counts": COUNTS_SCHEMA},
             state=State(COUNTS_SCHEMA, route_by="url"))
    vectorized_stage(df, "vectorized", _count_vectorized, key="url", inputs=["log"],
                     outputs={"vcounts": COUNTS_SCHEMA}, state=COUNTS_SCHEMA)
    add_query(df, "query", COUNT_SQL)
    add_series(df, "log", [Series("recent", COUNT_SQL, {"log": "log[-1:0]"})])
    add_window(df, from_sql("win", WINDOW_SQL,
                            eviction=Eviction(deadline=None, lateness=4)))
    return df


def _increments(rng: random.Random, epochs: int, per_epoch: int) -> list[list[dict]]:
    """Epoch ``e`` covers event times ``[2e, 2e + 2)`` from two hosts, over skewed URLs."""
    return [[{"ts": 2 * e + rng.randrange(2), "host": f"h{i % 2}",
              "url": f"/u{min(rng.randrange(40), rng.randrange(40))}",
              "bytes": rng.randrange(40), "user": f"v{rng.randrange(6)}"}
             for i in range(per_epoch)] for e in range(epochs)]


def _netted(c: Controller, flow: str) -> dict[str, int]:
    """Each URL's newest count in a changelog flow (increments oldest first)."""
    out: dict[str, int] = {}
    for e, _ in c.stored_increments(flow):
        for r in c.read_flow(flow, e).to_pylist():
            if r.get("_mult", 1) > 0:
                out[r["url"]] = r["count"] if "count" in r else r["n"]
    return out


@pytest.mark.parametrize("partitions", ["8", "200"])
def test_every_stage_kind_is_right_in_a_user_session(spark, tmp_path, partitions):
    confs = {**USER_SESSION, "spark.sql.shuffle.partitions": partitions}
    raw = _increments(random.Random(int(partitions)), epochs=3, per_epoch=300)
    with session_confs(spark, confs):
        before = {k: spark.conf.get(k) for k in confs}
        explicit = spark.conf.getAll  # every conf the session sets, not only these
        with Controller(str(tmp_path / "home"), _dataflow(), spark=spark,
                        num_partitions=2) as c:
            seen: Counter = Counter()
            windows = 0
            for e, batch in enumerate(raw, 1):
                c.ingest("log", [write(tmp_path, batch)])
                c.run()
                assert {k: spark.conf.get(k) for k in confs} == before, e
                assert spark.conf.getAll == explicit, e
                seen.update(r["url"] for r in batch)
                assert _netted(c, "counts") == dict(seen), e
                assert _netted(c, "vcounts") == dict(seen), e
                assert _netted(c, "query_changes") == dict(seen), e
                # the series is due once it has two segments: one occurrence each after
                assert [n for n, _ in c.stored_increments("recent")] == list(range(2, e + 1))
                if e >= 2:
                    recent = Counter(r["url"] for b in raw[e - 2:e] for r in b)
                    got = {r["url"]: r["n"] for r in c.read_flow("recent", e).to_pylist()}
                    assert got == dict(recent), e
                windows += check_epoch(c, "win", e, raw, 2, _window_oracle_sql(),
                                       source="host")
            assert windows > 0
        assert {k: spark.conf.get(k) for k in confs} == before


def _window_oracle_sql() -> str:
    """The window query's aggregate as DuckDB runs it over a window's records."""
    return WINDOW_SQL.replace(", WINDOW(ts, 4, 2, host)", "")


