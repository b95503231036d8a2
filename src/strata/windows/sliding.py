"""Sliding-window aggregation over panes in O(1) combines per slide.

A window is the combination of its panes. Sliding it adds the newest pane and removes
the oldest: with an invertible aggregate (:attr:`Algebra.invertible`) that is one
``combine`` and one ``uncombine`` (:class:`InvertibleWindow`); otherwise (``max``,
``min``, top-k) :class:`TwoStacks` keeps suffix aggregates of the older panes so that
a slide costs at most three combines amortized, instead of re-combining every pane.
Both count their calls (``combines``, ``uncombines``) for the benchmarks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class Algebra(Protocol[T]):
    """How pane aggregates combine: a monoid, with an inverse when ``invertible``."""

    @property
    def invertible(self) -> bool: ...

    def identity(self) -> T: ...

    def combine(self, a: T, b: T) -> T: ...

    def uncombine(self, a: T, b: T) -> T: ...


@dataclass
class Counted(Generic[T]):
    """An algebra that counts its calls."""

    inner: Any
    combines: int = 0
    uncombines: int = 0

    @property
    def invertible(self) -> bool:
        return bool(self.inner.invertible)

    def identity(self) -> T:
        return self.inner.identity()

    def combine(self, a: T, b: T) -> T:
        self.combines += 1
        return self.inner.combine(a, b)

    def uncombine(self, a: T, b: T) -> T:
        self.uncombines += 1
        return self.inner.uncombine(a, b)


class InvertibleWindow(Generic[T]):
    """The aggregate of the panes ``[lo, hi)``, slid by combine and uncombine."""

    def __init__(self, algebra: Algebra[T], pane: Callable[[int], T]) -> None:
        self.algebra, self.pane = algebra, pane
        self.lo = self.hi = 0
        self.value = algebra.identity()

    def query(self, lo: int, hi: int) -> T:
        """The aggregate of panes ``[lo, hi)`` (moving forward costs a combine per pane
        entering and an uncombine per pane leaving)."""
        a = self.algebra
        if lo < self.lo or lo >= self.hi or hi < self.hi:  # not a forward slide: restart
            self.lo = self.hi = lo
            self.value = a.identity()
        while self.hi < hi:
            self.value = a.combine(self.value, self.pane(self.hi))
            self.hi += 1
        while self.lo < lo:
            self.value = a.uncombine(self.value, self.pane(self.lo))
            self.lo += 1
        return self.value

    def changed(self, pane: int, delta: T) -> None:
        """Pane ``pane`` gained ``delta`` (late data)."""
        if self.lo <= pane < self.hi:
            self.value = self.algebra.combine(self.value, delta)


class TwoStacks(Generic[T]):
    """Two-Stacks sliding aggregation: the older panes on a *front* stack with suffix
    aggregates (rebuilt from the back stack when it empties), the newer on a *back* stack
    with one running aggregate. Evicting pops the front; a query combines the front's top
    with the back's aggregate."""

    def __init__(self, algebra: Algebra[T], pane: Callable[[int], T]) -> None:
        self.algebra, self.pane = algebra, pane
        self.lo = self.hi = 0
        self.front: list[T] = []  # suffix aggregates; top (end) = oldest pane's suffix
        self.back: deque[T] = deque()  # the newer panes, oldest first
        self.back_value = algebra.identity()

    def _push(self, value: T) -> None:
        self.back.append(value)
        self.back_value = self.algebra.combine(self.back_value, value)

    def _pop(self) -> None:
        if self.front:
            self.front.pop()
            return
        # flip: the back stack's panes become suffix aggregates, except the oldest, which
        # is the one evicted (its suffix, the whole stack, would be thrown away at once)
        a, acc = self.algebra, None
        for v in reversed(list(self.back)[1:]):
            acc = v if acc is None else a.combine(v, acc)
            self.front.append(acc)
        self.back.clear()
        self.back_value = a.identity()

    def query(self, lo: int, hi: int) -> T:
        """The aggregate of panes ``[lo, hi)``."""
        if lo < self.lo or lo >= self.hi or hi < self.hi:
            self.front, self.back = [], deque()
            self.back_value = self.algebra.identity()
            self.lo = self.hi = lo
        while self.hi < hi:
            self._push(self.pane(self.hi))
            self.hi += 1
        while self.lo < lo:
            self._pop()
            self.lo += 1
        if not self.front:
            return self.back_value
        if not self.back:
            return self.front[-1]
        return self.algebra.combine(self.front[-1], self.back_value)

    def changed(self, pane: int, delta: T) -> None:
        """Pane ``pane`` changed (late data): its stacks are rebuilt at the next query."""
        if self.lo <= pane < self.hi:
            self.lo = self.hi = 0
            self.front, self.back = [], deque()
            self.back_value = self.algebra.identity()


def slider(algebra: Algebra[T], pane: Callable[[int], T]) -> InvertibleWindow[T] | TwoStacks[T]:
    """The sliding aggregator for ``algebra``: invertible, or Two-Stacks."""
    return InvertibleWindow(algebra, pane) if algebra.invertible else TwoStacks(algebra, pane)
