"""A small click log shaped like the paper's (market, position, query, URL, score) and
the series over it that the tests run, with DuckDB's answer of an occurrence."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import duckdb
import pyarrow as pa

from strata import Dataflow
from strata.series import Series, add_series
from tests.rows import Rows

COLUMNS = {"A": "string", "B": "bigint", "C": "string", "D": "bigint", "E": "double"}
SCHEMA = pa.schema([("A", pa.string()), ("B", pa.int64()), ("C", pa.string()),
                    ("D", pa.int64()), ("E", pa.float64())])
DDL = ", ".join(f"{c} {t}" for c, t in COLUMNS.items())
MARKETS = ["us", "gb", "ru", "de", "fr"]

# (name, SQL, tables, period): the paper's three series and the shapes around them
SERIES = [
    ("q1_daily_grouping", "SELECT A, B, C, count(*) AS n FROM log WHERE A <> 'gb' "
     "GROUP BY A, B, C", {"log": "log"}, 1),
    ("q2_weekly_histogram", "SELECT A, B, count(*) AS hits FROM log WHERE A <> 'gb' "
     "GROUP BY A, B", {"log": "log[-2:0]"}, 3),
    ("q3_today_join_yesterday",
     "SELECT t.D AS D, t.m AS today, y.m AS yesterday FROM "
     "(SELECT D, max(B) AS m FROM today WHERE A <> 'ru' GROUP BY D) t JOIN "
     "(SELECT D, max(B) AS m FROM yesterday WHERE A <> 'ru' GROUP BY D) y ON t.D = y.D",
     {"today": "log", "yesterday": "log[-1]"}, 1),
    ("last_4_aggregates", "SELECT A, avg(E) AS mean, min(B) AS lo, count(DISTINCT C) AS cs, "
     "sum(B) AS s FROM log GROUP BY A HAVING count(*) > 2 ORDER BY A LIMIT 3",
     {"log": "log[-3:0]"}, 2),
    ("total", "SELECT count(*) AS n, sum(B) AS s FROM log WHERE A = 'zz'",
     {"log": "log[-1:0]"}, 1),
    ("rows_only", "SELECT A, B * 2 AS b2 FROM log WHERE D < 3", {"log": "log[-1:0]"}, 1),
    ("join_grouped_not_decomposable",
     "SELECT t.A AS A, count(*) AS pairs FROM now t JOIN before b ON t.D = b.D "
     "GROUP BY t.A", {"now": "log", "before": "log[-2:-1]"}, 1),
]


# set operations: a group-by over a union keeps one partial per branch; EXCEPT and
# INTERSECT are such group-bys; a union of rows concatenates rows views
SET_OPERATIONS = [
    ("union_grouped", "SELECT A, count(*) AS n, max(E) AS top FROM (SELECT A, E FROM today "
     "UNION ALL SELECT A, B FROM before WHERE D < 3) u GROUP BY A",
     {"today": "log", "before": "log[-3:-1]"}, 1),
    ("except_yesterday", "SELECT A, C FROM today EXCEPT SELECT A, C FROM yesterday",
     {"today": "log", "yesterday": "log[-1]"}, 1),
    ("intersect_week", "SELECT D FROM today WHERE A = 'us' INTERSECT SELECT D FROM week",
     {"today": "log", "week": "log[-3:-1]"}, 2),
    ("union_rows", "SELECT A, D FROM today WHERE B > 6 UNION ALL SELECT A, D FROM yesterday "
     "WHERE B > 8", {"today": "log", "yesterday": "log[-1]"}, 1),
]
# outer joins: q3 keeping today's groups that yesterday lacks; the markets of the last
# three days that have no click in position 0 today (an anti-join)
OUTER_JOINS = [
    ("q3_left_join", "SELECT t.D AS D, t.m AS today, y.m AS yesterday FROM "
     "(SELECT D, max(B) AS m FROM today WHERE A <> 'ru' GROUP BY D) t LEFT JOIN "
     "(SELECT D, max(B) AS m FROM yesterday WHERE A = 'us' GROUP BY D) y ON t.D = y.D",
     {"today": "log", "yesterday": "log[-1]"}, 1),
    ("anti_join", "SELECT w.A AS A, w.n AS n FROM (SELECT A, count(*) AS n FROM week GROUP "
     "BY A) w LEFT JOIN (SELECT DISTINCT A FROM today WHERE B = 0) t ON w.A = t.A "
     "WHERE t.A IS NULL", {"today": "log", "week": "log[-2:0]"}, 1),
]

def dataflow(series: Sequence[Series], shared_scan: bool | str = False) -> Dataflow:
    """A dataflow of the click log ``log`` and ``series`` on it (one series stage)."""
    df = Dataflow("clicks")
    df.source("log", DDL)
    add_series(df, "log", list(series), shared_scan=shared_scan)
    return df


def segment(rng: random.Random, n: int) -> pa.Table:
    """``n`` clicks with Zipf-skewed positions."""
    zipf = [1 / (i + 1) for i in range(12)]
    return pa.table({
        "A": [rng.choice(MARKETS) for _ in range(n)],
        "B": [rng.choices(range(12), zipf)[0] for _ in range(n)],
        "C": [rng.choice("xyz") for _ in range(n)],
        "D": [rng.randrange(6) for _ in range(n)],
        "E": [round(rng.uniform(0, 10), 3) for _ in range(n)],
    }, schema=SCHEMA)


def canon(rows: Iterable[Mapping]) -> Rows:
    """Rows (dicts) as a multiset, floats equal within a tolerance (:mod:`tests.rows`)."""
    return Rows(tuple(x for kv in sorted(r.items()) for x in kv) for r in rows)


def duckdb_answer(sql: str, window: Mapping[str, range], segments: Sequence[pa.Table]
                  ) -> list[dict]:
    """DuckDB's answer of ``sql`` with each table the concatenation of its segments
    (numbered from 1)."""
    con = duckdb.connect()
    for table, idx in window.items():
        con.register(table, pa.concat_tables([segments[j - 1] for j in idx]))
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
