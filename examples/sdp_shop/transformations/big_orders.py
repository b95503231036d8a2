from pyspark import pipelines as dp
from pyspark.sql import functions as F


@dp.materialized_view
def big_orders():
    """Orders over 100 per day, written with the DataFrame API."""
    return (spark.read.parquet("data/orders")  # noqa: F821 (SDP passes `spark`)
            .where("amount > 100")
            .groupBy("day")
            .agg(F.count("*").alias("n"), F.sum("amount").alias("total")))
