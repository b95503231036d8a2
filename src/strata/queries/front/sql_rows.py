"""The SQL front end's clauses that add rows or columns row by row: ``LATERAL VIEW
[OUTER] [pos]explode``, ``explode`` in ``SELECT`` and window functions
(``f(…) OVER (…)``). Each turns the rows so far (``node``) into the operator that
computes them and registers its new columns in the ``FROM`` clause's scope
(:mod:`strata.queries.front.sql`)."""

from __future__ import annotations

from sqlglot import exp

from strata.queries.front.scope import Scope
from strata.queries.plan.algebra import Explode, Node, Windowed
from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import col

COMPUTED = " computed"  # the scope's name for an explode or a window in SELECT (no user
# can type it)


def lateral_view(node: Node, scope: Scope, lateral: exp.Lateral) -> Node:
    """``LATERAL VIEW [OUTER] explode(array) [alias] [AS name]`` over ``node``."""
    alias = lateral.args.get("alias")
    names = [c.name for c in alias.columns] if alias is not None else []
    table = alias.name if alias is not None and alias.name else f"_lateral{len(scope.aliases)}"
    gen = lateral.this
    positional = isinstance(gen, exp.Posexplode)
    if not lateral.args.get("view") or not isinstance(gen, exp.Explode) or \
            len(names) not in ((0, 2) if positional else (0, 1)):
        raise QueryError(f"{lateral.sql(dialect='spark')!r}: a lateral view is supported "
                         "as LATERAL VIEW [OUTER] explode(array) alias AS name, or "
                         "posexplode(array) alias AS position, name")
    if table in scope.aliases:
        raise QueryError(f"alias {table!r} is used twice; give each table its own")
    names = names or (["pos", "col"] if positional else ["col"])
    internal = {n: n if n not in node.columns else f"{table}__{n}" for n in names}
    outer = bool(lateral.args.get("outer")) or isinstance(gen, (exp.ExplodeOuter,
                                                                exp.PosexplodeOuter))
    out = Explode(node, internal[names[-1]], scope.qualify(gen.this), outer,
                  internal[names[0]] if positional else None)
    scope.aliases[table] = internal
    return out

def select_generator(node: Node, scope: Scope,
                      items: list[tuple[str, exp.Expr]], i: int
                      ) -> tuple[Node, list[tuple[str, exp.Expr]]]:
    """``SELECT …, explode(array) AS name, …``: the rows exploded, the item a column."""
    name, gen = items[i]
    if isinstance(gen, exp.Posexplode):
        raise QueryError(f"{gen.sql(dialect='spark')!r}: posexplode in SELECT is not "
                         "supported; use LATERAL VIEW posexplode(array) t AS pos, name")
    if not isinstance(items[i][1].parent, exp.Alias):
        name = "col"  # Spark's name for an unnamed explode
    internal = f"_exploded{len(node.columns)}"
    node = Explode(node, internal, scope.qualify(gen.this), isinstance(gen, exp.ExplodeOuter))
    scope.aliases.setdefault(COMPUTED, {})[internal] = internal
    items = list(items)
    items[i] = (name, exp.column(internal, table=COMPUTED))
    return node, items

def windowed(node: Node, scope: Scope, items: list[tuple[str, exp.Expr]],
              at: list[int]) -> tuple[Node, list[tuple[str, exp.Expr]]]:
    """``SELECT …, f(…) OVER (PARTITION BY … ORDER BY …) AS name, …``: the rows with
    the window columns, each such item a column."""
    outputs: list[tuple[str, exp.Window]] = []
    partition: tuple[str, ...] | None = None
    items = list(items)
    for i in at:
        name, e = items[i]
        if not isinstance(e, exp.Window):
            raise QueryError(f"{e.sql(dialect='spark')!r}: a window function is "
                             "supported as a whole item, f(…) OVER (…) AS name; compute "
                             "with its value in an outer query")
        w = scope.qualify(e)
        assert isinstance(w, exp.Window)  # qualifying renames columns, never the root
        parts = w.args.get("partition_by") or []
        if not all(isinstance(p, exp.Column) for p in parts):
            raise QueryError(f"{e.sql(dialect='spark')!r}: PARTITION BY columns; compute "
                             "an expression as a column in a subquery first")
        names = tuple(p.name for p in parts)
        if partition is not None and set(names) != set(partition):
            raise QueryError("the window functions of a query must share one PARTITION "
                             f"BY (here {list(partition)} and {list(names)}); use a "
                             "subquery for the other")
        partition = names
        internal = f"_window{len(outputs)}"
        outputs.append((internal, deterministic(w, node.columns)))
        scope.aliases.setdefault(COMPUTED, {})[internal] = internal
        items[i] = (name, exp.column(internal, table=COMPUTED))
    return Windowed(node, partition or (), tuple(outputs)), items


_IN_ORDER = (exp.RowNumber, exp.Ntile, exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue,
             exp.NthValue)


def deterministic(window: exp.Window, columns: dict[str, str]) -> exp.Window:
    """``window`` with ties ordered by every orderable column of ``columns`` when its
    function depends on the order within ties."""
    spec = window.args.get("spec")
    rows_frame = spec is not None and str(spec.args.get("kind", "")).upper() == "ROWS"
    if not (isinstance(window.this, _IN_ORDER) or rows_frame):
        return window
    out = window.copy()
    order = out.args.get("order") or exp.Order(expressions=[])
    ties = [exp.Ordered(this=col(c), desc=False, nulls_first=True)
            for c, t in columns.items() if "map<" not in t]
    order.set("expressions", [*order.expressions, *ties])
    out.set("order", order)
    return out
