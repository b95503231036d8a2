"""The program of translate stages: a user function called per group, on Spark.

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

A small direct-mode epoch runs in the driver instead of as a Spark job
(:meth:`TranslateProgram.in_driver`): the same tasks' code over the same files
(``EpochTask.run_here``), with no job, pickling or shuffle (``docs/architecture.md``,
"Small epochs in the driver").

Why this route rather than a co-partitioned ``cogroup`` or a bucketed table
(``docs/architecture.md``, "State is never re-shuffled"): in PySpark a ``cogroup`` of
RDDs only skips the state shuffle while the state RDD keeps its partitioner in memory;
after a restart the state must be re-read and the partitioner is lost. A bucketed
Parquet table survives restarts but joins through Spark SQL, which cannot call a Python
``translate`` per group with one iterator per flow, nor read only the state rows of the
epoch's keys. Reading state by partition index in the task after a ``partitionBy``
shuffle of the increment keeps both properties, and Spark's own shuffle metrics show
that only the increment moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from strata import config
from strata.model.dataflow import Stage
from strata.model.errors import EpochError, StrataError
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.physical.records import pending_state_records
from strata.physical.session import default_parallelism, is_connect
from strata.physical.shipping import pickle_by_value, ship_modules, user_modules
from strata.physical.small_epochs import conf_of, fits_driver
from strata.physical.tasks import EpochTask
from strata.physical.translate_arrow import run_on_arrow
from strata.storage import fs
from strata.storage.direct_columns import StoreSpec
from strata.storage.home import StageLayout
from strata.storage.increments import Increment, read_records
from strata.storage.manifest import StateSnapshot
from strata.storage.partition_store import RunInfo

MODES = ("direct", "blackbox")
# A direct epoch of at most spark.strata.translate.driverRecords input records runs in
# the driver (within the session's limits: physical/small_epochs.py); an input file of
# more than twice spark.strata.translate.sliceRecords records is read by several map
# tasks (docs/configuration.md; measured: docs/performance.md, "Small translate epochs").


def _identity(p: int) -> int:
    return p


@dataclass
class TranslateState:
    """A translate stage's state as its manifest describes it."""

    mode: str = "direct"
    runs: dict[int, list[RunInfo]] = field(default_factory=dict)  # direct: per partition
    pending: list[str] = field(default_factory=list)  # records bound for other partitions
    blackbox: list[str] = field(default_factory=list)  # black-box mode: the whole state
    store: StoreSpec = StoreSpec()  # direct mode's runs (from_json: "indexed" if unsaid)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "store": asdict(self.store), "pending": self.pending,
                "blackbox": self.blackbox,
                "runs": {str(p): [r.to_json() for r in rs] for p, rs in self.runs.items()}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TranslateState:
        if not d:
            return cls()
        return cls(d["mode"], {int(p): [RunInfo.from_json(r) for r in rs]
                               for p, rs in d["runs"].items()},
                   list(d["pending"]), list(d["blackbox"]),
                   StoreSpec(**d.get("store", {"format": "indexed"})))


