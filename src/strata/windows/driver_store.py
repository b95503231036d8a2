"""The pane store in the driver's memory (``spark.strata.window.store`` = ``driver``, and
every MapReduce window): cells come to the driver, each pane's aggregate is cached, and
each window spec's slider adds the new pane and removes the expired one (or Two-Stacks);
the answers ``a`` of the windows due are computed in Arrow by the query layer's backend,
or by one small Spark job where it cannot (``docs/windows.md``)."""

from __future__ import annotations

import functools
import pickle
from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from strata.queries.arrow import Unsupported, arrow_step
from strata.queries.spark import answer
from strata.windows.aggregates import (
    PICKLED_CELLS,
    PaneTable,
    combine_partition,
    map_partition,
    merge_cell,
)
from strata.windows.panes import WindowId, window_panes
from strata.windows.query import WindowPlan
from strata.windows.sliding import Counted, slider
from strata.windows.state import WindowState

Cell = tuple[str, int, tuple, list]  # source, pane, group key, parts


class DriverPanes:
    """Pane aggregates (cached) and the window specs' sliders over ``ws``'s cells."""

    def __init__(self, plan: WindowPlan, ws: WindowState) -> None:
        self.plan, self.ws = plan, ws
        self._panes: dict[int, PaneTable] = {}
        self._counted: Counted[PaneTable] = Counted(plan.algebra)
        self._sliders = [slider(self._counted, self.pane) for _ in plan.specs]

    def pane(self, p: int) -> PaneTable:
        """The pane's aggregate over all its sources' cells (cached)."""
        table = self._panes.get(p)
        if table is None:
            algebra, table = self.plan.algebra, {}
            for cell in (self.ws.cells.get(p) or {}).values():
                table = algebra.combine(table, cell)
            self._panes[p] = table
        return table

    def add(self, cells: list[Cell]) -> None:
        """Merge an epoch's cells into the store; each touched pane's cached aggregate
        takes its delta (a pane with no cells before is its delta: combining never
        changes a table in place), and so do the sliders."""
        fresh = {p for _, p, _, _ in cells if p not in self.ws.cells}
        algebra = self.plan.algebra
        for p, delta in self.ws.add_cells(algebra, cells).items():
            if p in self._panes:
                self._panes[p] = algebra.combine(self._panes[p], delta)
            elif p in fresh:
                self._panes[p] = delta
            for agg in self._sliders:
                agg.changed(p, delta)

    def tables(self, due: Mapping[WindowId, tuple[str, int | None]]
               ) -> dict[WindowId, PaneTable]:
        """The due windows' aggregates: slid to in order per window spec, recombined
        from panes when refined (no spec)."""
        windows: dict[WindowId, PaneTable] = {}
        for w, (_, spec) in due.items():
            if spec is not None:
                windows[w] = self._sliders[spec].query(w[0], w[0] + w[1])
                continue
            table: PaneTable = {}
            for p in window_panes(w):
                table = self.plan.algebra.combine(table, self.pane(p))
            windows[w] = table
        counters = self.ws.counters
        counters["combines"] = counters.get("combines", 0) + self._counted.combines
        counters["uncombines"] = counters.get("uncombines", 0) + self._counted.uncombines
        self._counted.combines = self._counted.uncombines = 0
        return windows

    def retire(self, floor: int) -> None:
        """Drop panes below ``floor`` that no slider still uncombines."""
        keep = min([floor, *(agg.lo for agg in self._sliders)])
        for p in [p for p in self.ws.cells if p < keep]:
            del self.ws.cells[p]
            self._panes.pop(p, None)

    def answers(self, spark: SparkSession, windows: Mapping[WindowId, PaneTable],
                lift_schema: pa.Schema | None) -> dict[WindowId, list[dict]]:
        """``a`` of each window: its result rows (dicts of the outputs)."""
        plan = self.plan
        out: dict[WindowId, list[dict]] = {w: [] for w in windows}
        if not windows:
            return out
        if plan.group is None:
            mr = plan.query.mapreduce
            assert mr is not None
            for w, table in windows.items():
                out[w] = [{mr.key: k[0], mr.result: mr.reduce(k[0], v[1])}
                          for k, v in sorted(table.items(), key=lambda kv: repr(kv[0]))
                          if v[0]]
            return out
        assert lift_schema is not None
        merged = _merged_table(plan, windows, lift_schema)
        names, by_id = list(plan.outputs), list(windows)
        try:  # in Arrow, by the query layer's backend; else one Spark job
            m, keep = arrow_step.answered(plan.group, merged, total=True)
            rows = m.filter(keep).select(["_w", *names]).to_pylist()
        except Unsupported:
            rows = answer(plan.group, spark.createDataFrame(merged), spark,
                          carry=("_w",)).toArrow().to_pylist()
        for r in rows:
            out[by_id[r["_w"]]].append({n: r[n] for n in names})
        return out


