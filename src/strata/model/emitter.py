"""The ``out`` object translate writes through."""

from __future__ import annotations

from typing import Any

from strata.model.dataflow import STATE, Stage
from strata.model.keys import encode_key


class UnknownOutput(Exception):
    """translate wrote to a flow its stage does not declare."""

    def __init__(self, flow: str, declared: list[str]) -> None:
        self.flow = flow
        super().__init__(
            f"translate wrote to {flow!r}, which the stage does not declare as an output "
            f"(declared: {declared})"
        )


class Emitter:
    """Collects what one translate call writes: records per output flow and associations.

    ``out.write(flow, record)`` appends a record to an output flow's increment;
    ``out.state(record)`` keeps a state record for the next epoch;
    ``out.associate(key, address)`` binds ``key`` to a multicast address for records
    routed to ``Multicast(address)`` in the next epoch.
    Writes become visible in the next epoch.
    """

    __slots__ = ("outputs", "state_writes", "associations", "_declared", "_stateful")

    def __init__(self, stage: Stage) -> None:
        self._stateful = stage.state is not None
        self._declared = stage.output_names + ([STATE] if self._stateful else [])
        self.outputs: dict[str, list[dict]] = {n: [] for n in stage.output_names}
        self.state_writes: list[dict] = []
        self.associations: list[tuple[Any, Any]] = []

    def write(self, flow: str, record: dict) -> None:
        """Write ``record`` to the output flow named ``flow``."""
        buf = self.outputs.get(flow)
        if buf is not None:
            buf.append(record)
        elif flow == STATE and self._stateful:
            self.state_writes.append(record)
        else:
            raise UnknownOutput(flow, self._declared)

    def state(self, record: dict) -> None:
        """Keep ``record`` in state (routed by the state's route_by)."""
        if self._stateful:
            self.state_writes.append(record)
        else:
            self.write(STATE, record)  # raises UnknownOutput

    def associate(self, key: Any, address: Any) -> None:
        """Make ``key`` a destination of ``Multicast(address)`` records next epoch."""
        encode_key(key)
        encode_key(address)
        self.associations.append((key, address))

    def take_state_and_associations(self) -> tuple[list[dict], list[tuple[Any, Any]]]:
        """What one translate call kept in state and associated; resets both."""
        sw, assoc = self.state_writes, self.associations
        if sw:
            self.state_writes = []
        if assoc:
            self.associations = []
        return sw, assoc
