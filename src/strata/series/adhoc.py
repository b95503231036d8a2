"""Ad hoc queries over a stream's segments, answered from the views series keep.

:func:`ad_hoc` plans a one-off query the way a series is planned (per-segment views by
fingerprint, then the rest over the window) and reads each view of its window from what
the stream's series stage already stores; a view no series keeps is computed from the
raw segment if the stage still keeps that segment. The lines it returns say, per view
and segment, where the rows came from.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from strata.model.dataflow import Dataflow, StageProgram
from strata.model.errors import StrataError
from strata.queries.spark import QueryTables
from strata.series import registry
from strata.series.evaluate import jumbo_branch, occurrence, view_of_segment
from strata.series.normalize import View
from strata.series.program import Series, SeriesProgram, plan_of
from strata.series.stage import series_stage_name
from strata.series.stored import (
    SEGMENT,
    branch_rows,
    read_segment,
    segment_of,
    view_tables,
)
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.increments import Increment
from strata.storage.manifest import StateDir


def ad_hoc(home: str | Home, spark: SparkSession, stream: str, sql: str,
           tables: Mapping[str, str] | None = None, newest: int | None = None,
           dataflow: Dataflow | None = None) -> tuple[DataFrame, list[str]]:
    """``sql`` over segments of ``stream`` (``tables`` binds its tables to runs of
    segments, as for a series; unbound tables are the newest segment) with ``newest``
    (default: the last segment the series stage read) as the newest segment: the answer
    and how each view was read. The stream's series are those registered in the home, or
    those of ``dataflow`` (``add_series``)."""
    layout = home if isinstance(home, Home) else Home(home)
    stage = series_stage_name(stream)
    catalog = Catalog(layout.catalog_path)
    try:
        program: StageProgram | None = registry.registered(catalog).get(stream)
        if dataflow is not None and stage in dataflow.stages:
            program = dataflow.stages[stage].program
        if not isinstance(program, SeriesProgram):
            raise StrataError(f"no series run on {stream!r}: ad hoc queries read the views "
                              "and segments its series stage keeps")
        row = catalog.stage_row(stage)
        queued = catalog.queue(stream, stage, framed=None)
    finally:
        catalog.close()
    snap = StateDir(layout.stage(stage)).current()
    last = segment_of(snap)
    n = last if newest is None else newest
    kept = min(int(row.runnable_state or 0), len(queued))
    raw = program.numbered([q.increment for q in queued[:kept]], last, snap.state)
    plan = plan_of(Series("ad hoc", sql, dict(tables or {})), stream, program.columns)
    if last == 0:
        raise StrataError(f"the series stage of {stream!r} has read no segment yet: "
                          "`strata run PIPELINE --home HOME` reads the stored ones")
    if not 1 <= n <= last:
        raise StrataError(f"segment {n} of {stream!r} has not been read (segments 1–"
                          f"{last})")
    stored = snap.state.get("views", {}) if snap.state else {}
    store = QueryTables(spark, layout.stage(stage), view_tables(stored), snap.num_partitions or 1,
                        "adhoc", sweep=False)
    lines: list[str] = []

    def read(view: View, window: range) -> DataFrame:
        parts, where = [], []
        for j in window:
            entry = stored.get(view.fingerprint, {}).get(str(j))
            if entry is not None and "branch" in entry:
                if entry["files"]:  # a view with no rows in its segment has none
                    parts.append(jumbo_branch(view, entry["branch"], branch_rows(spark, entry)))
                where.append(f"{j}: stored view (jumbo pass)")
            elif entry is not None:
                t = store.read(view.fingerprint)
                if t is not None:
                    parts.append(t.where(F.col(SEGMENT) == j).drop(SEGMENT))
                where.append(f"{j}: stored view")
            elif j in raw:
                parts.append(view_of_segment(view, read_segment(spark, raw[j], program.columns)))
                where.append(f"{j}: raw segment")
            else:
                raise StrataError(
                    f"segment {j} of {stream!r} is no longer kept, and no series keeps view "
                    f"{view.fingerprint} of it (raw segments kept: {_spans(raw)}; that "
                    f"view kept for: {_spans(stored.get(view.fingerprint, {}))}). The series "
                    "stage drops a segment once no registered window reads it: query a "
                    "window of kept segments (--newest N, a shorter --table range), or "
                    "register a series whose window covers the segments you query")
        lines.append(f"view {view.fingerprint} ({view.kind}) of segments "
                     + "; ".join(where))
        if not parts:
            return view_of_segment(view, read_segment(spark, Increment(), program.columns))
        return functools.reduce(lambda a, b: a.unionByName(b), parts)

    answer = occurrence(plan, n, read, spark)
    return answer, lines


def _spans(segments: Mapping) -> str:
    """Segment numbers (ints or their strings) as ranges, e.g. ``3–7, 9``; or ``none``."""
    nums = sorted(int(j) for j in segments)
    if not nums:
        return "none"
    runs: list[list[int]] = [[nums[0], nums[0]]]
    for j in nums[1:]:
        if j == runs[-1][1] + 1:
            runs[-1][1] = j
        else:
            runs.append([j, j])
    return ", ".join(f"{a}–{b}" if a < b else str(a) for a, b in runs)

