"""When a window's result goes out, which sources count as failed, and what to shed.

These are pure decisions over plain data (``docs/windows.md``, "Eviction" and "Load
shedding"), tested without Spark. Times are event times in the column's units; *now* is
the stream's time: the latest event time any source has sent.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from strata.model.errors import StrataError
from strata.windows.c2 import CellKey, Scoreboard, Status

FIDELITY_KINDS = ("fraction", "spatial", "temporal", "whole_sources", "whole_panes")
SHED_KINDS = ("random", "spatial", "temporal")
COST_SAMPLES = 8  # the recent epochs the cost model is fitted to
ALIKE = 0.1  # epochs whose sizes differ by less (a share of the largest) are alike


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


@dataclass(frozen=True)
class EpochCost:
    """An epoch's seconds as ``fixed + per_row × rows``: what it pays whatever it
    aggregates (its jobs' start, the cell statistics, the results) and what each record
    it aggregates adds. Shedding can only buy back the second part."""

    fixed: float
    per_row: float

    def seconds(self, rows: float) -> float:
        return self.fixed + self.per_row * rows


def fit_cost(samples: Sequence[Sequence[float]]) -> EpochCost | None:
    """The cost model of recent epochs' ``(rows aggregated, seconds)``: least squares,
    both terms non-negative. Epochs of alike sizes cannot tell the terms apart: then all
    of it is taken per row (an estimate that sheds more, so that the next epoch, smaller,
    tells them apart). None before any epoch aggregated a record."""
    xs, ys = [float(x) for x, _ in samples], [float(y) for _, y in samples]
    if not xs or max(xs) <= 0:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    if max(xs) - min(xs) < ALIKE * max(xs):
        return EpochCost(0.0, my / mx)
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
             / sum((x - mx) ** 2 for x in xs))
    if slope <= 0:  # records cost nothing measurable beside the noise
        return EpochCost(my, 0.0)
    if my - slope * mx < 0:  # through the origin
        return EpochCost(0.0, sum(x * y for x, y in zip(xs, ys, strict=True))
                         / sum(x * x for x in xs))
    return EpochCost(my - slope * mx, slope)


def plan_shedding(rows: Mapping[CellKey, int], cost: EpochCost | None,
                  budget_seconds: float, kind: str, seed: int) -> set[CellKey]:
    """The cells to shed so that the rest fits ``budget_seconds`` by the epoch ``cost``
    model; none while there is no model yet, and none when its fixed part alone exceeds
    the budget (shedding could not meet it, and would lose every record for nothing).
    ``kind`` keeps C2's shape: ``random`` cells, whole sources (``spatial``: every pane
    from the kept sources) or the newest panes of every source alike (``temporal``: a
    share of every source's panes). Deterministic for a seed."""
    if kind not in SHED_KINDS:
        raise StrataError(f"load shedding is {', '.join(SHED_KINDS)}, not {kind!r}")
    total = sum(rows.values())
    if cost is None or cost.seconds(total) <= budget_seconds or cost.fixed >= budget_seconds:
        return set()
    allowed = (budget_seconds - cost.fixed) / cost.per_row
    rng = random.Random(seed)
    cells = sorted(rows)
    if kind == "random":  # random cells of every pane alike, so that no window loses most
        by_pane = _grouped(cells, 1)
        for v in by_pane:
            rng.shuffle(v)
        order = _round_robin(by_pane)
    elif kind == "spatial":
        sources = sorted({s for s, _ in cells})
        rng.shuffle(sources)
        order = [c for s in sources for c in cells if c[0] == s]
    else:  # temporal: keep every source's oldest panes, shed the newest round-robin
        order = _round_robin(_grouped(cells, 0))
    kept, used = set(), 0
    for c in order:
        if used + rows[c] > allowed:
            if kind != "random":
                break
            continue
        kept.add(c)
        used += rows[c]
    return set(rows) - kept


def _grouped(cells: list[CellKey], part: int) -> list[list[CellKey]]:
    """``cells`` (sorted) grouped by their source (``part`` 0) or pane (1), in order."""
    groups: dict[object, list[CellKey]] = {}
    for c in cells:
        groups.setdefault(c[part], []).append(c)
    return list(groups.values())


def _round_robin(lists: list[list[CellKey]]) -> list[CellKey]:
    """The first of every list, then the second of every list, and so on."""
    depth = max((len(v) for v in lists), default=0)
    return [v[i] for i in range(depth) for v in lists if i < len(v)]
