"""URLCount (CBP paper, Figure 3): count how often each URL was seen, incrementally.

One stateful stage. Its state holds ``{url, count}`` per URL; each epoch it adds the
new sightings and writes the changed counts to the ``counts`` flow.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from strata.model import Dataflow, Emitter, Input, State

URLS_SCHEMA = "url string"
COUNTS_SCHEMA = "url string, count long"


def count_urls(url: str, state: Iterator[dict], urls: Iterator[dict], *, out: Emitter) -> None:
    """Add this epoch's sightings of ``url`` to its stored count."""
    seen = sum(1 for _ in urls)
    prev = next(state, None)
    if seen == 0:  # outer grouping also calls unchanged URLs: keep them as they are
        if prev is not None:
            out.state(prev)
        return
    record = {"url": url, "count": seen + (prev["count"] if prev else 0)}
    out.state(record)
    out.write("counts", record)


def urlcount_dataflow(grouping: Literal["outer", "inner"] = "inner") -> Dataflow:
    """The URL-count dataflow: source ``urls`` → stage ``count`` → flow ``counts``."""
    df = Dataflow("urlcount")
    urls = df.source("urls", URLS_SCHEMA)
    df.stage(
        "count",
        count_urls,
        inputs=[Input(urls, route_by="url")],
        outputs={"counts": COUNTS_SCHEMA},
        state=State(COUNTS_SCHEMA, route_by="url", grouping=grouping),
    )
    return df
