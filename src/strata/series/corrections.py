"""Late and corrected segments: an epoch that replaces segments the stage has read and
re-emits, as changes, the occurrences whose windows contain them.

A correction is an increment of the stream's corrections flow (``<stream>_corrections``):
the stream's columns and ``_segment``, the segment whose rows these rows replace (all of
them: a segment is replaced whole; the latest correction of a segment wins). A marker row
with ``_segment`` negated empties a segment (:func:`correction` with ``empty``). The series
stage reads corrections in an epoch of their own when no new segment waits
(:class:`~strata.model.runnability.sliding` with a side flow). That epoch

1. writes each corrected segment's rows into the stage's state (they replace the raw
   segment for every later read: raw plans, series added later, ad hoc queries);
2. recomputes that segment's stored views and replaces them in their co-located tables;
3. for each series with a ``lateness`` reaching the segment, answers again every
   occurrence whose window contains it, from the corrected views, and writes the
   difference from the answer as it stands (written, with the changes since) to
   ``<series>_changes`` (``_occurrence``, the answer's columns, ``_mult``);
4. folds the corrected segments' sizes (columns and views) into the cost model's
   statistics.

Only views are recomputed, never the other segments of a window: the stage keeps every
view (and raw segment) an occurrence it may re-emit reads, ``lateness`` segments longer
than it otherwise would. See ``docs/series.md``, "Late and corrected segments".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.faults import crashpoint
from strata.model.errors import StrataError
from strata.physical.program import EpochContext, EpochOutcome
from strata.physical.session import set_confs
from strata.queries.plan import MULT
from strata.queries.spark import QueryTables, dispatch, run_all, write_parquet
from strata.series.answers import stored_answer
from strata.series.cost import folded, view_through_spark
from strata.series.evaluate import occurrence
from strata.series.normalize import View
from strata.series.reads import read_views, segment_frames
from strata.series.stored import (
    OCCURRENCE,
    SEGMENT,
    SEGMENTS,
    changes_flow,
    column_bytes,
    increment_of,
    merged,
    segment_of,
    staged_views,
    view_bytes,
    view_rows,
    view_tables,
    views_of,
    write_answer,
)
from strata.storage import fs
from strata.storage.increments import Increment

if TYPE_CHECKING:
    from strata.series.program import SeriesProgram

CORRECTED = "_segment"  # the corrections flow's column: the segment a row belongs to

log = logging.getLogger(__name__)


def corrections_flow(stream: str) -> str:
    """The flow corrections of ``stream``'s segments are ingested into."""
    return f"{stream}_corrections"


def corrections_ddl(columns: Mapping[str, str]) -> str:
    """The corrections flow's columns: the stream's, and the segment each row replaces."""
    return ", ".join([*(f"`{c}` {t}" for c, t in columns.items()), f"`{CORRECTED}` bigint"])


def correction(rows: pa.Table, segment: int, *, empty: bool = False) -> pa.Table:
    """``rows`` (the stream's columns) as a correction replacing segment ``segment``.
    With ``empty`` (and no rows: ``rows`` gives the schema) the correction empties the
    segment: one marker row, its columns NULL and its ``_segment`` ``-segment`` (a
    segment is numbered from 1, so no row of a segment looks like it)."""
    if empty:
        if rows.num_rows:
            raise StrataError(f"a correction emptying segment {segment} has no rows; "
                              f"{rows.num_rows} were given")
        marker = pa.table({f.name: pa.nulls(1, f.type) for f in rows.schema})
        return marker.append_column(pa.field(CORRECTED, pa.int64()),
                                    pa.array([-segment], pa.int64()))
    if rows.num_rows == 0:
        raise StrataError(f"the correction of segment {segment} has no rows: to empty the "
                          "segment say so (`strata series correct STREAM SEGMENT --empty`, "
                          "or correction(rows, segment, empty=True))")
    return rows.append_column(pa.field(CORRECTED, pa.int64()),
                              pa.array([segment] * rows.num_rows, pa.int64()))


def latest_per_segment(fixes: Sequence[Increment]) -> dict[int, Increment]:
    """Segment -> the last increment (in queue order) with rows for it, or a marker
    emptying it (``_segment`` negated: its rows, read by segment number, are none)."""
    out: dict[int, Increment] = {}
    for inc in fixes:
        for fsys, path in map(fs.resolve, inc.files):
            column = pq.read_table(path, columns=[CORRECTED], filesystem=fsys).column(0)
            for k in set(column.drop_null().to_pylist()):
                out[abs(int(k))] = inc
    return out


