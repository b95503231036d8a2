"""Per-partition state store of direct execution mode (a BIPtable-like layout).

A partition of a stage's state is a list of immutable *runs*, oldest first. A run is a
data file (concatenated ``pickle.dumps((key, records))`` entries, sorted by
``(hash64(enc), enc)``) and an index file::

    header  <4sHHQ>  magic, version, bits b, entry count n
    dir     (2**b + 1) x u8   first index entry of each bucket (bucket = top b hash bits)
    entries n x (hash u8, offset u8, length u4), sorted by hash

so a lookup of a few keys reads only the header, two directory slots and one bucket
(about 4-8 index entries) per key, then the matching data ranges, all coalesced. An entry
whose ``records`` are empty is a *tombstone*: it masks older runs and is dropped when the
runs are merged into one. Files are written under a temporary name and moved into place;
the list of committed runs (``RunInfo.to_json()``) is kept by the caller.
"""

from __future__ import annotations

import heapq
import os
import pickle
import struct
import uuid
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from strata.model.keys import encode_key, hash64

Entry = tuple[bytes, Any, list[dict]]

_MAGIC = b"STIX"
_VERSION = 1
_HEADER = struct.Struct("<4sHHQ")
_ENTRY = np.dtype([("h", "<u8"), ("off", "<u8"), ("len", "<u4")])  # packed: 20 bytes
_SMALL_INDEX = 64 * 1024  # indexes up to this size are read whole
_BUFFER = 1 << 20


@dataclass(frozen=True)
class RunInfo:
    """One committed run of a partition: ``{run_id}.data`` + ``{run_id}.index``."""

    run_id: str
    entries: int  # index entries, tombstones included
    data_bytes: int
    index_bytes: int

    @property
    def nbytes(self) -> int:
        """Bytes on disk (data + index)."""
        return self.data_bytes + self.index_bytes

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RunInfo:
        """Inverse of :meth:`to_json`."""
        return cls(
            str(obj["run_id"]), int(obj["entries"]), int(obj["data_bytes"]), int(obj["index_bytes"])
        )


