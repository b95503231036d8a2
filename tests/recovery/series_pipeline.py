"""Query series on one stream, for crash tests of the series stage: five segments, three
series (a daily grouping, a sum over the last three segments, today joined with
yesterday), so that epochs write views into a jumbo pass, read stored ones and collect
those no series reads again; then a correction of segments 4 and 5, which re-emits the
occurrences that read them."""

from __future__ import annotations

import random

from strata import Dataflow
from strata.series import Series, add_series
from tests.series.clicklog import DDL, segment

SERIES = [
    Series("daily", "SELECT A, count(*) AS n FROM log GROUP BY A", {}),
    Series("last3", "SELECT A, B, sum(E) AS s FROM log WHERE D < 4 GROUP BY A, B",
           {"log": "log[-2:0]"}, lateness=2),
    Series("pairs", "SELECT t.D AS D, t.n AS today, y.n AS yesterday FROM "
           "(SELECT D, count(*) AS n FROM t GROUP BY D) t JOIN "
           "(SELECT D, count(*) AS n FROM y GROUP BY D) y ON t.D = y.D",
           {"t": "log", "y": "log[-1]"}, lateness=2),
]
SEGMENTS = 5
CORRECTED = (4, 5)


def build_dataflow() -> Dataflow:
    df = Dataflow("seriescrash")
    df.source("log", DDL)
    add_series(df, "log", SERIES, shared_scan=True)
    return df


def segments() -> list:
    rng = random.Random(17)
    return [segment(rng, 30) for _ in range(SEGMENTS)]


def corrected() -> list:
    """The segments after the correction."""
    rng = random.Random(18)
    return [segment(rng, 12) if j in CORRECTED else s
            for j, s in enumerate(segments(), 1)]


def batches() -> list[tuple[str, list[dict], bool]]:
    fixes = [{**r, "_segment": j} for j in CORRECTED for r in corrected()[j - 1].to_pylist()]
    return [*(("log", seg.to_pylist(), False) for seg in segments()),
            ("log_corrections", fixes, False)]
