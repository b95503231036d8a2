"""Statistics per operator and epoch, kept in the catalog.

A stage program may report what each of its operators did in an epoch (a series stage:
each per-segment view it computed and each answer it wrote): rows and bytes in and out,
and seconds. The controller records them in the catalog's ``operator_stats`` table in the
transaction that applies the epoch, so the history of a home's operators is queryable
with SQL beside its increments (docs/architecture.md, "The home on disk";
docs/series.md, "Statistics").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

TABLE = """
CREATE TABLE IF NOT EXISTS operator_stats (
    stage TEXT NOT NULL, epoch INTEGER NOT NULL, operator TEXT NOT NULL, segment INTEGER,
    rows_in INTEGER, rows_out INTEGER, bytes_in INTEGER, bytes_out INTEGER, seconds REAL,
    PRIMARY KEY (stage, epoch, operator));
"""


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


_COLUMNS = [f.name for f in fields(OperatorStats)]


def insert(db: sqlite3.Connection, stage: str, epoch: int,
           operators: Sequence[OperatorStats]) -> None:
    """Record ``operators`` of epoch ``epoch`` of ``stage`` (inside the caller's
    transaction; an epoch recorded again replaces its rows)."""
    db.executemany(
        f"INSERT OR REPLACE INTO operator_stats (stage, epoch, {', '.join(_COLUMNS)}) "
        f"VALUES (?, ?, {', '.join('?' * len(_COLUMNS))})",
        [(stage, epoch, *(getattr(o, c) for c in _COLUMNS)) for o in operators])


def select(db: sqlite3.Connection, stage: str, operators: Sequence[str] | None = None,
           last_epochs: int | None = None) -> list[dict[str, Any]]:
    """The recorded statistics of ``stage`` (of ``operators`` only, if given; of its
    ``last_epochs`` newest epochs, if given), oldest epoch first."""
    where = "stage = ?"
    args: list[Any] = [stage]
    if operators is not None:
        where += f" AND operator IN ({', '.join('?' * len(operators))})"
        args += list(operators)
    if last_epochs is not None:
        where += (" AND epoch > (SELECT coalesce(max(epoch), 0) FROM operator_stats "
                  "WHERE stage = ?) - ?")
        args += [stage, last_epochs]
    rows = db.execute(f"SELECT epoch, {', '.join(_COLUMNS)} FROM operator_stats "
                      f"WHERE {where} ORDER BY epoch, operator", args).fetchall()
    return [dict(zip(["epoch", *_COLUMNS], r, strict=True)) for r in rows]
