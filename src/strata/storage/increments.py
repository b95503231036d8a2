"""Increments: immutable Parquet files holding one flow's records of one epoch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from strata.model.schema import records_of
from strata.storage.fs import resolve


@dataclass(frozen=True)
class Increment:
    """An increment of a flow: its Parquet files, record count and size on disk."""

    files: tuple[str, ...] = ()
    records: int = 0
    bytes: int = 0

    def to_json(self) -> dict:
        return {"files": list(self.files), "records": self.records, "bytes": self.bytes}

    @classmethod
    def from_json(cls, d: dict) -> Increment:
        return cls(tuple(d["files"]), d["records"], d["bytes"])


def write_table(uri: str, table: pa.Table) -> int:
    """Write one Parquet file (atomically: temp name, then move); return its size."""
    fs, path = resolve(uri)
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/.tmp-{path.rsplit('/', 1)[1]}"
    pq.write_table(table, tmp, filesystem=fs, compression="zstd")
    fs.move(tmp, path)
    return fs.get_file_info(path).size


def iter_records(uri: str, batch_size: int = 65536) -> Iterator[dict]:
    """Stream a Parquet file's records as dicts."""
    for batch in iter_batches(uri, batch_size):
        yield from batch


def iter_batches(
    uri: str, batch_size: int = 65536, part: int = 0, parts: int = 1
) -> Iterator[list[dict]]:
    """Stream a Parquet file's records in lists of at most ``batch_size``.

    With ``parts > 1``, only slice ``part`` of ``parts``: rows ``[part * n // parts,
    (part + 1) * n // parts)`` of the file's ``n`` rows (row groups outside it are skipped),
    so that several tasks can share one large file.
    """
    fs, path = resolve(uri)
    with fs.open_input_file(path) as f:
        pf = pq.ParquetFile(f)
        if parts == 1:
            for batch in pf.iter_batches(batch_size=batch_size):
                yield records_of(batch)
            return
        meta = pf.metadata
        lo, hi = part * meta.num_rows // parts, (part + 1) * meta.num_rows // parts
        groups, pos, start = [], None, 0
        for g in range(meta.num_row_groups):
            rows = meta.row_group(g).num_rows
            if start < hi and start + rows > lo:
                groups.append(g)
                pos = start if pos is None else pos
            start += rows
        if not groups:
            return
        for batch in pf.iter_batches(batch_size=batch_size, row_groups=groups):
            a, b = max(lo - pos, 0), min(hi - pos, batch.num_rows)
            if b > a:
                yield records_of(batch.slice(a, b - a))
            pos += batch.num_rows


def read_table(files: Sequence[str], schema: pa.Schema, max_rows: int | None = None
               ) -> pa.Table | None:
    """The rows of Parquet ``files`` as one table of ``schema`` (its columns, cast to its
    types), read by this process; None if they have more than ``max_rows`` rows (known
    from the footers, before any data is read)."""
    opened = []
    for uri in files:
        fsys, path = resolve(uri)
        opened.append(pq.ParquetFile(path, filesystem=fsys))
    if max_rows is not None and sum(f.metadata.num_rows for f in opened) > max_rows:
        return None
    if not opened:
        return schema.empty_table()
    return pa.concat_tables([f.read(columns=schema.names).cast(schema) for f in opened])


def read_records(files: Sequence[str]) -> list[dict]:
    return [r for f in files for r in iter_records(f)]
