"""URL counting whose translate is slow and tells the test where it runs.

Each call sleeps ``$STRATA_SLOW_SECONDS`` and, when ``$STRATA_SLOW_DIR`` is set, leaves a
file named after its Python worker's pid there: the fault tests wait for one, so they
kill a process while an epoch's translate is running on it. The executors get both
variables from ``spark.executorEnv.*``.
"""

import os
import time
from pathlib import Path

from strata.model import Dataflow, Input, State

SCHEMA = "url string, count long"


def slow_count(url, state, urls, *, out):
    marks = os.environ.get("STRATA_SLOW_DIR")
    if marks:
        Path(marks, str(os.getpid())).touch()
    time.sleep(float(os.environ.get("STRATA_SLOW_SECONDS", "0")))
    prev = next(state, None)
    record = {"url": url, "count": sum(1 for _ in urls) + (prev["count"] if prev else 0)}
    out.state(record)
    out.write("counts", record)


dataflow = Dataflow("slowcount")
urls = dataflow.source("urls", "url string")
dataflow.stage(
    "count",
    slow_count,
    inputs=[Input(urls, route_by="url")],
    outputs={"counts": SCHEMA},
    state=State(SCHEMA, route_by="url"),
)
