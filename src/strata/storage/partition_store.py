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

import pickle
import struct
import uuid
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from itertools import pairwise
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from strata.model.keys import encode_key, hash64
from strata.storage import fs
from strata.storage.home import StageLayout

Entry = tuple[bytes, Any, list[dict]]

_MAGIC = b"STIX"
_VERSION = 1
_HEADER = struct.Struct("<4sHHQ")
_ENTRY = np.dtype([("h", "<u8"), ("off", "<u8"), ("len", "<u4")])  # packed: 20 bytes
_SMALL_INDEX = 64 * 1024  # indexes up to this size are read whole
# ... and so are larger ones when at least one key per this many entries is looked up (the
# lookups would touch most buckets anyway)
_DENSE_LOOKUP = 8
_BUFFER = 1 << 20
_BY_HASH_ENC = itemgetter(0, 1)


@dataclass(frozen=True)
class RunInfo:
    """One committed run of a partition: ``{run_id}.data`` + ``{run_id}.index``."""

    run_id: str
    entries: int  # index entries, tombstones included
    data_bytes: int
    index_bytes: int
    tombstones: int | None = None  # at most this many (None: not recorded, maybe some)

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
        tombstones = obj.get("tombstones")
        return cls(
            str(obj["run_id"]), int(obj["entries"]), int(obj["data_bytes"]),
            int(obj["index_bytes"]), None if tombstones is None else int(tombstones),
        )


