"""Property tests: the Spark runner (``direct`` over each state store, and ``blackbox``)
against the reference.

Random stages and data are run by ``strata.testing``'s driver (docs/testing.md) with the
reference executor and with :class:`~strata.physical.runner.SparkStageRunner` in every
mode; the output increments (per flow, per epoch) and the final state of every
stage must be equal as multisets (the order of records in an increment is not
defined). Translators come from a small parameterised family (:class:`Translator`)
whose result depends only on the per-flow multisets, or on the order that
``order_by`` defines.

The explicit tests at the end pin each feature with hand-computed outputs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.model import routing
from strata.model.dataflow import Dataflow, Input, State
from strata.model.keys import encode_key, partition_of
from strata.model.routing import ALL, NONE, All, Multicast
from strata.testing import Result, assert_results_equal, run_reference, run_with
from tests.dataflow_driver import (
    ReferenceRunner,
    SparkRunner,
    normalise,
    register_by_value,
    run_dataflow,
)

register_by_value(__name__)  # Spark workers cannot import this module: ship it by value

# direct: the columnar state store; every epoch as Spark tasks (on RDDs, or on the Arrow
# route: DataFrames, as over Spark Connect), or every one in the driver
MODES = ("direct@tasks", "direct@arrow", "direct@driver", "direct-indexed@tasks",
         "direct-indexed@driver", "blackbox", "blackbox@arrow")
REC = "k long, s string, v long, id long"  # the schema of every generated flow
S = ("a", "b", "ß", "", "ab")  # string key domain (tiny, so groups collide)
NK = 5  # int key domain 0..NK-1

# STRATA_PROPERTY_SCALE=10 runs ten times as many examples (a longer bug hunt; 2 runs as many
# as `make test` did before the suite was cut to 20 minutes).
SCALE = float(os.environ.get("STRATA_PROPERTY_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, round(n * SCALE))


PROPERTY_SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}


@contextmanager
def fresh_home() -> Iterator[str]:
    home = tempfile.mkdtemp(prefix="strata-prop-")
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


# -- the translator family ---------------------------------------------------------------


def nb(key):
    """A neighbouring key of the same type (for set routes and moved state)."""
    if isinstance(key, tuple):
        return (nb(key[0]), key[1])
    if isinstance(key, int):
        return (key + 1) % NK
    return S[(S.index(key) + 1) % len(S)] if key in S else key + "'"


def kcode(key) -> int:
    """A small int standing for a key."""
    if isinstance(key, tuple):
        return kcode(key[0]) + kcode(key[1])
    if isinstance(key, int):
        return key
    return S.index(key) if key in S else len(key)


def rkey(rec: dict, keytype: str):
    if keytype == "int":
        return rec["k"]
    if keytype == "str":
        return rec["s"]
    return (rec["k"], rec["s"])


def state_schema(keytype: str) -> str:
    if keytype == "pair":
        return "kk long, ks string, n long, c long"
    return f"key {'long' if keytype == 'int' else 'string'}, n long, c long"


def state_route(keytype: str):
    return ["kk", "ks"] if keytype == "pair" else "key"


def state_rec(keytype: str, key, n: int, c: int) -> dict:
    if keytype == "pair":
        return {"kk": key[0], "ks": key[1], "n": n, "c": c}
    return {"key": key, "n": n, "c": c}


def full_order(rec: dict) -> tuple:
    """A total order on records: records that tie are identical, hence interchangeable."""
    return tuple(sorted(rec.items()))


@dataclass(frozen=True)
class Route:
    """``route_by`` of a generated input.

    ``key``: the record's key; ``set``: a set of one or two keys; ``multicast``: the
    key (v % 3 == 0) or ``Multicast(v % 2)``; ``mixed``: by ``v % 5``, NONE, ALL (or
    ``All(flows=all_flows)``), a two-key set, or the key.
    """

    kind: str
    keytype: str
    all_flows: tuple[str, ...] | None = None

    def __call__(self, rec: dict):
        key, v = rkey(rec, self.keytype), rec["v"]
        if self.kind == "key":
            return key
        if self.kind == "set":
            return {key, nb(key)} if v % 2 else frozenset([key])
        if self.kind == "multicast":
            return key if v % 3 == 0 else Multicast(v % 2)
        m = v % 5
        if m == 0:
            return routing.NONE  # not the global NONE: see test_none_route_from_shipped_module
        if m == 1:
            return ALL if self.all_flows is None else All(flows=self.all_flows)
        if m == 2:
            return {key, nb(key)}
        return key


def input_route(spec: InputSpec, keytype: str):
    """``route_by`` of a generated input: ``column`` names the key's column(s) (the key
    routed from Arrow batches, ``physical/column_route.py``), the others are functions."""
    if spec.route == "own":
        return None
    if spec.route == "column":
        return {"int": "k", "str": "s"}.get(keytype, ["k", "s"])
    return Route(spec.route, keytype, spec.all_flows)


def stat(kind: str, recs: list[dict]) -> int:
    vs = [r["v"] for r in recs]
    if kind == "count":
        return len(vs)
    if kind == "sum":
        return sum(vs)
    if kind == "min":
        return min(vs, default=0)
    if kind == "max":
        return max(vs, default=0)
    assert kind == "digest"  # order-dependent: only for inputs with order_by
    h = 0
    for r in recs:
        h = (h * 31 + r["v"] * 7 + r["k"] + len(r["s"]) + 1) % 1009
    return h


@dataclass(frozen=True)
class Translator:
    """A deterministic translate parameterised by the stage spec.

    value = sum of one statistic per input flow + the state's ``n`` (a sum, or an
    order-dependent digest when the state has ``order_by``). Each output flow gets a
    record when ``value % mod == 0``; a loopback flow forwards its records with
    ``v - 1`` while ``v > 0`` and is seeded with ``v = total % 3`` by fresh input;
    the state policy decides what is kept.
    """

    keytype: str
    stateful: bool
    stats: tuple[str, ...]
    emits: tuple[tuple[str, int], ...]
    loop_flow: str | None = None
    loop_index: int | None = None
    state_policy: str = "none"
    state_digest: bool = False
    associate: bool = False

    def __call__(self, key, *its, out):
        its = list(its)
        state = list(its.pop(0)) if self.stateful else []
        flows = [list(it) for it in its]
        recs = [r for f in flows for r in f]
        ekey = key if key is not None else rkey(recs[0], self.keytype)  # record-wise: own key
        total = sum(stat(kind, f) for kind, f in zip(self.stats, flows, strict=True))
        if self.state_digest:
            prev = 0
            for r in state:
                prev = (prev * 17 + r["n"] + 3 * r["c"] + 1) % 1013
        else:
            prev = sum(r["n"] for r in state)
        value = total + prev
        ident = sum(r["id"] for r in recs) % 997 + 1000 * len(state)
        code = kcode(ekey)
        for flow, mod in self.emits:
            if value % mod == 0:
                rec = {"k": (code + value) % NK, "s": S[value % len(S)], "v": value % 10,
                       "id": ident}
                out.write(flow, rec)
        fresh = any(f for i, f in enumerate(flows) if i != self.loop_index)
        if self.loop_flow is not None:
            for r in flows[self.loop_index]:
                if r["v"] > 0:
                    out.write(self.loop_flow,
                              {"k": nb(r["k"]), "s": nb(r["s"]), "v": r["v"] - 1, "id": r["id"]})
            if fresh:
                out.write(self.loop_flow,
                          {"k": code % NK, "s": S[code % len(S)], "v": total % 3, "id": ident})
        if self.associate:
            out.associate(ekey, code % 2)
        if self.stateful:
            self._state(ekey, state, recs, total, value, out)

    def _state(self, key, state, recs, total, value, out) -> None:
        p, kt = self.state_policy, self.keytype
        if p == "acc":
            out.state(state_rec(kt, key, value, len(state)))
        elif p == "append":  # keep every old record, add one per call with input
            for r in state:
                out.state(r)
            if recs:
                out.state(state_rec(kt, key, total, len(state)))
        elif p == "drop_if":
            if value % 3:
                out.state(state_rec(kt, key, value, len(state)))
        elif p == "move":  # to another key, often of another partition
            out.state(state_rec(kt, nb(key), value, len(state)))
        elif p == "keep_unless_input":
            if recs:
                out.state(state_rec(kt, key, value, len(state)))
            else:
                for r in state:
                    out.state(r)
        else:
            assert p == "none"


# -- generated stages and dataflows ----------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    flow: str
    route: str  # "key" | "column" | "set" | "mixed" | "multicast" | "own" (no route_by)
    ordered: bool
    stat: str
    all_flows: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StageSpec:
    name: str
    keytype: str
    inputs: tuple[InputSpec, ...]  # the loopback input, if any, is last
    emits: tuple[tuple[str, int], ...]
    loop: bool = False
    grouping: str | None = None  # None: no state
    state_policy: str = "none"
    state_ordered: bool = False
    associate: bool = False

    @property
    def loop_flow(self) -> str | None:
        return f"{self.name}loop" if self.loop else None

    @property
    def outputs(self) -> list[str]:
        return [f for f, _ in self.emits] + ([self.loop_flow] if self.loop else [])


def build(sources: list[str], specs: list[StageSpec]) -> Dataflow:
    df = Dataflow("prop")
    for s in sources:
        df.source(s, REC)
    for spec in specs:
        for f in spec.outputs:
            df.flow(f, REC)
        inputs = [
            Input(
                i.flow,
                route_by=input_route(i, spec.keytype),
                order_by=full_order if i.ordered else None,
            )
            for i in spec.inputs
        ]
        state = None
        if spec.grouping is not None:
            kt = spec.keytype
            state = State(
                state_schema(kt), route_by=state_route(kt), grouping=spec.grouping,
                order_by=full_order if spec.state_ordered else None,
            )
        translate = Translator(
            keytype=spec.keytype,
            stateful=state is not None,
            stats=tuple(i.stat for i in spec.inputs),
            emits=spec.emits,
            loop_flow=spec.loop_flow,
            loop_index=len(spec.inputs) - 1 if spec.loop else None,
            state_policy=spec.state_policy,
            state_digest=spec.state_ordered,
            associate=spec.associate,
        )
        df.stage(spec.name, translate, inputs=inputs, outputs=spec.outputs, state=state)
    return df.validate()


@st.composite
def input_specs(draw, flow: str, routes: list[str], flow_names: list[str], stateful: bool):
    route = draw(st.sampled_from(routes))
    all_flows = None
    if route == "mixed":
        choices = [None, *((f,) for f in flow_names), tuple(flow_names[:2])]
        if stateful:
            choices += [("state",), ("state", flow_names[0])]
        all_flows = draw(st.sampled_from(choices))
    ordered = draw(st.booleans())
    stats = ["count", "sum", "min", "max"] + (["digest"] if ordered else [])
    return InputSpec(flow, route, ordered, draw(st.sampled_from(stats)), all_flows)


@st.composite
def stage_specs(draw, name: str, available: list[str], first: list[str] | None = None,
                stateful: bool | None = None, loop: bool | None = None,
                multicast: bool = False):
    """One random stage reading 1-3 of ``available`` (one of ``first`` if given).

    ``stateful``/``loop``: force (True/False) or draw (None) a state / a loopback
    input; ``multicast``: make the first input route to multicast addresses.
    """
    if first:
        head = draw(st.sampled_from(first))
        rest = draw(st.lists(st.sampled_from([f for f in available if f != head]),
                             max_size=1, unique=True))
        flows = [head, *rest]
    else:
        flows = draw(st.lists(st.sampled_from(available), min_size=1,
                              max_size=min(3, len(available)), unique=True))
    keytype = draw(st.sampled_from(["int", "str", "pair"]))
    stateful = draw(st.booleans()) if stateful is None else stateful
    loop = draw(st.integers(0, 2)) == 0 if loop is None else loop
    names = flows + ([f"{name}loop"] if loop else [])
    recordwise = not stateful and not multicast and draw(st.integers(0, 3)) == 0
    routes = ["own"] if recordwise else ["key", "column", "set", "mixed", "multicast", "own"]
    inputs = [draw(input_specs(f, routes, names, stateful)) for f in flows]
    if multicast:
        inputs[0] = draw(input_specs(flows[0], ["multicast"], names, stateful))
    if stateful and all(i.route == "own" for i in inputs):
        inputs[0] = InputSpec(inputs[0].flow, "key", inputs[0].ordered, inputs[0].stat)
    if loop:
        loop_routes = ["own"] if recordwise else ["key", "set"]
        inputs.append(draw(input_specs(f"{name}loop", loop_routes, names, stateful)))
    n_out = draw(st.integers(1, 2))
    emits = tuple((f"{name}o{m}", draw(st.sampled_from([1, 1, 2, 3]))) for m in range(n_out))
    grouping = draw(st.sampled_from(["outer", "inner"])) if stateful else None
    policy = draw(st.sampled_from(["acc", "append", "drop_if", "move", "keep_unless_input",
                                   "none"])) if stateful else "none"
    has_multicast = any(i.route == "multicast" for i in inputs)
    associate = not recordwise and (has_multicast or draw(st.booleans()))
    return StageSpec(
        name=name, keytype=keytype, inputs=tuple(inputs), emits=emits, loop=loop,
        grouping=grouping, state_policy=policy,
        state_ordered=stateful and draw(st.booleans()), associate=associate,
    )


@st.composite
def batches_for(draw, sources: list[str], n_batches: tuple[int, int], max_records: int):
    """Batches of source records; the first source always has some (no idle batches)."""
    d_int = draw(st.integers(1, NK))
    d_str = draw(st.integers(1, len(S)))
    record = st.fixed_dictionaries({
        "k": st.integers(0, d_int - 1),
        "s": st.sampled_from(S[:d_str]),
        "v": st.integers(0, 9),
        "id": st.integers(0, 60),
    })
    n = draw(st.integers(*n_batches))
    return [
        {s: draw(st.lists(record, min_size=int(i == 0), max_size=max_records))
         for i, s in enumerate(sources)}
        for _ in range(n)
    ]


@st.composite
def single_stage_cases(draw, n_batches=(2, 3), **knobs):
    sources = [f"src{i}" for i in range(draw(st.integers(1, 3)))]
    spec = draw(stage_specs("t0", sources, **knobs))
    batches = draw(batches_for(sources, n_batches, 15))
    return sources, [spec], batches


@st.composite
def chain_cases(draw):
    sources = [f"src{i}" for i in range(draw(st.integers(1, 2)))]
    specs: list[StageSpec] = []
    available = list(sources)
    for j in range(draw(st.integers(2, 3))):
        first = [f for f, _ in specs[-1].emits] if specs else None
        spec = draw(stage_specs(f"t{j}", available, first=first, loop=None if j else False))
        specs.append(spec)
        available += [f for f, _ in spec.emits]
    batches = draw(batches_for(sources, (1, 2), 10))
    return sources, specs, batches


# -- running and comparing --------------------------------------------------------------------


def run_all(spark, df: Dataflow, batches, *, num_partitions: int = 3,
            files_per_input: int = 1) -> dict[str, Result]:
    """{executor name: its result}, reference first (strata.testing)."""
    results = {"reference": run_reference(df, batches)}
    for mode in MODES:
        with fresh_home() as home:
            ex = SparkRunner(spark, home, mode, num_partitions, files_per_input)
            results[mode] = run_with(df, batches, ex, name=mode)
    return results


def assert_same(results: dict[str, Result]) -> None:
    for mode in MODES:
        assert_results_equal(results["reference"], results[mode])


def check_case(spark, case, num_partitions: int, files_per_input: int = 1) -> None:
    sources, specs, batches = case
    df = build(sources, specs)
    assert_same(run_all(spark, df, batches, num_partitions=num_partitions,
                        files_per_input=files_per_input))


@settings(max_examples=examples(3), **PROPERTY_SETTINGS)
@given(case=single_stage_cases(), num_partitions=st.integers(1, 4),
       files_per_input=st.integers(1, 2))
def test_single_stage_modes_agree(spark, case, num_partitions, files_per_input):
    """Any generated stage: keyed, set, mixed (ALL/All(flows)/NONE), multicast, record-wise."""
    check_case(spark, case, num_partitions, files_per_input)


@settings(max_examples=examples(3), **PROPERTY_SETTINGS)
@given(case=single_stage_cases(n_batches=(3, 3), stateful=True, loop=False),
       num_partitions=st.integers(1, 4))
def test_stateful_stage_modes_agree(spark, case, num_partitions):
    """Outer/inner state kept, appended, dropped or moved to other keys over 3 epochs."""
    check_case(spark, case, num_partitions)


@settings(max_examples=examples(2), **PROPERTY_SETTINGS)
@given(case=single_stage_cases(n_batches=(3, 3), loop=False, multicast=True),
       num_partitions=st.integers(1, 4))
def test_multicast_stage_modes_agree(spark, case, num_partitions):
    """Associations of one epoch deliver the next epoch's multicast records."""
    check_case(spark, case, num_partitions)


