"""String functions as group keys — a URL's host from ``split(url, '/')[2]`` and
``parse_url`` — maintained over the sample days equal Spark SQL recomputing the same
query over all rows so far."""

from __future__ import annotations

from pathlib import Path

import strata
from strata import Dataflow
from strata.controller import Controller
from strata.queries import add_query

DAYS = sorted((Path(strata.__file__).parent / "data" / "sample" / "urls").glob("day-*.jsonl"))
SQL = ("SELECT split(url, '/')[2] AS host, parse_url(url, 'PROTOCOL') AS scheme, "
       "count(*) AS n, count(DISTINCT regexp_replace(url, '[0-9]+', '#')) AS shapes "
       "FROM urls GROUP BY 1, 2")


def test_url_hosts_equal_spark_sql_recomputation(spark, tmp_path):
    df = Dataflow("hosts")
    df.source("urls", "url string")
    add_query(df, "per_host", SQL)
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for i, day in enumerate(DAYS[:3], 1):
            c.ingest("urls", [str(day)])
            list(c.run())
            spark.read.schema("url string").json([str(d) for d in DAYS[:i]]) \
                .createOrReplaceTempView("urls")
            want = sorted(tuple(r) for r in spark.sql(SQL).collect())
            got = sorted(tuple(r.values()) for r in c.answer("per_host").to_pylist())
            assert got == want and len(want) > 1, i
