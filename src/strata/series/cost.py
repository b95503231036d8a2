"""The cost model: for each series, keep per-segment views or read the raw window again.

Normalization pays when windows overlap (a daily series over the last seven segments
aggregates each segment once instead of seven times) and costs when they do not (a
weekly series over seven daily segments writes and reads back seven views it could have
aggregated once). The planner estimates, per period of a series, the I/O (bytes read,
shuffled and written) of both plans from statistics of earlier segments, and picks the
cheaper:

* ``C_v``: the compressed bytes of the columns view *v* reads, per segment (from the
  segments' Parquet footers: what a pruned scan reads);
* ``V_v``: the bytes of view *v* per segment (its stored files);
* ``α``: shuffled bytes per view byte when a segment's view is computed, and ``β``
  when an occurrence aggregates a window of raw segments.

With ``w`` segments in the window and period ``p``, per period:

* views: ``p·(C + α·V)`` to compute the new segments' views, ``p·V`` to write them when
  an occurrence reads them later, and ``(w − 1)·V`` to read the stored ones;
* raw: ``w·(C + β·V)``: each occurrence scans and aggregates its whole window.

``α`` and ``β`` are measured, not derived: in the full run of ``benchmarks/series.py``
(25 Nov 2026) computing a day's (A, B) partials shuffled about 0.4 bytes per byte of the
view, while aggregating seven raw segments at once shuffled about 3 per view byte
(every task of every segment emits its own partial groups). With those, views are the
cheaper plan for every window shape; the raw plan wins only where an aggregate
shuffles less than its stored view plus the reads of it.

Only partial views differ between the plans (rows views and joins cost the same in
both). Without statistics yet, a series keeps views.

**Sharing a scan** (:func:`scan_sharing`). The new segment's stored partial views are
computed each by its own plan (a pruned scan of its columns and an exchange of its
partial groups), together in one jumbo pass (one scan of every column any of them
reads, one exchange), or, those that share a group key, in one pass exchanging rows on
that key (Comet's shared shuffle). The jumbo pass saves scans but widens the exchange:
each of its rows carries every view's key and parts, NULL but for its own view's (8
bytes each in Spark's row format, mostly compressed away in the shuffle files). Per
segment:

* separate: ``Σ_v (C_v + α·V_v + V_v)``;
* shared: ``C_∪ + Σ_v (α·ω_v·V_v + V_v)`` with ``C_∪`` the bytes of the union of the
  views' columns and ``ω_v = 1 + ν·(F − F_v) / F_v`` the widening, ``F_v`` the fields of
  view *v*'s shuffled rows (keys and parts), ``F`` those of all views together and ``ν``
  what a NULL field costs beside a view's own (measured, below).
* prefix: the views that group by a shared key (:func:`~strata.series.evaluate.
  prefix_group`) in one pass whose exchange hashes that key and carries the rows
  themselves, the others separate: ``C_g + Σ_{v∉g} C_v`` read, ``δ·C_g + α·Σ_{v∉g} V_v``
  shuffled, with ``C_g`` the bytes of the group's columns and ``δ`` the shuffled bytes
  per such byte when rows cross an exchange (Spark combines no rows below an explicit
  repartition).

* reordered: the views that group by the same keys (:func:`~strata.series.evaluate.
  reorder_group`) grouped once, their filters pulled above the grouping into each
  view's aggregates, the others separate: ``C_g + Σ_{v∉g} C_v`` read,
  ``α·R_g + α·Σ_{v∉g} V_v`` shuffled, with ``R_g`` the bytes of the shared groups
  (:func:`reordered_bytes`): a key carries every view's parts once, so the views'
  keys are shuffled once where their groups coincide.

Every plan stores its views bucketed by their keys (a pass writes each row into its
view's bucket), so the occurrences that read them later merge them where they lie:
reading costs the same whichever plan computed them (:func:`occurrences_io`).

All of it is plain arithmetic over plain data (no Spark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from strata.queries.plan import Explode, GroupBy, Map, Node, Scan
from strata.series.normalize import SeriesPlan, View

VIEW_SHUFFLE = 0.4  # α: shuffled bytes per view byte, computing one segment's view
RAW_SHUFFLE = 3.0  # β: shuffled bytes per view byte, aggregating raw segments at once
# δ: shuffled bytes per compressed column byte when rows cross an exchange, on α's scale
# (κ scales both alike): benchmarks/series_prefix.py measured δ/α = 1.35-1.51 (29 Nov)
ROWS_SHUFFLE = VIEW_SHUFFLE * 1.43
# ν: a NULL field's shuffled bytes over a view's own field's, in a jumbo pass's rows: the
# sweep of benchmarks/series_sweep.py (29 Nov) measured the pass shuffling 1.01-1.07×
# the views' own exchanges with 2 branches, 1.14-1.25× with 4, 1.36-1.41× with 8 (where
# F/F_v is about 2, 4 and 8); the field ratio alone (ν = 1) predicted 2.3×, 4.3× and 8×
NULL_FIELD_SHUFFLE = 0.05
# the share of a reordered pass's views' groups whose keys they have in common, with no
# statistics of it: halfway between nested and disjoint (cost.reordered_bytes)
GROUP_OVERLAP = 0.5
EWMA = 0.5  # weight of the newest segment in the statistics


@dataclass(frozen=True)
class Estimate:
    """Estimated bytes per period of a series."""

    read: float
    shuffled: float
    written: float

    @property
    def io(self) -> float:
        return self.read + self.shuffled + self.written

    def to_json(self) -> dict[str, float]:
        return {"read": round(self.read), "shuffled": round(self.shuffled),
                "written": round(self.written), "io": round(self.io)}


def view_columns(view: View) -> set[str]:
    """The stream columns a view reads (names without the table's prefix)."""
    cols: set[str] = set()

    def walk(node: Node) -> None:
        exprs: list = []
        if isinstance(node, GroupBy):
            exprs += [e for _, e in node.keys] + [a.arg for a in node.aggs if a.arg is not None]
        elif isinstance(node, Map):
            exprs += ([node.where] if node.where is not None else [])
            exprs += [e for _, e in node.outputs] if node.outputs is not None else []
        elif isinstance(node, Explode):
            exprs.append(node.source)
        elif isinstance(node, Scan):
            return
        for e in exprs:
            cols.update(c.name for c in e.find_all(exp.Column))
        for child in node.children:
            walk(child)

    walk(view.node)
    prefix = view.prefix
    return {c[len(prefix):] if prefix and c.startswith(prefix) else c for c in cols}


def estimates(plan: SeriesPlan, column_bytes: Mapping[str, float],
              view_bytes: Mapping[str, float], alpha: float = VIEW_SHUFFLE
              ) -> Estimate | None:
    """The I/O per period of ``plan``'s partial views kept (None without statistics)."""
    sched = plan.schedule
    read = shuffled = written = 0.0
    for v in plan.view_list():
        if v.kind != "partial":
            continue
        if v.fingerprint not in view_bytes:
            return None
        size = view_bytes[v.fingerprint]
        scan = sum(column_bytes.get(c, 0.0) for c in view_columns(v))
        w, p = len(sched.tables[v.table].indices(0)), sched.period
        later = w > 1 or sched.tables[v.table].offset < 0  # some segment is read again
        read += p * scan + (w - 1 if sched.tables[v.table].offset == 0 else w) * size
        shuffled += p * alpha * size
        written += p * size if later else 0.0
    return Estimate(read, shuffled, written)


def raw_estimate(plan: SeriesPlan, column_bytes: Mapping[str, float],
                 view_bytes: Mapping[str, float], beta: float = RAW_SHUFFLE
                 ) -> Estimate | None:
    """The I/O per period of aggregating the raw window instead of ``plan``'s views."""
    sched = plan.schedule
    read = shuffled = 0.0
    for v in plan.view_list():
        if v.kind != "partial":
            continue
        if v.fingerprint not in view_bytes:
            return None
        w = len(sched.tables[v.table].indices(0))
        read += w * sum(column_bytes.get(c, 0.0) for c in view_columns(v))
        shuffled += w * beta * view_bytes[v.fingerprint]
    return Estimate(read, shuffled, 0.0)


def choose(plan: SeriesPlan, column_bytes: Mapping[str, float],
           view_bytes: Mapping[str, float], alpha: float = VIEW_SHUFFLE,
           beta: float = RAW_SHUFFLE) -> tuple[str, dict[str, dict[str, float]]]:
    """``views`` or ``raw`` for the series of ``plan`` (its normalized plan), with the
    estimates of both (empty without statistics: then ``views``). Not scaled by ``κ``:
    it is learned from epochs estimated with the views' formulas (``α``), and applied to
    the raw plan's shuffle (``β``) it moved series to raw plans that cost more
    (docs/series.md, "Not built yet")."""
    kept = estimates(plan, column_bytes, view_bytes, alpha)
    raw = raw_estimate(plan, column_bytes, view_bytes, beta)
    if kept is None or raw is None or not any(v.kind == "partial" for v in plan.view_list()):
        return "views", {}
    return ("raw" if raw.io < kept.io else "views",
            {"views": kept.to_json(), "raw": raw.to_json()})


def view_fields(view: View) -> int:
    """The fields of a partial view's shuffled rows: its keys and monoid parts."""
    node = view.node
    assert isinstance(node, GroupBy)
    parts = sum(len(m.parts) for m in view.monoids) or len(node.aggs)
    return max(1, len(node.keys)) + parts + 1  # and the row count


def scan_sharing(views: Sequence[View], column_bytes: Mapping[str, float],
                 view_bytes: Mapping[str, float], alpha: float = VIEW_SHUFFLE,
                 group: Sequence[int] = (), shared: Sequence[str] = (),
                 delta: float = ROWS_SHUFFLE, reorder: Sequence[int] = ()
                 ) -> tuple[str, dict[str, dict[str, float]]]:
    """How to compute ``views`` (a segment's stored partial views) — ``separate``,
    ``shared`` (one jumbo pass) or, when the views ``group`` (indices, at least two) all
    group by the ``shared`` keys (SQL over the stream's columns), ``prefix`` (those in one
    jumbo pass exchanging rows on the shared keys, the others separate) and, when the
    views ``reorder`` (indices, at least two) group by the same keys,
    ``reordered`` (those grouped once with their filters pulled above the grouping, the
    others separate) — with the estimates of each plan. Without statistics of every
    view: ``separate``, no estimates."""
    if len(views) < 2 or any(v.fingerprint not in view_bytes for v in views):
        return "separate", {}

    def scan(vs: Sequence[View]) -> float:  # one pruned scan of what ``vs`` read
        return sum(column_bytes.get(c, 0.0) for c in set().union(*map(view_columns, vs)))

    def separate(vs: Sequence[View]) -> Estimate:
        return Estimate(sum(scan([v]) for v in vs),
                        sum(alpha * view_bytes[v.fingerprint] for v in vs),
                        sum(view_bytes[v.fingerprint] for v in vs))

    fields = {v.fingerprint: view_fields(v) for v in views}
    total = sum(fields.values()) + 1  # and the branch tag
    alone = separate(views)
    plans = {"separate": alone,
             "shared": Estimate(scan(views), sum(
                 alpha * (1 + NULL_FIELD_SHUFFLE * (total - fields[v.fingerprint])
                          / fields[v.fingerprint]) * view_bytes[v.fingerprint]
                 for v in views), alone.written)}
    if len(group) >= 2 and shared:
        inside = scan([views[i] for i in group])
        rest = separate([v for i, v in enumerate(views) if i not in set(group)])
        # rows cross its exchange (δ per byte of their columns)
        plans["prefix"] = Estimate(inside + rest.read, delta * inside + rest.shuffled,
                                   alone.written)
    if len(reorder) >= 2:
        grouped = [views[i] for i in reorder]
        rest = separate([v for i, v in enumerate(views) if i not in set(reorder)])
        plans["reordered"] = Estimate(
            scan(grouped) + rest.read,
            alpha * reordered_bytes(grouped, view_bytes) + rest.shuffled,
            alone.written)
    return min(plans, key=lambda p: plans[p].io), {p: e.to_json() for p, e in plans.items()}


def reordered_bytes(views: Sequence[View], view_bytes: Mapping[str, float]) -> float:
    """The bytes of the groups of a reordered pass over ``views`` (which group by the
    same keys): a row per key with every view's parts, where separate plans store a row
    per view and key. How many keys the views share is not known from their
    statistics: between nested (the largest view's keys hold the others', each of whose
    rows adds its parts but not the key) and disjoint (each view's rows as they are),
    taken halfway (``GROUP_OVERLAP``)."""
    node = views[0].node
    assert isinstance(node, GroupBy)
    keys = max(1, len(node.keys))
    ordered = sorted(views, key=lambda v: view_bytes[v.fingerprint])
    disjoint = sum(view_bytes[v.fingerprint] for v in ordered)
    nested = view_bytes[ordered[-1].fingerprint] + sum(
        view_bytes[v.fingerprint] * (1 - keys / view_fields(v)) for v in ordered[:-1])
    return GROUP_OVERLAP * nested + (1 - GROUP_OVERLAP) * disjoint


def scan_plan(setting: bool | str, estimates: Mapping[str, Mapping[str, float]],
              views: int, hashable: bool, reorderable: bool = False) -> str:
    """How the new segment's ``views`` stored partial views are computed: each by its
    own plan (``separate``), in one jumbo pass (``shared``), those that share a group
    key in one pass whose exchange hashes it (``prefix``, the others separate;
    ``hashable``: two of them share one), or those that group by the same keys in one
    grouping with their filters pulled above it (``reordered``; ``reorderable``: two of
    them do). ``setting`` is the stage's ``shared_scan``: ``"auto"`` takes the plan of
    least estimated I/O (``separate`` without estimates); ``"prefix"`` where no two
    views share a key, or ``"reorder"`` where no two group by the same keys, runs
    ``shared``."""
    if views < 2 or not setting:
        return "separate"
    if setting == "auto":
        return min(estimates, key=lambda p: estimates[p]["io"]) if estimates else "separate"
    if setting == "reorder" and reorderable:
        return "reordered"
    return "prefix" if setting == "prefix" and hashable else "shared"


def occurrences_io(due: Mapping[str, SeriesPlan], newest: int,
                   view_bytes: Mapping[str, float], answer_bytes: Mapping[str, float]
                   ) -> Estimate:
    """The I/O the occurrences due at ``newest`` add to an epoch whichever way its views
    are computed: each reads the views of its window (``V`` per view and segment) and
    writes its answer (as big as its earlier answers; nothing for a first answer)."""
    read = written = 0.0
    for name, plan in due.items():
        written += answer_bytes.get(name, 0.0)
        window = plan.schedule.window(newest)
        for v in plan.view_list():
            read += len(window[v.table]) * view_bytes.get(v.fingerprint, 0.0)
    return Estimate(read, 0.0, written)


def epoch_estimates(scan: Mapping[str, Mapping[str, float]], answering: Estimate,
                    kappa: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Each scan plan's estimate of the whole epoch (its views and the occurrences),
    each part scaled by what earlier epochs measured over what was estimated (``κ``)."""
    out = {}
    for plan, e in scan.items():
        parts = {p: kappa.get(p, 1.0) * (e[p] + getattr(answering, p))
                 for p in ("read", "shuffled", "written")}
        out[plan] = Estimate(**parts).to_json()
    return out


def measured(metrics: Mapping[str, Any] | None) -> dict[str, float] | None:
    """An epoch's bytes as Spark measured them (``spark_io`` in its metrics), with the
    files the driver wrote (Spark does not see those)."""
    io = (metrics or {}).get("spark_io")
    if not io:
        return None
    return {**io, "written": io["written"] + (metrics or {}).get("driver_bytes_written", 0)}


def learned(kappa: Mapping[str, float], estimated: Mapping[str, float] | None,
            measured: Mapping[str, float] | None) -> dict[str, float]:
    """``κ`` with an epoch's measured over estimated bytes folded in, per part (read,
    shuffled, written): how far the model's formulas are from this stream's data."""
    if not estimated or not measured:
        return dict(kappa)
    return updated(kappa, {part: measured[part] / estimated[part]
                           for part in ("read", "shuffled", "written")
                           if estimated.get(part, 0) > 0 and part in measured})


def folded(stats: Mapping[str, Any], columns: Mapping[str, float],
           views: Mapping[str, float], answers: Mapping[str, float],
           view_rows: Mapping[str, float] | None = None, segment_rows: int = 0,
           answer_rows: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The stage's statistics with one segment's figures folded in: its columns'
    compressed bytes, its views' bytes, the bytes and rows of the answers it gave, and,
    per operator (each stored view), its rows out of the segment's ``segment_rows`` rows
    in and their ratio, the view's selectivity."""
    out = {**stats, "columns": updated(stats.get("columns", {}), columns),
           "views": updated(stats.get("views", {}), views),
           "answers": updated(stats.get("answers", {}), answers),
           "answer_rows": updated(stats.get("answer_rows", {}), answer_rows or {})}
    if segment_rows:
        rows = dict(view_rows or {})
        out["rows"] = updated(stats.get("rows", {}), rows)
        out["selectivity"] = updated(stats.get("selectivity", {}),
                                     {fp: r / segment_rows for fp, r in rows.items()})
        out["segment_rows"] = updated({"rows": stats.get("segment_rows", segment_rows)},
                                      {"rows": segment_rows})["rows"]
    return out


def updated(old: Mapping[str, float], new: Mapping[str, float]) -> dict[str, float]:
    """Statistics with a new segment's figures folded in (an exponential average)."""
    out = dict(old)
    for k, v in new.items():
        out[k] = v if k not in out else EWMA * v + (1 - EWMA) * out[k]
    return out


def through_spark(rows_so_far: float | None, bound: float | None, limit: int) -> bool:
    """Whether an occurrence's answer (or a segment's stored view) is written through
    Spark at once, instead of first collecting up to ``limit`` rows into the driver,
    which computes a larger result twice (collected, found too large, computed again to
    be written): yes when the series' answers (the view's rows) so far had more than
    ``limit`` rows (``rows_so_far``, None before the first), or, before the first, when
    ``bound`` (None if not known) is more: the rows of the views an answer's window
    merges, or of the segment a view summarizes, bound the groups of an aggregate. A
    smaller result written by Spark costs one job, as the driver's does; ``limit`` 0
    sends everything through Spark."""
    if limit <= 0:
        return True
    if rows_so_far is not None:
        return rows_so_far > limit
    return bound is not None and bound > limit


def view_through_spark(stats: Mapping[str, Any], fingerprint: str,
                       segment_rows: float | None, limit: int) -> bool:
    """:func:`through_spark` for a segment's stored view: its rows in the segments
    before (the stage's statistics), else the segment's ``segment_rows``, bound it."""
    return through_spark(stats.get("rows", {}).get(fingerprint), segment_rows, limit)