@settings(max_examples=examples(2), **PROPERTY_SETTINGS)
@given(case=chain_cases(), num_partitions=st.integers(1, 4))
def test_multi_stage_modes_agree(spark, case, num_partitions):
    """Chains of 2-3 stages, the later ones possibly with a loopback flow."""
    check_case(spark, case, num_partitions)


# -- explicit regression tests (hand-computed) ----------------------------------------------------


def recs(cols: str, *rows) -> list[dict]:
    names = [c.strip() for c in cols.split(",")]
    return [dict(zip(names, row, strict=True)) for row in rows]


def check_expected(spark, df, batches, outputs: dict, state: dict | None = None,
                   num_partitions: int = 3, files_per_input: int = 1):
    """Every executor gives exactly ``outputs`` ({flow: [increment records]}) and ``state``."""
    want = Result(outputs, state or {}, "expected")
    for name, res in run_all(spark, df, batches, num_partitions=num_partitions,
                             files_per_input=files_per_input).items():
        assert_results_equal(want, Result({f: res.outputs[f] for f in want.outputs},
                                          {s: res.state[s] for s in want.state}, name))


@pytest.mark.parametrize("grouping", ["outer", "inner"])
def test_grouping_outer_calls_state_only_keys(spark, grouping):
    def count(key, state, urls, *, out):
        prev = next(state, None)
        n = sum(1 for _ in urls) + (prev["n"] if prev else 0)
        out.state({"url": key, "n": n})
        out.write("calls", {"url": key, "n": n})

    df = Dataflow("g")
    urls = df.source("urls", "url string")
    df.stage("count", count, inputs=[Input(urls, route_by="url")],
             outputs={"calls": "url string, n long"},
             state=State("url string, n long", route_by="url", grouping=grouping))
    batches = [{"urls": recs("url", ("a",), ("b",), ("a",), ("ß",))}, {"urls": recs("url", ("a",))}]
    second = [("a", 3), ("b", 1), ("ß", 1)] if grouping == "outer" else [("a", 3)]
    check_expected(
        spark, df, batches,
        {"calls": [recs("url, n", ("a", 2), ("b", 1), ("ß", 1)), recs("url, n", *second)]},
        {"count": recs("url, n", ("a", 3), ("b", 1), ("ß", 1))},
    )


