"""Symmetric set difference of two web crawls, per hour (CBP paper, section 2.2, Figure 4).

Two experimental crawlers A and B each append ``{url, ts}`` records. For every hour of
crawling the dataflow reports the URLs *first seen* in that hour by exactly one of the
crawlers::

    a ─(frame: hour)─┐                      ┌─► only_a  {hour, url, ts}
                     ├─► diff (state: urls) ─┤
    b ─(frame: hour)─┘   synchronized(a, b) └─► only_b  {hour, url, ts}

- ``frame_by`` cuts each crawl into one increment per hour (``ts // 3600``); an hour
  becomes readable when the crawler's next hour starts or the ingest closes the frame.
- ``synchronized("a", "b")``: the stage runs only when both crawls have a complete hour;
  equal hours are read together, otherwise only the smaller one is read alone (the other
  crawler produced nothing that hour), so a crawler outage does not desynchronize them.
- The state is the set of URLs ever seen (``{url, hour, by}``, routed by url) with *inner*
  grouping: an epoch reads only the state of the URLs crawled in that hour.

Run with ``strata run examples/setdiff/pipeline.py --home DIR`` (see README.md).
"""

from __future__ import annotations

from collections.abc import Iterator

from strata import Dataflow, Emitter, Input, State
from strata.model.runnability import synchronized

CRAWL_SCHEMA = "url string, ts long"
ONLY_SCHEMA = "hour long, url string, ts long"  # hour = ts // 3600; ts = first sighting
SEEN_SCHEMA = "url string, hour long, by string"  # first hour seen, and by "a", "b" or "both"


def by_hour(record: dict, framing_state: object) -> tuple[int, object]:
    """Framing: one increment per hour of crawling."""
    return record["ts"] // 3600, framing_state


def set_difference(url: str, seen: Iterator[dict], a: Iterator[dict], b: Iterator[dict], *,
                   out: Emitter) -> None:
    """SetDiff_T: called for each URL crawled this hour (inner grouping with the state)."""
    previous = next(seen, None)
    if previous is not None:  # reported before, or in the intersection: keep it, report nothing
        out.state(previous)
        return
    a_ts = [r["ts"] for r in a]
    b_ts = [r["ts"] for r in b]
    if not a_ts and not b_ts:  # not reachable with inner grouping; harmless otherwise
        return
    first = min(a_ts + b_ts)
    by = "both" if a_ts and b_ts else ("a" if a_ts else "b")
    out.state({"url": url, "hour": first // 3600, "by": by})
    if by == "a":
        out.write("only_a", {"hour": first // 3600, "url": url, "ts": first})
    elif by == "b":
        out.write("only_b", {"hour": first // 3600, "url": url, "ts": first})


def build_dataflow() -> Dataflow:
    df = Dataflow("setdiff")
    a = df.source("a", CRAWL_SCHEMA)
    b = df.source("b", CRAWL_SCHEMA)
    df.stage(
        "diff",
        set_difference,
        inputs=[Input(a, route_by="url", frame_by=by_hour),
                Input(b, route_by="url", frame_by=by_hour)],
        outputs={"only_a": ONLY_SCHEMA, "only_b": ONLY_SCHEMA},
        state=State(SEEN_SCHEMA, route_by="url", grouping="inner"),
        runnable=synchronized("a", "b"),
    )
    return df
