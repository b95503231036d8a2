"""Run one stage epoch on Spark and commit it atomically.

Two execution modes:

``direct`` (default)
    The state of partition ``p`` lives in files beside it (``state/<stage>/p…``)
    and is read by the task that handles partition ``p`` after the shuffle, so only
    the new input and the state records that move to another partition cross the
    shuffle. This holds across process restarts because a key's partition is a
    stable hash of its canonical encoding, not of Python's per-process ``hash``.
    Inner grouping looks up only the keys of the epoch through a per-run index.

``blackbox``
    The paper's baseline: the whole state is read, routed and shuffled with the
    input every epoch, like a plain MapReduce job whose state is another input.

Why this route rather than a co-partitioned ``cogroup`` or a bucketed table
(DESIGN.md §3): in PySpark a ``cogroup`` of RDDs only skips the state shuffle while
the state RDD keeps its partitioner in memory; after a restart the state must be
re-read and the partitioner is lost. A bucketed Parquet table survives restarts but
joins through Spark SQL, which cannot call a Python ``translate`` per group with one
iterator per flow, nor read only the state rows of the epoch's keys. Reading state
by partition index in the task after a ``partitionBy`` shuffle of the increment keeps
both properties, and Spark's own shuffle metrics show that only the increment moved.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession

from strata.faults import crash_later, crashpoint
from strata.model.dataflow import Stage
from strata.model.errors import EpochError, StrataError
from strata.physical.fusion import NO_FUSION, Fusion
from strata.physical.session import get_spark
from strata.physical.tasks import EpochTask
from strata.storage import fs
from strata.storage.increments import Increment
from strata.storage.manifest import StateDir, StateSnapshot
from strata.storage.partition_store import RunInfo

MODES = ("direct", "blackbox")
# An input file of more than twice this many records is read by several map tasks (row
# slices of the file), up to one task per core, so that one large increment file does
# not leave all but one core idle on the map side.
SLICE_RECORDS = 50_000


def _identity(p: int) -> int:
    return p


@dataclass
class EpochResult:
    """A committed epoch: its output increments, new state and measurements."""

    stage: str
    epoch: int
    outputs: dict[str, Increment]
    snapshot: StateSnapshot
    metrics: dict


class SparkStageRunner:
    """Runs stage epochs of one strata home on Spark.

    ``home`` holds flow increments (``flows/``) and stage state (``state/``); it may be
    a local path or any Hadoop-compatible URI reachable from driver and executors.
    """

    def __init__(
        self,
        home: str,
        spark: SparkSession | None = None,
        mode: str = "direct",
        num_partitions: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise StrataError(f"unknown execution mode {mode!r}; choose one of {MODES}")
        self.home = home
        self.spark = spark or get_spark()
        self.mode = mode
        self.num_partitions = num_partitions or max(2, self.spark.sparkContext.defaultParallelism)

    def state_dir(self, stage: Stage | str) -> StateDir:
        name = stage if isinstance(stage, str) else stage.name
        return StateDir(fs.join(self.home, "state", name), name)

    @property
    def flows_root(self) -> str:
        return fs.join(self.home, "flows")

    def committed(self, stage: Stage | str) -> StateSnapshot:
        """The stage's last committed epoch (epoch 0 if it never ran)."""
        return self.state_dir(stage).current()

    def state_records(self, stage: Stage) -> list[dict]:
        """The stage's committed state records (including those bound for another partition)."""
        return self.state_dir(stage).records()

    def state_table(self, stage: Stage) -> pa.Table:
        """The committed state as an Arrow table (``.to_pandas()`` for pandas)."""
        return pa.Table.from_pylist(self.state_records(stage), schema=stage.state.arrow_schema)

    def state_dataframe(self, stage: Stage) -> DataFrame:
        """The committed state as a Spark DataFrame."""
        return self.spark.createDataFrame(self.state_table(stage).to_pandas())

    def flow_dataframe(self, increments: Sequence[Increment]) -> DataFrame:
        """Output increments of a flow as one Spark DataFrame."""
        return self.spark.read.parquet(*[f for inc in increments for f in inc.files])

    def run_epoch(
        self,
        stage: Stage,
        inputs: Mapping[str, Increment | Sequence[Increment]],
        epoch: int | None = None,
        fusion: Fusion = NO_FUSION,
    ) -> EpochResult:
        """Run ``stage`` over ``inputs`` (increments per input flow) and commit.

        ``epoch`` defaults to the next one. Asking for the epoch that is already
        committed returns its recorded result without running anything (so a
        controller can repeat an epoch after a crash without applying it twice).
        With ``fusion``, record-wise stages run inside this job (see
        :mod:`strata.physical.fusion`): ``inputs`` then holds the increments of each
        chain's first flow, and the result names each chain's last flow.
        """
        sd = self.state_dir(stage)
        cur = sd.current()
        epoch = cur.epoch + 1 if epoch is None else epoch
        if epoch == cur.epoch and epoch > 0:
            return EpochResult(stage.name, epoch, cur.outputs, cur, cur.metrics)
        if epoch != cur.epoch + 1:
            raise StrataError(
                f"stage {stage.name!r}: epoch {epoch} requested but epoch {cur.epoch} is the "
                f"last committed; the next epoch is {cur.epoch + 1}"
            )
        for flow in inputs:
            stage.input(flow)  # unknown input flows are an error, not silently ignored
        if stage.program is not None:  # a compiled query: DataFrame plans, not translate
            return stage.program.run_epoch(self, stage, inputs, epoch, cur)
        if cur.epoch and cur.mode != self.mode and stage.state is not None:
            raise StrataError(
                f"stage {stage.name!r} keeps its state in {cur.mode!r} mode; run it in that "
                f"mode (or start from an empty home to switch to {self.mode!r})"
            )
        n = cur.num_partitions or self.num_partitions
        for s in [stage, *(x for c in (*fusion.pre.values(), *fusion.post.values()) for x in c)]:
            ship_user_code(s)
        task = EpochTask(
            stage=stage, epoch=epoch, mode=self.mode, num_partitions=n, state_root=sd.root,
            flows_root=self.flows_root, token=uuid.uuid4().hex[:10], runs=cur.runs,
            fusion=fusion,
        )
        sc = self.spark.sparkContext
        splits: list[tuple] = []
        for fi, name in enumerate(stage.input_names):
            incs = inputs.get(name, ())
            for inc in [incs] if isinstance(incs, Increment) else incs:
                splits += input_splits(fi, inc, sc.defaultParallelism)
        splits += [("pending", f) for f in cur.pending]
        if self.mode == "blackbox":
            splits += [("blackbox", f) for f in cur.blackbox]

        sc.setJobDescription(f"strata {stage.name} epoch {epoch} ({self.mode})")
        crash_later("during-job", 0.5)
        try:
            if stage.is_recordwise:
                rdd = sc.parallelize(splits, max(1, len(splits)))
                results = rdd.mapPartitionsWithIndex(task.run_unshuffled).collect()
            else:
                rdd = sc.parallelize(splits, max(1, min(len(splits), 4 * n)))
                results = (
                    rdd.mapPartitions(task.map_splits)
                    .partitionBy(n, _identity)
                    .mapPartitionsWithIndex(task.run_shuffled)
                    .collect()
                )
        except EpochError:
            self._discard(task)
            raise
        except Exception as e:
            self._discard(task)
            raise EpochError(
                "Spark could not run the epoch", stage=stage.name, epoch=epoch,
                cause=_spark_cause(e),
            ) from e
        finally:
            sc.setJobDescription(None)
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            self._discard(task)
            raise EpochError.from_dict(min(errors, key=lambda d: str(d.get("flow"))))
        return self._commit(stage, task, cur, results)

    def _commit(self, stage: Stage, task: EpochTask, cur: StateSnapshot, results) -> EpochResult:
        outputs = {task.fusion.tail(f): Increment() for f in stage.output_names}
        for r in sorted(results, key=lambda r: r["partition"]):
            for flow, (uri, rows, size) in r["outputs"].items():
                o = outputs[flow]
                outputs[flow] = Increment(o.files + (uri,), o.records + rows, o.bytes + size)
        snap = StateSnapshot(
            stage=stage.name, epoch=task.epoch, mode=self.mode,
            num_partitions=task.num_partitions if stage.state is not None else 0,
            outputs=outputs,
        )
        if stage.state is not None and self.mode == "direct":
            snap.runs = {r["partition"]: [RunInfo.from_json(x) for x in r.get("runs", [])]
                         for r in results}
        snap.pending = sorted(r["pending"] for r in results if "pending" in r)
        snap.blackbox = sorted(r["blackbox"] for r in results if "blackbox" in r)
        read = sum(r.get("state_bytes_read", 0) for r in results)
        read += sum(fs.size_of(f) for f in cur.pending)
        if self.mode == "blackbox":
            read += sum(fs.size_of(f) for f in cur.blackbox)
        snap.metrics = {
            "keys_called": sum(r.get("keys_called", 0) for r in results),
            "state_bytes_read": read,  # lookups, scans, pending files and compaction
            "state_bytes_compaction_read": sum(r.get("state_bytes_compaction_read", 0)
                                               for r in results),
            "state_bytes_total": snap.total_bytes,
            "state_bytes_total_before": cur.total_bytes,
        }
        sd = self.state_dir(stage)
        crashpoint("before-manifest")
        sd.commit(snap)
        crashpoint("after-manifest")
        sd.gc(snap)
        return EpochResult(stage.name, task.epoch, outputs, snap, snap.metrics)

    def _discard(self, task: EpochTask) -> None:
        """Remove what a failed epoch wrote; none of it is referenced by a manifest."""
        for flow in task.stage.output_names:
            fs.delete_quietly(task.output_dir(task.fusion.tail(flow)))
        if task.stage.state is not None:
            self.state_dir(task.stage).gc(self.state_dir(task.stage).current())


