"""Vectorized translate stages: the one-call-per-partition route on Spark against the
reference executor, which runs the same function once per group (its semantics).

Random data through three functions — two input flows with groups dropped from state
(tombstones), several state rows per key, and outer grouping — must give the same output
increments epoch by epoch and the same final state. Bad functions and bad input stop the
epoch with an error naming the stage, epoch, flow and key, and commit nothing.
"""

from __future__ import annotations

import shutil
import tempfile

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.model.dataflow import Dataflow
from strata.model.errors import OutputError, RouteError, TranslateError
from strata.model.vectorized import VectorResult
from strata.physical.vectorized import VectorizedProgram, vectorized_stage
from tests.dataflow_driver import (
    ReferenceRunner,
    SparkRunner,
    multiset,
    register_by_value,
    run_dataflow,
)
from tests.helpers import epochs_in, session_confs

register_by_value(__name__)
WHERE = st.sampled_from(["tasks", "tasks-rows", "driver", "driver-spark"])  # (helpers.epochs_in)

REC = "k long, s string, v long"


def add_up(state, inputs):
    """Per key: total += sum(a.v) - sum(b.v); a group whose total reaches 0 is dropped."""
    delta = pd.concat([inputs["a"][["k", "v"]],
                       inputs["b"][["k", "v"]].assign(v=lambda d: -d["v"])])
    sums = delta.groupby("k", as_index=False)["v"].sum()
    merged = sums.merge(state, on="k", how="outer")
    merged["total"] = merged["total"].fillna(0).astype("int64") + merged["v"].fillna(0)
    merged["total"] = merged["total"].astype("int64")
    new = merged.loc[merged["total"] != 0, ["k", "total"]]
    return VectorResult({"totals": merged[["k", "total"]]}, new)


def add_up_arrow(state, inputs):
    """``add_up`` written over Arrow tables (``arrow = True``)."""
    b = inputs["b"]
    delta = pa.concat_tables([inputs["a"].select(["k", "v"]),
                              pa.table({"k": b["k"], "v": pc.negate(b["v"])})])
    sums = delta.group_by("k").aggregate([("v", "sum")])
    merged = sums.join(state, "k", join_type="full outer")
    totals = pa.table({"k": merged["k"], "total": pc.add(pc.fill_null(merged["total"], 0),
                                                         pc.fill_null(merged["v_sum"], 0))})
    return VectorResult({"totals": totals}, totals.filter(pc.not_equal(totals["total"], 0)))


add_up_arrow.arrow = True  # type: ignore[attr-defined]


def top_two(state, inputs):
    """Several state rows per key: the two largest distinct values seen (by string key);
    outputs the values that entered."""
    seen = pd.concat([state[["s", "v"]], inputs["a"][["s", "v"]]]).drop_duplicates()
    top = seen.sort_values(["s", "v"], ascending=[True, False]).groupby("s").head(2)
    entered = top.merge(state[["s", "v"]], how="left", indicator=True)
    entered = entered.loc[entered["_merge"] == "left_only", ["s", "v"]]
    return VectorResult({"entered": entered}, top)


def halve(state, inputs):
    """Outer grouping: every stored value halves each epoch, inputs add; 0 is dropped."""
    got = inputs["a"].groupby("k", as_index=False)["v"].sum()
    merged = state.merge(got, on="k", how="outer")
    merged["total"] = (merged["total"].fillna(0).astype("int64") // 2
                       + merged["v"].fillna(0).astype("int64"))
    new = merged.loc[merged["total"] != 0, ["k", "total"]]
    return VectorResult({"totals": new}, new)


def build(kind: str, grouping: str = "inner") -> Dataflow:
    df = Dataflow(f"vec-{kind}")
    df.source("a", REC)
    if kind in ("add_up", "add_up_arrow"):
        df.source("b", REC)
        vectorized_stage(df, "add", add_up if kind == "add_up" else add_up_arrow, key="k",
                         inputs=["a", "b"],
                         outputs={"totals": "k long, total long"},
                         state="k long, total long", grouping=grouping)
    elif kind == "top_two":
        vectorized_stage(df, "top", top_two, key="s", inputs=["a"],
                         outputs={"entered": "s string, v long"}, state="s string, v long")
    else:
        vectorized_stage(df, "halve", halve, key="k", inputs=["a"],
                         outputs={"totals": "k long, total long"},
                         state="k long, total long", grouping="outer")
    return df


