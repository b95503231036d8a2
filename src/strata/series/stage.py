"""Query series as a stage of a dataflow: :func:`add_series` and the stage's name."""

from __future__ import annotations

from collections.abc import Sequence

from strata.model.dataflow import Dataflow, Input, Stage
from strata.model.errors import StrataError
from strata.model.runnability import sliding
from strata.model.schema import type_ddl
from strata.series.program import Series, SeriesProgram


def series_stage_name(stream: str) -> str:
    """The name of the jumbo stage that runs every series on ``stream``."""
    return f"{stream}_series"


def add_series(df: Dataflow, stream: str, series: Sequence[Series], *,
               shared_scan: bool = False) -> Stage:
    """Add the stage that runs ``series`` (all the series on ``stream``) together: each
    new segment of ``stream`` is scanned once, its views are kept for every series that
    reads them, and each series' answer at each occurrence is an increment of the flow
    named after it. ``shared_scan`` computes the new segment's stored partial views in
    one jumbo pass (one scan, one exchange) instead of a plan each."""
    if stream not in df.flows:
        raise StrataError(f"unknown stream {stream!r}; flows: {sorted(df.flows)}")
    columns = {f.name: type_ddl(f.type) for f in df.flows[stream].schema}
    if "_mult" in columns:
        raise StrataError(f"stream {stream!r} has deletes (_mult): a stream's segments only "
                          "add rows")
    clash = [s.name for s in series if s.name in df.flows or s.name in df.stages]
    if clash:
        raise StrataError(f"series names {clash} are taken by flows or stages of the dataflow")
    program = SeriesProgram(stream, columns, series, shared_scan)
    return df.stage(series_stage_name(stream), None, program=program, inputs=[Input(stream)],
                    outputs={s.name: program.output_ddl(s.name) for s in series},
                    runnable=sliding(stream, program.keep_segments))
