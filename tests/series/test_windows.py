"""Series windows and schedules: segment arithmetic against brute force."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strata.model.errors import StrataError
from strata.series.windows import Schedule, Segments

runs = st.builds(Segments, st.just("log"), last=st.integers(1, 8), offset=st.integers(-5, 0))


@pytest.mark.parametrize(("text", "expected", "at_10"), [
    ("log", Segments("log"), [10]),
    ("log[-1]", Segments("log", offset=-1), [9]),
    ("log[-6:0]", Segments("log", last=7), [4, 5, 6, 7, 8, 9, 10]),
    (" log [ -3 : -2 ] ", Segments("log", last=2, offset=-2), [7, 8]),
])
def test_the_cli_notation(text, expected, at_10):
    assert Segments.parse(text) == expected
    assert list(expected.indices(10)) == at_10
    assert Segments.parse(expected.spec()) == expected


@pytest.mark.parametrize("bad", ["log[1]", "log[-1:-3]", "log[a]", "", "log[-1", "9log"])
def test_bad_notation_says_how_to_write_it(bad):
    with pytest.raises(StrataError, match="segments|offset|range"):
        Segments.parse(bad)


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), runs, min_size=1),
       st.integers(1, 7), st.integers(1, 40))
def test_occurrences_and_last_readers_match_brute_force(tables, period, segments):
    sched = Schedule(tables, period)
    due = sched.occurrences(range(1, segments + 1))
    # due: every table's segments exist, and the period divides the distance from the first
    complete = [n for n in range(1, segments + 1)
                if all(min(s.indices(n)) >= 1 for s in tables.values())]
    assert due == [n for n in complete if (n - complete[0]) % period == 0] if complete \
        else due == []
    for seg in range(1, segments + 1):
        for t in tables:
            readers = [n for n in range(1, seg + 20) if sched.due(n)
                       and seg in sched.window(n)[t]]
            assert sched.last_reader(seg, t) == max(readers, default=0)


def test_a_series_reads_one_stream():
    with pytest.raises(StrataError, match="one stream"):
        Schedule({"a": Segments("x"), "b": Segments("y")})
