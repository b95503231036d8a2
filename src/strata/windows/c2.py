"""C2, the fidelity of a window result: which (source, pane) cells it includes.

Every window result carries a :class:`Scoreboard`: one :class:`Cell` per source and pane
of the window, saying whether that cell's data is in the result (with its record count),
known to be empty, shed, missing because its source failed, or not arrived yet. From it
follow the fraction of the whole, *spatial* completeness (the least fraction of sources
complete in any pane: "every pane from X% of sources") and *temporal* completeness (the
least fraction of panes complete from any source: "X% of the panes from every source"),
and the all-or-nothing forms the iMR dissertation names the other way round: the
fraction of sources complete in every pane (``whole_sources``, its temporal
completeness) and of panes complete from every source (``whole_panes``, its spatial).
A source's progress (the latest event time it sent) less the query's allowed disorder is
its boundary (a watermark): a pane it has passed is final — *data* or, without data,
*empty*, not *pending* — and the stage refuses records for it (``docs/windows.md``, "C2").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from strata.windows.panes import WindowId, window_panes

CellKey = tuple[str, int]  # (source, pane)


class Status(StrEnum):
    DATA = "data"  # records included; the source's watermark has passed the pane
    OPEN = "open"  # records included; the source may still send some for the pane
    EMPTY = "empty"  # the source's watermark passed the pane without data for it
    PENDING = "pending"  # not arrived yet
    SKIPPED = "skipped"  # records shed under load (a boundary pane)
    FAILED = "failed"  # the source was declared failed before finishing the pane

    @property
    def complete(self) -> bool:
        return self in (Status.DATA, Status.EMPTY)


@dataclass(frozen=True)
class Cell:
    status: Status
    records: int = 0  # the records of the cell the result includes
    shed: int = 0  # records of the cell dropped by load shedding


@dataclass(frozen=True)
class Scoreboard:
    """The C2 of window ``window``: a cell per (source, pane)."""

    window: WindowId
    cells: Mapping[CellKey, Cell]

    @cached_property
    def sources(self) -> list[str]:
        return sorted({s for s, _ in self.cells})

    @cached_property
    def panes(self) -> list[int]:
        return sorted({p for _, p in self.cells})

    @property
    def total(self) -> int:
        return len(self.cells)

    @cached_property
    def complete(self) -> int:
        return sum(c.status.complete for c in self.cells.values())

    @cached_property
    def records(self) -> int:
        return sum(c.records for c in self.cells.values())

    @property
    def fraction(self) -> float:
        return self.complete / self.total if self.total else 1.0

    @cached_property
    def spatial(self) -> float:
        """The least fraction of sources complete in any one pane."""
        return self._least(by_pane=True)

    @cached_property
    def temporal(self) -> float:
        """The least fraction of panes complete from any one source."""
        return self._least(by_pane=False)

    @cached_property
    def whole_sources(self) -> float:
        """The fraction of sources complete in every pane (the dissertation's *temporal
        completeness*: X% of the sources process 100% of the panes)."""
        return self._whole(by_pane=False)

    @cached_property
    def whole_panes(self) -> float:
        """The fraction of panes complete from every source (the dissertation's *spatial
        completeness*: X% of the panes hold data from 100% of the sources)."""
        return self._whole(by_pane=True)

    def _whole(self, by_pane: bool) -> float:
        done: dict = {}
        for (s, p), c in self.cells.items():
            key = p if by_pane else s
            done[key] = done.get(key, True) and c.status.complete
        return sum(done.values()) / len(done) if done else 1.0

    def _least(self, by_pane: bool) -> float:
        done: dict = {}
        for (s, p), c in self.cells.items():
            n, d = done.get(p if by_pane else s, (0, 0))
            done[p if by_pane else s] = (n + 1, d + c.status.complete)
        return min((d / n for n, d in done.values()), default=1.0)

    def count(self, status: Status) -> int:
        return sum(c.status is status for c in self.cells.values())

    @property
    def included(self) -> set[CellKey]:
        return {k for k, c in self.cells.items() if c.records}

    def summary(self) -> str:
        """One line: ``C2 46/48 (95.8%), spatial 0.75, temporal 0.92; 2 pending``."""
        rest = [f"{n} {s.value}" for s in (Status.OPEN, Status.PENDING, Status.SKIPPED,
                                            Status.FAILED) if (n := self.count(s))]
        return (f"C2 {self.complete}/{self.total} ({self.fraction:.1%}), spatial "
                f"{self.spatial:.2f}, temporal {self.temporal:.2f}"
                + (f"; {', '.join(rest)}" if rest else ""))

    def to_rows(self) -> list[dict]:
        return [{"source": s, "pane": p, "status": c.status.value, "records": c.records,
                 "shed": c.shed} for (s, p), c in sorted(self.cells.items())]

    @classmethod
    def from_rows(cls, window: WindowId, rows: Iterable[Mapping]) -> Scoreboard:
        return cls(window, {(r["source"], r["pane"]): Cell(Status(r["status"]), r["records"],
                                                         r["shed"]) for r in rows})


def scoreboard(window: WindowId, width: int, sources: Iterable[str],
               records: Mapping[CellKey, int], progress: Mapping[str, int],
               shed: Mapping[CellKey, int], failed: Iterable[str], disorder: int = 0
               ) -> Scoreboard:
    """The C2 of ``window`` from the cells' record counts, each source's progress (the
    latest event time it sent), the records shed per cell and the failed sources. A
    cell is complete once its source's progress has passed the pane's end by
    ``disorder`` (the allowed disorder)."""
    failed = set(failed)
    cells: dict[CellKey, Cell] = {}
    for s in sources:
        for p in window_panes(window):
            n, dropped = records.get((s, p), 0), shed.get((s, p), 0)
            past = progress.get(s, -(2 ** 62)) >= (p + 1) * width + disorder
            if dropped:
                status = Status.SKIPPED
            elif past:
                status = Status.DATA if n else Status.EMPTY
            elif s in failed:  # what it sent of the pane is included, the rest is not
                status = Status.FAILED
            else:
                status = Status.OPEN if n else Status.PENDING
            cells[(s, p)] = Cell(status, n, dropped)
    return Scoreboard(window, cells)
