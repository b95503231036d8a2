"""The controller's catalog and write-ahead log, in SQLite inside the strata home.

Tables:

``flows``        every flow of the registered dataflow, with its schema and producer
``connectors``   one per (flow, consuming stage); its framing state and open frame
``increments``   immutable increments, named by (producer, flow, epoch): files, size,
                 framing key
``queue``        per connector, the ordered increments waiting for the consumer;
                 ``framed = 0`` for arrivals that framing has not cut yet
``stages``       per stage: epochs run, runnability state, when it last ran
``wal``          the controller's intended changes for an epoch, logged before the
                 epoch runs and marked applied in the same transaction that applies
                 them (write-ahead: after a crash, an unapplied entry is re-run or
                 re-applied, never both, never twice)

Every change is one SQLite transaction, so a crash leaves the catalog as it was
before or after it, never in between.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from strata.storage.increments import Increment

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS flows (
    name TEXT PRIMARY KEY, schema TEXT NOT NULL, producer TEXT, external INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS connectors (
    flow TEXT NOT NULL, consumer TEXT NOT NULL,
    framing_state BLOB, open_frame TEXT, frames_cut INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (flow, consumer));
CREATE TABLE IF NOT EXISTS increments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    flow TEXT NOT NULL, producer TEXT NOT NULL, epoch INTEGER NOT NULL,
    framing_key TEXT, files TEXT NOT NULL, records INTEGER NOT NULL, bytes INTEGER NOT NULL,
    created REAL NOT NULL, retained INTEGER NOT NULL DEFAULT 0,
    UNIQUE (producer, flow, epoch));
CREATE TABLE IF NOT EXISTS queue (
    flow TEXT NOT NULL, consumer TEXT NOT NULL, pos INTEGER NOT NULL,
    increment INTEGER NOT NULL REFERENCES increments(id), framed INTEGER NOT NULL,
    PRIMARY KEY (flow, consumer, pos));
CREATE TABLE IF NOT EXISTS stages (
    name TEXT PRIMARY KEY, epochs INTEGER NOT NULL DEFAULT 0,
    runnable_state BLOB, last_run REAL);
CREATE TABLE IF NOT EXISTS registered_stages (
    name TEXT PRIMARY KEY, kind TEXT NOT NULL, program TEXT NOT NULL,
    version INTEGER NOT NULL, spec BLOB NOT NULL, description TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS wal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, stage TEXT NOT NULL, epoch INTEGER NOT NULL,
    intent TEXT NOT NULL, applied INTEGER NOT NULL DEFAULT 0, created REAL NOT NULL);
"""


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
class QueuedIncrement:
    """An increment waiting on a connector."""

    id: int
    pos: int
    flow: str
    producer: str
    epoch: int
    framing_key: Any
    increment: Increment
    framed: bool


