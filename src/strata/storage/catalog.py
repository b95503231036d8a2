"""The controller's catalog and write-ahead log, in SQLite inside the strata home.

Tables:

``flows``              every flow of the registered dataflow, with its schema and producer
``connectors``         one per (flow, consuming stage); its framing state and open frame
``increments``         immutable increments, each of a kind (:class:`IncrementKind`) and
                       named by (kind, producer, flow, epoch): files, size, framing key
``queue``              per connector, the ordered increments waiting for the consumer;
                       ``framed = 0`` for arrivals that framing has not cut yet
``stages``             per stage: epochs run, runnability state, when it last ran
``registered_stages``  stages registered by the CLI, kept compiled (``strata query``)
``wal``                the controller's intended changes for an epoch, logged before the
                       epoch runs and marked applied in the same transaction that applies
                       them (after a crash, an unapplied entry is re-run or re-applied,
                       never both, never twice)
``operator_stats``     per stage, epoch and operator: rows and bytes in and out, seconds,
                       recorded with the epoch (:class:`OperatorStats`)

Every change is one SQLite transaction, so a crash leaves the catalog as it was before or
after it, never in between. This is the only module that speaks SQL (its schema is in
:mod:`strata.storage.catalog_schema`): its methods are named by what they mean to the
controller.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from strata.faults import crashpoint
from strata.storage.catalog_schema import INCREMENTS, SCHEMA, UPGRADE_INCREMENTS
from strata.storage.increments import Increment
from strata.storage.operator_stats import COLUMNS as OPERATOR_COLUMNS
from strata.storage.operator_stats import OperatorStats


class IncrementKind(StrEnum):
    """Where an increment comes from."""

    INGEST = "ingest"  # appended to an external input by a user
    OUTPUT = "output"  # written by a stage's epoch
    FRAME = "frame"  # cut from arrivals by a consumer's frame_by
    END_OF_FRAME = "end-of-frame"  # a mark closing the open frame (no records)


STORED = (IncrementKind.INGEST, IncrementKind.OUTPUT)  # what users read back


@dataclass(frozen=True)
class RegisteredStage:
    """A stage registered in the home by the CLI (``strata query``), kept compiled."""

    name: str
    kind: str  # the program's kind, e.g. "query"
    program: str  # the program class, "module:QualName"
    version: int  # the class's format version when it was compiled
    spec: bytes  # the pickled compiled stage (strata.physical.registration)
    description: str  # what the user wrote (a query's SQL)


@dataclass(frozen=True)
class StoredIncrement:
    """An increment the catalog keeps, with where it came from."""

    id: int
    kind: IncrementKind
    producer: str  # the writing stage (output) or the framing consumer (frame); else ""
    epoch: int  # the producer's epoch, the ingest number, or the frame number
    increment: Increment


@dataclass(frozen=True)
class QueuedIncrement:
    """An increment waiting on a connector."""

    id: int
    pos: int
    flow: str
    kind: IncrementKind
    producer: str
    epoch: int
    framing_key: Any
    increment: Increment
    framed: bool

    @property
    def is_end_of_frame(self) -> bool:
        return self.kind is IncrementKind.END_OF_FRAME


@dataclass(frozen=True)
class StageRow:
    """What the catalog knows of one stage."""

    name: str
    epochs: int
    runnable_state: Any
    last_run: float | None
    waiting_since: float | None  # when its oldest waiting increment arrived


@dataclass(frozen=True)
class NewOutput:
    """An epoch's output increment and the stages it is delivered to."""

    flow: str
    increment: Increment
    consumers: Sequence[str]