def _merged_table(plan: WindowPlan, windows: Mapping[WindowId, PaneTable],
                  schema: pa.Schema) -> pa.Table:
    """The windows' aggregates as Arrow: ``_w`` (the window's index), ``_g`` and the
    parts, typed as the lift's (``schema``)."""
    assert plan.group is not None
    parts = [p.name for p in plan.group.parts]
    multiset = {p.name for p in plan.group.parts if p.kind == "multiset"}
    ids: list[int] = []
    keys: list[tuple] = []
    values: list[list] = []
    for i, table in enumerate(windows.values()):
        if not table and not plan.group.node.keys:  # a total answers over no rows
            table = {(0,): [0] + [None] * (len(parts) - 1)}
        ids += [i] * len(table)
        keys += table.keys()
        values += table.values()
    g = schema.field("_g").type
    columns = [pa.array(ids, pa.int64()), pa.StructArray.from_arrays(
        [pa.array([k[i] for k in keys], g.field(i).type) for i in range(g.num_fields)],
        fields=list(g))]
    for i, p in enumerate(parts):
        col = [v[i] for v in values]
        if p in multiset:
            col = [None if x is None else list(x.items()) for x in col]
        columns.append(pa.array(col, schema.field(p).type))
    return pa.Table.from_arrays(columns, names=["_w", "_g", *parts])


def cells_of(plan: WindowPlan, table: pa.Table) -> list[Cell]:
    """The lift's rows (Arrow) as cells."""
    assert plan.group is not None
    parts = [p.name for p in plan.group.parts]
    multiset = {i for i, p in enumerate(plan.group.parts) if p.kind == "multiset"}
    # column by column: a list per column is several times faster than a dict per row
    key_columns = [c.to_pylist() for c in table.column("_g").combine_chunks().flatten()]
    keys = list(zip(*key_columns, strict=True)) if key_columns else [()] * table.num_rows
    columns = [table.column(p).to_pylist() for p in parts]
    for i in multiset:
        columns[i] = [dict(v or ()) for v in columns[i]]
    values = [list(v) for v in zip(*columns, strict=True)]  # parts: _cnt at least
    return list(zip(table.column("_src").to_pylist(), table.column("_pane").to_pylist(),
                    keys, values, strict=True))


def map_reduce_cells(plan: WindowPlan, frame: DataFrame, partitions: int) -> list[Cell]:
    """A MapReduce's cells: ``map`` and ``combine`` in the tasks of one Spark job (each
    task's cells combined, then each key's across tasks after a shuffle of ``partitions``
    partitions), collected. DataFrames and Arrow only, so that it runs over Spark
    Connect as on a classic session."""
    mr = plan.query.mapreduce
    assert mr is not None
    keep = [c for c in frame.columns if c != "_t"]
    cells = (frame.select(*keep)
             .mapInArrow(functools.partial(map_partition, mr), PICKLED_CELLS)
             .repartition(partitions, "_k")
             .mapInArrow(functools.partial(combine_partition, mr), PICKLED_CELLS))
    got: dict[tuple, list] = {}
    for batch in cells.toArrow().to_batches():
        for k, n, v in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
            # keys equal in Python but pickled apart (1 and 1.0) meet here
            merge_cell(mr, got, pickle.loads(k), [n, pickle.loads(v)])
    return [(k[0], int(k[1]), (k[2],), v) for k, v in got.items()]
