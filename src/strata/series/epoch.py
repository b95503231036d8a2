"""The epoch of a series stage that reads a new segment (:meth:`strata.series.program.
SeriesProgram.run`; an epoch of corrections is :mod:`strata.series.corrections`).

It runs in five steps, each a function over the records the steps before it made:

1. *plan* (:func:`plan_segment`, a :class:`SegmentPlan`): the series due, the views
   wanted, those Arrow computes from a segment the driver holds, and the scan plan the
   cost model picks for the new segment's stored views;
2. *compute* (:func:`compute_views`, a :class:`SegmentWrites`): the views as Spark plans
   (or Arrow frames), staged for their co-located tables, and the pass's rows;
3. *write* (:func:`write_views`, a :class:`StoredViews`): the views' writes, run with the
   answers that read none of them;
4. *answer* (:func:`answer_rest`): the other occurrences due, from the views written;
5. *commit* (:func:`segment_outcome`): the stage's new state and the epoch's metrics.

See ``docs/series.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.faults import crashpoint
from strata.model.errors import StrataError
from strata.physical.program import EpochContext, EpochOutcome
from strata.physical.session import set_confs
from strata.queries.arrow import Rows
from strata.queries.spark import QueryTables, ddl_of, dispatch, run_all, write_bucketed
from strata.series.cost import (
    epoch_estimates,
    folded,
    learned,
    measured,
    occurrences_io,
    scan_plan,
    scan_sharing,
    through_spark,
    view_through_spark,
)
from strata.series.evaluate import (
    jumbo_eligible,
    occurrence,
    pass_partials,
    pass_views,
    prefix_group,
    reorder_group,
)
from strata.series.held import (
    held_occurrence,
    held_segment,
    read_held,
    segment_views,
    with_segment,
)
from strata.series.normalize import View
from strata.series.reads import read_views, segment_frames, view_schema
from strata.series.statistics import EpochNotes, epoch_operators, timed
from strata.series.stored import (
    SEGMENT,
    VIEWS,
    branch_buckets,
    branch_entries,
    column_bytes,
    increment_of,
    merged,
    read_segment,
    reads_any,
    segment_of,
    spark_schema,
    staged_views,
    view_bytes,
    view_rows,
    view_tables,
    views_of,
    window_present,
    window_rows,
    write_answer,
)
from strata.storage import fs
from strata.storage.increments import Increment

if TYPE_CHECKING:
    from strata.series.program import Series, SeriesProgram

ViewKey = tuple[str, int]  # (view fingerprint, segment)
Frames = dict[ViewKey, tuple[View, Rows]]  # views computed now, with their rows
Entries = dict[str, dict[str, dict]]  # stored views: fingerprint -> segment -> entry


@dataclass(frozen=True)
class SegmentPlan:
    """What the epoch of segment ``n`` computes, decided before any job runs: the series
    ``due``, the views ``wanted`` (with how many times each is used), those computed in
    Arrow from the segment the driver holds (``held``; ``in_arrow``: it holds it), the
    scan plan ``ran`` with the views its pass computes (``jumbo``, sharing the keys
    ``hashed``), and the cost model's ``estimates`` (``estimate``: the one ``κ`` learns
    from, none when Arrow computed views)."""

    n: int
    segments: dict[int, Increment]
    stored: Entries
    stats: Mapping[str, Any]
    choices: dict[str, dict]
    due: list[Series]
    wanted: dict[ViewKey, View]
    uses: dict[ViewKey, int]
    in_arrow: bool
    held: Frames
    ran: str
    jumbo: list[ViewKey]
    hashed: list[str]
    kappa: dict[str, float]
    estimates: dict[str, dict[str, float]]
    estimate: dict[str, float] | None


@dataclass(frozen=True)
class SegmentWrites:
    """The epoch's views, computed: ``fresh`` (those of the pass aside), the co-located
    ``tables`` the ``keep`` ones are staged in, one write per kept view and one for the
    pass (into ``pass_dir``, its columns ``pass_ddl``), and what the jobs note."""

    fresh: Frames
    tables: QueryTables
    keep: list[ViewKey]
    writes: list[Callable[[], None]]
    pass_dir: str
    pass_ddl: str
    noted: EpochNotes


@dataclass(frozen=True)
class StoredViews:
    """The views the epoch wrote (``written``; ``driver_bytes``: of those the driver
    wrote), every view stored after it (``views``), and the series answered with the
    writes (``early``)."""

    written: Entries
    driver_bytes: int
    views: Entries
    early: list[Series]


def run_segment(program: SeriesProgram, ctx: EpochContext) -> EpochOutcome:
    """The epoch of ``program`` that reads the stream's new segment."""
    n = segment_of(ctx.committed) + 1
    raw = ctx.inputs.get(program.stream, ())
    if not raw:
        raise StrataError(f"series stage {ctx.stage.name!r} epoch {ctx.epoch} was given "
                          "no segment")
    segments = program.numbered(raw, n, ctx.committed.state)
    previous = set_confs(ctx.spark, {"spark.sql.shuffle.partitions": str(ctx.num_partitions)})
    cached: list[DataFrame] = []
    try:
        plan = plan_segment(program, ctx, n, segments)
        computed = compute_views(program, ctx, plan, cached)
        stored = write_views(program, ctx, plan, computed)
        answer_rest(program, ctx, plan, computed, stored)
        computed.tables.commit_files()
    finally:
        for d in cached:
            d.unpersist()
        set_confs(ctx.spark, previous)
    return segment_outcome(program, ctx, plan, computed, stored)


