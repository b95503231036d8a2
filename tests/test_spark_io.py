"""The epoch I/O the runner records for programs that learn from it
(``strata.physical.spark_io``), against Spark's REST metrics and Parquet footers."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from strata.observability.spark_metrics import SparkMetrics
from strata.physical.spark_io import io_since, newest_job


def test_io_since_counts_what_spark_reports_and_the_columns_a_scan_reads(spark, tmp_path):
    n = 60_000
    pq.write_table(pa.table({"k": [i % 500 for i in range(n)], "v": list(range(n)),
                             "s": [f"row {i}" for i in range(n)]}), tmp_path / "in.parquet")
    meta = pq.read_metadata(tmp_path / "in.parquet").row_group(0)
    chunks = {meta.column(i).path_in_schema: meta.column(i).total_compressed_size
              for i in range(meta.num_columns)}
    first = newest_job(spark)
    with SparkMetrics(spark).measure("io") as m:
        (spark.read.parquet(str(tmp_path / "in.parquet")).groupBy("k").sum("v")
         .write.parquet(str(tmp_path / "out")))
    io = io_since(spark, first)
    assert io == {"read": m.input_bytes, "shuffled": m.shuffle_write_bytes,
                  "written": m.output_bytes}
    # the pruned scan read the chunks of k and v (and the footer), not s's
    assert chunks["k"] + chunks["v"] <= io["read"] < chunks["k"] + chunks["v"] + chunks["s"]
    assert io["shuffled"] > 0
    written = sum(p.stat().st_size for p in (tmp_path / "out").glob("part-*"))
    assert io["written"] == written
    assert io_since(spark, newest_job(spark)) == {"read": 0, "shuffled": 0, "written": 0}


def test_a_status_store_that_cannot_be_read_measures_nothing(spark, monkeypatch):
    """A measurement never fails an epoch: a store whose reads fail gives None."""
    from strata.physical import spark_io

    class Broken:
        def jobsList(self, _):  # the JVM method's name
            raise RuntimeError("py4j: the store went away")

    monkeypatch.setattr(spark_io, "_store", lambda _spark: Broken())
    assert newest_job(spark) is None
    assert io_since(spark, 3) is None
