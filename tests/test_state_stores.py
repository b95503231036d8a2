"""Direct mode over both state stores on Spark: a home keeps the store it began with."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from strata.apps.urlcount import urlcount_dataflow
from strata.model import Dataflow, Input, State
from strata.model.errors import SchemaError
from strata.physical.translate import TranslateProgram, TranslateState
from strata.storage.manifest import StateDir
from tests.dataflow_driver import SparkRunner, multiset


def batches(epochs: int, seed: int = 3) -> list[list[dict]]:
    rng = random.Random(seed)
    return [[{"url": f"u{rng.randrange(40)}"} for _ in range(60)] for _ in range(epochs)]


def run_counts(runner: SparkRunner, stage, epochs, seen: Counter | None = None) -> Counter:
    """Run the epochs; each one's changed counts are checked against ``seen`` (the counts
    before them, updated in place)."""
    seen = Counter() if seen is None else seen
    for batch in epochs:
        out = runner.run(stage, {"urls": batch})
        seen.update(r["url"] for r in batch)
        # the changed counts are the running totals of this epoch's URLs
        assert multiset(out["counts"]) == multiset(
            [{"url": u, "count": seen[u]} for u in {r["url"] for r in batch}])
    return seen


def url_stage(translate, state_schema: str):
    """Stage ``count``: ``translate`` per URL, output ``counts`` of ``url string, count
    long`` and an inner-grouped state of ``state_schema``, routed by the URL."""
    df = Dataflow("same-records")
    urls = df.source("urls", "url string")
    df.stage("count", translate, inputs=[Input(urls, route_by="url")],
             outputs={"counts": "url string, count long"},
             state=State(state_schema, route_by="url", grouping="inner"))
    return df.stages["count"]


def test_an_indexed_home_stays_indexed_under_a_columnar_runner(spark, tmp_path):
    df = urlcount_dataflow("outer")
    stage = df.stages["count"]
    data = batches(5)
    first = SparkRunner(spark, str(tmp_path), "direct-indexed", 2)
    seen = run_counts(first, stage, data[:2])
    later = SparkRunner(spark, str(tmp_path), "direct", 2)  # default: the columnar store
    later._seq = 100
    run_counts(later, stage, data[2:], seen)
    snap = later.runner.committed(stage)
    assert TranslateState.from_json(snap.state).store.format == "indexed"
    want = [{"url": u, "count": c} for u, c in seen.items()]
    assert multiset(later.runner.state_records(stage)) == multiset(want)
    summary = TranslateProgram.summary(later.runner.state_dir(stage).layout, snap)
    assert summary is not None and summary.startswith("direct mode, indexed store:")


def test_manifests_from_before_the_columnar_store_read_as_indexed(spark, tmp_path):
    df = urlcount_dataflow("inner")
    stage = df.stages["count"]
    runner = SparkRunner(spark, str(tmp_path), "direct-indexed", 2)
    seen = run_counts(runner, stage, batches(2, seed=5))
    layout = runner.runner.home.stage("count")
    snap = StateDir(layout).current()
    old = {k: v for k, v in snap.state.items() if k != "store"}  # as written before
    assert TranslateState.from_json(json.loads(json.dumps(old))).store.format == "indexed"
    assert multiset(runner.runner.state_records(stage)) == multiset(
        [{"url": u, "count": c} for u, c in seen.items()])


def test_a_new_home_gets_the_columnar_store_keyed_by_the_route_column(spark, tmp_path):
    df = urlcount_dataflow("inner")
    stage = df.stages["count"]
    runner = SparkRunner(spark, str(tmp_path), "direct", 2)
    seen = run_counts(runner, stage, batches(4, seed=7))
    snap = runner.runner.committed(stage)
    spec = TranslateState.from_json(snap.state).store
    assert (spec.format, spec.column) == ("columns", "url")
    files = [p.name for p in (tmp_path / "state" / "count").rglob("*") if p.is_file()
             and p.parent.name.startswith("p0")]
    assert files and all(f.endswith(".arrow") for f in files)
    assert multiset(runner.runner.state_records(stage)) == multiset(
        [{"url": u, "count": c} for u, c in seen.items()])


def test_state_written_as_an_output_keeps_its_own_schema(spark, tmp_path):
    """translate keeps in state the very dicts it writes to an output: the state's table is
    made from the output's only when the schemas agree (here they do not: the state's
    count is a double), so each flow reads back as its own schema makes the records."""
    def count(url, state, urls, *, out):
        prev = next(state, None)
        record = {"url": url, "count": sum(1 for _ in urls) + (prev["count"] if prev else 0)}
        out.write("counts", record)
        out.state(record)

    stage = url_stage(count, "url string, count double")
    for where in ("driver", "tasks"):
        runner = SparkRunner(spark, str(tmp_path / where), f"direct@{where}", 2)
        seen: Counter = Counter()
        for batch in batches(3, seed=11):
            out = runner.run(stage, {"urls": batch})
            seen.update(r["url"] for r in batch)
            assert all(type(r["count"]) is int for r in out["counts"])
            assert multiset(out["counts"]) == multiset(
                [{"url": u, "count": seen[u]} for u in {r["url"] for r in batch}])
        state = runner.runner.state_records(stage)
        assert state and all(type(r["count"]) is float for r in state), where
        assert multiset(state) == multiset([{"url": u, "count": float(c)}
                                            for u, c in seen.items()])


def test_a_state_record_too_big_for_the_state_schema_is_named_though_the_output_took_it(
        spark, tmp_path):
    """The same dict written to an output of ``count long`` and kept in a state of ``count
    int``: a count past int32 fits the output, not the state, and the epoch stops with a
    SchemaError naming the state flow, the key and the record, with nothing committed."""
    def count(url, state, urls, *, out):
        record = {"url": url, "count": 2**40 if url == "big" else sum(1 for _ in urls)}
        out.write("counts", record)
        out.state(record)

    stage = url_stage(count, "url string, count int")
    for where in ("driver", "tasks"):
        runner = SparkRunner(spark, str(tmp_path / where), f"direct@{where}", 2)
        runner.run(stage, {"urls": [{"url": "a"}, {"url": "b"}]})
        with pytest.raises(SchemaError) as caught:
            runner.run(stage, {"urls": [{"url": "a"}, {"url": "big"}]})
        error = caught.value
        assert (error.stage, error.flow, error.key, error.epoch) == ("count", "state", "big", 2)
        assert error.record == {"url": "big", "count": 2**40}
        assert multiset(runner.runner.state_records(stage)) == multiset(
            [{"url": "a", "count": 1}, {"url": "b", "count": 1}]), where
