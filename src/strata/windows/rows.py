"""The rows a window stage writes: its flows' names, C2 summaries, netted changes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from strata.windows.c2 import Cell, CellKey, Scoreboard, Status


def results_flow(query: str) -> str:
    """The flow of a window query's results."""
    return f"{query}_windows"


def scoreboard_flow(query: str) -> str:
    """The flow of a window query's C2 scoreboards."""
    return f"{query}_c2"


def scan_prefix(node: Any) -> str:
    while node.children:
        node = node.children[0]
    return node.prefix


def included(board: Scoreboard) -> dict[CellKey, tuple[int, int]]:
    return {k: (c.records, c.shed) for k, c in board.cells.items() if c.records or c.shed}


def summary_columns(b: Scoreboard) -> dict[str, Any]:
    return {"c2_fraction": b.fraction, "c2_spatial": b.spatial, "c2_temporal": b.temporal,
            "c2_complete": b.complete, "c2_cells": b.total}


def changes(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` retracted and ``new`` inserted, netted (rows in both are left out)."""
    if not old or not new:  # a window's first result, or one with no rows left
        return [{**r, "_mult": -1} for r in old] + [{**r, "_mult": 1} for r in new]

    def key(r: dict) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in r.items()))

    before, after = Counter(map(key, old)), Counter(map(key, new))
    out: list[dict] = []
    seen: Counter[tuple[str, tuple]] = Counter()
    for r in old:
        k = key(r)
        if seen[("-", k)] < before[k] - after[k]:
            out.append({**r, "_mult": -1})
            seen[("-", k)] += 1
    for r in new:
        k = key(r)
        if seen[("+", k)] < after[k] - before[k]:
            out.append({**r, "_mult": 1})
            seen[("+", k)] += 1
    return out



def scoreboards(records: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, Any], Scoreboard]:
    """The live C2 scoreboard of every window (start, end) from the changes of a window
    query's scoreboard flow (``Controller.read_flow("q_c2").to_pylist()``); its cells are
    keyed (source, pane start)."""
    live: Counter = Counter()
    for r in records:
        live[tuple(sorted((k, v) for k, v in r.items() if k != "_mult"))] += r["_mult"]
    out: dict[tuple[Any, Any], dict] = {}
    for row, m in live.items():
        if m <= 0:
            continue
        r = dict(row)
        window = (r["window_start"], r["window_end"])
        out.setdefault(window, {})[(r["source"], r["pane_start"])] = Cell(
            Status(r["status"]), r["records"], r["shed"])
    return {w: Scoreboard(w, cells) for w, cells in sorted(out.items())}
