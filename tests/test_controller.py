"""The controller: framing, runnability, scheduling, bottlenecks, cycles and GC."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from strata import Dataflow, Input, State
from strata.controller import Controller, HomeLockedError, IngestError
from strata.model.runnability import lookup_table, prefer, runnable_any, synchronized
from strata.storage.increments import read_records


def _controller(tmp_path: Path, df: Dataflow, spark, **kw) -> Controller:
    return Controller(tmp_path / "home", df, spark=spark, num_partitions=2, **kw)


def _outputs(c: Controller, flow: str) -> list[list[dict]]:
    """The stored increments of a terminal flow, oldest first."""
    return [read_records(s.increment.files) for s in c.catalog.flow_increments(flow)]


# -- framing ------------------------------------------------------------------------------
def count_per_hour(url, events, *, out):
    events = list(events)
    out.write("hourly", {"hour": events[0]["ts"] // 3600, "url": url, "n": len(events)})


def hourly_dataflow() -> Dataflow:
    df = Dataflow("hourly")
    ev = df.source("events", "ts long, url string")
    df.stage("per_hour", count_per_hour,
             inputs=[Input(ev, route_by="url", frame_by=lambda r, s: (r["ts"] // 3600, s))],
             outputs={"hourly": "hour long, url string, n long"})
    return df


def test_hourly_frames_close_when_the_next_hour_arrives(spark, tmp_path):
    with _controller(tmp_path, hourly_dataflow(), spark) as c:
        c.ingest("events", [{"ts": 10, "url": "a"}, {"ts": 20, "url": "b"},
                            {"ts": 3700, "url": "a"}])
        reports = c.run()
        assert [r.records_in for r in reports] == [{"events": 2}]  # hour 1 is still open
        c.ingest("events", [{"ts": 3800, "url": "a"}, {"ts": 7300, "url": "c"}])
        c.run()
        c.ingest("events", [{"ts": 7400, "url": "c"}], end_frame=True)  # closes hour 2
        c.run()
        frames = _outputs(c, "hourly")
    assert [sorted((r["url"], r["n"]) for r in f) for f in frames] == [
        [("a", 1), ("b", 1)], [("a", 2)], [("c", 2)]]
    assert [f[0]["hour"] for f in frames] == [0, 1, 2]


# -- runnability ----------------------------------------------------------------------------
def set_difference(url, state, a, b, *, out):
    seen = next(state, None)
    in_a, in_b = any(True for _ in a), any(True for _ in b)
    if seen is not None:
        out.state(seen)
        return
    out.state({"url": url})
    if in_a and not in_b:
        out.write("only_a", {"url": url})
    elif in_b and not in_a:
        out.write("only_b", {"url": url})


def setdiff_dataflow() -> Dataflow:
    df = Dataflow("setdiff")
    hour = lambda r, s: (r["ts"] // 3600, s)  # noqa: E731
    a = df.source("a", "url string, ts long")
    b = df.source("b", "url string, ts long")
    df.stage("diff", set_difference,
             inputs=[Input(a, route_by="url", frame_by=hour), Input(b, route_by="url",
                                                                    frame_by=hour)],
             outputs={"only_a": "url string", "only_b": "url string"},
             state=State("url string", route_by="url"), runnable=synchronized("a", "b"))
    return df


def test_synchronized_inputs_read_the_same_hour_together(spark, tmp_path):
    with _controller(tmp_path, setdiff_dataflow(), spark) as c:
        # crawler A saw hours 0 and 1; crawler B produced nothing in hour 0
        c.ingest("a", [{"url": "x", "ts": 1}, {"url": "y", "ts": 2}, {"url": "z", "ts": 3601}],
                 end_frame=True)
        c.ingest("b", [{"url": "z", "ts": 3605}, {"url": "w", "ts": 3700}], end_frame=True)
        reports = c.run()
        only_a = [r["url"] for f in _outputs(c, "only_a") for r in f]
        only_b = [r["url"] for f in _outputs(c, "only_b") for r in f]
    # hour 0 from A is read alone (B's first frame is hour 1), then hour 1 of both together
    assert [r.records_in for r in reports] == [{"a": 2, "b": 0}, {"a": 1, "b": 2}]
    assert sorted(only_a) == ["x", "y"] and only_b == ["w"]


def tally(key, *inputs, out):
    out.write("seen", {"flow": key, "n": sum(1 for i in inputs for _ in i)})


def test_prefer_reads_queries_four_times_as_often(spark, tmp_path):
    df = Dataflow("cube")
    q = df.source("queries", "id long")
    u = df.source("updates", "id long")
    df.stage("cube", tally, inputs=[Input(q, route_by=lambda r: "q"),
                                    Input(u, route_by=lambda r: "u")],
             outputs={"seen": "flow string, n long"},
             runnable=prefer({"queries": 4, "updates": 1}))
    with _controller(tmp_path, df, spark) as c:
        for i in range(6):
            c.ingest("queries", [{"id": i}])
            c.ingest("updates", [{"id": i}])
        reports = c.run(max_epochs=5)
    read = Counter(f for r in reports for f, n in r.records_in.items() if n)
    assert read == {"queries": 4, "updates": 1}


def enrich(key, table, stream, *, out):
    names = [t["name"] for t in table]
    for s in stream:
        out.write("joined", {"id": s["id"], "name": names[0] if names else "?"})


def test_read_without_remove_keeps_the_lookup_table(spark, tmp_path):
    df = Dataflow("lookup")
    t = df.source("table", "id long, name string")
    s = df.source("stream", "id long")
    df.stage("enrich", enrich, inputs=[Input(t, route_by="id"), Input(s, route_by="id")],
             outputs={"joined": "id long, name string"}, runnable=lookup_table("table", "stream"))
    with _controller(tmp_path, df, spark) as c:
        c.ingest("table", [{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])
        for batch in ([1], [2, 1], [3]):
            c.ingest("stream", [{"id": i} for i in batch])
        reports = c.run()
        joined = [sorted((r["id"], r["name"]) for r in f) for f in _outputs(c, "joined")]
        table_queue = c.catalog.queue("table", "enrich")
        stream_queue = c.catalog.queue("stream", "enrich")
    assert len(reports) == 3
    assert joined == [[(1, "one")], [(1, "one"), (2, "two")], [(3, "?")]]
    assert len(table_queue) == 1 and not stream_queue  # the table is still there


# -- scheduling ------------------------------------------------------------------------------
def relay(key, *inputs, out):
    for i in inputs:
        for r in i:
            out.write(r["to"], r)


def test_scheduler_is_fair_and_skips_bottlenecked_stages(spark, tmp_path):
    df = Dataflow("sched")
    s1_in = df.source("s1_in", "to string")
    s3_in = df.source("s3_in", "to string")
    gate = df.source("gate", "to string")
    df.stage("s1", relay, inputs=[s1_in], outputs={"mid": "to string"})
    df.stage("s2", relay, inputs=["mid", gate], outputs={"done": "to string"})
    df.stage("s3", relay, inputs=[s3_in], outputs={"other": "to string"})
    order = []
    with _controller(tmp_path, df, spark, fuse=False) as c:
        for _ in range(3):
            c.ingest("s1_in", [{"to": "mid"}])
            c.ingest("s3_in", [{"to": "other"}])
        c.run(on_epoch=lambda r: order.append(r.stage))
    # s1 runs first (oldest arrival), then its output waits for the gate: s1 is a
    # bottleneck and s3 runs while it can; s1 drains its input only once s3 is done.
    assert order == ["s1", "s3", "s3", "s3", "s1", "s1"]


def countdown(key, start, ticks, *, out):
    for r in (*start, *ticks):
        out.write("trace", {"n": r["n"]})
        if r["n"] > 0:
            out.write("ticks", {"n": r["n"] - 1})


def test_cyclic_dataflow_stops_by_itself(spark, tmp_path):
    df = Dataflow("loop")
    start = df.source("start", "n long")
    ticks = df.flow("ticks", "n long")
    df.stage("countdown", countdown, inputs=[start, ticks],
             outputs=[ticks, df.flow("trace", "n long")], runnable=runnable_any)
    with _controller(tmp_path, df, spark) as c:
        c.ingest("start", [{"n": 3}])
        reports = c.run()
        trace = [r["n"] for f in _outputs(c, "trace") for r in f]
    assert len(reports) == 4 and trace == [3, 2, 1, 0]


def test_consumed_increments_are_garbage_collected(spark, tmp_path):
    from strata.apps.urlcount import urlcount_dataflow

    with _controller(tmp_path, urlcount_dataflow(), spark) as c:
        c.ingest("urls", [{"url": "a"}, {"url": "b"}])
        c.ingest("urls", [{"url": "a"}])
        c.run()
        incoming = [p for p in (tmp_path / "home" / "incoming").rglob("*.parquet")]
        ingested = c.catalog.flow_increments("urls")
        counts = _outputs(c, "counts")
    assert incoming == [] and ingested == []  # read and removed, so deleted
    assert [sorted((r["url"], r["count"]) for r in f) for f in counts] == [
        [("a", 1), ("b", 1)], [("a", 2)]]  # terminal outputs are kept


def test_second_controller_on_the_same_home_fails_at_once(spark, tmp_path):
    from strata.apps.urlcount import urlcount_dataflow

    with _controller(tmp_path, urlcount_dataflow(), spark), pytest.raises(
            HomeLockedError, match="in use by another controller"):
        _controller(tmp_path, urlcount_dataflow(), spark).lock()


def test_bad_ingest_is_rejected_whole(spark, tmp_path):
    from strata.apps.urlcount import urlcount_dataflow

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"url": "a"}\n{"url": "b"}\n{"url": 7}\n')
    with _controller(tmp_path, urlcount_dataflow(), spark) as c:
        with pytest.raises(IngestError, match="line 3"):
            c.ingest("urls", [bad])
        assert c.catalog.flow_increments("urls") == []
        assert c.run() == []


def test_flows_read_as_arrow_pandas_and_spark(spark, tmp_path):
    from strata.apps.urlcount import urlcount_dataflow

    with _controller(tmp_path, urlcount_dataflow(), spark) as c:
        c.ingest("urls", [{"url": "a"}, {"url": "b"}, {"url": "a"}])
        c.ingest("urls", [{"url": "b"}])
        c.run()
        assert [e for e, _ in c.stored_increments("counts")] == [1, 2]
        latest = c.read_flow("counts", epoch=2).to_pandas()
        everything = c.flow_dataframe("counts").orderBy("url", "count").collect()
        state = sorted((r["url"], r["count"]) for r in c.state_records("count"))
    assert latest.to_dict("records") == [{"url": "b", "count": 2}]
    assert [(r["url"], r["count"]) for r in everything] == [("a", 2), ("b", 1), ("b", 2)]
    assert state == [("a", 2), ("b", 2)]


def split_even_odd(key, numbers, *, out):
    for r in numbers:
        out.write("evens" if r["n"] % 2 == 0 else "odds", r)


def pair_up(key, evens, odds, *, out):
    out.write("pairs", {"evens": sum(1 for _ in evens), "odds": sum(1 for _ in odds)})


def test_empty_increments_keep_stages_in_step(spark, tmp_path):
    """An empty output increment is delivered (RunnableAll waits for one per input)."""
    df = Dataflow("step")
    nums = df.source("numbers", "n long")
    df.stage("split", split_even_odd, inputs=[Input(nums, route_by="n")],
             outputs={"evens": "n long", "odds": "n long"})
    df.stage("pair", pair_up, inputs=[Input("evens", route_by=lambda r: 0),
                                      Input("odds", route_by=lambda r: 0)],
             outputs={"pairs": "evens long, odds long"})
    with _controller(tmp_path, df, spark) as c:
        c.ingest("numbers", [{"n": 2}, {"n": 4}])  # no odd numbers: 'odds' is empty
        c.ingest("numbers", [{"n": 1}, {"n": 6}])
        c.run()
        pairs = _outputs(c, "pairs")
    assert pairs == [[{"evens": 2, "odds": 0}], [{"evens": 1, "odds": 1}]]
