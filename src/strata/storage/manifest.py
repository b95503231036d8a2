"""A stage's committed state: the manifest of one epoch, switched atomically.

Each epoch of a stage ends by writing ``manifest-<epoch>.json`` and then pointing
``CURRENT`` at it (a rename). An epoch writes only new, uniquely named files, so a failed
or interrupted epoch leaves the previous epoch's state readable and untouched; its files
are garbage that the stage's program removes. What the state consists of (runs of a
partition store, Parquet tables, …) is the program's business: the manifest keeps the
program's own JSON description of it in :attr:`StateSnapshot.state` without reading it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata.faults import crashpoint
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.increments import Increment

# Manifests written before programs described their own state kept it in these fields.
_TRANSLATE = "strata.physical.translate:TranslateProgram"
_QUERY = "strata.queries.programs.program:QueryProgram"


@dataclass
class StateSnapshot:
    """What one committed epoch of a stage left behind."""

    stage: str
    epoch: int = 0
    kind: str = ""  # the program's kind, e.g. "translate" or "query"
    program: str = ""  # the program's class as "module:QualName" (reads and collects state)
    num_partitions: int = 0
    outputs: dict[str, Increment] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)  # the program's own, opaque here
    state_bytes: int = 0  # the committed state's size on disk
    metrics: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage, "epoch": self.epoch, "kind": self.kind,
            "program": self.program, "num_partitions": self.num_partitions,
            "outputs": {f: inc.to_json() for f, inc in self.outputs.items()},
            "state": self.state, "state_bytes": self.state_bytes, "metrics": self.metrics,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StateSnapshot:
        if "program" not in d:
            d = _upgrade(d)
        return cls(
            stage=d["stage"], epoch=d["epoch"], kind=d["kind"], program=d["program"],
            num_partitions=d["num_partitions"],
            outputs={f: Increment.from_json(i) for f, i in d["outputs"].items()},
            state=d["state"], state_bytes=d.get("state_bytes", 0),
            metrics=d.get("metrics", {}),
        )


def _upgrade(d: dict[str, Any]) -> dict[str, Any]:
    """A manifest of the first format (state fields at the top level) in today's."""
    metrics = d.get("metrics", {})
    common = {"stage": d["stage"], "epoch": d["epoch"], "num_partitions": d["num_partitions"],
              "outputs": d["outputs"], "metrics": metrics,
              "state_bytes": metrics.get("state_bytes_total", 0)}
    if d.get("query"):
        return {**common, "kind": "query", "program": _QUERY,
                "state": {"tables": d.get("tables", {}), "answer": d["query"]}}
    return {**common, "kind": "translate", "program": _TRANSLATE,
            "state": {"mode": d["mode"], "runs": d["runs"], "pending": d["pending"],
                      "blackbox": d["blackbox"]}}


class StateDir:
    """The manifests of one stage: which epoch is committed and what it left."""

    def __init__(self, layout: StageLayout) -> None:
        self.layout = layout
        self.stage = layout.stage

    @property
    def root(self) -> str:
        return self.layout.root

    def current(self) -> StateSnapshot:
        """The last committed snapshot (epoch 0 and no state if none)."""
        data = fs.read_bytes(self.layout.current_pointer)
        if data is None:
            return StateSnapshot(self.stage)
        return self.manifest(int(data.decode().strip()))

    def manifest(self, epoch: int) -> StateSnapshot:
        d = fs.read_json(self.layout.manifest(epoch))
        if d is None:
            raise FileNotFoundError(f"no manifest for epoch {epoch} of stage {self.stage!r}")
        return StateSnapshot.from_json(d)

    def commit(self, snap: StateSnapshot) -> None:
        """Make ``snap`` the committed state: manifest first, then the CURRENT pointer."""
        fs.write_json_atomic(self.layout.manifest(snap.epoch), snap.to_json())
        crashpoint("between-manifest-and-current")
        fs.write_bytes_atomic(self.layout.current_pointer, f"{snap.epoch}\n".encode())

    def drop_old_manifests(self, keep: StateSnapshot) -> None:
        """Delete every manifest but the committed one's."""
        mine = self.layout.manifest(keep.epoch)
        for uri in self.layout.manifests():
            if uri != mine:
                fs.delete_quietly(uri)
