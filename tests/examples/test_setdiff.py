"""examples/setdiff: per-hour symmetric set difference of two crawls, against plain sets."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from examples.setdiff.generate import START, crawl, dumps
from strata.controller import Controller
from strata.pipeline import load_dataflow

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "setdiff" / "pipeline.py"
HOURS, INCREMENTS, SIZE = 6, 3, 50


def reference(crawls: dict[str, list[dict]]) -> dict[int, tuple[set, set]]:
    """Per hour: (URLs first seen in the hour by A only, … by B only), with plain sets."""
    per_hour: dict[str, dict[int, set]] = {n: defaultdict(set) for n in crawls}
    for name, recs in crawls.items():
        for r in recs:
            per_hour[name][r["ts"] // 3600].add(r["url"])
    seen: set[str] = set()
    result = {}
    for hour in sorted(set(per_hour["a"]) | set(per_hour["b"])):
        a, b = per_hour["a"].get(hour, set()), per_hour["b"].get(hour, set())
        result[hour] = ((a - seen) - b, (b - seen) - a)
        seen |= a | b
    return result


def test_setdiff_per_hour_matches_python_sets(spark, tmp_path):
    crawls, down = crawl(seed=7, hours=HOURS, size=SIZE)
    incs = {n: dumps(recs, INCREMENTS, HOURS) for n, recs in crawls.items()}
    expected = reference(crawls)
    first = START // 3600
    assert sorted(expected) == list(range(first, first + HOURS))
    gap_b = down["b"][0]  # an hour crawler B produced nothing in
    assert not any(r["ts"] // 3600 == gap_b for r in crawls["b"]) and expected[gap_b][0]

    reports = []
    with Controller(tmp_path / "home", load_dataflow(str(PIPELINE)),
                    spark=spark, num_partitions=2) as c:
        for i in range(INCREMENTS):  # one dump of each crawler, then run what is runnable
            last = i == INCREMENTS - 1
            c.ingest("a", incs["a"][i], end_frame=last)
            c.ingest("b", incs["b"][i], end_frame=last)
            reports += c.run()
        got = {flow: [c.read_flow(flow, e).to_pylist() for e, _ in c.stored_increments(flow)]
               for flow in ("only_a", "only_b")}
        state = c.state_records("diff")

    # one epoch per hour, in hour order: the same hour of both crawls read together, and an
    # hour one crawler missed read alone (b: 0), not paired with that crawler's next hour
    per_hour = {n: Counter(r["ts"] // 3600 for r in recs) for n, recs in crawls.items()}
    assert [r.records_in for r in reports] == [
        {"a": per_hour["a"][h], "b": per_hour["b"][h]} for h in sorted(expected)]
    assert {"a": per_hour["a"][gap_b], "b": 0} in [r.records_in for r in reports]

    for flow, side in (("only_a", 0), ("only_b", 1)):
        assert len(got[flow]) == len(reports)  # one increment per epoch, possibly empty
        for inc in filter(None, got[flow]):  # each output increment is one hour's difference
            assert len({r["hour"] for r in inc}) == 1
            assert all(r["ts"] // 3600 == r["hour"] for r in inc)
        by_hour = defaultdict(list)
        for r in (r for inc in got[flow] for r in inc):
            by_hour[r["hour"]].append(r["url"])
        assert all(len(urls) == len(set(urls)) for urls in by_hour.values())
        assert {h: set(u) for h, u in by_hour.items()} == {
            h: sets[side] for h, sets in expected.items() if sets[side]}
    assert gap_b not in {r["hour"] for inc in got["only_b"] for r in inc}

    # the state is the set of URLs ever seen, each once
    everything = {r["url"] for recs in crawls.values() for r in recs}
    assert sorted(s["url"] for s in state) == sorted(everything)
