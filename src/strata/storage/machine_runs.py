"""Decoded columnar runs shared by the processes of one machine (docs/performance.md,
"Runs kept on the machine").

Each process keeps the runs it read or wrote in memory (``columnar_runs.RUN_CACHE``),
but Spark hands a task to whichever Python worker is free, so a worker meeting a state
partition for the first time used to read that partition's runs whole from the home.
This cache sits between the two: every run a process writes or reads from the home is
also written here, uncompressed, as an Arrow IPC file in a directory of the machine's
temporary storage, and a process whose own memory misses memory-maps it from here
instead. The operating system's page cache holds these files in memory, so a hit costs
no decoding and no read from the home; Structured Streaming's RocksDB state store keeps
a local working copy on each executor for the same reason.

Runs never change once written and their names are unique, so an entry is never stale;
entries are named by a hash of the run's path and size. Files are written under a
temporary name and renamed, so a reader sees a whole file or none, and a mapped file
stays readable after another process evicts it. Eviction drops the least recently used
files (by modification time, refreshed on each hit) once the directory passes its
budget. Every failure here (a full disk, a directory that cannot be made) only turns
the cache off for that call: the home stays the source of truth.

``STRATA_MACHINE_RUN_CACHE_MB`` sets the budget (default 2048; 0 turns it off) and
``STRATA_MACHINE_RUN_CACHE_DIR`` the directory (default ``strata-runs-<uid>`` under the
system's temporary directory). Executors of a cluster read them from their own
environment (``spark.executorEnv.*``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import uuid
from contextlib import suppress

import pyarrow as pa

from strata import config

_SUFFIX = ".arrow"
_STALE_TMP_SECONDS = 3600


def _default_dir() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"strata-runs-{uid}")


class MachineRunCache:
    """Uncompressed copies of runs under ``directory``, up to ``budget`` bytes in all;
    a table over a quarter of the budget is not kept."""

    def __init__(self, directory: str | None = None, budget: int | None = None) -> None:
        """``directory`` and ``budget`` default to ``STRATA_MACHINE_RUN_CACHE_DIR`` and
        ``STRATA_MACHINE_RUN_CACHE_MB``, read at each use (docs/configuration.md)."""
        self._directory = directory
        self._budget = budget
        self._checked: tuple[str, bool] | None = None

    @property
    def directory(self) -> str:
        return self._directory or config.env(config.MACHINE_RUN_CACHE_DIR) or _default_dir()

    @property
    def budget(self) -> int:
        if self._budget is not None:
            return self._budget
        return int(config.env(config.MACHINE_RUN_CACHE_MB) * (1 << 20))

    @property
    def enabled(self) -> bool:
        return self.budget > 0 and self._owned()

    def _owned(self) -> bool:
        """The directory is missing (it will be made) or this user's alone: files another
        user could write are never mapped."""
        directory = self.directory
        if self._checked is None or self._checked[0] != directory:
            try:
                st = os.stat(directory)
            except FileNotFoundError:
                return True
            except OSError:
                st = None
            mine = not hasattr(os, "getuid") or (
                st is not None and st.st_uid == os.getuid() and not st.st_mode & 0o022)
            self._checked = (directory, mine)
        return self._checked[1]

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, hashlib.sha1(key.encode()).hexdigest() + _SUFFIX)

    def get(self, key: str) -> pa.Table | None:
        """The table kept under ``key``, memory-mapped, or None."""
        if not self.enabled:
            return None
        path = self._path(key)
        try:
            table = pa.ipc.open_file(pa.memory_map(path)).read_all()
        except FileNotFoundError:
            return None
        except (pa.ArrowInvalid, OSError):  # not a whole IPC file: never trust it again
            with suppress(OSError):
                os.remove(path)
            return None
        with suppress(OSError):
            os.utime(path)  # a use: eviction goes by modification time
        return table

    def put(self, key: str, table: pa.Table) -> bool:
        """Keep ``table`` under ``key``; False when it was not kept (too large, off, or
        the directory could not take it)."""
        if not self.enabled or table.nbytes > self.budget // 4:
            return False
        path = self._path(key)
        if os.path.exists(path):
            return True
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            with pa.OSFile(tmp, "wb") as out, pa.ipc.new_file(out, table.schema) as writer:
                writer.write_table(table)
            os.replace(tmp, path)
        except OSError:
            with suppress(OSError):
                os.remove(tmp)
            return False
        self._evict()
        return True

    def _evict(self, budget: int | None = None) -> None:
        """Drop the least recently used entries past ``budget`` (default: the cache's),
        and temporary files of writers that died."""
        budget = self.budget if budget is None else budget
        stats: list[tuple[os.stat_result, str]] = []
        with suppress(OSError), os.scandir(self.directory) as entries:
            for entry in entries:
                with suppress(OSError):  # another process may have removed it
                    stats.append((entry.stat(), entry.path))
        now = time.time()
        kept = []
        for stat, path in stats:
            if path.endswith(_SUFFIX):
                kept.append((stat, path))
            elif now - stat.st_mtime > _STALE_TMP_SECONDS:  # a writer that died
                with suppress(OSError):
                    os.remove(path)
        total = sum(stat.st_size for stat, _ in kept)
        for stat, path in sorted(kept, key=lambda sp: sp[0].st_mtime):
            if total <= budget:
                break
            with suppress(OSError):
                os.remove(path)
            total -= stat.st_size

    def clear(self) -> None:
        """Delete every entry (tests; a process that wants a cold machine)."""
        self._evict(budget=0)


MACHINE_RUNS = MachineRunCache()
