"""Generate two crawls of one web (crawler A and crawler B) as JSONL increments.

The web is a population of sites with pages of varying popularity. Crawler A covers the
first three quarters of the sites, crawler B the last three quarters, so they share the
middle half and each has sites of its own. Every hour each crawler fetches about
``size`` pages: mostly pages it has not fetched yet (popular ones first), plus re-crawls.
Each crawler is down for one whole hour (a different hour for each, never the first or
the last), so that hour exists in one crawl only.

The crawls are cut into ``increments`` dumps per crawler at fixed times that do not fall
on hour boundaries (an hour is split across two dumps, as a real crawler's periodic dump
would split it). Files: ``OUT/a-0001.jsonl``, ``OUT/b-0001.jsonl``, … one record
``{"url": …, "ts": …}`` per line, in time order; ingest the last dump of each crawler
with ``--end-frame`` to close its last hour.

    python examples/setdiff/generate.py --out /tmp/setdiff-data --increments 4 --size 150
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

START = 1_709_251_200  # 2024-03-01 00:00:00 UTC, a whole hour


def _web(rng: random.Random, sites: int, pages: int) -> list[list[str]]:
    """URLs per site; pages are listed most popular first."""
    web = []
    for s in range(sites):
        host = f"https://{rng.choice(['news', 'shop', 'blog', 'wiki', 'docs'])}{s}.example.com"
        web.append([f"{host}/p/{p}" for p in range(pages)])
    return web


def crawl(seed: int = 1, hours: int = 9, size: int = 150, start: int = START,
          sites: int = 40) -> tuple[dict[str, list[dict]], dict[str, list[int]]]:
    """Both crawls as ``({"a": records, "b": records}, {"a": [down hours], "b": [...]})``.

    Records are ``{"url", "ts"}`` sorted by ``ts``; hours are absolute (``ts // 3600``).
    """
    if hours < 4:
        raise ValueError("need at least 4 hours (one outage per crawler, not first or last)")
    rng = random.Random(seed)
    pages = max(20, 3 * size * hours // sites)
    web = _web(rng, sites, pages)
    quarter = sites // 4
    coverage = {"a": list(range(0, sites - quarter)), "b": list(range(quarter, sites))}
    first_hour = start // 3600
    down_a, down_b = rng.sample(range(1, hours - 1), 2)
    down = {"a": [first_hour + down_a], "b": [first_hour + down_b]}
    crawls: dict[str, list[dict]] = {}
    for name, own_sites in coverage.items():
        crng = random.Random(f"{seed}-{name}")
        fetched: list[str] = []
        seen: set[str] = set()
        next_page = dict.fromkeys(own_sites, 0)  # per site: the most popular page not yet fetched
        records = []
        for h in range(hours):
            hour = first_hour + h
            if hour in down[name]:
                continue
            n = max(1, int(crng.gauss(size, size / 10)))
            urls = []
            for _ in range(n):
                if fetched and crng.random() < 0.2:  # re-crawl a page fetched before
                    urls.append(crng.choice(fetched))
                    continue
                site = crng.choice(own_sites)
                if next_page[site] >= pages:
                    continue
                # mostly the next popular page, sometimes a deeper one
                p = min(pages - 1, next_page[site] + int(crng.expovariate(0.5)))
                url = web[site][p]
                urls.append(url)
                if url not in seen:
                    seen.add(url)
                    fetched.append(url)
                while next_page[site] < pages and web[site][next_page[site]] in seen:
                    next_page[site] += 1
            stamps = sorted(crng.randrange(hour * 3600, hour * 3600 + 3600) for _ in urls)
            records += [{"url": u, "ts": t} for u, t in zip(urls, stamps, strict=True)]
        crawls[name] = records
    return crawls, down


def dumps(records: list[dict], increments: int, hours: int, start: int = START
          ) -> list[list[dict]]:
    """Cut time-ordered records into ``increments`` dumps at evenly spaced times."""
    span = hours * 3600
    cuts = [start + span * (j + 1) // increments for j in range(increments)]
    cuts[-1] = max(cuts[-1], max((r["ts"] for r in records), default=start) + 1)
    out: list[list[dict]] = [[] for _ in range(increments)]
    j = 0
    for r in records:
        while r["ts"] >= cuts[j]:
            j += 1
        out[j].append(r)
    return out


def generate(seed: int = 1, increments: int = 4, size: int = 150, hours: int = 9
             ) -> dict[str, list[list[dict]]]:
    """The increments of both crawlers: ``{"a": [dump 1, dump 2, …], "b": […]}``."""
    crawls, _ = crawl(seed, hours, size)
    return {name: dumps(recs, increments, hours) for name, recs in crawls.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="directory for the JSONL files")
    p.add_argument("--increments", type=int, default=4, help="dumps per crawler (default 4)")
    p.add_argument("--size", type=int, default=150,
                   help="pages per crawler per hour, about (default 150)")
    p.add_argument("--hours", type=int, default=9, help="hours of crawling (default 9)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    crawls, down = crawl(args.seed, args.hours, args.size)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, recs in crawls.items():
        for i, dump in enumerate(dumps(recs, args.increments, args.hours), 1):
            path = args.out / f"{name}-{i:04d}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in dump))
            print(f"{path}: {len(dump)} records")
    first = START // 3600
    print(f"hours {first}..{first + args.hours - 1}; crawler A down in hour {down['a'][0]}, "
          f"crawler B down in hour {down['b'][0]}")


if __name__ == "__main__":
    main()
