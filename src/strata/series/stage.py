"""Query series as a stage of a dataflow: :func:`add_series` and the stage's name."""

from __future__ import annotations

from collections.abc import Sequence

from strata.model.dataflow import Dataflow, Input, Stage
from strata.model.errors import StrataError
from strata.model.runnability import sliding
from strata.model.schema import parse_ddl, type_ddl
from strata.series.corrections import changes_flow, corrections_ddl, corrections_flow
from strata.series.program import Series, SeriesProgram


def series_stage_name(stream: str) -> str:
    """The name of the jumbo stage that runs every series on ``stream``."""
    return f"{stream}_series"


def add_series(df: Dataflow, stream: str, series: Sequence[Series], *,
               shared_scan: bool | str = False) -> Stage:
    """Add the stage that runs ``series`` (all the series on ``stream``) together: each
    new segment of ``stream`` is scanned once, its views are kept for every series that
    reads them, and each series' answer at each occurrence is an increment of the flow
    named after it. ``shared_scan`` computes the new segment's stored partial views in
    one jumbo pass (one scan, one exchange) instead of a plan each; ``"prefix"`` computes
    those that share a group key in one pass whose one exchange hashes that key (the
    shared shuffle); ``"reorder"`` computes those that group by the same keys in one
    grouping, each view's filter pulled above it into its aggregates (operator
    reordering); ``"auto"`` lets the cost model choose among them per segment, from the
    statistics of earlier ones.

    When a series has a ``lateness``, the stage also reads the source flow
    ``<stream>_corrections`` (declared here if the dataflow lacks it): rows that replace
    segments already read, and re-emits such a series' occurrences whose windows contain
    a corrected segment as changes, to ``<series>_changes``."""
    if stream not in df.flows:
        raise StrataError(f"unknown stream {stream!r}; flows: {sorted(df.flows)}")
    columns = {f.name: type_ddl(f.type) for f in df.flows[stream].schema}
    if "_mult" in columns:
        raise StrataError(f"stream {stream!r} has deletes (_mult): a stream's segments only "
                          "add rows")
    program = SeriesProgram(stream, columns, series, shared_scan)
    outputs = {s.name: program.output_ddl(s.name) for s in series}
    outputs |= {changes_flow(s.name): program.changes_ddl(s.name) for s in series
                if s.lateness}
    clash = [f for f in outputs if f in df.flows or f in df.stages]
    if clash:
        raise StrataError(f"series flows {clash} are taken by flows or stages of the "
                          "dataflow: name the series otherwise")
    inputs = [Input(stream)]
    side = None
    if program.lateness:
        side = corrections_flow(stream)
        ddl = corrections_ddl(columns)
        if side not in df.flows:
            df.source(side, ddl)
        elif [(f.name, type_ddl(f.type)) for f in df.flows[side].schema] != \
                [(f.name, type_ddl(f.type)) for f in parse_ddl(ddl)]:
            raise StrataError(f"flow {side!r} holds corrections of {stream!r}: its columns "
                              f"must be {ddl}")
        inputs.append(Input(side))
    return df.stage(series_stage_name(stream), None, program=program, inputs=inputs,
                    outputs=outputs, runnable=sliding(stream, program.keep_segments, side))
