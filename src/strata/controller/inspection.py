"""Looking inside a home without running anything: what ``strata status`` and
``strata show`` print, as plain data. Reads the catalog and files only (no Spark, no
dataflow)."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from strata.model.errors import StrataError
from strata.model.schema import to_arrow_schema
from strata.physical.program import program_class, read_answer, read_state
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.manifest import StateDir


def open_home(home: str | os.PathLike[str] | Home) -> Home:
    """The home at ``home``; a StrataError if no dataflow was registered there."""
    layout = Home(home)
    if not layout.exists():
        where = layout.root if layout.catalog is None else \
            f"{layout.root} --catalog {layout.catalog}"
        raise StrataError(f"no strata home at {where}; `strata run PIPELINE --home {where}` "
                          "creates one")
    return layout


def collect_status(home: Home) -> dict[str, Any]:
    """Everything ``strata status`` shows, as plain data."""
    catalog = Catalog(home.catalog_path)
    try:
        stages = []
        for name in catalog.stages():
            row = catalog.stage_row(name)
            snap = StateDir(home.stage(name)).current()
            stages.append({
                "stage": name, "epochs": row.epochs, "state_epoch": snap.epoch,
                "state_bytes": snap.state_bytes, "kind": snap.kind or None,
                "mode": snap.state.get("mode"), "partitions": snap.num_partitions or None,
                "last_run": row.last_run, "waiting_since": row.waiting_since,
                "summary": program_class(snap).summary(home.stage(name), snap)
                if snap.epoch else None,
            })
        connectors = []
        for flow, consumer in catalog.connectors():
            framed = catalog.queue(flow, consumer, framed=True)
            raw = catalog.queue(flow, consumer, framed=False)
            _, open_frame, _ = catalog.framing(flow, consumer)
            connectors.append({
                "flow": flow, "consumer": consumer,
                "queued": len(framed) + len(raw),
                "queued_records": sum(q.increment.records for q in framed + raw),
                "framed": len(framed), "framed_records": sum(q.increment.records for q in framed),
                "unframed": len(raw), "unframed_records": sum(q.increment.records for q in raw),
                "open_frame_records": open_frame["records"] if open_frame else 0,
            })
        consumed = {f for f, _ in catalog.connectors()}
        flows = catalog.flows()
        terminal = []
        for name, info in flows.items():
            if name in consumed or info["external"]:
                continue
            incs = catalog.flow_increments(name)
            terminal.append({
                "flow": name, "producer": info["producer"], "increments": len(incs),
                "records": sum(s.increment.records for s in incs),
                "bytes": sum(s.increment.bytes for s in incs),
                "epochs": [s.epoch for s in incs],
            })
        # files ingested by reference that stored increments still list: strata reads
        # them in place, so they must stay as they are until these are consumed
        referenced = [{"flow": name, "increment": s.epoch, "file": f}
                      for name, info in flows.items() if info["external"]
                      for s in catalog.flow_increments(name) for f in s.increment.files
                      if not home.owns(f)]
        unfinished = [{"stage": s, "epoch": e} for _, s, e, _ in catalog.unapplied()]
        inputs = sorted(n for n, f in flows.items() if f["external"])
    finally:
        catalog.close()
    return {"home": home.root, "stages": stages, "connectors": connectors,
            "terminal_flows": terminal, "external_inputs": inputs,
            "referenced_files": referenced,
            "unfinished_epochs": unfinished}


def state_records(home: Home, stage: str) -> tuple[int, list[dict]]:
    """A stage's committed state records and its epoch, read from files."""
    layout = home.stage(stage)
    snap = StateDir(layout).current()
    return snap.epoch, read_state(layout, snap)


def read_records_of(home: Home, target: str, epoch: int | None = None,
                    all_: bool = False) -> tuple[str, list[dict]]:
    """:func:`read_table_of` as records."""
    title, table = read_table_of(home, target, epoch, all_)
    return title, table.to_pylist()


def read_table_of(home: Home, target: str, epoch: int | None = None,
                  all_: bool = False) -> tuple[str, pa.Table]:
    """What ``strata show TARGET`` prints, with a title: a flow's newest stored increment
    (or the one from ``epoch``, or ``all_`` of them, each record with its ``_epoch``:
    the producer's epoch or the ingest number), a query's current answer (TARGET is
    its name), or a stage's state (``STAGE.state``)."""
    catalog = Catalog(home.catalog_path)
    try:
        flows, stages = catalog.flows(), catalog.stages()
        if target.endswith(".state"):
            stage = target[: -len(".state")]
            if stage not in stages:
                raise StrataError(f"home has no stage {stage!r} (stages: "
                                  f"{', '.join(stages) or 'none'})")
            if all_:
                raise StrataError("--all does not apply to state: only the current state is "
                                  "kept")
            current, recs = state_records(home, stage)
            if epoch is not None and epoch != current:
                raise StrataError(f"stage {stage!r} keeps only its current state (epoch "
                                  f"{current}), not epoch {epoch}")
            return f"state of {stage} after epoch {current}", pa.Table.from_pylist(recs)
        if target in stages and target not in flows:
            snap = StateDir(home.stage(target)).current()
            if snap.kind == "query":
                if all_ or epoch is not None:
                    raise StrataError(f"{target!r} is a query: only its current answer is "
                                      f"kept (its changes are the flow {target}_changes)")
                return (f"answer of query {target} after epoch {snap.epoch}",
                        read_answer(home.stage(target), snap))
        if target not in flows:
            raise StrataError(
                f"home has no flow {target!r}; flows: {', '.join(sorted(flows)) or 'none'}; "
                f"stage states: {', '.join(s + '.state' for s in stages) or 'none'}")
        incs = catalog.flow_increments(target)
    finally:
        catalog.close()
    writer = "ingest" if flows[target]["external"] else "epoch"
    if not incs:
        raise StrataError(
            f"flow {target!r} has no stored increments (an increment is deleted once every "
            "consuming stage has read it; terminal flows keep theirs)")
    if epoch is not None:
        picked = [s for s in incs if s.epoch == epoch]
        if not picked:
            raise StrataError(f"flow {target!r} has no stored increment from {writer} "
                              f"{epoch}; stored: {', '.join(str(s.epoch) for s in incs)}")
    else:
        picked = incs if all_ else incs[-1:]
    schema = to_arrow_schema(flows[target]["schema"])
    tables = []
    for s in picked:
        t = pa.concat_tables([pq.read_table(f, schema=schema) for f in s.increment.files]
                             or [schema.empty_table()])
        if all_:  # records of several increments say which one they came from
            t = t.append_column("_epoch", pa.array([s.epoch] * t.num_rows, pa.int64()))
        tables.append(t)
    recs = pa.concat_tables(tables)
    eps = [s.epoch for s in picked]
    what = (f"{writer} {eps[0]}" if len(eps) == 1
            else f"{len(eps)} increments ({writer}s {eps[0]}–{eps[-1]})")
    return f"{target}, {what}", recs