def test_several_inputs_int_keys_and_none_route(spark):
    def join(key, xs, ys, *, out):
        xs, ys = list(xs), list(ys)
        out.write("j", {"k": key, "nx": len(xs), "ny": len(ys), "sv": sum(r["v"] for r in xs + ys)})

    df = Dataflow("j")
    x = df.source("x", "k long, v long")
    y = df.source("y", "k long, v long")
    df.stage("join", join,
             inputs=[Input(x, route_by="k"),
                     Input(y, route_by=lambda r: routing.NONE if r["k"] < 0 else r["k"])],
             outputs={"j": "k long, nx long, ny long, sv long"})
    batches = [{"x": recs("k, v", (1, 1), (1, 2), (2, 4)),
                "y": recs("k, v", (2, 8), (3, 16), (-1, 32))}]
    check_expected(spark, df, batches, {"j": [recs(
        "k, nx, ny, sv", (1, 2, 0, 3), (2, 1, 1, 12), (3, 0, 1, 16))]}, num_partitions=2)


def test_set_of_keys_route(spark):
    def count(key, xs, *, out):
        out.write("c", {"k": key, "n": sum(1 for _ in xs)})

    df = Dataflow("set")
    x = df.source("x", "k long")
    df.stage("count", count, inputs=[Input(x, route_by=lambda r: {r["k"], r["k"] + 1})],
             outputs={"c": "k long, n long"})
    check_expected(spark, df, [{"x": recs("k", (0,), (1,))}],
                   {"c": [recs("k, n", (0, 1), (1, 2), (2, 1))]}, num_partitions=4)


