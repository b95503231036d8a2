"""A small deterministic multi-stage driver, and the two executors it runs stages on.

``run_dataflow(df, batches, executor)`` pushes each batch of source records through the
dataflow with a fixed schedule (see its docstring), so that two executors that implement
the model identically produce the same output increments, epoch by epoch
(docs/testing.md, "The schedule").

Executors expose ``run(stage, {flow: records}) -> {flow: records}`` (one stage epoch)
and ``state_records(stage) -> records`` (the stage's committed state):

- :class:`ReferenceRunner` wraps the plain-Python reference executor (the oracle);
- :class:`SparkRunner` writes each input record list to Parquet, runs the epoch with
  :class:`~strata.physical.runner.SparkStageRunner` (``direct`` or ``blackbox`` mode)
  and reads the output increments back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import pyarrow as pa

from strata.model.dataflow import Dataflow, Flow, Stage
from strata.model.schema import to_table
from strata.physical.runner import SparkStageRunner
from strata.reference import ReferenceExecutor
from strata.storage import fs
from strata.storage.increments import Increment, read_records, write_table

Record = dict[str, Any]


class StageExecutor(Protocol):
    def run(self, stage: Stage, inputs: dict[str, list[Record]]) -> dict[str, list[Record]]: ...

    def state_records(self, stage: Stage) -> list[Record]: ...


def run_dataflow(
    df: Dataflow,
    batches: Iterable[Mapping[str, list[Record]]],
    executor: StageExecutor,
    max_rounds: int = 20,
) -> dict[str, list[list[Record]]]:
    """Run ``df`` over ``batches`` and return every output increment per flow, in order.

    For each batch (source flow → records), one increment is queued per source flow
    with records. Then the stages are visited in ``df.topological_order()``, pass
    after pass: a stage runs one epoch when at least one of its input flows has a
    queued increment, consuming one increment from each input that has one; its
    non-empty output increments are queued for every consumer (itself included, for
    a loopback flow). A batch is done when a full pass ran no stage, or after
    ``max_rounds`` passes. Empty output increments are returned too (one per epoch of
    the producer), so that runs can be compared epoch by epoch.
    """
    df.validate()
    order = df.topological_order()
    queues: dict[tuple[str, str], deque[list[Record]]] = {
        (s.name, f): deque() for s in order for f in s.input_names
    }
    results: dict[str, list[list[Record]]] = {
        f.name: [] for f in df.flows.values() if not f.external
    }

    def offer(flow: str, records: list[Record]) -> None:
        if not records:
            return
        for consumer in df.consumers(flow):
            queues[(consumer.name, flow)].append(list(records))

    for batch in batches:
        for flow, records in batch.items():
            if flow not in df.flows or not df.flows[flow].external:
                raise ValueError(f"batch names {flow!r}, which is not a source flow")
            offer(flow, records)
        for _ in range(max_rounds):
            ran = False
            for stage in order:
                ready = [f for f in stage.input_names if queues[(stage.name, f)]]
                if not ready:
                    continue
                inputs = {f: queues[(stage.name, f)].popleft() for f in ready}
                outputs = executor.run(stage, inputs)
                ran = True
                for flow in stage.output_names:
                    recs = list(outputs.get(flow, []))
                    results[flow].append(recs)
                    offer(flow, recs)
            if not ran:
                break
    return results


class ReferenceRunner:
    """The reference executor behind the driver's executor interface."""

    name = "reference"

    def __init__(self) -> None:
        self.ref = ReferenceExecutor()

    def run(self, stage: Stage, inputs: dict[str, list[Record]]) -> dict[str, list[Record]]:
        return self.ref.run(stage, {f: list(r) for f, r in inputs.items()})

    def state_records(self, stage: Stage) -> list[Record]:
        return list(self.ref.state_records(stage))


def flow_schema(stage: Stage, flow: str) -> pa.Schema:
    """The declared schema of input ``flow`` of ``stage``."""
    f = stage.input(flow).flow
    if isinstance(f, Flow):
        return f.schema
    for out in stage.outputs:  # an input given by name: find it through the dataflow
        if out.dataflow is not None and flow in out.dataflow.flows:
            return out.dataflow.flows[flow].schema
    raise LookupError(f"cannot find the schema of flow {flow!r} of stage {stage.name!r}")


class SparkRunner:
    """Runs stage epochs with :class:`SparkStageRunner` under ``home``, in ``mode``
    (``"direct"`` or ``"blackbox"``) over direct mode's state ``store`` (``"columns"`` or
    ``"indexed"``). ``around_epoch``, if given, makes a context each epoch runs in (e.g.
    session confs that choose where small epochs run).

    Each input record list is written as ``files_per_input`` Parquet files (records
    dealt round-robin, so an increment may span several files).
    """

    def __init__(
        self,
        spark: Any,
        home: str,
        mode: str = "direct",
        num_partitions: int = 2,
        files_per_input: int = 1,
        store: str = "columns",
        around_epoch: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.name = mode
        self.home = home
        self.spark = spark
        self.runner = SparkStageRunner(home, spark, mode=mode, num_partitions=num_partitions,
                                       store=store)
        self.files_per_input = files_per_input
        self.around_epoch = around_epoch or nullcontext
        self._seq = 0

    def write_increment(self, stage: Stage, flow: str, records: list[Record]) -> Increment:
        schema = flow_schema(stage, flow)
        parts = [records[i :: self.files_per_input] for i in range(self.files_per_input)]
        files: list[str] = []
        size = 0
        for part in parts:
            if not part and files:
                continue
            table = to_table(part, schema)
            if isinstance(table, tuple):
                raise ValueError(f"record does not fit {flow!r}: {table}")
            self._seq += 1
            uri = fs.join(self.home, "in", stage.name, flow, f"{self._seq:06d}.parquet")
            size += write_table(uri, table)
            files.append(uri)
        return Increment(tuple(files), len(records), size)

    def run(self, stage: Stage, inputs: dict[str, list[Record]]) -> dict[str, list[Record]]:
        incs = {
            f: self.write_increment(stage, f, recs) for f, recs in inputs.items() if recs
        }
        with self.around_epoch():
            result = self.runner.run_epoch(stage, incs)
        return {f: read_records(inc.files) for f, inc in result.outputs.items()}

    def state_records(self, stage: Stage) -> list[Record]:
        # in either mode and with either direct-mode store, with the records bound for
        # another partition (pending files), part of the state until the next epoch
        return self.runner.state_records(stage)
