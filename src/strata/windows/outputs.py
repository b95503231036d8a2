"""What a window epoch writes from the driver: result rows and C2 scoreboards as netted
changes (``_mult`` −1/+1) of the query's two flows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from strata.model.schema import parse_ddl
from strata.physical.program import EpochContext
from strata.queries.programs import output_ddl
from strata.storage import fs
from strata.storage.increments import Increment, write_table
from strata.windows.c2 import Scoreboard
from strata.windows.panes import WindowId
from strata.windows.query import WindowPlan
from strata.windows.rows import changes, summary_columns
from strata.windows.state import Emitted

EPOCH_START = datetime(1970, 1, 1, tzinfo=UTC)


def time_of(plan: WindowPlan) -> Callable[[int], Any]:
    """Event time in the query's units → the time column's value."""
    if plan.time_type == "timestamp":
        return lambda units: EPOCH_START + timedelta(microseconds=units)
    return lambda units: units


def window_bounds(plan: WindowPlan, w: WindowId) -> dict[str, Any]:
    """The window's ``window_start`` and ``window_end`` columns."""
    at = time_of(plan)
    return {"window_start": at(w[0] * plan.width),
            "window_end": at((w[0] + w[1]) * plan.width)}


def _bounded(plan: WindowPlan, w: WindowId, rows: list[dict]) -> list[dict]:
    bounds = window_bounds(plan, w)
    return [{**bounds, **r} for r in rows]


def result_changes(plan: WindowPlan, emitted: Mapping[WindowId, Emitted],
                   rows: Mapping[WindowId, list[dict]],
                   boards: Mapping[WindowId, Scoreboard]) -> list[dict]:
    """Each window's new rows (with its new C2 summary) against those it emitted."""
    out: list[dict] = []
    for w in sorted(rows):
        old = emitted.get(w)
        summary = summary_columns(boards[w])
        new_rows = _bounded(plan, w, [{**r, **summary} for r in rows[w]])
        old_rows = [] if old is None else _bounded(
            plan, w, [{**r, **summary_columns(old.board)} for r in old.rows])
        out += changes(old_rows, new_rows)
    return out


def board_changes(plan: WindowPlan, emitted: Mapping[WindowId, Emitted],
                  boards: Mapping[WindowId, Scoreboard]) -> list[dict]:
    """Each window's scoreboard rows (a row per source and pane) against those before."""
    at = time_of(plan)

    def rows_of(w: WindowId, board: Scoreboard) -> list[dict]:
        return _bounded(plan, w, [{**r, "pane_start": at(r.pop("pane") * plan.width)}
                                  for r in board.to_rows()])

    out: list[dict] = []
    for w in sorted(boards):
        old = emitted.get(w)
        out += changes([] if old is None else rows_of(w, old.board), rows_of(w, boards[w]))
    return out


def write_rows(ctx: EpochContext, flow: str, columns: Mapping[str, str],
               rows: list[dict]) -> Increment:
    """Write changes the driver has into ``flow``'s increment, as one file."""
    path = fs.join(ctx.output_dir(flow), "part-00000.parquet")
    size = write_table(path, pa.Table.from_pylist(rows, parse_ddl(output_ddl(columns))))
    return Increment((path,), len(rows), size)
