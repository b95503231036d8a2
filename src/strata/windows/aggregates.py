"""Pane aggregates and how they combine: the query layer's monoid parts, or iMR's
``map``/``combine``/``uncombine``/``reduce``.

A *pane table* maps a group's key (a tuple) to its state: a list of parts, the first
always the group's record count (``_cnt``, a sum of multiplicities), which tells when an
uncombine empties a group. :class:`PartsAlgebra` combines pane tables part by part; it is
invertible when every part is (sums and multisets are; ``min``/``max`` are not, and
windows then slide with Two-Stacks, ``strata.windows.sliding``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strata.model.errors import StrataError

PaneTable = dict[tuple, list]  # group key -> [count, part, part, ...]
Merge = Callable[[Any, Any], Any]


def _add(a: Any, b: Any) -> Any:
    return (a or 0) + (b or 0)


def _sub(a: Any, b: Any) -> Any:
    return (a or 0) - (b or 0)


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _greatest(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _bag(v: Any) -> dict:
    return v if isinstance(v, dict) else dict(v or ())


def _bag_add(a: Any, b: Any, sign: int = 1) -> dict:
    out = dict(_bag(a))
    for k, n in _bag(b).items():
        m = out.get(k, 0) + sign * n
        if m:
            out[k] = m
        else:
            out.pop(k, None)
    return out


def _bag_sub(a: Any, b: Any) -> dict:
    return _bag_add(a, b, -1)


PART_MERGES: dict[str, tuple[Merge, Merge | None]] = {
    "add": (_add, _sub),
    "least": (_least, None),
    "greatest": (_greatest, None),
    "multiset": (_bag_add, _bag_sub),
}


@dataclass
class PartsAlgebra:
    """Combine and uncombine pane tables part by part."""

    merges: Sequence[tuple[Merge, Merge | None]]

    @classmethod
    def of_kinds(cls, kinds: Sequence[str], what: str) -> PartsAlgebra:
        unknown = [k for k in kinds if k not in PART_MERGES]
        if unknown:
            raise StrataError(f"{what}: aggregates with {unknown} parts (SQL user aggregates) "
                              "cannot run over panes; write it as a MapReduce aggregate "
                              "(strata.windows.MapReduce) with Python combine/uncombine")
        return cls([PART_MERGES[k] for k in kinds])

    @property
    def invertible(self) -> bool:
        return all(inv is not None for _, inv in self.merges)

    def identity(self) -> PaneTable:
        return {}

    def merge(self, a: list, b: list) -> list:
        """One group's parts ``a`` combined with ``b``."""
        return [m(x, y) for (m, _), x, y in zip(self.merges, a, b, strict=True)]

    def combine(self, a: PaneTable, b: PaneTable) -> PaneTable:
        if not b:
            return a
        out = dict(a)
        for k, parts in b.items():
            old = out.get(k)
            out[k] = list(parts) if old is None else self.merge(old, parts)
        return out

    def uncombine(self, a: PaneTable, b: PaneTable) -> PaneTable:
        inverses = [inv for _, inv in self.merges if inv is not None]
        if len(inverses) != len(self.merges):  # the sliders uncombine only when invertible
            raise StrataError("parts without an inverse (min, max) cannot be uncombined")
        out = dict(a)
        for k, parts in b.items():
            old = out.get(k)
            if old is None:
                continue
            new = [inv(x, y) for inv, x, y in zip(inverses, old, parts, strict=True)]
            if new[0]:
                out[k] = new
            else:  # no records left in the group
                del out[k]
        return out


@dataclass(frozen=True)
class MapReduce:
    """A windowed aggregate written the iMR way, for porting MapReduce jobs.

    ``map(record)`` yields ``(key, value)`` pairs (a record is a dict of the flow's
    columns); values of a key are folded with ``combine`` into a pane's state, panes
    into a window's; ``uncombine(a, b)`` removes ``b`` from ``a`` (optional: without it
    windows slide with Two-Stacks); ``reduce(key, state)`` is the result. ``key`` and
    ``result`` name the output columns; their types are Spark SQL types.

    >>> words = MapReduce(map=lambda r: ((w, 1) for w in r["line"].split()),
    ...                   combine=operator.add, uncombine=operator.sub,
    ...                   reduce=lambda k, n: n, result_type="bigint")
    """

    map: Callable[[dict], Iterable[tuple[Hashable, Any]]]
    combine: Merge
    reduce: Callable[[Any, Any], Any]
    uncombine: Merge | None = None
    key: str = "key"
    key_type: str = "string"
    result: str = "value"
    result_type: str = "bigint"

    def algebra(self) -> PartsAlgebra:
        return PartsAlgebra([PART_MERGES["add"], (self.combine, self.uncombine)])

    def output_columns(self) -> dict[str, str]:
        return {self.key: self.key_type, self.result: self.result_type}


