"""After a crash: epochs logged but not finished, and files nothing references.

Each epoch's intent is logged before its job runs (the write-ahead log). An unfinished
intent whose stage already committed that epoch (``CURRENT`` names it) only needs its
catalog transaction; one whose stage did not must run again over the same increments.
Garbage collection deletes increments no connector references; the sweep deletes files
of epochs that crashed before they were applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strata.controller.ingest import staged_ingest_is_dead
from strata.faults import crashpoint
from strata.model.errors import StrataError
from strata.physical.fusion import PhysicalStage
from strata.storage import fs
from strata.storage.catalog import Catalog
from strata.storage.home import Home
from strata.storage.manifest import StateDir, StateSnapshot


@dataclass(frozen=True)
class UnfinishedEpoch:
    """A logged epoch whose catalog transaction never ran."""

    seq: int
    unit: PhysicalStage
    epoch: int
    intent: dict
    committed: StateSnapshot | None  # the stage's snapshot if it committed this epoch


def unfinished_epochs(catalog: Catalog, home: Home,
                      units: Mapping[str, PhysicalStage]) -> list[UnfinishedEpoch]:
    """The epochs a crash interrupted, oldest first, each with whether its job committed."""
    out = []
    for seq, name, epoch, intent in catalog.unapplied():
        unit = units.get(name)
        if unit is None:
            raise StrataError(f"the home has an unfinished epoch of stage {name!r}, which "
                              "the dataflow no longer has; run the dataflow that wrote it")
        snap = StateDir(home.stage(name)).current()
        out.append(UnfinishedEpoch(seq, unit, epoch, intent,
                                   snap if snap.epoch == epoch else None))
    return out


def collect_garbage(catalog: Catalog, home: Home) -> int:
    """Delete increments that no connector references any more (and their files)."""
    dead = catalog.drop_unreferenced_increments()
    crashpoint("gc-after-commit")
    for files in dead:
        _delete_increment_files(home, files)
    return len(dead)


def _delete_increment_files(home: Home, files: Sequence[str]) -> None:
    files = [f for f in files if home.owns(f)]  # never a file ingested by reference
    for f in files:
        fs.delete_quietly(f)
    parents = {f.rsplit("/", 1)[0] for f in files if not home.is_frame_file(f)}
    for d in parents:  # an increment's own directory (not the shared frames/ folders)
        if not fs.list_dir(d):
            fs.delete_quietly(d)


def sweep(catalog: Catalog, home: Home) -> int:
    """Remove files of epochs that crashed before they were applied (under the lock,
    after recovery, nothing unreferenced under ``flows/`` or ``frames/`` is live), and
    files staged by ingests killed before they committed."""
    live = {fs.key(f) for f in catalog.live_files()}  # however the home was spelt then
    live_dirs = {f.rsplit("/", 1)[0] for f in live}
    removed = 0
    for uri in home.output_dirs():
        if fs.key(uri) not in live_dirs:
            fs.delete_quietly(uri)
            removed += 1
    for uri in home.frame_files():
        if fs.key(uri) not in live:
            fs.delete_quietly(uri)
            removed += 1
    for uri, token in home.incoming_dirs():
        if fs.key(uri) not in live_dirs and staged_ingest_is_dead(token):
            fs.delete_quietly(uri)
            removed += 1
    return removed
