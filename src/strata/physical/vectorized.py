"""Vectorized translate stages: one pandas call per state partition, on Spark DataFrames.

The epoch is one Spark job of DataFrame operations only (so it also runs over Spark
Connect): each input increment is read by Spark, tagged with its flow, hash-partitioned
on the key columns into the stage's fixed number of partitions (as packed Arrow buffers,
:mod:`strata.physical.exchange`, or ``repartition(n, keys)``: either way Spark's
``pmod(hash(keys), n)``, with a count adaptive execution does not coalesce), and
``mapInArrow`` hands partition ``p``'s records to a task
(:mod:`strata.physical.vector_task`) that reads partition ``p``'s
columnar state runs from its own files, calls the user's function once on all its
groups, and writes the outputs and a new state run. Only the increment crosses the
shuffle; the state never does. Each task checks that what it got was meant for its
partition, so a partitioning Spark did not keep fails loudly instead of mixing states.

A small epoch (few input records, a small state: :meth:`VectorizedProgram.in_driver`) runs
the same partition tasks in the driver instead: Spark reads the increment and computes each
row's partition, the rows come back as Arrow, and the driver runs partition after
partition on them. That saves a stage of Python tasks, which costs more than the work of a
small epoch. ``docs/vectorized.md`` has the semantics, the layout and the measurements.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata import config
from strata.model.dataflow import STATE, Dataflow, Flow, Input, Stage, State
from strata.model.errors import (
    DataflowError,
    EpochError,
)
from strata.model.schema import SchemaLike, parse_ddl, to_arrow_schema, to_ddl, type_ddl
from strata.model.vectorized import VectorShape, VectorTranslate, per_group
from strata.physical import spark_hash
from strata.physical.exchange import hash_partitioned, with_partition
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.physical.shipping import pickle_by_value, ship_modules, user_modules
from strata.physical.small_epochs import fits_driver
from strata.physical.vector_task import RESULT_SCHEMA, VectorTask
from strata.storage import fs
from strata.storage.columnar_runs import ColumnarRuns, runs_of
from strata.storage.home import StageLayout
from strata.storage.increments import Increment, read_table
from strata.storage.manifest import StateSnapshot
from strata.storage.partition_store import RunInfo

_COLUMNS = "columns"  # the program's directory under the stage's state directory


def vectorized_stage(
    dataflow: Dataflow,
    name: str,
    fn: VectorTranslate,
    *,
    key: str | Sequence[str],
    inputs: Iterable[Flow | str],
    outputs: Mapping[str, SchemaLike] | Iterable[Flow | str] = (),
    state: SchemaLike | None = None,
    grouping: Literal["outer", "inner"] = "inner",
    runnable: Any = None,
) -> Stage:
    """Add a stage whose translate ``fn(state, inputs) -> VectorResult`` works on pandas
    DataFrames of many groups at once (``strata.model.vectorized``). Every input flow and
    the state are grouped by the same ``key`` column(s)."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    if not keys:
        raise DataflowError(f"stage {name!r}: a vectorized stage needs key columns")
    route = keys[0] if len(keys) == 1 else keys
    in_names = [f if isinstance(f, str) else f.name for f in inputs]
    for f in in_names:
        if f not in dataflow.flows:
            raise DataflowError(f"stage {name!r} reads unknown flow {f!r}")
    if isinstance(outputs, Mapping):
        out_schemas = {n: to_arrow_schema(s) for n, s in outputs.items()}
    else:
        names = [o if isinstance(o, str) else o.name for o in outputs]
        out_schemas = {n: dataflow.flows[n].schema for n in names if n in dataflow.flows}
    state_schema = to_arrow_schema(state) if state is not None else None
    shape = VectorShape(keys, tuple((f, dataflow.flows[f].schema) for f in in_names),
                        out_schemas, state_schema)
    for what, schema in [*shape.inputs, *([(STATE, state_schema)] if state_schema else [])]:
        absent = [k for k in keys if k not in schema.names]
        if absent:
            raise DataflowError(f"stage {name!r}: {what} has no key column {absent[0]!r}")
        if state_schema is not None:
            for k in keys:
                if schema.field(k).type != state_schema.field(k).type:
                    raise DataflowError(
                        f"stage {name!r}: key column {k!r} is {schema.field(k).type} in "
                        f"{what} but {state_schema.field(k).type} in the state; give them "
                        "one type")
    program = VectorizedProgram(fn, shape, grouping)
    st = State(state_schema, route_by=route, grouping=grouping) if state_schema else None
    return dataflow.stage(name, per_group(fn, shape),
                          inputs=[Input(f, route_by=route) for f in in_names],
                          outputs=outputs, state=st, runnable=runnable, program=program)


