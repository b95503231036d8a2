"""Timestamps through queries and series: a flow with a ``timestamp`` column, grouped by
hour and day (``date_trunc``, ``to_date``, ``date_format``), after every increment (files
or a Spark DataFrame) equals DuckDB's answer over all rows so far (both in UTC)."""

from __future__ import annotations

import datetime as dt
import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata import Dataflow
from strata.controller import Controller
from strata.queries import add_query
from strata.series import Series, add_series

SQL = ("SELECT date_trunc('HOUR', t) AS h, to_date(t) AS d, date_format(t, 'yyyy-MM-dd HH') "
       "AS s, count(*) AS c, sum(v) AS total FROM ev GROUP BY 1, 2, 3")
DUCKDB = ("SELECT CAST(date_trunc('hour', t) AS TIMESTAMP) AS h, CAST(t AS DATE) AS d, "
          "strftime(t, '%Y-%m-%d %H') AS s, count(*) AS c, sum(v) AS total FROM ev "
          "GROUP BY 1, 2, 3")
SCHEMA = pa.schema([("t", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])


@pytest.fixture
def utc(spark):
    """The session in another time zone than the UTC DuckDB is told to be in: epochs run
    in UTC all the same (docs/architecture.md), and leave the session's zone as it was."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield
    assert spark.conf.get("spark.sql.session.timeZone") == "America/New_York"
    spark.conf.set("spark.sql.session.timeZone", before)


def _batch(rng: random.Random, n: int) -> pa.Table:
    start = dt.datetime(2026, 11, 27, 21, 0, tzinfo=dt.UTC)  # crosses midnight
    return pa.table({"t": [start + dt.timedelta(minutes=rng.randrange(300)) for _ in range(n)],
                     "v": [rng.randrange(-5, 50) for _ in range(n)]}, schema=SCHEMA)


def _duckdb(tables: list[pa.Table], sql: str) -> list[tuple]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("ev", pa.concat_tables(tables))
    return sorted(con.execute(sql).fetchall())


def _rows(table: pa.Table, cols: list[str]) -> list[tuple]:
    """Rows, the hours as naive UTC datetimes as DuckDB gives them (its cast)."""
    def naive(v):
        if isinstance(v, dt.datetime):
            assert v.utcoffset() == dt.timedelta(0), v
            return v.replace(tzinfo=None)
        return v
    return sorted(tuple(naive(r[c]) for c in cols) for r in table.to_pylist())


def test_time_keys_in_a_query_and_a_series_equal_duckdb(spark, utc, tmp_path):
    df = Dataflow("times")
    df.source("ev", "t timestamp, v bigint")
    add_query(df, "per_hour", SQL)
    add_series(df, "ev", [Series("last_two", SQL, {"ev": "ev[-1:0]"})])
    rng = random.Random(7)
    batches = []
    cols = ["h", "d", "s", "c", "total"]
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for i, n in enumerate([40, 0, 25, 60], 1):
            batches.append(_batch(rng, n))
            if i == 3:  # a DataFrame's timestamps, checked against the flow's and written
                c.ingest("ev", spark.createDataFrame(batches[-1].to_pandas()))
            else:
                path = tmp_path / f"ev-{i}.parquet"
                pq.write_table(batches[-1], path)
                c.ingest("ev", [str(path)])
            list(c.run())
            assert _rows(c.answer("per_hour"), cols) == _duckdb(batches, DUCKDB), i
            if i >= 2:  # the series' occurrence over the newest two segments
                got = c.read_flow("last_two", c.stored_increments("last_two")[-1][0])
                assert _rows(got, cols) == _duckdb(batches[-2:], DUCKDB), i