def correct(program: SeriesProgram, ctx: EpochContext) -> EpochOutcome:
    """The epoch of the corrections waiting for ``program``'s stream."""
    snap = ctx.committed
    n, state = segment_of(snap), dict(snap.state or {})
    fixes = latest_per_segment(ctx.inputs[corrections_flow(program.stream)])
    taken = sorted(k for k in fixes if n - program.lateness < k <= n)
    too_late = sorted(k for k in fixes if 1 <= k <= n - program.lateness)
    unread = sorted(k for k in fixes if k < 1 or k > n)
    if too_late or unread:
        log.warning("series stage %s epoch %d: corrections of segments %s dropped (older "
                    "than the lateness of %d segments) and %s dropped (not read yet)",
                    ctx.stage.name, ctx.epoch, too_late, program.lateness, unread)
    spark = ctx.spark
    previous = set_confs(spark, {"spark.sql.shuffle.partitions": str(ctx.num_partitions)})
    choices = program.activate(state)
    before = program.numbered(ctx.inputs.get(program.stream, ()), n, state)
    stored = views_of(snap)
    cached: list[DataFrame] = []
    try:
        # the corrected rows become the raw segments, in the stage's own directory
        rows_dirs = {k: fs.join(ctx.layout.program_dir(SEGMENTS), f"s{k:08d}-{ctx.token}")
                     for k in taken}
        run_all(spark, [functools.partial(
            write_parquet, spark.read.parquet(*fixes[k].files)
            .where(F.col(CORRECTED) == k).drop(CORRECTED), rows_dirs[k]) for k in taken])
        replaced = {k: increment_of(d) for k, d in rows_dirs.items()}
        views_by_fp = {v.fingerprint: v for p in program.active.values() if not p.raw
                       for v in p.view_list()}
        redo = {(fp, k): views_by_fp[fp] for fp, by_segment in stored.items()
                if fp in views_by_fp for k in taken if str(k) in by_segment}
        reemit = _reemitted(program, n, taken)
        needed = _unstored(program, reemit, stored, redo, before)
        read = {**before, **replaced}
        new_fresh = segment_frames(spark, read, program.columns,
                                   {**redo, **needed}, dict.fromkeys([*redo, *needed], 1),
                                   cached)
        tables = QueryTables(spark, ctx.layout, view_tables(stored), ctx.num_partitions,
                             ctx.token)
        limit = dispatch.driver_rows(ctx)
        for fp, k in sorted(redo):
            view, rows = new_fresh[(fp, k)]
            large = view_through_spark(state.get("stats", {}), fp, read[k].records, limit)
            tables.stage(fp, rows.frame().withColumn(SEGMENT, F.lit(k)),
                         ["_g"] if view.kind == "partial" else [], "append",
                         try_driver=not large)
        run_all(spark, tables.writes())
        crashpoint("series-after-corrected-views")
        written, driver_bytes = staged_views(ctx.layout, sorted(redo), tables.staged)
        driver: set[str] = set()
        new_read = functools.partial(read_views, spark, tables, stored, new_fresh,
                                     program.columns)
        run_all(spark, _reanswers(program, ctx, reemit, new_read, driver, taken))
        crashpoint("series-after-reemit")
        tables.commit_files()
    finally:
        for d in cached:
            d.unpersist()
        set_confs(spark, previous)
    # the corrected segments' old views go, those of a series no longer reading them too
    views = merged({fp: {j: e for j, e in by_segment.items() if int(j) not in taken}
                    for fp, by_segment in stored.items()}, written)
    carried = program.carried(state, n)
    stats = _corrected_stats(state.get("stats", {}), replaced, written)
    new_state = {**state, **carried, "views": views, "choices": choices, "stats": stats,
                 "estimate": None,  # κ learns from segment epochs only
                 "corrections": [*carried["corrections"], [ctx.epoch, n]],
                 "replaced": {**carried["replaced"],
                              **{str(k): inc.to_json() for k, inc in replaced.items()}}}
    outputs = {changes_flow(name): increment_of(ctx.output_dir(changes_flow(name)))
               for name, newest in reemit.items() if newest}
    metrics = {"corrected_segments": taken, "corrections_too_late": too_late,
               "corrections_of_unread_segments": unread, "views_recomputed": len(redo),
               "reemitted": {name: newest for name, newest in reemit.items() if newest},
               # files the driver wrote (small views, changes): Spark does not count them
               "driver_bytes_written": driver_bytes + sum(
                   o.bytes for f, o in outputs.items() if f in driver)}
    return EpochOutcome(outputs, new_state, ctx.num_partitions, metrics)


