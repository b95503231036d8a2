"""The scheduler is a pure decision over plain data: tested without Spark or SQLite."""

from __future__ import annotations

import pickle

import pytest

from strata.controller.scheduling import Choice, StageView, choose, decide, same_cycle
from strata.model.errors import StrataError
from strata.model.runnability import (
    lookup_table,
    prefer,
    runnable_all,
    runnable_any,
    sliding,
)


def view(name, queued, *, epochs=0, since=1.0, rule=None, state=None, bottlenecked=False):
    return StageView(name, epochs, since, queued, rule or runnable_all(list(queued)), state,
                     bottlenecked)


def test_nothing_waiting_or_nothing_runnable_chooses_nothing():
    assert choose([]) is None
    assert choose([view("a", {"x": []})]) is None
    # runnable_all waits for every input
    assert choose([view("join", {"l": ["k"], "r": []})]) is None


def test_fewest_epochs_first_then_longest_waiting_then_name():
    views = [view("b", {"x": [1]}, epochs=3, since=0.0), view("c", {"x": [1]}, epochs=1,
             since=5.0), view("a", {"x": [1]}, epochs=1, since=5.0),
             view("d", {"x": [1]}, epochs=1, since=2.0)]
    assert choose(views).stage == "d"
    assert choose(views[:3]).stage == "a"


def test_a_bottlenecked_stage_waits_while_another_can_run():
    busy = view("busy", {"x": [1]}, epochs=0, bottlenecked=True)
    idle = view("idle", {"y": [1]}, epochs=5)
    assert choose([busy, idle]).stage == "idle"
    assert choose([busy]).stage == "busy"  # alone it still runs: no deadlock


def test_reads_and_removes_are_normalised_per_flow():
    rule = lookup_table("table", "stream")
    got = decide(view("enrich", {"table": ["t1", "t2"], "stream": ["s1"]}, rule=rule))
    assert got == Choice("enrich", {"stream": 1, "table": 2}, {"stream": 1}, None)
    got = decide(view("any", {"a": [1], "b": []}, rule=runnable_any))
    assert (got.reads, got.removes) == ({"a": 1}, {"a": 1})


def test_the_runnability_state_comes_back_with_the_choice():
    rule = prefer({"queries": 4, "updates": 1})
    state = None
    picks = []
    for _ in range(5):
        c = decide(view("cube", {"queries": [1] * 9, "updates": [1] * 9}, rule=rule,
                        state=state))
        picks.append(next(iter(c.reads)))
        state = c.runnable_state
    assert picks.count("queries") == 4 and picks.count("updates") == 1


def test_sliding_reads_each_new_increment_with_the_last_kept_ones():
    rule = pickle.loads(pickle.dumps(sliding("log", keep=2)))  # registered stages pickle it
    queue, state, seen = ["s1", "s2", "s3", "s4"], None, []
    while True:
        c = decide(view("series", {"log": queue}, rule=rule, state=state))
        if c is None:
            break
        read = queue[: c.reads["log"]]
        seen.append(read)
        queue = queue[c.removes.get("log", 0):]
        state = c.runnable_state
    assert seen == [["s1"], ["s1", "s2"], ["s1", "s2", "s3"], ["s2", "s3", "s4"]]
    assert queue == ["s3", "s4"]  # the two newest stay queued for the next segment
    c = decide(view("series", {"log": [*queue, "s5"]}, rule=rule, state=state))
    assert c.reads == {"log": 3} and c.removes == {"log": 1}


def test_sliding_reads_corrections_only_when_no_new_increment_waits():
    rule = pickle.loads(pickle.dumps(sliding("log", keep=1, side="fix")))
    c = decide(view("series", {"log": ["s1", "s2"], "fix": ["f1"]}, rule=rule, state=1))
    assert c.reads == {"log": 2} and c.removes == {"log": 1}  # the new segment first
    c = decide(view("series", {"log": ["s2"], "fix": ["f1", "f2"]}, rule=rule, state=1))
    assert c.reads == {"log": 1, "fix": 2} and c.removes == {"fix": 2}
    assert c.runnable_state == 1  # the kept segment stays kept
    assert decide(view("series", {"log": ["s2"], "fix": []}, rule=rule, state=1)) is None
    c = decide(view("series", {"fix": ["f1"]}, rule=rule, state=None))
    assert c.reads == {"fix": 1}


def test_a_failing_or_greedy_runnability_is_reported_by_stage():
    def boom(keys, state):
        raise ValueError("no")

    with pytest.raises(StrataError, match="runnable of stage 'x' raised ValueError: no"):
        decide(view("x", {"a": [1]}, rule=boom))

    def greedy(keys, state):
        return {"a": 3}, {"a": 3}, state

    with pytest.raises(StrataError, match=r"asked for 3 increment\(s\) of 'a' but 1 are"):
        decide(view("x", {"a": [1]}, rule=greedy))


def test_same_cycle():
    readers = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}
    assert same_cycle("a", "b", readers) and same_cycle("c", "a", readers)
    assert same_cycle("d", "d", readers)
    assert not same_cycle("d", "a", readers)
