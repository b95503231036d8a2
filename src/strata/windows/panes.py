"""Panes: the time axis of a windowed query cut into slices of width gcd(range, slide).

A window of ``range`` sliding every ``slide`` is the union of ``range / width`` panes;
window *k* covers panes ``[k·s, k·s + r)`` where ``s`` and ``r`` are the slide and range
in panes. Records are aggregated once into their pane (``docs/windows.md``), and every
window is assembled from panes, never from records.

Times are integers in the event-time column's *units*: microseconds since the epoch for
a ``timestamp`` column, the column's own value for an integral one.
"""

from __future__ import annotations

import builtins
import math
import re
from dataclasses import dataclass

from strata.model.errors import StrataError

_UNITS = {"microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60, "hour": 3600,
          "day": 86400, "week": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+?)s?\s*$")


def parse_duration(text: str | int, time_type: str, allow_zero: bool = False) -> int:
    """``'5 minutes'`` (or a number, in the column's units) in the column's units."""
    if isinstance(text, int) or str(text).strip().isdigit():
        value = int(text)
    else:
        m = _DURATION.match(str(text).lower())
        if not m or m.group(2) not in _UNITS:
            raise StrataError(f"cannot read the duration {text!r}: write e.g. '5 minutes', "
                              f"'1 hour' or a whole number (units: {', '.join(_UNITS)})")
        if time_type != "timestamp":
            raise StrataError(f"duration {text!r} needs a timestamp column; the event-time "
                              f"column is {time_type}: give a whole number in its units")
        value = round(int(m.group(1)) * _UNITS[m.group(2)] * 1_000_000)
    if value < 0 or value == 0 and not allow_zero:
        raise StrataError(f"a duration must be positive, not {text!r}" if not allow_zero
                          else f"a duration cannot be negative: {text!r}")
    return value


def time_sql(column: str, time_type: str) -> str:
    """Spark SQL of the event time of a row, in the column's units."""
    if time_type == "timestamp":
        return f"unix_micros(`{column}`)"
    if time_type in ("tinyint", "smallint", "int", "bigint"):
        return f"CAST(`{column}` AS bigint)"
    raise StrataError(f"the event-time column {column!r} is {time_type}: it must be a "
                      "timestamp or a whole number")


WindowId = tuple[int, int]  # a window: its first pane and its number of panes


@dataclass(frozen=True)
class Panes:
    """A window's range and slide and the panes they cut the time axis into: of width
    gcd(range, slide), or ``shared``, a width dividing both (windows of several ranges
    and slides over one pane store)."""

    range: int
    slide: int
    shared: int | None = None

    def __post_init__(self) -> None:
        if self.range < self.slide:
            raise StrataError(f"a window's range ({self.range}) is shorter than its slide "
                              f"({self.slide}): records between windows would be lost")
        if self.shared is not None and (self.range % self.shared or self.slide % self.shared):
            raise StrataError(f"pane width {self.shared} does not divide range {self.range} "
                              f"and slide {self.slide}")

    @property
    def width(self) -> int:
        return self.shared or math.gcd(self.range, self.slide)

    def window_id(self, k: int) -> WindowId:
        """Window ``k`` as its first pane and number of panes."""
        return (k * self.per_slide, self.per_window)

    @property
    def per_window(self) -> int:
        return self.range // self.width

    @property
    def per_slide(self) -> int:
        return self.slide // self.width

    def pane_of(self, t: int) -> int:
        return t // self.width

    def pane_start(self, pane: int) -> int:
        return pane * self.width

    def pane_end(self, pane: int) -> int:
        return (pane + 1) * self.width

    def window_panes(self, k: int) -> builtins.range:  # the field `range` hides the type
        """The panes of window ``k``."""
        first = k * self.per_slide
        return range(first, first + self.per_window)

    def window_start(self, k: int) -> int:
        return self.pane_start(k * self.per_slide)

    def window_end(self, k: int) -> int:
        return self.window_start(k) + self.range

    def windows_of_pane(self, pane: int) -> builtins.range:
        """The windows that include ``pane``: k·s ≤ pane < k·s + r (in panes)."""
        return range(-((self.per_window - 1 - pane) // self.per_slide),
                     pane // self.per_slide + 1)


def shared_width(specs: list[tuple[int, int]]) -> int:
    """The widest pane that divides every range and slide of ``specs``."""
    return math.gcd(*[v for spec in specs for v in spec])


def window_panes(window: WindowId) -> range:
    return range(window[0], window[0] + window[1])