def _bits_for(n: int) -> int:
    """Bucket bits giving 4-8 entries per bucket on average."""
    return min((n // 8).bit_length(), 40)


class PartitionStore:
    """The runs of state partition ``partition`` under ``root`` (a path or a URI)."""

    def __init__(self, root: str, partition: int, runs: Sequence[RunInfo]) -> None:
        if "://" not in root:
            root = os.path.abspath(root)
        self.fs, base = pafs.FileSystem.from_uri(root)
        self.dir = f"{base.rstrip('/')}/p{partition:05d}"
        self.partition = partition
        self.runs: list[RunInfo] = list(runs)
        self.bytes_read = 0
        self._small: dict[str, np.ndarray] = {}  # parsed small indexes, by run id

    @property
    def total_bytes(self) -> int:
        """Bytes on disk of the current runs (data + index files)."""
        return sum(r.nbytes for r in self.runs)

    def _path(self, run_id: str, kind: str) -> str:
        return f"{self.dir}/{run_id}.{kind}"

    # ----------------------------------------------------------------- reading
    def _read_ranges(self, f: Any, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Read ``[start, end)`` ranges with positioned reads, coalescing touching ones."""
        order = sorted(range(len(ranges)), key=ranges.__getitem__)
        out: list[memoryview] = [memoryview(b"")] * len(ranges)
        i = 0
        while i < len(order):
            start, end = ranges[order[i]]
            j = i + 1
            while j < len(order) and ranges[order[j]][0] <= end:
                end = max(end, ranges[order[j]][1])
                j += 1
            buf = memoryview(f.read_at(end - start, start))
            self.bytes_read += len(buf)
            for k in order[i:j]:
                s, e = ranges[k]
                out[k] = buf[s - start : e - start]
            i = j
        return out

    def _candidates(self, run: RunInfo, hashes: np.ndarray) -> np.ndarray:
        """Index entries of ``run`` whose hash is in ``hashes`` (sorted unique u8)."""
        entries = self._small.get(run.run_id)
        if entries is None:
            with self.fs.open_input_file(self._path(run.run_id, "index")) as f:
                if run.index_bytes <= _SMALL_INDEX:
                    buf = f.read_at(run.index_bytes, 0)
                    self.bytes_read += len(buf)
                    _, _, bits, n = _HEADER.unpack_from(buf)
                    start = _HEADER.size + 8 * ((1 << bits) + 1)
                    entries = self._small[run.run_id] = np.frombuffer(buf, _ENTRY, n, start)
                else:
                    entries = self._read_buckets(f, hashes)
        return entries[np.isin(entries["h"], hashes)]

    def _read_buckets(self, f: Any, hashes: np.ndarray) -> np.ndarray:
        """Read from a large index only the directory slots and buckets of ``hashes``."""
        (hdr,) = self._read_ranges(f, [(0, _HEADER.size)])
        magic, _, bits, n = _HEADER.unpack(hdr)
        if magic != _MAGIC:
            raise ValueError(f"not a strata index file: {f}")
        buckets = np.unique(hashes >> np.uint64(64 - bits)) if bits else np.zeros(1, np.uint64)
        dir0, ent0 = _HEADER.size, _HEADER.size + 8 * ((1 << bits) + 1)
        slots = self._read_ranges(f, [(dir0 + 8 * int(b), dir0 + 8 * int(b) + 16) for b in buckets])
        spans = [np.frombuffer(s, "<u8") for s in slots]
        parts = self._read_ranges(
            f, [(ent0 + 20 * int(lo), ent0 + 20 * int(hi)) for lo, hi in spans if hi > lo]
        )
        return np.frombuffer(b"".join(parts), _ENTRY)

    def lookup(self, encs: Iterable[bytes]) -> dict[bytes, tuple[Any, list[dict]]]:
        """``enc -> (key, records)`` for the live keys among ``encs`` (newest run wins)."""
        pending = {enc: hash64(enc) for enc in encs}
        found: dict[bytes, tuple[Any, list[dict]]] = {}
        for run in reversed(self.runs):
            if not pending:
                break
            if run.entries == 0:
                continue
            hashes = np.unique(np.fromiter(pending.values(), np.uint64, len(pending)))
            cands = self._candidates(run, hashes)
            if not len(cands):
                continue
            starts = cands["off"].tolist()
            ranges = [(o, o + n) for o, n in zip(starts, cands["len"].tolist(), strict=True)]
            with self.fs.open_input_file(self._path(run.run_id, "data")) as f:
                blobs = self._read_ranges(f, ranges)
            for blob in blobs:
                key, records = pickle.loads(blob)
                enc = encode_key(key)
                if pending.pop(enc, None) is not None and records:
                    found[enc] = (key, records)
        return found

    def _stream(self, run: RunInfo, rank: int) -> Iterator[tuple[int, bytes, int, Any, list]]:
        """All entries of ``run`` as ``(hash, enc, rank, key, records)``, in stored order."""
        self.bytes_read += run.data_bytes
        with self.fs.open_input_stream(self._path(run.run_id, "data"), buffer_size=_BUFFER) as s:
            for _ in range(run.entries):  # one unpickler per entry: each has its own memo
                key, records = pickle.load(s)
                enc = encode_key(key)
                yield hash64(enc), enc, rank, key, records

    def _merge(self, runs: Sequence[RunInfo], drop_tombstones: bool) -> Iterator[tuple]:
        """Newest version of each key over ``runs`` as ``(hash, enc, rank, key, records)``,
        in ``(hash, enc)`` order; a streaming k-way merge of the sorted data files."""
        streams = [self._stream(run, -i) for i, run in enumerate(runs)]
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=lambda t: t[:3])
        last = None
        for item in merged:
            if item[1] == last:  # an older version of the key just emitted or dropped
                continue
            last = item[1]
            if item[4] or not drop_tombstones:
                yield item

    def scan(self) -> Iterator[Entry]:
        """Every live entry of the partition, each key once with its newest records."""
        if not self.runs:
            return
        for _, enc, _, key, records in self._merge(self.runs, drop_tombstones=True):
            yield enc, key, records

    # ----------------------------------------------------------------- writing
    @contextmanager
    def _atomic(self, path: str) -> Iterator[Any]:
        """An output stream to a temporary file that is moved to ``path`` on success."""
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        try:
            with self.fs.open_output_stream(tmp, buffer_size=_BUFFER) as out:
                yield out
            self.fs.move(tmp, path)
        except BaseException:
            with suppress(Exception):
                self.fs.delete_file(tmp)
            raise

    def write_run(self, run_id: str, entries: Iterable[Entry]) -> RunInfo:
        """Write a new run of ``entries`` (any order, each enc at most once; empty records =
        tombstone). The run is not added to :attr:`runs`: commit it via the manifest."""
        items = sorted(
            ((hash64(enc), enc, 0, key, recs) for enc, key, recs in entries), key=lambda t: t[:2]
        )
        for a, b in pairwise(items):
            if a[1] == b[1]:
                raise ValueError(f"key {a[3]!r} appears twice in one run")
        return self._write_sorted(run_id, items)

    def _write_sorted(self, run_id: str, items: Iterable[tuple]) -> RunInfo:
        """Write ``(hash, enc, _, key, records)`` items already in ``(hash, enc)`` order."""
        self.fs.create_dir(self.dir, recursive=True)
        hs, offs, lens, pos = array("Q"), array("Q"), array("I"), 0
        with self._atomic(self._path(run_id, "data")) as out:
            for h, _enc, _, key, records in items:
                blob = pickle.dumps((key, records), protocol=5)  # enc is derived from key
                out.write(blob)
                hs.append(h)
                offs.append(pos)
                lens.append(len(blob))
                pos += len(blob)
        n = len(hs)
        index = np.empty(n, _ENTRY)
        index["h"], index["off"], index["len"] = hs, offs, lens
        bits = _bits_for(n)
        buckets = index["h"] >> np.uint64(64 - bits) if bits else np.zeros(n, np.uint64)
        directory = np.searchsorted(buckets, np.arange((1 << bits) + 1, dtype=np.uint64))
        with self._atomic(self._path(run_id, "index")) as out:
            out.write(_HEADER.pack(_MAGIC, _VERSION, bits, n))
            out.write(directory.astype("<u8").tobytes())
            out.write(index.tobytes())
        return RunInfo(run_id, n, pos, _HEADER.size + 8 * len(directory) + index.nbytes)

    def maybe_compact(
        self,
        run_id: str,
        runs: Sequence[RunInfo],
        *,
        max_runs: int = 8,
        base_fraction: float = 0.25,
    ) -> list[RunInfo]:
        """The run list to commit in place of ``runs`` (oldest first), size-tiered.

        If the runs newer than the oldest (the base) exceed ``base_fraction`` of its bytes,
        everything is merged into run ``{run_id}.c`` (shadowed entries and tombstones
        dropped; an empty result gives ``[]``). Else, if there are more than ``max_runs``
        runs, the newer ones are merged into ``{run_id}.m``. Else ``runs`` is returned.
        """
        runs = list(runs)
        if len(runs) < 2:
            return runs
        if sum(r.nbytes for r in runs[1:]) > base_fraction * runs[0].nbytes:
            merged = self._write_sorted(f"{run_id}.c", self._merge(runs, drop_tombstones=True))
            if merged.entries == 0:
                for kind in ("data", "index"):
                    self.fs.delete_file(self._path(merged.run_id, kind))
                return []
            return [merged]
        if len(runs) > max_runs:
            items = self._merge(runs[1:], drop_tombstones=False)
            return [runs[0], self._write_sorted(f"{run_id}.m", items)]
        return runs

    def delete_unreferenced(self, keep: Iterable[RunInfo]) -> int:
        """Delete this partition's files (runs, stray temporaries) not belonging to ``keep``.
        Call it only when no writer of this partition is running. Returns files removed."""
        names = {f"{r.run_id}.{kind}" for r in keep for kind in ("data", "index")}
        infos = self.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))
        removed = 0
        for info in infos:
            if info.type == pafs.FileType.File and info.base_name not in names:
                self.fs.delete_file(info.path)
                removed += 1
        return removed


def read_all(root: str, partitions: Mapping[int, Sequence[RunInfo]]) -> Iterator[Entry]:
    """Every live entry of every partition (``partition -> runs``) under ``root``."""
    for p in sorted(partitions):
        yield from PartitionStore(root, p, partitions[p]).scan()
