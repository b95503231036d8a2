"""The Python API: build a query step by step; it becomes the same SQL the CLI takes.

>>> q = (table("orders").join(table("customers", key="id"), on=("cust", "id"))
...      .where("amount > 0").group_by("country").agg(total="sum(amount)", n="count(*)"))
>>> add_query(df, "revenue", q)

Each method returns a new :class:`Relation`; column expressions are Spark SQL snippets.
A step that cannot extend the current ``SELECT`` (filtering or joining a grouped
relation) wraps it as a subquery, which the SQL front end unnests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import sqlglot
from sqlglot import exp

from strata.queries.front.sql import parse_sql
from strata.queries.plan.algebra import Query
from strata.queries.plan.errors import QueryError
from strata.queries.plan.monoids import UserAggregate

_aliases = itertools.count(1)


def _fresh(kind: str) -> str:
    """A new alias for a wrapped subquery."""
    return f"_{kind}{next(_aliases)}"


@dataclass(frozen=True)
class Relation:
    """A query under construction (a ``SELECT``), with the keys declared on its tables."""

    select: exp.Select
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    aggregates: Mapping[str, UserAggregate] = field(default_factory=dict)
    alias: str = ""

    def sql(self) -> str:
        return self.select.sql(dialect="spark")

    def _shaped(self) -> bool:
        s = self.select
        return bool(s.args.get("group") or s.args.get("distinct") or s.args.get("order")
                    or s.args.get("limit") or s.expressions != [exp.Star()])

    def _wrapped(self, alias: str) -> Relation:
        return replace(self, select=_from_subquery(self.select, alias), alias=alias)

    def where(self, condition: str) -> Relation:
        """Keep rows satisfying ``condition``."""
        base = self._wrapped(_fresh("w")) if self._shaped() else self
        return replace(base, select=base.select.where(condition, dialect="spark", copy=True))

    def join(self, other: Relation, on: str | tuple[str, str] | Sequence[tuple[str, str]],
             how: str = "inner") -> Relation:
        """Equi-join with ``other``: ``on`` is a column both have, a pair ``(left column,
        right column)`` or a list of pairs; ``how`` is ``inner``, ``left`` (every row of
        this relation, NULLs where ``other`` has no match) or ``right``."""
        if how not in ("inner", "left", "right"):
            raise QueryError(f"join how={how!r}: use 'inner', 'left' or 'right'")
        pairs = [(on, on)] if isinstance(on, str) else [on] if isinstance(on[0], str) \
            else list(on)
        return self._join(other, lambda la, ra: " AND ".join(
            f"{la}.{a} = {ra}.{b}" for a, b in pairs), None if how == "inner" else how)

    def join_nearest(self, other: Relation, distance: str) -> Relation:
        """Join each row with the one row of ``other`` (a small relation, e.g. centroids)
        that minimizes ``distance``, an expression over both (qualified by table name or
        alias). Maintained only inside :func:`~strata.queries.programs.iteration.iterate`."""
        return self._join(other, lambda la, ra: f"NEAREST({distance})")

    def _join(self, other: Relation, condition: Callable[[str, str], str],
              join_type: str | None = None) -> Relation:
        left = self._wrapped(_fresh("l")) if self._shaped() else self
        la = left.alias or _table_name(left.select)
        # an outer join with a join is joined as a subquery: (B JOIN C), not B then C
        if other._shaped() or other.select.args.get("joins") and (join_type or
                                                                   not other.alias):
            other = other._wrapped(_fresh("r"))
        ra = other.alias or _table_name(other.select)
        item = other.select.args["from_"].this.copy()
        sel = left.select.join(item, on=condition(la, ra), join_type=join_type,
                               dialect="spark", copy=True)
        for j in other.select.args.get("joins") or []:
            sel = sel.join(j.copy(), copy=False)
        return replace(left, select=sel, keys={**left.keys, **other.keys},
                       aggregates={**left.aggregates, **other.aggregates}, alias="")

    def select_(self, *columns: str, **named: str) -> Relation:
        """Project onto ``columns`` and ``name=expression`` pairs."""
        base = self._wrapped(_fresh("s")) if self._shaped() else self
        exprs = [*columns, *(f"{e} AS {n}" for n, e in named.items())]
        return replace(base, select=base.select.select(*exprs, append=False, dialect="spark",
                                                       copy=True))

    def explode(self, array: str, name: str, *, outer: bool = False) -> Relation:
        """Each row once per element of ``array`` (an expression), the element as column
        ``name`` (``LATERAL VIEW explode``); ``outer`` keeps a row whose array is NULL or
        empty once, with a NULL element."""
        base = self._wrapped(_fresh("e")) if self._shaped() else self
        view = sqlglot.parse_one(
            f"SELECT * FROM t LATERAL VIEW {'OUTER ' if outer else ''}explode({array}) "
            f"{_fresh('x')} AS {name}", read="spark").args["laterals"][0]
        sel = base.select.copy()
        sel.append("laterals", view)
        return replace(base, select=sel)

    def group_by(self, *keys: str) -> Grouped:
        """Group by ``keys``; finish with :meth:`Grouped.agg`."""
        return Grouped(self, keys)

    def agg(self, **aggregates: str) -> Relation:
        """A total aggregate: one row of ``name=aggregate`` values."""
        return Grouped(self, ()).agg(**aggregates)

    def distinct(self) -> Relation:
        return replace(self, select=self.select.distinct(copy=True))

    def union(self, other: Relation, *, distinct: bool = False) -> Relation:
        """The rows of both, columns matched by position and named as this relation's:
        ``UNION ALL`` (every copy), or ``UNION`` with ``distinct``."""
        return self._set_operation(exp.union, other, distinct)

    def intersect(self, other: Relation, *, distinct: bool = True) -> Relation:
        """The distinct rows found in both (``INTERSECT``); without ``distinct``, a row as
        many times as both have it (``INTERSECT ALL``)."""
        return self._set_operation(exp.intersect, other, distinct)

    def except_(self, other: Relation, *, distinct: bool = True) -> Relation:
        """The distinct rows of this relation not found in ``other`` (``EXCEPT``); without
        ``distinct``, a row as many more times as this relation has it (``EXCEPT ALL``)."""
        return self._set_operation(exp.except_, other, distinct)

    def _set_operation(self, make: Callable[..., exp.Expr], other: Relation,
                       distinct: bool) -> Relation:
        alias = _fresh("u")
        both = make(self.select.copy(), other.select.copy(), distinct=distinct)
        return Relation(_from_subquery(both, alias), {**self.keys, **other.keys},
                        {**self.aggregates, **other.aggregates}, alias)

    def order_by(self, *columns: str) -> Relation:
        """Order the answer when it is read (``"col desc"`` for descending)."""
        return replace(self, select=self.select.order_by(*columns, dialect="spark", copy=True))

    def limit(self, n: int) -> Relation:
        return replace(self, select=self.select.limit(n, copy=True))

    def with_aggregate(self, agg: UserAggregate) -> Relation:
        """Make user aggregate ``agg`` callable by its name in expressions."""
        return replace(self, aggregates={**self.aggregates, agg.name.lower(): agg})

    def to_query(self, flows: Mapping[str, Mapping[str, str]],
                 keys: Mapping[str, Sequence[str]] | None = None) -> Query:
        return parse_sql(self.sql(), flows, {**self.keys, **(keys or {})}, self.aggregates)


@dataclass(frozen=True)
class Grouped:
    relation: Relation
    keys: tuple[str, ...]

    def agg(self, **aggregates: str) -> Relation:
        """``name=aggregate`` columns per group (e.g. ``total="sum(amount)"``)."""
        if not aggregates:
            raise QueryError("agg() needs at least one name=aggregate")
        rel = self.relation
        base = rel._wrapped(_fresh("g")) if rel._shaped() else rel
        exprs = [*self.keys, *(f"{e} AS {n}" for n, e in aggregates.items())]
        sel = base.select.select(*exprs, append=False, dialect="spark", copy=True)
        if self.keys:
            sel = sel.group_by(*self.keys, dialect="spark", copy=False)
        return replace(base, select=sel)


def table(flow: str, *, key: str | Sequence[str] | None = None, alias: str = "") -> Relation:
    """All rows of ``flow``; ``key`` declares its unique key (needed for joins)."""
    src: exp.Expr = exp.to_table(flow)
    if alias:
        src = exp.alias_(src, alias, table=True)
    keys = {flow: (key,) if isinstance(key, str) else tuple(key)} if key else {}
    return Relation(exp.select("*").from_(src), keys, {}, alias)


def _from_subquery(query: exp.Expr, alias: str) -> exp.Select:
    """``SELECT * FROM (query) alias``."""
    return exp.select("*").from_(exp.Subquery(this=query, alias=exp.TableAlias(
        this=exp.to_identifier(alias))))


def _table_name(select: exp.Select) -> str:
    item = select.args["from_"].this
    return item.alias_or_name

