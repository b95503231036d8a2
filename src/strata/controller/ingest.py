"""Appending increments to a home's external inputs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence

from strata.controller.readers import read_source
from strata.model.errors import StrataError
from strata.model.schema import to_arrow_schema
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.increments import Increment, write_table


def ingest(
    home: str | os.PathLike[str] | Home,
    flow: str,
    source: Sequence[str | os.PathLike[str]] | Sequence[dict],
    fmt: str | None = None,
    *,
    end_frame: bool = False,
    catalog: Catalog | None = None,
) -> int:
    """Append one increment to the external input ``flow`` of the dataflow in ``home``.

    ``source`` is a list of files (``jsonl``, ``csv`` or ``parquet``; the format is taken
    from the extension unless ``fmt`` is given) or a list of records. The files are
    checked against the flow's schema first: a bad file is rejected whole, naming the
    line or row that failed, and nothing is appended. Returns the increment's number.
    """
    layout = home if isinstance(home, Home) else Home(home)
    own = catalog is None
    catalog = catalog or Catalog(layout.catalog_path)
    try:
        flows = catalog.flows()
        if flow not in flows:
            known = ", ".join(sorted(n for n, f in flows.items() if f["external"])) or "none"
            raise StrataError(
                f"home {layout.root} has no flow {flow!r} (external inputs: {known}). "
                "Register the dataflow first with `strata run PIPELINE --home DIR`."
            )
        if not flows[flow]["external"]:
            raise StrataError(f"flow {flow!r} is written by stage {flows[flow]['producer']!r}; "
                              "only external inputs take ingested increments")
        table = read_source(source, to_arrow_schema(flows[flow]["schema"]), fmt, flow)
        # under incoming/: a concurrent controller's sweep never removes an ingest in flight
        uri = layout.incoming_file(flow, uuid.uuid4().hex[:8])
        inc = Increment((uri,), table.num_rows, write_table(uri, table))
        return catalog.record_ingest(flow, inc, end_frame)
    finally:
        if own:
            catalog.close()