def arrow_enabled(spark: Any) -> bool:
    """Whether the driver may read an epoch's rows with pyarrow (``spark.strata.arrow``
    is not ``false``; docs/configuration.md)."""
    try:
        return config.conf(spark, config.ARROW)
    except config.SettingError as e:
        raise DataflowError(str(e)) from None


class _NotHere(Exception):  # a signal to let Spark do it, not a failure
    """The driver cannot do this with Arrow: Spark does."""


@dataclass(frozen=True)
class VectorState:
    """A vectorized stage's state as its manifest describes it."""

    keys: tuple[str, ...]
    schema: str  # DDL of the state records
    runs: dict[int, list[RunInfo]]

    def to_json(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "schema": self.schema,
                "runs": {str(p): [r.to_json() for r in rs] for p, rs in self.runs.items()}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> VectorState:
        return cls(tuple(d.get("keys", ())), str(d.get("schema", "")), runs_of(d))

    def store(self, layout: StageLayout, p: int) -> ColumnarRuns:
        return ColumnarRuns(layout.program_dir(_COLUMNS), p, self.runs.get(p, []),
                            parse_ddl(self.schema), self.keys)


class VectorizedProgram(StageProgram):
    """Runs a vectorized stage: one call of the user's function per state partition."""

    kind = "vectorized"
    packs = True  # its rows may cross the shuffle as packed Arrow buffers

    def __init__(self, fn: VectorTranslate, shape: VectorShape, grouping: str) -> None:
        self.fn, self.shape, self.grouping = fn, shape, grouping

    def describe(self) -> str:
        return f"vectorized by {', '.join(self.shape.keys)}"

    def run(self, ctx: EpochContext) -> EpochOutcome:
        return self.run_where(ctx, self.in_driver(ctx))

    def run_where(self, ctx: EpochContext, in_driver: bool) -> EpochOutcome:
        """The epoch, its partitions run in the driver or as Spark tasks as decided
        (:meth:`in_driver`), for a subclass that needed the decision first."""
        shape, n = self.shape, ctx.num_partitions
        before = runs_of(ctx.committed.state)
        modules = user_modules([self.fn])
        pickle_by_value(modules)
        ship_modules(ctx.spark, modules)
        only_inputs = self.grouping == "inner" or shape.state is None  # no input: no call
        results: list[dict] = []
        if in_driver:
            table = self._driver_rows(ctx)
            if table is not None or not only_inputs:
                results = self._run_in_driver(self._task(ctx, before), table, n)
        else:
            rows = self._input_rows(ctx)
            if rows is not None or not only_inputs:
                frame = (self._exchanged(ctx, rows) if rows is not None
                         else ctx.spark.range(0, n, 1, n))
                collected = frame.mapInArrow(self._task(ctx, before), RESULT_SCHEMA).collect()
                results = [json.loads(r["info"]) for r in collected]
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise EpochError.from_dict(min(errors, key=lambda d: str(d.get("flow"))))
        return self._outcome(ctx, before, results)

    def _task(self, ctx: EpochContext, before: dict[int, list[RunInfo]]) -> VectorTask:
        return VectorTask(
            stage=ctx.stage.name, epoch=ctx.epoch, fn=self.fn, shape=self.shape,
            grouping=self.grouping, state_root=ctx.layout.program_dir(_COLUMNS), runs=before,
            outputs={f: ctx.output_dir(f) for f in self.shape.outputs}, token=ctx.token)

    def _input_rows(self, ctx: EpochContext) -> DataFrame | None:
        """The epoch's input rows, one union of every flow: key columns ``__k<j>`` (cast to
        the state's key types), ``__flow`` and the flow's other columns as struct ``__f<i>``
        (not partitioned yet)."""
        shape = self.shape
        key_schema = shape.state or shape.inputs[0][1]
        key_types = {k: type_ddl(key_schema.field(k).type) for k in shape.keys}
        parts = []
        for i, (flow, schema) in enumerate(shape.inputs):
            files = [f for inc in ctx.inputs.get(flow, ()) for f in inc.files]
            if not files:
                continue
            d = ctx.spark.read.schema(to_ddl(schema)).parquet(*files)
            rest = [c for c in schema.names if c not in shape.keys]  # keys travel once
            parts.append(d.select(
                *[F.col(k).cast(key_types[k]).alias(f"__k{j}") for j, k in enumerate(shape.keys)],
                F.lit(i).alias("__flow"),
                (F.struct(*rest) if rest else F.lit(True)).alias(f"__f{i}")))
        if not parts:
            return None
        return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)

    def _key_columns(self) -> list[str]:
        """The key columns of :meth:`_input_rows`' rows."""
        return [f"__k{j}" for j in range(len(self.shape.keys))]

    def _exchanged(self, ctx: EpochContext, rows: DataFrame) -> DataFrame:
        """``rows`` hash-partitioned into the stage's partitions
        (:func:`strata.physical.exchange.hash_partitioned`)."""
        key_schema = self.shape.state or self.shape.inputs[0][1]
        return hash_partitioned(
            ctx.spark, rows, self._key_columns(),
            [key_schema.field(k).type for k in self.shape.keys] if self.packs else None,
            ctx.num_partitions, self._input_records(ctx))

    def _input_records(self, ctx: EpochContext) -> int:
        return sum(inc.records for flow, _ in self.shape.inputs
                   for inc in ctx.inputs.get(flow, ()))

    # -- small epochs, in the driver ------------------------------------------------------
    def in_driver(self, ctx: EpochContext) -> bool:
        """Whether this epoch's partitions run in the driver (module docstring): its input
        has at most ``spark.strata.driverEpoch.maxRows`` records and the state it may read
        at most ``spark.strata.driverEpoch.maxStateBytes`` bytes (session confs)."""
        state = sum(r.nbytes for rs in runs_of(ctx.committed.state).values() for r in rs)
        return fits_driver(ctx, self._input_records(ctx), state)

    def _driver_rows(self, ctx: EpochContext) -> pa.Table | None:
        """:meth:`_input_rows` collected as Arrow, each row's partition in ``__p``: read
        by the driver itself when it can (:meth:`_arrow_rows`), else by Spark."""
        if arrow_enabled(ctx.spark):
            try:
                return self._arrow_rows(ctx)
            except _NotHere:
                pass
        return self._spark_driver_rows(ctx)

    def _spark_driver_rows(self, ctx: EpochContext) -> pa.Table | None:
        """:meth:`_input_rows` run by Spark and collected, with ``__p``."""
        rows = self._input_rows(ctx)
        if rows is None:
            return None
        return with_partition(rows, self._key_columns(), ctx.num_partitions).toArrow()

    def _arrow_rows(self, ctx: EpochContext) -> pa.Table | None:
        """:meth:`_driver_rows` with no Spark job: pyarrow reads the increments and each
        row's partition is Spark's ``pmod(hash(keys), n)`` computed in numpy
        (:mod:`strata.physical.spark_hash`). Raises :class:`_NotHere` when a file does
        not read as its flow's schema or a key type is one that module leaves to Spark."""
        shape = self.shape
        key_schema = shape.state or shape.inputs[0][1]
        parts = []
        try:
            for i, (flow, schema) in enumerate(shape.inputs):
                files = [f for inc in ctx.inputs.get(flow, ()) for f in inc.files]
                table = read_table(files, schema) if files else None
                if table is None or not table.num_rows:
                    continue
                cols = {f"__k{j}": table.column(k).cast(key_schema.field(k).type)
                        for j, k in enumerate(shape.keys)}
                cols["__flow"] = pa.array(np.full(table.num_rows, i, np.int32))
                rest = [c for c in schema.names if c not in shape.keys]
                cols[f"__f{i}"] = pa.StructArray.from_arrays(
                    [table.column(c).combine_chunks() for c in rest], names=rest
                ) if rest else pa.array(np.ones(table.num_rows, bool))
                parts.append(pa.table(cols))
        except (OSError, KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise _NotHere from e
        if not parts:
            return None
        rows = pa.concat_tables(parts, promote_options="default")  # other flows' __f: NULL
        partition = spark_hash.partitions(
            [rows.column(c) for c in self._key_columns()], ctx.num_partitions)
        if partition is None:
            raise _NotHere
        return rows.append_column("__p", pa.array(partition))

    def _run_in_driver(self, task: VectorTask, table: pa.Table | None, n: int) -> list[dict]:
        """Every partition's task, run here on its rows of ``table``."""
        results = []
        for p in range(n):
            mine = table.filter(pc.equal(table["__p"], p)) if table is not None else None
            if self.grouping == "inner" and (mine is None or not mine.num_rows):
                continue  # no group of this partition is called: its runs stay
            batches = mine.to_batches() if mine is not None else []
            results.append(json.loads(task.info(p, batches)))
        return results

    def _outcome(self, ctx: EpochContext, before: dict[int, list[RunInfo]],
                 results: list[dict]) -> EpochOutcome:
        outputs = {f: Increment() for f in ctx.stage.output_names}
        runs = dict(before)
        for r in sorted(results, key=lambda r: r["partition"]):
            for flow, (uri, count, size) in r["outputs"].items():
                o = outputs[flow]
                outputs[flow] = Increment(o.files + (uri,), o.records + count, o.bytes + size)
            if "runs" in r:
                runs[r["partition"]] = [RunInfo.from_json(x) for x in r["runs"]]
        shape = self.shape
        state = VectorState(shape.keys, to_ddl(shape.state), runs) if shape.state else None
        metrics = {key: sum(r.get(key, 0) for r in results)
                   for key in ("keys_called", "state_bytes_read", "state_bytes_from_machine")}
        return EpochOutcome(outputs, state.to_json() if state else {},
                            ctx.num_partitions if state else 0, metrics)

    # -- the committed state, read from files -------------------------------------------
    @classmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        st = VectorState.from_json(snap.state)
        if not st.schema:
            return []
        return [r for p in sorted(st.runs) for r in st.store(layout, p).scan().to_pylist()]

    @classmethod
    def state_bytes(cls, layout: StageLayout, state: Mapping[str, Any]) -> int:
        return sum(r.nbytes for rs in runs_of(state).values() for r in rs)

    @classmethod
    def summary(cls, layout: StageLayout, snap: StateSnapshot) -> str | None:
        """Columnar runs per partition, and the rows they hold (versions and tombstones
        included until compaction drops them)."""
        runs = runs_of(snap.state)
        if not runs:
            return None
        count = sum(len(rs) for rs in runs.values())
        rows = sum(r.entries for rs in runs.values() for r in rs)
        return (f"{count} columnar run(s) over {len(runs)} partition(s), {rows:,} rows "
                f"(keyed by {', '.join(snap.state.get('keys', []))})")

    @classmethod
    def collect_garbage(cls, layout: StageLayout, keep: StateSnapshot) -> None:
        st = VectorState.from_json(keep.state)
        root = layout.program_dir(_COLUMNS)
        for name in fs.list_dir(root):
            if name.startswith("p") and name[1:].isdigit():
                p = int(name[1:])
                ColumnarRuns(root, p, [], pa.schema([]), ()).delete_unreferenced(
                    st.runs.get(p, []))
