"""The vectorized URL count with groups that leave the state (tombstones) and outer
grouping beside it, for crash tests: six increments over a small key space."""

from __future__ import annotations

import random

import pandas as pd

from strata import Dataflow
from strata.model.vectorized import VectorResult
from strata.physical.vectorized import vectorized_stage

EPOCHS = 6
# epochs as Spark tasks: a small epoch in the driver ends before the "during-job" kill
SPARK_CONF = {"spark.strata.driverEpoch.maxRows": "-1"}


def net(state: pd.DataFrame, inputs: dict[str, pd.DataFrame]) -> VectorResult:
    """Per key, the sum of ``v``; a key whose sum is 0 leaves the state."""
    got = inputs["moves"].groupby("k", as_index=False)["v"].sum()
    rows = got.merge(state, on="k", how="left")
    rows["total"] = rows["total"].fillna(0).astype("int64") + rows["v"]
    return VectorResult({"totals": rows[["k", "total"]]},
                        rows.loc[rows["total"] != 0, ["k", "total"]])


def decay(state: pd.DataFrame, inputs: dict[str, pd.DataFrame]) -> VectorResult:
    """Outer grouping: every stored total halves each epoch, the moves add."""
    got = inputs["moves"].groupby("k", as_index=False)["v"].sum()
    rows = state.merge(got, on="k", how="outer")
    rows["total"] = (rows["total"].fillna(0).astype("int64") // 2
                     + rows["v"].fillna(0).astype("int64"))
    kept = rows.loc[rows["total"] != 0, ["k", "total"]]
    return VectorResult({"decayed": kept}, kept)


def build_dataflow() -> Dataflow:
    df = Dataflow("vectorizedcrash")
    df.source("moves", "k long, v long")
    vectorized_stage(df, "net", net, key="k", inputs=["moves"],
                     outputs={"totals": "k long, total long"}, state="k long, total long")
    vectorized_stage(df, "decay", decay, key="k", inputs=["moves"],
                     outputs={"decayed": "k long, total long"}, state="k long, total long",
                     grouping="outer")
    return df


def batches() -> list[tuple[str, list[dict], bool]]:
    rng = random.Random(7)
    return [("moves", [{"k": rng.randrange(60), "v": rng.choice([-2, -1, 1, 2])}
                       for _ in range(150)], False) for _ in range(EPOCHS)]
