"""A series' answer at an occurrence as it stands now: the answer the occurrence wrote,
with the changes corrections of its segments re-emitted since applied."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa

from strata.model.errors import StrataError
from strata.model.schema import to_arrow_schema
from strata.queries.plan import MULT
from strata.series.stored import (
    OCCURRENCE,
    changes_flow,
    epoch_occurrence,
    occurrence_epoch,
    segment_of,
)
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.increments import Increment, read_records
from strata.storage.manifest import StateDir


@dataclass(frozen=True)
class StoredAnswer:
    """Where a series' answer at one occurrence is stored: the increment the occurrence
    wrote, and the increments of the series' changes flow (rows of every occurrence,
    ``_occurrence`` saying which)."""

    occurrence: int
    schema: pa.Schema
    answer: Increment
    changes: tuple[Increment, ...]


def stored_answer(home: str | os.PathLike[str] | Home, name: str,
                  occurrence: int | None = None) -> StoredAnswer:
    """The files of series ``name``'s answer at ``occurrence`` (its newest segment;
    default: the newest occurrence answered), from the home's catalog."""
    layout = home if isinstance(home, Home) else Home(home)
    catalog = Catalog(layout.catalog_path)
    try:
        flows = catalog.flows()
        if name not in flows or not flows[name]["producer"]:
            when = _when_first(catalog, name, None)
            raise StrataError(f"series {name!r} has not answered an occurrence yet{when}"
                              if when else f"the home has no series {name!r} with answers "
                              "(`strata series list` lists the series)")
        state = StateDir(layout.stage(flows[name]["producer"])).current()
        answered = {s.epoch: s.increment for s in catalog.flow_increments(name)}
        changes = catalog.flow_increments(changes_flow(name)) \
            if changes_flow(name) in flows else []
        by_occurrence = {epoch_occurrence(state.state, e): e for e in answered}
        if occurrence is None and not by_occurrence:
            raise StrataError(f"series {name!r} has not answered an occurrence yet"
                              f"{_when_first(catalog, name, segment_of(state))}")
    finally:
        catalog.close()
    if occurrence is None:
        occurrence = max(by_occurrence)
    epoch = occurrence_epoch(state.state, occurrence)
    if epoch not in answered:
        known = sorted(by_occurrence)
        raise StrataError(f"series {name!r} has no stored answer at occurrence {occurrence} "
                          f"(segments read: 1–{segment_of(state)}; stored occurrences: "
                          f"{', '.join(map(str, known)) or 'none'})")
    return StoredAnswer(occurrence, to_arrow_schema(flows[name]["schema"]), answered[epoch],
                        tuple(s.increment for s in changes))


def _when_first(catalog: Catalog, name: str, read: int | None) -> str:
    """When registered series ``name`` first answers, for an error saying it has not yet
    (``read``: the segments its stage has read, if known); "" if it is not registered."""
    from strata.series.registry import find  # the registry imports the stage, which imports this

    try:
        program, series = find(catalog, name)
    except StrataError:
        return ""
    first = program.plans[series.name].schedule.first
    seen = "" if read is None else (f" (segments 1–{read} read)" if read
                                    else " (no segment read yet)")
    return (f": its occurrences are due from segment {first} of {program.stream!r} on{seen}; "
            "`strata run` answers those due among the segments it reads")


def series_answer(home: str | os.PathLike[str] | Home, name: str,
                  occurrence: int | None = None) -> tuple[int, pa.Table]:
    """The current answer of series ``name`` at ``occurrence`` (its newest segment;
    default: the newest occurrence answered), and that occurrence's number."""
    stored = stored_answer(home, name, occurrence)
    schema = stored.schema
    rows = read_records(stored.answer.files)
    net: Counter[tuple] = Counter(tuple(r[c] for c in schema.names) for r in rows)
    for inc in stored.changes:
        for r in read_records(inc.files):
            if r[OCCURRENCE] == stored.occurrence:
                net[tuple(r[c] for c in schema.names)] += r[MULT]
    records = [dict(zip(schema.names, key, strict=True)) for key, k in net.items()
               for _ in range(k)]
    return stored.occurrence, pa.Table.from_pylist(records, schema)
