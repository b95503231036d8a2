"""Statistics per operator and epoch, kept in the catalog.

A stage program may report what each of its operators did in an epoch (a series stage:
each per-segment view it computed and each answer it wrote): rows and bytes in and out,
and seconds. The controller records them in the catalog's ``operator_stats`` table
(:meth:`strata.storage.catalog.Catalog.finish_epoch`, in the transaction that applies
the epoch), so the history of a home's operators is queryable with SQL beside its
increments (docs/architecture.md, "The home on disk";
docs/series.md, "Statistics").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class OperatorStats:
    """What one operator of a stage did in one epoch; None where it is not known.
    ``segment``: the stream's segment it worked on, for operators of a series stage."""

    operator: str
    segment: int | None = None
    rows_in: int | None = None
    rows_out: int | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OperatorStats:
        return cls(d["operator"], **{f.name: d.get(f.name) for f in fields(cls)
                                      if f.name != "operator"})


COLUMNS = [f.name for f in fields(OperatorStats)]  # in the catalog's table, in order