def mapped_cells(mr: MapReduce, cell_of: Callable[[dict], tuple],
                 records: Iterable[Mapping]) -> Iterable[tuple[tuple, list]]:
    """``map`` then ``combine`` over one partition's records: ``((cell…, key), [n, v])``."""
    local: dict[tuple, list] = {}
    for record in records:
        r = dict(record)
        mult = r.pop("_mult", 1)
        cell = cell_of(r)
        for k, v in mr.map(r):
            key = (*cell, k)
            old = local.get(key)
            if mult < 0:
                if mr.uncombine is None:
                    raise StrataError("a delete reached a MapReduce aggregate without "
                                      "uncombine")
                local[key] = [(old[0] if old else 0) - 1,
                              mr.uncombine(old[1], v) if old else mr.uncombine(
                                  _zero(mr, v), v)]
            else:
                local[key] = [1, v] if old is None else [old[0] + 1, mr.combine(old[1], v)]
    return local.items()


def _zero(mr: MapReduce, v: Any) -> Any:
    return mr.uncombine(v, v) if mr.uncombine else None


# -- a MapReduce's cells as Spark tasks (DataFrames and Arrow: classic Spark and Connect) --
# A cell's key (source, pane, map key) and its value are pickled: the user's map decides
# their Python types, which need not be Spark's.
PICKLED_CELLS = "_k binary, _n bigint, _v binary"
_CELLS = pa.schema([("_k", pa.binary()), ("_n", pa.int64()), ("_v", pa.binary())])
CELLS_PER_BATCH = 65_536


def map_partition(mr: MapReduce, batches: Iterable[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
    """One task of the map side (``mapInArrow``): ``map`` then ``combine`` over its
    records (the flow's columns with ``_src``, ``_pane`` and ``_mult``), as pickled
    cells (:data:`PICKLED_CELLS`)."""
    records = (r for b in batches for r in b.to_pylist())
    yield from _pickled(mapped_cells(mr, _source_and_pane, records))


def combine_partition(mr: MapReduce, batches: Iterable[pa.RecordBatch]
                      ) -> Iterator[pa.RecordBatch]:
    """One task of the reduce side: the pickled cells of its partition of keys, the
    counts and values of each key combined."""
    local: dict[bytes, list] = {}
    for b in batches:
        for k, n, v in zip(*(b.column(i).to_pylist() for i in range(3)), strict=True):
            merge_cell(mr, local, k, [n, pickle.loads(v)])
    yield from _pickled((pickle.loads(k), nv) for k, nv in local.items())


def merge_cell(mr: MapReduce, cells: dict, key: Any, count_value: list) -> None:
    """Fold one cell's ``[count, value]`` into ``cells[key]``."""
    old = cells.get(key)
    cells[key] = count_value if old is None else [
        old[0] + count_value[0], mr.combine(old[1], count_value[1])]


def _source_and_pane(r: dict) -> tuple:
    return (r.pop("_src"), r.pop("_pane"))


def _pickled(cells: Iterable[tuple[tuple, list]]) -> Iterator[pa.RecordBatch]:
    keys: list[bytes] = []
    counts: list[int] = []
    values: list[bytes] = []
    for k, (n, v) in cells:
        keys.append(pickle.dumps(k))
        counts.append(n)
        values.append(pickle.dumps(v))
        if len(keys) == CELLS_PER_BATCH:
            yield pa.record_batch([keys, counts, values], schema=_CELLS)
            keys, counts, values = [], [], []
    if keys:
        yield pa.record_batch([keys, counts, values], schema=_CELLS)
