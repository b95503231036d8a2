"""Which stage runs next: a pure decision over plain data (no catalog, no Spark).

The controller describes each stage with waiting input as a :class:`StageView`;
:func:`choose` applies each stage's runnability function and picks one: fewest epochs
first, then the one waiting longest, then by name; a stage whose outputs all still have
unread increments at every consumer (bottlenecked) waits while another stage can run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strata.model.errors import StrataError
from strata.model.runnability import Runnable, normalize


@dataclass(frozen=True)
class StageView:
    """What the scheduler needs to know of one stage."""

    name: str
    epochs: int  # epochs run so far
    waiting_since: float | None  # when its oldest waiting increment arrived
    queued: Mapping[str, Sequence[Any]]  # input flow -> framing keys waiting, oldest first
    runnable: Runnable
    runnable_state: Any
    bottlenecked: bool = False


@dataclass(frozen=True)
class Choice:
    """The stage to run and the waiting increments it reads and removes, per flow."""

    stage: str
    reads: dict[str, int]
    removes: dict[str, int]
    runnable_state: Any


def decide(view: StageView) -> Choice | None:
    """Apply ``view``'s runnability function; None if the stage may not run now."""
    if not any(view.queued.values()):
        return None
    try:
        reads, removes, state = view.runnable(view.queued, view.runnable_state)
    except Exception as e:  # noqa: BLE001 - a user's function: report it by stage
        raise StrataError(f"runnable of stage {view.name!r} raised {type(e).__name__}: "
                          f"{e}") from None
    reads, removes = normalize(reads), normalize(removes)
    for flow, n in {**reads, **removes}.items():
        if flow not in view.queued or n > len(view.queued[flow]):
            raise StrataError(
                f"runnable of stage {view.name!r} asked for {n} increment(s) of {flow!r} but "
                f"{len(view.queued.get(flow, []))} are waiting")
    if not reads:
        return None
    return Choice(view.name, reads, removes, state)


def choose(views: Sequence[StageView]) -> Choice | None:
    """The next stage to run, or None when nothing is runnable."""
    runnable = [(v, c) for v in views if (c := decide(v)) is not None]
    if not runnable:
        return None
    runnable.sort(key=lambda vc: (vc[0].epochs, _inf_if_none(vc[0].waiting_since), vc[0].name))
    free = [vc for vc in runnable if not vc[0].bottlenecked]
    return (free or runnable)[0][1]


def _inf_if_none(t: float | None) -> float:
    return float("inf") if t is None else t


def same_cycle(producer: str, consumer: str, readers: Mapping[str, Sequence[str]]) -> bool:
    """Can ``consumer``'s outputs lead back to ``producer``? ``readers`` maps each stage to
    the stages that read its outputs."""
    if producer == consumer:
        return True
    seen, todo = {consumer}, [consumer]
    while todo:
        for nxt in readers.get(todo.pop(), []):
            if nxt == producer:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False
