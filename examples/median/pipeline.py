"""Incremental median (BIPS paper, section 3.1, Figures 3 and 4), in both of its forms.

The input ``numbers`` (``{value}`` integers) arrives in increments; after every increment
the dataflow writes the median of all numbers so far, ``{total, median}``, where
``total`` is how many numbers there are and the median is the *lower* median: the value
of rank ``(total - 1) // 2`` (0-based) in sorted order. Numbers are routed to buckets of
``WIDTH`` consecutive values (``value // WIDTH``); each bucket keeps a value histogram.

(a) Three stages, two copies of the histogram (Figure 3), output flow ``median``::

    numbers ─► histogram ──bucket_counts──► locate ──location──► return_median ─► median
                (state 1)  ──────────value_counts─────────────►  (state 2)

    ``histogram`` (state: ``{bucket, value, n}``, inner grouping, parallel by bucket) adds
    the new numbers and writes the changed buckets' counts and the value-count changes;
    ``locate`` (non-parallel: one group) keeps the count per bucket and writes the bucket
    and offset of the median; ``return_median`` keeps a second copy of the histogram from
    the value-count changes, and the location (routed to the median's bucket only) reads
    the value there. Its runnability is RunnableAll (the default): it runs only with one
    increment of both inputs, so it answers each location from the histogram version the
    location was computed from.

(b) One copy of the histogram and a cycle (Figure 4), output flow ``median_cycle``::

    numbers ─► histogram_median ──cycle_counts──► locate_cycle ─┐
                (state)       ◄──────cycle_location─────────────┘
                   └─► median_cycle

    ``histogram_median`` first answers the location of the previous increment from its
    state (still that increment's histogram), then adds the new numbers. Its custom
    runnability (``after_previous_location``) makes epoch i wait for the location of
    increment i - 1 (or i = 0), and reads a location alone when no numbers are waiting, so
    the last increment's median is written without waiting for more input.

Both forms read the same external input (each has its own cursor on it). Run with
``strata run examples/median/pipeline.py --home DIR``; ``pipeline.py:three_stage`` or
``pipeline.py:single_copy`` runs one form alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from strata import Dataflow, Emitter, Input, State

WIDTH = 50  # values per bucket

NUMBERS_SCHEMA = "value long"
HISTOGRAM_SCHEMA = "bucket long, value long, n long"  # how often ``value`` occurred
BUCKET_COUNT_SCHEMA = "bucket long, count long"  # numbers in the bucket so far
LOCATION_SCHEMA = "total long, bucket long, offset long"  # the median is ``offset`` in bucket
MEDIAN_SCHEMA = "total long, median long"
ONE_GROUP = 0  # the key of the non-parallel ``locate`` stages


def bucket_of(record: dict) -> int:
    return record["value"] // WIDTH


def one_group(record: dict) -> int:
    return ONE_GROUP


# -- shared pieces ----------------------------------------------------------------------------
def _histogram(records: Iterable[dict]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in records:
        counts[r["value"]] = counts.get(r["value"], 0) + r["n"]
    return counts


def _value_at(histogram: dict[int, int], offset: int) -> int:
    """The value of 0-based rank ``offset`` among the bucket's numbers."""
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if offset < seen:
            return value
    raise ValueError(f"rank {offset} is beyond the bucket's {seen} numbers: the location "
                     "and the histogram are from different versions")


def _add_numbers(bucket: int, state: Iterator[dict], numbers: Iterator[dict], out: Emitter,
                 counts_flow: str, changes_flow: str | None) -> dict[int, int]:
    """Add this increment's numbers to the bucket's histogram (kept in state); write the
    bucket's new count to ``counts_flow`` and the value-count changes to ``changes_flow``.
    Returns the histogram as it was before the increment."""
    before = _histogram(state)
    added: dict[int, int] = {}
    for r in numbers:
        added[r["value"]] = added.get(r["value"], 0) + 1
    after = dict(before)
    for value, n in added.items():
        after[value] = after.get(value, 0) + n
    for value, n in sorted(after.items()):
        out.state({"bucket": bucket, "value": value, "n": n})
    if added:
        out.write(counts_flow, {"bucket": bucket, "count": sum(after.values())})
        if changes_flow is not None:
            for value, n in sorted(added.items()):
                out.write(changes_flow, {"bucket": bucket, "value": value, "n": n})
    return before


def _locate(key: int, state: Iterator[dict], counts: Iterator[dict], out: Emitter,
            location_flow: str) -> None:
    """Keep the count per bucket; write where the lower median is (bucket and offset)."""
    per_bucket = {r["bucket"]: r["count"] for r in state}
    changed = False
    for r in counts:
        per_bucket[r["bucket"]] = r["count"]
        changed = True
    for bucket, count in sorted(per_bucket.items()):
        out.state({"bucket": bucket, "count": count})
    if not changed:
        return
    total = sum(per_bucket.values())
    rank, below = (total - 1) // 2, 0
    for bucket, count in sorted(per_bucket.items()):
        if rank < below + count:
            out.write(location_flow, {"total": total, "bucket": bucket, "offset": rank - below})
            return
        below += count


