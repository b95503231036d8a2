"""A window stage's state: the pane store, sources' progress, and the results out.

In memory it is plain data (:class:`WindowState`); on disk, files each epoch adds and
the manifest's JSON names (``docs/windows.md``, "State"):

* ``cells-<epoch>-<attempt>.parquet``: the cells the epoch aggregated — ``source``,
  ``pane``, the group ``key`` and its ``state`` (pickled parts) — appended, never
  rewritten; the pane store is their combination. A file goes when every pane it holds
  has left every window that can still change.
  With the pane store on the executors, ``cells-<epoch>-<attempt>/`` is instead a
  directory of Parquet files Spark wrote: a row per cell with its group ``_g`` and its
  parts as columns; the driver never reads it.
* ``results-<epoch>-<attempt>.parquet``: the windows the epoch emitted or refined, each
  window's result rows and its C2 scoreboard (pickled); the newest file naming a window
  has its live result (on the executors' store, its rows are in
  ``results-<epoch>-<attempt>.rows/``, Parquet Spark wrote).

Work per epoch is proportional to the increment: only new cells are written.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from strata.storage import fs
from strata.storage.increments import write_table
from strata.windows.aggregates import PaneTable, PartsAlgebra
from strata.windows.c2 import CellKey, Scoreboard
from strata.windows.panes import WindowId

CELLS_SCHEMA = pa.schema([("source", pa.string()), ("pane", pa.int64()),
                          ("key", pa.binary()), ("state", pa.binary())])
RESULTS_SCHEMA = pa.schema([("window", pa.list_(pa.int64())), ("rows", pa.binary()),
                            ("board", pa.binary())])


@dataclass
class Emitted:
    """A window's result as last emitted: its rows (dicts of the outputs; on the
    executors' store none: Spark keeps them, ``strata.windows.executors``) and its C2."""

    rows: list[dict]
    board: Scoreboard


@dataclass
class WindowState:
    """Everything a window stage keeps between epochs, as plain data."""

    cells: dict[int, dict[str, PaneTable]] = field(default_factory=dict)  # pane→source→
    records: dict[CellKey, int] = field(default_factory=dict)  # records included per cell
    shed: dict[CellKey, int] = field(default_factory=dict)  # records shed per cell
    progress: dict[str, int] = field(default_factory=dict)  # source → latest event time
    start: int | None = None  # the earliest event time of the stream
    frontier: dict[int, int] = field(default_factory=dict)  # window spec → next window
    floor: int | None = None  # panes below it are gone (their windows are final)
    emitted: dict[WindowId, Emitted] = field(default_factory=dict)  # live emitted
    cost_samples: list[list[float]] = field(default_factory=list)  # recent epochs'
    # [records aggregated, seconds], what load shedding's cost model is fitted to
    late_dropped: int = 0
    disorder_dropped: int = 0  # records refused: their cells were complete (final)
    sealed: int | None = None  # end pane of the latest result published complete
    counters: dict[str, int] = field(default_factory=dict)
    cell_files: dict[str, list[int]] = field(default_factory=dict)  # file → [lo, hi] pane
    result_files: dict[str, list[list[int]]] = field(default_factory=dict)  # → windows
    attempt: str = ""  # the epoch attempt this state is the result of
    store: str = ""  # where the cells live: "driver" or "executors" (chosen at epoch 1)

    @property
    def now(self) -> int | None:
        return max(self.progress.values()) if self.progress else None

    def add_cells(self, algebra: PartsAlgebra, cells: Iterable[tuple[str, int, tuple, list]]
                  ) -> dict[int, PaneTable]:
        """Merge new cells into the pane store; returns each touched pane's delta."""
        deltas: dict[int, PaneTable] = {}
        for source, pane, key, parts in cells:
            for table in (self.cells.setdefault(pane, {}).setdefault(source, {}),
                          deltas.setdefault(pane, {})):
                old = table.get(key)
                table[key] = list(parts) if old is None else algebra.merge(old, parts)
        return deltas

    def to_json(self) -> dict[str, Any]:
        return {"progress": self.progress, "start": self.start,
                "frontier": {str(i): k for i, k in self.frontier.items()},
                "floor": self.floor, "shed": [[s, p, n] for (s, p), n in self.shed.items()],
                "records": [[s, p, n] for (s, p), n in self.records.items()],
                "cost_samples": self.cost_samples, "late_dropped": self.late_dropped,
                "disorder_dropped": self.disorder_dropped, "sealed": self.sealed,
                "counters": self.counters, "cell_files": self.cell_files,
                "result_files": self.result_files, "attempt": self.attempt,
                "store": self.store}


def write_cells(path: str, cells: list[tuple[str, int, tuple, list]]) -> int:
    table = pa.table({"source": [c[0] for c in cells], "pane": [c[1] for c in cells],
                      "key": [pickle.dumps(c[2], protocol=5) for c in cells],
                      "state": [pickle.dumps(c[3], protocol=5) for c in cells]},
                     schema=CELLS_SCHEMA)
    return write_table(path, table)


def write_results(path: str, windows: Mapping[WindowId, Emitted]) -> int:
    table = pa.table({"window": [list(w) for w in windows],
                      "rows": [pickle.dumps(e.rows, protocol=5) for e in windows.values()],
                      "board": [pickle.dumps(e.board, protocol=5) for e in windows.values()]},
                     schema=RESULTS_SCHEMA)
    return write_table(path, table)


def _read(path: str) -> pa.Table:
    fsys, p = fs.resolve(path)
    return pq.read_table(p, filesystem=fsys)


def read_cells(path: str) -> list[tuple[str, int, tuple, list]]:
    t = _read(path).to_pydict()
    return [(s, p, pickle.loads(k), pickle.loads(v))
            for s, p, k, v in zip(t["source"], t["pane"], t["key"], t["state"], strict=True)]


def read_results(path: str) -> dict[WindowId, Emitted]:
    t = _read(path).to_pydict()
    return {(w[0], w[1]): Emitted(pickle.loads(r), pickle.loads(b))
            for w, r, b in zip(t["window"], t["rows"], t["board"], strict=True)}


def load(state: Mapping[str, Any], directory: str, algebra: PartsAlgebra) -> WindowState:
    """The committed state from its JSON and files (after a restart or a failed attempt)."""
    if not state:
        return WindowState()
    ws = WindowState(progress=dict(state["progress"]), start=state["start"],
                     frontier={int(i): k for i, k in state["frontier"].items()},
                     floor=state["floor"],
                     shed={(s, p): n for s, p, n in state["shed"]},
                     records={(s, p): n for s, p, n in state["records"]},
                     cost_samples=[list(x) for x in state.get("cost_samples", ())],
                     late_dropped=state["late_dropped"],
                     disorder_dropped=state.get("disorder_dropped", 0),
                     sealed=state.get("sealed"), counters=dict(state["counters"]),
                     cell_files={f: list(v) for f, v in state["cell_files"].items()},
                     result_files={f: list(v) for f, v in state["result_files"].items()},
                     attempt=state["attempt"], store=state.get("store", "driver"))
    for name in sorted(ws.cell_files if ws.store == "driver" else ()):  # epoch order
        cells = [c for c in read_cells(fs.join(directory, name))
                 if ws.floor is None or c[1] >= ws.floor]
        ws.add_cells(algebra, cells)
    for name in sorted(ws.result_files):
        live = {(w[0], w[1]) for w in ws.result_files[name]}
        ws.emitted.update({w: e for w, e in read_results(fs.join(directory, name)).items()
                           if w in live})
    return ws