def plan_segment(program: SeriesProgram, ctx: EpochContext, n: int,
                 segments: dict[int, Increment]) -> SegmentPlan:
    """Step 1: choose each series' plan and what the epoch of segment ``n`` computes."""
    state = ctx.committed.state
    stored = views_of(ctx.committed)
    stats = state.get("stats", {}) if state else {}
    choices = program.activate(state)
    due = [s for s in program.series if program.active[s.name].schedule.due(n)]
    wanted, uses = wanted_views(program, n, segments, stored, due)
    # a segment the driver still holds (it parsed it at ingest): its views in Arrow
    rows = held_segment(ctx, segments[n], spark_schema(program.columns))
    held = {} if rows is None else segment_views(
        rows, n, wanted, functools.partial(view_schema, ctx.spark, program.columns,
                                           staged=False, known=program.view_schemas()))
    # the new segment's stored views share one pass; a view read only now is
    # cheaper in memory than written with the others and read back
    jumbo = [key for key, v in sorted(wanted.items(), key=lambda kv: kv[0])
             if key[1] == n and key not in held and jumbo_eligible(v) and program.keeps(
                 last_reader(program, *key), n)]
    kappa = learned(stats.get("kappa", {}), (state or {}).get("estimate"),
                    measured(ctx.committed.metrics))
    candidates = [wanted[k] for k in jumbo]
    group, hashed = prefix_group(candidates)
    reorder = reorder_group(candidates)
    _, scan_estimates = scan_sharing(candidates, stats.get("columns", {}),
                                     stats.get("views", {}), group=group,
                                     shared=hashed, reorder=reorder)
    answering = occurrences_io({s.name: program.active[s.name] for s in due}, n,
                               stats.get("views", {}), stats.get("answers", {}))
    estimates = epoch_estimates(scan_estimates, answering, kappa)
    ran = scan_plan(program.shared_scan, estimates, len(jumbo), len(group) >= 2,
                    len(reorder) >= 2)
    # an epoch with views in Arrow reads less through Spark than the model's plans:
    # κ must not learn from it
    estimate = {p: scan_estimates[ran][p] + getattr(answering, p)
                for p in ("read", "shuffled", "written")} \
        if scan_estimates and not held else None
    return SegmentPlan(n, segments, stored, stats, choices, due, wanted, uses,
                       rows is not None, held, ran, pass_views(ran, jumbo, group, reorder),
                       hashed, kappa, estimates, estimate)


def compute_views(program: SeriesProgram, ctx: EpochContext, plan: SegmentPlan,
                  cached: list[DataFrame]) -> SegmentWrites:
    """Step 2: the wanted views as Spark plans (a view used twice cached into
    ``cached``), those kept staged for their tables, and the pass's rows."""
    spark, n, columns, known = ctx.spark, plan.n, program.columns, program.view_schemas()
    fresh = {**segment_frames(spark, plan.segments, columns, {
        k: v for k, v in plan.wanted.items() if k not in plan.jumbo and k not in plan.held},
        plan.uses, cached), **plan.held}
    # stored views are co-located: appended to a table per view, bucketed by the
    # group key, so that merging a window's views does not shuffle them again
    tables = QueryTables(spark, ctx.layout, view_tables(plan.stored), ctx.num_partitions,
                         ctx.token)
    keep = sorted(k for k in fresh if program.keeps(last_reader(program, *k), n))
    limit = dispatch.driver_rows(ctx)
    for fp, j in keep:
        view, frame = fresh[(fp, j)]
        # a view expected larger than the driver takes is written by Spark at once: a
        # try would compute it twice
        large = view_through_spark(plan.stats, fp, plan.segments[j].records
                                   if j in plan.segments else None, limit)
        tables.stage(fp, with_segment(frame, j, view_schema(spark, columns, view, True, known))
                     if (fp, j) in plan.held else frame.frame().withColumn(SEGMENT, F.lit(j)),
                     ["_g"] if view.kind == "partial" else [], "append", try_driver=not large)
    noted = EpochNotes()
    writes = [timed(w, k, noted.seconds) for k, w in zip(keep, tables.writes(), strict=True)]
    pass_dir = fs.join(ctx.layout.program_dir(VIEWS), f"s{n:08d}-{ctx.token}-jumbo")
    pass_ddl = ""
    if plan.jumbo:
        segment = read_segment(spark, plan.segments[n], columns)
        pass_ = pass_partials(plan.ran, [plan.wanted[k] for k in plan.jumbo], segment,
                              plan.hashed, ctx.num_partitions)
        pass_ddl = ddl_of(pass_.drop("_b").schema)
        writes.append(timed(functools.partial(
            write_bucketed, spark, pass_, branch_buckets(len(plan.jumbo), ctx.num_partitions),
            pass_dir, ctx.num_partitions, "_b"), "pass", noted.seconds))
    return SegmentWrites(fresh, tables, keep, writes, pass_dir, pass_ddl, noted)


