"""The stage-program contract: how any kind of stage runs one epoch on Spark.

A *program* runs a stage's epochs. Translate stages (a user function per group) and
compiled queries (DataFrame plans) are two programs; a new kind of stage is a third,
written against this module only (``docs/architecture.md``, "Adding a new kind of
stage"). The physical layer calls a program the same way whatever its kind:

1. :class:`EpochContext` gives it the epoch: the stage, the input increments, the
   last committed snapshot, the home's paths, the Spark session and partition count.
2. :meth:`StageProgram.run` does the work and writes only new, uniquely named files;
   it returns an :class:`EpochOutcome` (output increments, the program's own state
   description, measurements) without committing anything.
3. :func:`commit` — the one commit sequence of every kind — writes the manifest,
   switches ``CURRENT`` to it and collects garbage. If ``run`` raised instead,
   :meth:`StageProgram.discard` removes what it wrote; the committed state is untouched.

Reading the committed state (``strata show STAGE.state``, sizes) and collecting its
garbage need no dataflow: the manifest names the program's class, and its class methods
do both from the files alone.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql import SparkSession

from strata.faults import crashpoint
from strata.model.dataflow import Stage
from strata.model.errors import StrataError
from strata.physical.fusion import NO_FUSION, Fusion
from strata.storage import fs
from strata.storage.home import Home, StageLayout
from strata.storage.increments import Increment
from strata.storage.manifest import StateDir, StateSnapshot


@dataclass(frozen=True)
class EpochContext:
    """Everything one epoch of one stage is given."""

    stage: Stage
    epoch: int
    inputs: Mapping[str, tuple[Increment, ...]]  # input flow -> the epoch's increments
    committed: StateSnapshot  # the stage's last committed epoch (epoch 0: none yet)
    home: Home
    spark: SparkSession
    num_partitions: int  # state partitions: the committed state's, or the runner's
    mode: str  # "direct" or "blackbox" (translate stages; others may ignore it)
    token: str  # unique to this attempt: names every file it writes
    fusion: Fusion = NO_FUSION  # record-wise stages fused into this one's job
    store: str = "columns"  # direct mode's state store for a new home (translate stages)

    @property
    def layout(self) -> StageLayout:
        return self.home.stage(self.stage.name)

    def output_dir(self, flow: str) -> str:
        """The directory this attempt writes output ``flow``'s increment into."""
        return self.home.output_dir(flow, self.stage.name, self.epoch, self.token)

    @property
    def input_records(self) -> int:
        return sum(inc.records for incs in self.inputs.values() for inc in incs)


@dataclass
class EpochOutcome:
    """What a program's epoch wrote, not committed yet."""

    outputs: dict[str, Increment]  # output flow -> its new increment
    state: dict[str, Any]  # the program's description of its new state (JSON)
    num_partitions: int = 0
    # JSON; "operators": per operator of the epoch, an OperatorStats record (as JSON),
    # which the controller keeps in the catalog (strata.storage.operator_stats)
    metrics: dict[str, Any] = field(default_factory=dict)


