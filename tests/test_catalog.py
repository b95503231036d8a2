"""The catalog: increments by kind, and catalogs of the first format upgraded in place."""

from __future__ import annotations

import json
import pickle
import sqlite3

import pytest

from strata.storage.catalog import Catalog, IncrementKind, NewOutput
from strata.storage.increments import Increment
from strata.storage.operator_stats import OperatorStats

# The first format: increments told apart by their producer string.
OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE increments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    flow TEXT NOT NULL, producer TEXT NOT NULL, epoch INTEGER NOT NULL,
    framing_key TEXT, files TEXT NOT NULL, records INTEGER NOT NULL, bytes INTEGER NOT NULL,
    created REAL NOT NULL, retained INTEGER NOT NULL DEFAULT 0,
    UNIQUE (producer, flow, epoch));
CREATE TABLE queue (
    flow TEXT NOT NULL, consumer TEXT NOT NULL, pos INTEGER NOT NULL,
    increment INTEGER NOT NULL REFERENCES increments(id), framed INTEGER NOT NULL,
    PRIMARY KEY (flow, consumer, pos));
CREATE TABLE connectors (
    flow TEXT NOT NULL, consumer TEXT NOT NULL,
    framing_state BLOB, open_frame TEXT, frames_cut INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (flow, consumer));
"""


def _old_catalog(path) -> None:
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    rows = [(1, "urls", "ingest", 1, json.dumps(1), ["/h/incoming/a.parquet"], 3),
            (2, "urls", "ingest:end", 1, json.dumps({"__end_of_frame__": True}), [], 0),
            (3, "urls", "frame:hourly", 1, json.dumps(7), ["/h/frames/f1.parquet"], 3),
            (4, "counts", "count", 1, json.dumps(1), ["/h/flows/counts/x.parquet"], 2)]
    for i, flow, producer, epoch, key, files, n in rows:
        db.execute("INSERT INTO increments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                   (i, flow, producer, epoch, key, json.dumps(files), n, 10 * n, float(i)))
    db.execute("INSERT INTO connectors (flow, consumer) VALUES ('urls', 'hourly')")
    db.executemany("INSERT INTO queue VALUES ('urls', 'hourly', ?, ?, ?)",
                   [(1, 1, 0), (2, 2, 0), (3, 3, 1)])
    db.commit()
    db.close()


def test_a_catalog_of_the_first_format_is_upgraded_with_kinds(tmp_path):
    path = str(tmp_path / "catalog.sqlite")
    _old_catalog(path)
    c = Catalog(path)
    try:
        queued = c.queue("urls", "hourly", framed=None)
        assert [(q.kind, q.producer, q.epoch) for q in queued] == [
            (IncrementKind.INGEST, "", 1), (IncrementKind.END_OF_FRAME, "", 1),
            (IncrementKind.FRAME, "hourly", 1)]
        assert [q.is_end_of_frame for q in queued] == [False, True, False]
        stored = c.flow_increments("urls")  # what users read: the ingest, not the frame
        assert [(s.id, s.kind) for s in stored] == [(1, IncrementKind.INGEST)]
        assert [(s.kind, s.producer) for s in c.flow_increments("counts")] == [
            (IncrementKind.OUTPUT, "count")]
        # the upgraded table takes new increments: the next ingest is number 1 of its
        # counter (no counter was kept), a new kind-producer-flow-epoch name
        n = c.record_ingest("urls", Increment(("/h/incoming/b.parquet",), 1, 5), False)
        assert n == 1 and len(c.flow_increments("urls")) == 1  # idempotent on its name
    finally:
        c.close()
    Catalog(path).close()  # a second open finds it upgraded already


def test_an_epoch_is_finished_in_one_transaction(tmp_path):
    c = Catalog(str(tmp_path / "catalog.sqlite"))
    try:
        c.register([("urls", "url string", None, True), ("counts", "url string", "count",
                                                           False)],
                   [("urls", "count"), ("counts", "report")], ["count", "report"], "f")
        n = c.record_ingest("urls", Increment(("/h/in.parquet",), 2, 20), end_frame=False)
        assert n == 1
        c.mark_framed("urls", "count", c.queue("urls", "count", framed=False))
        [q] = c.queue("urls", "count")
        seq = c.log_intent("count", 1, {"reads": {"urls": [q.id]}})
        assert [s for _, s, _, _ in c.unapplied()] == ["count"]
        out = Increment(("/h/out.parquet",), 1, 9)
        c.finish_epoch(seq, "count", 1, [NewOutput("counts", out, ["report"])],
                       {"urls": [q.pos]}, pickle.dumps({"turn": 2}))
        assert c.unapplied() == [] and c.queue("urls", "count") == []
        row = c.stage_row("count")
        assert (row.epochs, row.runnable_state) == (1, {"turn": 2})
        [waiting] = c.queue("counts", "report", framed=False)
        assert (waiting.kind, waiting.producer, waiting.increment) == (
            IncrementKind.OUTPUT, "count", out)
        # the ingest is no longer queued anywhere: garbage
        assert c.drop_unreferenced_increments() == [["/h/in.parquet"]]
        assert c.live_files() == {"/h/out.parquet"}
    finally:
        c.close()


def test_operator_statistics_are_recorded_with_their_epoch_or_not_at_all(tmp_path,
                                                                         monkeypatch):
    import strata.storage.catalog as catalog

    c = Catalog(str(tmp_path / "catalog.sqlite"))
    try:
        c.register([("log", "a int", None, True)], [("log", "series")], ["series"], "f")
        view = OperatorStats("view v1", segment=1, rows_in=100, rows_out=7, bytes_in=900,
                             bytes_out=120, seconds=0.25)
        answer = OperatorStats("answer daily", segment=1, rows_out=3, bytes_out=50)
        c.finish_epoch(c.log_intent("series", 1, {}), "series", 1, [], {}, b"", [view, answer])
        assert [OperatorStats.from_json(r) for r in c.operator_stats("series")] == [
            answer, view]  # by epoch, then operator
        assert c.operator_stats("series")[0]["epoch"] == 1

        def fail(name):  # the process dies inside the apply: nothing of it is kept
            if name == "inside-apply":
                raise RuntimeError("killed")

        monkeypatch.setattr(catalog, "crashpoint", fail)
        later = OperatorStats("view v1", segment=2, rows_in=80, rows_out=6)
        seq = c.log_intent("series", 2, {})
        with pytest.raises(RuntimeError):
            c.finish_epoch(seq, "series", 2, [], {}, b"", [later])
        assert c.stage_row("series").epochs == 1
        assert [r["segment"] for r in c.operator_stats("series", ["view v1"])] == [1]
        monkeypatch.undo()
        c.finish_epoch(seq, "series", 2, [], {}, b"", [later])
        assert [r["segment"] for r in c.operator_stats("series", ["view v1"])] == [1, 2]
        assert [r["segment"] for r in c.operator_stats("series", last_epochs=1)] == [2]
    finally:
        c.close()
