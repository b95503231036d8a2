"""The query algebra and its incremental program: the nodes, scalar expressions typed as
Spark types them, aggregates as monoids, and the derivation of ``h``, ``⊗`` and ``a``
(docs/architecture.md, "Layers"). Plain Python data: nothing here needs Spark."""

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
    Windowed,
)
from strata.queries.plan.errors import NotIncrementalError, QueryError
from strata.queries.plan.expressions import MULT, bind, is_aggregate, to_sql
from strata.queries.plan.incremental import GroupPlan, IncrementalQuery, derive
from strata.queries.plan.monoids import Monoid, UserAggregate, monoid
from strata.queries.plan.normalize import normalize

__all__ = [
    "MULT", "Explode", "GroupBy", "GroupPlan", "IncrementalQuery", "Join", "Map", "Monoid",
    "Nearest", "Node", "NotIncrementalError", "Query", "QueryError", "Scan", "Union",
    "UserAggregate", "Windowed", "bind", "derive", "is_aggregate", "monoid", "normalize",
    "to_sql",
]
