"""The controller: runs a dataflow continuously over a strata home.

It keeps, per (flow, consuming stage), a *connector*: the queue of increments waiting for
that consumer. Arrivals are cut into input increments by the consumer's ``frame_by``
(:mod:`~strata.controller.framing`); :mod:`~strata.controller.scheduling` picks the next
stage and what it reads and removes; each epoch is write-ahead logged, run through the
physical layer (whatever the kind of stage), and finished by one catalog transaction.
After a crash, :mod:`~strata.controller.recovery` applies an epoch whose job committed or
re-runs one that did not: nothing is lost and nothing is applied twice
(docs/architecture.md, "The life of one epoch").
"""

from __future__ import annotations

import base64
import os
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from strata import config
from strata.controller import recovery, scheduling
from strata.controller.dataframes import ingest_dataframe
from strata.controller.framing import frame_all
from strata.controller.ingest import ingest
from strata.controller.lock import HomeLock
from strata.controller.references import check_referenced
from strata.controller.registration import attach_registered_stages, register
from strata.faults import crashpoint
from strata.model.dataflow import Dataflow
from strata.model.runnability import runnable_all
from strata.model.schema import to_ddl
from strata.physical.fusion import PhysicalStage, plan
from strata.physical.program import collect_garbage, read_answer, read_state
from strata.physical.runner import SparkStageRunner
from strata.physical.session import set_runtime_confs
from strata.physical.shipping import ship_files
from strata.storage import fs
from strata.storage.catalog import Catalog, NewOutput
from strata.storage.home import Home
from strata.storage.increments import Increment
from strata.storage.manifest import StateDir
from strata.storage.operator_stats import OperatorStats


@dataclass
class EpochReport:
    """What one epoch of one stage did (for progress displays and ``--json``)."""

    stage: str
    epoch: int
    records_in: dict[str, int]
    records_out: dict[str, int]
    seconds: float
    metrics: dict = field(default_factory=dict)
    recovered: bool = False
    finished: float = field(default_factory=time.time)  # wall-clock time it was applied

    def to_json(self) -> dict:
        return self.__dict__.copy()


