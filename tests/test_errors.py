"""Bad input stops an epoch with a clear error and leaves committed state untouched."""

from __future__ import annotations

import pytest

from strata import (
    Dataflow,
    DataflowError,
    Input,
    OutputError,
    RouteError,
    SchemaError,
    State,
    TranslateError,
)
from strata.apps.urlcount import count_urls, urlcount_dataflow
from strata.physical.runner import SparkStageRunner
from strata.reference import ReferenceExecutor
from tests.helpers import increment

MODES = ["direct", "blackbox"]


def _fragile(url, state, urls, *, out):
    recs = list(urls)
    if url == "bad":
        raise ValueError("cannot count 'bad'")
    count_urls(url, state, iter(recs), out=out)


def _one_stage(translate, *, state_schema="url string, count long", out_schema=None):
    df = Dataflow("t")
    urls = df.source("urls", "url string")
    st = df.stage("count", translate, inputs=[Input(urls, route_by="url")],
                  outputs={"counts": out_schema or "url string, count long"},
                  state=State(state_schema, route_by="url", grouping="inner"))
    return df, urls, st


@pytest.mark.parametrize("mode", MODES)
def test_translate_exception_names_stage_epoch_key_and_keeps_state(spark, tmp_path, mode):
    df, urls, st = _one_stage(_fragile)
    runner = SparkStageRunner(str(tmp_path), spark, mode=mode, num_partitions=2)
    runner.run_epoch(st, {"urls": increment(tmp_path, urls, [{"url": "a"}, {"url": "b"}])})
    before = sorted(map(str, runner.state_records(st)))
    bad = increment(tmp_path, urls, [{"url": "a"}, {"url": "bad"}])
    with pytest.raises(TranslateError) as e:
        runner.run_epoch(st, {"urls": bad})
    msg = str(e.value)
    for part in ("stage 'count'", "epoch 2", "key 'bad'", "cannot count 'bad'", "{'url': 'bad'}"):
        assert part in msg, msg
    assert e.value.key == "bad" and e.value.epoch == 2
    assert "ValueError" in e.value.cause
    assert runner.committed(st).epoch == 1
    assert sorted(map(str, runner.state_records(st))) == before
    # the failed epoch left nothing behind that a later epoch could pick up
    good = runner.run_epoch(st, {"urls": increment(tmp_path, urls, [{"url": "a"}])})
    assert good.epoch == 2
    assert {r["url"]: r["count"] for r in runner.state_records(st)} == {"a": 2, "b": 1}


@pytest.mark.parametrize("mode", MODES)
def test_route_error_names_flow_and_record(spark, tmp_path, mode):
    df = Dataflow("t")
    urls = df.source("urls", "url string")
    st = df.stage("count", count_urls,
                  inputs=[Input(urls, route_by=lambda r: r["url"].split("/")[2])],
                  outputs={"counts": "url string, count long"},
                  state=State("url string, count long", route_by="url"))
    runner = SparkStageRunner(str(tmp_path), spark, mode=mode, num_partitions=2)
    inc = increment(tmp_path, urls, [{"url": "http://x/1"}, {"url": "no-slashes"}])
    with pytest.raises(RouteError) as e:
        runner.run_epoch(st, {"urls": inc})
    msg = str(e.value)
    assert "flow 'urls'" in msg and "no-slashes" in msg and "epoch 1" in msg, msg
    assert runner.committed(st).epoch == 0
    with pytest.raises(RouteError, match="no-slashes"):
        ReferenceExecutor().run(st, {"urls": [{"url": "no-slashes"}]})


def _wrong_type(url, state, urls, *, out):
    out.write("counts", {"url": url, "count": "many"})
    out.state({"url": url, "count": 1})


def _wrong_state(url, state, urls, *, out):
    out.state({"url": url, "cnt": 1})


def _undeclared(url, state, urls, *, out):
    out.write("totals", {"url": url})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("translate", "error", "parts"),
    [
        (_wrong_type, SchemaError, ["flow 'counts'", "key 'k'", "'many'"]),
        (_wrong_state, SchemaError, ["flow 'state'", "key 'k'", "missing ['count']"]),
        (_undeclared, OutputError, ["'totals'", "key 'k'", "declared"]),
    ],
)
def test_bad_output_is_reported_with_key(spark, tmp_path, mode, translate, error, parts):
    df, urls, st = _one_stage(translate)
    runner = SparkStageRunner(str(tmp_path), spark, mode=mode, num_partitions=2)
    with pytest.raises(error) as e:
        runner.run_epoch(st, {"urls": increment(tmp_path, urls, [{"url": "k"}])})
    for p in parts:
        assert p in str(e.value), str(e.value)
    with pytest.raises(error):
        ReferenceExecutor().run(st, {"urls": [{"url": "k"}]})
    assert runner.committed(st).epoch == 0
    assert not list((tmp_path / "flows").glob("*/*/*.parquet"))


def test_unknown_input_flow_is_rejected(spark, tmp_path):
    df = urlcount_dataflow()
    runner = SparkStageRunner(str(tmp_path), spark, num_partitions=2)
    with pytest.raises(DataflowError, match="no input flow 'pages'"):
        runner.run_epoch(df.stages["count"], {"pages": []})