def test_broadcast_all_and_restricted_flows(spark):
    routes = {"A": ALL, "S": All(flows=["state"]), "X": All(flows=["x"])}

    def tag(key, state, xs, params, *, out):
        list(state), list(xs)
        tags = "".join(sorted(p["tag"] for p in params))
        out.write("t", {"k": key, "tags": tags})
        out.state({"k": key})

    df = Dataflow("b")
    x = df.source("x", "k long")
    p = df.source("p", "tag string")
    df.stage("tag", tag,
             inputs=[Input(x, route_by="k"), Input(p, route_by=lambda r: routes[r["tag"]])],
             outputs={"t": "k long, tags string"}, state=State("k long", route_by="k"))
    batches = [
        {"x": recs("k", (1,))},
        {"x": recs("k", (2,)), "p": recs("tag", ("A",), ("S",), ("X",))},
        {"p": recs("tag", ("A",), ("S",), ("X",))},  # broadcasts only: state keys are the groups
    ]
    check_expected(spark, df, batches, {"t": [
        recs("k, tags", (1, "")),
        recs("k, tags", (1, "AS"), (2, "AX")),
        recs("k, tags", (1, "AS"), (2, "AS")),
    ]}, {"tag": recs("k", (1,), (2,))}, num_partitions=2)