def _reanswers(program: SeriesProgram, ctx: EpochContext, reemit: Mapping[str, list[int]],
               read: Callable, driver: set[str], taken: Sequence[int]
               ) -> list[Callable[[], None]]:
    """One write per series in ``reemit``: the changes of its occurrences there, each
    answered again (its views read by ``read``) minus its answer as it stands."""
    spark = ctx.spark
    answers: list[Callable[[], None]] = []
    for name, newest in reemit.items():
        plan = program.active[name]
        diffs = [_difference(_answered(ctx, program, name, m),
                             occurrence(plan, m, read, spark), m) for m in newest]
        if diffs:
            changes = functools.reduce(lambda a, b: a.unionByName(b), diffs)
            answers.append(functools.partial(
                write_answer, ctx, changes_flow(name), program.changes_ddl(name), changes,
                driver, f"series {name!r} could not re-answer its occurrences "
                        f"{newest} after corrections of segments {taken}"))
    return answers


def _corrected_stats(stats: Mapping[str, Any], replaced: Mapping[int, Increment],
                     written: Mapping[str, Mapping[str, dict]]) -> Mapping[str, Any]:
    """The cost model's statistics with the corrected segments folded in: a corrected
    segment is data of the stream like a new one (an emptied one says nothing of the
    others' sizes)."""
    for k, inc in replaced.items():
        if inc.records:
            stats = folded(stats, column_bytes(inc), view_bytes(written, k), {},
                           view_rows(written, k), inc.records)
    return stats


def _reemitted(program: SeriesProgram, n: int, taken: Sequence[int]) -> dict[str, list[int]]:
    """Per series that re-emits (lateness > 0): the occurrences up to ``n`` whose window
    contains a corrected segment within the series' lateness."""
    out: dict[str, list[int]] = {}
    for s in program.series:
        if not s.lateness:
            continue
        schedule = program.active[s.name].schedule
        ks = [k for k in taken if n - k < s.lateness]
        out[s.name] = [m for m in range(min(ks, default=n + 1), n + 1) if schedule.due(m)
                       and any(k in run for run in schedule.window(m).values() for k in ks)]
    return out


def _unstored(program: SeriesProgram, reemit: Mapping[str, Sequence[int]],
              stored: Mapping[str, Mapping[str, dict]],
              redo: Mapping[tuple[str, int], View], kept: Mapping[int, Increment]
              ) -> dict[tuple[str, int], View]:
    """The views the re-emitted occurrences read that the stage does not store (a raw
    plan's rows, a view no later occurrence needed) and does not recompute already:
    computed from the raw segments, as corrected."""
    needed: dict[tuple[str, int], View] = {}
    for name, newest in reemit.items():
        plan = program.active[name]
        for m in newest:
            window = plan.schedule.window(m)
            for v in plan.view_list():
                for j in window[v.table]:
                    if str(j) not in stored.get(v.fingerprint, {}):
                        needed[(v.fingerprint, j)] = v
    missing = sorted({j for _, j in needed if j not in kept})
    if missing:  # a series added or switched to its raw plan after those segments went
        raise StrataError(f"cannot re-emit occurrences of {sorted(reemit)}: segments "
                          f"{missing} are no longer kept, as rows or as views")
    return {key: v for key, v in needed.items() if key not in redo}


def _answered(ctx: EpochContext, program: SeriesProgram, name: str, m: int) -> DataFrame:
    """The answer of series ``name`` at occurrence ``m`` as it stands, each row with its
    multiplicity: the rows the occurrence wrote, with the changes re-emitted since.

    Read back rather than computed again from the old data: the series may run another
    plan now (views or raw), whose floating-point sums differ from the written ones in
    their last bits, and a retraction must match a written row exactly."""
    spark, ddl = ctx.spark, program.output_ddl(name)
    try:
        stored = stored_answer(ctx.home, name, m)
        written: Sequence[str] = stored.answer.files
        changes = [c.files for c in stored.changes if c.files]
    except StrataError:  # never answered (its window was incomplete): every row is new
        written, changes = [], []
    parts = [spark.read.schema(ddl).parquet(*written)
             .withColumn(MULT, F.lit(1).cast("bigint"))] if written else []
    parts += [spark.read.schema(program.changes_ddl(name)).parquet(*files)
              .where(F.col(OCCURRENCE) == m).drop(OCCURRENCE) for files in changes]
    if not parts:
        return spark.createDataFrame([], f"{ddl}, `{MULT}` bigint")
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def _difference(old: DataFrame, new: DataFrame, newest: int) -> DataFrame:
    """``new`` − ``old`` (``old`` with a multiplicity per row) as changes of the occurrence
    ``newest``: rows with a net multiplicity (+n inserted, −n retracted), none where the
    answers agree."""
    cols = new.columns
    both = old.withColumn(MULT, -F.col(MULT)).unionByName(new.withColumn(MULT, F.lit(1)))
    net = both.groupBy(*cols).agg(F.sum(MULT).alias(MULT)).where(F.col(MULT) != 0)
    return net.select(F.lit(newest).cast("bigint").alias(OCCURRENCE), *cols,
                      F.col(MULT).cast("bigint").alias(MULT))