def test_mode_switch_on_existing_state_is_refused(spark, tmp_path):
    df = urlcount_dataflow()
    st = df.stages["count"]
    SparkStageRunner(str(tmp_path), spark, num_partitions=2).run_epoch(
        st, {"urls": increment(tmp_path, df.flows["urls"], [{"url": "a"}])})
    with pytest.raises(Exception, match="keeps its state in 'direct' mode"):
        SparkStageRunner(str(tmp_path), spark, mode="blackbox").run_epoch(
            st, {"urls": increment(tmp_path, df.flows["urls"], [{"url": "a"}])})


def _noop(key, *inputs, out):
    pass


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda df, s: df.stage("x", _noop, inputs=["nope"]), "unknown flow 'nope'"),
        (lambda df, s: df.stage("x", lambda k, st, a, *, out: None, inputs=[Input(s, "url")],
                                state=State("url string")), "state but no route key"),
        (lambda df, s: df.stage("x", _noop, inputs=[s], outputs=["urls"]), "external input"),
        (lambda df, s: df.stage("x", lambda k, *, out: None, inputs=[s]), "cannot be called"),
        (lambda df, s: df.stage("x", _noop, inputs=[Input(s, route_by=3)]), "route_by"),
        (lambda df, s: df.source("urls", "url string"), "declared twice"),
        (lambda df, s: df.source("bad", "url strang"), "unsupported|cannot parse"),
        (lambda df, s: df.stage("x", _noop, inputs=[s], outputs={"state": "a int"}), "reserved"),
    ],
)
def test_invalid_dataflows_are_rejected_before_running(build, match):
    df = Dataflow("bad")
    src = df.source("urls", "url string")
    with pytest.raises(DataflowError, match=match):
        build(df, src)


def test_declared_flow_without_producer_fails_validation():
    df = Dataflow("bad")
    src = df.source("urls", "url string")
    loop = df.flow("loop", "url string")
    df.stage("x", _noop, inputs=[src, loop])
    with pytest.raises(DataflowError, match="no stage writes it"):
        df.validate()


def test_schema_ddl_round_trips():
    from strata.model.schema import parse_ddl, to_ddl

    ddl = ("a bigint, b map<string,array<int>>, c struct<x:double,y:boolean>, "
           "d decimal(10,2), e timestamp, f date, g binary, h timestamp_ntz, i string")
    assert to_ddl(parse_ddl(ddl)) == ddl
    assert parse_ddl("n long, s string") == parse_ddl("n bigint, s string")


def _typed_state(key, state, items, *, out):
    prev = next(state, None)
    seen = dict(prev["m"]) if prev else {}
    for it in items:
        seen[it["v"]] = seen.get(it["v"], 0) + 1
    # an int written to a double column, a dict to a map column
    out.state({"k": key, "total": sum(seen.values()), "m": seen})
    if prev is not None:
        out.write("seen", {"k": key, "m_type": type(prev["m"]).__name__,
                           "total_type": type(prev["total"]).__name__})


@pytest.mark.parametrize("mode", MODES)
def test_records_are_what_their_schema_makes_them_in_every_mode(spark, tmp_path, mode):
    df = Dataflow("t")
    items = df.source("items", "k string, v bigint")
    st = df.stage("s", _typed_state, inputs=[Input(items, route_by="k")],
                  outputs={"seen": "k string, m_type string, total_type string"},
                  state=State("k string, total double, m map<bigint,bigint>", route_by="k"))
    runner = SparkStageRunner(str(tmp_path), spark, mode=mode, num_partitions=2)
    ref = ReferenceExecutor()
    batch = [{"k": "a", "v": 1}, {"k": "a", "v": 2}]
    for _ in range(2):
        runner.run_epoch(st, {"items": increment(tmp_path, items, batch)})
        expected = ref.run(st, {"items": batch})["seen"]
    from strata.storage.increments import read_records

    got = read_records(runner.committed(st).outputs["seen"].files)
    assert got == expected == [{"k": "a", "m_type": "dict", "total_type": "float"}]
    assert runner.state_records(st) == ref.state_records(st) == [
        {"k": "a", "total": 4.0, "m": {1: 2, 2: 2}}]


def test_a_long_spark_summary_is_the_last_line_of_the_cause_and_only_there():
    """Spark's ``[ERROR_CLASS] message`` line ends the cause once, even when it is longer
    than the 500 characters the cause keeps of it; JVM frames are dropped and the query
    context stays."""
    from strata.physical.runner import spark_failure

    long = "x" * 700
    text = (f"org.apache.spark.SparkArithmeticException: [DIVIDE_BY_ZERO] {long}\n"
            "== SQL (line 1, position 8) ==\nSELECT a / 0\n       ^^^^^\n"
            "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.divideByZero(X.scala:1)\n"
            "\t... 12 more")
    cause = spark_failure(RuntimeError(text))
    lines = cause.splitlines()
    assert lines[-1] == f"[DIVIDE_BY_ZERO] {long}"[:500]
    assert sum("DIVIDE_BY_ZERO" in line for line in lines) == 1, cause
    assert lines[:3] == ["== SQL (line 1, position 8) ==", "SELECT a / 0", "       ^^^^^"]
    assert "\tat " not in cause and "more" not in cause