def test_multicast_to_keys_associated_last_epoch(spark):
    def deliver(user, subs, sub_in, msgs, *, out):
        topics = {r["topic"] for r in list(subs) + list(sub_in)}
        for m in msgs:
            out.write("inbox", {"user": user, "msg": m["msg"]})
        for t in sorted(topics):
            out.state({"user": user, "topic": t})
            out.associate(user, t)  # re-associated each epoch (outer grouping calls every user)

    df = Dataflow("m")
    subs = df.source("subs", "user string, topic string")
    msgs = df.source("msgs", "topic string, msg string")
    df.stage("deliver", deliver,
             inputs=[Input(subs, route_by="user"),
                     Input(msgs, route_by=lambda r: Multicast(r["topic"]))],
             outputs={"inbox": "user string, msg string"},
             state=State("user string, topic string", route_by="user"))
    batches = [
        {"subs": recs("user, topic", ("u1", "t1"), ("u2", "t1"), ("u3", "t2")),
         "msgs": recs("topic, msg", ("t1", "early"))},
        {"subs": recs("user, topic", ("u4", "t2")),
         "msgs": recs("topic, msg", ("t1", "hello"), ("t2", "bye"), ("t3", "void"))},
        {"msgs": recs("topic, msg", ("t2", "again"))},
    ]
    check_expected(spark, df, batches, {"inbox": [
        [],
        recs("user, msg", ("u1", "hello"), ("u2", "hello"), ("u3", "bye")),
        recs("user, msg", ("u3", "again"), ("u4", "again")),
    ]}, {"deliver": recs("user, topic", ("u1", "t1"), ("u2", "t1"), ("u3", "t2"), ("u4", "t2"))},
        num_partitions=4)


