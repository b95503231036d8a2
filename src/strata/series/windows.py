"""Which segments an occurrence of a query series reads, and when it occurs.

A *stream* is a source flow whose increments are *segments*, numbered 1, 2, … in
arrival order. A series' query names tables; each table is bound to a run of
consecutive segments counted back from the occurrence's newest segment ``n``:
``Segments("log")`` is segment ``n``, ``Segments("log", last=7)`` is ``n-6 … n``,
``Segments("log", offset=-1)`` is ``n-1``. An occurrence is due at ``n`` when every
table's segments exist and ``n`` is a multiple of the period after the first such ``n``.
All of this is plain arithmetic on segment numbers (no Spark, no files).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strata.model.errors import StrataError

_SPEC = re.compile(r"^\s*(?P<stream>[A-Za-z_][\w.]*)\s*(\[\s*(?P<a>-?\d+)\s*"
                   r"(:\s*(?P<b>-?\d+)\s*)?\])?\s*$")


@dataclass(frozen=True, order=True)
class Segments:
    """A run of ``last`` consecutive segments of ``stream`` ending ``offset`` segments
    before an occurrence's newest one (``offset`` ≤ 0)."""

    stream: str
    last: int = 1
    offset: int = 0

    def __post_init__(self) -> None:
        if self.last < 1:
            raise StrataError(f"a window of {self.stream!r} needs at least one segment "
                              f"(last={self.last})")
        if self.offset > 0:
            raise StrataError(f"a window of {self.stream!r} cannot reach {self.offset} "
                              "segments past the newest one (offset must be ≤ 0)")

    def indices(self, newest: int) -> range:
        """The segment numbers this run covers when the newest segment is ``newest``."""
        end = newest + self.offset
        return range(end - self.last + 1, end + 1)

    @property
    def reach(self) -> int:
        """How many segments must exist for the run to be whole."""
        return self.last - self.offset

    def readers_of(self, segment: int) -> range:
        """The newest-segment numbers whose run contains ``segment``."""
        return range(segment - self.offset, segment - self.offset + self.last)

    def spec(self) -> str:
        """The run in the CLI's notation: ``log``, ``log[-1]``, ``log[-6:0]``."""
        if self.last == 1:
            return self.stream if self.offset == 0 else f"{self.stream}[{self.offset}]"
        return f"{self.stream}[{self.offset - self.last + 1}:{self.offset}]"

    @classmethod
    def parse(cls, text: str) -> Segments:
        """``log`` (the newest segment), ``log[-1]`` (the one before), ``log[-6:0]``
        (the newest seven)."""
        m = _SPEC.match(text)
        if not m:
            raise StrataError(f"segments {text!r}: write STREAM, STREAM[K] or STREAM[A:B] "
                              "with K, A ≤ B ≤ 0 counted from the newest segment (0)")
        a = int(m["a"]) if m["a"] is not None else 0
        b = int(m["b"]) if m["b"] is not None else a
        if a > b:
            raise StrataError(f"segments {text!r}: the range [{a}:{b}] is empty; write the "
                              "older end first")
        return cls(m["stream"], last=b - a + 1, offset=b)


@dataclass(frozen=True)
class Schedule:
    """When a series occurs: its tables' segment runs and its period in segments."""

    tables: Mapping[str, Segments]
    period: int = 1

    def __post_init__(self) -> None:
        if not self.tables:
            raise StrataError("a series reads at least one table of segments")
        if self.period < 1:
            raise StrataError(f"a series' period is at least one segment (not {self.period})")
        streams = {s.stream for s in self.tables.values()}
        if len(streams) > 1:
            raise StrataError(f"a series reads one stream; this one reads {sorted(streams)}")

    @property
    def stream(self) -> str:
        return next(iter(self.tables.values())).stream

    @property
    def first(self) -> int:
        """The newest-segment number of the first occurrence."""
        return max(s.reach for s in self.tables.values())

    def due(self, newest: int) -> bool:
        """Whether an occurrence is due when segment ``newest`` arrives."""
        return newest >= self.first and (newest - self.first) % self.period == 0

    def occurrences(self, segments: Iterable[int]) -> list[int]:
        """The occurrences (by newest segment) due among ``segments``."""
        return [n for n in segments if self.due(n)]

    def window(self, newest: int) -> dict[str, range]:
        """The segment numbers each table reads at the occurrence ``newest``."""
        return {t: s.indices(newest) for t, s in self.tables.items()}

    def last_reader(self, segment: int, table: str) -> int:
        """The newest-segment number of the last occurrence that reads ``segment``
        through ``table`` (0 if none does): after it the segment's views for that table
        may go."""
        due = [n for n in self.tables[table].readers_of(segment) if self.due(n)]
        return max(due, default=0)
