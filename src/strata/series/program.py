"""The stage of a stream: every query series on it, run together per segment.

One stage per stream computes, for each new segment, the per-segment views its series
read (one per fingerprint, however many series or tables share it), stores those read
later in tables bucketed by their key (co-located), then answers every series that is
due with that segment from the views of its window and writes each answer as an
increment of the series' output flow. Epoch *n* of the stage is segment *n* of the
stream until a correction takes an epoch of its own (:mod:`strata.series.corrections`;
:func:`~strata.series.stored.occurrence_epoch` maps occurrences to epochs). Per series,
the cost model (:mod:`strata.series.cost`) may run the plan that reads the raw window
again instead; with ``shared_scan`` (or by the cost model's choice, ``"auto"``) the new
segment's stored partial views are computed in one jumbo pass, those that share a
group key in one pass with one exchange (``"prefix"``), or those that group by the same
keys in one grouping with their filters pulled above it (``"reorder"``).

The stage keeps the raw segments the longest window needs queued (runnability
:class:`~strata.model.runnability.sliding`), so a series registered later, or switching
plans, computes the views it needs from them. Views no series will read again are
dropped from the state and collected with the epoch's garbage. See ``docs/series.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.faults import crashpoint
from strata.model.errors import StrataError
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.physical.session import set_confs
from strata.queries import dispatch
from strata.queries.errors import QueryError
from strata.queries.expressions import MULT
from strata.queries.frames import ddl_of, run_all
from strata.queries.sql import parse_sql, tables_read
from strata.queries.tables import QueryTables, write_bucketed
from strata.series.corrections import OCCURRENCE, correct, corrections_flow
from strata.series.cost import (
    answer_through_spark,
    choose,
    epoch_estimates,
    folded,
    learned,
    measured,
    occurrences_io,
    scan_plan,
    scan_sharing,
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
from strata.series.normalize import SeriesPlan, View, plan_series
from strata.series.reads import Fresh, read_views, segment_frames, view_schema
from strata.series.statistics import EpochNotes, epoch_operators, timed
from strata.series.stored import (
    SEGMENT,
    VIEWS,
    branch_buckets,
    branch_entries,
    collect_views,
    column_bytes,
    increment_of,
    merged,
    read_segment,
    reads_any,
    replaced_segments,
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
from strata.series.windows import Schedule, Segments
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.increments import Increment
from strata.storage.manifest import StateSnapshot


@dataclass(frozen=True)
class Series:
    """A query series: ``sql`` over tables bound to runs of a stream's segments
    (``{"log": "log[-6:0]"}``: the newest seven; a table the SQL names that is not bound
    is the newest segment of the stream of that name), due every ``period`` segments."""

    name: str
    sql: str
    tables: Mapping[str, str]
    period: int = 1
    plan: str = "auto"  # views | raw | auto: the cost model picks (strata.series.cost)
    # how many of the newest segments a correction may replace and still re-emit this
    # series' occurrences that read it, as changes (0: corrections never re-emit them;
    # series pickled before it existed read the class default)
    lateness: int = 0

    def __post_init__(self) -> None:
        if self.plan not in ("auto", "views", "raw"):
            raise StrataError(f"series {self.name!r}: plan must be auto, views or raw, not "
                              f"{self.plan!r}")
        if self.lateness < 0:
            raise StrataError(f"series {self.name!r}: lateness is a number of segments ≥ 0, "
                              f"not {self.lateness}")

    def schedule(self, stream: str, tables: Sequence[str]) -> Schedule:
        runs = {t: Segments.parse(self.tables.get(t, t)) for t in tables}
        for t, run in runs.items():
            if run.stream != stream:
                raise StrataError(f"series {self.name!r}: table {t!r} reads {run.stream!r}, "
                                  f"but the series runs on stream {stream!r}")
        return Schedule(runs, self.period)


def plan_of(series: Series, stream: str, columns: Mapping[str, str], raw: bool = False
            ) -> SeriesPlan:
    """Parse and normalize ``series`` over ``stream`` (whose columns are ``columns``)."""
    try:
        tables = tables_read(series.sql)
        unknown = set(series.tables) - set(tables)
        if unknown:
            raise StrataError(f"series {series.name!r} binds {sorted(unknown)}, which its "
                              f"query does not read (it reads {tables})")
        schedule = series.schedule(stream, tables)
        return plan_series(parse_sql(series.sql, dict.fromkeys(tables, dict(columns))),
                           schedule, columns, raw)
    except QueryError as e:  # the same error, saying which series it is about
        e.args = (f"series {series.name!r}: {e}",)
        raise


class SeriesProgram(StageProgram):
    """The compiled jumbo stage of one stream: its series, their plans and outputs."""

    kind = "series"
    records_spark_io = True  # the cost model learns from the epochs' measured bytes

    def __init__(self, stream: str, columns: Mapping[str, str], series: Sequence[Series],
                 shared_scan: bool | str = False) -> None:
        names = [s.name for s in series]
        if len(set(names)) != len(names):
            raise StrataError(f"series names repeat on stream {stream!r}: {names}")
        self.stream = stream
        self.columns = dict(columns)  # the stream's columns -> Spark types
        self.series = tuple(series)
        # the jumbo pass (True), the shared shuffle ("prefix") or the shared grouping
        # ("reorder"): off by default, they pay only where filters are selective, groups
        # nearly rows or keys shared (docs/series.md, "Measured"); "auto": the cost
        # model decides per segment
        if shared_scan not in (True, False, "prefix", "reorder", "auto"):
            raise StrataError("shared_scan is True, False, 'prefix', 'reorder' or 'auto', "
                              f"not {shared_scan!r}")
        self.shared_scan = shared_scan
        self._plans: dict[str, SeriesPlan] | None = None
        self._raw_plans: dict[str, SeriesPlan] | None = None
        self._active: dict[str, SeriesPlan] | None = None
        self.plans  # noqa: B018  (parse now: a bad series fails at registration)

    def __getstate__(self) -> dict:  # plans key views by node identity: rebuilt on load
        return {**self.__dict__, "_plans": None, "_raw_plans": None, "_active": None,
                "_schemas": {}}

    @property
    def plans(self) -> dict[str, SeriesPlan]:
        """Each series' normalized plan (per-segment views)."""
        if self._plans is None:
            self._plans = {s.name: plan_of(s, self.stream, self.columns) for s in self.series}
        return self._plans

    @property
    def raw_plans(self) -> dict[str, SeriesPlan]:
        """Each series' plan that aggregates its raw window at every occurrence."""
        if getattr(self, "_raw_plans", None) is None:
            self._raw_plans = {s.name: plan_of(s, self.stream, self.columns, raw=True)
                               for s in self.series}
        return self._raw_plans

    def choices(self, stats: Mapping[str, Any]) -> dict[str, dict]:
        """Per series: the plan it runs with (``views`` or ``raw``), and the cost model's
        estimates when it had statistics to choose with."""
        out = {}
        for s in self.series:
            plan, est = choose(self.plans[s.name], stats.get("columns", {}),
                               stats.get("views", {}))
            out[s.name] = {"plan": plan if s.plan == "auto" else s.plan, "estimates": est,
                           "forced": s.plan != "auto"}
        return out

    def activate(self, state: Mapping[str, Any] | None) -> dict[str, dict]:
        """Choose each series' plan from the statistics in ``state`` and run with it (the
        choices, as :meth:`choices` gives them)."""
        choices = self.choices((state or {}).get("stats", {}))
        self._active = {name: self.raw_plans[name] if c["plan"] == "raw" else self.plans[name]
                        for name, c in choices.items()}
        return choices

    @property
    def active(self) -> dict[str, SeriesPlan]:
        """The plans this epoch runs (all normalized until :meth:`run` chooses)."""
        return getattr(self, "_active", None) or self.plans

    def output_ddl(self, name: str) -> str:
        cols = self.plans[name].query.root.columns
        return ", ".join(f"`{c}` {t}" for c, t in cols.items())

    def changes_ddl(self, name: str) -> str:
        """The flow of a series' re-emitted occurrences: each changed answer row with the
        occurrence (its newest segment) and its multiplicity (+n inserted, -n retracted)."""
        return f"`{OCCURRENCE}` bigint, {self.output_ddl(name)}, `{MULT}` bigint"

    @property
    def lateness(self) -> int:
        """How far back (in segments) a correction is taken: the largest of the series'."""
        return max((s.lateness for s in self.series), default=0)

    @property
    def keep_segments(self) -> int:
        """Raw segments kept besides the newest: enough for any registered window, and
        for the windows of every occurrence a correction may re-emit."""
        return max((p.schedule.first - 1 for p in self.plans.values()), default=0) + \
            self.lateness

    def keeps(self, last_reader: int, n: int) -> bool:
        """Whether a view whose last reader is the occurrence ``last_reader`` stays stored
        after segment ``n``: while that occurrence is ahead, or may still be re-emitted."""
        return last_reader > 0 and last_reader > n - self.lateness

    def describe(self) -> str:
        return f"series on {self.stream}: {', '.join(s.name for s in self.series) or 'none'}"

    # -- one epoch = one segment, or the corrections waiting ------------------------------
    def run(self, ctx: EpochContext) -> EpochOutcome:
        if ctx.inputs.get(corrections_flow(self.stream)):
            return correct(self, ctx)
        n = segment_of(ctx.committed) + 1
        raw = ctx.inputs.get(self.stream, ())
        if not raw:
            raise StrataError(f"series stage {ctx.stage.name!r} epoch {ctx.epoch} was given "
                              "no segment")
        segments = self.numbered(raw, n, ctx.committed.state)
        stored = views_of(ctx.committed)
        spark = ctx.spark
        previous = set_confs(spark, {"spark.sql.shuffle.partitions": str(ctx.num_partitions)})
        cached: list[DataFrame] = []
        root = ctx.layout.program_dir(VIEWS)
        stats = ctx.committed.state.get("stats", {}) if ctx.committed.state else {}
        choices = self.activate(ctx.committed.state)
        try:
            due = [s for s in self.series if self.active[s.name].schedule.due(n)]
            wanted, uses = self._wanted(n, segments, stored, due)
            # a segment the driver still holds (it parsed it at ingest): its views in Arrow
            rows = held_segment(ctx, segments[n], spark_schema(self.columns))
            known = self.__dict__.setdefault("_schemas", {})  # view schemas (pickled: none)
            held = {} if rows is None else segment_views(
                rows, n, wanted, functools.partial(view_schema, spark, self.columns,
                                                   staged=False, known=known))
            # the new segment's stored views share one pass; a view read only now is
            # cheaper in memory than written with the others and read back
            jumbo = [key for key, v in sorted(wanted.items(), key=lambda kv: kv[0])
                     if key[1] == n and key not in held and jumbo_eligible(v) and self.keeps(
                         self._last_reader(*key), n)]
            kappa = learned(stats.get("kappa", {}), (ctx.committed.state or {}).get(
                "estimate"), measured(ctx.committed.metrics))
            candidates = [wanted[k] for k in jumbo]
            group, hashed = prefix_group(candidates)
            reorder = reorder_group(candidates)
            _, scan_estimates = scan_sharing(candidates, stats.get("columns", {}),
                                             stats.get("views", {}), group=group,
                                             shared=hashed, reorder=reorder)
            answering = occurrences_io({s.name: self.active[s.name] for s in due}, n,
                                       stats.get("views", {}), stats.get("answers", {}))
            estimates = epoch_estimates(scan_estimates, answering, kappa)
            ran = scan_plan(self.shared_scan, estimates, len(jumbo), len(group) >= 2,
                            len(reorder) >= 2)
            jumbo = pass_views(ran, jumbo, group, reorder)
            # an epoch with views in Arrow reads less through Spark than the model's plans:
            # κ must not learn from it
            estimate = {p: scan_estimates[ran][p] + getattr(answering, p)
                        for p in ("read", "shuffled", "written")} \
                if scan_estimates and not held else None
            fresh = {**segment_frames(spark, segments, self.columns, {
                k: v for k, v in wanted.items() if k not in jumbo and k not in held},
                uses, cached), **held}
            # stored views are co-located: appended to a table per view, bucketed by the
            # group key, so that merging a window's views does not shuffle them again
            tables = QueryTables(spark, ctx.layout, view_tables(stored), ctx.num_partitions,
                                 ctx.token)
            keep = sorted(k for k in fresh if self.keeps(self._last_reader(*k), n))
            for fp, j in keep:
                view, fresh_rows = fresh[(fp, j)]
                tables.stage(fp, with_segment(fresh_rows, j, view_schema(
                    spark, self.columns, view, True, known))
                             if (fp, j) in held else fresh_rows.frame().withColumn(
                                 SEGMENT, F.lit(j)),
                             ["_g"] if view.kind == "partial" else [], "append")
            noted = EpochNotes()
            writes = [timed(w, k, noted.seconds)
                      for k, w in zip(keep, tables.writes(), strict=True)]
            jumbo_dir = fs.join(root, f"s{n:08d}-{ctx.token}-jumbo")
            if jumbo:
                segment = read_segment(spark, segments[n], self.columns)
                passed = [wanted[k] for k in jumbo]
                pass_ = pass_partials(ran, passed, segment, hashed, ctx.num_partitions)
                pass_ddl = ddl_of(pass_.drop("_b").schema)
                writes.append(timed(functools.partial(
                    write_bucketed, spark, pass_, branch_buckets(len(jumbo), ctx.num_partitions),
                    jumbo_dir, ctx.num_partitions, "_b"), "pass", noted.seconds))
            # an occurrence reading none of the views written now runs with their writes;
            # the others after them: one sharing a cached view with a write would share
            # its shuffle stage with that write's job, and Spark's status store then
            # records that stage as skipped in both jobs, its bytes lost to the cost model
            answering = functools.partial(self._answers, ctx, n=n, tables=tables,
                                          fresh=fresh, stats=stats, noted=noted,
                                          in_arrow=rows is not None)
            early = [s for s in due
                     if not reads_any(self.active[s.name], n, {*jumbo, *keep})]
            run_all(spark, writes + answering(early, views=stored))
            crashpoint("series-after-views")
            written, driver_bytes = staged_views(ctx.layout, keep, tables.staged)
            if jumbo:
                entries = branch_entries(jumbo_dir, pass_ddl, len(jumbo), ctx.num_partitions)
                for (fp, j), entry in zip(jumbo, entries, strict=True):
                    written.setdefault(fp, {})[str(j)] = entry
            views = merged(stored, written)
            run_all(spark, answering([s for s in due if s not in early], views=views))
            answered = [s.name for s in due if s.name in noted.answered]
            skipped = [s.name for s in due if s.name in noted.skipped]
            tables.commit_files()
        finally:
            for d in cached:
                d.unpersist()
            set_confs(spark, previous)
        outputs = {name: increment_of(ctx.output_dir(name)) for name in answered}
        columns = column_bytes(segments[n])
        state = {**self.carried(ctx.committed.state, n), "segment": n,
                 "views": self._still_read(views, n), "choices": choices,
                 "scan": {"shared": bool(jumbo), "plan": ran,
                          "views": len(jumbo) or len(keep), "arrow": len(held),
                          "forced": self.shared_scan != "auto", "estimates": estimates},
                 "estimate": estimate,  # the model's, unscaled: κ learns from it
                 "stats": {**folded(stats, columns,
                                    view_bytes(written, n),
                                    {name: o.bytes for name, o in outputs.items()},
                                    view_rows(written, n), segments[n].records,
                                    {name: o.records for name, o in outputs.items()}),
                           "kappa": kappa}}
        metrics = {"views_computed": len(wanted), "views_in_jumbo_pass": len(jumbo),
                   "views_in_arrow": len(held),
                   "scan_plan": ran,
                   "epoch_estimates": estimates,
                   "views_written": len(keep) + len(jumbo), "answered": answered,
                   # per operator, recorded in the catalog (strata.series.statistics)
                   "operators": epoch_operators(n, wanted, written, segments, columns,
                                                outputs, noted.rows_in, noted.seconds),
                   "skipped": skipped, "segment_bytes": segments[n].bytes,
                   # files the driver wrote (small views, answers): Spark does not count them
                   "driver_bytes_written": driver_bytes + sum(
                       o.bytes for name, o in outputs.items() if name in noted.by_driver),
                   # view tables the driver read from storage (not from its file cache)
                   "driver_bytes_read": sum(noted.driver_read.values())}
        return EpochOutcome(outputs, state, ctx.num_partitions, metrics)

    def _answers(self, ctx: EpochContext, due: Sequence[Series], *, n: int,
                 tables: QueryTables, views: Mapping[str, Mapping[str, dict]],
                 fresh: Fresh,
                 stats: Mapping[str, Any], noted: EpochNotes, in_arrow: bool) -> list:
        """One write per occurrence of ``due`` at segment ``n`` whose window's views are
        all in ``views`` or ``fresh``; what each did is ``noted``. ``in_arrow``: each is
        first tried in Arrow from views the driver holds (:mod:`strata.series.held`)."""
        spark, out = ctx.spark, []
        for s in due:
            plan = self.active[s.name]
            if not window_present(plan, n, views, fresh):
                noted.skipped.append(s.name)
                continue
            read = functools.partial(read_views, spark, tables, views, fresh, self.columns)
            arrow = functools.partial(read_held, tables, views, fresh, noted.driver_read,
                                      SEGMENT) if in_arrow else None
            rows = noted.rows_in[s.name] = window_rows(plan, n, views,
                                                      stats.get("rows", {}))
            large = answer_through_spark(stats.get("answer_rows", {}).get(s.name), rows,
                                         dispatch.driver_rows(ctx))
            out.append(timed(functools.partial(
                self._answer, ctx, s.name, n, read, noted.by_driver, large, arrow),
                s.name, noted.seconds))
            noted.answered.append(s.name)
        return out

    def _answer(self, ctx: EpochContext, name: str, n: int, read: Callable,
                by_driver: set[str], large: bool, arrow: Callable | None) -> None:
        """Plan series ``name``'s occurrence at segment ``n`` and write its answer (in
        Arrow from held views, with ``arrow`` their reader, if it can). It runs in a
        write thread: the epoch's answers are planned together, and with the views'
        writes (planning is mostly calls into the JVM, which leave the GIL free)."""
        plan = self.active[name]
        table = held_occurrence(plan, n, arrow) if arrow is not None else None
        write_answer(ctx, name, self.output_ddl(name),
                     table if table is not None else occurrence(plan, n, read, ctx.spark),
                     by_driver, f"series {name!r} could not answer its occurrence at "
                     f"segment {n}", large and table is None)

    def numbered(self, raw: Sequence[Increment], n: int, state: Mapping[str, Any] | None
                 ) -> dict[int, Increment]:
        """The queued raw segments (the kept ones, then the newest, ``n``) by number, with
        the rows of corrected ones."""
        segments = {n - len(raw) + 1 + i: inc for i, inc in enumerate(raw)}
        replaced = replaced_segments(state)
        return {j: replaced.get(j, inc) for j, inc in segments.items()}

    def carried(self, state: Mapping[str, Any] | None, n: int) -> dict[str, Any]:
        """What the state keeps about corrections after segment ``n``: the epochs they
        took, the corrected raw segments still in the kept window, and the lateness the
        stage takes corrections with (`strata series correct` checks a correction
        against it, also for a stage only a pipeline declares)."""
        state = state or {}
        oldest = n - self.keep_segments
        return {"corrections": state.get("corrections", []), "lateness": self.lateness,
                "replaced": {j: e for j, e in state.get("replaced", {}).items()
                             if int(j) >= oldest}}

    def _wanted(self, n: int, segments: Mapping[int, Increment],
                stored: Mapping[str, Mapping[str, dict]], due: Sequence[Series]
                ) -> tuple[dict[tuple[str, int], View], dict[tuple[str, int], int]]:
        """The views this epoch computes, with how many times each is used: the new
        segment's for every series that reads it later, and those a due occurrence reads
        that nobody stored (of the new segment, or of a kept one for a new series)."""
        wanted: dict[tuple[str, int], View] = {}
        uses: dict[tuple[str, int], int] = {}
        for plan in self.active.values():
            for v in plan.view_list():
                if not plan.raw and self.keeps(plan.schedule.last_reader(n, v.table), n):
                    wanted[(v.fingerprint, n)] = v
                    uses[(v.fingerprint, n)] = 1
        for s in due:
            plan = self.active[s.name]
            for v in plan.view_list():
                for j in plan.schedule.window(n)[v.table]:
                    key = (v.fingerprint, j)
                    if j in segments and str(j) not in stored.get(v.fingerprint, {}):
                        wanted[key] = v
                        uses[key] = uses.get(key, 0) + 1
        return wanted, uses

    def _last_reader(self, fingerprint: str, segment: int) -> int:
        """The newest segment of the last occurrence of any series reading the view."""
        return max((p.schedule.last_reader(segment, v.table) for p in self.active.values()
                    if not p.raw
                    for v in p.view_list() if v.fingerprint == fingerprint), default=0)

    def _still_read(self, views: Mapping[str, Mapping[str, dict]], n: int
                    ) -> dict[str, dict[str, dict]]:
        """The views some registered series reads at an occurrence after ``n``."""
        keep: dict[str, dict[str, dict]] = {}
        for fp, by_segment in views.items():
            for j, entry in by_segment.items():
                if self.keeps(self._last_reader(fp, int(j)), n):
                    keep.setdefault(fp, {})[j] = entry
        return keep

    # -- the committed state, read from files ----------------------------------------------
    @classmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        """One record per stored view of a segment."""
        return [{"view": fp, "segment": int(j), "rows": e["records"], "bytes": e["bytes"]}
                for fp, by_segment in sorted(views_of(snap).items())
                for j, e in sorted(by_segment.items(), key=lambda kv: int(kv[0]))]

    @classmethod
    def summary(cls, layout: StageLayout, snap: StateSnapshot) -> str | None:
        """The stream's segments read, and the segments whose views are kept."""
        n = segment_of(snap)
        fixes = len(snap.state.get("corrections", [])) if snap.state else 0
        kept = sorted({int(j) for by_segment in views_of(snap).values() for j in by_segment})
        views = sum(len(v) for v in views_of(snap).values())
        span = "none" if not kept else (f"segment {kept[0]}" if len(kept) == 1
                                        else f"segments {kept[0]}–{kept[-1]}")
        fixed = f"; {fixes} correction epoch(s)" if fixes else ""
        return (f"segments 1–{n} of the stream read; {views} view(s) kept, of {span}{fixed}"
                if n else None)

    @classmethod
    def state_bytes(cls, layout: StageLayout, state: Mapping[str, Any]) -> int:
        return sum(e["bytes"] for by_segment in state.get("views", {}).values()
                   for e in by_segment.values())

    @classmethod
    def collect_garbage(cls, layout: StageLayout, keep: StateSnapshot) -> None:
        """Delete view files ``keep`` does not name (:func:`~strata.series.stored.
        collect_views`)."""
        collect_views(layout, keep)
