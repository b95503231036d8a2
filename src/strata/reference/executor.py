"""The reference executor: one stage epoch, written for clarity rather than speed.

It follows the model (docs/architecture.md, "The model in one page") literally: route
every input record, form the groups of the epoch, call translate once per group with
one iterator per flow (state first), route state writes to their own keys, carry unread
state forward under inner grouping, and remember associations for the next epoch's
multicasts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from strata.model.dataflow import STATE, Stage
from strata.model.emitter import Emitter
from strata.model.errors import RouteError, SchemaError
from strata.model.invoke import call_translate
from strata.model.keys import encode_key
from strata.model.route_eval import (
    BROADCAST,
    DROP,
    KEYED,
    MULTICAST,
    BadRoute,
    evaluate_route,
    sort_by,
    state_key,
)
from strata.model.schema import records_of, to_table


@dataclass
class RefState:
    """A stage's committed state: key → records, and last epoch's associations."""

    entries: dict[bytes, tuple[Any, list[dict]]] = field(default_factory=dict)
    associations: dict[bytes, dict[bytes, Any]] = field(default_factory=dict)

    def records(self) -> list[dict]:
        return [r for _, recs in self.entries.values() for r in recs]


def run_stage_epoch(
    stage: Stage, inputs: dict[str, list[dict]], state: RefState, epoch: int
) -> tuple[dict[str, list[dict]], RefState]:
    """Run one epoch of ``stage``; return its output increments and its new state."""
    flows = stage.input_names
    routed = _route_inputs(stage, inputs, state, epoch)
    grouping = stage.state.grouping if stage.state else None
    called = set(routed.keyed)
    if grouping == "outer":
        called |= set(state.entries)
        for enc in state.entries:
            routed.key_of.setdefault(enc, state.entries[enc][0])

    calls = _Calls(stage, epoch)
    for enc in sorted(called):
        per_flow = routed.keyed[enc] if enc in routed.keyed else {f: [] for f in flows}
        state_recs = state.entries[enc][1] if enc in state.entries else []
        per_flow = {f: list(per_flow[f]) for f in flows}
        for f in flows:
            for rec, target in routed.broadcasts[f]:
                if _receives(target, enc, routed.keyed, state):
                    per_flow[f].append(rec)
        calls.call(routed.key_of[enc], state_recs, per_flow)

    for f, rec in routed.own_groups:
        per_flow = {g: [] for g in flows}
        per_flow[f] = [rec]
        calls.call(None, [], per_flow)

    new_entries = calls.entries
    if grouping == "inner":  # carry unread state forward, plus what was written to it
        for enc, (key, recs) in state.entries.items():
            if enc not in called:
                written = new_entries.get(enc, (key, []))[1]
                new_entries[enc] = (key, list(recs) + written)
    new_state = RefState(
        entries={e: kv for e, kv in new_entries.items() if kv[1]},
        associations={a: dict(ks) for a, ks in calls.associations.items()},
    )
    return {n: list(b) for n, b in calls.out.outputs.items()}, new_state


@dataclass
class _Routed:
    """An epoch's input records routed: by group (encoded key -> flow -> records, with
    each group's key), those broadcast (with their targets) and those routed to a group
    of their own."""

    keyed: dict[bytes, dict[str, list[dict]]]
    key_of: dict[bytes, Any]
    broadcasts: dict[str, list[tuple[dict, Any]]]
    own_groups: list[tuple[str, dict]]


def _route_inputs(stage: Stage, inputs: dict[str, list[dict]], state: RefState,
                  epoch: int) -> _Routed:
    """Route every input record of the epoch (a multicast to the keys last epoch's
    associations give its address)."""
    flows = stage.input_names
    routed = _Routed(defaultdict(lambda: {f: [] for f in flows}), {},
                     {f: [] for f in flows}, [])
    for inp in stage.inputs:
        f, route = inp.flow_name, inp.route
        for rec in inputs.get(f, []):
            if route is None:
                routed.own_groups.append((f, rec))
                continue
            try:
                kind, target = evaluate_route(route, rec)
            except BadRoute as e:
                raise RouteError(str(e), stage=stage.name, epoch=epoch, flow=f, record=rec,
                                 has_record=True) from None
            if kind == KEYED:
                for enc, key in target:
                    routed.key_of[enc] = key
                    routed.keyed[enc][f].append(rec)
            elif kind == BROADCAST:
                routed.broadcasts[f].append((rec, target))
            elif kind == MULTICAST:
                for enc, key in state.associations.get(target, {}).items():
                    routed.key_of[enc] = key
                    routed.keyed[enc][f].append(rec)
            else:
                assert kind == DROP
    return routed


class _Calls:
    """The translate calls of one epoch of ``stage``: their outputs (``out``), the state
    records they wrote by key (``entries``) and their associations."""

    def __init__(self, stage: Stage, epoch: int) -> None:
        self.stage, self.epoch = stage, epoch
        self.out = Emitter(stage)
        self.entries: dict[bytes, tuple[Any, list[dict]]] = {}
        self.associations: dict[bytes, dict[bytes, Any]] = defaultdict(dict)

    def call(self, key: Any, state_recs: list[dict], per_flow: dict[str, list[dict]]) -> None:
        """Call translate for the group ``key`` with its state and input records."""
        stage, epoch, out = self.stage, self.epoch, self.out
        args = self._iterators(key, state_recs, per_flow)
        before = {n: len(b) for n, b in out.outputs.items()}
        call_translate(stage, epoch, key, args, out, group=per_flow.values())
        for name, buf in out.outputs.items():  # records are what their schema makes of them
            buf[before[name]:] = _check_schema(stage, epoch, name, buf[before[name]:], key)
        writes, assoc = out.take_state_and_associations()
        writes = _check_schema(stage, epoch, STATE, writes, key)
        for rec in writes:
            assert stage.state is not None  # only a stage with a state writes to it
            try:
                enc, skey = state_key(stage.state.route, rec)
            except BadRoute as e:
                raise RouteError(str(e), stage=stage.name, epoch=epoch, flow=STATE, key=key,
                                 record=rec, has_key=True, has_record=True) from None
            self.entries.setdefault(enc, (skey, []))[1].append(rec)
        for akey, address in assoc:
            self.associations[encode_key(address)][encode_key(akey)] = akey

    def _iterators(self, key: Any, state_recs: list[dict], per_flow: dict[str, list[dict]]
                   ) -> list[Any]:
        """Translate's arguments: one iterator per flow (state first), each in its order."""
        stage, epoch = self.stage, self.epoch
        args: list[Any] = []
        if stage.state is not None:
            try:
                args.append(iter(sort_by(stage.state.order, state_recs)))
            except BadRoute as e:
                raise RouteError(str(e), stage=stage.name, epoch=epoch, flow=STATE, key=key,
                                 has_key=True) from None
        for inp in stage.inputs:
            try:
                args.append(iter(sort_by(inp.order, per_flow[inp.flow_name])))
            except BadRoute as e:
                raise RouteError(str(e), stage=stage.name, epoch=epoch, flow=inp.flow_name,
                                 key=key, has_key=True) from None
        return args