def _bits_for(n: int) -> int:
    """Bucket bits giving 4-8 entries per bucket on average."""
    return min((n // 8).bit_length(), 40)


class PartitionStore:
    """The runs of state partition ``partition`` under ``root`` (a path or a URI)."""

    def __init__(self, root: str, partition: int, runs: Sequence[RunInfo]) -> None:
        root = fs.normalize(root)
        self.fs, base = fs.resolve(root)
        self.dir = StageLayout(base.rstrip("/"), "").partition_dir(partition)
        self.partition = partition
        self.runs: list[RunInfo] = list(runs)
        self.bytes_read = 0
        self.bytes_from_machine = 0  # no copy on the machine: kept for the columnar store's API
        self._indexes: dict[str, np.ndarray] = {}  # index entries read whole, by run id

    @property
    def total_bytes(self) -> int:
        """Bytes on disk of the current runs (data + index files)."""
        return sum(r.nbytes for r in self.runs)

    def _path(self, run_id: str, kind: str) -> str:
        return f"{self.dir}/{run_id}.{kind}"

    # ----------------------------------------------------------------- reading
    def _read_ranges(self, f: Any, ranges: Sequence[tuple[int, int]] | np.ndarray
                     ) -> list[memoryview]:
        """Read ``[start, end)`` ranges (pairs, or an ``(n, 2)`` array) with positioned reads,
        coalescing overlapping and touching ones; the views come back in ``ranges`` order."""
        if not len(ranges):
            return []
        r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        order = np.argsort(r[:, 0], kind="stable")
        starts, ends = r[order, 0], r[order, 1]
        reach = np.maximum.accumulate(ends)  # end of everything up to here
        new = np.ones(len(starts), bool)
        new[1:] = starts[1:] > reach[:-1]  # a read begins where a range starts past all before
        first = np.flatnonzero(new)
        last = np.append(first[1:], len(starts)) - 1
        reads = []
        for lo, hi in zip(starts[first].tolist(), reach[last].tolist(), strict=True):
            buf = memoryview(f.read_at(hi - lo, lo))
            self.bytes_read += len(buf)
            reads.append((lo, buf))
        out: list[memoryview] = [memoryview(b"")] * len(r)
        read_of = (np.cumsum(new) - 1).tolist()
        for k, g, s, e in zip(order.tolist(), read_of, starts.tolist(), ends.tolist(),
                              strict=True):
            lo, buf = reads[g]
            out[k] = buf[s - lo : e - lo]
        return out

    def _whole_index(self, run: RunInfo, f: Any | None = None) -> np.ndarray:
        """All index entries of ``run`` (read once per store object)."""
        entries = self._indexes.get(run.run_id)
        if entries is None:
            if f is None:
                with self.fs.open_input_file(self._path(run.run_id, "index")) as f:
                    return self._whole_index(run, f)
            buf = f.read_at(run.index_bytes, 0)
            self.bytes_read += len(buf)
            magic, _, bits, n = _HEADER.unpack_from(buf)
            if magic != _MAGIC:
                raise ValueError(f"not a strata index file: {self._path(run.run_id, 'index')}")
            start = _HEADER.size + 8 * ((1 << bits) + 1)
            entries = self._indexes[run.run_id] = np.frombuffer(buf, _ENTRY, n, start)
        return entries

    def _candidates(self, run: RunInfo, hashes: np.ndarray) -> np.ndarray:
        """Index entries of ``run`` whose hash is in ``hashes`` (sorted unique u8)."""
        entries = self._indexes.get(run.run_id)
        if entries is None:
            with self.fs.open_input_file(self._path(run.run_id, "index")) as f:
                if (run.index_bytes <= _SMALL_INDEX
                        or len(hashes) * _DENSE_LOOKUP >= run.entries):
                    entries = self._whole_index(run, f)
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
        at = dir0 + 8 * buckets.astype(np.int64)
        slots = self._read_ranges(f, np.stack([at, at + 16], axis=1))
        spans = np.frombuffer(b"".join(slots), "<u8").reshape(-1, 2).astype(np.int64)
        spans = spans[spans[:, 1] > spans[:, 0]]
        parts = self._read_ranges(f, ent0 + 20 * spans)
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
            off = cands["off"].astype(np.int64)
            ranges = np.stack([off, off + cands["len"]], axis=1)
            with self.fs.open_input_file(self._path(run.run_id, "data")) as f:
                blobs = self._read_ranges(f, ranges)
            for blob in blobs:
                key, records = pickle.loads(blob)
                enc = encode_key(key)
                if pending.pop(enc, None) is not None and records:
                    found[enc] = (key, records)
        return found

    def _merge(self, runs: Sequence[RunInfo], drop_tombstones: bool,
               decode: bool = True) -> Iterator[tuple]:
        """Newest version of each key over ``runs`` (oldest first) as ``(hash, enc, key,
        records, blob)`` in ``(hash, enc)`` order, ``blob`` being the entry's bytes in its data
        file (compaction copies them as they are).

        The order comes from the runs' indexes (sorted by hash, newest run first on equal
        hashes); each data file is then read once, sequentially. Only entries sharing a hash
        (versions of one key, or a collision) are decoded to compare their keys. With
        ``decode=False`` the other entries come as ``(hash, None, None, None, blob)``, but are
        still decoded to find tombstones if ``drop_tombstones`` (except in runs recorded to
        hold none).
        """
        indexes = [self._whole_index(run) for run in runs]
        hashes = np.concatenate([e["h"] for e in indexes])
        newest = np.concatenate([np.full(len(e), -i, np.int64) for i, e in enumerate(indexes)])
        order = np.lexsort((newest, hashes))  # stable: a run's equal hashes stay in enc order
        sorted_hashes = hashes[order]
        ties = np.zeros(len(sorted_hashes) + 1, bool)  # entry k shares its hash with k + 1
        ties[:-2] = sorted_hashes[1:] == sorted_hashes[:-1]
        run_of = (-newest[order]).tolist()
        sizes = np.concatenate([e["len"] for e in indexes])[order].tolist()
        hs, tied = sorted_hashes.tolist(), ties.tolist()
        check = [drop_tombstones and run.tombstones != 0 for run in runs]
        streams = [self.fs.open_input_stream(self._path(run.run_id, "data")) for run in runs]
        self.bytes_read += sum(run.data_bytes for run in runs)
        reads = [_Chunks(s).read for s in streams]
        loads = pickle.loads
        try:
            i, n = 0, len(hs)
            while i < n:
                if not tied[i]:  # the only entry with this hash: the newest version of its key
                    blob = reads[run_of[i]](sizes[i])
                    if decode or check[run_of[i]]:
                        key, records = loads(blob)
                        if records or not drop_tombstones:
                            yield hs[i], encode_key(key) if decode else None, key, records, blob
                    else:
                        yield hs[i], None, None, None, blob
                    i += 1
                    continue
                j = i
                while tied[j]:
                    j += 1
                group: dict[bytes, tuple] = {}
                for k in range(i, j + 1):  # newest run first: the first version of a key wins
                    blob = reads[run_of[k]](sizes[k])
                    key, records = loads(blob)
                    group.setdefault(encode_key(key), (key, records, blob))
                for enc in sorted(group):
                    key, records, blob = group[enc]
                    if records or not drop_tombstones:
                        yield hs[i], enc, key, records, blob
                i = j + 1
        finally:
            for s in streams:
                s.close()

    def scan(self) -> Iterator[Entry]:
        """Every live entry of the partition, each key once with its newest records."""
        if not self.runs:
            return
        for _, enc, key, records, _ in self._merge(self.runs, drop_tombstones=True):
            yield enc, key, records

    def live(self) -> dict[bytes, tuple[Any, list[dict]]]:
        """Every live key of the partition: ``enc -> (key, records)``."""
        return {enc: (key, records) for enc, key, records in self.scan()}

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
            ((hash64(enc), enc, key, recs) for enc, key, recs in entries), key=_BY_HASH_ENC
        )
        for a, b in pairwise(items):
            if a[1] == b[1]:
                raise ValueError(f"key {a[2]!r} appears twice in one run")
        # enc is derived from the key, so the data file holds (key, records) only
        return self._write_sorted(
            run_id, ((h, pickle.dumps((key, recs), protocol=5)) for h, _, key, recs in items),
            tombstones=sum(1 for it in items if not it[3]),
        )

    def _write_sorted(self, run_id: str, items: Iterable[tuple[int, bytes]],
                      tombstones: int | None) -> RunInfo:
        """Write ``(hash, blob)`` entries already in ``(hash, enc)`` order; ``tombstones``
        bounds how many of them are tombstones (None: unknown)."""
        self.fs.create_dir(self.dir, recursive=True)
        hs, lens, chunk, size, pos = array("Q"), array("I"), [], 0, 0
        with self._atomic(self._path(run_id, "data")) as out:
            for h, blob in items:
                hs.append(h)
                lens.append(len(blob))
                chunk.append(blob)
                size += len(blob)
                if size >= _BUFFER:
                    out.write(b"".join(chunk))
                    pos, chunk, size = pos + size, [], 0
            if chunk:
                out.write(b"".join(chunk))
                pos += size
        n = len(hs)
        index = np.empty(n, _ENTRY)
        index["h"], index["len"] = hs, lens
        index["off"][:1] = 0
        np.cumsum(index["len"][:-1], dtype=np.uint64, out=index["off"][1:])
        bits = _bits_for(n)
        buckets = index["h"] >> np.uint64(64 - bits) if bits else np.zeros(n, np.uint64)
        directory = np.searchsorted(buckets, np.arange((1 << bits) + 1, dtype=np.uint64))
        with self._atomic(self._path(run_id, "index")) as out:
            out.write(_HEADER.pack(_MAGIC, _VERSION, bits, n))
            out.write(directory.astype("<u8").tobytes())
            out.write(index.tobytes())
        return RunInfo(run_id, n, pos, _HEADER.size + 8 * len(directory) + index.nbytes,
                       tombstones)

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
            items = ((t[0], t[4]) for t in self._merge(runs, True, decode=False))
            merged = self._write_sorted(f"{run_id}.c", items, tombstones=0)
            if merged.entries == 0:
                for kind in ("data", "index"):
                    self.fs.delete_file(self._path(merged.run_id, kind))
                return []
            return [merged]
        if len(runs) > max_runs:
            items = ((t[0], t[4]) for t in self._merge(runs[1:], False, decode=False))
            counts = [r.tombstones for r in runs[1:]]
            bound = None if None in counts else sum(c or 0 for c in counts)
            return [runs[0], self._write_sorted(f"{run_id}.m", items, tombstones=bound)]
        return runs

    def delete_unreferenced(self, keep: Iterable[RunInfo]) -> int:
        """Delete this partition's files (runs, stray temporaries) not belonging to ``keep``.
        Call it only when no writer of this partition is running. Returns files removed."""
        names = {f"{r.run_id}.{kind}" for r in keep for kind in ("data", "index")}
        return delete_unlisted(self.fs, self.dir, names)


def delete_unlisted(filesystem: pafs.FileSystem, directory: str, names: set[str]) -> int:
    """Delete the files of ``directory`` whose names are not in ``names``; how many."""
    infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    removed = 0
    for info in infos:
        if info.type == pafs.FileType.File and info.base_name not in names:
            filesystem.delete_file(info.path)
            removed += 1
    return removed


class _Chunks:
    """Sequential reads of a stream, served from large chunks (one call per entry to the
    stream itself costs more than the entry's bytes)."""

    def __init__(self, stream: Any, chunk: int = 4 * _BUFFER) -> None:
        self.stream, self.chunk = stream, chunk
        self.buf, self.pos = memoryview(b""), 0

    def read(self, n: int) -> memoryview:
        """The next ``n`` bytes (fewer only at the end of the stream)."""
        end = self.pos + n
        if end > len(self.buf):
            rest = bytes(self.buf[self.pos :])
            self.buf = memoryview(rest + self.stream.read(max(self.chunk, n - len(rest))))
            self.pos, end = 0, n
        out = self.buf[self.pos : end]
        self.pos = end
        return out


def read_all(root: str, partitions: Mapping[int, Sequence[RunInfo]]) -> Iterator[Entry]:
    """Every live entry of every partition (``partition -> runs``) under ``root``."""
    for p in sorted(partitions):
        yield from PartitionStore(root, p, partitions[p]).scan()
