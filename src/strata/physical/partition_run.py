"""The per-partition side of a translate epoch: what task ``p`` does after the shuffle.

It groups the partition's items by key with one list per input flow, fetches the
partition's state from its own files (direct mode; the state is never shuffled), calls
``translate`` per group and writes the output increments, the new state run and the
records bound for other partitions ("pending") as new, uniquely named files.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strata.model.dataflow import STATE
from strata.model.emitter import Emitter
from strata.model.errors import EpochError, RouteError, SchemaError
from strata.model.invoke import returned_value, translate_failure
from strata.model.keys import encode_key, partition_of
from strata.model.route_eval import BadRoute, sort_by, state_key
from strata.model.schema import records_of, to_table
from strata.physical.column_route import grouped_rows
from strata.physical.fusion import apply_chain
from strata.physical.records import (
    ASSOCIATION,
    BROADCAST,
    FAILURE,
    KEYED,
    KEYED_BATCH,
    MULTICAST,
    PENDING_STATE,
    STORED_STATE,
    UNKEYED,
    dump_pending,
)
from strata.storage import fs
from strata.storage.direct_columns import DirectColumns
from strata.storage.increments import write_table
from strata.storage.partition_store import PartitionStore, RunInfo

if TYPE_CHECKING:
    from strata.physical.tasks import EpochTask

# key types whose equality is encoding equality (not float: 0.0 == -0.0)
_EXACT_KEYS = (str, int, bytes, bool)


class PartitionRun:
    """One task's work on partition ``p`` of one epoch."""

    def __init__(self, task: EpochTask, p: int) -> None:
        self.t, self.p = task, p
        self.stage = task.stage
        self.flows = task.stage.input_names
        self.out = Emitter(task.stage)
        # (end index in the output buffer, key) per flow, to name the key of a bad record
        self.bounds: dict[str, list[tuple[int, Any]]] = {f: [] for f in self.out.outputs}
        self.buffers = [(buf, self.bounds[f]) for f, buf in self.out.outputs.items()]
        # (record, calling key, its encoding): the encoding is None for record-wise calls
        self.state_written: list[tuple[dict, Any, bytes | None]] = []
        self.local: dict[bytes, list] = {}  # enc -> [key, records] kept in this partition
        self.local_table: pa.Table | None = None  # self.local's records, when all are in it
        # (records, their table) per output flow: a translate that writes to an output what
        # it keeps in state (as the URL count does) has its state table made once
        self.output_tables: list[tuple[list[dict], pa.Table]] = []
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
        self.unordered = self.state_order is None and all(o is None for _, o in self.orders)

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
        batches: dict[tuple[int, str], list[bytes]] = {}  # (flow, key column) -> IPC buffers

        flow_range = range(nf)

        def new_group(enc: bytes, key: Any) -> list:
            # [key, records per flow]; a comprehension costs more than the group itself
            g = groups[enc] = [key, [[]] if nf == 1 else [[] for _ in flow_range]]
            return g

        for item in items:  # the layouts are in records.py
            kind = item[0]
            if kind == KEYED:
                _, fi, enc, key, rec = item
                (groups.get(enc) or new_group(enc, key))[1][fi].append(rec)
            elif kind == KEYED_BATCH:  # grouped below, all of a flow's batches at once
                _, fi, column, data = item
                batches.setdefault((fi, column), []).append(data)
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
        for (fi, column), buffers in batches.items():
            if nf == 1 and not groups:  # the common case, built without a call per key
                groups = {enc: [key, [recs]] for enc, key, recs in grouped_rows(buffers, column)}
                continue
            for enc, key, recs in grouped_rows(buffers, column):
                per_flow = (groups.get(enc) or new_group(enc, key))[1]
                per_flow[fi] = per_flow[fi] + recs if per_flow[fi] else recs
        for addr, recs in mcast.items():
            for enc, key in assoc.get(addr, {}).items():
                g = groups.get(enc) or new_group(enc, key)
                for fi, rec in recs:
                    g[1][fi].append(rec)
        return self._translate_all(groups, bcast, own, pending, bbstate)

    # -- state access and translate -----------------------------------------------------
    def _translate_all(self, groups, bcast, own, pending, bbstate) -> dict:
        t, st = self.t, self.stage.state
        grouping = st.grouping if st is not None else None
        stored: dict[bytes, tuple[Any, Any]] = {}  # records: a list or a tuple
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
        state_of = dict(stored) if pending else stored
        for enc, (key, recs) in pending.items():
            old = state_of.get(enc)
            state_of[enc] = (key, [*old[1], *recs] if old else recs)

        state_only = ([enc for enc in state_of if enc not in groups] if grouping == "outer"
                      else [])
        called = list(groups) + state_only
        calls: Iterable[tuple] = groups.items()
        if state_only:  # outer grouping also calls the stored keys without input
            empty: list = [[] for _ in self.flows]
            keys = map(operator.itemgetter(0), map(state_of.__getitem__, state_only))
            # (enc, (key, records per flow)) pairs built with no Python per key
            calls = chain(calls, zip(state_only, zip(keys, repeat(empty), strict=False),
                                     strict=True))
        self.broadcasts = any(bcast)
        plain = self.unordered and not self.broadcasts
        self._call_each(calls, state_of.get,
                        None if plain else partial(self._args, bcast, state_of, groups))

        def own_calls() -> Iterator[tuple]:  # record-wise: each record a group of its own
            for fi, rec in own:
                per_flow: list[list] = [[] for _ in self.flows]
                per_flow[fi] = [rec]
                yield None, (None, per_flow)

        self._call_each(own_calls(), {}.get, None if self.unordered
                        else partial(self._args, None, None, None))
        return self._finish(set(called), stored, pending)

    def _call_each(self, calls: Iterable[tuple[Any, Any]], state_get: Callable[[Any], Any],
                   args_of: Callable[..., list] | None) -> None:
        """Call translate for each ``(enc, (key, records per flow))`` of ``calls``, with
        the state ``state_get(enc)`` (``(key, records)`` or None), and collect what it
        wrote. ``args_of(enc, key, state records, records per flow)`` makes its arguments;
        None: the common case, no ``order_by`` and no broadcast records, built inline.

        Outer grouping makes one call per stored key, so this loop is the epoch's hot
        path: its lookups are hoisted and translate is called inline rather than through
        ``call_translate``, with the same errors."""
        stage, out, epoch = self.stage, self.out, self.t.epoch
        translate: Any = stage.translate  # declared to return None; a mistake may not
        stateful, single = stage.state is not None, len(self.flows) == 1
        buffers, written, nothing = self.buffers, self.state_written, ()
        for enc, (key, per_flow) in calls:
            s = state_get(enc)
            if args_of is not None:
                args = args_of(enc, key, s[1] if s else nothing, per_flow)
            try:
                if args_of is not None:
                    result = translate(key, *args, out=out)
                elif not stateful:
                    result = translate(key, *map(iter, per_flow), out=out)
                elif single:
                    result = translate(key, iter(s[1] if s else nothing), iter(per_flow[0]),
                                       out=out)
                else:
                    result = translate(key, iter(s[1] if s else nothing), *map(iter, per_flow),
                                       out=out)
            except Exception as e:  # noqa: BLE001 - any user error stops the epoch cleanly
                raise translate_failure(stage, epoch, key, e, per_flow) from None
            if result is not None:
                raise returned_value(stage, epoch, key, per_flow)
            for buf, b in buffers:  # (end index, key) to name the key of a bad record
                if len(buf) != (b[-1][0] if b else 0):
                    b.append((len(buf), key))
            if out.state_writes:
                for rec in out.state_writes:
                    written.append((rec, key, enc))
                out.state_writes = []
            if out.associations:
                for akey, address in out.take_state_and_associations()[1]:
                    self.assoc.append((ASSOCIATION, encode_key(address), encode_key(akey),
                                       akey))

    def _args(self, bcast, state_of, groups, enc, key, state_recs, per_flow) -> list[Iterator]:
        """Translate's arguments with broadcast records added and ``order_by`` applied; a
        failing ``order_by`` is a RouteError naming the flow and key."""
        args: list[Iterator] = []
        try:
            self._ordered_args(args, enc, state_recs, per_flow, bcast, state_of, groups)
        except BadRoute as e:
            raise self._err(RouteError, str(e), flow=e.args[1], key=key, has_key=True
                            ) from None
        return args

    def _ordered_args(self, args, enc, state_recs, per_flow, bcast, state_of, groups) -> None:
        """Translate's arguments with broadcast records added and ``order_by`` applied;
        a failing ``order_by`` raises ``BadRoute(message, flow)``."""
        flow = STATE
        try:
            if self.stage.state is not None:
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
            raise BadRoute(str(e), flow) from None

    # -- writing ---------------------------------------------------------------------
    def _finish(self, called: set, stored: dict, pending: dict) -> dict:
        t, p, st = self.t, self.p, self.stage.state
        result: dict[str, Any] = {"partition": p, "outputs": {}, "keys_called": len(called)}
        for name, buf in self.out.outputs.items():
            if buf:
                table = self._table(name, buf, self.stage[name].schema)
                self.output_tables.append((buf, table))
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
                result["state_bytes_from_machine"] = self.store.bytes_from_machine
                result["state_bytes_compaction_read"] = self.compaction_read
        if self.remote or self.assoc:
            uri = t._file(t.layout.pending_dir, p, "pkl")
            fs.write_bytes_atomic(uri, dump_pending(self.remote + self.assoc))
            result["pending"] = uri
        return result

    def _writes_whole_table(self) -> bool:
        """Is the new state run the epoch's state writes as one table, as they are? So in
        direct mode with outer grouping over columnar runs: every stored key was called,
        and what translate wrote is the partition's whole state."""
        st = self.stage.state
        return (self.t.mode == "direct" and st is not None and st.grouping == "outer"
                and isinstance(self.store, DirectColumns))

    def _write_direct(self, called: set, stored: dict, pending: dict) -> list[RunInfo]:
        t, store, st = self.t, self.store, self.stage.state
        assert store is not None and st is not None  # direct mode, a stage with state
        run_id = f"e{t.epoch:08d}-{t.token}"
        written = self.local_table  # the records of self.local as one table, if known
        if st.grouping == "outer":
            if written is not None and isinstance(store, DirectColumns):
                return [store.write_table(run_id, written)]  # see _writes_whole_table
            entries = [(enc, kv[0], kv[1]) for enc, kv in self.local.items()]
            return [store.write_run(run_id, entries)] if entries else []
        # translate saw the called keys: their state is what it wrote, or a tombstone
        local = self.local
        dead: list[tuple[bytes, Any, list]] = [(enc, stored[enc][0], []) for enc in called
                                                if enc not in local and enc in stored]
        carry = (local.keys() | pending.keys()) - called
        runs = list(t.runs.get(self.p, []))
        if written is not None and not carry and isinstance(store, DirectColumns):
            if written.num_rows or dead:
                runs.append(store.write_table(run_id, written, [e[:2] for e in dead]))
            entries = []
        else:
            entries = [(enc, *local[enc]) for enc in called if enc in local] + dead
        if carry:  # not called: old state + pending + what others wrote to it
            old = store.lookup({enc: (self.local.get(enc) or pending[enc])[0]
                                for enc in carry - set(stored)})
            old.update({e: stored[e] for e in carry if e in stored})
            for enc in carry:
                key = (self.local.get(enc) or pending.get(enc) or old[enc])[0]
                recs = (list(old[enc][1]) if enc in old else []) + (
                    pending[enc][1] if enc in pending else []) + (
                    self.local[enc][1] if enc in self.local else [])
                entries.append((enc, key, recs))
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

    def _exact_key_type(self) -> type | None:
        """The Python type of the state's key column when direct mode keeps it in columnar
        runs keyed by that column (``storage/direct_columns.py``); else None."""
        spec, field = self.t.store, self.state_field
        if (field is None or self.t.mode != "direct" or spec.format != "columns"
                or spec.column != field):
            return None
        kind = spec.arrow_schema.field(field).type
        for test, python in ((pa.types.is_boolean, bool), (pa.types.is_integer, int),
                             (pa.types.is_string, str), (pa.types.is_large_string, str),
                             (pa.types.is_binary, bytes), (pa.types.is_large_binary, bytes)):
            if test(kind):
                return python
        return None

    def _place_state(self, schema) -> None:
        """Check the epoch's state writes against the schema, then file each record (as
        the schema makes it) under its own key: here, or bound for another partition."""
        if not self.state_written:
            return
        records = list(map(operator.itemgetter(0), self.state_written))
        res = next((table for buf, table in self.output_tables
                    if _same_records(buf, records) and table.schema.equals(schema)), None)
        if res is None:
            res = to_table(records, schema)
        if isinstance(res, tuple):
            i, rec, why = res
            raise self._err(SchemaError, why, flow=STATE, key=self.state_written[i][1],
                            has_key=True, record=rec, has_record=True)
        anywhere = self.t.mode == "blackbox"  # black-box re-shuffles all state anyway
        field, exact = self.state_field, self._exact_key_type()
        written = self.state_written
        if exact is not None:
            # Columnar runs convert records to the schema's types when they are written,
            # so a record kept here under its own key column need not be converted back
            # first; the others (bound elsewhere, or keyed otherwise) are, as below.
            misplaced = [i for i, (rec, key, enc) in enumerate(written)
                         if not (type(v := rec[field]) is exact and type(key) is exact
                                 and v == key and enc is not None)]
            if not misplaced and self._writes_whole_table():
                self.local_table = res  # the new run is this table: no per-key filing
                return
            gone = set(misplaced)
            placed: list[tuple[dict, Any, Any]] = (  # each with its encoding (not None)
                written if not misplaced else [w for i, w in enumerate(written) if i not in gone])
            # self.local is empty until here. One record per key, the common case: one
            # comprehension; keys with several records are filed again, in order
            local = self.local
            local.update({enc: [key, [rec]] for rec, key, enc in placed})
            if len(local) != len(placed):
                local.clear()
                for rec, key, enc in placed:
                    kept = local.get(enc)
                    if kept is None:
                        local[enc] = [key, [rec]]
                    else:
                        kept[1].append(rec)
            if not misplaced:  # every record kept under its calling key: res is self.local
                self.local_table = res
                return
            normalized = records_of(res.take(misplaced))
            written = [(rec, *written[i][1:]) for rec, i in zip(normalized, misplaced,
                                                                 strict=True)]
            field = None
        else:
            written = [(rec, *w[1:]) for rec, w in zip(records_of(res), written, strict=True)]
        for rec, key, enc in written:
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


def _same_records(a: list[dict], b: list[dict]) -> bool:
    """Are ``a`` and ``b`` the same record objects in the same order?"""
    return len(a) == len(b) and all(map(operator.is_, a, b))


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
