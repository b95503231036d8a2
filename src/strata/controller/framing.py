"""Framing: cutting the arrivals on a connector into the increments its consumer reads.

With the default ``frame_by`` (FrameByPrior) each arrival — an ingest or an upstream
epoch's output — is one increment. With a ``frame_by`` function, consecutive records
with equal framing keys form one increment; the last frame stays open (its records kept
in a file) until a record with another key, or an end-of-frame mark, arrives.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from strata.faults import crashpoint
from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError
from strata.model.schema import to_table
from strata.physical.fusion import PhysicalStage
from strata.storage import fs
from strata.storage.catalog import Catalog, QueuedIncrement
from strata.storage.home import Home
from strata.storage.increments import Increment, iter_records, write_table


def frame_all(catalog: Catalog, home: Home, dataflow: Dataflow,
              units: Mapping[str, PhysicalStage]) -> list[tuple[str, str, int]]:
    """Frame every connector's unframed arrivals. Returns the arrivals queued as they are
    (default framing) as ``(flow, consumer, position)``, so a failed epoch can unmark them."""
    marked: list[tuple[str, str, int]] = []
    for name, unit in units.items():
        for inp in unit.stage.inputs:
            head = unit.fusion.head(inp.flow_name)
            arrivals = catalog.queue(head, name, framed=False)
            if not arrivals:
                continue
            if inp.frame_by is None:
                catalog.mark_framed(head, name, arrivals)
                marked += [(head, name, q.pos) for q in arrivals if not q.is_end_of_frame]
            else:
                _cut(catalog, home, dataflow, name, head, inp.frame_by, arrivals)
    return marked


def _cut(catalog: Catalog, home: Home, dataflow: Dataflow, consumer: str, flow: str,
         frame_by: Callable[[dict, Any], tuple[Any, Any]],
         arrivals: list[QueuedIncrement]) -> None:
    state, open_frame, cut = catalog.framing(flow, consumer)
    schema = dataflow.flows[flow].schema
    key = open_frame["key"] if open_frame else None
    records: list[dict] = list(iter_records(open_frame["file"])) if open_frame else []
    frames: list[tuple[Any, list[dict]]] = []
    for q in arrivals:
        if q.is_end_of_frame:
            if records:
                frames.append((key, records))
            records, key = [], None
            continue
        for f in q.increment.files:
            for rec in iter_records(f):
                try:
                    fk, state = frame_by(rec, state)
                    json.dumps(fk)
                except Exception as e:  # noqa: BLE001
                    raise StrataError(
                        f"frame_by of stage {consumer!r} on flow {flow!r} failed on record "
                        f"{rec!r}: {type(e).__name__}: {e}. Framing keys must be JSON "
                        "values (numbers, strings, lists)."
                    ) from None
                if records and fk != key:
                    frames.append((key, records))
                    records = []
                key = fk
                records.append(rec)
    new_incs = []
    for fk, recs in frames:
        cut += 1
        uri = home.frame_file(flow, consumer, cut)
        new_incs.append((cut, fk, Increment((uri,), len(recs),
                                            write_table(uri, to_table(recs, schema)))))
    new_open = None
    if records:
        uri = home.open_frame_file(flow, consumer, cut, uuid.uuid4().hex[:6])
        write_table(uri, to_table(records, schema))
        new_open = {"key": key, "file": uri, "records": len(records)}
    crashpoint("framing-before-commit")
    catalog.record_frames(flow, consumer, arrivals, new_incs, state, new_open, cut)
    if open_frame and (new_open is None or new_open["file"] != open_frame["file"]):
        fs.delete_quietly(open_frame["file"])
