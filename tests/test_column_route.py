"""Inputs routed by one column cross the shuffle as Arrow batches, one item per batch and
partition (physical/column_route.py); the property tests (test_properties.py, route
"column") check their results against the reference executor."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from strata.model import Dataflow, Input, State
from strata.model.keys import encode_column, encode_key, partition_of, partitions_of
from strata.observability.spark_metrics import SparkMetrics
from strata.physical.column_route import grouped_rows, route_column, split_by_partition
from strata.physical.runner import SparkStageRunner
from tests.helpers import epochs_in, increment


@pytest.mark.parametrize("keys", [["a", None, "b", "a", "c", "d", None, "b"] * 3,
                                  [7, -1, 7, 2**40, 0, -1, 3, 0] * 3])
def test_rows_go_to_the_partition_of_their_key_and_group_in_arrival_order(keys):
    batch = pa.record_batch({"url": keys, "i": list(range(len(keys)))})
    parts = dict(split_by_partition(batch, "url", 3))
    assert len(parts) == 3  # the keys fall in all three partitions
    seen = []
    for p, data in parts.items():
        groups = list(grouped_rows([data, data], "url"))  # the rows twice, as two buffers
        mine = [i for i, k in enumerate(keys) if partition_of(encode_key(k), 3) == p]
        assert [k for _, k, _ in groups] == list(dict.fromkeys(keys[i] for i in mine))
        for enc, key, records in groups:
            assert enc == encode_key(key)
            rows = [i for i in mine if keys[i] == key]
            assert records == [{"url": key, "i": i} for i in rows + rows]
        seen += [k for _, k, _ in groups]
    assert sorted(seen, key=str) == sorted(set(keys), key=str)


@pytest.mark.parametrize("values", [
    pa.array(["a", "", "é😀x", "s" * 300]),
    pa.array(["a", "b"], pa.large_string()),
    pa.chunked_array([["x"], [], ["y", "z"]]),
    pa.array([0, -5, 2**63 - 1, -(2**63)]),
    pa.array([7, 2**64 - 1], pa.uint64()),
    pa.array([3, -3], pa.int8()),
    pa.array([1, None]),  # nulls, floats and booleans take the per-value path
    pa.array([1.5, -0.0]),
    pa.array([True, False]),
    pa.array([], pa.string()),
])
def test_a_column_encodes_and_partitions_as_its_keys_one_by_one(values):
    encs = encode_column(values)
    assert encs == [encode_key(v) for v in values.to_pylist()]
    for n in (1, 2, 7):
        assert partitions_of(encs, n).tolist() == [partition_of(e, n) for e in encs]


def test_only_string_and_integer_columns_route_as_batches():
    schema = pa.schema([("s", pa.string()), ("n", pa.int32()), ("f", pa.float64()),
                        ("t", pa.timestamp("us"))])
    assert route_column("s", schema) == "s" and route_column("n", schema) == "n"
    assert route_column("f", schema) is None and route_column("t", schema) is None
    assert route_column(["s", "n"], schema) is None and route_column("x", schema) is None
    assert route_column(lambda r: r["s"], schema) is None


def urlcount(route_by) -> Dataflow:
    def count(url, state, urls, *, out):
        prev = next(state, None)
        n = sum(1 for _ in urls) + (prev["n"] if prev else 0)
        out.state({"url": url, "n": n})
        out.write("counts", {"url": url, "n": n})

    df = Dataflow("urlcount")
    urls = df.source("urls", "url string")
    df.stage("count", count, inputs=[Input(urls, route_by=route_by)],
             outputs={"counts": "url string, n long"},
             state=State("url string, n long", route_by="url"))
    return df


@pytest.mark.parametrize(("route_by", "batched"), [("url", True),
                                                   (lambda r: r["url"], False)])
def test_a_column_route_shuffles_one_item_per_batch_and_partition(spark, tmp_path, route_by,
                                                                  batched):
    stage = urlcount(route_by).stages["count"]
    runner = SparkStageRunner(str(tmp_path / "home"), spark, num_partitions=2)
    urls = [f"u{i % 37}" for i in range(600)]
    inc = increment(tmp_path, stage.inputs[0].flow, [{"url": u} for u in urls])
    with epochs_in(spark, "tasks"), SparkMetrics(spark).measure("epoch") as m:
        runner.run_epoch(stage, {"urls": inc})
    # one input file, one batch: one item per partition. Per-record items are pickled in
    # chunks (PySpark's partitionBy), each one of Spark's shuffle records: more than two
    if batched:
        assert m.shuffle_write_records == 2, m.to_json()
    else:
        assert m.shuffle_write_records > 2, m.to_json()
    state = {r["url"]: r["n"] for r in runner.state_records(stage)}
    assert state == dict(Counter(urls))
