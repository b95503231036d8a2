"""The driver's cache of immutable state files: reads give the files' rows (cast to the
schema asked for), cached files are not read again, and the cache stays within its budget,
dropping the least recently used file first."""

from __future__ import annotations

import pyarrow as pa
import pytest

from strata.storage import increments
from strata.storage.increments import read_table, row_count, write_table
from strata.storage.table_cache import TableCache


@pytest.fixture
def small_cache(monkeypatch):
    """The driver's cache, for the test: 30,000 bytes (two files of 12 KB, not three)."""
    cache = TableCache(30_000)
    monkeypatch.setattr(increments, "FILE_CACHE", cache)
    return cache


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
    assert list(small_cache) == files[:2]
    read_table(files[:1], schema, cache=True)  # files[0] is now the most recent
    read_table(files[2:], schema, cache=True)  # over budget: files[1] goes first
    assert list(small_cache) == [files[0], files[2]]
    assert 0 < small_cache.bytes <= small_cache.budget
    assert [row_count(f) for f in files] == [1000] * 3


def test_uncached_reads_and_row_limits(tmp_path, small_cache):
    files = _files(tmp_path, 2)
    schema = pa.schema([("k", pa.int64())])
    assert read_table(files, schema).num_rows == 2000 and not small_cache
    assert read_table(files, schema, max_rows=1999, cache=True) is None and not small_cache
    assert read_table([], schema).num_rows == 0
