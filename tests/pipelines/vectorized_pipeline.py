"""A vectorized URL count whose function lives in this file (so it is shipped to the
workers by value), for ``strata run`` on a cluster and over Spark Connect."""

import pandas as pd

from strata import Dataflow
from strata.model.vectorized import VectorResult
from strata.physical.vectorized import vectorized_stage


def count(state: pd.DataFrame, inputs: dict[str, pd.DataFrame]) -> VectorResult:
    seen = inputs["urls"].groupby("url", as_index=False).size().rename(columns={"size": "n"})
    rows = seen.merge(state, on="url", how="left")
    rows["count"] = rows["count"].fillna(0).astype("int64") + rows["n"]
    return VectorResult({"counts": rows[["url", "count"]]}, rows[["url", "count"]])


dataflow = Dataflow("vectorized_urls")
dataflow.source("urls", "url string")
vectorized_stage(dataflow, "count", count, key="url", inputs=["urls"],
                 outputs={"counts": "url string, count long"},
                 state="url string, count long")