# -- (a) three stages, two copies of the histogram ----------------------------------------------
def histogram(bucket: int, state: Iterator[dict], numbers: Iterator[dict], *,
              out: Emitter) -> None:
    _add_numbers(bucket, state, numbers, out, "bucket_counts", "value_counts")


def locate(key: int, state: Iterator[dict], counts: Iterator[dict], *, out: Emitter) -> None:
    _locate(key, state, counts, out, "location")


def return_median(bucket: int, state: Iterator[dict], changes: Iterator[dict],
                  location: Iterator[dict], *, out: Emitter) -> None:
    """Apply the histogram changes to the second copy, then answer the location (if the
    median is in this bucket) from the updated copy: the version ``locate`` saw."""
    hist = _histogram(state)
    for r in changes:
        hist[r["value"]] = hist.get(r["value"], 0) + r["n"]
    for value, n in sorted(hist.items()):
        out.state({"bucket": bucket, "value": value, "n": n})
    for loc in location:
        out.write("median", {"total": loc["total"], "median": _value_at(hist, loc["offset"])})


def add_three_stage(df: Dataflow, numbers: Any) -> None:
    df.stage("histogram", histogram,
             inputs=[Input(numbers, route_by=bucket_of)],
             outputs={"bucket_counts": BUCKET_COUNT_SCHEMA, "value_counts": HISTOGRAM_SCHEMA},
             state=State(HISTOGRAM_SCHEMA, route_by="bucket", grouping="inner"))
    df.stage("locate", locate,
             inputs=[Input("bucket_counts", route_by=one_group)],
             outputs={"location": LOCATION_SCHEMA},
             state=State(BUCKET_COUNT_SCHEMA, route_by=one_group))
    df.stage("return_median", return_median,
             inputs=[Input("value_counts", route_by="bucket"),
                     Input("location", route_by="bucket")],
             outputs={"median": MEDIAN_SCHEMA},
             state=State(HISTOGRAM_SCHEMA, route_by="bucket", grouping="inner"))


# -- (b) one copy of the histogram and a cycle ----------------------------------------------------
def histogram_median(bucket: int, state: Iterator[dict], numbers: Iterator[dict],
                     location: Iterator[dict], *, out: Emitter) -> None:
    """Answer the previous increment's location from the state (that increment's histogram),
    then add this increment's numbers."""
    before = _add_numbers(bucket, state, numbers, out, "cycle_counts", None)
    for loc in location:
        out.write("median_cycle", {"total": loc["total"],
                                   "median": _value_at(before, loc["offset"])})


def locate_cycle(key: int, state: Iterator[dict], counts: Iterator[dict], *,
                 out: Emitter) -> None:
    _locate(key, state, counts, out, "cycle_location")


def after_previous_location(keys: dict[str, list], outstanding: int | None):
    """Runnability of ``histogram_median``: increment i of ``numbers`` is read only once the
    location of increment i - 1 is there on ``cycle_location`` (or i = 0), together with
    it; a location with no numbers waiting is read alone. Its state counts the numbers
    increments whose location has not been read yet (0 or 1)."""
    numbers, location = "numbers", "cycle_location"
    outstanding = outstanding or 0
    has_numbers, has_location = bool(keys.get(numbers)), bool(keys.get(location))
    if outstanding:  # waiting for the location of the last increment read
        if not has_location:
            return set(), set(), outstanding
        both = {numbers, location} if has_numbers else {location}
        return both, both, 1 if has_numbers else 0
    if has_numbers:
        return {numbers}, {numbers}, 1
    return set(), set(), outstanding


def add_single_copy(df: Dataflow, numbers: Any) -> None:
    cycle_location = df.flow("cycle_location", LOCATION_SCHEMA)  # the back edge, declared first
    df.stage("histogram_median", histogram_median,
             inputs=[Input(numbers, route_by=bucket_of),
                     Input(cycle_location, route_by="bucket")],
             outputs={"cycle_counts": BUCKET_COUNT_SCHEMA, "median_cycle": MEDIAN_SCHEMA},
             state=State(HISTOGRAM_SCHEMA, route_by="bucket", grouping="inner"),
             runnable=after_previous_location)
    df.stage("locate_cycle", locate_cycle,
             inputs=[Input("cycle_counts", route_by=one_group)],
             outputs=[cycle_location],
             state=State(BUCKET_COUNT_SCHEMA, route_by=one_group))


# -- dataflows ------------------------------------------------------------------------------------
def build_dataflow() -> Dataflow:
    """Both forms side by side over one input: ``median`` and ``median_cycle``."""
    df = Dataflow("median")
    numbers = df.source("numbers", NUMBERS_SCHEMA)
    add_three_stage(df, numbers)
    add_single_copy(df, numbers)
    return df


def three_stage() -> Dataflow:
    df = Dataflow("median3")
    add_three_stage(df, df.source("numbers", NUMBERS_SCHEMA))
    return df


def single_copy() -> Dataflow:
    df = Dataflow("median1")
    add_single_copy(df, df.source("numbers", NUMBERS_SCHEMA))
    return df