def test_order_by_inputs_and_state(spark):
    def word(key, state, chars, back, *, out):
        old, new = list(state), list(chars)
        for r in old + new:
            out.state(r)
        out.write("w", {"key": key, "word": "".join(r["c"] for r in old + new),
                        "rev": "".join(r["c"] for r in back)})

    df = Dataflow("o")
    chars = df.source("chars", "key string, pos long, c string")
    back = df.source("back", "key string, pos long, c string")
    df.stage("word", word,
             inputs=[Input(chars, route_by="key", order_by="pos"),
                     Input(back, route_by="key", order_by=lambda r: -r["pos"])],
             outputs={"w": "key string, word string, rev string"},
             state=State("key string, pos long, c string", route_by="key", order_by="pos",
                         grouping="inner"))
    rows1 = [("x", 12, "c"), ("x", 10, "a"), ("y", 15, "z"), ("x", 11, "b"), ("y", 14, "y")]
    batches = [
        {"chars": recs("key, pos, c", *rows1),
         "back": recs("key, pos, c", ("x", 1, "p"), ("x", 3, "r"), ("x", 2, "q"))},
        {"chars": recs("key, pos, c", ("x", 21, "e"), ("x", 20, "d"))},
    ]
    check_expected(spark, df, batches, {"w": [
        recs("key, word, rev", ("x", "abc", "rqp"), ("y", "yz", "")),
        recs("key, word, rev", ("x", "abcde", "")),
    ]}, files_per_input=2)


