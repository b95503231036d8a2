"""C2 scoreboards, eviction decisions and load shedding: pure functions, no Spark."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from strata.model.errors import StrataError
from strata.windows.c2 import Status, scoreboard
from strata.windows.panes import Panes, parse_duration
from strata.windows.policies import (
    EpochCost,
    Eviction,
    Fidelity,
    emit_reason,
    failed_sources,
    fit_cost,
    plan_shedding,
)

PANES = Panes(range=40, slide=10)  # 4 panes of 10 per window


def _board(records, progress, shed=None, failed=(), sources=("a", "b")):
    return scoreboard(PANES.window_id(0), PANES.width, sources, records, progress,
                      shed or {}, failed)


def test_panes_windows_and_durations():
    p = Panes(range=parse_duration("1 hour", "timestamp"),
              slide=parse_duration("5 minutes", "timestamp"))
    assert (p.per_window, p.per_slide, p.width) == (12, 1, 300_000_000)
    odd = Panes(range=10, slide=4)  # gcd 2
    for pane in range(-20, 20):
        for k in odd.windows_of_pane(pane):
            assert pane in odd.window_panes(k)
        assert pane not in odd.window_panes(odd.windows_of_pane(pane).start - 1)
        assert pane not in odd.window_panes(odd.windows_of_pane(pane).stop)
    with pytest.raises(StrataError, match="duration"):
        parse_duration("5 fortnights", "timestamp")


def test_cells_tell_data_empty_pending_skipped_and_failed_apart():
    b = _board({("a", 0): 3, ("a", 1): 2, ("b", 0): 1}, {"a": 35, "b": 12},
               shed={("a", 2): 4}, failed=["b"])
    cells = {k: c.status for k, c in b.cells.items()}
    assert cells[("a", 0)] is Status.DATA and cells[("a", 1)] is Status.DATA
    assert cells[("a", 2)] is Status.SKIPPED and cells[("a", 3)] is Status.PENDING
    assert cells[("b", 0)] is Status.DATA  # b moved past pane 0 (time 12 ≥ 10)
    assert cells[("b", 1)] is Status.FAILED  # b stopped inside pane 1
    assert b.complete == 3 and b.total == 8 and b.fraction == 3 / 8
    assert b.records == 6 and b.included == {("a", 0), ("a", 1), ("b", 0)}
    assert b.spatial == 0.0  # pane 3 is complete from no source
    assert b.temporal == 0.25  # b: 1 of 4 panes
    assert b.whole_sources == 0.0 and b.whole_panes == 0.25  # only pane 0 is whole
    staggered = _board({("a", 0): 1, ("a", 1): 1, ("b", 2): 1, ("b", 3): 1},
                       {"a": 20, "b": 40}, shed={("b", 0): 1})
    # a: panes 0-1 complete; b: panes 2-3 (pane 0 shed, pane 1 empty counts complete)
    assert staggered.spatial == 0.5 and staggered.temporal == 0.5
    assert staggered.whole_sources == 0.0 and staggered.whole_panes == 0.25
    assert "C2 3/8" in b.summary() and "1 skipped" in b.summary()


def test_eviction_reasons():
    done = _board({}, {"a": 40, "b": 40})
    assert emit_reason(done, 40, 40, Eviction()) == "complete"
    half = _board({}, {"a": 40, "b": 5})
    assert emit_reason(half, 40, 40, Eviction()) is None
    assert emit_reason(half, 40, 45, Eviction(deadline=5)) == "deadline"
    assert emit_reason(half, 40, 44, Eviction(deadline=5)) is None
    assert emit_reason(half, 40, 40, Eviction(fidelity=Fidelity("spatial", 0.5))) == \
        "fidelity"
    assert emit_reason(half, 40, 40, Eviction(fidelity=Fidelity("temporal", 0.5))) is None
    assert emit_reason(half, 40, 40, Eviction(fidelity=Fidelity("fraction", 0.6))) is None
    gone = _board({}, {"a": 40, "b": 5}, failed=["b"])
    assert emit_reason(gone, 40, 40, Eviction(failure_timeout=10)) == "failure"
    assert emit_reason(half, 40, 40, Eviction(fidelity=Fidelity("whole_sources", 0.5))) == \
        "fidelity"
    assert emit_reason(half, 40, 40, Eviction(fidelity=Fidelity("whole_panes", 0.5))) is None
    with pytest.raises(StrataError):
        Fidelity("spatial", 1.5)


def test_failed_sources_by_silence():
    progress = {"a": 100, "b": 60}
    assert failed_sources(progress, ["a", "b", "c"], 100, 0, None) == set()
    assert failed_sources(progress, ["a", "b", "c"], 100, 0, 30) == {"b", "c"}
    assert failed_sources(progress, ["a", "b", "c"], 100, 80, 30) == {"b"}


def test_the_cost_model_separates_an_epochs_fixed_seconds_from_its_records():
    assert fit_cost([]) is None
    assert fit_cost([[0, 0.7]]) is None  # no record aggregated yet
    # epochs of one size cannot tell the parts apart: all of it is taken per record
    assert fit_cost([[1000, 2.0], [1020, 2.0]]) == EpochCost(0.0, pytest.approx(2 / 1010))
    samples = [[x, 0.5 + 0.001 * x] for x in (1000, 400, 700, 0)]
    cost = fit_cost(samples)
    assert cost is not None
    assert (cost.fixed, cost.per_row) == (pytest.approx(0.5), pytest.approx(0.001))
    assert np.polyfit([x for x, _ in samples], [y for _, y in samples], 1) == pytest.approx(
        [cost.per_row, cost.fixed])  # numpy's least squares agrees
    assert fit_cost([[1000, 1.0], [100, 1.2]]) == EpochCost(pytest.approx(1.1), 0.0)
    through_origin = fit_cost([[1000, 1.0], [100, 0.05]])
    assert through_origin is not None and through_origin.fixed == 0.0  # never negative


def test_shedding_buys_back_only_the_seconds_records_cost():
    rows = {(s, p): 10 for s in "abcd" for p in range(5)}  # 200 rows
    # 0.5 s fixed, 0.005 s a record: 100 records fit a budget of 1 s
    shed = plan_shedding(rows, EpochCost(0.5, 0.005), 1.0, "random", 3)
    assert sum(rows[c] for c in rows if c not in shed) == 100
    # a budget below the fixed part cannot be met: nothing is shed for nothing
    assert plan_shedding(rows, EpochCost(1.5, 0.005), 1.0, "random", 3) == set()


def test_random_shedding_spreads_over_the_panes():
    rows = {(s, p): 10 for s in "abcdefgh" for p in range(6)}
    for seed in range(20):
        shed = plan_shedding(rows, EpochCost(0.0, 0.01), 2.4, "random", seed)  # half fits
        kept = Counter(p for s, p in rows if (s, p) not in shed)
        assert set(kept.values()) == {4}, kept  # every pane keeps half its cells


def test_shedding_fits_the_budget_keeps_c2_shape_and_is_deterministic():
    rows = {(s, p): 10 for s in "abcd" for p in range(5)}  # 200 rows
    assert plan_shedding(rows, None, 1.0, "random", 0) == set()  # no estimate yet
    per_row = EpochCost(0.0, 0.01)  # 100 rows fit
    assert plan_shedding(rows, EpochCost(0.0, 0.001), 1.0, "random", 0) == set()  # fits
    for kind in ("random", "spatial", "temporal"):
        shed = plan_shedding(rows, per_row, 1.0, kind, 7)
        assert shed == plan_shedding(rows, per_row, 1.0, kind, 7)
        assert sum(rows[c] for c in rows if c not in shed) <= 100
        assert len(shed) == 10, kind
    spatial = plan_shedding(rows, per_row, 1.0, "spatial", 7)
    assert len({s for s, _ in spatial}) == 2  # whole sources go
    temporal = plan_shedding(rows, per_row, 1.0, "temporal", 7)
    kept = {s: sum(1 for p in range(5) if (s, p) not in temporal) for s in "abcd"}
    assert max(kept.values()) - min(kept.values()) <= 1  # every source keeps its share
    random_kept = Counter(p for s, p in rows if (s, p) not in plan_shedding(
        rows, per_row, 1.0, "random", 7))
    assert set(random_kept.values()) == {2}  # every pane keeps half its cells
    assert plan_shedding(rows, per_row, 1.0, "random", 7) != plan_shedding(
        rows, per_row, 1.0, "random", 8)


def test_scoreboards_net_a_scoreboard_flow_into_each_windows_live_c2():
    from strata.windows import scoreboards

    def row(w, s, p, status, n, m):
        return {"window_start": w, "window_end": w + 4, "source": s, "pane_start": p,
                "status": status, "records": n, "shed": 0, "_mult": m}

    rows = [row(0, "a", 0, "data", 3, 1), row(0, "b", 0, "pending", 0, 1),
            row(2, "a", 2, "open", 1, 1),
            # a refinement of window 0: b's cell arrived
            row(0, "b", 0, "pending", 0, -1), row(0, "b", 0, "data", 2, 1)]
    boards = scoreboards(rows)
    assert list(boards) == [(0, 4), (2, 6)]
    assert boards[(0, 4)].cells[("b", 0)].status is Status.DATA
    assert boards[(0, 4)].records == 5 and boards[(0, 4)].fraction == 1.0
    assert boards[(2, 6)].fraction == 0.0


def test_a_cell_is_complete_only_past_the_allowed_disorder_and_then_closed():
    from strata.windows.policies import closed_cells

    # pane 1 ends at 20: with disorder 15, complete once the source has sent time 35
    for disorder, progress, status in ((0, 20, Status.DATA), (15, 34, Status.OPEN),
                                       (15, 35, Status.DATA)):
        b = scoreboard(PANES.window_id(0), PANES.width, ["a"], {("a", 1): 2},
                       {"a": progress}, {}, (), disorder)
        assert b.cells[("a", 1)].status is status, (disorder, progress)
        assert b.cells[("a", 3)].status is Status.PENDING
    progress = {"a": 35}
    assert closed_cells([("a", 0), ("a", 1), ("a", 2)], progress, (), 10, 15, None) == {
        ("a", 0), ("a", 1)}  # pane 2 (ends 30) is still within the allowance
    assert closed_cells([("a", 0)], progress, (), 10, 0, None) == {("a", 0)}
    # a source never heard from: closed only before a result published complete without
    # it, and never when the query names it (every scoreboard listed it as pending)
    new = [("z", 3), ("z", 4)]
    assert closed_cells(new, progress, (), 10, 0, None) == set()
    assert closed_cells(new, progress, (), 10, 0, 4) == {("z", 3)}
    assert closed_cells(new, progress, ("z",), 10, 0, 4) == set()