def write_views(program: SeriesProgram, ctx: EpochContext, plan: SegmentPlan,
                computed: SegmentWrites) -> StoredViews:
    """Step 3: run the views' writes; an occurrence reading none of the views written
    now runs with them, the others after them (:func:`answer_rest`): one sharing a
    cached view with a write would share its shuffle stage with that write's job, and
    Spark's status store then records that stage as skipped in both jobs, its bytes
    lost to the cost model."""
    early = [s for s in plan.due
             if not reads_any(program.active[s.name], plan.n, {*plan.jumbo, *computed.keep})]
    run_all(ctx.spark, computed.writes + answers(program, ctx, plan, computed, early,
                                                 plan.stored))
    crashpoint("series-after-views")
    written, driver_bytes = staged_views(ctx.layout, computed.keep, computed.tables.staged)
    if plan.jumbo:
        entries = branch_entries(computed.pass_dir, computed.pass_ddl, len(plan.jumbo),
                                 ctx.num_partitions)
        for (fp, j), entry in zip(plan.jumbo, entries, strict=True):
            written.setdefault(fp, {})[str(j)] = entry
    return StoredViews(written, driver_bytes, merged(plan.stored, written), early)


def answer_rest(program: SeriesProgram, ctx: EpochContext, plan: SegmentPlan,
                computed: SegmentWrites, stored: StoredViews) -> None:
    """Step 4: answer the occurrences due that read views written now."""
    rest = [s for s in plan.due if s not in stored.early]
    run_all(ctx.spark, answers(program, ctx, plan, computed, rest, stored.views))


def segment_outcome(program: SeriesProgram, ctx: EpochContext, plan: SegmentPlan,
                    computed: SegmentWrites, stored: StoredViews) -> EpochOutcome:
    """Step 5: the answers as increments, the stage's new state and the epoch's metrics."""
    n, noted, written = plan.n, computed.noted, stored.written
    answered = [s.name for s in plan.due if s.name in noted.answered]
    skipped = [s.name for s in plan.due if s.name in noted.skipped]
    outputs = {name: increment_of(ctx.output_dir(name)) for name in answered}
    columns = column_bytes(plan.segments[n])
    jumbo, keep = plan.jumbo, computed.keep
    state = {**program.carried(ctx.committed.state, n), "segment": n,
             "views": still_read(program, stored.views, n), "choices": plan.choices,
             "scan": {"shared": bool(jumbo), "plan": plan.ran,
                      "views": len(jumbo) or len(keep), "arrow": len(plan.held),
                      "forced": program.shared_scan != "auto", "estimates": plan.estimates},
             "estimate": plan.estimate,  # the model's, unscaled: κ learns from it
             "stats": {**folded(plan.stats, columns,
                                view_bytes(written, n),
                                {name: o.bytes for name, o in outputs.items()},
                                view_rows(written, n), plan.segments[n].records,
                                {name: o.records for name, o in outputs.items()}),
                       "kappa": plan.kappa}}
    metrics = {"views_computed": len(plan.wanted), "views_in_jumbo_pass": len(jumbo),
               "views_in_arrow": len(plan.held),
               "scan_plan": plan.ran,
               "epoch_estimates": plan.estimates,
               "views_written": len(keep) + len(jumbo), "answered": answered,
               # per operator, recorded in the catalog (strata.series.statistics)
               "operators": epoch_operators(n, plan.wanted, written, plan.segments, columns,
                                            outputs, noted.rows_in, noted.seconds),
               "skipped": skipped, "segment_bytes": plan.segments[n].bytes,
               # files the driver wrote (small views, answers): Spark does not count them
               "driver_bytes_written": stored.driver_bytes + sum(
                   o.bytes for name, o in outputs.items() if name in noted.by_driver),
               # view tables the driver read from storage (not from its file cache)
               "driver_bytes_read": sum(noted.driver_read.values())}
    return EpochOutcome(outputs, state, ctx.num_partitions, metrics)


