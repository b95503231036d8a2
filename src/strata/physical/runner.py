"""Run one stage epoch on Spark and commit it atomically, whatever the kind of stage.

:class:`SparkStageRunner` resolves the stage's program (a translate stage's
:class:`~strata.physical.translate.TranslateProgram`, or the compiled program a stage
carries), hands it an :class:`~strata.physical.program.EpochContext`, and commits what it
wrote with :func:`~strata.physical.program.commit`. A failed epoch is discarded: nothing
of it is committed, and the error names the stage and epoch.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from strata.faults import crash_later
from strata.model.dataflow import Stage
from strata.model.errors import EpochError, StrataError
from strata.physical.fusion import NO_FUSION, Fusion
from strata.physical.program import (
    EpochContext,
    StageProgram,
    class_path,
    commit,
    read_state,
)
from strata.physical.session import default_parallelism, get_spark, is_connect, job_confs
from strata.physical.spark_io import io_since, newest_job, reads_counted
from strata.physical.translate import MODES, TranslateProgram
from strata.storage.direct_columns import STORES
from strata.storage.home import Home
from strata.storage.increments import Increment
from strata.storage.manifest import StateDir, StateSnapshot


@dataclass
class EpochResult:
    """A committed epoch: its output increments, new state and measurements."""

    stage: str
    epoch: int
    outputs: dict[str, Increment]
    snapshot: StateSnapshot
    metrics: dict


def program_of(stage: Stage) -> StageProgram:
    """The program that runs ``stage``'s epochs: its compiled one, else translate."""
    if stage.program is None:
        return TranslateProgram()
    if not isinstance(stage.program, StageProgram):
        raise StrataError(f"stage {stage.name!r}: its program {stage.program!r} does not "
                          "implement strata.physical.program.StageProgram")
    return stage.program


class SparkStageRunner:
    """Runs stage epochs of one strata home on Spark.

    ``home`` holds flow increments and stage state (:mod:`strata.storage.home`); it may be
    a local path or any Hadoop-compatible URI reachable from driver and executors.
    ``store`` is the direct-mode state store of stages that begin under this runner
    (``strata.storage.direct_columns``); a stage already run keeps its own.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | Home,
        spark: SparkSession | None = None,
        mode: str = "direct",
        num_partitions: int | None = None,
        store: str = "columns",
    ) -> None:
        if mode not in MODES:
            raise StrataError(f"unknown execution mode {mode!r}; choose one of {MODES}")
        if store not in STORES:
            raise StrataError(f"unknown state store {store!r}; choose one of {STORES}")
        self.store = store
        self.home = home if isinstance(home, Home) else Home(home)
        self.spark = spark or get_spark()
        self.mode = mode
        self.num_partitions = num_partitions or max(2, default_parallelism(self.spark))

    def state_dir(self, stage: Stage | str) -> StateDir:
        return StateDir(self.home.stage(stage if isinstance(stage, str) else stage.name))

    def committed(self, stage: Stage | str) -> StateSnapshot:
        """The stage's last committed epoch (epoch 0 if it never ran)."""
        return self.state_dir(stage).current()

    def state_records(self, stage: Stage) -> list[dict]:
        """The stage's committed state records (including those bound for another partition)."""
        return read_state(self.home.stage(stage.name))

    def state_table(self, stage: Stage) -> pa.Table:
        """The committed state as an Arrow table (``.to_pandas()`` for pandas)."""
        if stage.state is None:
            raise StrataError(f"stage {stage.name!r} declares no state")
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
        cur = self.committed(stage)
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
        program = program_of(stage)
        if cur.epoch and cur.program != class_path(type(program)):
            again = (f" ({program.same_kind_hint})"
                     if cur.kind == program.kind and program.same_kind_hint else "")
            raise StrataError(
                f"stage {stage.name!r} was run by {cur.program!r} and is now a "
                f"{program.kind!r} stage run by {class_path(type(program))!r}; give the new "
                f"stage another name or use a new home{again}")
        ctx = EpochContext(
            stage=stage, epoch=epoch,
            inputs={f: (incs,) if isinstance(incs, Increment) else tuple(incs)
                    for f, incs in inputs.items()},
            committed=cur, home=self.home, spark=self.spark,
            num_partitions=cur.num_partitions or self.num_partitions, mode=self.mode,
            token=uuid.uuid4().hex[:10], fusion=fusion, store=self.store,
        )
        connect = is_connect(self.spark)
        if connect:
            # no SparkContext for a job description: the epoch's jobs carry a tag instead
            tag = re.sub(r"[^A-Za-z0-9_.:-]", "_", f"strata:{stage.name}:epoch-{epoch}")
            self.spark.addTag(tag)
        else:
            sc = self.spark.sparkContext
            sc.setJobDescription(f"strata {stage.name} epoch {epoch} ({program.kind})")
        crash_later("during-job", 0.5)
        first = None if connect or not program.records_spark_io else newest_job(self.spark)
        try:
            with job_confs(self.spark):  # whatever the user's session says
                outcome = program.run(ctx)
        except StrataError:
            program.discard(ctx)
            raise
        except Exception as e:
            program.discard(ctx)
            raise EpochError("Spark could not run the epoch", stage=stage.name, epoch=epoch,
                             cause=spark_failure(e)) from e
        finally:
            if connect:
                self.spark.removeTag(tag)
            else:
                sc.setJobDescription(None)  # type: ignore[arg-type]  # None clears it
        if first is not None:  # after the epoch's try: a measurement never discards it
            io = io_since(self.spark, first)
            if io is not None and not reads_counted(self.spark):
                del io["read"]  # footers only: a learned cost must not take it as the reads
            outcome.metrics["spark_io"] = io
        snap = commit(ctx, program, outcome)
        return EpochResult(stage.name, epoch, snap.outputs, snap, snap.metrics)


def spark_failure(e: BaseException) -> str:
    """The cause of an epoch's Spark failure: Spark's whole message without the JVM's
    stack (the query context, such as the SQL fragment that divided by zero, which
    ``strata run --traceback`` prints), ending with one line that says what failed:
    the ``[ERROR_CLASS] message`` (a division by zero, an overflow, a bad cast), else the
    Python exception a worker raised, else the start of the text."""
    text = str(e)
    summary = _failure_summary(text)
    if "\n" in summary.strip():  # a worker's Python traceback: already the whole story
        return summary
    context = "\n".join(line for line in text.splitlines()  # the summary goes last
                        if not _JVM_FRAME.match(line) and _line_summary(line) != summary
                        and line.strip() != summary).strip()
    return f"{context[:_CONTEXT_CHARS]}\n{summary}" if context else summary


_JVM_FRAME = re.compile(r"^\s+(at [\w$.<>/]+\(|\.\.\. \d+ more)")
_CONTEXT_CHARS = 6000


def _line_summary(line: str) -> str | None:
    """The ``[ERROR_CLASS] message`` a line of Spark's message holds (its first 500
    characters), if it holds one."""
    m = re.search(r"\[([A-Z][A-Z0-9_.]+)\]\s+(.*)", line)
    return f"[{m.group(1)}] {m.group(2).strip()}"[:500] if m else None


def _failure_summary(text: str) -> str:
    for line in text.splitlines():
        summary = _line_summary(line)
        if summary:
            return summary
    for marker in ("PythonException:", "Exception:"):
        if marker in text:
            return text[text.index(marker):].strip()[:2000]
    return text[:2000]

