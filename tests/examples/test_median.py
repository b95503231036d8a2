"""examples/median: both forms of the incremental median equal numpy after every increment."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from examples.median.generate import increments
from strata.controller import Controller
from strata.pipeline import load_dataflow

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "median" / "pipeline.py"


def lower_median(values: list[int]) -> int:
    """The pipeline's median: rank (n - 1) // 2 of the sorted values (the lower median)."""
    a = np.asarray(values)
    return int(np.sort(a)[(len(a) - 1) // 2])


def test_both_forms_give_the_median_after_every_increment(spark, tmp_path):
    batches = increments(seed=3, count=5, size=200)
    totals, expected, values = [], {}, []
    for batch in batches:
        values += [r["value"] for r in batch]
        totals.append(len(values))
        expected[len(values)] = lower_median(values)
        if len(values) % 2:  # odd counts: the lower median is numpy's median
            assert expected[len(values)] == np.median(values)
    assert len(set(expected.values())) > 1  # the distribution drifts

    reports = []
    with Controller(tmp_path / "home", load_dataflow(str(PIPELINE)),
                    spark=spark, num_partitions=2) as c:
        ingested = 0
        for group in ([0, 1], [2], [3, 4]):  # two increments queued, then one, then two
            for i in group:
                c.ingest("numbers", batches[i])
            ingested += len(group)
            reports += c.run()
            for flow in ("median", "median_cycle"):  # one median per increment, in order
                got = [c.read_flow(flow, e).to_pylist() for e, _ in c.stored_increments(flow)]
                assert [r for inc in got for r in inc] == [
                    {"total": t, "median": expected[t]} for t in totals[:ingested]], flow
        hist, second = c.state_records("histogram"), c.state_records("return_median")
        single = c.state_records("histogram_median")

    # (a) keeps two identical copies of the value histogram, (b) one
    def as_counts(state):
        return sorted((r["bucket"], r["value"], r["n"]) for r in state)

    counts = np.unique(values, return_counts=True)
    assert as_counts(hist) == as_counts(second) == as_counts(single) == sorted(
        (int(v) // 50, int(v), int(n)) for v, n in zip(*counts, strict=True))
    # the cycle: histogram_median never reads increment i before the location of i - 1
    epochs = [r.records_in for r in reports if r.stage == "histogram_median"]
    read = [(bool(e["numbers"]), bool(e["cycle_location"])) for e in epochs]
    n, loc, both = (True, False), (False, True), (True, True)
    assert read == [n, both, loc, n, loc, n, both, loc]