class StageProgram(ABC):
    """Runs the epochs of one kind of stage. Subclasses set :attr:`kind`."""

    kind: ClassVar[str]
    # bump when a pickled program of the class changes shape: a stage registered in a
    # home (physical/registration.py) keeps the version it was compiled with
    format_version: ClassVar[int] = 1
    # whether the runner records the epoch's Spark I/O in its metrics (``spark_io``):
    # for programs whose plans learn from their own costs (docs/series.md)
    records_spark_io: ClassVar[bool] = False
    # said when a stage that another program of the same kind ran is given to this one
    # (their states differ): how to keep running it
    same_kind_hint: ClassVar[str] = ""

    @abstractmethod
    def run(self, ctx: EpochContext) -> EpochOutcome:
        """Run one epoch, writing only new files; raise an ``EpochError`` on bad input."""

    def discard(self, ctx: EpochContext) -> None:
        """Remove what a failed :meth:`run` wrote (no manifest references any of it)."""
        for flow in ctx.stage.output_names:
            fs.delete_quietly(ctx.output_dir(ctx.fusion.tail(flow)))
        type(self).collect_garbage(ctx.layout, ctx.committed)

    def describe(self) -> str:
        """One line for pictures and listings."""
        return self.kind

    def required_columns(self) -> Mapping[str, Sequence[str]]:
        """Input flow -> the columns every record of it needs a value in: declared NOT
        NULL on an external input the stage reads (``Dataflow.stage``), so ingest
        refuses a record without one. None by default."""
        return {}

    @classmethod
    @abstractmethod
    def collect_garbage(cls, layout: StageLayout, keep: StateSnapshot) -> None:
        """Delete the program's files under ``layout`` that ``keep`` does not reference."""

    @classmethod
    @abstractmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        """The committed state's records (no Spark needed)."""

    @classmethod
    @abstractmethod
    def state_bytes(cls, layout: StageLayout, state: Mapping[str, Any]) -> int:
        """The size on disk of the state that ``state`` describes."""

    @classmethod
    def summary(cls, layout: StageLayout, snap: StateSnapshot) -> str | None:
        """One line about the committed state for ``strata status`` (None: nothing to say
        beyond its size)."""
        return None

    @classmethod
    def read_answer(cls, layout: StageLayout, snap: StateSnapshot) -> pa.Table:
        """The stage's current answer, for kinds that keep one (a query's result)."""
        raise StrataError(f"stage {snap.stage!r} is a {snap.kind or cls.kind} stage: it keeps "
                          "state, not an answer")


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def load_class(path: str, what: str) -> type[StageProgram]:
    """The program class named ``module:QualName`` (imported by name, as unpickling would)."""
    module, _, name = path.partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in name.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as e:
        raise StrataError(f"{what} needs program {path!r}, which cannot be loaded ({e}); "
                          "install the code that wrote it") from None
    if not (isinstance(cls, type) and issubclass(cls, StageProgram)):
        raise StrataError(f"{what}: {path!r} is not a stage program")
    return cls


def program_class(snap: StateSnapshot) -> type[StageProgram]:
    """The program class that wrote ``snap``."""
    return load_class(snap.program, f"the state of stage {snap.stage!r}")


def read_state(layout: StageLayout, snap: StateSnapshot | None = None) -> list[dict]:
    """A stage's committed state records (empty before its first epoch)."""
    snap = snap or StateDir(layout).current()
    return program_class(snap).read_state(layout, snap) if snap.epoch else []


def read_answer(layout: StageLayout, snap: StateSnapshot | None = None) -> pa.Table:
    """A stage's current answer (a query's result), read from its committed state."""
    snap = snap or StateDir(layout).current()
    if not snap.epoch:
        raise StrataError(f"stage {layout.stage!r} has not run yet: it has no answer")
    return program_class(snap).read_answer(layout, snap)


def commit(ctx: EpochContext, program: StageProgram, outcome: EpochOutcome) -> StateSnapshot:
    """Make ``outcome`` the stage's committed epoch, atomically, then collect garbage.

    The manifest is written and ``CURRENT`` switched to it (``StateDir.commit``); before
    that switch a crash leaves the previous epoch committed, after it this one."""
    cls = type(program)
    snap = StateSnapshot(
        stage=ctx.stage.name, epoch=ctx.epoch, kind=cls.kind, program=class_path(cls),
        num_partitions=outcome.num_partitions, outputs=outcome.outputs, state=outcome.state,
        state_bytes=cls.state_bytes(ctx.layout, outcome.state),
    )
    snap.metrics = {**outcome.metrics, "state_bytes_total": snap.state_bytes,
                    "state_bytes_total_before": ctx.committed.state_bytes}
    sd = StateDir(ctx.layout)
    crashpoint("before-manifest")
    sd.commit(snap)
    crashpoint("after-manifest")
    collect_garbage(ctx.layout, snap)
    return snap


def collect_garbage(layout: StageLayout, keep: StateSnapshot) -> None:
    """Delete the stage's files that its committed snapshot ``keep`` does not reference."""
    if keep.epoch:
        program_class(keep).collect_garbage(layout, keep)
        StateDir(layout).drop_old_manifests(keep)
