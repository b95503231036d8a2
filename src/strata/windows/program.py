"""The stage of a windowed query: records into panes once, windows from panes.

Each epoch (``docs/windows.md``):

1. one aggregation (by the driver in Arrow when the increment is small, else by Spark)
   turns the increment's records into cells (source, pane, group)
   with the monoids' ``h`` (or the MapReduce's ``map`` and ``combine``) — the only pass
   over records — and counts each cell's records and their earliest and latest event
   times (a source's latest is its progress); records the query's filter excludes, of
   panes whose windows are final (too late), or of cells already complete (beyond the
   allowed disorder) are counted but not aggregated; records without a time or source
   are refused with an :class:`EpochError` naming one;
2. when the cost model of recent epochs says this one would overrun a shedding
   query's budget, cells are shed (:func:`~strata.windows.policies.plan_shedding`)
   before the aggregation;
3. the cells join the pane store — in the driver's memory
   (:mod:`~strata.windows.driver_store`) or as Parquet the executors read
   (:mod:`~strata.windows.executors`) — and the windows the eviction policy releases,
   and emitted windows whose cells changed (refined), are answered (``a``);
4. results and their C2 go out as changes (``_mult`` −1/+1) to the query's flow and
   its scoreboard flow (:mod:`~strata.windows.outputs`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata import config
from strata.faults import crashpoint
from strata.model.errors import EpochError, StrataError
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.physical.runner import spark_failure
from strata.physical.session import set_confs
from strata.physical.small_epochs import conf_of, fits_driver
from strata.queries.spark import dispatch
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.increments import Increment, written_increment
from strata.storage.manifest import StateSnapshot
from strata.windows import executors, outputs
from strata.windows.c2 import CellKey, Scoreboard, scoreboard
from strata.windows.driver_store import DriverPanes, cells_of, map_reduce_cells
from strata.windows.frames import increment_frame, lifted_cells, lifted_in_arrow
from strata.windows.panes import WindowId, window_panes
from strata.windows.policies import (
    COST_SAMPLES,
    closed_cells,
    emit_reason,
    failed_sources,
    fit_cost,
    plan_shedding,
)
from strata.windows.query import WindowPlan
from strata.windows.rows import (
    included,
    results_flow,
    scoreboard_flow,
    summary_columns,
)
from strata.windows.state import Emitted, WindowState, load, write_cells, write_results

FILES = "windows"  # the program's directory under state/<stage>/

log = logging.getLogger(__name__)


class WindowProgram(StageProgram):
    """Runs a windowed query's epochs (``kind = "window"``)."""

    kind = "window"

    def __init__(self, plan: WindowPlan) -> None:
        self.plan = plan
        self._cache: WindowState | None = None
        self._driver: DriverPanes | None = None  # the driver's pane store, if it is

    def __getstate__(self) -> dict:
        return {"plan": self.plan}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["plan"])  # type: ignore[misc]

    @property
    def result_flow(self) -> str:
        return results_flow(self.plan.query.name)

    @property
    def board_flow(self) -> str:
        return scoreboard_flow(self.plan.query.name)

    def describe(self) -> str:
        q, plan = self.plan.query, self.plan
        specs = ", ".join(f"{s.range}/{s.slide} ({s.per_window} panes)" for s in plan.specs)
        return (f"windows {specs} of panes of {plan.width}; {q.eviction.describe()}; "
                f"allowed disorder {plan.disorder}")

    def required_columns(self) -> Mapping[str, Sequence[str]]:
        """Every record needs an event time and (unless the flow is one source) a
        source: ingest refuses one without, rather than every epoch of this stage."""
        plan, q = self.plan, self.plan.query
        return {q.flow: [q.time, *(() if plan.one_source else (q.source,))]}

    # -- one epoch -------------------------------------------------------------------------
    def run(self, ctx: EpochContext) -> EpochOutcome:
        q = self.plan.query
        ws = self._state(ctx)
        self._cache = None  # owned by this attempt until it succeeds
        self._cells_written = 0
        self._in_driver = False  # the records lifted by the driver in Arrow
        ws.store = ws.store or self._store(ctx)
        files = [f for inc in ctx.inputs.get(q.flow, ()) for f in inc.files]
        spark = ctx.spark
        previous = set_confs(spark, {"spark.sql.shuffle.partitions": str(ctx.num_partitions)})
        try:
            started = time.perf_counter()
            stats, cells, lift_schema, late, shed = self._aggregate(ctx, ws, files)
            skip = late | shed
            self._observe(ws, stats, skip)
            if ws.store == "driver":
                self._driver_panes(ws).add(cells)
            due = self._due(ws)
            boards = {w: self._board(ws, w) for w in due}
            for w, b in boards.items():  # a complete result is final (docs/windows.md, "C2")
                if b.complete == b.total:
                    end = w[0] + w[1]
                    ws.sealed = end if ws.sealed is None else max(ws.sealed, end)
            written, emitted = self._write_outputs(ctx, ws, due, boards, lift_schema)
            aggregated = sum(n for c, (n, _, _) in stats.items() if c not in skip)
            if stats:  # what load shedding's cost model learns from
                ws.cost_samples = [*ws.cost_samples, [aggregated, time.perf_counter()
                                                      - started]][-COST_SAMPLES:]
        finally:
            set_confs(spark, previous)
        directory = ctx.layout.program_dir(FILES)
        if cells and ws.store == "driver":
            name = f"cells-{ctx.epoch:08d}-{ctx.token}.parquet"
            write_cells(fs.join(directory, name), cells)
            ws.cell_files[name] = [min(c[1] for c in cells), max(c[1] for c in cells)]
        crashpoint("windows-after-cells")
        self._record_results(ws, directory, ctx, emitted)
        self._retire(ws)
        ws.attempt = ctx.token
        reasons = [r for r, _ in due.values()]
        metrics = {"input_rows": sum(n for n, _, _ in stats.values()),
                   "rows_aggregated": aggregated,
                   "cells": len(cells) if ws.store == "driver" else self._cells_written,
                   "store": ws.store,
                   "in_driver": self._in_driver,
                   "windows_emitted": sorted(w for w, (r, _) in due.items() if r != "refined"),
                   "windows_refined": sorted(w for w, (r, _) in due.items() if r == "refined"),
                   "emit_reasons": dict(Counter(reasons)),
                   "rows_shed": sum(stats[c][0] for c in shed),
                   "late_dropped": ws.late_dropped,
                   "disorder_dropped": ws.disorder_dropped,
                   "changed_rows": written[self.result_flow].records,
                   "combines": ws.counters.get("combines", 0),
                   "uncombines": ws.counters.get("uncombines", 0),
                   "epoch_cost": dataclasses.asdict(cost) if (
                       cost := fit_cost(ws.cost_samples)) else None}
        self._cache = ws
        return EpochOutcome(written, ws.to_json(), ctx.num_partitions, metrics)

    def _store(self, ctx: EpochContext) -> str:
        """Where a new stage keeps its panes (``spark.strata.window.store``)."""
        setting = conf_of(ctx, config.WINDOW_STORE)
        if self.plan.group is None:  # MapReduce's functions combine in Python
            return "driver"
        if setting == "auto":
            return "driver" if fits_driver(ctx, ctx.input_records, 0) else "executors"
        return setting

    def _observe(self, ws: WindowState, stats: Mapping[CellKey, tuple[int, int, int]],
                 skip: set[CellKey]) -> None:
        """The sources' progress and the cells' counts."""
        for (s, p), (n, first, last) in stats.items():
            ws.progress[s] = max(ws.progress.get(s, last), last)
            ws.start = first if ws.start is None else min(ws.start, first)
            if (s, p) not in skip:
                ws.records[(s, p)] = ws.records.get((s, p), 0) + n
        if not ws.frontier and stats:  # the first windows: those of the earliest pane
            first_pane = min(p for _, p in stats)
            ws.frontier = {i: spec.windows_of_pane(first_pane).start
                           for i, spec in enumerate(self.plan.specs)}
            ws.floor = min(spec.window_panes(ws.frontier[i]).start
                           for i, spec in enumerate(self.plan.specs))

    def _state(self, ctx: EpochContext) -> WindowState:
        committed = ctx.committed.state or {}
        if self._cache is not None and self._cache.attempt == committed.get("attempt"):
            return self._cache
        self._driver = None
        return load(committed, ctx.layout.program_dir(FILES), self.plan.algebra)

    def _driver_panes(self, ws: WindowState) -> DriverPanes:
        if self._driver is None or self._driver.ws is not ws:
            self._driver = DriverPanes(self.plan, ws)
        return self._driver

    def _aggregate(self, ctx: EpochContext, ws: WindowState, files: list[str]):
        """Cell statistics — (source, pane) → (records, earliest, latest event time) —
        and the cells (source, pane, key, parts) of the records not too late or shed;
        one pass over the records for both (in the driver on Arrow when the increment is
        small, else one Spark action) unless shedding must see the statistics first."""
        plan, q = self.plan, self.plan.query
        frame = increment_frame(plan, ctx.spark, files)
        try:
            if plan.group is not None and ws.store == "driver":
                table = (lifted_in_arrow(plan, ctx.spark, files, ws.floor)
                         if dispatch.driver_increment(ctx) else None)
                self._in_driver = table is not None
                if table is None and q.shedding is None:
                    # rows a filter (or lateness) excludes form groups of their own
                    # (_pass false), counted in the statistics only
                    floor = None if ws.floor is None else f"_pane >= {ws.floor}"
                    table = lifted_cells(plan, frame, floor, stats=True).toArrow()
                if table is not None:
                    return self._cells_of(ctx, ws, frame, table)
            stats_frame = frame.groupBy("_src", "_pane").agg(
                F.count(F.lit(1)).alias("_n"), F.min("_t").alias("_lo"),
                F.max("_t").alias("_hi"))
            stats = self._stats(ctx, frame, [r.asDict() for r in stats_frame.collect()])
            late, shed = self._skipped(ctx, ws, stats)
            skipped = late | shed
            if skipped:
                tags = [f"{s}\x1f{p}" for s, p in skipped]
                frame = frame.where(~F.concat_ws("\x1f", "_src", F.col("_pane").cast(
                    "string")).isin(tags))
            if plan.group is None:
                return (stats, map_reduce_cells(plan, frame, ctx.num_partitions), None, late,
                        shed)
            lifted = lifted_cells(self.plan, frame)
            if ws.store == "executors":
                self._write_cells_on_executors(ctx, ws, lifted, set(stats) - skipped)
                return stats, [], lifted.schema, late, shed
            table = lifted.toArrow()
            return stats, cells_of(plan, table), table.schema, late, shed
        except StrataError:
            raise
        except Exception as e:
            raise EpochError(f"window query {q.name!r} could not aggregate its records into "
                             "panes", stage=ctx.stage.name, epoch=ctx.epoch, flow=q.flow,
                             cause=spark_failure(e)) from e

    def _cells_of(self, ctx: EpochContext, ws: WindowState, frame: DataFrame,
                  table: Any):
        """Statistics and cells from one lift with statistics (:func:`lifted_cells`)."""
        by_cell = table.group_by(["_src", "_pane"]).aggregate(
            [("_n", "sum"), ("_lo", "min"), ("_hi", "max")])
        stats = self._stats(ctx, frame, by_cell.select(
            ["_src", "_pane", "_n_sum", "_lo_min", "_hi_max"]).rename_columns(
            ["_src", "_pane", "_n", "_lo", "_hi"]).to_pylist())
        late, shed = self._skipped(ctx, ws, stats)
        skipped = late | shed
        cells = [c for c in cells_of(self.plan, table.filter(table.column("_pass")))
                 if (c[0], c[1]) not in skipped]
        return stats, cells, table.schema, late, shed

    def _write_cells_on_executors(self, ctx: EpochContext, ws: WindowState,
                                  lifted: DataFrame, kept: set[CellKey]) -> None:
        """Spark writes the epoch's cells (``strata.windows.executors``)."""
        if not kept:
            return
        path = executors.cells_dir(ctx.layout.program_dir(FILES), ctx.epoch, ctx.token)
        executors.write_cells(lifted, path)
        ws.cell_files[path.rsplit("/", 1)[1]] = [min(p for _, p in kept),
                                                max(p for _, p in kept)]
        self._cells_written = written_increment(path).records

    def _stats(self, ctx: EpochContext, frame: DataFrame, rows: list[dict]
               ) -> dict[CellKey, tuple[int, int, int]]:
        """The cell statistics, refusing records without a time or a source."""
        q = self.plan.query
        if any(r["_src"] is None or r["_pane"] is None for r in rows):
            bad = frame.where(F.col("_src").isNull() | F.col("_t").isNull()).drop(
                "_src", "_t", "_pane").limit(1).collect()
            record = bad[0].asDict() if bad else None
            raise EpochError(
                f"window query {q.name!r}: a record has no event time ({q.time!r}) or no "
                f"source ({q.source!r}); every record needs both — fix or drop such records "
                "and ingest again", stage=ctx.stage.name, epoch=ctx.epoch, flow=q.flow,
                record=record, has_record=record is not None)
        return {(r["_src"], int(r["_pane"])): (r["_n"], r["_lo"], r["_hi"]) for r in rows}

    def _skipped(self, ctx: EpochContext, ws: WindowState,
                 stats: Mapping[CellKey, tuple[int, int, int]]
                 ) -> tuple[set[CellKey], set[CellKey]]:
        """Cells not aggregated: too late (their windows are final) or already complete
        (beyond the allowed disorder), and shed."""
        plan, epoch = self.plan, ctx.epoch
        closed = closed_cells(stats, ws.progress, plan.query.sources, plan.width,
                              plan.disorder, ws.sealed)
        if closed:  # refused whatever the lateness: the cells were final
            self._refuse(ctx, ws, {c: stats[c] for c in closed})
        late = {c for c in stats if ws.floor is not None and c[1] < ws.floor} - closed
        ws.late_dropped += sum(stats[c][0] for c in late)
        late |= closed
        shedding = plan.query.shedding
        shed: set[CellKey] = set()
        if shedding is not None:
            rows = {c: v[0] for c, v in stats.items() if c not in late}
            shed = plan_shedding(rows, fit_cost(ws.cost_samples), shedding.budget_seconds,
                                 shedding.kind, shedding.seed * 1_000_003 + epoch)
            for c in shed:
                ws.shed[c] = ws.shed.get(c, 0) + stats[c][0]
        return late, shed

    def _refuse(self, ctx: EpochContext, ws: WindowState,
                cells: Mapping[CellKey, tuple[int, int, int]]) -> None:
        """Count and report records refused because their cells were complete."""
        plan = self.plan
        n = sum(v[0] for v in cells.values())
        ws.disorder_dropped += n
        for s in sorted({c[0] for c in cells}):
            panes = sorted(p for src, p in cells if src == s)
            had = ws.progress.get(s)
            why = (f"its progress ({had}) had passed their panes' end by the allowed "
                   f"disorder ({plan.disorder}) or more" if had is not None else
                   "it was first heard from after results were published complete "
                   "without it (name it with --source / sources= to have them wait)")
            log.warning(
                "window query %r (stage %s) epoch %d: %d record(s) of source %r for panes "
                "starting %s refused, their cells being complete already: %s; raise the "
                "query's disorder (--disorder, WindowQuery(disorder=...)) if its sources "
                "send that far out of order", plan.query.name, ctx.stage.name, ctx.epoch,
                sum(cells[(s, p)][0] for p in panes), s,
                ", ".join(str(outputs.time_of(plan)(p * plan.width)) for p in panes[:5])
                + (", ..." if len(panes) > 5 else ""), why)

    # -- panes and windows -----------------------------------------------------------------
    def _board(self, ws: WindowState, w: WindowId) -> Scoreboard:
        q = self.plan.query
        sources = sorted(set(q.sources) | set(ws.progress))
        failed = failed_sources(ws.progress, sources, ws.now or 0, ws.start or 0,
                                q.eviction.failure_timeout)
        return scoreboard(w, self.plan.width, sources, ws.records, ws.progress, ws.shed,
                          failed, self.plan.disorder)

    def _due(self, ws: WindowState) -> dict[WindowId, tuple[str, int | None]]:
        """The windows to answer now, each with why and its window spec: those the
        policy releases (per window spec, in order), and emitted windows whose cells
        changed (refined, no spec)."""
        q = self.plan.query
        due: dict[WindowId, tuple[str, int | None]] = {}
        now = ws.now
        for i, spec in enumerate(self.plan.specs):
            while i in ws.frontier and now is not None and (
                    spec.window_start(ws.frontier[i]) <= now):
                w = spec.window_id(ws.frontier[i])
                if w not in ws.emitted and w not in due:  # another spec's window too
                    reason = emit_reason(self._board(ws, w), spec.window_end(ws.frontier[i]),
                                         now, q.eviction)
                    if reason is None:
                        break
                    due[w] = (reason, i)
                ws.frontier[i] += 1
        for w, e in sorted(ws.emitted.items()):
            if w not in due and included(self._board(ws, w)) != included(e.board):
                due[w] = ("refined", None)
        return due

    # -- outputs and state -------------------------------------------------------------------
    def _write_outputs(self, ctx: EpochContext, ws: WindowState,
                       due: Mapping[WindowId, tuple[str, int | None]],
                       boards: Mapping[WindowId, Scoreboard], lift_schema: Any
                       ) -> tuple[dict[str, Increment], dict[WindowId, Emitted]]:
        """The due windows' results and scoreboards as changes of the query's flows;
        what the stage keeps of each emitted window."""
        plan, flow = self.plan, self.result_flow
        board = outputs.write_rows(ctx, self.board_flow, plan.scoreboard_columns(),
                                   outputs.board_changes(plan, ws.emitted, boards))
        if ws.store == "executors":
            result = self._answer_on_executors(ctx, ws, due, boards, lift_schema)
            emitted = {w: Emitted([], boards[w]) for w in due}
        else:
            store = self._driver_panes(ws)
            rows = store.answers(ctx.spark, store.tables(due), lift_schema)
            result = outputs.write_rows(ctx, flow, plan.result_columns(),
                                        outputs.result_changes(plan, ws.emitted, rows, boards))
            emitted = {w: Emitted(rows[w], boards[w]) for w in due}
        return {flow: result, self.board_flow: board}, emitted

    def _answer_on_executors(self, ctx: EpochContext, ws: WindowState,
                             due: Mapping[WindowId, tuple[str, int | None]],
                             boards: Mapping[WindowId, Scoreboard], lift_schema: Any
                             ) -> Increment:
        """Answer the due windows in one Spark job over their cells, keep their rows as
        emitted, and write them as changes (a refined window's rows as emitted before
        retracted)."""
        plan, flow = self.plan, self.result_flow
        if not due:
            return outputs.write_rows(ctx, flow, plan.result_columns(), [])
        directory = ctx.layout.program_dir(FILES)
        panes = [p for w in due for p in window_panes(w)]
        cells = [fs.join(directory, name) for name, (lo, hi) in sorted(ws.cell_files.items())
                 if lo <= max(panes) and hi >= min(panes)]
        kept_in = {tuple(w): name for name, ws_ in ws.result_files.items() for w in ws_}
        refined = {w: fs.join(directory, executors.rows_dir(kept_in[w]))
                   for w in due if w in ws.emitted}
        rows_path = fs.join(directory, executors.rows_dir(self._results_name(ctx)))
        try:
            executors.answer_windows(ctx.spark, plan, lift_schema, cells,
                                     {w: summary_columns(boards[w]) for w in sorted(due)},
                                     rows_path)
            return executors.write_changes(ctx.spark, plan, rows_path, refined,
                                           ctx.output_dir(flow))
        except StrataError:
            raise
        except Exception as e:
            raise EpochError(f"window query {plan.query.name!r} could not answer "
                             f"{len(due)} window(s) from their cells", stage=ctx.stage.name,
                             epoch=ctx.epoch, flow=plan.query.flow,
                             cause=spark_failure(e)) from e

    @staticmethod
    def _results_name(ctx: EpochContext) -> str:
        return f"results-{ctx.epoch:08d}-{ctx.token}.parquet"

    def _record_results(self, ws: WindowState, directory: str, ctx: EpochContext,
                        emitted: dict[WindowId, Emitted]) -> None:
        if not emitted:
            return
        name = self._results_name(ctx)
        write_results(fs.join(directory, name), emitted)
        for f in list(ws.result_files):
            ws.result_files[f] = [w for w in ws.result_files[f] if tuple(w) not in emitted]
        ws.result_files[name] = [list(w) for w in sorted(emitted)]
        ws.emitted.update(emitted)

    def _retire(self, ws: WindowState) -> None:
        """Drop windows that can no longer change, and the panes only they held."""
        plan, now = self.plan, ws.now
        if now is None or not ws.frontier:
            return
        lateness, width = plan.query.eviction.lateness, plan.width
        for w in [w for w in ws.emitted if (w[0] + w[1]) * width + lateness < now]:
            del ws.emitted[w]
        ws.floor = min([*(spec.window_panes(ws.frontier[i]).start
                          for i, spec in enumerate(plan.specs)),
                        *(w[0] for w in ws.emitted)])
        if ws.store == "driver":  # the sliders still uncombine the panes they span
            self._driver_panes(ws).retire(ws.floor)
        for d in (ws.records, ws.shed):
            for c in [c for c in d if c[1] < ws.floor]:
                del d[c]
        ws.cell_files = {f: r for f, r in ws.cell_files.items() if r[1] >= ws.floor}
        ws.result_files = {f: [w for w in v if tuple(w) in ws.emitted]
                           for f, v in ws.result_files.items()}
        ws.result_files = {f: v for f, v in ws.result_files.items() if v}

    # -- the committed state, read from files ----------------------------------------------
    @classmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        """One record per live cell: source, pane, records included and shed."""
        s = snap.state or {}
        shed = {(a, b): n for a, b, n in s.get("shed", [])}
        return [{"source": a, "pane": b, "records": n, "shed": shed.get((a, b), 0)}
                for a, b, n in sorted(s.get("records", []))]

    @classmethod
    def summary(cls, layout: StageLayout, snap: StateSnapshot) -> str | None:
        s = snap.state or {}
        if not s.get("frontier"):
            return None
        sources = len(s.get("progress", {}))
        return (f"{sources} source(s); panes from {s['floor']} kept, {len(s['cell_files'])} "
                f"cell file(s); {s.get('late_dropped', 0)} late record(s) dropped, "
                f"{s.get('disorder_dropped', 0)} refused beyond the allowed disorder")

    @classmethod
    def state_bytes(cls, layout: StageLayout, state: Mapping[str, Any]) -> int:
        directory = layout.program_dir(FILES)
        return sum(fs.size_of(fs.join(directory, n)) for n in cls.live_files(state))

    @classmethod
    def collect_garbage(cls, layout: StageLayout, keep: StateSnapshot) -> None:
        live = cls.live_files(keep.state or {})
        directory = layout.program_dir(FILES)
        for name in fs.list_dir(directory):
            if name not in live:
                fs.delete_quietly(fs.join(directory, name))

    @staticmethod
    def live_files(state: Mapping[str, Any]) -> set[str]:
        """The files and directories the state names: cells, results and (on the
        executors' store) the results' rows as emitted."""
        results = state.get("result_files", {})
        rows = {executors.rows_dir(n) for n in results} if state.get("store") == (
            "executors") else set()
        return {*state.get("cell_files", {}), *results, *rows}
