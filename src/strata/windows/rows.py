"""The rows a window stage writes: its flows' names, C2 summaries, netted changes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from strata.windows.c2 import CellKey, Scoreboard


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
    def key(r: dict) -> tuple:
        return tuple(sorted((k, repr(v)) for k, v in r.items()))

    before, after = Counter(map(key, old)), Counter(map(key, new))
    out, seen = [], Counter()
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

