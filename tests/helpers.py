"""Small helpers shared by tests: increments from records, fresh homes."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from strata.config import ARROW, DRIVER_EPOCH_ROWS, EXCHANGE, TRANSLATE_ROUTE
from strata.model.dataflow import Flow
from strata.model.schema import to_table
from strata.storage.increments import Increment, write_table

_seq = itertools.count()


def increment(home: str | Path, flow: Flow, records: list[dict]) -> Increment:
    """Write ``records`` as one Parquet increment of ``flow`` under ``home/inbox``."""
    uri = f"{home}/inbox/{flow.name}-{next(_seq)}.parquet"
    return Increment((uri,), len(records), write_table(uri, to_table(records, flow.schema)))


@contextmanager
def epochs_in(spark, where: str) -> Iterator[None]:
    """Small epochs (vectorized, query and translate stages) run ``"tasks"`` (always as
    Spark tasks) or ``"driver"`` (in the driver, up to the program's own limits), by the
    session conf that picks; ``"driver-spark"`` runs
    them in the driver with the driver's Arrow evaluation off (Spark reads the increment);
    ``"tasks-rows"`` as Spark tasks with a vectorized epoch's records shuffled as Spark
    rows (``"tasks"``: as packed Arrow buffers, however few); ``"arrow"`` as Spark tasks
    with a translate epoch on the Arrow route (DataFrames; ``"tasks"``: the session's
    route, RDDs on a classic session)."""
    with session_confs(spark, {DRIVER_EPOCH_ROWS.name: str(1 << 40)
                               if where.startswith("driver") else "-1",
                               ARROW.name: "false" if where == "driver-spark" else "true",
                               EXCHANGE.name: "rows" if where == "tasks-rows" else "arrow",
                               TRANSLATE_ROUTE.name: "arrow" if where == "arrow" else "auto"}):
        yield


@contextmanager
def session_confs(spark, values: dict[str, str]) -> Iterator[None]:
    """Session confs ``values`` set for the block, then set back (or unset) as before."""
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


@contextmanager
def counting_jobs(spark) -> Iterator[list[int]]:
    """Count the Spark jobs the block runs: it runs in a job group of its own (threads
    that inherit the caller's local properties, as strata's writes do, run in it too);
    the list yielded holds the count once the block is done. A count of all the jobs
    Spark's status tracker lists would not do: it keeps only the newest
    (``spark.ui.retainedJobs``), so in a long session that count stops growing."""
    sc = spark.sparkContext
    group = f"strata-test-{uuid.uuid4().hex}"
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
    previous = {k: sc.getLocalProperty(k) for k in keys}
    sc.setJobGroup(group, "counted by a test")
    count: list[int] = []
    try:
        yield count
    finally:
        for k, v in previous.items():  # as they were (None removes a property)
            sc.setLocalProperty(k, v)  # type: ignore[arg-type]
    count.append(len(sc.statusTracker().getJobIdsForGroup(group)))


def epoch_jobs(spark, controller, batches: dict[str, list[dict]],
               seen: dict[str, list[dict]]) -> int:
    """Ingest ``batches`` (flow → records, also added to ``seen``) and run one epoch:
    how many Spark jobs it ran (:func:`counting_jobs`)."""
    for flow, rows in batches.items():
        controller.ingest(flow, rows)
        seen[flow] += rows
    with counting_jobs(spark) as count:
        controller.run()
    return count[0]
