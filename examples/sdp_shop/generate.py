"""Data for the shop pipeline: customers and products once, then one day of orders per
call, as Parquet under PROJECT/data (the folders the pipeline's views read).

    python examples/sdp_shop/generate.py PROJECT --day 1 --rows 20000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CUSTOMERS, PRODUCTS, USERS, COUNTRIES, CATEGORIES = 5000, 400, 50000, 25, 12


def write_day(project: Path, day: int, rows: int, files: int = 1, seed: int = 0) -> list[Path]:
    """Write day ``day``'s orders (and, on day 1, the customers and products); the
    files written."""
    data = project / "data"
    (data / "orders").mkdir(parents=True, exist_ok=True)
    written = []
    if not (data / "customers").exists():
        (data / "customers").mkdir()
        ids = np.arange(CUSTOMERS, dtype=np.int64)
        pq.write_table(pa.table({"id": ids, "country": [f"country-{i % COUNTRIES:02d}"
                                                        for i in ids]}),
                       data / "customers" / "part-0.parquet")
        (data / "products").mkdir()
        pids = np.arange(PRODUCTS, dtype=np.int64)
        pq.write_table(pa.table({"product": pids, "category": [f"cat-{i % CATEGORIES:02d}"
                                                               for i in pids]}),
                       data / "products" / "part-0.parquet")
    rng = np.random.default_rng(seed * 100_003 + day)
    per_file = -(-rows // files)
    for f in range(files):
        n = min(per_file, rows - f * per_file)
        if n <= 0:
            break
        table = pa.table({
            "day": np.full(n, day, dtype=np.int64),
            "cust": rng.integers(0, CUSTOMERS, n, dtype=np.int64),
            "user_id": rng.zipf(1.3, n).astype(np.int64) % USERS,
            "product": rng.integers(0, PRODUCTS, n, dtype=np.int64),
            "amount": np.round(rng.gamma(2.0, 20.0, n), 2),
        })
        path = data / "orders" / f"day-{day:04d}-{f:03d}.parquet"
        pq.write_table(table, path)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("--day", type=int, required=True)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--files", type=int, default=1)
    args = parser.parse_args()
    write_day(args.project, args.day, args.rows, args.files)


if __name__ == "__main__":
    main()
