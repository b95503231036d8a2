"""The shop example (examples/sdp_shop) copied into a test's folder, and each of its
views recomputed by DuckDB over the files as they are (the oracle)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdp_shop"
sys.path.insert(0, str(EXAMPLE))
from generate import write_day  # noqa: E402

ORACLE = {
    "daily_revenue": "SELECT c.country, o.day, sum(o.amount) AS revenue, count(*) AS orders "
                     "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY ALL",
    "country_totals": "SELECT c.country, sum(o.amount) AS revenue, count(*) AS orders "
                      "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY ALL",
    "active_users": "SELECT day, count(DISTINCT user_id) AS users FROM orders GROUP BY day",
    "products_sold": "SELECT count(DISTINCT product) AS products, count(DISTINCT cust) AS "
                     "customers FROM orders",
    "top_products": "SELECT * FROM (SELECT category, product, sales, rank() OVER (PARTITION "
                    "BY category ORDER BY sales DESC) AS rnk FROM (SELECT p.category, "
                    "o.product, sum(o.amount) AS sales FROM orders o JOIN products p ON "
                    "o.product = p.product GROUP BY ALL)) WHERE rnk <= 10",
    "big_orders": "SELECT day, count(*) AS n, sum(amount) AS total FROM orders "
                  "WHERE amount > 100 GROUP BY day",
}


def copy_project(dest: Path, storage: str | None = None) -> Path:
    """The example under ``dest`` (its spec's storage made absolute); the spec's path."""
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__", "data",
                                                                 "pipeline-storage"))
    spec = dest / "spark-pipeline.yml"
    text = spec.read_text().replace("storage: pipeline-storage",
                                    f"storage: {storage or 'file://' + str(dest / 'storage')}")
    spec.write_text(text)
    return spec


def oracle(project: Path, view: str) -> pd.DataFrame:
    data = project / "data"
    con = duckdb.connect()
    for name in ("orders", "customers", "products"):
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM '{data / name}/*.parquet'")
    return con.sql(ORACLE[view]).df()


def table(location: Path) -> pd.DataFrame:
    return pq.read_table(location).to_pandas()


def same(got: pd.DataFrame, want: pd.DataFrame, view: str) -> None:
    """Equal as multisets of rows (sums compared to 1e-6 relative)."""
    assert sorted(got.columns) == sorted(want.columns), (view, got.columns, want.columns)
    cols = sorted(want.columns)
    keys = [c for c in cols if c not in ("revenue", "sales", "total")]
    a = got[cols].sort_values(keys).reset_index(drop=True)
    b = want[cols].sort_values(keys).reset_index(drop=True)
    assert len(a) == len(b), f"{view}: {len(a)} rows, the oracle has {len(b)}"
    pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-6, obj=view)


__all__ = ["ORACLE", "copy_project", "oracle", "same", "table", "write_day"]
