"""Reading an increment's Parquet files in batches (strata.storage.increments)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata.storage.increments import iter_arrow_batches, iter_records


@pytest.mark.parametrize("parts", [1, 3])
def test_a_file_of_no_row_groups_has_no_batches(tmp_path, parts):
    """Spark writes an empty partition as a file with a schema and no row group; pyarrow
    18 and 19 raise an OSError iterating one (docs/testing.md, "The oldest versions")."""
    path = str(tmp_path / "empty.parquet")
    pq.ParquetWriter(path, pa.schema([("x", pa.int64())])).close()
    assert pq.ParquetFile(path).metadata.num_row_groups == 0
    assert [list(iter_arrow_batches(path, part=p, parts=parts)) for p in range(parts)] == \
        [[]] * parts
    assert list(iter_records(path)) == []


def test_parts_of_a_file_cover_its_rows_once(tmp_path):
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=3)
    got = [r["x"] for p in range(3) for b in iter_arrow_batches(path, 2, p, 3)
           for r in b.to_pylist()]
    assert sorted(got) == list(range(10))
