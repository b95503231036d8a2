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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strata.model.errors import StrataError
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.queries.front import parse_sql, tables_read
from strata.queries.plan import MULT, QueryError
from strata.series.corrections import OCCURRENCE, correct, corrections_flow
from strata.series.cost import choose
from strata.series.epoch import run_segment
from strata.series.normalize import SeriesPlan, plan_series
from strata.series.stored import collect_views, replaced_segments, segment_of, views_of
from strata.series.windows import Schedule, Segments
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
        raw_plans: dict[str, SeriesPlan] | None = getattr(self, "_raw_plans", None)
        if raw_plans is None:
            raw_plans = self._raw_plans = {
                s.name: plan_of(s, self.stream, self.columns, raw=True) for s in self.series}
        return raw_plans

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

    def view_schemas(self) -> dict:
        """The Spark schemas of views found so far (:func:`strata.series.reads.
        view_schema`); not pickled (:meth:`__getstate__`)."""
        schemas: dict = self.__dict__.setdefault("_schemas", {})
        return schemas

    @property
    def active(self) -> dict[str, SeriesPlan]:
        """The plans this epoch runs (all normalized until :meth:`run` chooses)."""
        active: dict[str, SeriesPlan] | None = getattr(self, "_active", None)
        return active or self.plans

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
        return run_segment(self, ctx)

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
