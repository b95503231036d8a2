"""Incremental queries: write a query once, strata keeps its answer up to date.

A query (SQL text or the Python API) is rewritten into a homomorphism ``h`` over
increments, a merge ``⊗`` into the state and an answer function ``a`` (Fegaras,
"Incremental query processing on big data streams", TKDE 2016), then run as a stage of a
strata dataflow whose epochs are Spark DataFrame plans.
"""

from strata.queries.algebra import GroupBy, Join, Map, Query, Scan, normalize
from strata.queries.api import Relation, table
from strata.queries.errors import NotIncrementalError, QueryError
from strata.queries.incremental import IncrementalQuery, derive
from strata.queries.iteration import Iteration, iterate
from strata.queries.monoids import UserAggregate
from strata.queries.sql import parse_sql
from strata.queries.stage import add_query, compile_query, read_answer

__all__ = [
    "GroupBy", "IncrementalQuery", "Iteration", "Join", "Map", "NotIncrementalError", "Query",
    "QueryError", "Relation", "Scan", "UserAggregate", "add_query", "compile_query",
    "derive", "iterate", "normalize", "parse_sql", "read_answer", "table",
]
