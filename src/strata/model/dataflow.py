"""The logical model: dataflows of stages connected by flows (cycles allowed)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Protocol, runtime_checkable

import pyarrow as pa

from strata.model.errors import DataflowError
from strata.model.routing import column_router
from strata.model.schema import SchemaLike, requiring, to_arrow_schema

Record = dict[str, Any]
KeyFn = Callable[[Record], Any]
Translate = Callable[..., None]
STATE = "state"  # the name translate writes state records to: out.write("state", r) / out.state(r)


@runtime_checkable
class StageProgram(Protocol):
    """What the model knows of a stage's compiled program: its kind. The program runs
    the stage's epochs instead of a ``translate`` (a compiled query, say); the physical
    layer defines the whole contract (``strata.physical.program.StageProgram``), whose
    ``required_columns()`` the model also reads: the columns of its external inputs
    every record needs a value in (:meth:`Dataflow.stage` declares them NOT NULL)."""

    @property
    def kind(self) -> str: ...


def _key_fn(spec: str | Sequence[str] | KeyFn | None, what: str) -> KeyFn | None:
    if spec is None or callable(spec):
        return spec
    if isinstance(spec, str):
        return column_router(spec)
    if isinstance(spec, Sequence) and all(isinstance(c, str) for c in spec):
        return column_router(tuple(spec))
    raise DataflowError(f"{what} must be a column name, a list of column names or a function")


@dataclass(eq=False)
class Flow:
    """A named, typed sequence of records passed between stages over time."""

    name: str
    schema: pa.Schema
    external: bool = False  # an external input: users append increments to it
    producer: str | None = None  # the stage that writes it (None for external inputs)
    dataflow: Dataflow | None = field(default=None, repr=False)

    @property
    def is_source(self) -> bool:
        return self.external

    def __repr__(self) -> str:
        return f"Flow({self.name!r})"


@dataclass(frozen=True, eq=False)
class Input:
    """One input flow of a stage, with its per-flow functions.

    ``route_by``: column name(s) or ``record -> key | set | ALL | Multicast | NONE``;
    ``None`` (default) makes each record its own group (record-wise).
    ``order_by``: column name(s) or ``record -> sort key``; order within a group.
    ``frame_by``: ``(record, framing_state) -> (framing_key, framing_state)``; ``None``
    means one increment per upstream epoch (FrameByPrior).
    """

    flow: Flow | str
    route_by: str | Sequence[str] | KeyFn | None = None
    order_by: str | Sequence[str] | KeyFn | None = None
    frame_by: Callable[[Record, Any], tuple[Any, Any]] | None = None

    @property
    def flow_name(self) -> str:
        return self.flow if isinstance(self.flow, str) else self.flow.name

    @cached_property
    def route(self) -> KeyFn | None:
        return _key_fn(self.route_by, f"route_by of input {self.flow_name!r}")

    @cached_property
    def order(self) -> KeyFn | None:
        return _key_fn(self.order_by, f"order_by of input {self.flow_name!r}")


@dataclass(frozen=True, eq=False)
class State:
    """A stage's state: a loopback flow grouped with the inputs by ``route_by``.

    ``grouping="outer"`` calls translate for every key in state or in any input;
    ``"inner"`` only for keys present in some non-state input, carrying the other
    state records forward untouched and unread.
    """

    schema: SchemaLike
    route_by: str | Sequence[str] | KeyFn | None = None
    grouping: Literal["outer", "inner"] = "outer"
    order_by: str | Sequence[str] | KeyFn | None = None

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        return to_arrow_schema(self.schema)

    @cached_property
    def route(self) -> KeyFn | None:
        return _key_fn(self.route_by, "route_by of the state")

    @cached_property
    def order(self) -> KeyFn | None:
        return _key_fn(self.order_by, "order_by of the state")


@dataclass(eq=False)
class Stage:
    """A vertex: ``translate(key, [state,] *inputs, out=emitter)`` run in epochs."""

    name: str
    translate: Translate
    inputs: list[Input]
    outputs: list[Flow]
    state: State | None = None
    runnable: Callable[..., Any] | None = None
    # a compiled program that runs the stage's epochs instead of translate (e.g. a query)
    program: StageProgram | None = None

    @property
    def input_names(self) -> list[str]:
        return [i.flow_name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [f.name for f in self.outputs]

    @property
    def is_recordwise(self) -> bool:
        """No state and no grouping: each record is its own group (fusable like a map)."""
        return (self.program is None and self.state is None
                and all(i.route_by is None for i in self.inputs))

    def input(self, flow: str) -> Input:
        for i in self.inputs:
            if i.flow_name == flow:
                return i
        raise DataflowError(f"stage {self.name!r} has no input flow {flow!r}")

    def __getitem__(self, flow: str) -> Flow:
        for f in self.outputs:
            if f.name == flow:
                return f
        raise DataflowError(f"stage {self.name!r} has no output flow {flow!r}")

    def __repr__(self) -> str:
        return f"Stage({self.name!r})"


class Dataflow:
    """A directed graph of stages (vertices) and flows (edges); cycles are allowed.

    >>> df = Dataflow("urlcount")
    >>> urls = df.source("urls", "url string")
    >>> counts = df.stage("count", count_urls, inputs=[Input(urls, route_by="url")],
    ...                   outputs={"counts": "url string, n long"},
    ...                   state=State("url string, n long", route_by="url"))
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.flows: dict[str, Flow] = {}
        self.stages: dict[str, Stage] = {}

    # -- building -----------------------------------------------------------------
    def source(self, name: str, schema: SchemaLike) -> Flow:
        """Declare an external input flow that users append increments to."""
        return self._add_flow(name, schema, external=True)

    def flow(self, name: str, schema: SchemaLike) -> Flow:
        """Declare a flow before its producer, e.g. a loopback or a cycle's back edge."""
        return self._add_flow(name, schema)

    def _add_flow(self, name: str, schema: SchemaLike, external: bool = False) -> Flow:
        if not name or not name.replace("_", "a").replace("-", "a").isalnum():
            raise DataflowError(f"flow name {name!r}: use letters, digits, '_' or '-'")
        if name == STATE:
            raise DataflowError(f"{STATE!r} is reserved for stage state; choose another flow name")
        if name in self.flows:
            raise DataflowError(f"flow {name!r} is declared twice in dataflow {self.name!r}")
        f = Flow(name, to_arrow_schema(schema), external=external, dataflow=self)
        self.flows[name] = f
        return f

    def stage(
        self,
        name: str,
        translate: Translate | None,
        *,
        inputs: Iterable[Input | Flow | str],
        outputs: Iterable[Flow | str] | Mapping[str, SchemaLike] = (),
        state: State | None = None,
        runnable: Callable[..., Any] | None = None,
        program: StageProgram | None = None,
    ) -> Stage:
        """Add a stage. ``outputs`` are declared flows, or a mapping name → schema.

        ``program`` is a compiled program that runs the stage's epochs itself, as
        :func:`strata.queries.add_query` makes; any ``strata.physical.program.StageProgram``
        plugs in the same way. A stage given both (a vectorized stage) keeps ``translate``
        as its per-group semantics, which the reference executor runs."""
        if name in self.stages:
            raise DataflowError(f"stage {name!r} is declared twice in dataflow {self.name!r}")
        if program is not None and translate is None:
            translate = _compiled(name, program.kind)
        if not callable(translate):
            raise DataflowError(f"stage {name!r}: translate must be a function")
        ins = self._stage_inputs(name, inputs)
        outs = self._stage_outputs(name, outputs)
        if state is not None:
            _check_state(name, state, ins)
        if program is None:
            _check_arity(name, translate, len(ins), state is not None)
        else:
            self._require(program, ins)
        for f in outs:
            f.producer = name
        st = Stage(name, translate, ins, outs, state, runnable, program)
        self.stages[name] = st
        return st

    def _stage_inputs(self, name: str, inputs: Iterable[Input | Flow | str]) -> list[Input]:
        """Stage ``name``'s inputs, each a declared flow read once, its specs valid."""
        ins = [i if isinstance(i, Input) else Input(i) for i in inputs]
        for i in ins:
            if i.flow_name not in self.flows:
                raise DataflowError(f"stage {name!r} reads unknown flow {i.flow_name!r}")
            i.route, i.order  # noqa: B018  (validates the specs early)
        if len({i.flow_name for i in ins}) != len(ins):
            raise DataflowError(f"stage {name!r} reads the same flow twice")
        return ins

    def _stage_outputs(self, name: str, outputs: Iterable[Flow | str] | Mapping[str, SchemaLike]
                       ) -> list[Flow]:
        """Stage ``name``'s outputs (declared now from a mapping name → schema), each an
        internal flow no other stage writes."""
        outs: list[Flow] = []
        if isinstance(outputs, Mapping):
            outs = [self._add_flow(n, s) for n, s in outputs.items()]
        else:
            for o in outputs:
                fname = o if isinstance(o, str) else o.name
                if fname not in self.flows:
                    raise DataflowError(f"stage {name!r} writes unknown flow {fname!r}")
                outs.append(self.flows[fname])
        for f in outs:
            if f.external:
                raise DataflowError(
                    f"stage {name!r} writes {f.name!r}, an external input; declare it with "
                    "flow() instead of source()"
                )
            if f.producer is not None:
                raise DataflowError(
                    f"flow {f.name!r} is written by both {f.producer!r} and {name!r}; "
                    "a flow has one producer"
                )
        return outs

    def _require(self, program: StageProgram, ins: Sequence[Input]) -> None:
        """Declare the columns ``program`` needs a value in NOT NULL on the external
        inputs it reads, so that ingest refuses a record without one (a window stage's
        event time and source, docs/windows.md) instead of every epoch of the stage."""
        required = getattr(program, "required_columns", None)
        wanted: Mapping[str, Sequence[str]] = required() if callable(required) else {}
        for i in ins:
            flow = self.flows[i.flow_name]
            if flow.external and wanted.get(flow.name):
                flow.schema = requiring(flow.schema, wanted[flow.name])

    # -- inspecting ---------------------------------------------------------------
    @property
    def sources(self) -> list[Flow]:
        return [f for f in self.flows.values() if f.is_source]

    def consumers(self, flow: str) -> list[Stage]:
        """Stages that read ``flow``."""
        return [s for s in self.stages.values() if flow in s.input_names]

    def validate(self) -> Dataflow:
        """Check the whole graph; raise :class:`DataflowError` naming the problem."""
        if not self.flows:
            raise DataflowError(f"dataflow {self.name!r} has no flows and no stages; declare "
                                "at least one source() (a home for queries needs only sources)")
        for f in self.flows.values():
            if not f.external and f.producer is None:
                raise DataflowError(
                    f"flow {f.name!r} is declared but no stage writes it; declare it with "
                    "source() if users append to it"
                )
        return self

    def topological_order(self) -> list[Stage]:
        """Stages upstream-first; stages on a cycle keep their declaration order."""
        order: list[Stage] = []
        seen: set[str] = set()

        def visit(s: Stage, path: set[str]) -> None:
            if s.name in seen or s.name in path:
                return
            path.add(s.name)
            for n in s.input_names:
                p = self.flows[n].producer
                if p is not None and p != s.name:
                    visit(self.stages[p], path)
            path.discard(s.name)
            seen.add(s.name)
            order.append(s)

        for s in self.stages.values():
            visit(s, set())
        return order

    def __repr__(self) -> str:
        return f"Dataflow({self.name!r}, stages={list(self.stages)}, flows={list(self.flows)})"


