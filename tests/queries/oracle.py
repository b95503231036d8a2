"""Independent answers for the query tests: DuckDB over the bags the increments so far
describe, and the net rows of a changelog, normalized for comparison."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from decimal import Decimal

import duckdb
import pandas as pd

from tests.rows import Rows


def net(records: list[dict], cols: list[str]) -> pd.DataFrame:
    """The bag the increments so far describe (multiplicities applied)."""
    bag: Counter = Counter()
    for r in records:
        bag[tuple(r[c] for c in cols)] += r.get("_mult", 1)
    assert all(n >= 0 for n in bag.values())
    rows = [k for k, n in bag.items() for _ in range(n)]
    return pd.DataFrame(rows, columns=cols).astype(
        {c: "Int64" for c in cols if c in ("x", "y", "id")})


def cell(v):
    """A cell as the oracle compares it: NaN and NA are None, a decimal (DuckDB's 1.5)
    a float, an integer type an int."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    if isinstance(v, float | Decimal):
        return float(v)
    return int(v) if hasattr(v, "__int__") and not isinstance(v, str) else v


def normalized(rows) -> Rows:
    """Rows as a multiset, floats equal within a tolerance (:mod:`tests.rows`)."""
    return Rows(tuple(cell(v) for v in r) for r in rows)


TABLES = {"R": ["x", "y"], "D": ["id", "name", "grp"], "P": ["x", "y"]}


def duckdb_answer(sql: str, seen: dict[str, list[dict]],
                  tables: dict[str, list[str]] = TABLES) -> list[tuple]:
    """``sql`` run by DuckDB over the bags that the records of each flow so far describe."""
    con = duckdb.connect()
    for name, cols in tables.items():
        frame = net(seen[name], cols)  # noqa: F841  (read by DuckDB by name)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
    return normalized(con.execute(sql).fetchall())


def check_history(spark, home, df, history: list[dict[str, list[dict]]],
                  expected: Mapping[str, str],
                  oracle: Callable[[str, dict[str, list[dict]]], list[tuple]] = duckdb_answer
                  ) -> None:
    """Ingest ``history`` (per increment: flow → records) into ``df`` and run it; after
    every increment each query's answer equals ``oracle`` running ``expected[query]`` over
    the records so far."""
    from strata.controller.controller import Controller

    seen: dict[str, list[dict]] = defaultdict(list)
    with Controller(str(home), df, spark=spark, num_partitions=2) as c:
        for inc in history:
            for flow, recs in inc.items():
                if recs:
                    c.ingest(flow, recs)
                seen[flow] += recs
            c.run()
            for name, sql in expected.items():
                got = normalized(tuple(r.values()) for r in c.answer(name).to_pylist())
                want = oracle(sql, seen)
                assert got == want, (f"{name} after {sum(map(len, seen.values()))} records: "
                                     f"got {got}, want {want}")


def net_changes(changes: list[dict]) -> Rows:
    """The rows a changelog (answer columns and ``_mult``) leaves, normalized; each row's
    multiplicity must net to 0 or 1 (a row inserted twice shows here)."""
    bag: Counter = Counter()
    for r in changes:
        bag[tuple(v for c, v in r.items() if c != "_mult")] += r["_mult"]
    assert all(n in (0, 1) for n in bag.values()), bag
    return normalized(k for k, n in bag.items() if n)
