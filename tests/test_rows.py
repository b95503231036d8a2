"""The oracle comparison of the tests (:mod:`tests.rows`) can fail: it tolerates only the
last bits of floats."""

from __future__ import annotations

from tests.rows import Rows
from tests.series.clicklog import canon


def test_rows_compare_floats_within_a_tolerance_in_any_order():
    """The oracle comparison: floats that differ in their last bits (sums in another
    order) are equal even across a rounding boundary; anything else is not."""
    assert canon([{"v": 4.9618125000000001}]) == canon([{"v": 4.961812499999999}])
    assert canon([{"k": 1, "v": None}, {"k": 2, "v": 1.5}]) == \
        canon([{"k": 2, "v": 1.5 + 1e-13}, {"k": 1, "v": None}])
    assert canon([{"v": 4.96181}]) != canon([{"v": 4.96182}])
    assert canon([{"k": 1}]) != canon([{"k": 1}, {"k": 1}])  # a multiset
    assert Rows([(float("nan"),)]) == Rows([(float("nan"),)])
    assert Rows([(1, 2.0)]) == [(1, 2)] and Rows([(1,), (2,)]) == [(2,), (1,)]
    assert Rows([("x", 1)]) != Rows([("y", 1)])
    assert Rows([(2**60,)]) != Rows([(2**60 + 1,)])  # integers compare exactly
