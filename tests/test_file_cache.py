"""The driver's cache of immutable state files: reads give the files' rows (cast to the
schema asked for), cached files are not read again, and the cache stays within its budget,
dropping the least recently used file first."""

from __future__ import annotations

import pyarrow as pa
import pytest

from strata.storage import increments
from strata.storage.increments import FILE_CACHE, read_table, row_count, write_table


@pytest.fixture
def small_cache(monkeypatch):
    monkeypatch.setattr(increments, "FILE_CACHE_BYTES", 30_000)  # two files of 12 KB, not 3
    monkeypatch.setattr(increments, "_cached_bytes", 0)
    saved = dict(FILE_CACHE)
    FILE_CACHE.clear()
    yield
    FILE_CACHE.clear()
    FILE_CACHE.update(saved)


def _files(tmp_path, n: int) -> list[str]:
    out = []
    for i in range(n):
        uri = str(tmp_path / f"f{i}.parquet")
        write_table(uri, pa.table({"k": pa.array(range(i * 1000, (i + 1) * 1000), pa.int64()),
                                   "v": pa.array([i] * 1000, pa.int32())}))
        out.append(uri)
    return out


def test_cached_reads_give_the_files_rows_within_the_budget(tmp_path, small_cache):
    files = _files(tmp_path, 3)
    schema = pa.schema([("v", pa.int64()), ("k", pa.int64())])  # reordered, v widened
    first = read_table(files[:2], schema, cache=True)
    assert first.schema == schema and first.num_rows == 2000
    assert first.column("v").to_pylist() == [0] * 1000 + [1] * 1000
    assert list(FILE_CACHE) == files[:2]
    read_table(files[:1], schema, cache=True)  # files[0] is now the most recent
    read_table(files[2:], schema, cache=True)  # over budget: files[1] goes first
    assert list(FILE_CACHE) == [files[0], files[2]]
    assert increments._cached_bytes <= increments.FILE_CACHE_BYTES
    assert [row_count(f) for f in files] == [1000] * 3


def test_uncached_reads_and_row_limits(tmp_path, small_cache):
    files = _files(tmp_path, 2)
    schema = pa.schema([("k", pa.int64())])
    assert read_table(files, schema).num_rows == 2000 and not FILE_CACHE
    assert read_table(files, schema, max_rows=1999, cache=True) is None and not FILE_CACHE
    assert read_table([], schema).num_rows == 0