@pytest.mark.parametrize("grouping", ["outer", "inner"])
def test_state_written_to_another_key_and_partition(spark, grouping):
    n = 4
    parts = {k: partition_of(encode_key(k), n) for k in range(9)}
    assert parts[1] != parts[2] and parts[2] != parts[3] and parts[5] != parts[6]

    def shift(key, state, xs, *, out):
        prev = sum(r["n"] for r in state)
        cnt = sum(1 for _ in xs)
        out.write("o", {"k": key, "prev": prev, "cnt": cnt})
        out.state({"k": key + 1, "n": prev + cnt})  # kept under the next key

    df = Dataflow("mv")
    x = df.source("x", "k long")
    df.stage("shift", shift, inputs=[Input(x, route_by="k")],
             outputs={"o": "k long, prev long, cnt long"},
             state=State("k long, n long", route_by="k", grouping=grouping))
    batches = [{"x": recs("k", (1,), (1,), (5,))}, {"x": recs("k", (2,), (1,))},
               {"x": recs("k", (3,))}]
    cols = "k, prev, cnt"
    if grouping == "outer":
        out = [recs(cols, (1, 0, 2), (5, 0, 1)), recs(cols, (2, 2, 1), (1, 0, 1), (6, 1, 0)),
               recs(cols, (3, 3, 1), (2, 1, 0), (7, 1, 0))]
        state = [(4, 4), (3, 1), (8, 1)]
    else:
        out = [recs(cols, (1, 0, 2), (5, 0, 1)), recs(cols, (2, 2, 1), (1, 0, 1)),
               recs(cols, (3, 3, 1))]
        state = [(4, 4), (2, 1), (6, 1)]
    check_expected(spark, df, batches, {"o": out}, {"shift": recs("k, n", *state)},
                   num_partitions=n)


def test_recordwise_stage(spark):
    def scale(key, xs, *, out):
        assert key is None
        for r in xs:
            if r["v"] > 0:
                out.write("y", {"k": r["k"] * 10, "v": r["v"]})

    df = Dataflow("rw")
    x = df.source("x", "k long, v long")
    st_ = df.stage("scale", scale, inputs=[x], outputs={"y": "k long, v long"})
    assert st_.is_recordwise
    batches = [{"x": recs("k, v", (1, 1), (1, 1), (2, 0), (3, 5))}, {"x": recs("k, v", (4, 2))}]
    check_expected(spark, df, batches, {"y": [
        recs("k, v", (10, 1), (10, 1), (30, 5)), recs("k, v", (40, 2))]}, files_per_input=2)


