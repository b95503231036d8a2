"""Increments: immutable Parquet files holding one flow's records of one epoch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from strata.model.schema import records_of
from strata.storage.fs import join, list_dir, resolve, size_of
from strata.storage.table_cache import TableCache


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


def write_table(uri: str, table: pa.Table, cache: bool = False) -> int:
    """Write one Parquet file (atomically: temp name, then move); return its size. With
    ``cache``, ``table`` is kept in this process's :data:`FILE_CACHE` as the file's rows
    (as :func:`read_table` keeps the files it reads)."""
    fs, path = resolve(uri)
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/.tmp-{path.rsplit('/', 1)[1]}"
    pq.write_table(table, tmp, filesystem=fs, compression="zstd")
    fs.move(tmp, path)
    if cache:
        FILE_CACHE.put(uri, table)
    return fs.get_file_info(path).size


def iter_records(uri: str, batch_size: int = 65536) -> Iterator[dict]:
    """Stream a Parquet file's records as dicts."""
    for batch in iter_batches(uri, batch_size):
        yield from batch


def iter_batches(
    uri: str, batch_size: int = 65536, part: int = 0, parts: int = 1
) -> Iterator[list[dict]]:
    """Stream a Parquet file's records in lists of at most ``batch_size`` (slice ``part`` of
    ``parts``, as :func:`iter_arrow_batches`)."""
    for batch in iter_arrow_batches(uri, batch_size, part, parts):
        yield records_of(batch)


def iter_arrow_batches(
    uri: str, batch_size: int = 65536, part: int = 0, parts: int = 1
) -> Iterator[pa.RecordBatch]:
    """Stream a Parquet file's rows in Arrow batches of at most ``batch_size``.

    With ``parts > 1``, only slice ``part`` of ``parts``: rows ``[part * n // parts,
    (part + 1) * n // parts)`` of the file's ``n`` rows (row groups outside it are skipped),
    so that several tasks can share one large file.
    """
    fs, path = resolve(uri)
    with fs.open_input_file(path) as f:
        pf = pq.ParquetFile(f)
        if pf.metadata.num_row_groups == 0:  # no rows (Spark writes such files); pyarrow
            return  # 18 and 19 fail to iterate them (apache/arrow#45009, docs/testing.md)
        if parts == 1:
            yield from pf.iter_batches(batch_size=batch_size)
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
                yield batch.slice(a, b - a)
            pos += batch.num_rows


def read_table(files: Sequence[str], schema: pa.Schema, max_rows: int | None = None,
               cache: bool = False) -> pa.Table | None:
    """The rows of Parquet ``files`` as one table of ``schema`` (its columns, cast to its
    types), read by this process; None if they have more than ``max_rows`` rows (known
    from the footers, before any data is read). A column a file lacks is NULL in its rows,
    as Spark reads it. With ``cache``, files are kept in this process's
    :data:`FILE_CACHE` for the next read (state files, which never change)."""
    if max_rows is not None and sum(row_count(f) for f in files) > max_rows:
        return None
    if not files:
        return schema.empty_table()
    return pa.concat_tables([_conformed(_read_file(f, cache, schema.names), schema)
                             for f in files])


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns of ``schema``, cast to its types (NULLs where it has none)."""
    return pa.table([table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)


def row_count(uri: str) -> int:
    """How many rows Parquet file ``uri`` has (from the cache, else its footer)."""
    hit = FILE_CACHE.get(uri, touch=False)
    if hit is not None:
        return hit.num_rows
    fsys, path = resolve(uri)
    return pq.read_metadata(path, filesystem=fsys).num_rows


def written_increment(directory: str) -> Increment:
    """The increment of the Parquet files Spark wrote into ``directory`` (``part-*``):
    their rows from the footers and their bytes, with no Spark job."""
    files = [join(directory, f) for f in sorted(list_dir(directory)) if f.startswith("part-")]
    return Increment(tuple(files), sum(map(row_count, files)), sum(map(size_of, files)))


def _read_file(uri: str, cache: bool, names: Sequence[str]) -> pa.Table:
    """File ``uri``: from the cache, else read (all its columns if it is to be cached,
    else only ``names``)."""
    hit = FILE_CACHE.get(uri)
    if hit is not None:
        return hit
    fsys, path = resolve(uri)
    table = pq.read_table(path, filesystem=fsys, columns=None if cache else list(names))
    if cache:
        FILE_CACHE.put(uri, table)
    return table


# Immutable files read by the driver: a query's state files are written once under
# unique names and only ever deleted, so a cached copy is never stale.
FILE_CACHE = TableCache(512 << 20)


def read_records(files: Sequence[str]) -> list[dict]:
    return [r for f in files for r in iter_records(f)]
