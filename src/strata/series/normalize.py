"""Normalization: an S-query (one occurrence of a series) as per-segment SS-queries.

The query's algebra tree (``strata.queries.plan.algebra``) is cut into *views* computed once
per segment, and the *rest*, evaluated per occurrence over the views of its window:

* A scan and the maps above it distribute over the union of segments: their per-segment
  result is a ``rows`` view (the segment's rows, filtered and projected).
* A group-by over such rows splits into a ``partial`` view per segment (``h``: the
  group's monoid parts over that segment) and a merge of the window's partials (``⊗``)
  followed by the answer (``a``), as the incremental-query layer derives them.
* Anything else (a join, a group-by over a join, maps above them) is the rest. A
  group-by over a join of several segments does not decompose (a row of one segment
  joins rows of another), so its input rows are the views and the occurrence does the
  join and the grouping over its whole window: the paper's worst case, which
  :func:`explain` names.

A view is identified by its *fingerprint*: the stream and the canonical text of its
subplan (the table's name and column prefix abstracted away). Series, or tables of one
series, whose subplans agree share one view per segment: yesterday's partial of a daily
join is today's, and a weekly histogram reads six views that daily runs made.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from strata.queries.plan import (
    Explode,
    GroupBy,
    Join,
    Map,
    Monoid,
    Nearest,
    Node,
    Query,
    QueryError,
    Scan,
    Union,
    monoid,
    normalize,
    to_sql,
)
from strata.series.windows import Schedule


@dataclass(frozen=True)
class View:
    """A per-segment SS-query: ``node`` (a subtree over one table's scan) on one segment.

    ``kind`` is ``rows`` (the subtree's rows) or ``partial`` (``node`` is a group-by: its
    monoid parts per group over the segment)."""

    kind: str
    table: str
    node: Node
    fingerprint: str
    prefix: str  # the scan's column prefix in the query (stripped in the stored view)
    monoids: tuple[Monoid, ...] = ()
    branch: bool = False  # a partial of one branch of a union, merged with the others

    @property
    def group(self) -> GroupBy:
        """The group-by a partial view computes (its ``node``)."""
        if not isinstance(self.node, GroupBy):
            raise TypeError(f"view {self.fingerprint} of {self.node} is not a partial view")
        return self.node

    @property
    def scan(self) -> Scan:
        n = self.node
        while not isinstance(n, Scan):
            n = n.children[0]
        return n


@dataclass
class SeriesPlan:
    """A series' query cut into views and the rest, with the reasons for each cut."""

    query: Query
    schedule: Schedule
    views: dict[int, View] = field(default_factory=dict)  # id(node) -> the view it is
    notes: list[str] = field(default_factory=list)
    raw: bool = False  # occurrences aggregate their window's rows (no partial views)

    @property
    def decomposed(self) -> bool:
        """Whether every view is a partial aggregate or feeds maps only (no view's rows
        are joined or grouped at the occurrence)."""
        return not self.raw and not any("does not decompose" in n for n in self.notes)

    def view_list(self) -> list[View]:
        return sorted(self.views.values(), key=lambda v: (v.table, v.fingerprint))


def plan_series(query: Query, schedule: Schedule, stream_columns: Mapping[str, str],
                raw: bool = False) -> SeriesPlan:
    """Cut ``query`` (over the tables of ``schedule``) into views and the rest. With
    ``raw``, no partial aggregates are kept: each occurrence aggregates its window's rows
    (the plan that reads the raw window again, for when views cost more than they save)."""
    plan = SeriesPlan(query, schedule, raw=raw)
    root = normalize(query.root)
    plan.query = Query(root, query.order_by, query.limit)
    unknown = {s.flow for s in _scans(root)} - set(schedule.tables)
    if unknown:
        raise QueryError(f"the query reads {sorted(unknown)}, which the series does not bind "
                         f"to segments (its tables: {sorted(schedule.tables)})")
    _cut(root, plan)
    return plan


def _scans(node: Node) -> list[Scan]:
    if isinstance(node, Scan):
        return [node]
    return [s for c in node.children for s in _scans(c)]


def _rows_subtree(node: Node) -> bool:
    """A scan under maps and explodes only: it distributes over a union of segments."""
    return isinstance(node, Scan) or isinstance(node, (Map, Explode)) and \
        _rows_subtree(node.children[0])


def _rows_union(node: Node) -> bool:
    """A union of scans under maps: a group-by over it splits into one per branch."""
    return isinstance(node, Union) and all(_rows_subtree(c) for c in node.inputs)


def union_partials(node: Node, plan: SeriesPlan) -> list[View] | None:
    """The partial views of the branches of a group-by over a union, if it was cut so."""
    if not isinstance(node, GroupBy) or not isinstance(node.child, Union):
        return None
    views = [plan.views.get(id(b)) for b in node.child.inputs]
    return [v for v in views if v is not None] if all(
        v is not None and v.kind == "partial" for v in views) else None


def _cut(node: Node, plan: SeriesPlan) -> None:
    """Cut the highest subtrees that decompose (top-down: the first found is maximal)."""
    if isinstance(node, Nearest):
        raise QueryError("a nearest join cannot run in a query series")
    if isinstance(node, GroupBy) and _rows_subtree(node.child) and not plan.raw:
        plan.views[id(node)] = _view("partial", node, plan)
        return
    if isinstance(node, GroupBy) and _rows_union(node.child) and not plan.raw:
        for branch in node.child.children:  # γ(b1 ∪ b2) = γ(b1) ⊗ γ(b2): one partial each
            plan.views[id(branch)] = replace(_view("partial", replace(
                node, child=branch, answer_types={}), plan), branch=True)
        plan.notes.append(f"{node}: each occurrence merges (⊗) the partials of every "
                          "branch of the union over its window, then answers (a)")
        return
    if _rows_subtree(node):
        plan.views[id(node)] = _view("rows", node, plan)
        return
    if isinstance(node, GroupBy) and plan.raw and (_rows_subtree(node.child) or
                                                  _rows_union(node.child)):
        plan.notes.append(f"{node}: each occurrence aggregates the rows of its window "
                          "(read again from the kept segments)")
    elif isinstance(node, GroupBy):
        spans = {t: len(plan.schedule.tables[t].indices(0)) for t in
                 {s.flow for s in _scans(node)}}
        what = ("a join, whose rows pair segments of" if _has_join(node.child) else
                "the union of its inputs, which read")
        plan.notes.append(
            f"{node} does not decompose by segment: it groups {what} "
            f"{', '.join(f'{t} ({n})' for t, n in sorted(spans.items()))}; its input rows "
            "are kept per segment and each occurrence combines and groups them")
    elif isinstance(node, Join):
        plan.notes.append(f"{node}: each occurrence joins the views of its window")
    elif isinstance(node, Union):
        plan.notes.append(f"{node}: each occurrence concatenates the views of its window")
    for child in node.children:
        _cut(child, plan)


def _has_join(node: Node) -> bool:
    return isinstance(node, Join) or any(_has_join(c) for c in node.children)


def _view(kind: str, node: Node, plan: SeriesPlan) -> View:
    scan = next(iter(_scans(node)))
    segments = plan.schedule.tables[scan.flow]
    text = _canonical(node, scan.prefix)
    digest = hashlib.sha256(f"{segments.stream}|{kind}|{text}".encode()).hexdigest()[:16]
    monoids: tuple[Monoid, ...] = ()
    if isinstance(node, GroupBy):
        monoids = tuple(monoid(a, f"_p{i}", node.child.columns, False)
                        for i, a in enumerate(node.aggs))
    return View(kind, scan.flow, node, f"{segments.stream}-{digest}", scan.prefix, monoids)


def _canonical(node: Node, prefix: str) -> str:
    """The subtree's text without the table's name or column prefix."""
    if isinstance(node, Scan):
        text = "scan(" + ", ".join(f"{c} {t}" for c, t in sorted(node.schema.items())) + ")"
    elif isinstance(node, GroupBy):
        keys = ", ".join(f"{n}={to_sql(e)}" for n, e in node.keys)
        text = f"group({keys}; {', '.join(a.describe() for a in node.aggs)})"
        text += f"[{_canonical(node.child, prefix)}]"
    else:
        text = f"{node}[{_canonical(node.children[0], prefix)}]"
    return text.replace(prefix, "§") if prefix else text


def explain(plan: SeriesPlan) -> list[str]:
    """How the series runs: its views per segment and what each occurrence does."""
    lines = [f"every {plan.schedule.period} segment(s) of {plan.schedule.stream!r}, "
             f"from segment {plan.schedule.first} on"]
    for v in plan.view_list():
        seg = plan.schedule.tables[v.table]
        what = ("partial aggregate (h) per group" if v.kind == "partial"
                else "rows (filtered and projected)")
        lines.append(f"view {v.fingerprint} on {v.table} = {seg.spec()}: {what} of "
                     f"{v.node} per segment")
    for v in plan.view_list():
        if v.kind == "partial":
            n = plan.schedule.tables[v.table].last
            lines.append(f"occurrence: merge (⊗) the {n} partial(s) of {v.table}" + (
                "" if v.branch else ", then answer (a)"))
    lines += [f"occurrence: {n}" for n in plan.notes]
    lines.append("reads its raw window at each occurrence" if plan.raw
                 else "decomposes into per-segment views" if plan.decomposed
                 else "does not fully decompose (see above)")
    return lines
