"""Pruning columns: one pass over a normalized plan that keeps, below each operator, only
the columns something above it uses, so that a join stores and a scan reads no column
that nobody reads (docs/architecture.md, "Joins with a lookup table").

A join keeps its inputs' rows in tables; without this pass they would hold every column
of both flows, and each epoch would read every column of the increment. Each node keeps
its key columns as well, so that pruning never hides a key (a join's lookup side, a
group's identity) from the passes after it. Operators whose use of their input's columns
is not plain (windows, explodes, nearest joins) keep their input whole; pruning goes on
below them."""

from __future__ import annotations

from dataclasses import replace

from strata.queries.plan.algebra import (
    Explode,
    GroupBy,
    Join,
    Map,
    Nearest,
    Node,
    Scan,
    Union,
    Windowed,
    passthrough,
)
from strata.queries.plan.expressions import column_names
from strata.queries.plan.normalize import normalize


def prune(root: Node) -> Node:
    """``root`` with unused columns dropped below its operators (normalized again, so a
    projection lands next to the scan or map it narrows)."""
    return normalize(_prune(root, set(root.columns)))


def _prune(node: Node, needed: set[str]) -> Node:
    needed = needed | set(node.key or ())
    if isinstance(node, Scan):
        return _narrowed(node, needed)
    if isinstance(node, Map):
        return _prune_map(node, needed)
    if isinstance(node, Join):
        left = (needed & set(node.left.columns)) | set(node.left_keys)
        right = (needed & set(node.right.columns)) | set(node.right_keys)
        return Join(_prune(node.left, left), _prune(node.right, right), node.on, node.how)
    if isinstance(node, GroupBy):
        used: set[str] = set()
        for _, e in node.keys:
            used |= column_names(e)
        for a in node.aggs:
            if a.arg is not None:
                used |= column_names(a.arg)
        return replace(node, child=_prune(node.child, used), answer_types={})
    if isinstance(node, Union):  # every input narrowed to the same columns
        needed = (needed & set(node.columns)) or {next(iter(node.columns))}
        return Union(tuple(_narrowed(_prune(c, needed), needed) for c in node.inputs))
    # any other operator reads its input whole; columns can still go below it
    if isinstance(node, Nearest):
        return Nearest(_whole(node.left), _whole(node.right), node.distance)
    assert isinstance(node, (Explode, Windowed)), type(node)
    return replace(node, child=_whole(node.child))


def _whole(node: Node) -> Node:
    return _prune(node, set(node.columns))


def _narrowed(node: Node, needed: set[str]) -> Node:
    """``node`` projected on the ``needed`` columns it has (at least one of them: a row
    count needs rows, not columns)."""
    names = [c for c in node.columns if c in needed] or list(node.columns)[:1]
    if len(names) == len(node.columns):
        return node
    return Map(node, None, passthrough(names))


def _prune_map(node: Map, needed: set[str]) -> Node:
    used = column_names(node.where) if node.where is not None else set()
    if node.outputs is None:
        child = _prune(node.child, needed | used)
        return _narrowed(Map(child, node.where), needed)
    outputs = tuple((n, e) for n, e in node.outputs if n in needed) or node.outputs[:1]
    for _, e in outputs:
        used |= column_names(e)
    return Map(_prune(node.child, used), node.where, outputs)
