"""Runnability: may a stage run now, and which waiting increments does it read and remove?

A runnability function is called as ``runnable(framing_keys, state)`` where
``framing_keys`` maps each input flow to the framing keys of its waiting increments
(oldest first) and ``state`` is the function's own state (``None`` at first). It
returns ``(reads, removes, state)``: ``reads`` maps flows to how many increments to
read (a set means one each), ``removes`` the same for removal. Reading without
removing keeps an increment for the next epoch (a static lookup table). An empty
``reads`` means "not runnable". The returned state is kept only if the stage runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

FramingKeys = Mapping[str, Sequence[Any]]
Decision = tuple[Mapping[str, int] | set[str], Mapping[str, int] | set[str], Any]
Runnable = Callable[[FramingKeys, Any], Decision]


def runnable_all(required: Sequence[str]) -> Runnable:
    """RunnableAll: run when every flow in ``required`` has an increment; read and remove
    the oldest increment of every input that has one."""

    def decide(keys: FramingKeys, state: Any) -> Decision:
        if not all(keys.get(f) for f in required):
            return set(), set(), state
        ready = {f for f, ks in keys.items() if ks}
        return ready, ready, state

    return _named(decide, f"runnable_all({', '.join(required)})")


def runnable_any(keys: FramingKeys, state: Any) -> Decision:
    """Run when any input has an increment; read and remove one from each that has."""
    ready = {f for f, ks in keys.items() if ks}
    return ready, ready, state


def synchronized(a: str, b: str) -> Runnable:
    """Keep two inputs in step by framing key (e.g. the same hour of two crawls).

    Runnable when both have an increment: equal keys are read together; otherwise
    only the smaller key is read, so a gap in one input does not desynchronize them.
    """

    def decide(keys: FramingKeys, state: Any) -> Decision:
        ka, kb = keys.get(a) or [], keys.get(b) or []
        if not ka or not kb:
            return set(), set(), state
        if ka[0] == kb[0]:
            return {a, b}, {a, b}, state
        first = a if ka[0] < kb[0] else b
        return {first}, {first}, state

    return _named(decide, f"synchronized({a}, {b})")


def prefer(weights: Mapping[str, int]) -> Runnable:
    """Read inputs in proportion to ``weights`` (e.g. ``{"queries": 4, "updates": 1}``):
    each epoch reads one increment of one flow, taking the flow furthest behind its
    share among those that have an increment."""

    def decide(keys: FramingKeys, state: Any) -> Decision:
        counts = dict(state or dict.fromkeys(weights, 0))
        ready = [f for f in weights if keys.get(f)]
        if not ready:
            return set(), set(), state
        pick = min(ready, key=lambda f: (counts[f] / weights[f], -weights[f]))
        counts[pick] += 1
        return {pick}, {pick}, counts

    return _named(decide, "prefer(" + ", ".join(f"{f}={w}" for f, w in weights.items()) + ")")


def lookup_table(table: str, stream: str) -> Runnable:
    """Run per increment of ``stream``; read every increment of ``table`` (the lookup
    table is all of them together) without removing any, so each epoch sees it all."""

    def decide(keys: FramingKeys, state: Any) -> Decision:
        t, s = keys.get(table) or [], keys.get(stream) or []
        if not t or not s:
            return set(), set(), state
        return {stream: 1, table: len(t)}, {stream: 1}, state

    return _named(decide, f"lookup_table({table}, {stream})")


def _named(fn: Runnable, name: str) -> Runnable:
    """Give a returned rule a readable name (for graphs and error messages)."""
    fn.__name__ = fn.__qualname__ = name
    return fn


def normalize(spec: Mapping[str, int] | set[str] | Sequence[str]) -> dict[str, int]:
    """``{flow: count}`` from a set/list of flows or a mapping."""
    if isinstance(spec, Mapping):
        return {f: int(n) for f, n in spec.items() if n}
    return dict.fromkeys(spec, 1)


class sliding:  # a rule, named like the functions above
    """Run once per new increment of ``flow``, reading it together with the ``keep``
    increments read before it, which stay queued (a window of raw segments the stage can
    go back to); older ones are removed. With ``side`` (a flow of corrections to what was
    read), an epoch with no new increment of ``flow`` reads every waiting increment of
    ``side``, with the kept ones, and removes the side's. A class, not a closure, so that
    a stage using it can be registered compiled (pickled) in a home."""

    def __init__(self, flow: str, keep: int, side: str | None = None) -> None:
        if keep < 0:
            raise ValueError(f"sliding({flow!r}): keep must be ≥ 0, not {keep}")
        self.flow, self.keep, self.side = flow, keep, side
        extra = f", side={side}" if side else ""
        self.__name__ = self.__qualname__ = f"sliding({flow}, keep={keep}{extra})"

    def __call__(self, keys: FramingKeys, state: Any) -> Decision:
        waiting = len(keys.get(self.flow) or [])
        kept = min(state or 0, waiting)  # increments read before and still queued
        if waiting <= kept:
            side: str | None = getattr(self, "side", None)  # pickled before sides: none
            corrections = len(keys.get(side) or []) if side else 0
            if side is None or not corrections:
                return set(), set(), state
            return {self.flow: kept, side: corrections}, {side: corrections}, kept
        drop = max(0, kept + 1 - self.keep)
        return {self.flow: kept + 1}, ({self.flow: drop} if drop else {}), kept + 1 - drop