def _receives(target, enc: bytes, keyed, state: RefState) -> bool:
    """Does group ``enc`` receive a broadcast restricted to ``target.flows``?"""
    if target.flows is None:
        return True
    for f in target.flows:
        if f == STATE:
            if enc in state.entries:
                return True
        elif enc in keyed and keyed[enc].get(f):
            return True
    return False


def _check_schema(stage: Stage, epoch: int, flow: str, records: list[dict],
                  key: Any) -> list[dict]:
    """The records as the flow's schema makes them; a misfit stops the epoch."""
    if not records:
        return records
    if flow == STATE:
        assert stage.state is not None  # only a stage with a state writes to it
        schema = stage.state.arrow_schema
    else:
        schema = _flow_schema(stage, flow)
    result = to_table(records, schema)
    if isinstance(result, tuple):
        _, rec, why = result
        raise SchemaError(why, stage=stage.name, epoch=epoch, flow=flow, key=key, record=rec,
                          has_key=True, has_record=True)
    return records_of(result)


def _flow_schema(stage: Stage, flow: str):
    return stage[flow].schema


class ReferenceExecutor:
    """Runs stage epochs one after another, keeping each stage's state in memory."""

    def __init__(self) -> None:
        self.states: dict[str, RefState] = {}
        self.epochs: dict[str, int] = {}

    def run(self, stage: Stage, inputs: dict[str, list[dict]]) -> dict[str, list[dict]]:
        epoch = self.epochs.get(stage.name, 0) + 1
        outputs, new_state = run_stage_epoch(
            stage, inputs, self.states.get(stage.name, RefState()), epoch
        )
        self.states[stage.name] = new_state
        self.epochs[stage.name] = epoch
        return outputs

    def state_records(self, stage: Stage) -> list[dict]:
        return self.states.get(stage.name, RefState()).records()
