"""When a window's result goes out, which sources count as failed, and what to shed.

These are pure decisions over plain data (``docs/windows.md``, "Eviction" and "Load
shedding"), tested without Spark. Times are event times in the column's units; *now* is
the stream's time: the latest event time any source has sent.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strata.model.errors import StrataError
from strata.windows.c2 import CellKey, Scoreboard, Status

FIDELITY_KINDS = ("fraction", "spatial", "temporal", "whole_sources", "whole_panes")
SHED_KINDS = ("random", "spatial", "temporal")
EWMA_ALPHA = 0.8  # the weight of the newest observation, as in the iMR dissertation


@dataclass(frozen=True)
class Fidelity:
    """A C2 spec: ``fraction`` of all cells, ``spatial`` (every pane from this share of
    the sources) or ``temporal`` (this share of the panes from every source), or the
    dissertation's all-or-nothing forms: ``whole_sources`` (this share of the sources
    complete in every pane) and ``whole_panes`` (this share of the panes complete from
    every source)."""

    kind: str
    at_least: float

    def __post_init__(self) -> None:
        if self.kind not in FIDELITY_KINDS or not 0 < self.at_least <= 1:
            raise StrataError(f"a fidelity spec is one of {FIDELITY_KINDS} with a share in "
                              f"(0, 1], not {self.kind} {self.at_least}")

    def met(self, board: Scoreboard) -> bool:
        return getattr(board, self.kind) >= self.at_least - 1e-12


@dataclass(frozen=True)
class Eviction:
    """When a window's result is emitted (whichever comes first):

    * every cell is complete;
    * *latency*: ``deadline`` after the window's end (stream time);
    * *fidelity*: its C2 meets ``fidelity``;
    * *failure*: a source silent for ``failure_timeout`` is declared failed, and the
      result goes out when every cell of the other sources is complete.

    Cells that arrive after a result went out refine it (changes ``_mult`` −1/+1) until
    ``lateness`` after the window's end; later ones are dropped and counted."""

    deadline: int | None = None
    fidelity: Fidelity | None = None
    failure_timeout: int | None = None
    lateness: int = 0

    def describe(self) -> str:
        parts = [f"latency {self.deadline}" if self.deadline is not None else "",
                 f"fidelity {self.fidelity.kind} ≥ {self.fidelity.at_least:g}"
                 if self.fidelity else "",
                 f"failure after {self.failure_timeout}" if self.failure_timeout is not None
                 else ""]
        return ", ".join(p for p in parts if p) or "complete results only"


def failed_sources(progress: Mapping[str, int], sources: list[str], now: int, start: int,
                   timeout: int | None) -> set[str]:
    """The sources silent for longer than ``timeout``: whose latest event time (for one
    never heard from, the stream's ``start``) is more than ``timeout`` before ``now``."""
    if timeout is None:
        return set()
    return {s for s in sources if now - progress.get(s, start) > timeout}


def closed_cells(cells: Iterable[CellKey], progress: Mapping[str, int],
                 named: Iterable[str], width: int, disorder: int, sealed: int | None
                 ) -> set[CellKey]:
    """The cells of ``cells`` that are final already, whose records the stage refuses:
    of a source whose progress (before this increment) has passed the pane's end by the
    allowed ``disorder`` (every scoreboard since has called the cell complete), or of a
    source neither named nor heard from before, for a pane before ``sealed`` (the end
    pane of the latest result published complete, whose scoreboard did not list it)."""
    named = set(named)
    out = set()
    for s, p in cells:
        if s in progress:
            if progress[s] >= (p + 1) * width + disorder:
                out.add((s, p))
        elif s not in named and sealed is not None and p < sealed:
            out.add((s, p))
    return out


def emit_reason(board: Scoreboard, window_end: int, now: int, policy: Eviction) -> str | None:
    """Why the window's result goes out now, or None to keep waiting."""
    statuses = [c.status for c in board.cells.values()]
    if all(s.complete for s in statuses):
        return "complete"
    if policy.deadline is not None and now >= window_end + policy.deadline:
        return "deadline"
    if policy.fidelity is not None and policy.fidelity.met(board):
        return "fidelity"
    if Status.FAILED in statuses and all(
            s.complete or s in (Status.FAILED, Status.SKIPPED) for s in statuses):
        return "failure"
    if Status.SKIPPED in statuses and all(
            s.complete or s is Status.SKIPPED for s in statuses):
        return "shed"  # waiting cannot bring shed cells back
    return None


@dataclass
class Ewma:
    """An exponentially weighted moving average biased to recent observations."""

    value: float | None = None
    alpha: float = EWMA_ALPHA

    def update(self, observed: float) -> float:
        self.value = observed if self.value is None else (
            self.alpha * observed + (1 - self.alpha) * self.value)
        return self.value


def plan_shedding(rows: Mapping[CellKey, int], seconds_per_row: float | None,
                  budget_seconds: float, kind: str, seed: int) -> set[CellKey]:
    """The cells to shed so that the rest fits ``budget_seconds`` at the estimated
    ``seconds_per_row``; none while there is no estimate yet. ``kind`` keeps C2's shape:
    ``random`` cells, whole sources (``spatial``: every pane from the kept sources) or
    the newest panes of every source alike (``temporal``: a share of every source's
    panes). Deterministic for a seed."""
    if kind not in SHED_KINDS:
        raise StrataError(f"load shedding is {', '.join(SHED_KINDS)}, not {kind!r}")
    total = sum(rows.values())
    if not seconds_per_row or total * seconds_per_row <= budget_seconds:
        return set()
    allowed = budget_seconds / seconds_per_row
    rng = random.Random(seed)
    cells = sorted(rows)
    if kind == "random":
        rng.shuffle(cells)
        order = cells
    elif kind == "spatial":
        sources = sorted({s for s, _ in cells})
        rng.shuffle(sources)
        order = [c for s in sources for c in cells if c[0] == s]
    else:  # temporal: keep every source's oldest panes, shed the newest round-robin
        by_source: dict[str, list[CellKey]] = {}
        for c in cells:
            by_source.setdefault(c[0], []).append(c)
        order = []
        depth = max((len(v) for v in by_source.values()), default=0)
        for i in range(depth):
            order += [v[i] for v in by_source.values() if i < len(v)]
    kept, used = set(), 0
    for c in order:
        if used + rows[c] > allowed:
            if kind != "random":
                break
            continue
        kept.add(c)
        used += rows[c]
    return set(rows) - kept