class Catalog:
    """Typed access to the SQLite catalog of one strata home."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic change: all of it or none of it survives a crash."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- meta and registration -------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

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
                       replace: bool = False) -> None:
        """Keep ``reg`` and connect it to its ``inputs`` now, so that increments ingested
        before the next run reach it. ``replace`` swaps a stage registered before (its
        connectors, queues and epochs stay)."""
        with self.transaction() as db:
            if replace:
                db.execute("DELETE FROM registered_stages WHERE name = ?", (reg.name,))
                db.execute("DELETE FROM meta WHERE key = ?", (f"query:{reg.name}",))
            db.execute("INSERT INTO registered_stages VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (reg.name, reg.kind, reg.program, reg.version, reg.spec,
                        reg.description, time.time()))
            for flow in inputs:
                db.execute("INSERT OR IGNORE INTO connectors (flow, consumer) VALUES (?, ?)",
                           (flow, reg.name))
            db.execute("INSERT OR IGNORE INTO stages (name) VALUES (?)", (reg.name,))

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

    def next_number(self, db: sqlite3.Connection, counter: str) -> int:
        """1, 2, 3, … per counter, never reused (increments are named by their number)."""
        row = db.execute("SELECT value FROM meta WHERE key = ?", (counter,)).fetchone()
        n = int(row[0]) + 1 if row else 1
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (counter, str(n)))
        return n

    # -- increments and queues -------------------------------------------------------
    def add_increment(self, db: sqlite3.Connection, flow: str, producer: str, epoch: int,
                      inc: Increment, framing_key: Any = None, retained: bool = False) -> int:
        """Record an immutable increment; idempotent on (producer, flow, epoch)."""
        row = db.execute("SELECT id FROM increments WHERE producer = ? AND flow = ? AND epoch = ?",
                         (producer, flow, epoch)).fetchone()
        if row:
            return row[0]
        cur = db.execute(
            "INSERT INTO increments (flow, producer, epoch, framing_key, files, records, bytes,"
            " created, retained) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (flow, producer, epoch, json.dumps(framing_key), json.dumps(list(inc.files)),
             inc.records, inc.bytes, time.time(), int(retained)),
        )
        return cur.lastrowid

    def enqueue(self, db: sqlite3.Connection, flow: str, consumer: str, inc_id: int,
                framed: bool) -> None:
        pos = db.execute("SELECT COALESCE(MAX(pos), 0) + 1 FROM queue WHERE flow = ? AND "
                         "consumer = ?", (flow, consumer)).fetchone()[0]
        db.execute("INSERT INTO queue (flow, consumer, pos, increment, framed) VALUES "
                   "(?, ?, ?, ?, ?)", (flow, consumer, pos, inc_id, int(framed)))

    def queue(self, flow: str, consumer: str, framed: bool | None = True) -> list[QueuedIncrement]:
        sql = ("SELECT i.id, q.pos, i.flow, i.producer, i.epoch, i.framing_key, i.files,"
               " i.records, i.bytes, q.framed FROM queue q JOIN increments i ON i.id = q.increment"
               " WHERE q.flow = ? AND q.consumer = ?")
        args: list[Any] = [flow, consumer]
        if framed is not None:
            sql += " AND q.framed = ?"
            args.append(int(framed))
        rows = self.db.execute(sql + " ORDER BY q.pos", args)
        return [QueuedIncrement(i, pos, f, p, e, json.loads(fk),
                                Increment(tuple(json.loads(files)), n, b), bool(fr))
                for i, pos, f, p, e, fk, files, n, b, fr in rows]

    def dequeue(self, db: sqlite3.Connection, flow: str, consumer: str, pos: int) -> None:
        db.execute("DELETE FROM queue WHERE flow = ? AND consumer = ? AND pos = ?",
                   (flow, consumer, pos))

    def increment(self, inc_id: int) -> tuple[str, str, int, Increment]:
        f, p, e, files, n, b = self.db.execute(
            "SELECT flow, producer, epoch, files, records, bytes FROM increments WHERE id = ?",
            (inc_id,)).fetchone()
        return f, p, e, Increment(tuple(json.loads(files)), n, b)

    def flow_increments(self, flow: str) -> list[tuple[int, str, int, Increment]]:
        """Increments of ``flow`` still stored, oldest first: (id, producer, epoch, inc)."""
        rows = self.db.execute("SELECT id, producer, epoch, files, records, bytes FROM increments"
                               " WHERE flow = ? ORDER BY id", (flow,))
        return [(i, p, e, Increment(tuple(json.loads(fs)), n, b)) for i, p, e, fs, n, b in rows]

    def unreferenced(self, db: sqlite3.Connection) -> list[tuple[int, list[str]]]:
        """Increments no connector references and nobody retains: garbage."""
        rows = db.execute("SELECT id, files FROM increments WHERE retained = 0 AND id NOT IN "
                          "(SELECT increment FROM queue)")
        return [(i, json.loads(f)) for i, f in rows]

    # -- connectors' framing state ---------------------------------------------------------
    def framing(self, flow: str, consumer: str) -> tuple[Any, dict | None, int]:
        st, open_frame, cut = self.db.execute(
            "SELECT framing_state, open_frame, frames_cut FROM connectors WHERE flow = ? AND "
            "consumer = ?", (flow, consumer)).fetchone()
        return (pickle.loads(st) if st else None), (json.loads(open_frame) if open_frame
                                                     else None), cut

    def set_framing(self, db: sqlite3.Connection, flow: str, consumer: str, state: Any,
                    open_frame: dict | None, cut: int) -> None:
        db.execute("UPDATE connectors SET framing_state = ?, open_frame = ?, frames_cut = ? "
                   "WHERE flow = ? AND consumer = ?",
                   (pickle.dumps(state), json.dumps(open_frame) if open_frame else None, cut,
                    flow, consumer))

    # -- stages ------------------------------------------------------------------------
    def stage_row(self, name: str) -> dict:
        e, rs, last = self.db.execute(
            "SELECT epochs, runnable_state, last_run FROM stages WHERE name = ?",
            (name,)).fetchone()
        return {"epochs": e, "waiting_since": self.waiting_since(name),
                "runnable_state": pickle.loads(rs) if rs else None, "last_run": last}

    def waiting_since(self, consumer: str) -> float | None:
        """When the oldest increment waiting for ``consumer`` arrived (None: nothing waits)."""
        return self.db.execute(
            "SELECT MIN(i.created) FROM queue q JOIN increments i ON i.id = q.increment "
            "WHERE q.consumer = ?", (consumer,)).fetchone()[0]

    # -- write-ahead log ---------------------------------------------------------------
    def log_intent(self, stage: str, epoch: int, intent: dict) -> int:
        with self.transaction() as db:
            cur = db.execute("INSERT INTO wal (stage, epoch, intent, created) VALUES (?, ?, ?, ?)",
                             (stage, epoch, json.dumps(intent), time.time()))
            return cur.lastrowid

    def unapplied(self) -> list[tuple[int, str, int, dict]]:
        rows = self.db.execute("SELECT seq, stage, epoch, intent FROM wal WHERE applied = 0 "
                               "ORDER BY seq")
        return [(s, st, e, json.loads(i)) for s, st, e, i in rows]

    def mark_applied(self, db: sqlite3.Connection, seq: int) -> None:
        db.execute("UPDATE wal SET applied = 1 WHERE seq = ?", (seq,))
        # only the last intention per stage is needed for recovery
        db.execute("DELETE FROM wal WHERE applied = 1 AND seq < ? AND stage = "
                   "(SELECT stage FROM wal WHERE seq = ?)", (seq, seq))

    def register(self, flows: Sequence[tuple[str, str, str | None, bool]],
                 connectors: Sequence[tuple[str, str]], stages: Sequence[str],
                 fingerprint: str) -> None:
        """Record the dataflow's flows, connectors and stages (first run or unchanged)."""
        with self.transaction() as db:
            for name, schema, producer, external in flows:
                db.execute("INSERT OR REPLACE INTO flows VALUES (?, ?, ?, ?)",
                           (name, schema, producer, int(external)))
            for flow, consumer in connectors:
                db.execute("INSERT OR IGNORE INTO connectors (flow, consumer) VALUES (?, ?)",
                           (flow, consumer))
            for s in stages:
                db.execute("INSERT OR IGNORE INTO stages (name) VALUES (?)", (s,))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('fingerprint', ?)", (fingerprint,))
