"""Series registered in a home (``strata series``): kept as the compiled stage of their
stream in the catalog, added to, replaced in or dropped from it."""

from __future__ import annotations

from collections.abc import Sequence

from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError
from strata.model.schema import to_ddl
from strata.physical.registration import compiled, registered_of_kind
from strata.queries.front import tables_read
from strata.queries.plan import QueryError
from strata.series.corrections import changes_flow, corrections_flow
from strata.series.program import Series, SeriesProgram
from strata.series.stage import add_series, series_stage_name
from strata.series.stored import segment_of
from strata.series.windows import Segments
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.manifest import StateDir


def registered(catalog: Catalog) -> dict[str, SeriesProgram]:
    """Stream -> the program of its registered series stage."""
    return {p.stream: p for p in registered_of_kind(catalog.registered_stages(),
                                                    SeriesProgram).values()}


def find(catalog: Catalog, name: str) -> tuple[SeriesProgram, Series]:
    """The registered series ``name`` and the program of its stream."""
    programs = registered(catalog)
    for program in programs.values():
        for s in program.series:
            if s.name == name:
                return program, s
    known = sorted(s.name for p in programs.values() for s in p.series)
    raise StrataError(f"the home has no series {name!r}; series: {', '.join(known) or 'none'}"
                      " (`strata series add` registers one)")


def stream_of(series: Series, flows: Sequence[str]) -> str:
    """The stream ``series`` reads: the one stream its bound tables name, else the one
    flow its query reads."""
    try:
        tables = tables_read(series.sql)
    except QueryError as e:
        raise StrataError(f"series {series.name!r}: {e}") from None
    if not tables:
        raise StrataError(f"series {series.name!r}: the query reads no table; a series "
                          "reads segments of a stream (SELECT … FROM STREAM)")
    streams = {Segments.parse(series.tables.get(t, t)).stream for t in tables}
    if len(streams) != 1:
        raise StrataError(f"series {series.name!r} reads {sorted(streams)}: a series reads "
                          "segments of one stream (bind each table with --table T=STREAM[…])")
    stream = streams.pop()
    if stream not in flows:
        raise StrataError(f"series {series.name!r}: the home has no flow {stream!r} "
                          f"(flows: {', '.join(sorted(flows)) or 'none'})")
    return stream


def register(catalog: Catalog, stream: str, series: Sequence[Series],
             shared_scan: bool | str | None = None) -> SeriesProgram:
    """Register ``series`` as all the series on ``stream`` (replacing the stream's stage,
    whose views, queues and epochs stay), with the stage's ``shared_scan`` (None: the
    stream's stage's, off for a new one; see :func:`add_series`). A new stage also reads
    the segments of the stream stored before it."""
    flows = catalog.flows()
    stage = series_stage_name(stream)
    before = registered(catalog).get(stream)
    own = {f for s in (before.series if before else ()) for f in (s.name, changes_flow(s.name))}
    scratch = Dataflow("series registration")
    for flow, info in flows.items():
        if flow not in own:
            scratch.source(flow, info["schema"])
    if before is None and stage in catalog.stages():
        raise StrataError(f"the home has a stage {stage!r} that does not run series; the "
                          f"series of {stream!r} need that name")
    taken = [s.name for s in series if s.name in catalog.stages()]
    if taken:
        raise StrataError(f"series names {taken} are names of stages of the home")
    if shared_scan is None:
        shared_scan = getattr(before, "shared_scan", False)
    added = add_series(scratch, stream, series, shared_scan=shared_scan)
    description = "; ".join(f"{s.name}: {s.sql}" for s in series)
    program = added.program
    assert isinstance(program, SeriesProgram)
    side = corrections_flow(stream)
    sources = {side: to_ddl(scratch.flows[side].schema)} if side in added.input_names else {}
    for flow, ddl in sources.items():
        catalog.add_source(flow, ddl)
    catalog.register_stage(compiled(added, description, sources), added.input_names,
                           replace=before is not None, backfill=[stream])
    return program


def check_correction(catalog: Catalog, home: Home, stream: str, segment: int,
                     lateness: int | None = None) -> str:
    """The corrections flow of ``stream``, if a correction of ``segment`` will be taken:
    the stream's series stage has read it, and it is among the newest ``lateness``
    segments (default: the registered series' lateness); else a StrataError that says
    why and what to do."""
    side = corrections_flow(stream)
    flows = catalog.flows()
    if stream not in flows:
        raise StrataError(f"the home has no stream {stream!r} (flows: "
                          f"{', '.join(sorted(flows)) or 'none'})")
    if side not in flows:
        raise StrataError(f"no series on {stream!r} takes corrections: give a series a "
                          "lateness (`strata series add --lateness N`, or Series(lateness=N)) "
                          "and run the pipeline once")
    snap = StateDir(home.stage(series_stage_name(stream))).current()
    n = segment_of(snap)
    if not 1 <= segment <= n:
        raise StrataError(f"segment {segment} of {stream!r} has not been read by its series "
                          f"(segments 1–{n} have): a correction replaces a segment already "
                          "read; run the pipeline to read newer ones first")
    if lateness is None:  # a registered stage's, else the one its last epoch ran with
        program = registered(catalog).get(stream)
        lateness = program.lateness if program is not None else (
            snap.state or {}).get("lateness")
    if lateness is not None and segment <= n - lateness:
        raise StrataError(f"segment {segment} of {stream!r} is too old to correct: the series "
                          f"on it take corrections of the newest {lateness} segment(s) "
                          f"({max(n - lateness + 1, 1)}–{n})")
    return side
