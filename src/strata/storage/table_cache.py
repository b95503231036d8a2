"""A process's cache of Arrow tables read from files that never change once written.

State files and columnar runs are written once under unique names and only ever deleted,
so a table kept in memory is never stale: each process (the driver, or a Python worker
Spark reuses) keeps the tables it read or wrote last, least recently used dropped first
once their bytes pass the cache's budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

import pyarrow as pa


class TableCache:
    """Tables by key, newest use last, up to ``budget`` bytes; a table over half the
    budget is not kept (it would push out everything else). Safe across threads.
    ``budget`` may be a function, asked at each use (a budget an environment variable
    sets: docs/configuration.md)."""

    def __init__(self, budget: int | Callable[[], int]) -> None:
        self._budget = budget
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str, touch: bool = True) -> pa.Table | None:
        """The table kept under ``key``, if any; ``touch`` counts this as a use."""
        with self._lock:
            table = self._tables.get(key)
            if table is not None and touch:
                self._tables.move_to_end(key)
            return table

    def put(self, key: str, table: pa.Table) -> None:
        """Keep ``table`` under ``key``, dropping the least recently used over budget."""
        if table.nbytes > self.budget // 2:
            return
        with self._lock:
            old = self._tables.pop(key, None)
            self._bytes += table.nbytes - (old.nbytes if old is not None else 0)
            self._tables[key] = table
            while self._bytes > self.budget:
                self._bytes -= self._tables.popitem(last=False)[1].nbytes

    def move(self, old: str, new: str) -> None:
        """Keep the table kept under ``old`` (if any) under ``new``: its file moved."""
        with self._lock:
            table = self._tables.pop(old, None)
            if table is not None:
                self._tables[new] = table

    @property
    def budget(self) -> int:
        """The bytes the cache may keep (now)."""
        return self._budget() if callable(self._budget) else self._budget

    @property
    def bytes(self) -> int:
        """The bytes of the tables kept."""
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._bytes = 0

    def __iter__(self) -> Iterator[str]:
        """The keys, least recently used first."""
        with self._lock:
            return iter(list(self._tables))

    def __len__(self) -> int:
        return len(self._tables)
