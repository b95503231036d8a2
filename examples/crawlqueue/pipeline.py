"""Incremental web crawl queue (CBP paper, section 1.1, Figure 1; section 4.4.1, Figure 10).

Each increment of the external input ``pages`` is a batch of newly crawled pages
``{url, site, links, crawled_at}``. The dataflow keeps in-link counts per URL and per site
and the set of crawled pages, and writes the next crawl queue::

    pages ─► extract ─► links ─► count (S) ─┬─► url_counts ──┐
      │                                      └─► site_counts ─┼─► merge (S) ─► candidates
      └──────────────────────────────────────────────────────┘   ─► score ─► scored
                                                                  ─► threshold ─► crawl_queue

- ``extract`` (record-wise): one ``{url, site}`` record per *distinct* link of a page
  (a page's duplicate links count once; ``site`` is the link's host).
- ``count`` (stateful, inner): every link record is routed to two groups, ``"u:" + url``
  and ``"s:" + site``; one state ``{key, inlinks}`` keeps both kinds of count. A URL group
  writes its new total to ``url_counts``, a site group to ``site_counts`` — only counts that
  changed in this increment.
- ``merge`` (stateful, inner, grouped by site, every flow ordered by url): its state is the
  set of crawled pages of the site ``{site, url}``; it adds this increment's ``pages`` and
  merge-joins the changed URL counts with it, emitting each changed URL that has *not* been
  crawled (up to and including this increment) as ``{url, site, url_inlinks,
  site_inlinks}`` with the site's current total.
- ``score`` (record-wise): ``score = url_inlinks + SITE_WEIGHT * site_inlinks`` (a double;
  ``SITE_WEIGHT`` is 0.001).
- ``threshold`` (record-wise): keeps records with ``score >= THRESHOLD`` → ``crawl_queue``.

The record-wise stages fuse into their groupwise neighbours (``extract`` into ``count``'s
map side, ``score`` and ``threshold`` into ``merge``'s emit side), as in Figure 10.

**What the queue contains.** Let ``L`` be the multiset of (page record, distinct link)
pairs over every page ingested so far, ``inlinks(u)`` the number of pairs whose link is
``u``, ``site_inlinks(s)`` the number whose link's host is ``s``, and ``C`` the set of
crawled page URLs so far. The ``crawl_queue`` increment written for increment *e* holds,
once each, every URL ``u`` that is a link of some page of increment *e*, with ``u`` not
in ``C``, and ``inlinks(u) + SITE_WEIGHT * site_inlinks(site(u)) >= THRESHOLD`` — with the counts
and ``C`` taken after increment *e*. (A URL whose own count did not change is not
re-emitted when only its site's count grows.)

Run with ``strata run examples/crawlqueue/pipeline.py --home DIR`` (see README.md).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from strata import Dataflow, Emitter, Input, State

THRESHOLD = 2.5
SITE_WEIGHT = 0.001

PAGES_SCHEMA = "url string, site string, links array<string>, crawled_at long"
LINKS_SCHEMA = "url string, site string"
URL_COUNTS_SCHEMA = "url string, site string, inlinks long"
SITE_COUNTS_SCHEMA = "site string, inlinks long"
COUNT_STATE_SCHEMA = "key string, inlinks long"  # key: "u:" + url or "s:" + site
CRAWLED_SCHEMA = "site string, url string"
CANDIDATES_SCHEMA = "url string, site string, url_inlinks long, site_inlinks long"
QUEUE_SCHEMA = "url string, site string, url_inlinks long, site_inlinks long, score double"


def site_of(url: str) -> str:
    """The host of ``https://host/path``."""
    return url.split("/")[2]


def score_of(url_inlinks: int, site_inlinks: int) -> float:
    return url_inlinks + SITE_WEIGHT * site_inlinks


# -- stages ------------------------------------------------------------------------------------
def extract_links(key: None, pages: Iterator[dict], *, out: Emitter) -> None:
    """Record-wise: a crawled page → one record per distinct link."""
    for page in pages:
        for link in dict.fromkeys(page["links"] or ()):
            out.write("links", {"url": link, "site": site_of(link)})


def link_keys(link: dict) -> set[str]:
    """Each link counts towards its URL and towards its site."""
    return {"u:" + link["url"], "s:" + link["site"]}


