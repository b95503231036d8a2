"""The one interpreter of a series' plan: a segment's view rows, and an occurrence.

A series computes two things from its query's plan: the rows of a view over one
segment (a scan under maps and explodes, lifted by ``h`` for a partial aggregate), and
the answer of an occurrence from the views of its window (partials merged per group by
``⊗`` and answered by ``a``; rows views renamed, unioned, joined or grouped). Both walks
are written once here, over a :class:`Backend` that runs each operator: Spark plans
(:class:`strata.series.evaluate.SparkBackend`, any plan) or Arrow over rows the driver
holds (:class:`strata.series.held.ArrowBackend`, the query layer's Arrow operators; it
raises :class:`~strata.queries.arrow.Unsupported` where Arrow would not do exactly what
Spark does, and the caller runs the Spark backend instead). docs/series.md, "Segments the
driver holds".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from strata.queries.plan import (
    Explode,
    GroupBy,
    GroupPlan,
    Join,
    Map,
    Node,
    Query,
    QueryError,
    Scan,
    Union,
    Windowed,
    monoid,
)
from strata.series.normalize import SeriesPlan, View, union_partials

R = TypeVar("R")  # a backend's relation: a DataFrame, or rows the driver holds
A = TypeVar("A", covariant=True)  # a backend's answer: a DataFrame, or an Arrow table


class Backend(Protocol, Generic[R, A]):
    """The operators of a series' plan over relations ``R``, answering ``A``."""

    def scanned(self, node: Scan, segment: R) -> R:
        """The segment's columns ``node.schema``, prefixed, with ``_mult`` = 1."""
    def mapped(self, node: Map, d: R) -> R: ...
    def exploded(self, node: Explode, d: R) -> R: ...
    def windowed(self, node: Windowed, d: R) -> R: ...
    def joined(self, node: Join, left: R, right: R) -> R: ...
    def union(self, parts: Sequence[R]) -> R: ...
    def lifted(self, gp: GroupPlan, d: R) -> R:
        """``h`` of rows ``d`` per group (each row counted once)."""
    def answered(self, gp: GroupPlan, stacked: R, merge: bool) -> R:
        """``a`` of partial rows ``stacked``, merged per group by ``⊗`` first if
        ``merge`` (several segments' partials)."""
    def renamed(self, stored: R, names: dict[str, str]) -> R:
        """Stored view rows' columns ``names`` (old → new)."""
    def finished(self, query: Query, out: R) -> A:
        """The root's columns, ordered and limited as ``query`` says."""


def group_plan(node: GroupBy, monoids=None) -> GroupPlan:
    """The monoids of ``node`` over an input that never deletes rows (segments only grow)."""
    if monoids is None:
        monoids = [monoid(a, f"_p{i}", node.child.columns, False)
                   for i, a in enumerate(node.aggs)]
    return GroupPlan(node, "", list(monoids))


def unprefixed(name: str, prefix: str) -> str:
    """``name`` without a view's column ``prefix`` (as the view's table stores it)."""
    return name[len(prefix):] if prefix and name.startswith(prefix) else name


def segment_rows(node: Node, segment: R, ops: Backend[R, A]) -> R:
    """``node`` (a scan under maps and explodes) over one segment's rows."""
    if isinstance(node, Scan):
        return ops.scanned(node, segment)
    if isinstance(node, Explode):
        return ops.exploded(node, segment_rows(node.child, segment, ops))
    assert isinstance(node, Map), node
    return ops.mapped(node, segment_rows(node.child, segment, ops))


def segment_view(view: View, segment: R, ops: Backend[R, A]) -> R:
    """The view's rows of one segment: ``h`` of a partial aggregate's input, or the
    rows under the view's prefix as its table stores them (the prefix stripped)."""
    if view.kind == "partial":
        assert isinstance(view.node, GroupBy)
        return ops.lifted(group_plan(view.node, view.monoids),
                          segment_rows(view.node.child, segment, ops))
    d = segment_rows(view.node, segment, ops)
    return ops.renamed(d, {c: unprefixed(c, view.prefix) for c in view.node.columns})


def occurrence_of(plan: SeriesPlan, newest: int, read: Callable[[View, range], R],
                  ops: Backend[R, A]) -> A:
    """The answer of the occurrence whose newest segment is ``newest``, from the stored
    views ``read`` gives (a view and a run of segments)."""
    windows = plan.schedule.window(newest)

    def evaluate(node: Node) -> R:
        view = plan.views.get(id(node))
        if view is not None:
            stored = read(view, windows[view.table])
            if view.kind == "partial":
                assert isinstance(node, GroupBy)
                return ops.answered(group_plan(node, view.monoids), stored, True)
            return ops.renamed(stored, {unprefixed(c, view.prefix): c for c in node.columns})
        branches = union_partials(node, plan)
        if branches is not None:
            assert isinstance(node, GroupBy)
            stacked = ops.union([read(v, windows[v.table]) for v in branches])
            return ops.answered(group_plan(node, branches[0].monoids), stacked, True)
        if isinstance(node, Map):
            return ops.mapped(node, evaluate(node.child))
        if isinstance(node, Explode):
            return ops.exploded(node, evaluate(node.child))
        if isinstance(node, Windowed):  # over the occurrence's rows: not by segment
            return ops.windowed(node, evaluate(node.child))
        if isinstance(node, Join):
            return ops.joined(node, evaluate(node.left), evaluate(node.right))
        if isinstance(node, Union):
            return ops.union([evaluate(c) for c in node.inputs])
        if isinstance(node, GroupBy):  # over a join: group the window's rows as they are
            gp = group_plan(node)
            return ops.answered(gp, ops.lifted(gp, evaluate(node.child)), False)
        raise QueryError(f"cannot run {node} in a query series")

    return ops.finished(plan.query, evaluate(plan.query.root))
