"""A windowed query over a web log from three servers, for crash tests of the window
stage: five increments with late and held-back records, so that epochs emit windows,
refine emitted ones, retire panes and drop cell files."""

from __future__ import annotations

import random

from strata import Dataflow
from strata.windows import Eviction, add_window, from_sql
from tests.windows.weblog import DDL, SQL, increments

QUERY = from_sql("w", SQL.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 6, 2, host)"),
                 eviction=Eviction(deadline=0, lateness=6))
EPOCHS = 5


def build_dataflow() -> Dataflow:
    df = Dataflow("windowcrash")
    df.source("log", DDL)
    add_window(df, QUERY)
    return df


def records() -> list[list[dict]]:
    return increments(random.Random(23), 3, epochs=EPOCHS, span=6, late=0.5, silent=0.3)


def batches() -> list[tuple[str, list[dict], bool]]:
    return [("log", batch, False) for batch in records()]
