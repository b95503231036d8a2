"""Two compiled queries in one dataflow, for crash tests of query stages on the general
plan (its tables and manifests are what the tests check): a group-by with ``avg`` and a
join + group-by, over small increments with deletes (``_mult`` = -1). The group-by would
take the vectorized route, whose crash safety ``tests/test_vectorized_crash.py`` checks;
it is kept on the general plan here.

Two increments per source flow, so each query runs two epochs, the second over state.
The scheduler alternates them: ``avg_by_x`` 1, ``revenue`` 1, ``avg_by_x`` 2, ``revenue``
2 (the n-th query commit of an uninterrupted run is ``avg_by_x``'s for odd n).
"""

from __future__ import annotations

from strata import Dataflow
from strata.queries import add_query
from strata.queries.spark import tables

# name -> (SQL, keys); the same SQL runs on DuckDB over all input as the oracle
QUERIES = {
    "avg_by_x": ("SELECT x, avg(y) AS a, count(*) AS n FROM pairs GROUP BY x", {}),
    "revenue": ("SELECT country, sum(amount) AS total, count(*) AS n, avg(amount) AS mean "
                "FROM orders JOIN customers ON orders.cust = customers.id GROUP BY country",
                {"customers": ["id"]}),
}
SOURCES = {
    "pairs": ["x", "y"],
    "orders": ["cust", "amount"],
    "customers": ["id", "country"],
}
# Join input tables are compacted (rewritten, deletes netted) once they hold this many
# files per bucket: 1 makes every join epoch after the first compact, then append.
COMPACT_FILES_PER_BUCKET = 1


def setup() -> None:
    """Settings of a run (the worker process calls this; tests use monkeypatch)."""
    tables.COMPACT_FILES_PER_BUCKET = COMPACT_FILES_PER_BUCKET


def build_dataflow() -> Dataflow:
    df = Dataflow("querycrash")
    df.source("pairs", "x bigint, y bigint, _mult bigint")
    df.source("orders", "cust bigint, amount bigint, _mult bigint")
    df.source("customers", "id bigint, country string, _mult bigint")
    for name, (sql, keys) in QUERIES.items():
        add_query(df, name, sql, keys=keys or None, vectorized=False)
    return df


def batches() -> list[tuple[str, list[dict], bool]]:
    """The increments to ingest, in order: (flow, records, end_frame). Day 1 deletes rows
    of day 0: all of group ``x = 4`` (it leaves the answer), some orders; customer 2
    moves from us to de and customer 5 leaves (so does country us)."""
    def rows(flow, recs, mult=1):
        return [dict(zip(SOURCES[flow], r, strict=True), _mult=mult) for r in recs]

    pairs = [(i % 5, i * 3 % 11) for i in range(20)]
    orders = [(i % 7, 10 + i) for i in range(14)]  # customer 6 does not exist: no match
    customers = [(i, ["de", "fr", "us"][i % 3]) for i in range(6)]
    return [
        ("pairs", rows("pairs", pairs), False),
        ("orders", rows("orders", orders), False),
        ("customers", rows("customers", customers), False),
        ("pairs", rows("pairs", [(i % 4, i * 7 % 13) for i in range(15)])
         + rows("pairs", [r for r in pairs if r[0] == 4] + pairs[:2], -1), False),
        ("orders", rows("orders", [(i % 5, 3 * i) for i in range(8)])
         + rows("orders", orders[:4], -1), False),
        ("customers", rows("customers", [(2, "us"), (5, "us")], -1)
         + rows("customers", [(2, "de")]), False),
    ]
