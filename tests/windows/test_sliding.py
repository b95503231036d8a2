"""Sliding-window aggregation over panes: equal to recombining every pane, with O(1)
combines per slide (2 for an invertible aggregate, at most 3 amortized with Two-Stacks)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.windows.aggregates import MapReduce, PartsAlgebra
from strata.windows.sliding import Counted, InvertibleWindow, TwoStacks, slider

SUMS = PartsAlgebra.of_kinds(["add", "add"], "sum")
MAXES = PartsAlgebra.of_kinds(["add", "greatest"], "max")
BAGS = PartsAlgebra.of_kinds(["add", "multiset"], "distinct")

panes_st = st.lists(st.dictionaries(st.sampled_from("abcd"), st.integers(-5, 20),
                                    max_size=4), min_size=1, max_size=30)


def _tables(raw, algebra):
    if algebra is MAXES:
        return [{(k,): [1, v] for k, v in p.items()} for p in raw]
    if algebra is BAGS:
        return [{(k,): [1, {v % 3: 1}] for k, v in p.items()} for p in raw]
    return [{(k,): [1, v] for k, v in p.items()} for p in raw]


def _recombined(algebra, tables, lo, hi):
    out: dict = {}
    for p in range(lo, hi):
        out = algebra.combine(out, tables[p])
    return out


@settings(max_examples=60, deadline=None)
@given(raw=panes_st, size=st.integers(1, 6), step=st.integers(1, 3),
       which=st.sampled_from(["sums", "maxes", "bags"]))
def test_sliding_equals_recombining_every_pane(raw, size, step, which):
    algebra = {"sums": SUMS, "maxes": MAXES, "bags": BAGS}[which]
    tables = _tables(raw, algebra)
    pad = {}

    def pane(p):
        return tables[p] if 0 <= p < len(tables) else pad

    agg = slider(algebra, pane)
    assert isinstance(agg, InvertibleWindow) == (which != "maxes")
    for lo in range(-size + 1, len(tables), step):
        got = agg.query(lo, lo + size)
        want = _recombined(algebra, [pane(p) for p in range(lo, lo + size)], 0, size)
        assert got == want, (lo, got, want)


def test_late_data_in_a_spanned_pane_updates_the_window():
    for algebra in (SUMS, MAXES):
        tables = [{("a",): [1, i]} for i in range(10)]
        agg = slider(algebra, tables.__getitem__)
        agg.query(0, 4)
        delta = {("a",): [1, 100]}
        tables[2] = algebra.combine(tables[2], delta)
        agg.changed(2, delta)
        assert agg.query(1, 5) == _recombined(algebra, tables, 1, 5)


def _per_slide(algebra, ratio):
    slides = 20 * ratio  # whole flips of the front stack: an amortized count
    counted = Counted(algebra)
    tables = [{("a",): [1, i % 17]} for i in range(ratio + slides + 1)]
    agg = slider(counted, lambda p: tables[p])
    agg.query(0, ratio)
    counted.combines = counted.uncombines = 0
    for lo in range(1, slides + 1):
        agg.query(lo, lo + ratio)
    return counted.combines / slides, counted.uncombines / slides


def test_constant_work_per_slide_whatever_range_over_slide():
    for ratio in (4, 12, 60, 240):
        combines, uncombines = _per_slide(SUMS, ratio)
        assert (combines, uncombines) == (1, 1), ratio  # 2 calls per slide
        combines, uncombines = _per_slide(MAXES, ratio)
        assert uncombines == 0 and combines <= 3, (ratio, combines)


def test_two_stacks_never_uncombines_and_map_reduce_slides_with_its_own_functions():
    mr = MapReduce(map=lambda r: [(r["w"], 1)], combine=lambda a, b: a + b,
                   uncombine=lambda a, b: a - b, reduce=lambda k, n: n)
    algebra = mr.algebra()
    assert algebra.invertible
    tables = [{("x",): [1, 1]}, {("x",): [2, 2], ("y",): [1, 1]}, {("y",): [1, 1]}]
    agg = slider(algebra, lambda p: tables[p])
    agg.query(0, 2)
    assert agg.query(1, 3) == {("x",): [2, 2], ("y",): [2, 2]}
    assert isinstance(slider(MAXES, lambda p: {}), TwoStacks)
