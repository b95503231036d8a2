"""A stage's committed state: the manifest of one epoch, switched atomically.

Layout under ``{home}/state/{stage}/``::

    CURRENT                  the last committed epoch (written last, by rename)
    manifest-00000007.json   what epoch 7 committed: state runs per partition,
                             pending files, black-box state files, output increments
    p00003/…                 direct mode: runs (data + index) of partition 3
    pending/…                state records bound for another partition, associations
    blackbox/…               black-box mode: the whole state as Parquet
    tables/<name>/…          a compiled query's state: bucketed Parquet tables

An epoch writes only new, uniquely named files; it becomes visible when
``CURRENT`` names it. A failed or interrupted epoch therefore leaves the previous
epoch's state readable and untouched; its files are garbage, removed by ``gc``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

from strata.storage import fs
from strata.storage.increments import Increment
from strata.storage.partition_store import RunInfo


@dataclass
class StateSnapshot:
    """What one committed epoch of a stage left behind."""

    stage: str
    epoch: int = 0
    mode: str = "direct"
    num_partitions: int = 0
    runs: dict[int, list[RunInfo]] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    blackbox: list[str] = field(default_factory=list)
    outputs: dict[str, Increment] = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    # a compiled query's tables: name -> {"files": [...], "ddl": ..., "lineage": [...]}
    tables: dict[str, dict] = field(default_factory=dict)
    query: dict = field(default_factory=dict)  # how to read a compiled query's answer

    def to_json(self) -> dict:
        return {
            "stage": self.stage,
            "epoch": self.epoch,
            "mode": self.mode,
            "num_partitions": self.num_partitions,
            "runs": {str(p): [r.to_json() for r in rs] for p, rs in self.runs.items()},
            "pending": self.pending,
            "blackbox": self.blackbox,
            "outputs": {f: inc.to_json() for f, inc in self.outputs.items()},
            "metrics": self.metrics,
            "tables": self.tables,
            "query": self.query,
        }

    @classmethod
    def from_json(cls, d: dict) -> StateSnapshot:
        return cls(
            stage=d["stage"],
            epoch=d["epoch"],
            mode=d["mode"],
            num_partitions=d["num_partitions"],
            runs={int(p): [RunInfo.from_json(r) for r in rs] for p, rs in d["runs"].items()},
            pending=d["pending"],
            blackbox=d["blackbox"],
            outputs={f: Increment.from_json(i) for f, i in d["outputs"].items()},
            metrics=d.get("metrics", {}),
            tables=d.get("tables", {}),
            query=d.get("query", {}),
        )

    @property
    def total_bytes(self) -> int:
        """The committed state's size on disk."""
        direct = sum(r.data_bytes + r.index_bytes for rs in self.runs.values() for r in rs)
        tables = [f for t in self.tables.values() for f in t["files"]]
        return direct + sum(fs.size_of(f) for f in self.pending + self.blackbox + tables)


class StateDir:
    """The directory holding one stage's state."""

    def __init__(self, root: str, stage: str) -> None:
        self.root = root
        self.stage = stage

    def _manifest_uri(self, epoch: int) -> str:
        return fs.join(self.root, f"manifest-{epoch:08d}.json")

    def current(self) -> StateSnapshot:
        """The last committed snapshot (epoch 0 and no state if none)."""
        data = fs.read_bytes(fs.join(self.root, "CURRENT"))
        if data is None:
            return StateSnapshot(self.stage)
        return self.manifest(int(data.decode().strip()))

    def manifest(self, epoch: int) -> StateSnapshot:
        d = fs.read_json(self._manifest_uri(epoch))
        if d is None:
            raise FileNotFoundError(f"no manifest for epoch {epoch} of stage {self.stage!r}")
        return StateSnapshot.from_json(d)

    def records(self, snap: StateSnapshot | None = None) -> list[dict]:
        """The committed state records (no Spark needed): direct-mode runs plus records
        bound for another partition, or the black-box state files."""
        from strata.storage.increments import read_records
        from strata.storage.partition_store import read_all

        snap = snap or self.current()
        if snap.tables:  # a compiled query: rows of each table, marked with its name
            return [{"_table": name, **r} for name, t in snap.tables.items()
                    for r in read_records(t["files"])]
        if snap.mode == "blackbox":
            recs = read_records(snap.blackbox)
        else:
            recs = [r for _, _, rs in read_all(self.root, snap.runs) for r in rs]
        for f in snap.pending:
            recs += [item[3] for item in pickle.loads(fs.read_bytes(f)) if item[0] == "P"]
        return recs

    def commit(self, snap: StateSnapshot) -> None:
        """Make ``snap`` the committed state: manifest first, then the CURRENT pointer."""
        from strata.faults import crashpoint

        fs.write_json_atomic(self._manifest_uri(snap.epoch), snap.to_json())
        crashpoint("between-manifest-and-current")
        fs.write_bytes_atomic(fs.join(self.root, "CURRENT"), f"{snap.epoch}\n".encode())

    def gc(self, keep: StateSnapshot) -> None:
        """Delete state files and manifests the committed snapshot no longer references."""
        from strata.storage.partition_store import PartitionStore

        for name in fs.list_dir(self.root):
            if name.startswith("p") and name[1:].isdigit():
                p = int(name[1:])
                PartitionStore(self.root, p, []).delete_unreferenced(keep.runs.get(p, []))
        referenced = set(keep.pending) | set(keep.blackbox)
        referenced |= {f for t in keep.tables.values() for f in t["files"]}
        for table in fs.list_dir(fs.join(self.root, "tables")):
            for name in fs.list_dir(fs.join(self.root, "tables", table)):
                uri = fs.join(self.root, "tables", table, name)
                if uri not in referenced:
                    fs.delete_quietly(uri)
        fs.delete_quietly(fs.join(self.root, "staging"))
        for sub in ("pending", "blackbox"):
            for name in fs.list_dir(fs.join(self.root, sub)):
                uri = fs.join(self.root, sub, name)
                if uri not in referenced:
                    fs.delete_quietly(uri)
        for name in fs.list_dir(self.root):
            if name.startswith("manifest-") and name != f"manifest-{keep.epoch:08d}.json":
                fs.delete_quietly(fs.join(self.root, name))
