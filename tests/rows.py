"""Comparing answers with an oracle's: rows as a multiset whose floats agree to a
relative tolerance.

Spark and DuckDB add floats in different orders, so an average or a sum of doubles can
differ in its last bits. Rounding both sides to N places is not enough: two values on
either side of a rounding boundary (4.9618125 ± 1e-16) round apart. :class:`Rows`
sorts rows by their exact cells, then their numbers, and compares numbers with
:func:`math.isclose`."""

from __future__ import annotations

import math
from collections.abc import Iterable

REL_TOL = 1e-9
ABS_TOL = 1e-9


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _order(row: tuple) -> tuple:
    exact = tuple("#" if _is_number(v) else repr(v) for v in row)
    numbers = tuple((1, 0.0) if isinstance(v, float) and math.isnan(v) else (0, v)
                    for v in row if _is_number(v))
    return exact, numbers


def same_cell(a: object, b: object) -> bool:
    """Equal, with numbers (an int and a float too) equal within the tolerance and NaN
    equal to NaN."""
    if not (_is_number(a) and _is_number(b)):
        return a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


class Rows(list):
    """Rows (tuples of cells) as a sorted list that equals another list of the same rows
    in any order, floats within the tolerance."""

    def __init__(self, rows: Iterable[Iterable] = ()) -> None:
        super().__init__(sorted((tuple(r) for r in rows), key=_order))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, list):
            return NotImplemented
        theirs = other if isinstance(other, Rows) else Rows(other)
        if len(self) != len(theirs):
            return False
        return all(len(a) == len(b) and all(map(same_cell, a, b))
                   for a, b in zip(self, theirs, strict=True))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None
