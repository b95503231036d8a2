"""Incremental web crawl queue (CBP paper, section 1.1, Figure 1; section 4.4.1, Figure 10).

Each increment of the external input ``pages`` is a batch of newly crawled pages
``{url, site, links, crawled_at}``. The dataflow keeps in-link counts per URL and per site
and the set of crawled pages, and writes the next crawl queue::

    pages ──► extract ─► links ─► count (S) ─┬─► url_counts ─┐
      │                                       │               ├─► crawled (S) ─► uncrawled ─┐
      └───────────────────────────────────────┼───────────────┘                             │
                                              └─► site_counts ─────────────────► merge ◄────┘
    merge ─► candidates ─► score ─► scored ─► threshold ─► crawl_queue

- ``extract`` (record-wise): one ``{url, site}`` record per *distinct* link of a page
  (a page's duplicate links count once; ``site`` is the link's host).
- ``count`` (stateful, inner): every link record is routed to two groups, ``"u:" + url``
  and ``"s:" + site``; one state ``{key, inlinks}`` keeps both kinds of count. A URL group
  writes its new total to ``url_counts``, a site group to ``site_counts`` — only counts that
  changed in this increment.
- ``crawled`` (stateful, inner, grouped by url): its state is the set of crawled pages
  ``{url}``, one record per page; a URL group adds the page if this increment crawled it
  and passes its changed count on to ``uncrawled`` if the page was never crawled (up to
  and including this increment). Each epoch touches only the URLs of the increment.
- ``merge`` (inner, grouped by site, no state): adds the site's current total to each
  uncrawled URL, as ``{url, site, url_inlinks, site_inlinks}``. A URL's count changes
  only through a link to it, which changes its site's count too, so this epoch's
  ``site_counts`` holds the total of every site ``merge`` sees.
- ``score`` (record-wise): ``score = url_inlinks + SITE_WEIGHT * site_inlinks`` (a double;
  ``SITE_WEIGHT`` is 0.001).
- ``threshold`` (record-wise): keeps records with ``score >= THRESHOLD`` → ``crawl_queue``.

The record-wise stages fuse into their groupwise neighbours (``extract`` into ``count``'s
map side, ``score`` and ``threshold`` into ``merge``'s emit side), as in Figure 10. Earlier
versions kept the crawled set per site in ``merge``, so every increment read and rewrote
the crawled pages of every site it touched (most of them); keyed by URL, the state an
increment reads and writes is proportional to the increment.

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

from collections.abc import Iterator

from strata import Dataflow, Emitter, Input, State

THRESHOLD = 2.5
SITE_WEIGHT = 0.001

PAGES_SCHEMA = "url string, site string, links array<string>, crawled_at long"
LINKS_SCHEMA = "url string, site string"
URL_COUNTS_SCHEMA = "url string, site string, inlinks long"
SITE_COUNTS_SCHEMA = "site string, inlinks long"
COUNT_STATE_SCHEMA = "key string, inlinks long"  # key: "u:" + url or "s:" + site
CRAWLED_SCHEMA = "url string"
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


def mark_crawled(url: str, crawled: Iterator[dict], url_counts: Iterator[dict],
                 pages: Iterator[dict], *, out: Emitter) -> None:
    """Per URL: keep it in the crawled set once crawled; pass its changed count on while
    it is not crawled."""
    if next(crawled, None) is not None or next(pages, None) is not None:
        out.state({"url": url})  # a called group keeps exactly what it writes
        return
    for rec in url_counts:  # at most one: the URL's new total
        out.write("uncrawled", rec)


def merge(site: str, uncrawled: Iterator[dict], site_counts: Iterator[dict], *,
          out: Emitter) -> None:
    """Per site: each uncrawled URL with a changed count, with the site's current total."""
    totals = [r["inlinks"] for r in site_counts]
    for rec in uncrawled:
        if not totals:  # not reachable: a URL's count changes only with its site's
            raise ValueError(f"no site count for {site} in this increment")
        out.write("candidates", {"url": rec["url"], "site": site,
                                 "url_inlinks": rec["inlinks"], "site_inlinks": totals[0]})


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
        "crawled",
        mark_crawled,
        inputs=[Input("url_counts", route_by="url"), Input(pages, route_by="url")],
        outputs={"uncrawled": URL_COUNTS_SCHEMA},
        state=State(CRAWLED_SCHEMA, route_by="url", grouping="inner"),
    )
    df.stage(
        "merge",
        merge,
        inputs=[Input("uncrawled", route_by="site"), Input("site_counts", route_by="site")],
        outputs={"candidates": CANDIDATES_SCHEMA},
    )
    df.stage("score", score, inputs=["candidates"], outputs={"scored": QUEUE_SCHEMA})
    df.stage("threshold", threshold, inputs=["scored"], outputs={"crawl_queue": QUEUE_SCHEMA})
    return df
