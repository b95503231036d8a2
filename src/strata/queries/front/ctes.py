"""A pass over parsed SQL: common table expressions (``WITH x AS (…)``) inlined as
subqueries in ``FROM``/``JOIN``, so that the rest of the front end, and whoever asks
which flows a query reads, sees only flows.

A CTE may read the CTEs before it; a name it shadows is the CTE's in the query and in
later CTEs. ``WITH RECURSIVE`` has no incremental meaning here and is refused.
"""

from __future__ import annotations

from sqlglot import exp

from strata.queries.plan.errors import QueryError


def inline_ctes(tree: exp.Expr) -> exp.Expr:
    """``tree`` with every ``WITH`` (at any depth) replaced by its CTEs' bodies, each
    reference to a CTE becoming a subquery aliased as the reference was."""
    tree = tree.copy()
    for with_ in reversed(list(tree.find_all(exp.With))):  # innermost first
        if with_.args.get("recursive"):
            raise QueryError("WITH RECURSIVE is not supported: write the loop as an "
                             "iterative query (strata.queries.iterate)")
        owner = with_.parent
        bodies: dict[str, exp.Expr] = {}
        for cte in with_.expressions:
            body = _replace_refs(cte.this.copy(), bodies)
            name = cte.alias_or_name
            if name in bodies:
                raise QueryError(f"WITH names {name!r} twice")
            bodies[name] = body
        with_.pop()
        if owner is not None:
            _replace_refs(owner, bodies)
    return tree


def _replace_refs(node: exp.Expr, bodies: dict[str, exp.Expr]
                  ) -> exp.Expr:
    """Each table reference in ``node`` that names a CTE of ``bodies`` (unqualified by a
    database) becomes that CTE's body as a subquery, under the reference's alias."""
    for table in list(node.find_all(exp.Table)):
        if table.args.get("db") or table.name not in bodies:
            continue
        alias = table.alias or table.name
        sub = exp.Subquery(this=bodies[table.name].copy(),
                           alias=exp.TableAlias(this=exp.to_identifier(alias)))
        if table is node:
            return sub
        table.replace(sub)
    return node
