"""A translate epoch as DataFrame operations: the route that also runs over Spark Connect.

The epoch's tasks are those of the RDD route (``EpochTask``: the map side routes each
split's records to the partitions owning their keys, task ``p`` groups its items, reads
partition ``p``'s state from its own files, calls ``translate`` per group and writes the
files); only how the routed items reach task ``p`` differs. The splits are spread over
the tasks of a ``spark.range`` (contiguous runs of them, as ``parallelize`` slices them);
a ``mapInArrow`` runs the map side and packs each partition's items, pickled, into rows
``(__p, __s, __o, __b)`` as the vectorized Arrow exchange does
(:mod:`strata.physical.exchange`): ``repartition(n, "__s")`` with ``__s`` the partition's
salt sends every buffer to the task of its partition ``__p``, and ``__o`` orders the
buffers by split, so each partition sees its items in the order of the splits. Task 0 of
the map side also sends every partition one empty buffer, so that every partition's task
runs (outer grouping calls the stored keys of a partition that got no input, and every
partition reports its runs). A second ``mapInArrow`` runs partition ``p``'s side; its
results come back pickled. A partition that got another's buffers fails the epoch
instead of mixing states, as a vectorized task does.

A record-wise stage has no shuffle: one task of a ``spark.range`` per split routes and
translates it. ``docs/architecture.md``, "Translate stages over Spark Connect".
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strata.model.errors import EpochError
from strata.physical.exchange import salts
from strata.physical.records import KEYED_BATCH
from strata.physical.tasks import EpochTask

ROUTED_SCHEMA = "__p int, __s bigint, __o bigint, __b binary"
_ROUTED = pa.schema([("__p", pa.int32()), ("__s", pa.int64()), ("__o", pa.int64()),
                     ("__b", pa.binary())])
RESULT_SCHEMA = "partition int, info binary"
_RESULT = pa.schema([("partition", pa.int32()), ("info", pa.binary())])
FLUSH_WEIGHT = 1 << 15  # items (an Arrow batch: its bytes / 64) a partition's buffer holds
_SEQ_BITS = 32  # __o = split slot << _SEQ_BITS | buffer sequence number


def run_on_arrow(spark: Any, task: EpochTask, splits: list[tuple], n: int) -> list[dict]:
    """The epoch's partition results (``EpochTask.run_partition``), as DataFrame jobs."""
    if task.stage.is_recordwise:
        m = max(1, len(splits))
        frame = spark.range(0, m, 1, m).mapInArrow(_Unshuffled(task, splits), RESULT_SCHEMA)
    else:
        slots = max(1, min(len(splits), 4 * n))
        frame = (spark.range(0, slots, 1, slots)
                 .mapInArrow(_MapSide(task, splits, slots, salts(n)), ROUTED_SCHEMA)
                 .repartition(n, "__s")
                 .mapInArrow(_PartitionSide(task), RESULT_SCHEMA))
    results = [r for row in frame.collect() for r in pickle.loads(row["info"])]
    if not task.stage.is_recordwise:
        missing = set(range(n)) - {r["partition"] for r in results}
        if missing:
            raise misplaced(task, min(missing))
    return results


def misplaced(task: EpochTask, p: int) -> EpochError:
    return EpochError(f"Spark gave task {p} items of another partition; strata needs its "
                      "repartition into the stage's partitions kept as it is (is a plugin "
                      "or a setting coalescing shuffle partitions?)",
                      stage=task.stage.name, epoch=task.epoch)


def _slot_splits(splits: list[tuple], slot: int, slots: int) -> list[tuple]:
    """Slot ``slot``'s contiguous share of ``splits`` (as ``parallelize`` slices them)."""
    k = len(splits)
    return splits[slot * k // slots:(slot + 1) * k // slots]


def _ids(batches: Iterator[pa.RecordBatch]) -> Iterator[int]:
    for batch in batches:
        yield from batch.column(0).to_pylist()


def _one(p: int, results: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([p], pa.int32()),
         pa.array([pickle.dumps(results, pickle.HIGHEST_PROTOCOL)], pa.binary())],
        schema=_RESULT)


@dataclass
class _MapSide:
    """The map side: shipped to the executors by ``mapInArrow`` over ``range(slots)``."""

    task: EpochTask
    splits: list[tuple]
    slots: int
    salts: list[int]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for slot in _ids(batches):
            yield from self._slot(slot)

    def _slot(self, slot: int) -> Iterator[pa.RecordBatch]:
        n = len(self.salts)
        if slot == 0:  # one empty buffer per partition: every partition's task runs
            yield self._rows([(p, -1, []) for p in range(n)])
        held: list[list] = [[] for _ in range(n)]
        weight = [0] * n
        seq = slot << _SEQ_BITS
        for p, item in self.task.map_splits(_slot_splits(self.splits, slot, self.slots)):
            held[p].append(item)
            weight[p] += len(item[3]) // 64 + 1 if item[0] == KEYED_BATCH else 1
            if weight[p] >= FLUSH_WEIGHT:
                yield self._rows([(p, seq, held[p])])
                seq, held[p], weight[p] = seq + 1, [], 0
        last = [(p, seq + p, items) for p, items in enumerate(held) if items]
        if last:
            yield self._rows(last)

    def _rows(self, buffers: list[tuple[int, int, list]]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array([p for p, _, _ in buffers], pa.int32()),
             pa.array([self.salts[p] for p, _, _ in buffers], pa.int64()),
             pa.array([o for _, o, _ in buffers], pa.int64()),
             pa.array([pickle.dumps(items, pickle.HIGHEST_PROTOCOL)
                       for _, _, items in buffers], pa.binary())],
            schema=_ROUTED)


@dataclass
class _PartitionSide:
    """Partition ``p``'s side, after the repartition: shipped by ``mapInArrow``."""

    task: EpochTask

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        buffers: list[tuple[int, int, Any]] = []
        for batch in batches:
            blobs = batch.column("__b")
            buffers += [(o, p, blobs[i].as_buffer()) for i, (p, o) in enumerate(
                zip(batch.column("__p").to_pylist(), batch.column("__o").to_pylist(),
                    strict=True))]
        owners = {p for _, p, _ in buffers}
        if not owners:
            return  # no partition's buffers: the driver names the missing partition
        p = min(owners)
        if len(owners) > 1:
            yield _one(p, [{"partition": p, "error": misplaced(self.task, p).to_dict()}])
            return
        buffers.sort(key=lambda b: b[0])  # the order of the splits
        items = (item for _, _, data in buffers for item in pickle.loads(data))
        yield _one(p, self.task.run_partition(p, items))


@dataclass
class _Unshuffled:
    """A record-wise stage's task per split: shipped by ``mapInArrow`` over ``range``."""

    task: EpochTask
    splits: list[tuple]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for i in _ids(batches):
            yield _one(i, self.task.run_unshuffled(i, self.splits[i:i + 1]))
