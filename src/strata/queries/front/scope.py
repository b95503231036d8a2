"""The columns a ``FROM`` clause makes visible (alias → source column → internal name), as
the SQL front end (:mod:`strata.queries.front.sql`) resolves them; the clauses that add
columns (:mod:`strata.queries.front.sql_rows`) register theirs here."""

from __future__ import annotations

from sqlglot import exp

from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import col


class Scope:
    """Columns visible in a FROM clause: alias → source column → internal name."""

    def __init__(self) -> None:
        self.aliases: dict[str, dict[str, str]] = {}

    def resolve(self, c: exp.Column) -> str:
        if c.table:
            if c.table not in self.aliases:
                raise QueryError(f"unknown table or alias {c.table!r} in {c.sql()!r}")
            cols = self.aliases[c.table]
            if c.name not in cols:
                raise QueryError(f"{c.table} has no column {c.name!r}; it has {sorted(cols)}")
            return cols[c.name]
        hits = [cols[c.name] for cols in self.aliases.values() if c.name in cols]
        if not hits:
            known = sorted({n for cols in self.aliases.values() for n in cols})
            raise QueryError(f"unknown column {c.name!r}; known columns: {known}")
        if len(hits) > 1:
            raise QueryError(f"column {c.name!r} is ambiguous; qualify it with a table alias")
        return hits[0]

    def qualify(self, e: exp.Expr) -> exp.Expr:
        return e.copy().transform(
            lambda n: col(self.resolve(n)) if isinstance(n, exp.Column) else n)