class Controller:
    """Runs ``dataflow`` over the strata home ``home``; one controller per home at a time.

    Use as a context manager (it takes the home's lock)::

        with Controller("/data/home", dataflow) as c:
            c.ingest("urls", ["day-1.jsonl"])
            c.run()

    The code of the dataflow's functions, and what they import from beside them, is
    shipped to Spark's workers (physical/shipping.py); ``py_files`` adds more
    (``.py``/``.zip``/``.egg`` files or directories), like ``spark-submit --py-files``.

    ``remote`` (``sc://host:port``; default ``$STRATA_REMOTE`` unless ``master`` or
    ``spark`` is given) runs the epochs over Spark Connect: every kind of stage runs
    there (translate stages on DataFrames, physical/translate_arrow.py).

    ``spark_conf`` sets Spark session confs (runtime ones, such as
    ``spark.sql.shuffle.partitions`` or ``spark.strata.driverEpoch.maxRows``) before the
    first epoch.

    ``store`` is direct mode's state store for stages whose state begins here:
    ``"columns"`` (Arrow runs) or ``"indexed"`` (pickled runs with a hash index, whose
    inner lookups read only the epoch's entries); a stage already run keeps its own.

    ``home`` may be a URI Spark and pyarrow both read (``file:///…``, ``hdfs://…``,
    ``s3a://…``); ``catalog`` names a local path for the SQLite catalog (and its lock),
    which a home not on a local filesystem needs (docs/architecture.md, "The home on
    disk").
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | Home,
        dataflow: Dataflow,
        *,
        catalog: str | os.PathLike[str] | None = None,
        spark: Any = None,
        master: str | None = None,
        remote: str | None = None,
        mode: str = "direct",
        num_partitions: int | None = None,
        store: str = "columns",
        fuse: bool = True,
        py_files: Sequence[str | os.PathLike[str]] = (),
        spark_conf: Mapping[str, str] | None = None,
    ) -> None:
        if master is None and spark is None and remote is None:
            remote = config.env(config.REMOTE)
        dataflow.validate()  # before anything is written: a bad dataflow leaves no home
        self.layout = Home(home, catalog)
        self.home = self.layout.root
        self.layout.create()
        self.catalog = Catalog(self.layout.catalog_path)
        attach_registered_stages(dataflow, self.catalog)
        self.dataflow = dataflow.validate()
        units = plan(dataflow) if fuse else [PhysicalStage(s) for s in dataflow.stages.values()]
        self.units: dict[str, PhysicalStage] = {u.stage.name: u for u in units}
        self._spark, self._master, self._remote = spark, master, remote
        self.py_files = list(py_files)
        self.spark_conf = dict(spark_conf or {})
        self.mode, self.num_partitions, self.store = mode, num_partitions, store
        self._runner: SparkStageRunner | None = None
        self._lock = HomeLock(self.layout.lock_path, self.home)
        register(self.catalog, self.home, self.dataflow, self.units)

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> Controller:
        self.lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lock(self) -> None:
        """Take the home's controller lock, or fail at once naming the holder."""
        self._lock.acquire()

    def close(self) -> None:
        self._lock.release()
        self.catalog.close()

    @property
    def runner(self) -> SparkStageRunner:
        """The physical layer's runner (starts Spark on first use)."""
        if self._runner is None:
            from strata.physical.session import get_spark

            spark = self._spark or get_spark(self._master, remote=self._remote)
            set_runtime_confs(spark, self.spark_conf)
            ship_files(spark, self.py_files)
            self._runner = SparkStageRunner(self.layout, spark, self.mode, self.num_partitions,
                                            store=self.store)
        return self._runner

    @property
    def spark_started(self) -> bool:
        """Whether this controller has a Spark session yet (the first epoch starts one)."""
        return self._runner is not None or self._spark is not None

    # -- input and output -----------------------------------------------------------------
    def ingest(self, flow: str,
               source: Sequence[str | os.PathLike[str]] | Sequence[dict] | DataFrame,
               fmt: str | None = None, end_frame: bool = False,
               by_reference: bool = False) -> int:
        """Append one increment to external input ``flow``: files or records (see
        :func:`ingest`; ``by_reference`` takes Parquet files in place), or a Spark
        DataFrame, written by Spark (see
        :func:`~strata.controller.dataframes.ingest_dataframe`)."""
        if isinstance(source, DataFrame):
            return ingest_dataframe(self.layout, flow, source, end_frame=end_frame,
                                    catalog=self.catalog)
        return ingest(self.layout, flow, source, fmt, end_frame=end_frame,
                      catalog=self.catalog, by_reference=by_reference)

    def ingest_new(self, flow: str, files: Sequence[str]) -> list[str]:
        """Ingest, by reference and as one increment, those Parquet ``files`` that
        ``flow`` has not taken before (the cron pattern: each run offers every file of
        a folder); the files taken. The catalog remembers them in the ingest's own
        transaction, so a crash never takes a file twice or loses one."""
        seen = {fs.key(f) for f in self.catalog.referenced_files(flow)}
        new = [f for f in files if fs.key(f) not in seen]
        if new:
            self.ingest(flow, new, by_reference=True)
        return new

    def referenced_files(self, flow: str) -> list[str]:
        """Every file ``flow`` has taken by reference, oldest ingest first."""
        return sorted(self.catalog.referenced_files(flow))

    def stored_increments(self, flow: str) -> list[tuple[int, Increment]]:
        """``(epoch, increment)`` of every stored increment of ``flow``, oldest first.
        Epochs are the producer's (or the ingest number for external inputs)."""
        return [(s.epoch, s.increment) for s in self.catalog.flow_increments(flow)]

    def _files(self, flow: str, epoch: int | None) -> list[str]:
        return [f for e, inc in self.stored_increments(flow) if epoch in (None, e)
                for f in inc.files]

    def read_flow(self, flow: str, epoch: int | None = None) -> pa.Table:
        """Records of ``flow``'s stored increments (or of the one from ``epoch``) as an
        Arrow table; ``.to_pandas()`` gives pandas."""
        schema = self.dataflow.flows[flow].schema
        tables = [pq.read_table(f, schema=schema) for f in self._files(flow, epoch)]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def flow_dataframe(self, flow: str, epoch: int | None = None) -> DataFrame:
        """The same records as a Spark DataFrame."""
        files = self._files(flow, epoch)
        spark = self.runner.spark
        if not files:
            return spark.createDataFrame([], schema=to_ddl(self.dataflow.flows[flow].schema))
        return spark.read.parquet(*files)

    def answer(self, query: str) -> pa.Table:
        """The current answer of the compiled query ``query`` (``.to_pandas()`` for pandas)."""
        return read_answer(self.layout.stage(query))

    def answer_dataframe(self, query: str) -> DataFrame:
        """The same answer as a Spark DataFrame."""
        table = self.answer(query)
        return self.runner.spark.createDataFrame(table.to_pandas(), schema=to_ddl(table.schema))

    def create_temp_views(self) -> list[str]:
        """Register every flow (its stored increments) and every query's current answer
        as a Spark temporary view named after it, for Spark SQL; the names registered."""
        views = [(f, self.flow_dataframe(f)) for f in self.dataflow.flows
                 if self.catalog.flow_increments(f)]
        views += [(q, self.answer_dataframe(q)) for q in self.units
                  if StateDir(self.layout.stage(q)).current().kind == "query"]
        for name, frame in views:
            frame.createOrReplaceTempView(name)
        return [name for name, _ in views]

    def state_records(self, stage: str) -> list[dict]:
        """A stage's committed state records."""
        return read_state(self.layout.stage(stage))

    # -- running ------------------------------------------------------------------------
    def run(
        self,
        max_epochs: int | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_start: Callable[[str, int], None] | None = None,
        until: Callable[[], bool] | None = None,
    ) -> list[EpochReport]:
        """Run epochs until nothing is runnable, ``max_epochs`` ran, or ``until()`` says
        to stop (checked between epochs)."""
        reports = self.recover(on_epoch)
        while max_epochs is None or len(reports) < max_epochs:
            if until is not None and until():
                break
            marked = frame_all(self.catalog, self.layout, self.dataflow, self.units)
            choice = scheduling.choose(self._views())
            if choice is None:
                break
            unit = self.units[choice.stage]
            if on_start:
                on_start(choice.stage, self.catalog.stage_row(choice.stage).epochs + 1)
            try:
                report = self._run_epoch(unit, choice)
            except Exception:
                # a failed epoch (bad input, user code, Spark) committed nothing: leave the
                # home as it was, arrivals unframed, so that status shows no trace of it
                self.catalog.unmark_framed(marked)
                raise
            reports.append(report)
            if on_epoch:
                on_epoch(report)
        self.collect_garbage()
        self.sweep()  # files of epochs a crash interrupted (recovered above)
        return reports

    def step(self) -> EpochReport | None:
        """Run at most one epoch."""
        reports = self.run(max_epochs=1)
        return reports[-1] if reports else None

    def _views(self) -> list[scheduling.StageView]:
        """What the scheduler needs of every stage with waiting input."""
        views = []
        for name, unit in self.units.items():
            stage = unit.stage
            queued = {f: [q.framing_key for q in self.catalog.queue(unit.fusion.head(f), name)]
                      for f in stage.input_names}
            if not any(queued.values()):
                continue
            row = self.catalog.stage_row(name)
            views.append(scheduling.StageView(
                name, row.epochs, row.waiting_since, queued, self._runnable_fn(unit),
                row.runnable_state, self._bottlenecked(unit)))
        return views

    def _runnable_fn(self, unit: PhysicalStage) -> Any:
        stage = unit.stage
        if stage.runnable is not None:
            return stage.runnable
        loopbacks = {f for f in stage.input_names if self.dataflow.flows[f].producer == stage.name}
        return runnable_all([f for f in stage.input_names if f not in loopbacks])

    def _bottlenecked(self, unit: PhysicalStage) -> bool:
        """All outputs still have unread increments at every consumer (back-pressure)."""
        pairs = [(f, c) for f in unit.output_flows for c in self.catalog.consumers(f)
                 if c != unit.stage.name]
        return bool(pairs) and all(self.catalog.queue(f, c, framed=None) for f, c in pairs)

    # -- one epoch ----------------------------------------------------------------------
    def _run_epoch(self, unit: PhysicalStage, choice: scheduling.Choice) -> EpochReport:
        name = unit.stage.name
        epoch = self.catalog.stage_row(name).epochs + 1
        intent: dict[str, Any] = {
            "reads": {}, "removes": {}, "records_in": {},
            "runnable_state": base64.b64encode(pickle.dumps(choice.runnable_state)).decode()}
        for f in unit.stage.input_names:
            head = unit.fusion.head(f)
            qs = self.catalog.queue(head, name)
            reads = qs[: choice.reads.get(f, 0)]
            intent["reads"][f] = [q.id for q in reads]
            intent["removes"][head] = [q.pos for q in qs[: choice.removes.get(f, 0)]]
            # named by the flow read: a fused chain's first flow (pages), not the stage's
            # input (links), whose records are only made inside the job
            intent["records_in"][head] = sum(q.increment.records for q in reads)
        seq = self.catalog.log_intent(name, epoch, intent)
        crashpoint("after-intent")
        try:
            return self._execute(seq, unit, epoch, intent, recovered=False)
        except Exception:
            if StateDir(self.layout.stage(name)).current().epoch < epoch:
                self.catalog.withdraw_intent(seq)  # nothing committed: nothing to recover
            raise

    def _execute(self, seq: int, unit: PhysicalStage, epoch: int, intent: dict,
                 recovered: bool) -> EpochReport:
        t0 = time.perf_counter()
        inputs = {f: [self.catalog.increment(i) for i in ids]
                  for f, ids in intent["reads"].items()}
        check_referenced(self.layout, unit.stage.name, epoch, inputs)
        result = self.runner.run_epoch(unit.stage, inputs, epoch=epoch, fusion=unit.fusion)
        crashpoint("after-spark-commit")
        self._apply(seq, unit, epoch, intent, result.outputs, result.metrics)
        crashpoint("after-apply")
        self.collect_garbage()
        return EpochReport(unit.stage.name, epoch, intent["records_in"],
                           {f: inc.records for f, inc in result.outputs.items()},
                           time.perf_counter() - t0, result.metrics, recovered)

    def _apply(self, seq: int, unit: PhysicalStage, epoch: int, intent: dict,
               outputs: dict[str, Increment], metrics: Mapping[str, Any] | None) -> None:
        """Record the epoch's outputs (delivered to their consumers) and its operators'
        statistics (the program's ``metrics["operators"]``) in one catalog transaction."""
        name = unit.stage.name
        readers = {n: [c for f in u.output_flows for c in self.catalog.consumers(f)]
                   for n, u in self.units.items()}
        delivered = []
        for flow, inc in outputs.items():
            consumers = self.catalog.consumers(flow)
            if inc.records == 0:
                # An empty increment keeps stages in step (RunnableAll waits for one on
                # every input) but must not keep a cycle turning: inside a cycle it is
                # not delivered, so loops stop when they go quiet.
                consumers = [c for c in consumers
                             if not scheduling.same_cycle(name, c, readers)]
            delivered.append(NewOutput(flow, inc, consumers))
        operators = [OperatorStats.from_json(o) for o in (metrics or {}).get("operators", [])]
        self.catalog.finish_epoch(seq, name, epoch, delivered, intent["removes"],
                                  base64.b64decode(intent["runnable_state"]), operators)

    # -- recovery and garbage -------------------------------------------------------------
    def recover(self, on_epoch: Callable[[EpochReport], None] | None = None
                ) -> list[EpochReport]:
        """Finish an epoch a crash interrupted: apply it if its job committed, else re-run it.

        ``run`` calls this first and removes the interrupted epoch's files at its end."""
        reports = []
        for u in recovery.unfinished_epochs(self.catalog, self.layout, self.units):
            name = u.unit.stage.name
            if u.committed is not None:
                # a crash right after the manifest switch skipped the state's gc: files of
                # the previous epoch (a query's replaced tables, its staging) would stay
                # until the stage's next epoch, or for good if it never runs again
                collect_garbage(self.layout.stage(name), u.committed)
                self._apply(u.seq, u.unit, u.epoch, u.intent, u.committed.outputs,
                            u.committed.metrics)
                report = EpochReport(name, u.epoch, u.intent["records_in"],
                                     {f: i.records for f, i in u.committed.outputs.items()},
                                     0.0, u.committed.metrics, recovered=True)
            else:
                report = self._execute(u.seq, u.unit, u.epoch, u.intent, recovered=True)
            reports.append(report)
            if on_epoch:
                on_epoch(report)
        return reports

    def collect_garbage(self) -> int:
        """Delete increments that no connector references any more (and their files)."""
        return recovery.collect_garbage(self.catalog, self.layout)

    def sweep(self) -> int:
        """Remove files of epochs that crashed before they were applied."""
        return recovery.sweep(self.catalog, self.layout)
