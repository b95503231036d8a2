"""What Spark tasks run for one stage epoch: the map side and the per-partition side.

The map side reads input increments (and, in black-box mode, the whole state),
applies ``route_by`` and tags each record with the partition that owns its key.
Broadcast and multicast records are sent once to every partition, not once per key.

The per-partition side (task ``p`` after the shuffle, ``partition_run.py``) groups
them by key, calls ``translate`` per group against the partition's own state and writes
new, uniquely named files. The driver commits them by switching the state manifest.
"""

from __future__ import annotations

import gc
import pickle
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from strata.faults import crashpoint
from strata.model.dataflow import STATE, Stage
from strata.model.errors import (
    EpochError,
    RouteError,
)
from strata.model.keys import partition_of
from strata.model.route_eval import BROADCAST as ROUTE_BROADCAST
from strata.model.route_eval import KEYED as ROUTE_KEYED
from strata.model.route_eval import MULTICAST as ROUTE_MULTICAST
from strata.model.route_eval import (
    BadRoute,
    evaluate_route,
    state_key,
)
from strata.model.schema import records_of
from strata.physical.column_route import route_column, split_by_partition
from strata.physical.fusion import NO_FUSION, Fusion, apply_chain
from strata.physical.partition_run import PartitionRun
from strata.physical.records import (
    BROADCAST,
    FAILURE,
    KEYED,
    KEYED_BATCH,
    MULTICAST,
    PENDING_STATE,
    STORED_STATE,
    UNKEYED,
    load_pending,
)
from strata.storage import fs
from strata.storage.direct_columns import DirectColumns, StoreSpec
from strata.storage.home import Home, StageLayout
from strata.storage.increments import (
    iter_arrow_batches,
    iter_batches,
    iter_records,
)
from strata.storage.partition_store import PartitionStore, RunInfo


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the duration of a task.

    A task builds millions of small tuples, dicts and lists that all live until it ends,
    and every automatic collection traverses them again: at 100,000 keys per partition
    that was about half of the task's time. Reference counting still frees everything
    that is not in a cycle; cycles wait until the collector is re-enabled at the end.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class EpochTask:
    """Everything a task needs to run its part of one stage epoch (shipped by pickle)."""

    stage: Stage
    epoch: int
    mode: str  # "direct" | "blackbox"
    num_partitions: int
    home: Home
    layout: StageLayout
    token: str
    runs: dict[int, list[RunInfo]] = field(default_factory=dict)
    max_runs: int = 8
    fusion: Fusion = NO_FUSION
    store: StoreSpec = StoreSpec()  # direct mode's state store

    def open_store(self, p: int) -> DirectColumns | PartitionStore:
        """The direct-mode state store of partition ``p``, as the epoch began."""
        assert self.stage.state is not None  # only stages with state have a store
        route = self.stage.state.route
        return self.store.open(self.layout.root, p, self.runs.get(p, []),
                               lambda rec: state_key(route, rec))

    # -- naming -----------------------------------------------------------------
    def output_uri(self, flow: str, p: int) -> str:
        return Home.output_file(self.output_dir(flow), p)

    def output_dir(self, flow: str) -> str:
        return self.home.output_dir(flow, self.stage.name, self.epoch, self.token)

    def _file(self, directory: str, p: int, ext: str) -> str:
        return fs.join(directory, f"e{self.epoch:08d}-{self.token}-p{p:05d}.{ext}")

    # -- map side ---------------------------------------------------------------
    def map_splits(self, splits: Iterable[tuple]) -> Iterator[tuple[int, tuple]]:
        """The map side of one Spark task: :meth:`map_split` of each of its splits."""
        with gc_paused():
            for split in splits:
                yield from self.map_split(split)

    def map_split(self, split: tuple) -> Iterator[tuple[int, tuple]]:
        """Route the records of one input file (or state file) to partitions.

        An error stops the split and travels to partition 0 as a ``FAILURE`` item, so the
        job finishes and the driver reports it without Spark's stack traces.
        """
        try:
            yield from self._map_split(split)
        except EpochError as e:
            yield 0, (FAILURE, e.to_dict())

    def _map_split(self, split: tuple) -> Iterator[tuple[int, tuple]]:
        n, kind = self.num_partitions, split[0]
        if kind == "input":  # ("input", flow index, uri[, slice, slices])
            fi, uri = split[1], split[2]
            part, parts = split[3:] or (0, 1)
            inp = self.stage.inputs[fi]
            if inp.route_by is not None and not self.fusion.pre.get(inp.flow_name):
                yield from self._map_batches(fi, uri, part, parts)
                return
            yield from self._route_records(
                fi, self._input_records(inp.flow_name, uri, part, parts), hash((uri, part)))
        elif kind == "pending":
            for item in load_pending(fs.read_required(split[1])):
                # (PENDING_STATE, enc, key, record) or (ASSOCIATION, address, enc, key)
                yield partition_of(item[1] if item[0] == PENDING_STATE else item[2], n), item
        elif kind == "blackbox":
            assert self.stage.state is not None  # black-box splits come from state files
            route = self.stage.state.route
            for rec in iter_records(split[1]):
                try:
                    enc, key = state_key(route, rec)
                except BadRoute as e:
                    raise RouteError(str(e), stage=self.stage.name, epoch=self.epoch,
                                     flow=STATE, record=rec, has_record=True) from None
                yield partition_of(enc, n), (STORED_STATE, enc, key, rec)
        else:  # pragma: no cover - programming error
            raise ValueError(f"unknown split {split!r}")

    def _route_records(self, fi: int, records: Iterable[dict], seq: int = 0
                       ) -> Iterator[tuple[int, tuple]]:
        """Route input records of flow ``fi`` one by one with its ``route_by``."""
        n, inp = self.num_partitions, self.stage.inputs[fi]
        route = inp.route
        for rec in records:
            if route is None:  # each record a group of its own, spread round-robin
                seq += 1
                yield seq % n, (UNKEYED, fi, rec)
                continue
            try:
                how, target = evaluate_route(route, rec)
            except BadRoute as e:
                raise RouteError(str(e), stage=self.stage.name, epoch=self.epoch,
                                 flow=inp.flow_name, record=rec, has_record=True) from None
            if how == ROUTE_KEYED:
                for enc, key in target:
                    yield partition_of(enc, n), (KEYED, fi, enc, key, rec)
            elif how == ROUTE_BROADCAST:
                item = (BROADCAST, fi, target.flows, rec)
                for p in range(n):
                    yield p, item
            elif how == ROUTE_MULTICAST:
                item = (MULTICAST, fi, target, rec)
                for p in range(n):
                    yield p, item

    def _map_batches(self, fi: int, uri: str, part: int, parts: int
                     ) -> Iterator[tuple[int, tuple]]:
        """An input file routed batch by batch: Arrow batches per partition where the
        route is one column (``column_route.py``), else record by record."""
        inp, n = self.stage.inputs[fi], self.num_partitions
        for batch in iter_arrow_batches(uri, 65536, part, parts):
            column = route_column(inp.route_by, batch.schema)
            if column is not None:
                for p, data in split_by_partition(batch, column, n):
                    yield p, (KEYED_BATCH, fi, column, data)
            else:
                yield from self._route_records(fi, records_of(batch))

    def _input_records(self, flow: str, uri: str, part: int, parts: int) -> Iterator[dict]:
        """Slice ``part`` of ``parts`` of an input file's records, through the record-wise
        stages fused before ``flow``."""
        chain = self.fusion.pre.get(flow)
        for batch in iter_batches(uri, 4096 if chain else 65536, part, parts):
            yield from apply_chain(chain, batch, self.epoch) if chain else batch

    # -- per-partition side ---------------------------------------------------------
    def run_partition(self, p: int, items: Iterable[Any]) -> list[dict]:
        """Group, translate and write partition ``p``; return what was written (or the error)."""
        try:
            with gc_paused():
                return [PartitionRun(self, p).run(items)]
        except EpochError as e:
            return [{"partition": p, "error": e.to_dict()}]

    def run_shuffled(self, p: int, pairs: Iterable[tuple[int, Any]]) -> list[dict]:
        """Partition ``p`` after ``partitionBy``: its items arrive as ``(p, item)`` pairs."""
        return self.run_partition(p, (item for _, item in pairs))

    def run_unshuffled(self, p: int, splits: Iterable[tuple]) -> list[dict]:
        """A record-wise stage: route and translate in the same task, no shuffle."""
        return self.run_partition(p, (item for _, item in self.map_splits(splits)))

    def run_here(self, splits: list[tuple]) -> list[dict]:
        """The whole epoch in this process (a small epoch, in the driver): what the Spark
        tasks would run, on the same splits and writing the same files, with the routed
        items handed over in memory instead of pickled through a shuffle."""
        results: list[dict] = []
        if self.stage.is_recordwise:  # as Spark's tasks: one per split, at least one
            for p in range(max(1, len(splits))):
                results += self.run_unshuffled(p, splits[p : p + 1])
                crashpoint("driver-partition")
            return results
        buckets: list[list] = [[] for _ in range(self.num_partitions)]
        for p, item in self.map_splits(splits):
            if item[0] in (BROADCAST, MULTICAST) and p:
                # each partition's own copy, as after a shuffle: a translate that changes a
                # record it was given must not change what other partitions see
                item = pickle.loads(pickle.dumps(item, pickle.HIGHEST_PROTOCOL))
            buckets[p].append(item)
        for p in range(self.num_partitions):
            items, buckets[p] = buckets[p], []
            results += self.run_partition(p, items)
            crashpoint("driver-partition")  # this partition's files written, not committed
        return results
