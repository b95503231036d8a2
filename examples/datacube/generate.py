"""Generate sales facts and range queries for the datacube example, as JSONL increments.

Sales: ``regions`` regions × ``products`` products over ``days`` days, skewed the way real
sales are — a few big regions and best-selling products (Zipf-like weights), busier
weekends, a slow upward trend, and amounts (in cents) log-normal around a per-product
price. The facts are cut into ``increments`` consecutive dumps of days; each dump also
carries a few late facts from earlier days (a store that reported late), which land in
cube cells that already exist.

Queries: ``queries`` increments of ``per_query`` range queries each,
``{qid, region_from, region_to, product_from, product_to, day_from, day_to}``, with day
ranges on week boundaries (the cube's granularity), some reaching past the data so far.
qids are unique across increments (``1000 * increment + j``).

Files: ``OUT/sales-0001.jsonl`` …, ``OUT/queries-0001.jsonl`` …

    python examples/datacube/generate.py --out /tmp/datacube-data --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

WEEK = 7


def _zipf(n: int, s: float, rng: random.Random) -> list[float]:
    w = [1 / (i + 1) ** s for i in range(n)]
    rng.shuffle(w)  # the biggest region/product is not always number 0
    return w


def sales(seed: int = 1, increments: int = 4, days: int = 56, regions: int = 6,
          products: int = 12, per_day: int = 60) -> list[list[dict]]:
    """``increments`` dumps of sales facts ``{day, region, product, amount}``."""
    rng = random.Random(f"sales-{seed}")
    region_w = _zipf(regions, 1.1, rng)
    product_w = _zipf(products, 0.9, rng)
    price = [rng.choice([299, 499, 999, 1999, 4999, 12999]) for _ in range(products)]
    by_day: list[list[dict]] = []
    for day in range(days):
        weekend = 1.6 if day % WEEK in (5, 6) else 1.0
        n = max(1, int(rng.gauss(per_day * weekend * (1 + day / (2 * days)), per_day / 8)))
        rs = rng.choices(range(regions), region_w, k=n)
        ps = rng.choices(range(products), product_w, k=n)
        by_day.append([{"day": day, "region": r, "product": p,
                        "amount": max(1, int(price[p] * math.exp(rng.gauss(0, 0.3))))}
                       for r, p in zip(rs, ps, strict=True)])
    dumps: list[list[dict]] = []
    for i in range(increments):
        lo, hi = days * i // increments, days * (i + 1) // increments
        dump = [f for d in range(lo, hi) for f in by_day[d]]
        if lo > 0:  # late reports: move a few facts of this dump back to earlier days
            for f in rng.sample(dump, k=max(1, len(dump) // 50)):
                f["day"] = rng.randrange(0, lo)
        dumps.append(dump)
    return dumps


def queries(seed: int = 1, increments: int = 8, per_query: int = 4, days: int = 56,
            regions: int = 6, products: int = 12) -> list[list[dict]]:
    """``increments`` increments of range queries on week boundaries."""
    rng = random.Random(f"queries-{seed}")
    weeks = days // WEEK + 1  # one week past the data: some queries ask for the future
    out = []
    for i in range(increments):
        inc = []
        for j in range(per_query):
            r0 = rng.randrange(regions)
            r1 = min(regions - 1, r0 + rng.randrange(regions))
            p0 = rng.randrange(products)
            p1 = min(products - 1, p0 + rng.randrange(products // 2 + 1))
            w0 = rng.randrange(weeks)
            w1 = min(weeks - 1, w0 + rng.randrange(4))
            inc.append({"qid": 1000 * (i + 1) + j, "region_from": r0, "region_to": r1,
                        "product_from": p0, "product_to": p1,
                        "day_from": w0 * WEEK, "day_to": w1 * WEEK + WEEK - 1})
        out.append(inc)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="directory for the JSONL files")
    p.add_argument("--sales-increments", type=int, default=4, help="sales dumps (default 4)")
    p.add_argument("--query-increments", type=int, default=8,
                   help="query increments (default 8)")
    p.add_argument("--per-query", type=int, default=4, help="queries per increment (default 4)")
    p.add_argument("--days", type=int, default=56, help="days of sales (default 56)")
    p.add_argument("--per-day", type=int, default=60, help="sales per day, about (default 60)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    files = {"sales": sales(a.seed, a.sales_increments, a.days, per_day=a.per_day),
             "queries": queries(a.seed, a.query_increments, a.per_query, a.days)}
    for name, incs in files.items():
        for i, inc in enumerate(incs, 1):
            path = a.out / f"{name}-{i:04d}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in inc))
            print(f"{path}: {len(inc)} records")


if __name__ == "__main__":
    main()
