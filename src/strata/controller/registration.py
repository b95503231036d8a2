"""Registering a dataflow in a home: its flows, connectors and stages in the catalog."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError
from strata.model.schema import same_columns, to_ddl
from strata.physical.fusion import PhysicalStage
from strata.physical.registration import attach
from strata.storage.catalog import Catalog


def attach_registered_stages(dataflow: Dataflow, catalog: Catalog) -> None:
    """Add the stages registered in the home (``strata query``) to ``dataflow``, compiled
    as they were registered."""
    legacy = [q for q in catalog.legacy_queries() if q not in dataflow.stages]
    if legacy:
        raise StrataError(
            f"this home has queries registered by an older strata as SQL text: "
            f"{', '.join(legacy)}; register each again with `strata query --replace --name "
            "NAME SQL --home HOME`")
    for reg in catalog.registered_stages():
        if reg.name not in dataflow.stages:
            attach(dataflow, reg)


def register(catalog: Catalog, home: str, dataflow: Dataflow,
             units: Mapping[str, PhysicalStage]) -> None:
    """Record the dataflow's stored flows, connectors and stages, unless the catalog has
    them already; a flow whose schema changed is an error."""
    # flows that exist only inside a fused job: never stored, so not registered
    hidden = {f for u in units.values() for c in u.fusion.pre.values()
              for s in c for f in s.output_names}
    hidden |= {f for u in units.values() for c in u.fusion.post.values()
               for s in c for f in s.input_names}
    producer = {f: u.stage.name for u in units.values() for f in u.output_flows}
    flows = [(f.name, to_ddl(f.schema), producer.get(f.name, f.producer), f.external)
             for f in dataflow.flows.values() if f.name not in hidden]
    fingerprint = hashlib.sha256(json.dumps(sorted(flows)).encode()).hexdigest()[:16]
    known = catalog.flows()
    for name, ddl, _, _ in flows:
        # NOT NULL comes and goes with the stages that need a value (Dataflow.stage)
        if name in known and not same_columns(known[name]["schema"], ddl):
            raise StrataError(
                f"flow {name!r} in home {home} has schema {known[name]['schema']!r} "
                f"but the dataflow declares {ddl!r}; use a new home or keep the schema"
            )
    connectors = [(f, name) for name, u in units.items() for f in u.input_flows]
    if (catalog.get_meta("fingerprint") != fingerprint
            or set(connectors) - set(catalog.connectors())):
        catalog.register(flows, connectors, list(units), fingerprint)
