"""A series' answer at an occurrence as it stands now: the answer the occurrence wrote,
with the changes corrections of its segments re-emitted since applied."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa

from strata.model.errors import StrataError
from strata.model.schema import to_arrow_schema
from strata.queries.expressions import MULT
from strata.series.corrections import OCCURRENCE, changes_flow
from strata.series.stored import epoch_occurrence, occurrence_epoch, segment_of
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.increments import read_records
from strata.storage.manifest import StateDir


def series_answer(home: str | os.PathLike[str] | Home, name: str,
                  occurrence: int | None = None) -> tuple[int, pa.Table]:
    """The current answer of series ``name`` at ``occurrence`` (its newest segment;
    default: the newest occurrence answered), and that occurrence's number."""
    layout = home if isinstance(home, Home) else Home(home)
    catalog = Catalog(layout.catalog_path)
    try:
        flows = catalog.flows()
        if name not in flows or not flows[name]["producer"]:
            raise StrataError(f"the home has no series {name!r} with answers (`strata series "
                              "list` lists the series)")
        state = StateDir(layout.stage(flows[name]["producer"])).current()
        answered = {s.epoch: s.increment for s in catalog.flow_increments(name)}
        changes = catalog.flow_increments(changes_flow(name)) \
            if changes_flow(name) in flows else []
    finally:
        catalog.close()
    by_occurrence = {epoch_occurrence(state.state, e): e for e in answered}
    if occurrence is None:
        if not by_occurrence:
            raise StrataError(f"series {name!r} has not answered an occurrence yet")
        occurrence = max(by_occurrence)
    epoch = occurrence_epoch(state.state, occurrence)
    if epoch not in answered:
        known = sorted(by_occurrence)
        raise StrataError(f"series {name!r} has no stored answer at occurrence {occurrence} "
                          f"(segments read: 1–{segment_of(state)}; stored occurrences: "
                          f"{', '.join(map(str, known)) or 'none'})")
    schema = to_arrow_schema(flows[name]["schema"])
    rows = read_records(answered[epoch].files)
    net: Counter[tuple] = Counter(tuple(r[c] for c in schema.names) for r in rows)
    for s in changes:
        for r in read_records(s.increment.files):
            if r[OCCURRENCE] == occurrence:
                net[tuple(r[c] for c in schema.names)] += r[MULT]
    records = [dict(zip(schema.names, key, strict=True)) for key, k in net.items()
               for _ in range(k)]
    return occurrence, pa.Table.from_pylist(records, schema)