def answers(program: SeriesProgram, ctx: EpochContext, plan: SegmentPlan,
            computed: SegmentWrites, due: Sequence[Series], views: Entries
            ) -> list[Callable[[], None]]:
    """One write per occurrence of ``due`` at segment ``n`` whose window's views are
    all in ``views`` or the fresh ones; what each did is noted. With the segment held,
    each is first tried in Arrow from views the driver holds (:mod:`strata.series.held`)."""
    spark, n, noted, fresh, out = ctx.spark, plan.n, computed.noted, computed.fresh, []
    for s in due:
        series_plan = program.active[s.name]
        if not window_present(series_plan, n, views, fresh):
            noted.skipped.append(s.name)
            continue
        read = functools.partial(read_views, spark, computed.tables, views, fresh,
                                 program.columns)
        arrow = functools.partial(read_held, computed.tables, views, fresh, noted.driver_read,
                                  SEGMENT) if plan.in_arrow else None
        rows = noted.rows_in[s.name] = window_rows(series_plan, n, views,
                                                  plan.stats.get("rows", {}))
        large = through_spark(plan.stats.get("answer_rows", {}).get(s.name), rows,
                              dispatch.driver_rows(ctx))
        out.append(timed(functools.partial(
            answer_occurrence, program, ctx, s.name, n, read, noted.by_driver, large, arrow),
            s.name, noted.seconds))
        noted.answered.append(s.name)
    return out


def answer_occurrence(program: SeriesProgram, ctx: EpochContext, name: str, n: int,
                      read: Callable, by_driver: set[str], large: bool,
                      arrow: Callable | None) -> None:
    """Plan series ``name``'s occurrence at segment ``n`` and write its answer (in
    Arrow from held views, with ``arrow`` their reader, if it can). It runs in a
    write thread: the epoch's answers are planned together, and with the views'
    writes (planning is mostly calls into the JVM, which leave the GIL free)."""
    plan = program.active[name]
    table = held_occurrence(plan, n, arrow) if arrow is not None else None
    write_answer(ctx, name, program.output_ddl(name),
                 table if table is not None else occurrence(plan, n, read, ctx.spark),
                 by_driver, f"series {name!r} could not answer its occurrence at "
                 f"segment {n}", large and table is None)


def wanted_views(program: SeriesProgram, n: int, segments: Mapping[int, Increment],
                 stored: Mapping[str, Mapping[str, dict]], due: Sequence[Series]
                 ) -> tuple[dict[ViewKey, View], dict[ViewKey, int]]:
    """The views this epoch computes, with how many times each is used: the new
    segment's for every series that reads it later, and those a due occurrence reads
    that nobody stored (of the new segment, or of a kept one for a new series)."""
    wanted: dict[ViewKey, View] = {}
    uses: dict[ViewKey, int] = {}
    for plan in program.active.values():
        for v in plan.view_list():
            if not plan.raw and program.keeps(plan.schedule.last_reader(n, v.table), n):
                wanted[(v.fingerprint, n)] = v
                uses[(v.fingerprint, n)] = 1
    for s in due:
        plan = program.active[s.name]
        for v in plan.view_list():
            for j in plan.schedule.window(n)[v.table]:
                key = (v.fingerprint, j)
                if j in segments and str(j) not in stored.get(v.fingerprint, {}):
                    wanted[key] = v
                    uses[key] = uses.get(key, 0) + 1
    return wanted, uses


def last_reader(program: SeriesProgram, fingerprint: str, segment: int) -> int:
    """The newest segment of the last occurrence of any series reading the view."""
    return max((p.schedule.last_reader(segment, v.table) for p in program.active.values()
                if not p.raw
                for v in p.view_list() if v.fingerprint == fingerprint), default=0)


def still_read(program: SeriesProgram, views: Mapping[str, Mapping[str, dict]], n: int
               ) -> Entries:
    """The views some registered series reads at an occurrence after ``n``."""
    keep: Entries = {}
    for fp, by_segment in views.items():
        for j, entry in by_segment.items():
            if program.keeps(last_reader(program, fp, int(j)), n):
                keep.setdefault(fp, {})[j] = entry
    return keep
