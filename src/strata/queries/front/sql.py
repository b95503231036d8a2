"""The SQL front end: a ``SELECT`` over strata flows becomes a query of the algebra.

Supported: ``SELECT [DISTINCT] … FROM flow [alias] [[LEFT|RIGHT|FULL] JOIN flow ON a.x =
b.y [AND …]]…`` (also ``FROM (SELECT …) alias``, and ``JOIN centers c ON NEAREST(distance)``,
which joins each row with the center that minimizes ``distance``), ``WHERE`` (including
``col IN (SELECT …)``, unnested to a join with the subquery's distinct values),
``GROUP BY``, ``HAVING``, ``ORDER BY``, ``LIMIT``, ``WITH`` (its CTEs inlined as
subqueries, :mod:`strata.queries.front.ctes`) and the set operations ``UNION [ALL]``,
``INTERSECT`` and ``EXCEPT`` (columns matched by position, named by the first branch,
as Spark does; the distinct ones are group-bys over a bag union); aggregates ``count``,
``count(distinct …)``, ``sum``, ``avg``, ``min``, ``max``, ``stddev``/``variance``
(sample and population) and user aggregates. Anything else is refused with a message
that names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import sqlglot
from sqlglot import exp

from strata.queries.front import sql_rows
from strata.queries.front.ctes import inline_ctes
from strata.queries.front.joins import join_side, outer_join
from strata.queries.front.scope import Scope
from strata.queries.plan.algebra import (
    Explode,
    GroupBy,
    Join,
    Map,
    Nearest,
    Node,
    Query,
    Scan,
    Union,
    passthrough,
)
from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import (
    MULT,
    and_all,
    col,
    conjuncts,
    is_aggregate,
    widest,
)
from strata.queries.plan.monoids import AggCall, UserAggregate

_AGG_NAMES: dict[type[exp.Expr], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
    exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop", exp.Variance: "var_samp", exp.VariancePop: "var_pop"}


def parse_sql(sql: str, flows: Mapping[str, Mapping[str, str]],
              keys: Mapping[str, Sequence[str]] | None = None,
              aggregates: Mapping[str, UserAggregate] | None = None) -> Query:
    """The query ``sql`` over ``flows`` (flow name → column → Spark type; a ``_mult``
    column marks a flow with deletes). ``keys`` declares flows' unique keys (for joins);
    ``aggregates`` names user aggregates the SQL may call."""
    tree = parse_select(sql)
    return _Converter(flows, keys or {}, aggregates or {}).query(tree)


def parse_select(sql: str) -> exp.Select | exp.SetOperation:
    """``sql`` parsed (Spark's dialect), its ``WITH`` clauses inlined; a QueryError if
    it does not parse or is not a ``SELECT`` (or a set operation of them)."""
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError as e:
        raise QueryError(f"cannot parse the query: {e.errors[0]['description']}") from None
    if isinstance(tree, exp.Alias | exp.Column | exp.Identifier):  # e.g. "SELEC x"
        raise QueryError(f"cannot parse the query: {sql.strip()[:60]!r} is not a SELECT")
    if not isinstance(tree, exp.Select | exp.SetOperation):
        raise QueryError(f"only SELECT queries are supported, not {tree.key.upper()}")
    tree = inline_ctes(tree)
    assert isinstance(tree, exp.Select | exp.SetOperation)
    return tree


def tables_read(sql: str) -> list[str]:
    """The flows (tables) ``sql`` reads, sorted, once its CTEs are inlined."""
    return sorted({t.name for t in parse_select(sql).find_all(exp.Table)})


class _Converter:
    def __init__(self, flows, keys, aggregates) -> None:
        self.flows, self.keys, self.aggregates = flows, keys, aggregates
        self.counter = 0

    # -- FROM --------------------------------------------------------------------------
    def _source(self, item: exp.Expr, prefixed: bool) -> tuple[Node, str, dict]:
        alias = item.alias_or_name
        prefix = f"{alias}__" if prefixed else ""
        node: Node
        if isinstance(item, exp.Table):
            flow = item.name
            if flow not in self.flows:
                raise QueryError(f"unknown flow {flow!r}; flows: {sorted(self.flows)}")
            schema = dict(self.flows[flow])
            has_mult = schema.pop(MULT, None) is not None
            key = tuple(self.keys[flow]) if flow in self.keys else None
            if key and not set(key) <= set(schema):
                raise QueryError(f"declared key {list(key)} of {flow!r} is not among its "
                                 f"columns {sorted(schema)}")
            node = Scan(flow, schema, prefix, key, has_mult)
            return node, alias, {c: prefix + c for c in schema}
        if isinstance(item, exp.Subquery) and isinstance(item.this, exp.Select |
                                                         exp.SetOperation):
            inner = self.query(item.this)
            if inner.order_by or inner.limit is not None:
                raise QueryError(f"ORDER BY/LIMIT inside subquery {alias!r} cannot be "
                                 "maintained incrementally; move them to the outer query")
            node = inner.root
            if prefix:
                node = Map(node, None, tuple((prefix + c, col(c)) for c in node.columns))
            return node, alias, {c: prefix + c for c in inner.root.columns}
        raise QueryError(f"unsupported FROM item {item.sql()!r}: use a flow or (SELECT …)")

    def _from(self, select: exp.Select) -> tuple[Node, Scope, list[exp.Expr]]:
        joins = select.args.get("joins") or []
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            raise QueryError("a query needs FROM")
        scope = Scope()
        node, alias, cols = self._source(from_.this, bool(joins))
        scope.aliases[alias] = cols
        leftover: list[exp.Expr] = []
        for j in joins:
            side = join_side(j)
            right, ralias, rcols = self._source(j.this, True)
            if ralias in scope.aliases:
                raise QueryError(f"alias {ralias!r} is used twice; give each table its own")
            left_cols = set(node.columns)
            scope.aliases[ralias] = rcols
            on_expr = j.args.get("on")
            if on_expr is None:
                raise QueryError(f"JOIN {ralias} needs ON (cross joins are not supported)")
            if isinstance(on_expr, exp.Anonymous) and on_expr.name.lower() == "nearest":
                if len(on_expr.expressions) != 1:
                    raise QueryError(f"JOIN {ralias} ON NEAREST(distance) takes one "
                                     "expression")
                node = Nearest(node, right, scope.qualify(on_expr.expressions[0]))
                continue
            pairs, extra = [], []
            for c in conjuncts(on_expr):
                q = scope.qualify(c)
                if isinstance(q, exp.EQ) and all(isinstance(s, exp.Column) for s in
                                                 (q.left, q.right)):
                    a, b = q.left.name, q.right.name
                    if a in left_cols and b in rcols.values():
                        pairs.append((a, b))
                        continue
                    if b in left_cols and a in rcols.values():
                        pairs.append((b, a))
                        continue
                extra.append((q, c))
            if not pairs:
                raise QueryError(f"JOIN {ralias}: ON needs an equality between a column of "
                                 f"{ralias} and one of the tables before it")
            if side == "INNER":
                leftover += [q for q, _ in extra]
                node = Join(node, right, tuple(pairs))
                continue
            if leftover:  # earlier joins' conditions, before rows may be padded
                node, leftover = Map(node, and_all(*leftover)), []
            node = outer_join(node, right, pairs, extra, side, ralias)
        return node, scope, leftover

    # -- SELECT ------------------------------------------------------------------------
    def query(self, select: exp.Select | exp.SetOperation) -> Query:
        if isinstance(select, exp.SetOperation):
            return self._set_operation(select)
        for unsupported in ("windows", "qualify", "pivots"):
            if select.args.get(unsupported):
                raise QueryError(f"{unsupported.upper()} is not supported in queries")
        node, scope, conds = self._from(select)
        for lateral in select.args.get("laterals") or []:
            node = sql_rows.lateral_view(node, scope, lateral)
        node = self._where(select, node, scope, conds)
        items = self._select_items(select, scope, node)
        group = select.args.get("group")
        having = select.args.get("having")
        has_agg = any(is_aggregate(n) and not n.find_ancestor(exp.Window)
                      for _, e in items for n in e.walk() if not isinstance(n, exp.Window))
        windows = [i for i, (_, e) in enumerate(items) if e.find(exp.Window)]
        if windows:
            if group is not None or has_agg or having is not None or \
                    select.args.get("distinct"):
                raise QueryError("window functions with GROUP BY, DISTINCT or aggregates: "
                                 "group in a subquery and apply the window outside it")
            node, items = sql_rows.windowed(node, scope, items, windows)
        generators = [i for i, (_, e) in enumerate(items) if isinstance(e, exp.Explode)]
        if generators:
            if len(generators) > 1 or group is not None or has_agg or having is not None \
                    or select.args.get("distinct"):
                raise QueryError("explode in SELECT: one per query, without GROUP BY, "
                                 "DISTINCT or aggregates; explode in a subquery (or with "
                                 "LATERAL VIEW) and group outside it")
            node, items = sql_rows.select_generator(node, scope, items, generators[0])
        if group is not None or has_agg or having is not None or select.args.get("distinct"):
            node = self._group_by(node, scope, items, group, having,
                                  bool(select.args.get("distinct")))
        else:
            node = Map(node, None, tuple((n, scope.qualify(e)) for n, e in items))
        return Query(node, self._order(select, node), self._limit(select))

    def _where(self, select: exp.Select, node: Node, scope: Scope, conds: list[exp.Expr]
               ) -> Node:
        """``node`` filtered by the query's WHERE and the join conditions left over
        (``conds``); a conjunct ``col IN (SELECT …)`` is a semi-join."""
        where = select.args.get("where")
        if where is not None:
            for c in conjuncts(where.this):
                if isinstance(c, exp.In) and c.args.get("query") is not None:
                    node = self._semi_join(node, scope, c)
                elif any(isinstance(s, exp.Exists) or isinstance(s, exp.In) and s.args.get(
                        "query") is not None for s in c.walk()):
                    raise QueryError(
                        f"{c.sql(dialect='spark')!r}: a subquery in WHERE is supported only "
                        "as a conjunct `col IN (SELECT …)` (a semi-join); NOT IN, EXISTS and "
                        "an IN under OR are not supported (write EXISTS as IN)")
                else:
                    conds.append(scope.qualify(c))
        for e in conds:
            if any(is_aggregate(n) for n in e.walk()):
                raise QueryError(f"aggregate in WHERE {e.sql()!r}: use HAVING")
        return Map(node, and_all(*conds)) if conds else node

    def _select_items(self, select, scope, node) -> list[tuple[str, exp.Expr]]:
        items: list[tuple[str, exp.Expr]] = []
        for e in select.expressions:
            if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(
                    e.this, exp.Star)):
                table = e.table if isinstance(e, exp.Column) else ""
                for alias, cols in scope.aliases.items():
                    if table in ("", alias):
                        items += [(c, exp.column(c, table=alias)) for c in cols]
                continue
            name = e.alias if isinstance(e, exp.Alias) else _default_name(e)
            items.append((name, e.this if isinstance(e, exp.Alias) else e))
        names = [n for n, _ in items]
        if len({n.lower() for n in names}) != len(names):  # Spark ignores case in names
            raise QueryError(f"the query's output columns repeat a name (ignoring case, as "
                             f"Spark does): {names}; rename one with AS")
        return list(zip(names, [e for _, e in items], strict=True))

    def _group_by(self, node, scope, items, group, having, distinct) -> GroupBy:
        keys: list[tuple[str, exp.Expr]] = []
        key_sql: dict[str, str] = {}
        group_exprs = list(group.expressions) if group is not None else []
        if distinct:
            group_exprs += [e for _, e in items]
        for g in group_exprs:
            if isinstance(g, exp.Literal) and g.is_int:  # GROUP BY 1
                g = items[int(g.this) - 1][1]
            q = scope.qualify(_output_aliases(g, scope, items))
            if q.sql() in key_sql:
                continue
            name = g.name if isinstance(g, exp.Column) else f"_k{len(keys)}"
            if name in {n for n, _ in keys}:
                name = f"_k{len(keys)}"
            keys.append((name, q))
            key_sql[q.sql()] = name
        aggs: list[AggCall] = []
        agg_sql: dict[str, str] = {}

        def lower(e: exp.Expr) -> exp.Expr:
            q = scope.qualify(e)

            def sub(n: exp.Expr) -> exp.Expr:
                if n.sql() in key_sql:
                    return col(key_sql[n.sql()])
                if is_aggregate(n) or self._user_call(n) is not None:
                    s = n.sql()
                    if s not in agg_sql:
                        agg_sql[s] = f"_a{len(aggs)}"
                        aggs.append(self._agg(n))
                    return col(agg_sql[s])
                return n

            out = q.transform(sub)
            for c in out.find_all(exp.Column):
                if c.name not in key_sql.values() and c.name not in agg_sql.values():
                    raise QueryError(f"column {c.name!r} in {e.sql()!r} must appear in GROUP "
                                     "BY or inside an aggregate")
            return out

        outputs = tuple((n, lower(e)) for n, e in items)
        hav = lower(_output_aliases(having.this, scope, items)) if having is not None \
            else None
        return GroupBy(node, tuple(keys), tuple(aggs), outputs, hav)

    # -- UNION, INTERSECT, EXCEPT -----------------------------------------------------
    def _set_operation(self, op: exp.SetOperation) -> Query:
        """``UNION ALL`` is a :class:`Union` of the branches, each cast to the widest type
        of its column; ``UNION`` groups that by every column; ``INTERSECT`` and
        ``EXCEPT`` tag each side's rows and keep the groups present on both sides, or on
        the left only (NULLs equal, as set operations compare them)."""
        word = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}.get(
            type(op), op.key.upper())
        distinct = bool(op.args.get("distinct"))
        if op.args.get("by_name"):
            raise QueryError(f"{word} BY NAME is not supported; list the columns in the "
                             "same order in each branch")
        branches = [self._branch(b, word) for b in (op.this, op.expression)]
        widths = [len(b.columns) for b in branches]
        if len(set(widths)) != 1:
            raise QueryError(f"the branches of {word} select {widths[0]} and {widths[1]} "
                             "columns; select the same number in each")
        names = list(branches[0].columns)
        types = []
        for i, name in enumerate(names):
            pair = [list(b.columns.values())[i] for b in branches]
            try:
                types.append(widest(pair))
            except QueryError:
                raise QueryError(f"column {i + 1} ({name!r}) of {word} is {pair[0]} in one "
                                 f"branch and {pair[1]} in the other; cast one") from None
        tags = [] if word == "UNION" else ["_setop_left", "_setop_right"]
        inputs = []
        for side, b in enumerate(branches):
            outputs = [(n, _cast(col(c), t, b.columns[c]))
                       for n, c, t in zip(names, list(b.columns), types, strict=True)]
            outputs += [(tag, exp.Literal.number(1) if i == side else _cast(
                exp.Null(), "int", "void")) for i, tag in enumerate(tags)]
            inputs.append(Map(b, None, tuple(outputs)))
        node: Node = Union(tuple(inputs))
        if tags:  # the tags counted per row: on which sides it is, how often
            keys = passthrough(names)
            aggs = tuple(AggCall("count", col(tag)) for tag in tags)
            if distinct:
                right = "> 0" if word == "INTERSECT" else "= 0"
                having = sqlglot.parse_one(f"_a0 > 0 AND _a1 {right}", read="spark")
                node = GroupBy(node, keys, aggs, keys, having)
            else:  # ALL: a row once per copy, least(l, r) or l - r copies
                copies = sqlglot.parse_one("least(_a0, _a1)" if word == "INTERSECT" else
                                           "_a0 - _a1", read="spark")
                node = GroupBy(node, keys, aggs, (*keys, ("_setop_copies", copies)),
                               exp.GT(this=copies.copy(), expression=exp.Literal.number(0)))
                node = Explode(node, "_setop_copy",
                               sqlglot.parse_one("sequence(1, _setop_copies)", read="spark"))
                node = Map(node, None, passthrough(names))
        elif distinct:
            keys = passthrough(names)
            node = GroupBy(node, keys, (), keys, None)
        return Query(node, self._order(op, node), self._limit(op))

    def _branch(self, branch: exp.Expr, word: str) -> Node:
        if isinstance(branch, exp.Subquery):
            branch = branch.this
        if not isinstance(branch, exp.Select | exp.SetOperation):
            raise QueryError(f"a branch of {word} must be a SELECT, not {branch.sql()!r}")
        inner = self.query(branch)
        if inner.order_by or inner.limit is not None:
            raise QueryError(f"ORDER BY/LIMIT inside a branch of {word} cannot be maintained "
                             "incrementally; put them after the last branch")
        return inner.root

    def _user_call(self, n: exp.Expr) -> UserAggregate | None:
        if isinstance(n, exp.Anonymous):
            return self.aggregates.get(n.name.lower())
        return None

    def _agg(self, n: exp.Expr) -> AggCall:
        user = self._user_call(n)
        if user is not None:
            args = n.expressions
            if len(args) != 1:
                raise QueryError(f"user aggregate {user.name}() takes one argument")
            return AggCall(user.name, args[0], user=user)
        func = _AGG_NAMES.get(type(n))
        if func is None:
            raise QueryError(f"aggregate {n.sql(dialect='spark')} is not supported; use count, "
                             "sum, avg, min, max, count(distinct), stddev/variance, or "
                             "declare a UserAggregate")
        arg = n.this
        distinct = isinstance(arg, exp.Distinct)
        if distinct:
            if len(arg.expressions) != 1:
                raise QueryError(f"{n.sql()!r}: count(distinct …) takes one expression")
            arg = arg.expressions[0]
        if isinstance(arg, exp.Star):
            arg = None
        if arg is not None and any(is_aggregate(x) for x in arg.walk()):
            raise QueryError(f"nested aggregate {n.sql()!r}: aggregate a subquery instead")
        return AggCall(func, arg, distinct)

    def _semi_join(self, node: Node, scope: Scope, cond: exp.In) -> Node:
        """``x IN (SELECT c …)``: join with the subquery's distinct values of ``c``."""
        inner = self.query(cond.args["query"].this if isinstance(
            cond.args["query"], exp.Subquery) else cond.args["query"])
        if len(inner.columns) != 1:
            raise QueryError("a subquery in IN (…) must select exactly one column")
        (c,) = inner.columns
        self.counter += 1
        name = f"_in{self.counter}"
        distinct = GroupBy(inner.root, ((name, col(c)),), (), ((name, col(name)),))
        left = scope.qualify(cond.this)
        if not isinstance(left, exp.Column):
            raise QueryError(f"IN (SELECT …) needs a column on its left, not {left.sql()!r}")
        return Map(Join(node, distinct, ((left.name, name),)), None,
                   passthrough(list(node.columns)))

    def _order(self, select, node) -> tuple[tuple[str, bool], ...]:
        order = select.args.get("order")
        if order is None:
            return ()
        out: list[tuple[str, bool]] = []
        for o in order.expressions:
            e = o.this
            name = e.name if isinstance(e, exp.Column) else None
            if isinstance(e, exp.Literal) and e.is_int:
                name = list(node.columns)[int(e.this) - 1]
            if name is None or name not in node.columns:
                raise QueryError(f"ORDER BY {e.sql()!r}: order by an output column name")
            out.append((name, not o.args.get("desc")))
        return tuple(out)

    @staticmethod
    def _limit(select) -> int | None:
        lim = select.args.get("limit")
        if lim is None:
            return None
        e = lim.expression
        if not (isinstance(e, exp.Literal) and e.is_int):
            raise QueryError("LIMIT needs a number")
        return int(e.this)


def _output_aliases(e: exp.Expr, scope: Scope,
                    items: Sequence[tuple[str, exp.Expr]]) -> exp.Expr:
    """``e`` (a GROUP BY or HAVING term) with each unqualified column that names no input
    column but an output (``SELECT count(*) AS c … HAVING c > 1``) replaced by the
    output's expression, as Spark resolves them; input columns win."""
    outputs = {n.lower(): x for n, x in items}
    inputs = {c.lower() for cols in scope.aliases.values() for c in cols}

    def sub(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and not n.table and n.name.lower() not in inputs \
                and n.name.lower() in outputs:
            return outputs[n.name.lower()].copy()
        return n

    return e.transform(sub)


def _cast(e: exp.Expr, to: str, was: str) -> exp.Expr:
    """``e`` cast to type ``to`` unless it already has it."""
    if to == was:
        return e
    return exp.Cast(this=e, to=exp.DataType.build(to, dialect="spark"))


def _default_name(e: exp.Expr) -> str:
    if isinstance(e, exp.Column):
        return e.name
    return re.sub(r"[^0-9a-zA-Z]+", "_", e.sql(dialect="spark").lower()).strip("_") or "col"

