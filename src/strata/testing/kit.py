"""Run a dataflow, or one stage, on given increments with the reference executor and with
local Spark, and compare the two (docs/testing.md)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from strata.model.dataflow import Dataflow, Stage
from strata.model.errors import StrataError, abridged
from strata.model.schema import records_of, to_table
from strata.testing.compare import Record, Result, difference
from strata.testing.driver import (
    ReferenceRunner,
    SparkRunner,
    StageExecutor,
    flow_schema,
    run_dataflow,
)

if TYPE_CHECKING:
    import pandas as pd

Records: TypeAlias = "list[dict[str, Any]] | pa.Table | pd.DataFrame"
Increments: TypeAlias = "Sequence[Mapping[str, Records]]"  # one mapping per increment


def run_reference(target: Dataflow | Stage, increments: Increments, *,
                  max_rounds: int = 20) -> Result:
    """Run ``target`` on ``increments`` with the plain-Python reference executor.

    ``target`` is a dataflow (each element of ``increments`` maps source flows to one
    increment of records each, pushed through every stage; see docs/testing.md, "The
    schedule") or one stage (each element maps its input flows to records and is exactly
    one epoch). Records are lists of dicts, pyarrow Tables or pandas DataFrames.
    """
    return run_with(target, increments, ReferenceRunner(), name="reference",
                    max_rounds=max_rounds)


def run_spark(target: Dataflow | Stage, increments: Increments, spark: Any = None,
              home: str | os.PathLike[str] | None = None, *, mode: str = "direct",
              num_partitions: int = 2, store: str = "columns", files_per_input: int = 1,
              max_rounds: int = 20) -> Result:
    """Run ``target`` on ``increments`` (as :func:`run_reference`) on Spark, each epoch
    through the physical layer as ``strata run`` does (``mode`` ``"direct"`` or
    ``"blackbox"``, ``num_partitions`` state partitions, direct mode's ``store``).

    ``spark``: the session to use; default the active one, else a local one is started
    (``local[2]``). ``home``: an empty or new directory to keep the run's files in (kept
    afterwards, for a look); default a temporary one, removed after the run.
    """
    from strata.physical.session import get_spark

    session = spark if spark is not None else get_spark("local[2]", app_name="strata-testing")
    where = _fresh_home(home)
    try:
        runner = SparkRunner(session, where, mode, num_partitions, files_per_input, store)
        return run_with(target, increments, runner, name="spark", max_rounds=max_rounds)
    finally:
        if home is None:
            shutil.rmtree(where, ignore_errors=True)


def assert_same(target: Dataflow | Stage, increments: Increments, spark: Any = None, *,
                expected: Result | None = None, **spark_options: Any) -> Result:
    """Run ``target`` with the reference executor and on Spark (:func:`run_spark`'s
    ``spark_options``) and raise ``AssertionError`` naming the flow and epoch (or the
    stage, for state) and the first records that differ when their outputs or final
    state differ as multisets. ``expected``: compare Spark's run with this result
    instead of the reference's. Returns Spark's result, for further checks."""
    want = expected if expected is not None else run_reference(
        target, increments, max_rounds=spark_options.get("max_rounds", 20))
    got = run_spark(target, increments, spark, **spark_options)
    assert_results_equal(want, got)
    return got


def assert_results_equal(expected: Result, got: Result) -> None:
    """Raise ``AssertionError`` with :func:`~strata.testing.compare.difference`'s message
    when the two results differ."""
    why = difference(expected, got)
    if why is not None:
        raise AssertionError(f"{got.name} differs from {expected.name}: {why}")


# -- running --------------------------------------------------------------------------------


def run_with(target: Dataflow | Stage, increments: Increments, executor: StageExecutor, *,
             name: str = "run", max_rounds: int = 20) -> Result:
    """Run ``target`` on ``increments`` (as :func:`run_reference`) with any ``executor``
    (:class:`~strata.testing.driver.ReferenceRunner`, :class:`~strata.testing.driver.
    SparkRunner` or one of your own); ``name`` names the result in messages."""
    if isinstance(target, Stage):
        return _run_stage(target, increments, executor, name)
    if not isinstance(target, Dataflow):
        raise TypeError(f"strata.testing runs a Dataflow or a Stage, not {type(target).__name__}")
    _check_schedulable(target)
    schemas = {f.name: f.schema for f in target.flows.values() if f.external}
    batches = [_records_of(schemas, inc, i, target.name, "source")
               for i, inc in enumerate(increments, 1)]
    outputs = run_dataflow(target, batches, executor, max_rounds=max_rounds)
    state = {s.name: executor.state_records(s) for s in target.stages.values()
             if s.state is not None}
    return Result(outputs, state, name)


def _run_stage(stage: Stage, increments: Increments, executor: StageExecutor,
               name: str) -> Result:
    _check_translate(stage)
    schemas = {f: flow_schema(stage, f) for f in stage.input_names}
    outputs: dict[str, list[list[Record]]] = {f: [] for f in stage.output_names}
    for i, inc in enumerate(increments, 1):
        inputs = _records_of(schemas, inc, i, f"stage {stage.name!r}", "input")
        produced = executor.run(stage, {f: r for f, r in inputs.items() if r})
        for f in stage.output_names:
            outputs[f].append(list(produced.get(f, [])))
    state = {stage.name: executor.state_records(stage)} if stage.state is not None else {}
    return Result(outputs, state, name)


def _check_translate(stage: Stage) -> None:
    if stage.translate is None:
        raise StrataError(
            f"stage {stage.name!r} is a compiled query, series or window stage; the "
            "reference executor runs translate stages only (test queries with "
            "strata.controller.Controller, docs/testing.md)")


def _check_schedulable(df: Dataflow) -> None:
    """The kit's fixed schedule applies no runnability rule and no framing: refuse
    dataflows that rely on them rather than run their stages with other inputs."""
    for stage in df.stages.values():
        _check_translate(stage)
        framed = [i.flow_name for i in stage.inputs if i.frame_by is not None]
        if stage.runnable is not None or framed:
            what = "a runnable rule" if stage.runnable is not None else \
                f"frame_by on {', '.join(map(repr, framed))}"
            raise StrataError(
                f"stage {stage.name!r} of dataflow {df.name!r} has {what}, which "
                "strata.testing's fixed schedule does not apply; test that stage alone "
                "(pass the Stage, one increment per epoch) or run the dataflow with "
                "strata.controller.Controller (docs/testing.md)")


def _records_of(schemas: Mapping[str, pa.Schema], increment: Mapping[str, Any], number: int,
                where: str, kind: str) -> dict[str, list[Record]]:
    """One increment's records per flow, as their flows' schemas make them (an int given
    for a double column is read as a float, in every route)."""
    if not isinstance(increment, Mapping):
        raise StrataError(f"increment {number} of {where} is a {type(increment).__name__}; "
                          f"give a mapping of {kind} flow name to records")
    out: dict[str, list[Record]] = {}
    for flow, data in increment.items():
        if flow not in schemas:
            raise StrataError(f"increment {number} names flow {flow!r}, which is not one of "
                              f"the {kind} flows of {where} ({', '.join(sorted(schemas))})")
        records = _as_records(data, flow, number)
        table = to_table(records, schemas[flow])
        if isinstance(table, tuple):
            i, rec, why = table
            raise StrataError(f"increment {number}, flow {flow!r}, record {i + 1} "
                              f"{abridged(rec)} does not fit the flow's schema: {why}")
        out[flow] = records_of(table)
    return out


def _as_records(data: Any, flow: str, number: int) -> list[Record]:
    if isinstance(data, pa.Table):
        return records_of(data)
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
        return records_of(pa.Table.from_pandas(data, preserve_index=False))
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return [dict(r) if isinstance(r, Mapping) else r for r in data]
    raise StrataError(f"increment {number}, flow {flow!r}: give a list of dicts, a pyarrow "
                      f"Table or a pandas DataFrame, not {type(data).__name__}")


def _fresh_home(home: str | os.PathLike[str] | None) -> str:
    if home is None:
        return tempfile.mkdtemp(prefix="strata-testing-")
    path = Path(home)
    if path.exists() and any(path.iterdir()):
        raise StrataError(f"home {path} is not empty; run_spark starts from a new or empty "
                          "directory (or give none for a temporary one)")
    path.mkdir(parents=True, exist_ok=True)
    return str(path)
