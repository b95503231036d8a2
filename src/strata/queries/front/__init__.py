"""The front ends: SQL text (its CTEs inlined) and the Python API, parsed into the query
algebra (docs/sql.md)."""

from strata.queries.front.api import Relation, table
from strata.queries.front.ctes import inline_ctes
from strata.queries.front.sql import parse_sql, tables_read

__all__ = ["Relation", "inline_ctes", "parse_sql", "table", "tables_read"]
