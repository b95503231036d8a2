"""strata.testing (docs/testing.md): the reference and Spark routes agree on a dataflow
given as records, pandas and Arrow; a stage that behaves differently on Spark, or a wrong
expectation, fails ``assert_same`` with a message naming the flow and epoch; bad input
gets a clear error."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from pyspark import TaskContext

from strata import Dataflow, Input, State, StrataError
from strata.apps.urlcount import urlcount_dataflow
from strata.model.runnability import runnable_any
from strata.testing import (
    Result,
    assert_results_equal,
    assert_same,
    difference,
    run_reference,
    run_spark,
)
from tests.helpers import epochs_in

pytest_plugins = ["strata.testing.pytest_plugin"]  # the strata_spark fixture

INCREMENTS = [
    {"urls": [{"url": "a"}, {"url": "b"}, {"url": "a"}]},
    {"urls": pd.DataFrame({"url": ["a", "c"]})},
    {"urls": pa.table({"url": ["b"]})},
]


def test_agreeing_dataflow_passes_and_gives_its_outputs_and_state(spark, strata_spark):
    assert strata_spark is spark  # the plugin's fixture reuses the active session
    got = assert_same(urlcount_dataflow("inner"), INCREMENTS, strata_spark, num_partitions=2)
    assert got.name == "spark" and got.epochs("counts") == 3
    assert sorted(map(str, got.outputs["counts"][1])) == sorted(map(str, [
        {"url": "a", "count": 3}, {"url": "c", "count": 1}]))
    assert {r["url"]: r["count"] for r in got.state["count"]} == {"a": 3, "b": 2, "c": 1}
    assert len(got.records("counts")) == 5


def doubled_on_spark(url, state, urls, *, out):
    """Counts twice when run as a Spark task: a stage that the routes disagree on."""
    n = sum(1 for _ in urls) * (2 if TaskContext.get() is not None else 1)
    prev = next(state, None)
    rec = {"url": url, "count": n + (prev["count"] if prev else 0)}
    out.state(rec)
    out.write("counts", rec)


def test_a_stage_that_differs_on_spark_fails_naming_flow_and_epoch(spark):
    df = Dataflow("doubled")
    urls = df.source("urls", "url string")
    df.stage("count", doubled_on_spark, inputs=[Input(urls, route_by="url")],
             outputs={"counts": "url string, count long"},
             state=State("url string, count long", route_by="url"))
    with epochs_in(spark, "tasks"), pytest.raises(AssertionError) as e:
        assert_same(df, INCREMENTS[:1], spark)
    msg = str(e.value)
    assert "spark differs from reference: flow 'counts', epoch 1" in msg, msg
    assert "only reference has {'count': 1, 'url': 'b'}, {'count': 2, 'url': 'a'}; only " \
           "spark has {'count': 2, 'url': 'b'}, {'count': 4, 'url': 'a'}" in msg, msg


def test_a_wrong_expectation_fails_naming_its_epoch(spark):
    stage = urlcount_dataflow("inner").stages["count"]  # one stage: one epoch per increment
    want = run_reference(stage, INCREMENTS)
    assert want.outputs["counts"][2] == [{"url": "b", "count": 2}]
    assert_same(stage, INCREMENTS, spark, expected=want)
    want.outputs["counts"][2] = [{"url": "b", "count": 3}]
    with pytest.raises(AssertionError, match=r"flow 'counts', epoch 3: .*only reference has "
                                             r"\{'count': 3, 'url': 'b'\}; only spark has "
                                             r"\{'count': 2, 'url': 'b'\}"):
        assert_same(stage, INCREMENTS, spark, expected=want)


def test_differences_in_state_and_epoch_counts_are_named():
    a = Result({"o": [[{"k": 1}], []]}, {"s": [{"k": 1}, {"k": 1}]}, "reference")
    assert difference(a, Result({"o": [[{"k": 1}], []]}, {"s": [{"k": 1}, {"k": 1}]})) is None
    b = Result({"o": [[{"k": 1}], []]}, {"s": [{"k": 1}]}, "spark")
    assert difference(a, b) == ("state of stage 's' after the last epoch: 2 record(s) from "
                                "reference, 1 from spark; only reference has {'k': 1}")
    c = Result({"o": [[{"k": 1}]]}, a.state, "spark")
    assert difference(a, c) == ("flow 'o': reference has 2 increment(s) (epochs of its "
                                "producer), spark has 1")
    d = Result({"o": [[{"k": 1}], [{"k": 2}, {"k": 2}]]}, a.state, "spark")
    with pytest.raises(AssertionError, match=r"flow 'o', epoch 2: .*only spark has "
                                             r"\{'k': 2\} \(x2\)"):
        assert_results_equal(a, d)


@pytest.mark.spark  # run_spark starts a session before it refuses the home
def test_bad_input_gets_a_clear_error(tmp_path):
    df = urlcount_dataflow("inner")
    with pytest.raises(StrataError, match=r"increment 2 names flow 'pages', which is not one "
                                          r"of the source flows of urlcount \(urls\)"):
        run_reference(df, [{"urls": []}, {"pages": []}])
    with pytest.raises(StrataError, match=r"increment 1, flow 'urls', record 2 .*does not "
                                          r"fit the flow's schema"):
        run_reference(df, [{"urls": [{"url": "a"}, {"link": "b"}]}])
    (tmp_path / "x").write_text("taken")
    with pytest.raises(StrataError, match="is not empty"):
        run_spark(df, [], home=tmp_path)

    ruled = Dataflow("ruled")
    urls = ruled.source("urls", "url string")
    ruled.stage("any", lambda k, xs, *, out: None, inputs=[Input(urls, route_by="url")],
                runnable=runnable_any)
    with pytest.raises(StrataError, match="stage 'any' of dataflow 'ruled' has a runnable rule"):
        run_reference(ruled, [{"urls": [{"url": "a"}]}])
    # the stage alone runs: each increment is one epoch
    assert run_reference(ruled.stages["any"], [{"urls": [{"url": "a"}]}]).outputs == {}


def copy(key, xs, *, out):
    for r in xs:
        out.write("ys", r)


def test_records_are_what_the_flow_schema_makes_them():
    df = Dataflow("norm")
    xs = df.source("xs", "k long, x double")
    df.stage("copy", copy, inputs=[xs], outputs={"ys": "k long, x double"})
    got = run_reference(df, [{"xs": [{"k": 1, "x": 2}]}])
    assert got.outputs["ys"] == [[{"k": 1, "x": 2.0}]]
    assert isinstance(got.outputs["ys"][0][0]["x"], float)