class TranslateProgram(StageProgram):
    """Runs a stage's ``translate`` per group (and the record-wise stages fused in)."""

    kind = "translate"

    def run(self, ctx: EpochContext) -> EpochOutcome:
        stage, cur = ctx.stage, ctx.committed
        before = TranslateState.from_json(cur.state)
        if cur.epoch and before.mode != ctx.mode and stage.state is not None:
            raise StrataError(
                f"stage {stage.name!r} keeps its state in {before.mode!r} mode; run it in "
                f"that mode (or start from an empty home to switch to {ctx.mode!r})"
            )
        if not cur.epoch and stage.state is not None:  # a new home: the runner's store
            before.store = StoreSpec.for_state(ctx.store, stage.state.arrow_schema,
                                               stage.state.route_by)
        task = EpochTask(
            stage=stage, epoch=ctx.epoch, mode=ctx.mode, num_partitions=ctx.num_partitions,
            home=ctx.home, layout=ctx.layout, token=ctx.token, runs=before.runs,
            fusion=ctx.fusion, store=before.store,
        )
        here = self.in_driver(ctx, before)
        splits: list[tuple] = []
        slices = conf_of(ctx, config.TRANSLATE_SLICE_RECORDS)
        cores = 1 if here else default_parallelism(ctx.spark)
        for fi, name in enumerate(stage.input_names):
            for inc in ctx.inputs.get(name, ()):
                splits += input_splits(fi, inc, cores, slices)
        splits += [("pending", f) for f in before.pending]
        if ctx.mode == "blackbox":
            splits += [("blackbox", f) for f in before.blackbox]
        n = ctx.num_partitions
        route = "driver" if here else self.route(ctx)
        if here:
            results = task.run_here(splits)
        else:
            for s in [stage, *(x for c in (*ctx.fusion.pre.values(), *ctx.fusion.post.values())
                               for x in c)]:
                ship_user_code(ctx.spark, s)
            results = (run_on_arrow(ctx.spark, task, splits, n) if route == "arrow"
                       else self._run_on_spark(ctx.spark.sparkContext, task, splits, n))
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise EpochError.from_dict(min(errors, key=lambda d: str(d.get("flow"))))
        outcome = self._outcome(ctx, before, results)
        outcome.metrics["in_driver"] = here
        outcome.metrics["route"] = route  # "driver", "rdd" or "arrow"
        return outcome

    @staticmethod
    def route(ctx: EpochContext) -> str:
        """How the epoch's Spark job is built (``spark.strata.translate.route``): ``"rdd"``
        (``parallelize``, ``partitionBy``; a classic session only) or ``"arrow"``
        (DataFrames, :mod:`strata.physical.translate_arrow`; any session). ``auto``: the
        RDD route on a classic session, the Arrow route over Spark Connect."""
        route = conf_of(ctx, config.TRANSLATE_ROUTE)
        connect = is_connect(ctx.spark)
        if route == "auto":
            return "arrow" if connect else "rdd"
        if route == "rdd" and connect:
            raise StrataError(
                f"stage {ctx.stage.name!r}: spark.strata.translate.route=rdd needs a classic "
                "Spark session (RDDs); over Spark Connect set it to arrow or auto")
        return route

    @staticmethod
    def in_driver(ctx: EpochContext, before: TranslateState) -> bool:
        """Whether the epoch runs in the driver (``EpochTask.run_here``): direct mode, at
        most ``spark.strata.translate.driverRecords`` input records (and the session's
        ``spark.strata.driverEpoch.maxRows``), at most
        ``spark.strata.driverEpoch.maxStateBytes`` of state runs and pending records.
        Outer grouping calls every stored key too, so its stored entries count as input.
        Black-box epochs always run as Spark tasks: re-shuffling the whole state is what
        that mode is for."""
        if ctx.mode != "direct":
            return False
        runs = [r for rs in before.runs.values() for r in rs]
        state = sum(r.nbytes for r in runs) + sum(fs.size_of(f) for f in before.pending)
        calls = ctx.input_records
        if ctx.stage.state is not None and ctx.stage.state.grouping == "outer":
            calls += sum(r.entries for r in runs)
        return fits_driver(ctx, calls, state, conf_of(ctx, config.TRANSLATE_DRIVER_RECORDS))

    @staticmethod
    def _run_on_spark(sc: Any, task: EpochTask, splits: list[tuple], n: int) -> list[dict]:
        """The epoch as one Spark job: the map side, a shuffle of the routed items into
        the ``n`` state partitions, and each partition's side (a record-wise stage: a
        task per split, no shuffle)."""
        if task.stage.is_recordwise:
            rdd = sc.parallelize(splits, max(1, len(splits)))
            return rdd.mapPartitionsWithIndex(task.run_unshuffled).collect()
        rdd = sc.parallelize(splits, max(1, min(len(splits), 4 * n)))
        return (rdd.mapPartitions(task.map_splits)
                .partitionBy(n, _identity)
                .mapPartitionsWithIndex(task.run_shuffled)
                .collect())

    @staticmethod
    def _outcome(ctx: EpochContext, before: TranslateState, results: list[dict]
                 ) -> EpochOutcome:
        stage = ctx.stage
        outputs = {ctx.fusion.tail(f): Increment() for f in stage.output_names}
        for r in sorted(results, key=lambda r: r["partition"]):
            for flow, (uri, rows, size) in r["outputs"].items():
                o = outputs[flow]
                outputs[flow] = Increment(o.files + (uri,), o.records + rows, o.bytes + size)
        after = TranslateState(mode=ctx.mode, store=before.store)
        if stage.state is not None and ctx.mode == "direct":
            after.runs = {r["partition"]: [RunInfo.from_json(x) for x in r.get("runs", [])]
                          for r in results}
        after.pending = sorted(r["pending"] for r in results if "pending" in r)
        after.blackbox = sorted(r["blackbox"] for r in results if "blackbox" in r)
        read = sum(r.get("state_bytes_read", 0) for r in results)
        read += sum(fs.size_of(f) for f in before.pending)
        if ctx.mode == "blackbox":
            read += sum(fs.size_of(f) for f in before.blackbox)
        metrics = {
            "keys_called": sum(r.get("keys_called", 0) for r in results),
            "state_bytes_read": read,  # lookups, scans, pending files and compaction
            "state_bytes_compaction_read": sum(r.get("state_bytes_compaction_read", 0)
                                               for r in results),
            "state_bytes_from_machine": sum(r.get("state_bytes_from_machine", 0)
                                            for r in results),
        }
        return EpochOutcome(outputs, after.to_json(),
                            ctx.num_partitions if stage.state is not None else 0, metrics)

    # -- the committed state, read from files -------------------------------------------
    @classmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        """Direct-mode runs plus records bound for another partition, or the black-box
        state files."""
        st = TranslateState.from_json(snap.state)
        if st.mode == "blackbox":
            recs = read_records(st.blackbox)
        else:
            recs = [r for p in sorted(st.runs)
                    for _, _, rs in st.store.open(layout.root, p, st.runs[p]).scan()
                    for r in rs]
        for f in st.pending:
            recs += pending_state_records(fs.read_required(f))
        return recs

    @classmethod
    def state_bytes(cls, layout: StageLayout, state: Mapping[str, Any]) -> int:
        st = TranslateState.from_json(state)
        runs = sum(r.nbytes for rs in st.runs.values() for r in rs)
        return runs + sum(fs.size_of(f) for f in st.pending + st.blackbox)

    @classmethod
    def summary(cls, layout: StageLayout, snap: StateSnapshot) -> str | None:
        """The mode, and in direct mode the store and its runs."""
        if not snap.state:
            return None
        st = TranslateState.from_json(snap.state)
        if st.mode == "blackbox":
            return f"black-box mode: {len(st.blackbox)} state file(s)"
        count = sum(len(rs) for rs in st.runs.values())
        keyed = f" keyed by {st.store.column or 'encoded key'}" if st.store.format == "columns" \
            else ""
        return (f"direct mode, {st.store.format} store{keyed}: {count} run(s) over "
                f"{len(st.runs)} partition(s), {len(st.pending)} pending file(s)")

    @classmethod
    def collect_garbage(cls, layout: StageLayout, keep: StateSnapshot) -> None:
        st = TranslateState.from_json(keep.state)
        for p in layout.partitions():
            st.store.open(layout.root, p, []).delete_unreferenced(st.runs.get(p, []))
        referenced = set(st.pending) | set(st.blackbox)
        for directory in (layout.pending_dir, layout.blackbox_dir):
            for name in fs.list_dir(directory):
                uri = fs.join(directory, name)
                if uri not in referenced:
                    fs.delete_quietly(uri)


def input_splits(fi: int, inc: Increment, cores: int, slice_records: int) -> list[tuple]:
    """Map-side splits of input ``fi``'s increment ``inc``: one per file, or row slices
    ``("input", fi, uri, i, k)`` of files of more than twice ``slice_records`` records
    (the file's records are assumed even), up to one per core."""
    files = len(inc.files)
    per_file = inc.records // max(1, files)
    k = min(-(-per_file // max(1, slice_records)), -(-cores // max(1, files)))
    if per_file < 2 * slice_records or k < 2:
        return [("input", fi, f) for f in inc.files]
    return [("input", fi, f, i, k) for f in inc.files for i in range(k)]


def ship_user_code(spark: Any, stage: Stage) -> None:
    """Make the stage's user functions runnable on the workers (see physical/shipping.py):
    their modules pickled by value, and the code those import shipped with addPyFile."""
    fns = [stage.translate, *(i.route for i in stage.inputs), *(i.order for i in stage.inputs)]
    if stage.state is not None:
        fns += [stage.state.route, stage.state.order]
    modules = user_modules(fns)
    pickle_by_value(modules)
    ship_modules(spark, modules)
