"""The column-pruning pass: SQL in, the columns each scan is narrowed to out. A join
stores and a scan reads only the columns something above them uses, plus the keys the
passes after it need; operators that read their input whole keep it."""

from __future__ import annotations

import pytest

from strata.queries.front.sql import parse_sql
from strata.queries.plan import derive
from strata.queries.plan.algebra import Join, Map, Node, Scan
from strata.queries.plan.expressions import column_names

FLOWS = {"orders": {"oid": "bigint", "day": "bigint", "cust": "bigint", "user_id": "bigint",
                    "amount": "double", "note": "string"},
         "customers": {"id": "bigint", "country": "string", "name": "string"}}


def read(sql: str, keys: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Each scanned flow's columns that the derived plan reads (unprefixed)."""
    root = derive(parse_sql(sql, FLOWS, keys=keys or {"customers": ["id"]})).root
    out: dict[str, list[str]] = {}

    def walk(node: Node, above: Node | None) -> None:
        if isinstance(node, Scan):
            used = set(node.columns)
            if isinstance(above, Map) and above.outputs is not None:
                used = {c for _, e in above.outputs for c in column_names(e)}
                used |= column_names(above.where) if above.where is not None else set()
            out[node.flow] = [c[len(node.prefix):] for c in node.columns if c in used]
        for child in node.children:
            walk(child, node)

    walk(root, None)
    return out


@pytest.mark.parametrize(("sql", "expected"), [
    # a join under a group-by: each side keeps the grouped, aggregated and joined columns
    ("SELECT c.country, o.day, sum(o.amount) AS revenue FROM orders o "
     "JOIN customers c ON o.cust = c.id GROUP BY c.country, o.day",
     {"orders": ["day", "cust", "amount"], "customers": ["id", "country"]}),
    # a row count needs the join keys only
    ("SELECT count(*) AS n FROM orders o JOIN customers c ON o.cust = c.id",
     {"orders": ["cust"], "customers": ["id"]}),
    # a left join; a filter's columns are read, then dropped above it
    ("SELECT o.day, c.country FROM orders o LEFT JOIN customers c ON o.cust = c.id "
     "WHERE o.amount > 10",
     {"orders": ["day", "cust", "amount"], "customers": ["id", "country"]}),
    # no join: the scan reads what the query names
    ("SELECT day, count(DISTINCT user_id) AS users FROM orders GROUP BY day",
     {"orders": ["day", "user_id"]}),
])
def test_scans_read_only_the_columns_used_above_them(sql, expected):
    assert read(sql) == expected


def test_a_declared_key_is_kept_though_nothing_reads_it():
    # the answer is keyed by the orders' key (the join is one-to-many): pruning keeps it
    got = read("SELECT o.day, c.country FROM orders o JOIN customers c ON o.cust = c.id",
               keys={"customers": ["id"], "orders": ["oid"]})
    assert got == {"orders": ["oid", "day", "cust"], "customers": ["id", "country"]}


def test_the_lookup_side_stays_a_lookup_table_after_pruning():
    inc = derive(parse_sql("SELECT sum(o.amount) AS s FROM orders o JOIN customers c "
                           "ON o.cust = c.id", FLOWS, keys={"customers": ["id"]}))
    [plan] = inc.joins.values()
    assert plan.lookup == "right"
    assert isinstance(plan.node, Join) and set(plan.node.left.columns) == {
        "o__cust", "o__amount"}


def test_a_window_reads_its_input_whole_but_pruning_goes_on_below_it():
    got = read("SELECT country, total, rank() OVER (PARTITION BY country ORDER BY total "
               "DESC) AS rnk FROM (SELECT c.country, o.cust, sum(o.amount) AS total "
               "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.country, o.cust)")
    assert got == {"orders": ["cust", "amount"], "customers": ["id", "country"]}


@pytest.mark.parametrize(("select", "expected"), [
    ("day, sum(amount) AS s", ["day", "amount"]),
    ("count(*) AS n", ["oid"]),  # no column used: every input keeps the same first one
])
def test_every_input_of_a_union_is_narrowed_to_the_same_columns(select, expected):
    flows = {**FLOWS, "returns": FLOWS["orders"]}
    sql = (f"SELECT {select} FROM (SELECT * FROM orders UNION ALL SELECT * FROM returns) "
           "GROUP BY day" if "day" in select else
           f"SELECT {select} FROM (SELECT * FROM orders UNION ALL SELECT * FROM returns)")
    root = derive(parse_sql(sql, flows, keys={"orders": ["oid"]})).root
    union = root.child
    assert all(list(c.columns) == expected for c in union.children), str(union)


def test_the_answer_keeps_every_column_the_query_selects():
    sql = "SELECT * FROM orders o JOIN customers c ON o.cust = c.id"
    root = derive(parse_sql(sql, FLOWS, keys={"customers": ["id"]})).root
    assert len(root.columns) == len(FLOWS["orders"]) + len(FLOWS["customers"])
    assert read(sql) == {"orders": list(FLOWS["orders"]),
                         "customers": list(FLOWS["customers"])}
