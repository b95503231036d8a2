"""The layout of a strata home: the one module that knows where everything lives.

A home is a directory (a local path or a Hadoop-compatible URI, see :mod:`strata.storage.fs`,
for everything but the catalog and the lock, which are local files: inside a local home
unless named elsewhere, and named elsewhere for a home on shared storage)::

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

from strata.model.errors import StrataError
from strata.storage import fs

CATALOG = "catalog.sqlite"
LOCK = "controller.lock"
CATALOG_AT = "catalog.location"  # in a home whose catalog is elsewhere: where it is
_INCOMING, _FLOWS, _FRAMES, _STATE = "incoming", "flows", "frames", "state"


class HomeLocationError(StrataError):
    """A home or catalog location strata cannot work with."""


class Home:
    """Every path of one strata home.

    ``catalog`` is where the SQLite catalog is (its lock file beside it, ``.lock``
    added): a local or mounted path, by default ``catalog.sqlite`` inside a local home. A
    home on shared storage (``hdfs://``, an object store) must name one, since SQLite
    needs a local filesystem. ``root`` may be a :class:`Home` (then ``catalog``, if given,
    replaces its catalog).
    """

    def __init__(self, root: str | os.PathLike[str] | Home,
                 catalog: str | os.PathLike[str] | None = None) -> None:
        self.root: str
        self.catalog: str | None
        if isinstance(root, Home):
            self.root, self.catalog = root.root, root.catalog
        else:
            self.root, self.catalog = fs.normalize(os.fspath(root)), None
        if catalog is not None:
            named = os.fspath(catalog)
            if not fs.is_local(named):
                raise HomeLocationError(
                    f"catalog {named}: the catalog is a SQLite file and needs a local (or "
                    "mounted) path; give --catalog PATH, a local path for the SQLite catalog")
            self.catalog = fs.local_path(named)

    def __repr__(self) -> str:
        return f"Home({self.root!r})" if self.catalog is None else \
            f"Home({self.root!r}, catalog={self.catalog!r})"

    # -- the home itself --------------------------------------------------------------
    @property
    def catalog_path(self) -> str:
        """The SQLite catalog's local path (HomeLocationError if the home names none)."""
        if self.catalog is not None:
            return self.catalog
        if not fs.is_local(self.root):
            raise HomeLocationError(
                f"strata home {self.root} is not on a local filesystem, and SQLite cannot "
                "keep the catalog there: give --catalog PATH, a local path for the SQLite "
                "catalog (catalog= in Python)")
        return os.path.join(fs.local_path(self.root), CATALOG)

    @property
    def lock_path(self) -> str:
        if self.catalog is not None:
            return self.catalog + ".lock"
        return os.path.join(os.path.dirname(self.catalog_path), LOCK)

    def owns(self, uri: str) -> bool:
        """Whether ``uri`` is under the home (strata wrote it), not a file an increment
        references in place (which strata never deletes)."""
        return fs.key(uri).startswith(fs.key(self.root).rstrip("/") + "/")

    def exists(self) -> bool:
        """Whether a controller has registered a dataflow here (its catalog exists)."""
        self.check_catalog()
        return os.path.isfile(self.catalog_path)

    def create(self) -> None:
        """Make the home's directory and the catalog's; a home whose catalog is named
        elsewhere notes where (so that opening it without the catalog is refused)."""
        self.check_catalog()
        filesystem, path = fs.resolve(self.root)
        filesystem.create_dir(path, recursive=True)
        os.makedirs(os.path.dirname(self.catalog_path), exist_ok=True)
        if self.catalog is not None and self._noted_catalog() is None:
            fs.write_bytes_atomic(fs.join(self.root, CATALOG_AT), self.catalog.encode())

    def _noted_catalog(self) -> str | None:
        data = fs.read_bytes(fs.join(self.root, CATALOG_AT))
        return None if data is None else data.decode().strip()

    def check_catalog(self) -> None:
        """HomeLocationError unless the catalog is the home's: a home made with its
        catalog elsewhere is not opened with another (a fresh catalog would not know its
        files, and the sweep would remove them)."""
        path = self.catalog_path
        noted = self._noted_catalog()
        if noted is not None and noted != path:
            raise HomeLocationError(
                f"strata home {self.root} keeps its catalog at {noted}, not {path}: give "
                f"--catalog {noted}")

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
