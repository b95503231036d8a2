"""Columnar state runs: one state partition as Arrow IPC files (the state of vectorized
stages, and of translate stages through ``direct_columns.py``).

A partition's state is a list of immutable *runs*, oldest first, like the indexed store of
translate stages (``partition_store.py``), but each run is one Arrow IPC file holding
state records as columns plus a boolean ``__dead`` column: a dead row is a *tombstone*
carrying only the key columns, masking the key in older runs. A key's records are all in
the newest run that has the key.

Reads are whole-run and vectorized: a run is memory-mapped (local files) or read in one
call, and lookups are ``is_in`` membership tests over the key column, so no Python runs
per key. That makes a lookup's bytes grow with the partition's state rather than with the
epoch's keys (the price of columns; ``docs/vectorized.md`` gives the measurements), while
writes stay proportional to the keys the epoch touched. Runs never change once written
(their names carry the attempt's token), so each process keeps the runs it read or wrote
last in memory (:data:`RUN_CACHE`, as Structured Streaming's state store keeps its
maps in the executor), and the processes of one machine share a decoded copy of each
(``machine_runs.MACHINE_RUNS``): a later epoch reads from storage only the runs written
on other machines since, whichever of this machine's Python workers Spark gives its task.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from strata import config
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.machine_runs import MACHINE_RUNS
from strata.storage.partition_store import RunInfo, delete_unlisted
from strata.storage.table_cache import TableCache

DEAD = "__dead"
# IPC buffers. zstd (level 1) against LZ4 on 600,000 URL counts: 10.0 against 18.0 B per
# URL (snappy Parquet: 12.1), and no slower to read (docs/vectorized.md)
_COMPRESSION = "zstd"


# decoded runs by path, in each process (a Python worker reused by later tasks, or the
# driver), up to STRATA_RUN_CACHE_MB (docs/configuration.md; read at each use)
RUN_CACHE = TableCache(lambda: int(config.env(config.RUN_CACHE_MB) * (1 << 20)))


def member(table: pa.Table, keys: Sequence[str], wanted: pa.Table) -> pa.ChunkedArray:
    """A boolean mask: does row ``i`` of ``table`` have a key (``keys`` columns) that is
    in ``wanted``? Nulls are not keys: callers reject them before."""
    first = pc.is_in(table[keys[0]], value_set=wanted[keys[0]].combine_chunks())
    if len(keys) == 1:
        return first
    # the first column narrows the rows cheaply (a hash set); a join settles the few left.
    # indices_nonzero is given an Array: is_in over no rows answers a ChunkedArray of no
    # chunks, on which pyarrow 18 dies with a segfault (docs/vectorized.md)
    rows = pc.indices_nonzero(first.combine_chunks())
    candidates = table.select(list(keys)).take(rows).append_column("__row", rows)
    hit = candidates.join(wanted.select(list(keys)), keys=list(keys), join_type="left semi")
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[hit["__row"].to_numpy()] = True
    return pa.chunked_array([pa.array(mask)])


def unique_keys(tables: Sequence[pa.Table], keys: Sequence[str]) -> pa.Table:
    """The distinct keys (``keys`` columns) of ``tables``."""
    parts = [t.select(list(keys)) for t in tables if t.num_rows]
    if not parts:
        return tables[0].select(list(keys)).slice(0, 0)
    both = pa.concat_tables(parts, promote_options="permissive")
    return both.group_by(list(keys), use_threads=False).aggregate([])


class ColumnarRuns:
    """The runs of state partition ``partition`` under ``root`` (a path or a URI)."""

    def __init__(self, root: str, partition: int, runs: Sequence[RunInfo],
                 schema: pa.Schema, keys: Sequence[str]) -> None:
        root = fs.normalize(root)
        self.fs, base = fs.resolve(root)
        self.root = root  # a URI or an absolute path: with the run's path, a cache key
        self.dir = StageLayout(base.rstrip("/"), "").partition_dir(partition)
        self.runs = list(runs)
        self.schema, self.keys = schema, list(keys)
        self.file_schema = pa.schema([f.with_nullable(True) for f in schema]
                                     + [pa.field(DEAD, pa.bool_())])
        self.bytes_read = 0  # from storage: runs found in a cache are not counted
        self.bytes_from_machine = 0  # of runs found in MACHINE_RUNS instead (stored sizes)

    def _path(self, run_id: str) -> str:
        return f"{self.dir}/{run_id}.arrow"

    def _cache_key(self, run_id: str) -> str:
        return f"{self.root}|{self._path(run_id)}"

    def _machine_key(self, run: RunInfo) -> str:
        return f"{self._cache_key(run.run_id)}|{run.data_bytes}"

    # ------------------------------------------------------------------ reading
    def _read(self, run: RunInfo) -> pa.Table:
        key = self._cache_key(run.run_id)
        hit = RUN_CACHE.get(key)
        if hit is not None:
            return hit
        table = MACHINE_RUNS.get(self._machine_key(run))
        if table is not None:
            self.bytes_from_machine += run.data_bytes
        else:
            table = self._read_stored(run)
            MACHINE_RUNS.put(self._machine_key(run), table)
        RUN_CACHE.put(key, table)
        return table

    def _read_stored(self, run: RunInfo) -> pa.Table:
        path = self._path(run.run_id)
        self.bytes_read += run.data_bytes
        if isinstance(self.fs, pafs.LocalFileSystem):  # the map lives as long as its buffers
            return pa.ipc.open_file(pa.memory_map(path)).read_all()
        with self.fs.open_input_file(path) as f:
            return pa.ipc.open_file(f).read_all()

    def _live(self, table: pa.Table) -> pa.Table:
        rows = table.filter(pc.invert(table[DEAD])).drop_columns([DEAD])
        return rows.cast(self.schema) if rows.num_rows else self.empty()

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def lookup(self, wanted: pa.Table) -> pa.Table:
        """The state records of the keys in ``wanted`` (distinct key rows), newest run
        first; keys without state have no rows."""
        found: list[pa.Table] = []
        for run in reversed(self.runs):
            if wanted.num_rows == 0:
                break
            if run.entries == 0:
                continue
            table = self._read(run)
            hit = table.filter(member(table, self.keys, wanted))
            if hit.num_rows:
                found.append(self._live(hit))
                wanted = wanted.filter(pc.invert(member(wanted, self.keys, hit)))
        return pa.concat_tables(found) if found else self.empty()

    def scan(self) -> pa.Table:
        """Every live state record of the partition (each key from its newest run)."""
        return self._merged(self.runs)

    def _merged(self, runs: Sequence[RunInfo]) -> pa.Table:
        """The live records of ``runs`` (oldest first), each key from its newest run."""
        if not runs:
            return self.empty()
        if len(runs) == 1:
            return self._live(self._read(runs[0]))
        found: list[pa.Table] = []
        seen: pa.Table | None = None
        for run in reversed(runs):
            table = self._read(run)
            if seen is not None and seen.num_rows:
                table = table.filter(pc.invert(member(table, self.keys, seen)))
            found.append(self._live(table))
            keys = table.select(self.keys)  # membership tests need no distinct keys
            seen = keys if seen is None else pa.concat_tables([seen, keys])
        return pa.concat_tables(found)

    # ------------------------------------------------------------------ writing
    def write_run(self, run_id: str, live: pa.Table, dead: pa.Table | None = None) -> RunInfo:
        """Write a run of ``live`` state records (the state schema) and tombstones for the
        keys in ``dead``; not added to :attr:`runs` (commit it through the manifest)."""
        parts = [live.cast(self.schema).append_column(
            DEAD, pa.array([False] * live.num_rows, pa.bool_()))]
        if dead is not None and dead.num_rows:
            cols = {f.name: (dead[f.name] if f.name in self.keys
                             else pa.nulls(dead.num_rows, f.type))
                    for f in self.schema}
            cols[DEAD] = pa.array([True] * dead.num_rows, pa.bool_())
            parts.append(pa.table(cols))
        table = pa.concat_tables([p.cast(self.file_schema) for p in parts])
        self.fs.create_dir(self.dir, recursive=True)
        path = self._path(run_id)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        options = pa.ipc.IpcWriteOptions(compression=_COMPRESSION)
        try:
            with self.fs.open_output_stream(tmp) as out, \
                    pa.ipc.new_file(out, self.file_schema, options=options) as writer:
                writer.write_table(table, max_chunksize=1 << 16)
            self.fs.move(tmp, path)
        except BaseException:
            with suppress(Exception):
                self.fs.delete_file(tmp)
            raise
        size = self.fs.get_file_info(path).size
        RUN_CACHE.put(self._cache_key(run_id), table)
        info = RunInfo(run_id, table.num_rows, size, 0, table.num_rows - live.num_rows)
        MACHINE_RUNS.put(self._machine_key(info), table)
        return info

    def maybe_compact(self, run_id: str, runs: Sequence[RunInfo], *, max_runs: int = 8,
                      base_fraction: float = 0.25) -> list[RunInfo]:
        """The run list to commit in place of ``runs``: all merged into one run (dead keys
        dropped) when the newer runs outweigh ``base_fraction`` of the oldest or there are
        more than ``max_runs``; else ``runs`` unchanged."""
        runs = list(runs)
        if len(runs) < 2:
            return runs
        newer = sum(r.nbytes for r in runs[1:])
        if newer <= base_fraction * runs[0].nbytes and len(runs) <= max_runs:
            return runs
        live = self._merged(runs)
        if live.num_rows == 0:
            return []
        return [self.write_run(run_id, live)]

    def delete_unreferenced(self, keep: Sequence[RunInfo]) -> int:
        """Delete this partition's files not belonging to ``keep`` (no writer running)."""
        return delete_unlisted(self.fs, self.dir, {f"{r.run_id}.arrow" for r in keep})


def runs_of(state: Mapping[str, Any]) -> dict[int, list[RunInfo]]:
    """Partition → runs, from a manifest's JSON (``{"runs": {"0": [...]}}``)."""
    return {int(p): [RunInfo.from_json(r) for r in rs]
            for p, rs in (state or {}).get("runs", {}).items()}
