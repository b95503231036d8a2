"""What Spark tasks run for one stage epoch: the map side and the per-partition side.

The map side reads input increments (and, in black-box mode, the whole state),
applies ``route_by`` and tags each record with the partition that owns its key.
Broadcast and multicast records are sent once to every partition, not once per key.

The per-partition side (task ``p`` after the shuffle) groups its records by key with
one list per input flow (flow separation: reading one flow never buffers another),
fetches the state of partition ``p`` from its own files (direct mode; the state is
never shuffled), calls ``translate`` per group and writes the output increments,
the new state run and the records bound for other partitions ("pending") as new,
uniquely named files. The driver commits them by switching the state manifest.
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
from strata.model.emitter import Emitter
from strata.model.errors import (
    EpochError,
    RouteError,
    SchemaError,
)
from strata.model.invoke import call_translate
from strata.model.keys import encode_key, partition_of
from strata.model.route_eval import BROADCAST as ROUTE_BROADCAST
from strata.model.route_eval import KEYED as ROUTE_KEYED
from strata.model.route_eval import MULTICAST as ROUTE_MULTICAST
from strata.model.route_eval import (
    BadRoute,
    evaluate_route,
    sort_by,
    state_key,
)
from strata.model.schema import records_of, to_table
from strata.physical.fusion import NO_FUSION, Fusion, apply_chain
from strata.physical.records import (
    ASSOCIATION,
    BROADCAST,
    FAILURE,
    KEYED,
    MULTICAST,
    PENDING_STATE,
    STORED_STATE,
    UNKEYED,
    dump_pending,
    load_pending,
)
from strata.storage import fs
from strata.storage.direct_columns import DirectColumns, StoreSpec
from strata.storage.home import Home, StageLayout
from strata.storage.increments import iter_batches, iter_records, write_table
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


# key types whose equality is encoding equality (not float: 0.0 == -0.0)
_EXACT_KEYS = (str, int, bytes, bool)


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
            route = inp.route
            seq = hash((uri, part)) % n
            for rec in self._input_records(inp.flow_name, uri, part, parts):
                if route is None:
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
                return [_PartitionRun(self, p).run(items)]
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


class _PartitionRun:
    """One task's work on partition ``p`` of one epoch."""

    def __init__(self, task: EpochTask, p: int) -> None:
        self.t, self.p = task, p
        self.stage = task.stage
        self.flows = task.stage.input_names
        self.out = Emitter(task.stage)
        # (end index in the output buffer, key) per flow, to name the key of a bad record
        self.bounds: dict[str, list[tuple[int, Any]]] = {f: [] for f in self.out.outputs}
        # (record, calling key, its encoding): the encoding is None for record-wise calls
        self.state_written: list[tuple[dict, Any, bytes | None]] = []
        self.local: dict[bytes, list] = {}  # enc -> [key, records] kept in this partition
        self.remote: list[tuple] = []  # state records bound for other partitions
        self.assoc: list[tuple] = []
        self.store: DirectColumns | PartitionStore | None = None
        self.compaction_read = 0  # of store.bytes_read: read to merge runs
        # per-flow functions, looked up once rather than once per key
        self.state_order = task.stage.state.order if task.stage.state else None
        self.state_route = task.stage.state.route if task.stage.state else None
        route_by = task.stage.state.route_by if task.stage.state else None
        self.state_field = route_by if isinstance(route_by, str) else None
        self.orders = [(inp.flow_name, inp.order) for inp in task.stage.inputs]

    def _err(self, cls, detail: str, **kw) -> EpochError:
        return cls(detail, stage=self.stage.name, epoch=self.t.epoch, **kw)

    # -- collecting ---------------------------------------------------------------
    def run(self, items: Iterable[Any]) -> dict:
        nf = len(self.flows)
        groups: dict[bytes, list] = {}
        bcast: list[list] = [[] for _ in range(nf)]
        mcast: dict[bytes, list] = {}
        own: list[tuple[int, dict]] = []
        pending: dict[bytes, list] = {}
        assoc: dict[bytes, dict[bytes, Any]] = {}
        bbstate: dict[bytes, list] = {}
        for item in items:  # the layouts are in records.py
            kind = item[0]
            if kind == KEYED:
                _, fi, enc, key, rec = item
                g = groups.get(enc)
                if g is None:
                    g = groups[enc] = [key, [[] for _ in range(nf)]]
                g[1][fi].append(rec)
            elif kind == BROADCAST:
                _, fi, only, rec = item
                bcast[fi].append((rec, only))
            elif kind == MULTICAST:
                _, fi, address, rec = item
                mcast.setdefault(address, []).append((fi, rec))
            elif kind == UNKEYED:
                _, fi, rec = item
                own.append((fi, rec))
            elif kind == PENDING_STATE:
                _, enc, key, rec = item
                pending.setdefault(enc, [key, []])[1].append(rec)
            elif kind == ASSOCIATION:
                _, address, enc, key = item
                assoc.setdefault(address, {})[enc] = key
            elif kind == STORED_STATE:
                _, enc, key, rec = item
                bbstate.setdefault(enc, [key, []])[1].append(rec)
            elif kind == FAILURE:
                raise EpochError.from_dict(item[1])
        for addr, recs in mcast.items():
            for enc, key in assoc.get(addr, {}).items():
                g = groups.get(enc)
                if g is None:
                    g = groups[enc] = [key, [[] for _ in range(nf)]]
                for fi, rec in recs:
                    g[1][fi].append(rec)
        return self._translate_all(groups, bcast, own, pending, bbstate)

    # -- state access and translate -----------------------------------------------------
    def _translate_all(self, groups, bcast, own, pending, bbstate) -> dict:
        t, st = self.t, self.stage.state
        grouping = st.grouping if st is not None else None
        stored: dict[bytes, tuple[Any, list]] = {}
        if st is not None and t.mode == "direct":
            self.store = t.open_store(self.p)
            if grouping == "outer":
                stored = self.store.live()
            else:
                wanted = {enc: g[0] for enc, g in groups.items()}
                wanted.update((enc, kv[0]) for enc, kv in pending.items())
                stored = self.store.lookup(wanted)
        elif st is not None:
            stored = {enc: (kv[0], kv[1]) for enc, kv in bbstate.items()}
        state_of = dict(stored)
        for enc, (key, recs) in pending.items():
            old = state_of.get(enc)
            state_of[enc] = (key, (old[1] + recs) if old else recs)

        called = list(groups)
        if grouping == "outer":
            called += [enc for enc in state_of if enc not in groups]
        empty: list = [[] for _ in self.flows]
        for enc in called:
            g = groups.get(enc)
            s = state_of.get(enc)
            key = g[0] if g is not None else state_of[enc][0]
            per_flow = g[1] if g is not None else empty
            self._call(enc, key, s[1] if s else [], per_flow, bcast, state_of, groups)
        for fi, rec in own:
            per_flow = [[] for _ in self.flows]
            per_flow[fi] = [rec]
            self._call(None, None, [], per_flow, bcast=None, state_of=None, groups=None)
        return self._finish(set(called), stored, pending)

    def _call(self, enc, key, state_recs, per_flow, bcast, state_of, groups) -> None:
        stage, out = self.stage, self.out
        args: list[Iterator] = []
        try:
            if stage.state is not None:
                flow = STATE
                order = self.state_order
                args.append(iter(state_recs if order is None else sort_by(order, state_recs)))
            for fi, (flow, order) in enumerate(self.orders):  # noqa: B007 (flow names errors)
                recs = per_flow[fi]
                if bcast is not None and bcast[fi]:  # one shared copy per partition
                    recs = recs + [
                        r for r, only in bcast[fi]
                        if only is None or _present(only, enc, groups, state_of, self.flows)
                    ]
                args.append(iter(recs if order is None else sort_by(order, recs)))
        except BadRoute as e:
            raise self._err(RouteError, str(e), flow=flow, key=key, has_key=True) from None
        call_translate(stage, self.t.epoch, key, args, out, group=per_flow)
        for name, buf in out.outputs.items():
            b = self.bounds[name]
            if len(buf) != (b[-1][0] if b else 0):
                b.append((len(buf), key))
        writes, assoc = out.take_state_and_associations()
        for rec in writes:
            self.state_written.append((rec, key, enc))
        for akey, address in assoc:
            self.assoc.append((ASSOCIATION, encode_key(address), encode_key(akey), akey))

    # -- writing ---------------------------------------------------------------------
    def _finish(self, called: set, stored: dict, pending: dict) -> dict:
        t, p, st = self.t, self.p, self.stage.state
        result: dict[str, Any] = {"partition": p, "outputs": {}, "keys_called": len(called)}
        for name, buf in self.out.outputs.items():
            if buf:
                table = self._table(name, buf, self.stage[name].schema)
                chain = t.fusion.post.get(name)
                if chain:  # record-wise stages fused after this output
                    buf = apply_chain(chain, records_of(table), t.epoch)
                    table = to_table(buf, chain[-1][chain[-1].output_names[0]].schema)
                    name = t.fusion.tail(name)
                if buf:
                    uri = t.output_uri(name, p)
                    result["outputs"][name] = (uri, len(buf), write_table(uri, table))
        if st is not None:
            self._place_state(st.arrow_schema)
            if t.mode == "blackbox":
                if st.grouping == "inner":  # carry the unread state forward
                    for enc, (key, recs) in stored.items():
                        if enc not in called:
                            mine = self.local.get(enc)
                            self.local[enc] = [key, list(recs) + (mine[1] if mine else [])]
                recs = [r for _, rs in self.local.values() for r in rs]
                if recs:
                    uri = t._file(t.layout.blackbox_dir, p, "parquet")
                    write_table(uri, to_table(recs, st.arrow_schema))
                    result["blackbox"] = uri
            else:
                result["runs"] = [r.to_json() for r in self._write_direct(called, stored, pending)]
                assert self.store is not None  # direct mode with state opened it
                result["state_bytes_read"] = self.store.bytes_read
                result["state_bytes_compaction_read"] = self.compaction_read
        if self.remote or self.assoc:
            uri = t._file(t.layout.pending_dir, p, "pkl")
            fs.write_bytes_atomic(uri, dump_pending(self.remote + self.assoc))
            result["pending"] = uri
        return result

    def _write_direct(self, called: set, stored: dict, pending: dict) -> list[RunInfo]:
        t, store, st = self.t, self.store, self.stage.state
        assert store is not None and st is not None  # direct mode, a stage with state
        run_id = f"e{t.epoch:08d}-{t.token}"
        if st.grouping == "outer":
            entries = [(enc, kv[0], kv[1]) for enc, kv in self.local.items()]
            return [store.write_run(run_id, entries)] if entries else []
        entries = []
        for enc in called:  # translate saw these keys: their state is what it wrote
            if enc in self.local:
                entries.append((enc, *self.local[enc]))
            elif enc in stored:
                entries.append((enc, stored[enc][0], []))  # tombstone
        carry = (set(self.local) | set(pending)) - called
        if carry:  # not called: old state + pending + what others wrote to it
            old = store.lookup({enc: (self.local.get(enc) or pending[enc])[0]
                                for enc in carry - set(stored)})
            old.update({e: stored[e] for e in carry if e in stored})
            for enc in carry:
                key = (self.local.get(enc) or pending.get(enc) or old[enc])[0]
                recs = (old[enc][1] if enc in old else []) + (
                    pending[enc][1] if enc in pending else []) + (
                    self.local[enc][1] if enc in self.local else [])
                entries.append((enc, key, recs))
        runs = list(t.runs.get(self.p, []))
        if entries:
            runs.append(store.write_run(run_id, entries))
        before = store.bytes_read
        runs = store.maybe_compact(run_id + "-c", runs, max_runs=t.max_runs)
        self.compaction_read = store.bytes_read - before
        return runs

    def _table(self, flow: str, records: list, schema):
        res = to_table(records, schema)
        if isinstance(res, tuple):
            i, rec, why = res
            key = next((k for end, k in self.bounds.get(flow, []) if i < end), None)
            raise self._err(SchemaError, why, flow=flow, key=key, has_key=True, record=rec,
                            has_record=True)
        return res

    def _place_state(self, schema) -> None:
        """Check the epoch's state writes against the schema, then file each record (as
        the schema makes it) under its own key: here, or bound for another partition."""
        if not self.state_written:
            return
        res = to_table([r for r, _, _ in self.state_written], schema)
        if isinstance(res, tuple):
            i, rec, why = res
            raise self._err(SchemaError, why, flow=STATE, key=self.state_written[i][1],
                            has_key=True, record=rec, has_record=True)
        anywhere = self.t.mode == "blackbox"  # black-box re-shuffles all state anyway
        field = self.state_field
        for rec, (_, key, enc) in zip(records_of(res), self.state_written, strict=True):
            if field is not None and enc is not None:
                v = rec[field]
                if type(v) is type(key) and type(v) in _EXACT_KEYS and v == key:
                    # state for the calling key: its encoding is known, its partition is p.
                    # The key is the record's own value: pickled once with it (indexed store)
                    self.local.setdefault(enc, [v, []])[1].append(rec)
                    continue
            try:
                senc, skey = state_key(self.state_route, rec)
            except BadRoute as e:
                raise self._err(RouteError, str(e), flow=STATE, key=key, record=rec,
                                has_key=True, has_record=True) from None
            if anywhere or partition_of(senc, self.t.num_partitions) == self.p:
                self.local.setdefault(senc, [skey, []])[1].append(rec)
            else:
                self.remote.append((PENDING_STATE, senc, skey, rec))


def _present(only, enc, groups, state_of, flows) -> bool:
    """Does group ``enc`` have records in one of the flows a broadcast is limited to?"""
    g = groups.get(enc) if groups is not None else None
    for f in only:
        if f == STATE:
            if state_of and enc in state_of:
                return True
        elif g is not None and f in flows and g[1][flows.index(f)]:
            return True
    return False
