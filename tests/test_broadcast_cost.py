"""Broadcast and multicast records cross the shuffle once per partition, not once per key."""

from __future__ import annotations

import pytest

from strata import ALL, Dataflow, Input, Multicast, State
from strata.observability.spark_metrics import SparkMetrics
from strata.physical.runner import SparkStageRunner
from tests.helpers import epochs_in, increment

KEYS = 2000
PARTITIONS = 4
BLOB_CHARS = 20_000


def apply_note(key, state, items, notes, *, out):
    prev = next(state, None)
    n = sum(1 for _ in items) + (prev["n"] if prev else 0) + sum(1 for _ in notes)
    out.associate(key, "all-keys")  # valid for the next epoch's multicasts
    out.state({"k": key, "n": n})


def _stage(route_notes):
    df = Dataflow("b")
    items = df.source("items", "k long")
    notes = df.source("notes", "text string")
    return df.stage("s", apply_note,
                    inputs=[Input(items, route_by="k"), Input(notes, route_by=route_notes)],
                    state=State("k long, n long", route_by="k", grouping="inner"))


@pytest.mark.parametrize(("route", "notes_seen"),
                         [(lambda r: ALL, 2), (lambda r: Multicast("all-keys"), 1)],
                         ids=["broadcast", "multicast"])
def test_one_copy_per_partition(spark, tmp_path, route, notes_seen):
    st = _stage(route)
    items, notes = st.inputs[0].flow, st.inputs[1].flow
    runner = SparkStageRunner(str(tmp_path), spark, num_partitions=PARTITIONS)
    metrics = SparkMetrics(spark)
    keys = [{"k": k} for k in range(KEYS)]
    blob = "".join(chr(33 + (i * 7919) % 90) for i in range(BLOB_CHARS))  # compresses poorly
    # epoch 1 builds state; each epoch binds every key to the multicast address for the next
    runner.run_epoch(st, {"items": increment(tmp_path, items, keys),
                          "notes": increment(tmp_path, notes, [{"text": blob}])})
    with epochs_in(spark, "tasks"):  # Spark's shuffle is what is measured
        with metrics.measure("plain") as plain:
            runner.run_epoch(st, {"items": increment(tmp_path, items, keys)})
        with metrics.measure("with-note") as noted:
            runner.run_epoch(st, {"items": increment(tmp_path, items, keys),
                                  "notes": increment(tmp_path, notes, [{"text": blob}])})
    extra = noted.shuffle_write_bytes - plain.shuffle_write_bytes
    assert extra < 2 * PARTITIONS * len(blob)  # about one copy per partition ...
    assert extra < KEYS * len(blob) / 50  # ... far from one copy per key
    state = {r["k"]: r["n"] for r in runner.state_records(st)}
    # 3 items per key, plus every note it received: a multicast reaches only the keys
    # associated in the epoch before (none before epoch 1)
    assert len(state) == KEYS and set(state.values()) == {3 + notes_seen}
