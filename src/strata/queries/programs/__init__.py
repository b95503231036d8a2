"""The stage programs the controller runs for queries: a query's epochs (general plan,
recomputation, iteration, the vectorized route of a group-by) and ``add_query``, which
chooses among them (docs/architecture.md, "Adding a new kind of stage")."""

from strata.queries.programs.iteration import Iteration, IterationProgram, iterate
from strata.queries.programs.program import QueryProgram, output_ddl, read_answer
from strata.queries.programs.recompute import RecomputeProgram
from strata.queries.programs.stage import add_query, compile_query, flow_columns
from strata.queries.programs.vector_route import VectorQueryProgram

__all__ = [
    "Iteration", "IterationProgram", "QueryProgram", "RecomputeProgram", "VectorQueryProgram",
    "add_query", "compile_query", "flow_columns", "iterate", "output_ddl", "read_answer",
]