class Catalog:
    """Typed access to the SQLite catalog of one strata home."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self._upgrade()

    def _upgrade(self) -> None:
        """Bring a catalog of an earlier format to this one, in one transaction."""
        with self._transaction() as db:
            cols = [r[1] for r in db.execute("PRAGMA table_info(increments)")]
            if not cols:
                db.execute(INCREMENTS.format(name="increments"))
            elif "kind" not in cols:
                db.execute(INCREMENTS.format(name="increments_new"))
                db.execute(UPGRADE_INCREMENTS)
                db.execute("DROP TABLE increments")
                db.execute("ALTER TABLE increments_new RENAME TO increments")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic change: all of it or none of it survives a crash."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- registration ------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def register(self, flows: Sequence[tuple[str, str, str | None, bool]],
                 connectors: Sequence[tuple[str, str]], stages: Sequence[str],
                 fingerprint: str) -> None:
        """Record the dataflow's flows, connectors and stages (first run or unchanged)."""
        with self._transaction() as db:
            for name, schema, producer, external in flows:
                db.execute("INSERT OR REPLACE INTO flows VALUES (?, ?, ?, ?)",
                           (name, schema, producer, int(external)))
            for flow, consumer in connectors:
                db.execute("INSERT OR IGNORE INTO connectors (flow, consumer) VALUES (?, ?)",
                           (flow, consumer))
            for s in stages:
                db.execute("INSERT OR IGNORE INTO stages (name) VALUES (?)", (s,))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('fingerprint', ?)", (fingerprint,))

    def add_source(self, name: str, schema: str) -> None:
        """Record an external flow a registered stage reads, so that increments can be
        ingested into it before the next run registers it with its dataflow."""
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO flows VALUES (?, ?, NULL, 1)", (name, schema))

    def set_schema(self, name: str, schema: str) -> None:
        """Replace flow ``name``'s schema by ``schema``, its columns with NOT NULL where a
        stage registered since needs a value (the columns themselves never change)."""
        with self._transaction() as db:
            db.execute("UPDATE flows SET schema = ? WHERE name = ?", (schema, name))

    def registered_stages(self) -> list[RegisteredStage]:
        """Stages registered with ``strata query`` and the like, oldest first."""
        rows = self.db.execute("SELECT name, kind, program, version, spec, description FROM "
                               "registered_stages ORDER BY created, name")
        return [RegisteredStage(*row) for row in rows]

    def legacy_queries(self) -> list[str]:
        """Queries registered as SQL text by strata before compiled stages were kept."""
        rows = self.db.execute("SELECT key FROM meta WHERE key LIKE 'query:%' ORDER BY key")
        return [k[len("query:"):] for (k,) in rows]

    def register_stage(self, reg: RegisteredStage, inputs: Sequence[str],
                       replace: bool = False, backfill: Sequence[str] = ()) -> int:
        """Keep ``reg`` and connect it to its ``inputs`` now, so that increments ingested
        before the next run reach it. ``replace`` swaps a stage registered before (its
        connectors, queues and epochs stay). A new connector from a flow in ``backfill``
        also queues the flow's ingested increments still stored, oldest first; returns
        how many it queued."""
        queued = 0
        with self._transaction() as db:
            if replace:
                db.execute("DELETE FROM registered_stages WHERE name = ?", (reg.name,))
                db.execute("DELETE FROM meta WHERE key = ?", (f"query:{reg.name}",))
            db.execute("INSERT INTO registered_stages VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (reg.name, reg.kind, reg.program, reg.version, reg.spec,
                        reg.description, time.time()))
            for flow in inputs:
                new = db.execute("INSERT OR IGNORE INTO connectors (flow, consumer) VALUES "
                                 "(?, ?)", (flow, reg.name)).rowcount
                if new and flow in backfill:
                    stored = db.execute("SELECT id FROM increments WHERE flow = ? AND kind = ? "
                                        "ORDER BY id", (flow, IncrementKind.INGEST.value))
                    for (inc_id,) in stored.fetchall():
                        self._enqueue(db, flow, reg.name, inc_id, framed=False)
                        queued += 1
            db.execute("INSERT OR IGNORE INTO stages (name) VALUES (?)", (reg.name,))
        return queued

    def flows(self) -> dict[str, dict]:
        rows = self.db.execute("SELECT name, schema, producer, external FROM flows")
        return {n: {"schema": s, "producer": p, "external": bool(e)} for n, s, p, e in rows}

    def consumers(self, flow: str) -> list[str]:
        rows = self.db.execute(
            "SELECT consumer FROM connectors WHERE flow = ? ORDER BY consumer", (flow,))
        return [r[0] for r in rows]

    def connectors(self) -> list[tuple[str, str]]:
        return list(self.db.execute("SELECT flow, consumer FROM connectors ORDER BY 1, 2"))

    def stages(self) -> list[str]:
        """Registered stages, in registration order."""
        return [n for (n,) in self.db.execute("SELECT name FROM stages ORDER BY rowid")]

    # -- ingest ------------------------------------------------------------------------
    def record_ingest(self, flow: str, inc: Increment, end_frame: bool,
                      by_reference: bool = False) -> int:
        """Record an ingested increment of ``flow`` and queue it (unframed) for every
        consumer, with an end-of-frame mark after it if asked; its ingest number. Files
        taken ``by_reference`` are remembered for good, in the same transaction
        (:meth:`referenced_files`): what a folder's next ingest skips."""
        consumers = self.consumers(flow)
        with self._transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?",
                             (f"ingest:{flow}",)).fetchone()
            n = int(row[0]) + 1 if row else 1
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"ingest:{flow}", str(n)))
            if by_reference:
                db.executemany("INSERT OR REPLACE INTO referenced_files VALUES (?, ?, ?)",
                               [(flow, f, n) for f in inc.files])
            inc_id = self._add(db, flow, IncrementKind.INGEST, "", n, inc, n,
                               retained=not consumers)
            for c in consumers:
                self._enqueue(db, flow, c, inc_id, framed=False)
            if end_frame:
                mark = self._add(db, flow, IncrementKind.END_OF_FRAME, "", n, Increment())
                for c in consumers:
                    self._enqueue(db, flow, c, mark, framed=False)
        return n

    def referenced_files(self, flow: str) -> set[str]:
        """Every file ever ingested by reference into ``flow`` (normalized URIs), also
        once its increment has been consumed and forgotten."""
        rows = self.db.execute("SELECT file FROM referenced_files WHERE flow = ?", (flow,))
        return {r[0] for r in rows}

    # -- increments and queues -----------------------------------------------------------
    @staticmethod
    def _add(db: sqlite3.Connection, flow: str, kind: IncrementKind, producer: str,
             epoch: int, inc: Increment, framing_key: Any = None,
             retained: bool = False) -> int:
        """Record an immutable increment; idempotent on (kind, producer, flow, epoch)."""
        row = db.execute("SELECT id FROM increments WHERE kind = ? AND producer = ? AND "
                         "flow = ? AND epoch = ?", (kind.value, producer, flow, epoch)
                         ).fetchone()
        if row:
            return int(row[0])
        cur = db.execute(
            "INSERT INTO increments (flow, kind, producer, epoch, framing_key, files, records,"
            " bytes, created, retained) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (flow, kind.value, producer, epoch, json.dumps(framing_key),
             json.dumps(list(inc.files)), inc.records, inc.bytes, time.time(), int(retained)),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    @staticmethod
    def _enqueue(db: sqlite3.Connection, flow: str, consumer: str, inc_id: int,
                 framed: bool) -> None:
        pos = db.execute("SELECT COALESCE(MAX(pos), 0) + 1 FROM queue WHERE flow = ? AND "
                         "consumer = ?", (flow, consumer)).fetchone()[0]
        db.execute("INSERT INTO queue (flow, consumer, pos, increment, framed) VALUES "
                   "(?, ?, ?, ?, ?)", (flow, consumer, pos, inc_id, int(framed)))

    @staticmethod
    def _dequeue(db: sqlite3.Connection, flow: str, consumer: str,
                 positions: Iterable[int]) -> None:
        db.executemany("DELETE FROM queue WHERE flow = ? AND consumer = ? AND pos = ?",
                       [(flow, consumer, pos) for pos in positions])

    def queue(self, flow: str, consumer: str, framed: bool | None = True
              ) -> list[QueuedIncrement]:
        """The increments waiting for ``consumer`` on ``flow``, oldest first (framed ones,
        unframed arrivals, or both with ``framed=None``)."""
        sql = ("SELECT i.id, q.pos, i.flow, i.kind, i.producer, i.epoch, i.framing_key, "
               "i.files, i.records, i.bytes, q.framed FROM queue q JOIN increments i ON "
               "i.id = q.increment WHERE q.flow = ? AND q.consumer = ?")
        args: list[Any] = [flow, consumer]
        if framed is not None:
            sql += " AND q.framed = ?"
            args.append(int(framed))
        rows = self.db.execute(sql + " ORDER BY q.pos", args)
        return [QueuedIncrement(i, pos, f, IncrementKind(k), p, e, json.loads(fk),
                                Increment(tuple(json.loads(files)), n, b), bool(fr))
                for i, pos, f, k, p, e, fk, files, n, b, fr in rows]

    def increment(self, inc_id: int) -> Increment:
        files, n, b = self.db.execute(
            "SELECT files, records, bytes FROM increments WHERE id = ?", (inc_id,)).fetchone()
        return Increment(tuple(json.loads(files)), n, b)

    def flow_increments(self, flow: str, kinds: Sequence[IncrementKind] = STORED
                        ) -> list[StoredIncrement]:
        """Increments of ``flow`` still stored, oldest first (by default those users read:
        ingested and output increments, not frames or marks)."""
        marks = ", ".join("?" * len(kinds))
        rows = self.db.execute(
            "SELECT id, kind, producer, epoch, files, records, bytes FROM increments WHERE "
            f"flow = ? AND kind IN ({marks}) ORDER BY id", (flow, *(k.value for k in kinds)))
        return [StoredIncrement(i, IncrementKind(k), p, e,
                                Increment(tuple(json.loads(fs)), n, b))
                for i, k, p, e, fs, n, b in rows]

    def drop_unreferenced_increments(self) -> list[list[str]]:
        """Forget the increments no connector references and nobody retains; their files
        (which the caller deletes after this commits)."""
        with self._transaction() as db:
            rows = db.execute("SELECT id, files FROM increments WHERE retained = 0 AND id NOT "
                              "IN (SELECT increment FROM queue)").fetchall()
            db.executemany("DELETE FROM increments WHERE id = ?", [(i,) for i, _ in rows])
        return [json.loads(f) for _, f in rows]

    def live_files(self) -> set[str]:
        """Every file an increment or an open frame of the catalog names."""
        live: set[str] = set()
        for (files,) in self.db.execute("SELECT files FROM increments"):
            live.update(json.loads(files))
        for (frame,) in self.db.execute(
                "SELECT open_frame FROM connectors WHERE open_frame IS NOT NULL"):
            live.add(json.loads(frame)["file"])
        return live

    # -- framing -----------------------------------------------------------------------
    def framing(self, flow: str, consumer: str) -> tuple[Any, dict | None, int]:
        """A connector's framing state, open frame and the number of frames cut so far."""
        st, open_frame, cut = self.db.execute(
            "SELECT framing_state, open_frame, frames_cut FROM connectors WHERE flow = ? AND "
            "consumer = ?", (flow, consumer)).fetchone()
        return (pickle.loads(st) if st else None), (json.loads(open_frame) if open_frame
                                                     else None), cut

    def mark_framed(self, flow: str, consumer: str, arrivals: Sequence[QueuedIncrement]
                    ) -> None:
        """Arrivals that are increments as they are (no ``frame_by``): queue them framed;
        end-of-frame marks among them mean nothing here and are dropped."""
        with self._transaction() as db:
            self._dequeue(db, flow, consumer, [q.pos for q in arrivals if q.is_end_of_frame])
            db.executemany("UPDATE queue SET framed = 1 WHERE flow = ? AND consumer = ? AND "
                           "pos = ?", [(flow, consumer, q.pos) for q in arrivals
                                       if not q.is_end_of_frame])

    def unmark_framed(self, marks: Sequence[tuple[str, str, int]]) -> None:
        """Put arrivals marked framed, ``(flow, consumer, position)``, back to unframed."""
        with self._transaction() as db:
            db.executemany("UPDATE queue SET framed = 0 WHERE flow = ? AND consumer = ? AND "
                           "pos = ?", marks)

    def record_frames(self, flow: str, consumer: str, arrivals: Sequence[QueuedIncrement],
                      frames: Sequence[tuple[int, Any, Increment]], state: Any,
                      open_frame: dict | None, cut: int) -> None:
        """Replace the cut ``arrivals`` by ``frames`` ``(number, framing key, increment)``
        and keep the connector's new framing state, open frame and count, at once."""
        with self._transaction() as db:
            self._dequeue(db, flow, consumer, [q.pos for q in arrivals])
            for n, key, inc in frames:
                inc_id = self._add(db, flow, IncrementKind.FRAME, consumer, n, inc, key)
                self._enqueue(db, flow, consumer, inc_id, framed=True)
            db.execute("UPDATE connectors SET framing_state = ?, open_frame = ?, frames_cut = ? "
                       "WHERE flow = ? AND consumer = ?",
                       (pickle.dumps(state), json.dumps(open_frame) if open_frame else None,
                        cut, flow, consumer))

    # -- stages ------------------------------------------------------------------------
    def stage_row(self, name: str) -> StageRow:
        e, rs, last = self.db.execute(
            "SELECT epochs, runnable_state, last_run FROM stages WHERE name = ?",
            (name,)).fetchone()
        return StageRow(name, e, pickle.loads(rs) if rs else None, last,
                        self.waiting_since(name))

    def waiting_since(self, consumer: str) -> float | None:
        """When the oldest increment waiting for ``consumer`` arrived (None: nothing waits)."""
        return self.db.execute(
            "SELECT MIN(i.created) FROM queue q JOIN increments i ON i.id = q.increment "
            "WHERE q.consumer = ?", (consumer,)).fetchone()[0]

    # -- write-ahead log ---------------------------------------------------------------
    def operator_stats(self, stage: str, operators: Sequence[str] | None = None,
                       last_epochs: int | None = None) -> list[dict[str, Any]]:
        """The statistics recorded per operator and epoch of ``stage`` (of ``operators``
        only, if given; of its ``last_epochs`` newest epochs, if given), by epoch, then
        operator: each an :class:`OperatorStats` record as a dict, with its ``epoch``."""
        where = "stage = ?"
        args: list[Any] = [stage]
        if operators is not None:
            where += f" AND operator IN ({', '.join('?' * len(operators))})"
            args += list(operators)
        if last_epochs is not None:
            where += (" AND epoch > (SELECT coalesce(max(epoch), 0) FROM operator_stats "
                      "WHERE stage = ?) - ?")
            args += [stage, last_epochs]
        names = ["epoch", *OPERATOR_COLUMNS]
        rows = self.db.execute(f"SELECT {', '.join(names)} FROM operator_stats "
                               f"WHERE {where} ORDER BY epoch, operator", args).fetchall()
        return [dict(zip(names, r, strict=True)) for r in rows]

    def log_intent(self, stage: str, epoch: int, intent: dict) -> int:
        """Log what an epoch will read and remove, before it runs; its sequence number."""
        with self._transaction() as db:
            cur = db.execute("INSERT INTO wal (stage, epoch, intent, created) VALUES (?, ?, ?, ?)",
                             (stage, epoch, json.dumps(intent), time.time()))
            assert cur.lastrowid is not None
            return cur.lastrowid

    def withdraw_intent(self, seq: int) -> None:
        """Forget logged epoch ``seq`` that failed before it committed anything."""
        with self._transaction() as db:
            db.execute("DELETE FROM wal WHERE seq = ? AND applied = 0", (seq,))

    def unapplied(self) -> list[tuple[int, str, int, dict]]:
        """Logged epochs not finished: ``(seq, stage, epoch, intent)``, oldest first."""
        rows = self.db.execute("SELECT seq, stage, epoch, intent FROM wal WHERE applied = 0 "
                               "ORDER BY seq")
        return [(s, st, e, json.loads(i)) for s, st, e, i in rows]

    def finish_epoch(self, seq: int, stage: str, epoch: int, outputs: Sequence[NewOutput],
                     removes: Mapping[str, Sequence[int]], runnable_state: bytes,
                     operators: Sequence[OperatorStats] = ()) -> None:
        """Apply logged epoch ``seq`` in one transaction: record and deliver its outputs,
        dequeue what it removed (``flow -> queue positions``), record its ``operators``'
        statistics, advance the stage and mark the intent applied."""
        with self._transaction() as db:
            db.executemany(  # an epoch recorded again replaces its rows
                f"INSERT OR REPLACE INTO operator_stats (stage, epoch, "
                f"{', '.join(OPERATOR_COLUMNS)}) VALUES (?, ?, "
                f"{', '.join('?' * len(OPERATOR_COLUMNS))})",
                [(stage, epoch, *(getattr(o, c) for c in OPERATOR_COLUMNS))
                 for o in operators])
            for out in outputs:
                inc_id = self._add(db, out.flow, IncrementKind.OUTPUT, stage, epoch,
                                   out.increment, epoch, retained=not out.consumers)
                for c in out.consumers:
                    self._enqueue(db, out.flow, c, inc_id, framed=False)
            crashpoint("inside-apply")
            for flow, positions in removes.items():
                self._dequeue(db, flow, stage, positions)
            db.execute("UPDATE stages SET epochs = ?, runnable_state = ?, last_run = ? "
                       "WHERE name = ?", (epoch, runnable_state, time.time(), stage))
            db.execute("UPDATE wal SET applied = 1 WHERE seq = ?", (seq,))
            # only the last intention per stage is needed for recovery
            db.execute("DELETE FROM wal WHERE applied = 1 AND seq < ? AND stage = ?",
                       (seq, stage))
