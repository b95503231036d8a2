"""The layout of a strata home: the one module that knows where everything lives.

A home is a directory (a local path or a Hadoop-compatible URI for everything but the
catalog and the lock, which are local files)::

    catalog.sqlite                     the controller's catalog and write-ahead log
    controller.lock                    held by the one controller running the home
    incoming/<flow>/<token>/…          ingested increments (immutable Parquet)
    flows/<flow>/<stage>-e<epoch>-<token>/part-….parquet
                                       output increments, one directory per epoch
    frames/<flow>/<consumer>/frame-<n>.parquet, open-<n>-<token>.parquet
                                       increments cut by a consumer's ``frame_by``
    state/<stage>/                     one stage's state (see :class:`StageLayout`)

Everything under ``state/<stage>/`` but the manifests belongs to the stage's program
(``docs/architecture.md``, "The home on disk").
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from strata.storage import fs

CATALOG = "catalog.sqlite"
LOCK = "controller.lock"
_INCOMING, _FLOWS, _FRAMES, _STATE = "incoming", "flows", "frames", "state"


class Home:
    """Every path of one strata home."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        root = os.fspath(root)
        self.root = root if "://" in root else os.path.abspath(root)

    def __repr__(self) -> str:
        return f"Home({self.root!r})"

    # -- the home itself --------------------------------------------------------------
    @property
    def catalog_path(self) -> str:
        return os.path.join(self.root, CATALOG)

    @property
    def lock_path(self) -> str:
        return os.path.join(self.root, LOCK)

    def owns(self, uri: str) -> bool:
        """Whether ``uri`` is under the home (strata wrote it), not a file an increment
        references in place (which strata never deletes)."""
        return uri.startswith(self.root.rstrip("/") + "/")

    def exists(self) -> bool:
        """Whether a controller has registered a dataflow here (its catalog exists)."""
        return os.path.isfile(self.catalog_path)

    def create(self) -> None:
        os.makedirs(self.root, exist_ok=True)

    # -- increments -------------------------------------------------------------------
    def incoming_file(self, flow: str, token: str) -> str:
        """Where an ingest writes its increment (before the catalog lists it)."""
        return fs.join(self.root, _INCOMING, flow, token, "part-00000.parquet")

    def incoming_dir(self, flow: str, token: str) -> str:
        """Where an ingest of a Spark DataFrame writes its part files."""
        return fs.join(self.root, _INCOMING, flow, token)

    def incoming_dirs(self) -> Iterator[tuple[str, str]]:
        """Every staged ingest directory under ``incoming/`` as ``(uri, token)``."""
        root = fs.join(self.root, _INCOMING)
        for flow in fs.list_dir(root):
            for token in fs.list_dir(fs.join(root, flow)):
                yield fs.join(root, flow, token), token

    def output_dir(self, flow: str, stage: str, epoch: int, token: str) -> str:
        """The directory of one epoch's output increment of ``flow``."""
        return fs.join(self.root, _FLOWS, flow, f"{stage}-e{epoch:08d}-{token}")

    @staticmethod
    def output_file(directory: str, part: int) -> str:
        return fs.join(directory, f"part-{part:05d}.parquet")

    def output_dirs(self) -> Iterator[str]:
        """Every epoch output directory under ``flows/`` (live or left by a crash)."""
        root = fs.join(self.root, _FLOWS)
        for flow in fs.list_dir(root):
            for d in fs.list_dir(fs.join(root, flow)):
                yield fs.join(root, flow, d)

    def frame_file(self, flow: str, consumer: str, n: int) -> str:
        return fs.join(self.root, _FRAMES, flow, consumer, f"frame-{n:08d}.parquet")

    def open_frame_file(self, flow: str, consumer: str, n: int, token: str) -> str:
        """The records of a frame not closed yet (rewritten as records arrive)."""
        return fs.join(self.root, _FRAMES, flow, consumer, f"open-{n:08d}-{token}.parquet")

    def frame_files(self) -> Iterator[str]:
        """Every file under ``frames/`` (live or left by a crash)."""
        root = fs.join(self.root, _FRAMES)
        for flow in fs.list_dir(root):
            for consumer in fs.list_dir(fs.join(root, flow)):
                base = fs.join(root, flow, consumer)
                for name in fs.list_dir(base):
                    yield fs.join(base, name)

    def is_frame_file(self, uri: str) -> bool:
        return uri.startswith(fs.join(self.root, _FRAMES) + "/")

    # -- state ------------------------------------------------------------------------
    def stage(self, name: str) -> StageLayout:
        """The layout of stage ``name``'s state directory."""
        return StageLayout(fs.join(self.root, _STATE, name), name)


class StageLayout:
    """Paths inside ``state/<stage>/``.

    The manifests and the ``CURRENT`` pointer are shared by every kind of stage
    (:mod:`strata.storage.manifest`); the other directories belong to the stage's program:
    ``p<partition>/``, ``pending/`` and ``blackbox/`` to translate stages, ``tables/`` and
    ``staging/`` to query stages. A new kind of stage keeps its files under
    :meth:`program_dir`.
    """

    def __init__(self, root: str, stage: str) -> None:
        self.root = root
        self.stage = stage

    @property
    def current_pointer(self) -> str:
        return fs.join(self.root, "CURRENT")

    def manifest(self, epoch: int) -> str:
        return fs.join(self.root, f"manifest-{epoch:08d}.json")

    def manifests(self) -> list[str]:
        """Every manifest file present, committed or not."""
        return [fs.join(self.root, n) for n in fs.list_dir(self.root)
                if n.startswith("manifest-")]

    def program_dir(self, name: str) -> str:
        """A directory of the stage's program's own (``name`` is the program's choice)."""
        return fs.join(self.root, name)

    # translate stages
    def partition_dir(self, partition: int) -> str:
        return fs.join(self.root, f"p{partition:05d}")

    def partitions(self) -> list[int]:
        """The state partitions that have a directory."""
        return [int(n[1:]) for n in fs.list_dir(self.root) if n.startswith("p") and n[1:].isdigit()]

    @property
    def pending_dir(self) -> str:
        return fs.join(self.root, "pending")

    @property
    def blackbox_dir(self) -> str:
        return fs.join(self.root, "blackbox")

    # query stages
    @property
    def tables_root(self) -> str:
        return fs.join(self.root, "tables")

    def table_dir(self, table: str) -> str:
        return fs.join(self.root, "tables", table)

    def staging_dir(self, token: str | None = None) -> str:
        """Where a query epoch writes table files before it moves them into place."""
        base = fs.join(self.root, "staging")
        return base if token is None else fs.join(base, token)
