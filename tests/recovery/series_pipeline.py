"""Query series on one stream, for crash tests of the series stage: five segments, three
series (a daily grouping, a sum over the last three segments, today joined with
yesterday), so that epochs write views into a jumbo pass, read stored ones and collect
those no series reads again."""

from __future__ import annotations

import random

from strata import Dataflow
from strata.series import Series, add_series
from tests.series.clicklog import DDL, segment

SERIES = [
    Series("daily", "SELECT A, count(*) AS n FROM log GROUP BY A", {}),
    Series("last3", "SELECT A, B, sum(E) AS s FROM log WHERE D < 4 GROUP BY A, B",
           {"log": "log[-2:0]"}),
    Series("pairs", "SELECT t.D AS D, t.n AS today, y.n AS yesterday FROM "
           "(SELECT D, count(*) AS n FROM t GROUP BY D) t JOIN "
           "(SELECT D, count(*) AS n FROM y GROUP BY D) y ON t.D = y.D",
           {"t": "log", "y": "log[-1]"}),
]
SEGMENTS = 5


def build_dataflow() -> Dataflow:
    df = Dataflow("seriescrash")
    df.source("log", DDL)
    add_series(df, "log", SERIES, shared_scan=True)
    return df


def segments() -> list:
    rng = random.Random(17)
    return [segment(rng, 30) for _ in range(SEGMENTS)]


def batches() -> list[tuple[str, list[dict], bool]]:
    return [("log", seg.to_pylist(), False) for seg in segments()]