def _compiled(stage: str, kind: str) -> Translate:
    def compiled_program(*args: Any, **kwargs: Any) -> None:
        raise DataflowError(f"stage {stage!r} is a {kind} stage; it runs through its "
                            "program and has no per-record translate")

    return compiled_program


def _check_state(name: str, state: State, ins: Sequence[Input]) -> None:
    """Stage ``name``'s state is valid: its schema, a route key, a grouping, and an input
    with a route key to group it with."""
    state.arrow_schema  # noqa: B018
    if state.route_by is None:
        raise DataflowError(
            f"stage {name!r} has state but no route key: give State(route_by=...)"
        )
    if state.grouping not in ("outer", "inner"):
        raise DataflowError(f"stage {name!r}: grouping must be 'outer' or 'inner'")
    if not any(i.route_by is not None for i in ins):
        raise DataflowError(
            f"stage {name!r} has state but no input with a route_by to group it with"
        )


def _check_arity(stage: str, fn: Callable[..., Any], n_inputs: int, stateful: bool) -> None:
    """translate must accept key, [state,] one iterator per input, and out=."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(None, *([None] * (n_inputs + stateful)), out=None)
    except TypeError as e:
        raise DataflowError(
            f"stage {stage!r}: translate{sig} cannot be called as translate(key, "
            f"{'state, ' if stateful else ''}<{n_inputs} input iterator(s)>, out=...): {e}"
        ) from None
