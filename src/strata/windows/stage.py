"""Windowed queries as stages of a dataflow: :func:`add_window`."""

from __future__ import annotations

from strata.model.dataflow import Dataflow, Input, Stage
from strata.model.errors import StrataError
from strata.queries.programs import flow_columns, output_ddl
from strata.windows.program import WindowProgram
from strata.windows.query import WindowPlan, WindowQuery
from strata.windows.rows import results_flow, scoreboard_flow


def add_window(df: Dataflow, query: WindowQuery) -> Stage:
    """Add stage ``query.name``: it aggregates each increment of ``query.flow`` into
    panes once and emits window results as the eviction policy releases them, as
    changes to ``<name>_windows`` (with a C2 summary per row) and the full scoreboards to
    ``<name>_c2``."""
    flows = flow_columns(df)
    if query.flow not in flows:
        raise StrataError(f"window query {query.name!r}: unknown flow {query.flow!r}; "
                          f"flows: {sorted(flows)}")
    taken = [n for n in (query.name, results_flow(query.name), scoreboard_flow(query.name))
             if n in df.flows or n in df.stages]
    if taken:
        raise StrataError(f"window query {query.name!r}: names {taken} are taken")
    columns = dict(flows[query.flow])
    plan = WindowPlan(query, columns)
    program = WindowProgram(plan)
    return df.stage(query.name, None, program=program, inputs=[Input(query.flow)],
                    outputs={program.result_flow: output_ddl(plan.result_columns()),
                             program.board_flow: output_ddl(plan.scoreboard_columns())})
