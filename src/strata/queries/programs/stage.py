"""A query as a stage of a strata dataflow.

:func:`add_query` compiles a query (SQL text, a :class:`~strata.queries.front.api.Relation`
or an algebra :class:`~strata.queries.plan.algebra.Query`) into a stage whose epochs run as
Spark DataFrame plans. The stage reads the flows the query scans and writes one flow
(``NAME_changes`` unless ``output=`` says otherwise) carrying the *changes* of the
answer: its columns plus ``_mult`` (+1 a row enters the answer, −1 it leaves), so a
downstream query or stage sees deletes. The current answer is read with
:func:`~strata.queries.programs.program.read_answer` (``Controller.answer``, ``strata show
NAME``); ``ORDER BY`` and ``LIMIT`` apply there, not to the changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from strata.model.dataflow import Dataflow, Input, Stage
from strata.model.runnability import runnable_any
from strata.model.schema import to_ddl, type_ddl
from strata.queries.front.api import Relation
from strata.queries.front.sql import parse_sql
from strata.queries.plan.algebra import Query
from strata.queries.plan.errors import NotIncrementalError
from strata.queries.plan.incremental import IncrementalQuery, derive
from strata.queries.plan.monoids import UserAggregate
from strata.queries.programs.iteration import Iteration, IterationProgram, compile_iteration
from strata.queries.programs.program import QueryProgram, output_ddl
from strata.queries.programs.recompute import RecomputeProgram
from strata.queries.programs.vector_route import VectorQueryProgram, group_route

log = logging.getLogger(__name__)


def flow_columns(df: Dataflow) -> dict[str, dict[str, str]]:
    """Every flow of ``df``: column → Spark type."""
    return {name: {f.name: type_ddl(f.type) for f in flow.schema}
            for name, flow in df.flows.items()}


def compile_query(query: str | Relation | Query, flows: Mapping[str, Mapping[str, str]],
                  keys: Mapping[str, Sequence[str]] | None = None,
                  aggregates: Mapping[str, UserAggregate] | None = None,
                  allow_recompute: bool = False) -> IncrementalQuery:
    """Parse (if needed) and derive the incremental program of ``query``; with
    ``allow_recompute``, a query that is not incremental gets a plan run by recomputation
    (``.recompute`` is set) instead of raising."""
    if isinstance(query, str):
        query = parse_sql(query, flows, keys, aggregates)
    elif isinstance(query, Relation):
        query = query.to_query(flows, keys)
    try:
        return derive(query)
    except NotIncrementalError as e:
        if not allow_recompute:
            raise
        log.warning("%s; it will be recomputed every epoch", e)
        return derive(query, recompute=True)


def add_query(df: Dataflow, name: str, query: str | Relation | Query | Iteration, *,
              keys: Mapping[str, Sequence[str]] | None = None,
              aggregates: Mapping[str, UserAggregate] | None = None,
              output: str | None = None, allow_recompute: bool = False,
              vectorized: bool = True) -> Stage:
    """Add stage ``name`` that keeps ``query``'s answer up to date as its inputs change
    (an :class:`~strata.queries.programs.iteration.Iteration` keeps its iterate).

    ``keys`` declares unique keys of flows (``{"customers": ["id"]}``), which joins need;
    ``aggregates`` names user aggregates the SQL calls. Raises
    :class:`~strata.queries.plan.errors.QueryError` (or ``NotIncrementalError`` naming the
    blocking operator) when the query cannot be maintained, unless ``allow_recompute``
    lets such a query (a many-to-many join) be recomputed over all its input every
    epoch (:mod:`strata.queries.programs.recompute`). A group-by of one flow with built-in
    aggregates runs on the vectorized route (:mod:`strata.queries.programs.vector_route`; over a
    flow with deletes, only counts, sums and averages) unless ``vectorized`` is False."""
    out = output or f"{name}_changes"
    program: QueryProgram | VectorQueryProgram
    if isinstance(query, Iteration):
        init, step = compile_iteration(query, flow_columns(df), keys)
        scanned = sorted((set(init.input_flows) | set(step.input_flows)) - {query.name})
        program = IterationProgram(query, init, step,
                                   {f: to_ddl(df.flows[f].schema) for f in scanned}, out)
    else:
        inc = compile_query(query, flow_columns(df), keys, aggregates, allow_recompute)
        scanned = inc.input_flows
        ddl = {f: to_ddl(df.flows[f].schema) for f in scanned}
        route = group_route(inc, ddl) if vectorized else None
        if route is not None:
            program = VectorQueryProgram(inc, route, out, output_ddl(inc.root.columns))
        else:
            kind = RecomputeProgram if inc.recompute else QueryProgram
            program = kind(inc, ddl, out, output_ddl(inc.root.columns))
    return df.stage(name, None, program=program, inputs=[Input(f) for f in scanned],
                    outputs={out: program.output_ddl}, runnable=runnable_any)
