"""Fusing record-wise stages into the job of a neighbouring groupwise stage.

A record-wise stage (no state, no route_by: each record its own group) needs no
grouping, so it can run inside the map side of the groupwise stage it feeds
("pre") or on the emit side of the groupwise stage that feeds it ("post"), with no
job and no shuffle of its own, and no materialised intermediate flow. The records
still go through the fused stage's ``translate`` one by one and are checked
against the intermediate flow's schema, so results are those of unfused execution.

Only single-input, single-output record-wise stages with default framing and
runnability fuse, and only across a flow that has no other consumer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from strata.model.dataflow import Dataflow, Stage
from strata.model.emitter import Emitter
from strata.model.errors import SchemaError
from strata.model.invoke import call_translate
from strata.model.schema import records_of, to_table


@dataclass(frozen=True)
class Fusion:
    """Record-wise chains fused into one stage's job.

    ``pre[f]``: stages, upstream first, whose chain produces input flow ``f``; the
    epoch's increments for ``f`` are then increments of the chain's first input.
    ``post[f]``: stages, in flow order, that consume output flow ``f``; the job
    writes the chain's last output instead of ``f``.
    """

    pre: Mapping[str, tuple[Stage, ...]] = field(default_factory=dict)
    post: Mapping[str, tuple[Stage, ...]] = field(default_factory=dict)

    def head(self, flow: str) -> str:
        """The flow whose increments feed input ``flow``."""
        chain = self.pre.get(flow)
        return chain[0].input_names[0] if chain else flow

    def tail(self, flow: str) -> str:
        """The flow the job writes for output ``flow``."""
        chain = self.post.get(flow)
        return chain[-1].output_names[0] if chain else flow

    @property
    def members(self) -> list[str]:
        return [s.name for c in (*self.pre.values(), *self.post.values()) for s in c]


NO_FUSION = Fusion()


def fusable(stage: Stage) -> bool:
    """Can ``stage`` run inside a neighbour's job?"""
    return (
        stage.is_recordwise
        and len(stage.inputs) == 1
        and len(stage.outputs) == 1
        and stage.runnable is None
        and stage.inputs[0].frame_by is None
        and stage.inputs[0].flow_name != stage.output_names[0]
    )


@dataclass(frozen=True)
class PhysicalStage:
    """A unit the physical layer runs as one job: a stage plus the stages fused into it."""

    stage: Stage
    fusion: Fusion = NO_FUSION

    @property
    def name(self) -> str:
        return "+".join([*(s.name for c in self.fusion.pre.values() for s in c), self.stage.name,
                         *(s.name for c in self.fusion.post.values() for s in c)])

    @property
    def input_flows(self) -> list[str]:
        return [self.fusion.head(f) for f in self.stage.input_names]

    @property
    def output_flows(self) -> list[str]:
        return [self.fusion.tail(f) for f in self.stage.output_names]


def plan(df: Dataflow) -> list[PhysicalStage]:
    """Fuse every fusable record-wise stage into a groupwise neighbour where possible."""
    consumers = {f: df.consumers(f) for f in df.flows}
    fused: set[str] = set()

    def upstream_chain(flow: str) -> tuple[Stage, ...]:
        chain: list[Stage] = []
        while True:
            producer = df.flows[flow].producer
            if producer is None or len(consumers[flow]) != 1:
                break
            s = df.stages[producer]
            if not fusable(s) or s.name in fused or s in chain:
                break
            chain.insert(0, s)
            flow = s.input_names[0]
        return tuple(chain)

    def downstream_chain(flow: str) -> tuple[Stage, ...]:
        chain: list[Stage] = []
        while len(consumers[flow]) == 1:
            s = consumers[flow][0]
            if not fusable(s) or s.name in fused or s in chain:
                break
            chain.append(s)
            flow = s.output_names[0]
        return tuple(chain)

    units: list[PhysicalStage] = []
    for s in df.topological_order():
        if s.is_recordwise:
            continue
        if s.program is not None:  # a compiled query runs its own plan: nothing fuses in
            units.append(PhysicalStage(s))
            continue
        # a framed input is cut by its own records, which a pre-chain would hide
        pre = {i.flow_name: c for i in s.inputs
               if i.frame_by is None and (c := upstream_chain(i.flow_name))}
        fused.update(x.name for c in pre.values() for x in c)
        post = {f: c for f in s.output_names if (c := downstream_chain(f))}
        fused.update(x.name for c in post.values() for x in c)
        units.append(PhysicalStage(s, Fusion(pre, post)))
    for s in df.topological_order():
        if s.is_recordwise and s.name not in fused:
            fused.add(s.name)
            post = {f: c for f in s.output_names if (c := downstream_chain(f))}
            fused.update(x.name for c in post.values() for x in c)
            units.append(PhysicalStage(s, Fusion({}, post)))
    return units


def apply_chain(chain: Iterable[Stage], records: list[dict], epoch: int) -> list[dict]:
    """Run ``records`` through record-wise stages, checking each intermediate flow."""
    for st in chain:
        out = Emitter(st)
        flow = st.output_names[0]
        for rec in records:
            call_translate(st, epoch, None, [iter([rec])], out, group=[[rec]], has_key=False)
        checked = to_table(out.outputs[flow], st[flow].schema)
        if isinstance(checked, tuple):
            _, rec, why = checked
            raise SchemaError(why, stage=st.name, epoch=epoch, flow=flow, record=rec,
                              has_record=True)
        records = records_of(checked)  # as a stored flow would hand them on
    return records
