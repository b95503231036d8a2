"""The Spark application strata dumps its class-data-sharing archive from
(``strata.physical.class_archive``, run by ``spark-submit``): what a strata epoch's driver
loads — SQL planning, a shuffle, Parquet written and read, Arrow both ways and an Arrow
UDF. It imports nothing from strata: it runs as a script, from this directory."""

import os
import sys

import pyarrow as pa
from pyspark.sql import SparkSession


def main(work: str) -> None:
    spark = SparkSession.builder.appName("strata-class-archive").getOrCreate()
    out = os.path.join(work, "warm.parquet")
    (spark.range(10_000).selectExpr("id % 7 AS k", "id", "CAST(id AS STRING) AS s")
     .groupBy("k").agg({"id": "sum", "s": "max"}).write.mode("overwrite").parquet(out))
    frame = spark.read.parquet(out)
    frame.join(frame.select("k"), "k").toArrow()
    spark.createDataFrame(pa.table({"k": [1, 2], "v": ["a", "b"]})).mapInArrow(
        lambda batches: batches, "k long, v string").collect()
    frame.where("k > 2").selectExpr("k * 2 AS kk").distinct().collect()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
