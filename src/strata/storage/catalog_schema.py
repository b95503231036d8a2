"""The SQLite schema of the catalog (:mod:`strata.storage.catalog`, which documents
its tables), and the upgrade of catalogs written before increments had a kind."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS flows (
    name TEXT PRIMARY KEY, schema TEXT NOT NULL, producer TEXT, external INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS connectors (
    flow TEXT NOT NULL, consumer TEXT NOT NULL,
    framing_state BLOB, open_frame TEXT, frames_cut INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (flow, consumer));
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
CREATE TABLE IF NOT EXISTS operator_stats (
    stage TEXT NOT NULL, epoch INTEGER NOT NULL, operator TEXT NOT NULL, segment INTEGER,
    rows_in INTEGER, rows_out INTEGER, bytes_in INTEGER, bytes_out INTEGER, seconds REAL,
    PRIMARY KEY (stage, epoch, operator));
CREATE TABLE IF NOT EXISTS referenced_files (
    flow TEXT NOT NULL, file TEXT NOT NULL, ingest INTEGER NOT NULL,
    PRIMARY KEY (flow, file));
"""
INCREMENTS = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    flow TEXT NOT NULL, kind TEXT NOT NULL, producer TEXT NOT NULL, epoch INTEGER NOT NULL,
    framing_key TEXT, files TEXT NOT NULL, records INTEGER NOT NULL, bytes INTEGER NOT NULL,
    created REAL NOT NULL, retained INTEGER NOT NULL DEFAULT 0,
    UNIQUE (kind, producer, flow, epoch));
"""
# Catalogs written before increments had a kind told them apart by their producer:
# "ingest", "ingest:end", "frame:<consumer>" or a stage's name.
UPGRADE_INCREMENTS = """
INSERT INTO increments_new (id, flow, kind, producer, epoch, framing_key, files, records,
                            bytes, created, retained)
SELECT id, flow,
       CASE WHEN producer = 'ingest' THEN 'ingest'
            WHEN producer = 'ingest:end' THEN 'end-of-frame'
            WHEN producer LIKE 'frame:%' THEN 'frame' ELSE 'output' END,
       CASE WHEN producer IN ('ingest', 'ingest:end') THEN ''
            WHEN producer LIKE 'frame:%' THEN substr(producer, 7) ELSE producer END,
       epoch, framing_key, files, records, bytes, created, retained
FROM increments
"""