records = st.lists(st.fixed_dictionaries({
    "k": st.integers(0, 6), "s": st.sampled_from(["a", "b", "ß", "", "ab"]),
    "v": st.integers(-3, 9)}), max_size=12)


def compare(spark, df: Dataflow, batches: list[dict], partitions: int = 3,
            where: str = "tasks") -> None:
    """Spark's run of ``df`` (its epochs as Spark tasks or in the driver: ``where``)
    against the reference executor's, epoch by epoch, and the final states."""
    home = tempfile.mkdtemp(prefix="strata-vec-")
    try:
        ref, spk = ReferenceRunner(), SparkRunner(spark, home, "direct", partitions)
        expected = run_dataflow(df, batches, ref)
        with epochs_in(spark, where):
            got = run_dataflow(df, batches, spk)
        assert {f: [multiset(i) for i in incs] for f, incs in got.items()} == \
            {f: [multiset(i) for i in incs] for f, incs in expected.items()}
        for stage in df.stages.values():
            assert multiset(spk.runner.state_records(stage)) == \
                multiset(ref.state_records(stage))
    finally:
        shutil.rmtree(home, ignore_errors=True)


SETTINGS = settings(max_examples=10, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@SETTINGS
@given(st.lists(st.fixed_dictionaries({"a": records, "b": records}), min_size=1, max_size=4),
       st.sampled_from(["inner", "outer"]), WHERE)
def test_two_flows_and_dropped_groups_equal_the_reference(spark, batches, grouping, where):
    compare(spark, build("add_up", grouping), batches, where=where)


@settings(SETTINGS, max_examples=5)
@given(st.lists(st.fixed_dictionaries({"a": records, "b": records}), min_size=1, max_size=4),
       st.sampled_from(["inner", "outer"]), WHERE)
def test_a_translate_over_arrow_equals_the_reference(spark, batches, grouping, where):
    """``arrow = True``: Arrow tables in and out, on Spark and in the reference alike."""
    compare(spark, build("add_up_arrow", grouping), batches, where=where)


@SETTINGS
@given(st.lists(st.fixed_dictionaries({"a": records}), min_size=1, max_size=4), WHERE)
def test_several_state_rows_per_key_equal_the_reference(spark, batches, where):
    compare(spark, build("top_two"), batches, partitions=2, where=where)


@SETTINGS
@given(st.lists(st.fixed_dictionaries({"a": records}), min_size=1, max_size=4), WHERE)
def test_outer_grouping_calls_every_stored_key(spark, batches, where):
    compare(spark, build("halve"), batches, where=where)


def test_state_outlives_the_runner_and_compacts(spark, tmp_path):
    """A new runner on the same home continues from the committed columnar runs, through
    enough epochs to compact them, and equals the reference throughout."""
    df = build("add_up")
    stage = df.stages["add"]
    ref = ReferenceRunner()
    batches = [{"a": [{"k": i % 5 + e, "s": "", "v": e + 1} for i in range(8)],
                "b": [{"k": e, "s": "", "v": 1}]} for e in range(12)]
    for e, batch in enumerate(batches):
        spk = SparkRunner(spark, str(tmp_path), "direct", 2)  # a fresh runner each epoch
        spk._seq = 100 * e
        got = spk.run(stage, batch)
        want = ref.run(stage, batch)
        assert multiset(got["totals"]) == multiset(want["totals"])
    assert multiset(spk.runner.state_records(stage)) == multiset(ref.state_records(stage))
    snap = spk.runner.committed(stage)
    runs = snap.state["runs"]
    assert all(len(rs) <= 8 for rs in runs.values())
    line = VectorizedProgram.summary(spk.runner.state_dir(stage).layout, snap)
    count = sum(len(rs) for rs in runs.values())
    assert line is not None and line.startswith(f"{count} columnar run(s) over 2 partition(s)")


def test_a_dropped_group_stays_dropped_and_starts_again_from_nothing(spark, tmp_path):
    df = build("add_up")
    stage = df.stages["add"]
    spk = SparkRunner(spark, str(tmp_path), "direct", 2)
    keys = range(40)  # enough keys for every partition
    spk.run(stage, {"a": [{"k": k, "s": "", "v": 5} for k in keys]})
    spk.run(stage, {"b": [{"k": k, "s": "", "v": 5} for k in keys if k % 2]})
    assert sorted(r["k"] for r in spk.runner.state_records(stage)) == list(range(0, 40, 2))
    got = spk.run(stage, {"a": [{"k": k, "s": "", "v": 2} for k in keys]})
    assert {r["k"]: r["total"] for r in got["totals"]} == {k: 2 if k % 2 else 7 for k in keys}


def raises_on_13(state, inputs):
    if (inputs["a"]["v"] == 13).any():
        raise ValueError("unlucky")
    return add_up(state, inputs)


def wrong_columns(state, inputs):
    return VectorResult({"totals": pd.DataFrame({"k": [1]})}, state)


def foreign_state(state, inputs):
    return VectorResult({}, pd.DataFrame({"k": [999], "total": [1]}))


@pytest.mark.parametrize("fn, error, where", [
    (raises_on_13, TranslateError, "key 4"),
    (wrong_columns, OutputError, "flow 'totals'"),
    (foreign_state, OutputError, "key 999"),
])
@pytest.mark.parametrize("route", ["tasks", "driver"])
def test_bad_functions_stop_the_epoch_and_name_it(spark, tmp_path, fn, error, where, route):
    with epochs_in(spark, route):
        bad_function_epoch(spark, tmp_path, fn, error, where)


def bad_function_epoch(spark, tmp_path, fn, error, where) -> None:
    df = Dataflow("bad")
    df.source("a", REC)
    df.source("b", REC)
    stage = vectorized_stage(df, "add", fn, key="k", inputs=["a", "b"],
                             outputs={"totals": "k long, total long"},
                             state="k long, total long")
    spk = SparkRunner(spark, str(tmp_path), "direct", 2)
    spk.run(stage, {"a": [{"k": 1, "s": "", "v": 1}]}) if fn is raises_on_13 else None
    before = spk.runner.committed(stage).epoch
    with pytest.raises(error) as info:
        spk.run(stage, {"a": [{"k": 4, "s": "", "v": 13}, {"k": 5, "s": "", "v": 1}]})
    text = str(info.value)
    assert "stage 'add'" in text and f"epoch {before + 1}" in text and where in text
    assert spk.runner.committed(stage).epoch == before


def test_a_null_key_is_a_routing_error_naming_the_record(spark, tmp_path):
    df = build("add_up")
    spk = SparkRunner(spark, str(tmp_path), "direct", 2)
    with pytest.raises(RouteError, match=r"flow 'b'.*null") as info:
        spk.run(df.stages["add"], {"b": [{"k": None, "s": "x", "v": 2}]})
    assert "'s': 'x'" in str(info.value)
    assert spk.runner.committed(df.stages["add"]).epoch == 0


def test_the_reference_runs_the_function_once_per_group():
    calls = []

    def spy(state, inputs):
        calls.append(sorted(set(inputs["a"]["k"])))
        return add_up(state, {"a": inputs["a"], "b": inputs["a"].iloc[0:0]})

    df = Dataflow("spy")
    df.source("a", REC)
    stage = vectorized_stage(df, "add", spy, key="k", inputs=["a"],
                             outputs={"totals": "k long, total long"},
                             state="k long, total long")
    ReferenceRunner().run(stage, {"a": [{"k": k, "s": "", "v": 1} for k in (3, 1, 3)]})
    assert sorted(calls) == [[1], [3]]


def test_a_key_column_missing_from_an_input_is_refused_up_front():
    df = Dataflow("nokey")
    df.source("a", "s string")
    with pytest.raises(Exception, match="no key column 'k'"):
        vectorized_stage(df, "x", add_up, key="k", inputs=["a"], outputs={},
                         state="k long, total long")


@pytest.mark.parametrize("exchange", ["arrow", "rows"])
def test_only_the_increment_is_shuffled_never_the_state(spark, tmp_path, exchange):
    """Spark's own metrics: after 2,000 keys of state, an epoch of 30 records shuffles
    the bytes the same epoch shuffles on an empty home, in this runner and in a fresh one
    on the same home (a restart): 30 Spark rows on the row exchange, one packed Arrow
    buffer per partition on the Arrow exchange."""
    from strata.observability.spark_metrics import SparkMetrics

    metrics = SparkMetrics(spark)
    df = build("add_up")
    stage = df.stages["add"]
    batch = {"a": [{"k": k * 7, "s": "", "v": 2} for k in range(30)]}
    first = SparkRunner(spark, str(tmp_path / "home"), "direct", 2)
    first.run(stage, {"a": [{"k": k, "s": "", "v": 1} for k in range(2000)]})
    with epochs_in(spark, "tasks" if exchange == "arrow" else "tasks-rows"):
        with metrics.measure("vectorized-empty-home") as alone:
            SparkRunner(spark, str(tmp_path / "empty"), "direct", 2).run(stage, batch)
        for runner in (first, SparkRunner(spark, str(tmp_path / "home"), "direct", 2)):
            runner._seq = 1000 + runner._seq
            with metrics.measure("vectorized-epoch") as m:
                got = runner.run(stage, batch)
            assert len(got["totals"]) == 30
            if exchange == "rows":
                assert m.shuffle_write_records == 30, m.to_json()
            else:  # the epoch's one input file: one map task, a buffer per partition
                assert 1 <= m.shuffle_write_records <= 2, m.to_json()
            assert m.shuffle_write_bytes == alone.shuffle_write_bytes > 0, m.to_json()
    assert len(first.runner.state_records(stage)) == 2000


def test_small_epochs_run_in_the_driver_below_both_limits(spark, tmp_path):
    """By default a small epoch runs in the driver: Spark reads the increment and
    shuffles nothing. Above either session limit (input records, state bytes) the same
    epoch runs as Spark tasks, which shuffle the increment; the answers agree."""
    from strata.config import DRIVER_EPOCH_ROWS, DRIVER_EPOCH_STATE_BYTES
    from strata.observability.spark_metrics import SparkMetrics

    metrics = SparkMetrics(spark)
    stage = build("add_up").stages["add"]
    spk = SparkRunner(spark, str(tmp_path), "direct", 2)
    spk.run(stage, {"a": [{"k": k, "s": "", "v": 1} for k in range(50)]})
    totals = []
    for conf in ({}, {DRIVER_EPOCH_ROWS.name: "9"}, {DRIVER_EPOCH_STATE_BYTES.name: "10"}):
        with session_confs(spark, conf), metrics.measure("epoch") as m:
            got = spk.run(stage, {"a": [{"k": k, "s": "", "v": 1} for k in range(10)]})
        # as tasks: the 10 records, packed in a buffer per partition
        assert (m.shuffle_write_records > 0) == bool(conf), (conf, m.to_json())
        totals.append(sorted((r["k"], r["total"]) for r in got["totals"]))
    assert totals == [[(k, 2 + i) for k in range(10)] for i in range(3)]


@pytest.mark.parametrize("grouping", ["inner", "outer"])
def test_epochs_in_the_driver_and_as_tasks_share_one_state(spark, tmp_path, grouping,
                                                         monkeypatch):
    """Epochs go round the driver reading the increment with pyarrow (partitions from
    strata's port of Spark's hash), the driver reading it with Spark, and Spark tasks,
    on one home: each partition's state is where the other ways look for it, so every
    epoch equals the reference executor's. The pyarrow epochs took that path."""
    from strata.physical.vectorized import VectorizedProgram

    real, read = VectorizedProgram._arrow_rows, []

    def counted(self, ctx):
        out = real(self, ctx)
        read.append(out is not None)
        return out
    monkeypatch.setattr(VectorizedProgram, "_arrow_rows", counted)
    stage = build("add_up", grouping).stages["add"]
    ref, spk = ReferenceRunner(), SparkRunner(spark, str(tmp_path), "direct", 3)
    for e in range(8):
        batch = {"a": [{"k": (k * 5 + e) % 23, "s": "", "v": e + 1} for k in range(12)],
                 "b": [{"k": k, "s": "", "v": 1} for k in range(e, 23, 4)]}
        with epochs_in(spark, ("driver", "driver-spark", "tasks", "tasks-rows")[e % 4]):
            got = spk.run(stage, batch)
        assert multiset(got["totals"]) == multiset(ref.run(stage, batch)["totals"]), e
    assert multiset(spk.runner.state_records(stage)) == multiset(ref.state_records(stage))
    assert read == [True, True], read  # epochs 0 and 4


def test_a_limit_that_is_not_a_number_stops_the_epoch_saying_so(spark, tmp_path):
    from strata.config import DRIVER_EPOCH_ROWS
    from strata.model.errors import EpochError

    stage = build("add_up").stages["add"]
    spk = SparkRunner(spark, str(tmp_path), "direct", 2)
    spark.conf.set(DRIVER_EPOCH_ROWS.name, "lots")
    try:
        with pytest.raises(EpochError) as info:
            spk.run(stage, {"a": [{"k": 1, "s": "", "v": 1}]})
    finally:
        spark.conf.unset(DRIVER_EPOCH_ROWS.name)
    text = str(info.value)
    assert "stage 'add'" in text and "epoch 1" in text, text
    assert "driverEpoch.maxRows='lots' is not a whole number" in text, text
    assert spk.runner.committed(stage).epoch == 0


@pytest.mark.parametrize("grouping", ["inner", "outer"])
@pytest.mark.parametrize("where", ["tasks", "driver"])
def test_the_vectorized_url_count_equals_the_per_group_one(spark, grouping, where):
    from strata.apps.urlcount import urlcount_dataflow, urlcount_vectorized_dataflow

    batches = [{"urls": [{"url": f"u{(i * e) % 11}"} for i in range(15)]} for e in (1, 2, 3)]
    batches.append({"urls": [{"url": "u1"}, {"url": "u12"}, {"url": "u1"}]})  # most unseen
    vectorized = urlcount_vectorized_dataflow(grouping)
    compare(spark, vectorized, batches, partitions=2, where=where)  # == its own reference
    per_group = run_dataflow(urlcount_dataflow(grouping), batches, ReferenceRunner())
    mine = run_dataflow(vectorized, batches, ReferenceRunner())
    assert [multiset(i) for i in mine["counts"]] == [multiset(i) for i in per_group["counts"]]


def pair_counts(state, inputs):
    """Keyed by two columns: how many rows each (k, s) pair has had."""
    seen = inputs["a"].groupby(["k", "s"], as_index=False).size().rename(columns={"size": "n"})
    rows = state.merge(seen, on=["k", "s"], how="outer")
    rows["total"] = rows["total"].fillna(0).astype("int64") + rows["n"].fillna(0).astype("int64")
    return VectorResult({"totals": rows[["k", "s", "total"]]}, rows[["k", "s", "total"]])


@SETTINGS
@given(st.lists(st.fixed_dictionaries({"a": records}), min_size=1, max_size=4), WHERE)
def test_a_key_of_two_columns_equals_the_reference(spark, batches, where):
    df = Dataflow("vec-pairs")
    df.source("a", REC)
    vectorized_stage(df, "pairs", pair_counts, key=("k", "s"), inputs=["a"],
                     outputs={"totals": "k long, s string, total long"},
                     state="k long, s string, total long")
    compare(spark, df, batches, where=where)


@pytest.mark.parametrize("exchange", ["arrow", "rows"])
def test_records_spark_delivers_to_the_wrong_task_stop_the_epoch(tmp_path, exchange):
    """A task given records packed for, or hashed to, another partition (a plugin or a
    setting that re-partitioned the exchange) fails with an error saying so, not a
    state mixed with another partition's."""
    import json

    from strata.physical.exchange import PackTask, salts
    from strata.physical.vector_task import VectorTask

    program = build("add_up").stages["add"].program
    rows = pa.record_batch({"__k0": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
                            "__flow": pa.array([0] * 6, pa.int32()),
                            "__f0": pa.StructArray.from_arrays(
                                [pa.array(["x"] * 6), pa.array([1] * 6, pa.int64())],
                                names=["s", "v"])})
    if exchange == "arrow":
        packed = list(PackTask(["__k0"], 2, salts(2))(iter([rows])))
        given = [b for b in packed if b.column("__p")[0].as_py() == 1]
    else:
        given = [rows.append_column("__p", pa.array([1] * 6, pa.int32()))]
    task = VectorTask(stage="add", epoch=3, fn=program.fn, shape=program.shape,
                       grouping="inner", state_root=str(tmp_path), runs={},
                       outputs={"totals": str(tmp_path / "totals")},
                       token="t")
    info = json.loads(task.info(0, given))
    assert "rows of another partition" in info["error"]["detail"], info
    assert info["error"]["stage"] == "add" and info["error"]["epoch"] == 3
    assert json.loads(task.info(1, given)).get("error") is None  # its own partition's
