"""The task of a vectorized stage's state partition (:mod:`strata.physical.vectorized`):
shipped to the executors by ``mapInArrow`` (or run in the driver for a small epoch), it
checks that its records belong to its partition, reads the partition's columnar state
runs, calls the user's function once on all its groups, and writes the outputs and a new
state run. It reports what it wrote, or its error, as one JSON row."""

from __future__ import annotations

import json
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strata.model.dataflow import STATE
from strata.model.errors import EpochError, OutputError, RouteError, TranslateError
from strata.model.vectorized import VectorError, VectorShape, VectorTranslate
from strata.physical import exchange
from strata.storage.columnar_runs import ColumnarRuns, member, unique_keys
from strata.storage.home import Home
from strata.storage.increments import write_table
from strata.storage.partition_store import RunInfo

RESULT_SCHEMA = "partition int, info string"
_RESULT = pa.schema([("partition", pa.int32()), ("info", pa.string())])
_BLAME_GROUPS = 1000  # groups retried one by one to name the key a failing call broke on


@dataclass
class VectorTask:
    """The task of one partition: shipped to the executors by ``mapInArrow``."""

    stage: str
    epoch: int
    fn: VectorTranslate
    shape: VectorShape
    grouping: str
    state_root: str
    runs: dict[int, list[RunInfo]]
    outputs: dict[str, str]  # output flow -> this epoch's directory
    token: str
    max_runs: int = 8

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        p = ctx.partitionId() if ctx is not None else 0
        yield pa.RecordBatch.from_pylist(
            [{"partition": p, "info": self.info(p, list(batches))}], schema=_RESULT)

    def info(self, p: int, batches: list[pa.RecordBatch]) -> str:
        """Partition ``p``'s task on ``batches``: what it wrote, or its error, as JSON."""
        try:
            info = self._run(p, batches)
        except EpochError as e:
            info = {"partition": p, "error": e.to_dict()}
        return json.dumps(info, default=str)

    def _err(self, cls: type[EpochError], detail: str, **kw: Any) -> EpochError:
        return cls(detail, stage=self.stage, epoch=self.epoch, **kw)

    def _inputs(self, p: int, batches: list[pa.RecordBatch]) -> dict[str, pa.Table]:
        if exchange.is_packed(batches):
            packed_for, batches = exchange.unpack(batches)
            if any(q != p for q in packed_for):
                raise self._misplaced(p)
        table = pa.Table.from_batches(batches) if batches else None
        if (table is not None and "__p" in table.column_names and table.num_rows
                and not pc.all(pc.equal(table["__p"], p)).as_py()):
            raise self._misplaced(p)
        inputs: dict[str, pa.Table] = {}
        for i, (flow, schema) in enumerate(self.shape.inputs):
            col = f"__f{i}"
            if table is None or col not in table.column_names:
                inputs[flow] = schema.empty_table()
                continue
            mine = table.filter(pc.equal(table["__flow"], i))
            if not mine.num_rows:
                inputs[flow] = schema.empty_table()
                continue
            values = mine[col].combine_chunks()
            columns = {k: mine[f"__k{j}"] for j, k in enumerate(self.shape.keys)}
            if pa.types.is_struct(values.type):
                columns.update(zip(values.type.names, values.flatten(), strict=True))
            t = pa.table({c: columns[c] for c in schema.names}).cast(schema)
            self._check_keys(t, flow)
            inputs[flow] = t
        return inputs

    def _misplaced(self, p: int) -> EpochError:
        return self._err(EpochError, f"Spark gave task {p} rows of another partition; "
                         "strata needs its repartition into the stage's partitions kept "
                         "as it is (is a plugin or a setting coalescing shuffle "
                         "partitions?)")

    def _check_keys(self, table: pa.Table, flow: str) -> None:
        for k in self.shape.keys:
            if table[k].null_count:
                i = pc.index(pc.is_null(table[k]), True).as_py()
                raise self._err(RouteError, f"key column {k!r} is null; a vectorized stage "
                                "groups by non-null keys", flow=flow,
                                record=table.slice(i, 1).to_pylist()[0], has_record=True)

    def _run(self, p: int, batches: list[pa.RecordBatch]) -> dict[str, Any]:
        shape, keys = self.shape, list(self.shape.keys)
        inputs = self._inputs(p, batches)
        called = unique_keys(list(inputs.values()), keys) if inputs else None
        store = None
        state = None
        if shape.state is not None:
            store = ColumnarRuns(self.state_root, p, self.runs.get(p, []), shape.state, keys)
            if self.grouping == "outer":
                state = store.scan()
                called = unique_keys([state, *inputs.values()], keys)
            elif called is not None and called.num_rows:
                state = store.lookup(called.cast(pa.schema([shape.state.field(k) for k in keys])))
            else:
                state = shape.state.empty_table()
        n_called = called.num_rows if called is not None else 0
        info: dict[str, Any] = {"partition": p, "outputs": {}, "keys_called": n_called}
        if n_called == 0:
            return info
        assert called is not None
        outputs, new_state = self._call(state, inputs, called)
        for flow, table in outputs.items():
            if table.num_rows:
                uri = Home.output_file(self.outputs[flow], p)
                info["outputs"][flow] = (uri, table.num_rows, write_table(uri, table))
        if store is not None and state is not None and new_state is not None:
            info["runs"] = [r.to_json() for r in self._write_state(store, state, new_state)]
            info["state_bytes_read"] = store.bytes_read
            info["state_bytes_from_machine"] = store.bytes_from_machine
        return info

    def _call(self, state: pa.Table | None, inputs: dict[str, pa.Table], called: pa.Table
              ) -> tuple[dict[str, pa.Table], pa.Table | None]:
        try:
            result = self._apply(state, inputs)
        except Exception as e:  # noqa: BLE001 - any user error stops the epoch cleanly
            raise self._blame(state, inputs, called, e) from None
        try:
            outputs, new_state = self.shape.tables(result)
        except VectorError as e:
            raise self._err(OutputError, str(e), flow=e.flow) from None
        if new_state is not None:
            self._check_keys(new_state, STATE)
            foreign = new_state.filter(pc.invert(member(new_state, list(self.shape.keys),
                                                        called)))
            if foreign.num_rows:
                rec = foreign.slice(0, 1).to_pylist()[0]
                raise self._err(OutputError, "it returned state for a key it was not given; "
                                "a vectorized translate returns the new state of its own "
                                "groups only", flow=STATE, key=self.shape.key_of(rec),
                                has_key=True, record=rec, has_record=True)
        return outputs, new_state

    def _apply(self, state: pa.Table | None, inputs: Mapping[str, pa.Table]) -> Any:
        """The user's function on these groups: as pandas, or as Arrow if it says so."""
        if getattr(self.fn, "arrow", False):
            return self.fn(state, inputs)
        return self.fn(state.to_pandas() if state is not None else None,
                       {f: t.to_pandas() for f, t in inputs.items()})

    def _blame(self, state: pa.Table | None, inputs: dict[str, pa.Table], called: pa.Table,
               error: Exception) -> EpochError:
        """The error of a failed call, naming the first group that fails alone."""
        keys = list(self.shape.keys)
        for i in range(min(called.num_rows, _BLAME_GROUPS)):
            one = called.slice(i, 1)
            part = {f: t.filter(member(t, keys, one)) for f, t in inputs.items()}
            mine = state.filter(member(state, keys, one)) if state is not None else None
            try:
                self._apply(mine, part)
            except Exception as e:  # noqa: BLE001
                rec = next((t.slice(0, 1).to_pylist()[0] for t in part.values()
                            if t.num_rows), None)
                key = self.shape.key_of(one.to_pylist()[0])
                return self._err(TranslateError, f"{type(e).__name__}: {e}",
                                 cause=traceback.format_exc(), key=key, has_key=True,
                                 record=rec, has_record=rec is not None)
        return self._err(TranslateError, f"{type(error).__name__}: {error} (on a batch of "
                         f"{called.num_rows} groups; no single group fails alone: is the "
                         "function groupwise?)", cause="".join(
                             traceback.format_exception(error)))

    def _write_state(self, store: ColumnarRuns, stored: pa.Table, new: pa.Table
                     ) -> list[RunInfo]:
        keys = list(self.shape.keys)
        run_id = f"e{self.epoch:08d}-{self.token}"
        if self.grouping == "outer":  # every key was called: the new state is all of it
            return [store.write_run(run_id, new)] if new.num_rows else []
        old = unique_keys([stored], keys)
        dead = old.filter(pc.invert(member(old, keys, new))) if new.num_rows else old
        runs = list(store.runs)
        if new.num_rows or dead.num_rows:
            runs.append(store.write_run(run_id, new, dead))
        return store.maybe_compact(run_id + "-c", runs, max_runs=self.max_runs)
