"""Incremental queries: write a query once, strata keeps its answer up to date.

A query (SQL text or the Python API) is rewritten into a homomorphism ``h`` over
increments, a merge ``⊗`` into the state and an answer function ``a`` (Fegaras,
"Incremental query processing on big data streams", TKDE 2016), then run as a stage of a
strata dataflow whose epochs are Spark DataFrame plans.

The subpackages, one job each, import downward only (docs/architecture.md, "Layers"):
``programs`` (the stage programs) over ``spark`` (the evaluator's DataFrame plans) over
``arrow`` (rows the driver holds) over ``plan`` (the algebra and its incremental
program), with ``front`` (SQL and the Python API) over ``plan`` alone.
"""

from strata.queries import moved
from strata.queries.front import Relation, parse_sql, table
from strata.queries.plan import (
    GroupBy,
    IncrementalQuery,
    Join,
    Map,
    NotIncrementalError,
    Query,
    QueryError,
    Scan,
    UserAggregate,
    derive,
    normalize,
)
from strata.queries.programs import (
    Iteration,
    QueryProgram,
    add_query,
    compile_query,
    iterate,
    read_answer,
)

moved.install()  # the module paths before the split, which older homes name

__all__ = [
    "GroupBy", "IncrementalQuery", "Iteration", "Join", "Map", "NotIncrementalError", "Query",
    "QueryError", "QueryProgram", "Relation", "Scan", "UserAggregate", "add_query", "compile_query",
    "derive", "iterate", "normalize", "parse_sql", "read_answer", "table",
]
