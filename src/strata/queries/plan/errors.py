"""Errors of the query layer."""

from __future__ import annotations

from strata.model.errors import StrataError


class QueryError(StrataError):
    """A query that strata cannot parse, type or run; the message says what to change."""


class NotIncrementalError(QueryError):
    """A query with an operator that strata cannot maintain incrementally."""

    def __init__(self, operator: str, why: str, hint: str = "") -> None:
        self.operator = operator
        msg = f"cannot maintain the query incrementally: {operator} {why}"
        super().__init__(msg + (f"; {hint}" if hint else ""))
