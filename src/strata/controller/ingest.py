"""Appending increments to a home's external inputs."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Sequence

import pyarrow as pa

from strata.controller.readers import IngestError, read_source
from strata.controller.references import referenced_increment
from strata.faults import crashpoint
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
    by_reference: bool = False,
) -> int:
    """Append one increment to the external input ``flow`` of the dataflow in ``home``.

    ``source`` is a list of files (``jsonl``, ``csv`` or ``parquet``; the format is taken
    from the extension unless ``fmt`` is given) or a list of records. The files are
    checked against the flow's schema first: a bad file is rejected whole, naming the
    line or row that failed, and nothing is appended. Returns the increment's number.

    ``by_reference``: take Parquet files in place instead of copying them into the home
    (their footers are checked against the schema; see
    :func:`~strata.controller.references.referenced_increment`).
    """
    layout = home if isinstance(home, Home) else Home(home)
    own = catalog is None
    catalog = catalog or Catalog(layout.catalog_path)
    try:
        ddl = checked_external_flow(layout, catalog, flow)
        if by_reference:
            files = [s for s in source if not isinstance(s, dict)]
            if len(files) < len(source):
                raise IngestError("records cannot be ingested by reference: only files")
            inc = referenced_increment(layout, files, to_arrow_schema(ddl), flow, fmt)
            crashpoint("ingest-before-commit")
            return catalog.record_ingest(flow, inc, end_frame, by_reference=True)
        table = read_source(source, to_arrow_schema(ddl), fmt, flow)
        return append_table(layout, catalog, flow, table, end_frame)
    finally:
        if own:
            catalog.close()


def append_table(home: Home, catalog: Catalog, flow: str, table: pa.Table,
                 end_frame: bool = False) -> int:
    """Append ``table`` (checked against ``flow``'s schema already) as one increment of
    ``flow``; its ingest number."""
    # under incoming/, named by its writer: a sweep removes it only once that process
    # is gone without having committed it (see staged_ingest_is_dead)
    uri = home.incoming_file(flow, staging_token())
    # kept in this process's file cache: a stage run next in this process may compute
    # from the rows it already has instead of reading the file (a series stage does)
    inc = Increment((uri,), table.num_rows, write_table(uri, table, cache=True))
    crashpoint("ingest-before-commit")
    return catalog.record_ingest(flow, inc, end_frame)


def checked_external_flow(home: Home, catalog: Catalog, flow: str) -> str:
    """The schema (DDL) of external input ``flow``; StrataError if it is not one."""
    flows = catalog.flows()
    if flow not in flows:
        known = ", ".join(sorted(n for n, f in flows.items() if f["external"])) or "none"
        raise StrataError(
            f"home {home.root} has no flow {flow!r} (external inputs: {known}). "
            "Register the dataflow first with `strata run PIPELINE --home DIR`.")
    if not flows[flow]["external"]:
        raise StrataError(f"flow {flow!r} is written by stage {flows[flow]['producer']!r}; "
                          "only external inputs take ingested increments")
    return flows[flow]["schema"]


# A staged ingest unknown to the catalog after this long is abandoned even if its writer
# ran on another machine (whose processes a sweep cannot see).
FOREIGN_STAGING_HOURS = 6.0


def staging_token() -> str:
    """``<unix seconds>-<host>-<pid>-<random>``: who stages an ingest, and since when."""
    host = socket.gethostname().replace("-", "_")
    return f"{int(time.time())}-{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def staged_ingest_is_dead(token: str, now: float | None = None) -> bool:
    """Whether the ingest that staged ``token`` can no longer commit it: its process on
    this host is gone, or it is from another host and older than FOREIGN_STAGING_HOURS.
    Tokens of another shape (staged by an older strata) are left alone."""
    parts = token.split("-")
    now = time.time() if now is None else now
    if len(parts) != 4 or not parts[0].isdigit() or not parts[2].isdigit():
        return False
    started, host, pid = int(parts[0]), parts[1], int(parts[2])
    if host == socket.gethostname().replace("-", "_"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False
    return now - started > FOREIGN_STAGING_HOURS * 3600
