"""Window queries registered in a home (``strata window add`` / ``strata query``), kept
as compiled stages in the catalog."""

from __future__ import annotations

from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError
from strata.model.schema import to_ddl
from strata.physical.registration import compiled, registered_of_kind
from strata.storage.catalog import Catalog
from strata.windows.program import WindowProgram
from strata.windows.query import WindowQuery
from strata.windows.stage import add_window


def registered(catalog: Catalog) -> dict[str, WindowProgram]:
    """Query name → the program of its registered window stage."""
    return registered_of_kind(catalog.registered_stages(), WindowProgram)


def find(catalog: Catalog, name: str) -> WindowProgram:
    programs = registered(catalog)
    if name not in programs:
        raise StrataError(f"the home has no window query {name!r}; window queries: "
                          f"{', '.join(sorted(programs)) or 'none'} (`strata window add` "
                          "registers one)")
    return programs[name]


def register(catalog: Catalog, query: WindowQuery, sql: str, dry_run: bool = False
             ) -> WindowProgram:
    """Compile ``query`` against the home's flows and keep it; it also reads the
    increments of its flow stored before it (a window query starts from the beginning
    of the data the home keeps)."""
    taken = set(catalog.stages()) | set(catalog.flows())
    if query.name in taken:
        raise StrataError(f"the home already has a stage or flow named {query.name!r}")
    scratch = Dataflow("window registration")
    for flow, info in catalog.flows().items():
        scratch.source(flow, info["schema"])
    stage = add_window(scratch, query)
    if not dry_run:
        # the flow's NOT NULL columns (the event time, the source): ingest refuses a
        # record without them from now on, as for a window stage a pipeline declares
        catalog.set_schema(query.flow, to_ddl(scratch.flows[query.flow].schema))
        catalog.register_stage(compiled(stage, sql), stage.input_names, backfill=[query.flow])
    program = stage.program
    assert isinstance(program, WindowProgram)
    return program
