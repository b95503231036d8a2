"""SQL joins in the algebra: which joins the front end maintains (:func:`join_side`), and
outer joins written as left joins (:func:`outer_join`: a right join is a left join with its
sides swapped, a full join a left join and the right side's unmatched rows)."""

from __future__ import annotations

import copy

from sqlglot import exp

from strata.queries.plan.algebra import Join, Map, Node, Union, passthrough
from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import and_all, col, column_names


def join_side(j: exp.Join) -> str:
    """INNER, LEFT, RIGHT or FULL; a QueryError for the joins strata does not maintain."""
    side = (j.args.get("side") or "").upper()
    kind = (j.args.get("kind") or "").upper()
    if side in ("", "INNER") and kind in ("", "INNER"):
        return "INNER"
    if side in ("LEFT", "RIGHT", "FULL") and kind in ("", "OUTER"):
        return side
    written = " ".join(w for w in (side, kind) if w)
    if kind in ("SEMI", "ANTI"):
        raise QueryError(f"{written} JOIN is not supported; write a semi-join as "
                         "`WHERE col IN (SELECT …)`, an anti-join as a LEFT JOIN … WHERE "
                         "the right key IS NULL")
    raise QueryError(f"{written} JOIN is not supported; inner and LEFT/RIGHT/FULL "
                     "[OUTER] equi-joins are")


def outer_join(node: Node, other: Node, pairs: list[tuple[str, str]],
                extra: list[tuple[exp.Expr, exp.Expr]], side: str,
                alias: str) -> Node:
    """``node LEFT|RIGHT|FULL JOIN other`` as left joins: a right join is one with its
    sides swapped, then its columns put back in order; a full join is the left join
    UNION ALL the right join's rows that match nothing (each with its own state). An ON
    condition beyond the equalities may read the side whose rows can be padded only: it
    filters that side before the join."""
    if side == "FULL":
        if extra:
            raise QueryError(f"FULL JOIN {alias}: ON may only equate columns here; filter "
                             "either side in a subquery")
        unmatched = Map(outer_join(copy.deepcopy(node), copy.deepcopy(other), pairs, [],
                                    "RIGHT", alias), exp.Is(this=col(pairs[0][0]),
                                                            expression=exp.Null()))
        return Union((outer_join(node, other, pairs, [], "LEFT", alias), unmatched))
    kept, padded = (node, other) if side == "LEFT" else (other, node)
    for q, written in extra:  # (qualified, as written)
        if not column_names(q) <= set(padded.columns):
            raise QueryError(
                f"{side} JOIN {alias}: ON {written.sql(dialect='spark')!r} reads the columns "
                "of the side whose every row is kept; move it to WHERE (to drop those rows) "
                "or to a CASE in SELECT")
    if extra:
        padded = Map(padded, and_all(*(q for q, _ in extra)))
    if side == "LEFT":
        return Join(kept, padded, tuple(pairs), "left")
    swapped = Join(kept, padded, tuple((b, a) for a, b in pairs), "left")
    return Map(swapped, None, passthrough([*node.columns, *other.columns]))
