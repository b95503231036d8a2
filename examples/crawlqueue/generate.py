"""Generate increments of newly crawled web pages for the crawl-queue example.

The web is a fixed, seeded graph: ``sites`` hosts whose popularity follows a Zipf law;
each page ``https://siteN.example.com/p/K`` has 5 to 40 distinct links (fixed per URL), 40%
to its own site and the rest to a site drawn by popularity; within a site the page index
is Pareto-distributed (the home page ``/p/0`` gets about half of a site's links), so the
in-degree of pages follows a power law.

Increment 1 crawls ``size`` seed pages (home pages, then random ones); every later
increment crawls ``size`` pages drawn (uniformly, seeded) from the frontier: pages linked
from pages crawled earlier but not crawled yet (topped up with fresh random pages if the
frontier is short). No page is crawled twice. Records: ``{"url", "site", "links",
"crawled_at"}``; files ``OUT/pages-0001.jsonl``, … one record per line.

    python examples/crawlqueue/generate.py --out /tmp/crawl-data --increments 4 --size 500
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from pathlib import Path

START = 1_709_251_200  # 2024-03-01 00:00:00 UTC
SAME_SITE = 0.4


class Web:
    """A deterministic web graph: the links of any URL are a function of (seed, url)."""

    def __init__(self, seed: int, sites: int) -> None:
        self.seed = seed
        self.hosts = [f"site{i}.example.com" for i in range(sites)]
        self.cum = list(itertools.accumulate(1 / (i + 1) for i in range(sites)))

    def url(self, site: int, page: int) -> str:
        return f"https://{self.hosts[site]}/p/{page}"

    def _page(self, rng: random.Random) -> int:
        return int(rng.paretovariate(0.6)) - 1

    def random_url(self, rng: random.Random) -> str:
        site = rng.choices(range(len(self.hosts)), cum_weights=self.cum)[0]
        return self.url(site, self._page(rng))

    def links(self, url: str) -> list[str]:
        rng = random.Random(f"{self.seed}:{url}")
        host = url.split("/")[2]
        site = int(host[4:host.index(".")])
        n = min(40, 5 + int(rng.expovariate(1 / 7)))
        out: dict[str, None] = {}
        while len(out) < n:
            s = site if rng.random() < SAME_SITE else rng.choices(
                range(len(self.hosts)), cum_weights=self.cum)[0]
            link = self.url(s, self._page(rng))
            if link != url:
                out[link] = None
        return list(out)


def _take(url: str, crawled: set[str], chosen: dict[str, None]) -> None:
    if url not in crawled:
        chosen[url] = None


def generate(seed: int = 1, increments: int = 4, size: int = 500,
             sites: int | None = None) -> list[list[dict]]:
    """``increments`` batches of ``size`` newly crawled pages each (see the module doc)."""
    sites = sites or max(20, size // 10)
    web = Web(seed, sites)
    rng = random.Random(seed)
    crawled: set[str] = set()
    frontier: list[str] = []  # discovered, not crawled (may hold crawled ones: skipped)
    known: set[str] = set()
    batches = []
    for inc in range(increments):
        chosen: dict[str, None] = {}  # this increment's pages, in crawl order
        seeds = [web.url(s, 0) for s in range(min(sites, size))] if inc == 0 else []
        for u in seeds:
            _take(u, crawled, chosen)
        while len(chosen) < size and frontier:
            i = rng.randrange(len(frontier))
            frontier[i], frontier[-1] = frontier[-1], frontier[i]
            _take(frontier.pop(), crawled, chosen)
        while len(chosen) < size:
            _take(web.random_url(rng), crawled, chosen)
        batch = list(chosen)
        records = []
        for j, u in enumerate(batch):
            links = web.links(u)
            crawled.add(u)
            for link in links:
                if link not in known:
                    known.add(link)
                    frontier.append(link)
            records.append({"url": u, "site": u.split("/")[2], "links": links,
                            "crawled_at": START + inc * 86_400 + j})
        batches.append(records)
    return batches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="directory for the JSONL files")
    p.add_argument("--increments", type=int, default=4, help="number of increments (default 4)")
    p.add_argument("--size", type=int, default=500, help="pages per increment (default 500)")
    p.add_argument("--sites", type=int, default=None, help="number of sites (default size/10)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for i, batch in enumerate(generate(args.seed, args.increments, args.size, args.sites), 1):
        path = args.out / f"pages-{i:04d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch))
        print(f"{path}: {len(batch)} pages, {sum(len(r['links']) for r in batch)} links")


if __name__ == "__main__":
    main()