def test_chain_with_loopback_countdown(spark):
    def total(key, state, xs, *, out):
        prev = next(state, None)
        add = sum(r["v"] for r in xs)
        n = add + (prev["v"] if prev else 0)
        out.state({"k": key, "v": n})
        if add:
            out.write("sums", {"k": key, "v": n})

    def countdown(key, sums, ticks, *, out):
        for r in list(sums) + list(ticks):
            out.write("log", r)
            if r["v"] > 0:
                out.write("ticks", {"k": r["k"], "v": r["v"] - 1})

    df = Dataflow("loop")
    nums = df.source("nums", "k long, v long")
    df.flow("ticks", "k long, v long")
    df.stage("total", total, inputs=[Input(nums, route_by="k")],
             outputs={"sums": "k long, v long"}, state=State("k long, v long", route_by="k"))
    df.stage("countdown", countdown,
             inputs=[Input("sums", route_by="k"), Input("ticks", route_by="k")],
             outputs=[df.flow("log", "k long, v long"), "ticks"])
    assert [s.name for s in df.topological_order()] == ["total", "countdown"]
    batches = [{"nums": recs("k, v", (1, 2), (1, 1), (2, 1))}, {"nums": recs("k, v", (2, 1))}]
    kv = "k, v"
    check_expected(spark, df, batches, {
        "sums": [recs(kv, (1, 3), (2, 1)), recs(kv, (2, 2))],
        "log": [recs(kv, (1, 3), (2, 1)), recs(kv, (1, 2), (2, 0)), recs(kv, (1, 1)),
                recs(kv, (1, 0)),
                recs(kv, (2, 2)), recs(kv, (2, 1)), recs(kv, (2, 0))],
        "ticks": [recs(kv, (1, 2), (2, 0)), recs(kv, (1, 1)), recs(kv, (1, 0)), [],
                  recs(kv, (2, 1)), recs(kv, (2, 0)), []],
    }, {"total": recs(kv, (1, 3), (2, 2))}, num_partitions=2)


def test_none_route_from_shipped_module(spark):
    """NONE keeps its identity in Spark workers when route_by is shipped by value."""
    def ident(key, xs, *, out):
        for r in xs:
            out.write("y", r)

    df = Dataflow("none")
    x = df.source("x", "k long")
    stage = df.stage("drop", ident, inputs=[Input(x, route_by=lambda r: NONE if r["k"] else 0)],
                     outputs={"y": "k long"})
    batches = [{"x": recs("k", (0,), (1,))}]
    assert ReferenceRunner().run(stage, batches[0]) == {"y": recs("k", (0,))}
    with fresh_home() as home:
        out = run_dataflow(df, batches, SparkRunner(spark, home, "direct", 2))
    assert normalise(out) == normalise({"y": [recs("k", (0,))]})


def test_driver_schedule_and_max_rounds():
    """The driver itself (reference only): loopback increments are re-queued, a batch
    stops after ``max_rounds`` passes, and what is still queued carries over."""

    def echo(key, xs, loop, *, out):
        for r in list(xs) + list(loop):
            out.write("loop", {"k": r["k"] + 1})

    df = Dataflow("d")
    x = df.source("x", "k long")
    df.flow("loop", "k long")
    df.stage("echo", echo, inputs=[x, "loop"], outputs=["loop"])
    out = run_dataflow(df, [{"x": recs("k", (0,), (5,))}, {"x": []}], ReferenceRunner(),
                       max_rounds=3)
    assert [sorted(r["k"] for r in inc) for inc in out["loop"]] == [
        [1, 6], [2, 7], [3, 8],  # batch 1: three passes
        [4, 9], [5, 10], [6, 11],  # batch 2: no new input, the loop goes on
    ]


def test_records_are_what_their_schema_makes_them(spark):
    """An int written to a double column and 0.1 to a float column read back alike in
    every mode, in outputs and in state (the next epoch sees the normalised values)."""

    def keep(key, state, xs, *, out):
        seen = ",".join(sorted(repr((r["x"], r["f"])) for r in state))
        out.write("o", {"k": key, "seen": seen, "x": len(list(xs))})
        out.state({"k": key, "x": 1, "f": 0.1})

    df = Dataflow("norm")
    x = df.source("x", "k long")
    df.stage("keep", keep, inputs=[Input(x, route_by="k")],
             outputs={"o": "k long, seen string, x double"},
             state=State("k long, x double, f float", route_by="k"))
    f32 = 0.10000000149011612  # 0.1 as a float32
    check_expected(spark, df, [{"x": recs("k", (1,))}, {"x": recs("k", (1,))}], {"o": [
        recs("k, seen, x", (1, "", 1.0)), recs("k, seen, x", (1, repr((1.0, f32)), 1.0))]},
        {"keep": recs("k, x, f", (1, 1.0, f32))}, num_partitions=2)