def count_inlinks(key: str, state: Iterator[dict], links: Iterator[dict], *,
                  out: Emitter) -> None:
    """Add this increment's links to the URL's (or site's) running count."""
    first = next(links, None)
    if first is None:  # not reachable with inner grouping
        for s in state:
            out.state(s)
        return
    new = 1 + sum(1 for _ in links)
    old = next(state, None)
    total = new + (old["inlinks"] if old is not None else 0)
    out.state({"key": key, "inlinks": total})
    if key.startswith("u:"):
        out.write("url_counts", {"url": first["url"], "site": first["site"], "inlinks": total})
    else:
        out.write("site_counts", {"site": first["site"], "inlinks": total})


def merge(site: str, crawled: Iterator[dict], url_counts: Iterator[dict],
          site_counts: Iterator[dict], pages: Iterator[dict], *, out: Emitter) -> None:
    """Per site: keep the crawled set, and emit changed counts of URLs not crawled yet.

    ``crawled`` (state), ``url_counts`` and ``pages`` are each ordered by url, so one
    merge walk over the three streams suffices.
    """
    site_total = next((r["inlinks"] for r in site_counts), 0)
    new_pages = _distinct_sorted(p["url"] for p in pages)
    old = (r["url"] for r in crawled)
    crawled_urls = _merge_sorted(old, new_pages)  # this site's crawled set, in url order
    for url in crawled_urls:
        out.state({"site": site, "url": url})
    for rec in url_counts:  # ordered by url; at most one record per url per epoch
        if rec["url"] not in crawled_urls:
            out.write("candidates", {"url": rec["url"], "site": site,
                                     "url_inlinks": rec["inlinks"],
                                     "site_inlinks": site_total})


def _distinct_sorted(urls: Iterator[str]) -> list[str]:
    out: list[str] = []
    for u in urls:
        if not out or out[-1] != u:
            out.append(u)
    return out


class _SortedSet(list):
    """A sorted list of distinct strings with ``in`` by binary search."""

    def __contains__(self, url: object) -> bool:
        i = bisect_left(self, url)
        return i < len(self) and self[i] == url


def _merge_sorted(a: Iterator[str], b: list[str]) -> _SortedSet:
    """Union of two url-ordered streams of distinct urls, in order."""
    out = _SortedSet()
    j = 0
    for u in a:
        while j < len(b) and b[j] < u:
            out.append(b[j])
            j += 1
        if j < len(b) and b[j] == u:
            j += 1
        out.append(u)
    out.extend(b[j:])
    return out


def score(key: None, candidates: Iterator[dict], *, out: Emitter) -> None:
    for r in candidates:
        out.write("scored", {**r, "score": score_of(r["url_inlinks"], r["site_inlinks"])})


def threshold(key: None, scored: Iterator[dict], *, out: Emitter) -> None:
    for r in scored:
        if r["score"] >= THRESHOLD:
            out.write("crawl_queue", r)


def build_dataflow() -> Dataflow:
    df = Dataflow("crawlqueue")
    pages = df.source("pages", PAGES_SCHEMA)
    df.stage("extract", extract_links, inputs=[pages], outputs={"links": LINKS_SCHEMA})
    df.stage(
        "count",
        count_inlinks,
        inputs=[Input("links", route_by=link_keys)],
        outputs={"url_counts": URL_COUNTS_SCHEMA, "site_counts": SITE_COUNTS_SCHEMA},
        state=State(COUNT_STATE_SCHEMA, route_by="key", grouping="inner"),
    )
    df.stage(
        "merge",
        merge,
        inputs=[Input("url_counts", route_by="site", order_by="url"),
                Input("site_counts", route_by="site"),
                Input(pages, route_by="site", order_by="url")],
        outputs={"candidates": CANDIDATES_SCHEMA},
        state=State(CRAWLED_SCHEMA, route_by="site", grouping="inner", order_by="url"),
    )
    df.stage("score", score, inputs=["candidates"], outputs={"scored": QUEUE_SCHEMA})
    df.stage("threshold", threshold, inputs=["scored"], outputs={"crawl_queue": QUEUE_SCHEMA})
    return df