def input_splits(fi: int, inc: Increment, cores: int) -> list[tuple]:
    """Map-side splits of input ``fi``'s increment ``inc``: one per file, or row slices
    ``("input", fi, uri, i, k)`` of large files (the file's records are assumed even)."""
    files = len(inc.files)
    per_file = inc.records // max(1, files)
    k = min(-(-per_file // SLICE_RECORDS), -(-cores // max(1, files)))
    if per_file < 2 * SLICE_RECORDS or k < 2:
        return [("input", fi, f) for f in inc.files]
    return [("input", fi, f, i, k) for f in inc.files for i in range(k)]


def ship_user_code(stage: Stage) -> None:
    """Pickle the stage's user functions by value when workers cannot import their module.

    A pipeline file or a test module is importable in the driver only; its functions
    would otherwise be pickled as references that the Python workers cannot resolve.
    """
    fns = [stage.translate, *(i.route for i in stage.inputs), *(i.order for i in stage.inputs)]
    if stage.state is not None:
        fns += [stage.state.route, stage.state.order]
    for fn in fns:
        name = getattr(fn, "__module__", None)
        module = sys.modules.get(name or "")
        if module is None or name in _BY_VALUE or name.split(".")[0] in _IMPORTABLE:
            continue
        origin = getattr(module, "__file__", None) or ""
        if "site-packages" in origin or "dist-packages" in origin:
            continue
        cloudpickle.register_pickle_by_value(module)
        _BY_VALUE.add(name)


_IMPORTABLE = {"strata", "builtins", "operator", "functools"}
_BY_VALUE: set[str] = set()


def _spark_cause(e: Exception) -> str:
    text = str(e)
    for marker in ("PythonException:", "Exception:"):
        if marker in text:
            return text[text.index(marker):].strip()[:2000]
    return text[:2000]
