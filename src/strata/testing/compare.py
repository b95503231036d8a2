"""Results of a run and how two are compared: outputs per flow per epoch and final state
per stage, each increment an order-insensitive multiset of records (the order of records
in an increment is not defined; docs/testing.md, "Comparing")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strata.model.errors import abridged

Record = dict[str, Any]


def canon(record: Mapping[str, Any]) -> str:
    """A canonical text of a record (column order and dict identity do not matter)."""
    return repr(sorted(record.items()))


def multiset(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Records as a sorted list of canonical texts: equal iff equal as multisets."""
    return sorted(canon(r) for r in records)


def normalise(results: Mapping[str, list[list[Record]]]) -> dict[str, list[list[str]]]:
    """Outputs (flow → increments) with each increment as a multiset."""
    return {f: [multiset(inc) for inc in incs] for f, incs in results.items()}


@dataclass
class Result:
    """What a run of a dataflow gave.

    ``outputs``: flow → its increments in order, one per epoch of its producer (``[]`` for
    an epoch that wrote nothing to it): ``outputs[flow][e - 1]`` is epoch ``e``'s.
    ``state``: stateful stage → its committed state records after the last epoch.
    ``name``: what ran it (``"reference"``, ``"spark"``), for messages.
    """

    outputs: dict[str, list[list[Record]]]
    state: dict[str, list[Record]] = field(default_factory=dict)
    name: str = "run"

    def records(self, flow: str) -> list[Record]:
        """Every record written to ``flow``, over all epochs."""
        return [r for inc in self.outputs[flow] for r in inc]

    def epochs(self, flow: str) -> int:
        """How many increments (producer epochs) ``flow`` has."""
        return len(self.outputs[flow])


def difference(expected: Result, got: Result, limit: int = 3) -> str | None:
    """The first difference between two results as a message naming the flow and epoch
    (or the stage, for state) and the records one has and the other has not; ``None``
    when they are equal as multisets, flow by flow and epoch by epoch."""
    a, b = expected.name, got.name
    if expected.outputs.keys() != got.outputs.keys():
        return (f"{a} has output flows {sorted(expected.outputs)}, {b} has "
                f"{sorted(got.outputs)}")
    for flow in expected.outputs:
        want, have = expected.outputs[flow], got.outputs[flow]
        for epoch, (w, h) in enumerate(zip(want, have, strict=False), 1):
            if (why := _records_differ(w, h, a, b, limit)) is not None:
                return f"flow {flow!r}, epoch {epoch}: {why}"
        if len(want) != len(have):
            return (f"flow {flow!r}: {a} has {len(want)} increment(s) (epochs of its "
                    f"producer), {b} has {len(have)}")
    for stage in sorted(expected.state.keys() | got.state.keys()):
        if stage not in expected.state or stage not in got.state:
            return f"state of stage {stage!r}: only {a if stage in expected.state else b} has it"
        why = _records_differ(expected.state[stage], got.state[stage], a, b, limit)
        if why is not None:
            return f"state of stage {stage!r} after the last epoch: {why}"
    return None


def _records_differ(want: list[Record], have: list[Record], a: str, b: str,
                    limit: int) -> str | None:
    cw, ch = Counter(map(canon, want)), Counter(map(canon, have))
    if cw == ch:
        return None
    by_canon = {canon(r): r for r in [*want, *have]}
    parts = [f"{len(want)} record(s) from {a}, {len(have)} from {b}"]
    for name, extra in ((a, cw - ch), (b, ch - cw)):
        if extra:
            shown = sorted(extra)[:limit]
            more = sum(extra.values()) - sum(extra[c] for c in shown)
            items = ", ".join(abridged(by_canon[c]) + (f" (x{extra[c]})" if extra[c] > 1
                                                        else "") for c in shown)
            parts.append(f"only {name} has {items}" + (f" and {more} more" if more else ""))
    return "; ".join(parts)
