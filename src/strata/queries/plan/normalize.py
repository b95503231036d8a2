"""Normalizing a query plan: one pass over the algebra (:mod:`strata.queries.plan.algebra`)
that fuses adjacent maps, pushes filters below joins and explodes, and drops maps that do
nothing, before the incremental program is derived from the plan."""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

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
)
from strata.queries.plan.expressions import Expr, and_all, column_names, conjuncts, substitute


def normalize(node: Node) -> Node:
    """Fuse adjacent maps, push filters below joins, drop maps that do nothing."""
    if isinstance(node, Scan):
        return node
    if isinstance(node, Join):
        return Join(normalize(node.left), normalize(node.right), node.on, node.how)
    if isinstance(node, Nearest):
        return Nearest(normalize(node.left), normalize(node.right), node.distance)
    if isinstance(node, GroupBy):
        return replace(node, child=normalize(node.child), answer_types={})
    if isinstance(node, Union):
        return Union(tuple(normalize(c) for c in node.inputs))
    if isinstance(node, (Explode, Windowed)):  # filters above a window stay above it
        return replace(node, child=normalize(node.child))
    assert isinstance(node, Map)
    return _normalize_map(node)


def _normalize_map(node: Map) -> Node:
    """A map normalized: fused with a map below it, its filters pushed below a join or an
    explode, dropped if it does nothing."""
    child = normalize(node.child)
    where, outputs = node.where, node.outputs
    if isinstance(child, Map):  # map ∘ map = one map
        defs = dict(child.outputs) if child.outputs is not None else {}
        if where is not None:
            where = substitute(where, defs)
        if outputs is not None:
            outputs = tuple((n, substitute(e, defs)) for n, e in outputs)
        elif child.outputs is not None:
            outputs = child.outputs
        where = and_all(child.where, where)
        child = child.child
    if isinstance(child, Join) and where is not None:
        child, where = _filter_below_join(child, where)
    if isinstance(child, Explode) and where is not None:  # filter rows before repeating them
        child, where = _filter_below_explode(child, where)
    if where is None and (outputs is None or all(
            isinstance(e, exp.Column) and e.name == n for n, e in outputs)
            and [n for n, _ in outputs] == list(child.columns)):
        return child
    return Map(child, where, outputs)


def _filter_below_join(child: Join, where: Expr) -> tuple[Node, Expr | None]:
    """The join with the conjuncts of ``where`` over one side's columns filtering that
    side, and the conjuncts left above it."""
    keep: list[Expr] = []
    left: list[Expr] = []
    right: list[Expr] = []
    for c in conjuncts(where):
        used = column_names(c)
        # above a left join, a right column may be a padding NULL: its filters stay
        (left if used <= set(child.left.columns) else
         right if used <= set(child.right.columns) and child.how == "inner"
         else keep).append(c)
    if not (left or right):
        return child, where
    return (Join(normalize(Map(child.left, and_all(*left))) if left else child.left,
                 normalize(Map(child.right, and_all(*right))) if right else child.right,
                 child.on, child.how),
            and_all(*keep))


def _filter_below_explode(child: Explode, where: Expr) -> tuple[Node, Expr | None]:
    """The explode with the conjuncts of ``where`` not over its element or position
    filtering its input, and the conjuncts left above it."""
    below: list[Expr] = []
    above: list[Expr] = []
    for c in conjuncts(where):
        (above if {child.name, child.position} & column_names(c) else below).append(c)
    if not below:
        return child, where
    return replace(child, child=normalize(Map(child.child, and_all(*below)))), and_all(*above)
