"""A dataflow exercising fusion, inner and outer state and framing, for crash tests."""

from __future__ import annotations

from strata import Dataflow, Input, State
from strata.apps.urlcount import count_urls
from strata.config import DRIVER_EPOCH_ROWS

# epochs as Spark tasks, so that "during-job" kills land inside a job (a small epoch in
# the driver may end first); tests.recovery.driver_pipeline runs them in the driver
SPARK_CONF = {DRIVER_EPOCH_ROWS.name: "-1"}


def extract(key, pages, *, out):
    for page in pages:
        for link in page["links"]:
            out.write("links", {"url": link})


def per_hour(url, state, events, *, out):
    events = list(events)
    prev = next(state, None)
    total = len(events) + (prev["total"] if prev else 0)
    out.state({"url": url, "total": total})
    if events:
        out.write("hourly", {"hour": events[0]["ts"] // 3600, "url": url, "n": len(events),
                             "total": total})


def hour_of(record, state):
    return record["ts"] // 3600, state


def build_dataflow() -> Dataflow:
    df = Dataflow("recovery")
    pages = df.source("pages", "url string, links array<string>")
    events = df.source("events", "ts long, url string")
    df.stage("extract", extract, inputs=[pages], outputs={"links": "url string"})
    df.stage("count", count_urls, inputs=[Input("links", route_by="url")],
             outputs={"counts": "url string, count long"},
             state=State("url string, count long", route_by="url", grouping="inner"))
    df.stage("per_hour", per_hour, inputs=[Input(events, route_by="url", frame_by=hour_of)],
             outputs={"hourly": "hour long, url string, n long, total long"},
             state=State("url string, total long", route_by="url", grouping="outer"))
    return df


def batches() -> list[tuple[str, list[dict], bool]]:
    """The increments to ingest, in order: (flow, records, end_frame)."""
    out = []
    for day in range(3):
        links = [f"https://s{(day * 7 + i) % 5}.example/p{(day * 13 + i * i) % 17}"
                 for i in range(30)]
        pages = [{"url": f"https://d{day}/{i}", "links": links[i % 10: i % 10 + 4]}
                 for i in range(12)]
        out.append(("pages", pages, False))
        events = [{"ts": day * 3600 + i * 97, "url": f"u{i % 6}"} for i in range(25)]
        out.append(("events", events, day == 2))
    return out
