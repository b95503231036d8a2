"""The controller: runs a dataflow continuously over a strata home.

It keeps, per (flow, consuming stage), a *connector*: the queue of increments
waiting for that consumer. Arrivals (ingested files, stage outputs) are cut into
input increments by the consumer's ``frame_by``; the stage's runnability function
decides when it runs and what it reads and removes; the scheduler picks the next
stage (fewest epochs first, then the oldest waiting increment; stages whose outputs are all
still unread downstream are skipped while others can run).

Each epoch is write-ahead logged: the intent (the exact increments read and
removed, the new runnability state) is committed to the catalog before the Spark
job starts; the job commits the stage's state atomically; one catalog transaction
then applies the intent (enqueue outputs, dequeue inputs) and marks it applied.
After a crash anywhere, ``recover`` finds the unapplied intent and either applies
it (the job had committed) or re-runs the same epoch (it had not): nothing is lost
and nothing is applied twice.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import pickle
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from strata.faults import crashpoint
from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError
from strata.model.runnability import normalize, runnable_all
from strata.model.schema import to_arrow_schema, to_ddl, to_table
from strata.physical.fusion import PhysicalStage, plan
from strata.physical.program import collect_garbage, read_answer, read_state
from strata.physical.registration import attach
from strata.physical.runner import SparkStageRunner
from strata.storage import fs
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.increments import Increment, iter_records, write_table

INGEST = "ingest"
PUNCTUATION = {"__end_of_frame__": True}


class HomeLockedError(StrataError):
    """Another controller holds the home."""


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

    def to_json(self) -> dict:
        return self.__dict__.copy()


class Controller:
    """Runs ``dataflow`` over the strata home ``home``; one controller per home at a time.

    Use as a context manager (it takes the home's lock)::

        with Controller("/data/home", dataflow) as c:
            c.ingest("urls", ["day-1.jsonl"])
            c.run()
    """

    def __init__(
        self,
        home: str | os.PathLike,
        dataflow: Dataflow,
        *,
        spark: Any = None,
        master: str | None = None,
        mode: str = "direct",
        num_partitions: int | None = None,
        fuse: bool = True,
    ) -> None:
        self.layout = Home(home)
        self.home = self.layout.root
        self.layout.create()
        self.catalog = open_catalog(self.home)
        _attach_registered_stages(dataflow, self.catalog)
        self.dataflow = dataflow.validate()
        units = plan(dataflow) if fuse else [PhysicalStage(s) for s in dataflow.stages.values()]
        self.units: dict[str, PhysicalStage] = {u.stage.name: u for u in units}
        self._spark, self._master = spark, master
        self.mode, self.num_partitions = mode, num_partitions
        self._runner: SparkStageRunner | None = None
        self._lock_fd: int | None = None
        self._register()

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> Controller:
        self.lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lock(self) -> None:
        """Take the home's controller lock, or fail at once naming the holder."""
        path = self.layout.lock_path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Path(path).read_text().strip() or "another process"
            os.close(fd)
            raise HomeLockedError(
                f"strata home {self.home} is in use by another controller ({holder}). "
                "Wait for it to finish or stop it; one controller runs a home at a time."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        self.catalog.close()

    @property
    def runner(self) -> SparkStageRunner:
        if self._runner is None:
            from strata.physical.session import get_spark

            spark = self._spark or get_spark(self._master)
            self._runner = SparkStageRunner(self.layout, spark, self.mode, self.num_partitions)
        return self._runner

    # -- registration ---------------------------------------------------------------------
    def _register(self) -> None:
        df = self.dataflow
        # flows that exist only inside a fused job: never stored, so not registered
        hidden = {f for u in self.units.values() for c in u.fusion.pre.values()
                  for s in c for f in s.output_names}
        hidden |= {f for u in self.units.values() for c in u.fusion.post.values()
                   for s in c for f in s.input_names}
        producer = {f: u.stage.name for u in self.units.values() for f in u.output_flows}
        flows = [(f.name, to_ddl(f.schema), producer.get(f.name, f.producer), f.external)
                 for f in df.flows.values() if f.name not in hidden]
        fingerprint = hashlib.sha256(json.dumps(sorted(flows)).encode()).hexdigest()[:16]
        old = self.catalog.get_meta("fingerprint")
        known = self.catalog.flows()
        for name, ddl, _, _ in flows:
            if name in known and known[name]["schema"] != ddl:
                raise StrataError(
                    f"flow {name!r} in home {self.home} has schema {known[name]['schema']!r} "
                    f"but the dataflow declares {ddl!r}; use a new home or keep the schema"
                )
        connectors = [(f, name) for name, u in self.units.items() for f in u.input_flows]
        if old != fingerprint or set(connectors) - set(self.catalog.connectors()):
            self.catalog.register(flows, connectors, list(self.units), fingerprint)

    # -- ingest -----------------------------------------------------------------------
    def ingest(self, flow: str, source: Sequence[str | os.PathLike] | Sequence[dict],
               fmt: str | None = None, end_frame: bool = False) -> int:
        """Append one increment to external input ``flow`` (see :func:`ingest`)."""
        return ingest(self.home, flow, source, fmt, end_frame=end_frame, catalog=self.catalog)

    def stored_increments(self, flow: str) -> list[tuple[int, Increment]]:
        """``(epoch, increment)`` of every stored increment of ``flow``, oldest first.
        Epochs are the producer's (or the ingest number for external inputs)."""
        return [(e, inc) for _, p, e, inc in self.catalog.flow_increments(flow)
                if not p.startswith("frame:") and not p.endswith(":end")]

    def read_flow(self, flow: str, epoch: int | None = None) -> pa.Table:
        """Records of ``flow``'s stored increments (or of the one from ``epoch``) as an
        Arrow table; ``.to_pandas()`` gives pandas."""
        schema = self.dataflow.flows[flow].schema
        files = [f for e, inc in self.stored_increments(flow) if epoch in (None, e)
                 for f in inc.files]
        tables = [pq.read_table(f, schema=schema) for f in files]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def flow_dataframe(self, flow: str, epoch: int | None = None) -> DataFrame:
        """The same records as a Spark DataFrame."""
        files = [f for e, inc in self.stored_increments(flow) if epoch in (None, e)
                 for f in inc.files]
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

    def state_records(self, stage: str) -> list[dict]:
        """A stage's committed state records."""
        return read_state(self.layout.stage(stage))

    # -- running ------------------------------------------------------------------------
    def run(
        self,
        max_epochs: int | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_start: Callable[[str, int], None] | None = None,
    ) -> list[EpochReport]:
        """Run epochs until nothing is runnable (or ``max_epochs`` ran)."""
        reports = self.recover(on_epoch)
        while max_epochs is None or len(reports) < max_epochs:
            self._frame_all()
            choice = self._schedule()
            if choice is None:
                break
            unit, reads, removes, rstate = choice
            if on_start:
                on_start(unit.stage.name, self.catalog.stage_row(unit.stage.name)["epochs"] + 1)
            report = self._run_epoch(unit, reads, removes, rstate)
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

    # -- framing -----------------------------------------------------------------------
    def _frame_all(self) -> None:
        for name, unit in self.units.items():
            stage = unit.stage
            for inp in stage.inputs:
                head = unit.fusion.head(inp.flow_name)
                raw = self.catalog.queue(head, name, framed=False)
                if not raw:
                    continue
                if inp.frame_by is None:  # FrameByPrior: an arrival is an increment
                    with self.catalog.transaction() as db:
                        for q in raw:
                            if q.framing_key == PUNCTUATION:
                                self.catalog.dequeue(db, head, name, q.pos)
                            else:
                                db.execute("UPDATE queue SET framed = 1 WHERE flow = ? AND "
                                           "consumer = ? AND pos = ?", (head, name, q.pos))
                else:
                    self._frame(name, head, inp.frame_by, raw)

    def _frame(self, consumer: str, flow: str, frame_by: Callable, raw: list) -> None:
        """Cut arrivals into increments of consecutive records with equal framing keys.

        The last frame stays open (its records kept in a file) until a record with
        another key, or an end-of-frame mark, arrives.
        """
        state, open_frame, cut = self.catalog.framing(flow, consumer)
        schema = self.dataflow.flows[flow].schema
        key = open_frame["key"] if open_frame else None
        records: list[dict] = list(iter_records(open_frame["file"])) if open_frame else []
        frames: list[tuple[Any, list[dict]]] = []
        for q in raw:
            if q.framing_key == PUNCTUATION:
                if records:
                    frames.append((key, records))
                records, key = [], None
                continue
            for f in q.increment.files:
                for rec in iter_records(f):
                    try:
                        fk, state = frame_by(rec, state)
                        json.dumps(fk)
                    except Exception as e:  # noqa: BLE001
                        raise StrataError(
                            f"frame_by of stage {consumer!r} on flow {flow!r} failed on record "
                            f"{rec!r}: {type(e).__name__}: {e}. Framing keys must be JSON "
                            "values (numbers, strings, lists)."
                        ) from None
                    if records and fk != key:
                        frames.append((key, records))
                        records = []
                    key = fk
                    records.append(rec)
        new_incs = []
        for fk, recs in frames:
            cut += 1
            uri = self.layout.frame_file(flow, consumer, cut)
            size = write_table(uri, to_table(recs, schema))
            new_incs.append((cut, fk, Increment((uri,), len(recs), size)))
        new_open = None
        if records:
            uri = self.layout.open_frame_file(flow, consumer, cut, uuid.uuid4().hex[:6])
            write_table(uri, to_table(records, schema))
            new_open = {"key": key, "file": uri, "records": len(records)}
        crashpoint("framing-before-commit")
        with self.catalog.transaction() as db:
            for q in raw:
                self.catalog.dequeue(db, flow, consumer, q.pos)
            for n, fk, inc in new_incs:
                inc_id = self.catalog.add_increment(db, flow, f"frame:{consumer}", n, inc, fk)
                self.catalog.enqueue(db, flow, consumer, inc_id, framed=True)
            self.catalog.set_framing(db, flow, consumer, state, new_open, cut)
        if open_frame and (new_open is None or new_open["file"] != open_frame["file"]):
            fs.delete_quietly(open_frame["file"])

    # -- scheduling --------------------------------------------------------------------
    def _runnable_fn(self, unit: PhysicalStage):
        stage = unit.stage
        if stage.runnable is not None:
            return stage.runnable
        loopbacks = {f for f in stage.input_names if self.dataflow.flows[f].producer == stage.name}
        return runnable_all([f for f in stage.input_names if f not in loopbacks])

    def _schedule(self) -> tuple[PhysicalStage, dict, dict, Any] | None:
        """The next stage to run with its reads/removes, or None when nothing is runnable."""
        candidates = []
        for name, unit in self.units.items():
            stage = unit.stage
            queued = {f: self.catalog.queue(unit.fusion.head(f), name) for f in stage.input_names}
            keys = {f: [q.framing_key for q in qs] for f, qs in queued.items()}
            row = self.catalog.stage_row(name)
            if not any(keys.values()):
                continue
            try:
                reads, removes, rstate = self._runnable_fn(unit)(keys, row["runnable_state"])
            except Exception as e:  # noqa: BLE001
                raise StrataError(f"runnable of stage {name!r} raised {type(e).__name__}: "
                                  f"{e}") from None
            reads, removes = normalize(reads), normalize(removes)
            for f, n in {**reads, **removes}.items():
                if f not in keys or n > len(keys[f]):
                    raise StrataError(
                        f"runnable of stage {name!r} asked for {n} increment(s) of {f!r} but "
                        f"{len(keys.get(f, []))} are waiting")
            if not reads:
                continue
            candidates.append((row["epochs"], self.catalog.waiting_since(name), name, unit, reads,
                               removes, rstate))
        if not candidates:
            return None
        candidates.sort(key=lambda c: (c[0], c[1], c[2]))
        free = [c for c in candidates if not self._bottlenecked(c[3])]
        _, _, _, unit, reads, removes, rstate = (free or candidates)[0]
        return unit, reads, removes, rstate

    def _bottlenecked(self, unit: PhysicalStage) -> bool:
        """All outputs still have unread increments at every consumer (back-pressure)."""
        outs = unit.output_flows
        pairs = [(f, c) for f in outs for c in self.catalog.consumers(f) if c != unit.stage.name]
        return bool(pairs) and all(self.catalog.queue(f, c, framed=None) for f, c in pairs)

    # -- one epoch ----------------------------------------------------------------------
    def _run_epoch(self, unit: PhysicalStage, reads: dict, removes: dict,
                   rstate: Any) -> EpochReport:
        name = unit.stage.name
        epoch = self.catalog.stage_row(name)["epochs"] + 1
        intent = {"reads": {}, "removes": {}, "records_in": {},
                  "runnable_state": base64.b64encode(pickle.dumps(rstate)).decode()}
        for f in unit.stage.input_names:
            head = unit.fusion.head(f)
            qs = self.catalog.queue(head, name)
            intent["reads"][f] = [q.id for q in qs[: reads.get(f, 0)]]
            intent["removes"][head] = [q.pos for q in qs[: removes.get(f, 0)]]
            intent["records_in"][f] = sum(q.increment.records for q in qs[: reads.get(f, 0)])
        seq = self.catalog.log_intent(name, epoch, intent)
        crashpoint("after-intent")
        return self._execute(seq, unit, epoch, intent, recovered=False)

    def _execute(self, seq: int, unit: PhysicalStage, epoch: int, intent: dict,
                 recovered: bool) -> EpochReport:
        t0 = time.perf_counter()
        inputs = {f: [self.catalog.increment(i)[3] for i in ids]
                  for f, ids in intent["reads"].items()}
        result = self.runner.run_epoch(unit.stage, inputs, epoch=epoch, fusion=unit.fusion)
        crashpoint("after-spark-commit")
        self._apply(seq, unit, epoch, intent, result.outputs)
        crashpoint("after-apply")
        self.collect_garbage()
        return EpochReport(name_of(unit), epoch, intent["records_in"],
                           {f: inc.records for f, inc in result.outputs.items()},
                           time.perf_counter() - t0, result.metrics, recovered)

    def _apply(self, seq: int, unit: PhysicalStage, epoch: int, intent: dict,
               outputs: dict[str, Increment]) -> None:
        name = unit.stage.name
        with self.catalog.transaction() as db:
            for flow, inc in outputs.items():
                consumers = self.catalog.consumers(flow)
                if inc.records == 0:
                    # An empty increment keeps stages in step (RunnableAll waits for one on
                    # every input) but must not keep a cycle turning: inside a cycle it is
                    # not delivered, so loops stop when they go quiet.
                    consumers = [c for c in consumers if not self._same_cycle(name, c)]
                inc_id = self.catalog.add_increment(db, flow, name, epoch, inc, epoch,
                                                    retained=not consumers)
                for c in consumers:
                    self.catalog.enqueue(db, flow, c, inc_id, framed=False)
            crashpoint("inside-apply")
            for head, positions in intent["removes"].items():
                for pos in positions:
                    self.catalog.dequeue(db, head, name, pos)
            db.execute("UPDATE stages SET epochs = ?, runnable_state = ?, last_run = ? "
                       "WHERE name = ?",
                       (epoch, base64.b64decode(intent["runnable_state"]), time.time(), name))
            self.catalog.mark_applied(db, seq)

    def _same_cycle(self, producer: str, consumer: str) -> bool:
        """Can ``consumer``'s outputs lead back to ``producer`` (same strongly connected part)?"""
        if producer == consumer:
            return True
        readers = {n: [c for f in u.output_flows for c in self.catalog.consumers(f)]
                   for n, u in self.units.items()}
        seen, todo = {consumer}, [consumer]
        while todo:
            for nxt in readers.get(todo.pop(), []):
                if nxt == producer:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    # -- recovery and garbage -------------------------------------------------------------
    def recover(self, on_epoch: Callable[[EpochReport], None] | None = None) -> list[EpochReport]:
        """Finish an epoch a crash interrupted: apply it if its job committed, else re-run it.

        ``run`` calls this first and removes the interrupted epoch's files at its end."""
        reports = []
        for seq, name, epoch, intent in self.catalog.unapplied():
            unit = self.units.get(name)
            if unit is None:
                raise StrataError(f"the home has an unfinished epoch of stage {name!r}, which "
                                  "the dataflow no longer has; run the dataflow that wrote it")
            committed = self.runner.committed(unit.stage)
            if committed.epoch == epoch:
                # a crash right after the manifest switch skipped the state's gc: files of
                # the previous epoch (a query's replaced tables, its staging) would stay
                # until the stage's next epoch, or for good if it never runs again
                collect_garbage(self.layout.stage(name), committed)
                self._apply(seq, unit, epoch, intent, committed.outputs)
                report = EpochReport(name, epoch, intent["records_in"],
                                     {f: i.records for f, i in committed.outputs.items()},
                                     0.0, committed.metrics, recovered=True)
            else:
                report = self._execute(seq, unit, epoch, intent, recovered=True)
            reports.append(report)
            if on_epoch:
                on_epoch(report)
        return reports

    def collect_garbage(self) -> int:
        """Delete increments that no connector references any more (and their files)."""
        with self.catalog.transaction() as db:
            dead = self.catalog.unreferenced(db)
            db.executemany("DELETE FROM increments WHERE id = ?", [(i,) for i, _ in dead])
        crashpoint("gc-after-commit")
        for _, files in dead:
            _delete_increment_files(self.layout, files)
        return len(dead)

    def sweep(self) -> int:
        """Remove files of epochs that crashed before they were applied (under the lock,
        after recovery, nothing unreferenced under ``flows/`` or ``frames/`` is live)."""
        referenced: set[str] = set()
        for (files,) in self.catalog.db.execute("SELECT files FROM increments"):
            referenced.update(json.loads(files))
        for (frame,) in self.catalog.db.execute(
                "SELECT open_frame FROM connectors WHERE open_frame IS NOT NULL"):
            referenced.add(json.loads(frame)["file"])
        live_dirs = {f.rsplit("/", 1)[0] for f in referenced}
        removed = 0
        for uri in self.layout.output_dirs():
            if uri not in live_dirs:
                fs.delete_quietly(uri)
                removed += 1
        for uri in self.layout.frame_files():
            if uri not in referenced:
                fs.delete_quietly(uri)
                removed += 1
        return removed


def _delete_increment_files(home: Home, files: Sequence[str]) -> None:
    for f in files:
        fs.delete_quietly(f)
    parents = {f.rsplit("/", 1)[0] for f in files if not home.is_frame_file(f)}
    for d in parents:  # an increment's own directory (not the shared frames/ folders)
        if not fs.list_dir(d):
            fs.delete_quietly(d)


def name_of(unit: PhysicalStage) -> str:
    return unit.stage.name


def _attach_registered_stages(dataflow: Dataflow, catalog: Catalog) -> None:
    """Add the stages registered in the home (``strata query``) to ``dataflow``, compiled
    as they were registered."""
    legacy = [q for q in catalog.legacy_queries() if q not in dataflow.stages]
    if legacy:
        raise StrataError(
            f"this home has queries registered by an older strata as SQL text: "
            f"{', '.join(legacy)}; register each again with `strata query --replace --name "
            "NAME SQL --home HOME`")
    for reg in catalog.registered_stages():
        if reg.name not in dataflow.stages:
            attach(dataflow, reg)


def open_catalog(home: str) -> Catalog:
    return Catalog(Home(home).catalog_path)


def ingest(
    home: str,
    flow: str,
    source: Sequence[str | os.PathLike] | Sequence[dict],
    fmt: str | None = None,
    *,
    end_frame: bool = False,
    catalog: Catalog | None = None,
) -> int:
    """Append one increment to the external input ``flow`` of the dataflow in ``home``.

    ``source`` is a list of files (``jsonl``, ``csv`` or ``parquet``; the format is taken
    from the extension unless ``fmt`` is given) or a list of records. The files are
    checked against the flow's schema first: a bad file is rejected whole, naming the
    line or row that failed, and nothing is appended. Returns the increment's number.
    """
    from strata.controller.readers import read_source

    own = catalog is None
    catalog = catalog or open_catalog(home)
    try:
        flows = catalog.flows()
        if flow not in flows:
            known = ", ".join(sorted(n for n, f in flows.items() if f["external"])) or "none"
            raise StrataError(
                f"home {home} has no flow {flow!r} (external inputs: {known}). "
                "Register the dataflow first with `strata run PIPELINE --home DIR`."
            )
        if not flows[flow]["external"]:
            raise StrataError(f"flow {flow!r} is written by stage {flows[flow]['producer']!r}; "
                              "only external inputs take ingested increments")
        schema = to_arrow_schema(flows[flow]["schema"])
        table = read_source(source, schema, fmt, flow)
        token = uuid.uuid4().hex[:8]
        # under incoming/: a concurrent controller's sweep never removes an ingest in flight
        uri = Home(home).incoming_file(flow, token)
        inc = Increment((uri,), table.num_rows, write_table(uri, table))
        consumers = catalog.consumers(flow)
        with catalog.transaction() as db:
            n = catalog.next_number(db, f"ingest:{flow}")
            inc_id = catalog.add_increment(db, flow, INGEST, n, inc, n, retained=not consumers)
            for c in consumers:
                catalog.enqueue(db, flow, c, inc_id, framed=False)
            if end_frame:
                mark = catalog.add_increment(db, flow, INGEST + ":end", n, Increment(),
                                             PUNCTUATION)
                for c in consumers:
                    catalog.enqueue(db, flow, c, mark, framed=False)
        return n
    finally:
        if own:
            catalog.close()


