"""Measuring data movement from Spark's own metrics.

Benchmarks and tests use this to read what Spark itself reports for the jobs one block of code
ran (shuffle bytes, input/output bytes, tasks, task time) instead of reasoning about it. The
numbers come from the monitoring REST API served by the driver UI
(``{uiWebUrl}/api/v1/applications/{appId}/jobs`` and ``.../stages/{stageId}``), and the jobs of
a block are identified by a Spark job group.

The REST data is fed asynchronously by the listener bus, so right after an action returns its
job or stages may not yet show as finished. :meth:`SparkMetrics.for_group` therefore first asks
the listener bus to drain (best effort, through py4j) and then polls until every job of the
group has finished and all of its stages are final, within a bounded wait.

Over Spark Connect the client has no SparkContext, job groups, UI URL or listener bus:
:class:`SparkMetrics` of a Connect session is *unavailable* (``available`` is False) and
measures nothing, without an error: :meth:`SparkMetrics.measure` leaves its metrics at
zero and :meth:`SparkMetrics.for_group` returns zeros. (The Connect server's own UI
still shows the jobs, tagged ``strata:STAGE:epoch-N``.)
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, fields
from typing import Any

# Local properties behind ``SparkContext.setJobGroup``.
_GROUP_KEY = "spark.jobGroup.id"
_DESCRIPTION_KEY = "spark.job.description"
_INTERRUPT_KEY = "spark.job.interruptOnCancel"

_JOB_DONE = frozenset({"SUCCEEDED", "FAILED"})
_STAGE_DONE = frozenset({"COMPLETE", "FAILED", "SKIPPED"})
# Stage fields read below; a stage counts as having metrics when all of them are present.
_STAGE_FIELDS = (
    "numCompleteTasks",
    "numFailedTasks",
    "numKilledTasks",
    "shuffleWriteBytes",
    "shuffleWriteRecords",
    "shuffleLocalBytesRead",
    "shuffleRemoteBytesRead",
    "inputBytes",
    "outputBytes",
    "executorRunTime",
)


@dataclass
class JobMetrics:
    """Totals of Spark task metrics over a set of jobs (skipped stages excluded)."""

    jobs: int = 0
    stages: int = 0
    tasks: int = 0
    shuffle_write_bytes: int = 0
    shuffle_read_bytes: int = 0  # local + remote
    shuffle_write_records: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    executor_run_time_ms: int = 0

    def to_json(self) -> dict[str, int]:
        """The metrics as a plain JSON-serialisable dict."""
        return asdict(self)

    def __add__(self, other: JobMetrics) -> JobMetrics:
        if not isinstance(other, JobMetrics):
            return NotImplemented
        return JobMetrics(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def _update(self, other: JobMetrics) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(other, f.name))


def current_job_group(sc: Any) -> str | None:
    """The job group set on the calling thread of SparkContext ``sc``, or None."""
    return sc.getLocalProperty(_GROUP_KEY)


class SparkMetrics:
    """Reads job metrics of a Spark application from its driver UI's REST API."""

    def __init__(
        self, spark: Any, *, timeout_s: float = 10.0, poll_interval_s: float = 0.05
    ) -> None:
        """``spark`` is a SparkSession (or a SparkContext); the UI must be enabled. A
        Spark Connect session gives an unavailable instance (``available`` False) that
        measures nothing.

        ``timeout_s`` bounds how long :meth:`for_group` waits for the listener bus to report
        the group's jobs as finished; ``poll_interval_s`` is the sleep between polls.
        """
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self.available = not type(spark).__module__.startswith("pyspark.sql.connect")
        if not self.available:  # Spark Connect: nothing to read metrics from here
            self._sc, self._base = None, ""
            return
        self._sc = getattr(spark, "sparkContext", spark)
        ui = self._sc.uiWebUrl
        if not ui:
            raise RuntimeError(
                "Spark metrics need the Spark UI, whose REST API serves them: "
                "create the session with spark.ui.enabled=true (see strata.physical.session)."
            )
        app_id = urllib.parse.quote(self._sc.applicationId, safe="")
        self._base = f"{ui.rstrip('/')}/api/v1/applications/{app_id}"

    @contextmanager
    def measure(self, label: str = "strata") -> Iterator[JobMetrics]:
        """Runs the block in a fresh job group; on exit fills the yielded JobMetrics (in place)
        with the totals of that group's jobs.

        The job group of the calling thread is restored afterwards. Jobs started by the block
        from other threads are only counted if they inherit the group (Spark SQL's broadcast
        jobs do). If the block raises, the metrics stay empty. Nesting is not supported.
        """
        sc = self._sc
        if sc is None:  # Spark Connect: the block runs, its metrics stay empty
            yield JobMetrics()
            return
        saved = {k: sc.getLocalProperty(k) for k in (_GROUP_KEY, _DESCRIPTION_KEY, _INTERRUPT_KEY)}
        group_id = f"{label}-{uuid.uuid4().hex}"
        result = JobMetrics()
        sc.setJobGroup(group_id, label)
        try:
            yield result
        finally:
            for key, value in saved.items():
                sc.setLocalProperty(key, value)  # None removes the property
        result._update(self.for_group(group_id))

    def for_group(self, group_id: str) -> JobMetrics:
        """Totals over the jobs of job group ``group_id``, waiting until Spark reports them done.

        Raises TimeoutError if a job or stage of the group is still unfinished (or its stage
        data is missing) after ``timeout_s``.
        """
        if not self.available:
            return JobMetrics()
        deadline = time.monotonic() + self.timeout_s
        self._drain_listener_bus(self.timeout_s)
        stage_cache: dict[int, list[dict[str, Any]]] = {}
        while True:
            waiting = self._try_collect(group_id, stage_cache)
            if isinstance(waiting, JobMetrics):
                return waiting
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"Spark metrics of job group {group_id!r} not complete after "
                    f"{self.timeout_s:g} s: {waiting} (stage data may also have been evicted, "
                    "see spark.ui.retainedStages / spark.ui.retainedJobs)"
                )
            time.sleep(self.poll_interval_s)

    # -- internals ---------------------------------------------------------------------------

    def _try_collect(
        self, group_id: str, stage_cache: dict[int, list[dict[str, Any]]]
    ) -> JobMetrics | str:
        """The group's totals if all its jobs and stages are final, else what is pending."""
        jobs = [j for j in self._get("/jobs") if j.get("jobGroup") == group_id]
        running = [j["jobId"] for j in jobs if j.get("status") not in _JOB_DONE]
        if running:
            return f"jobs {running} not finished"
        # A stage may belong to several (concurrent) jobs of the group: count it once.
        stage_ids = sorted({sid for j in jobs for sid in j.get("stageIds", [])})
        for sid in stage_ids:
            if sid in stage_cache:
                continue
            attempts = self._stage_attempts(sid)
            if attempts is None:
                return f"stage {sid} not reported"
            if not all(_stage_final(a) for a in attempts):
                return f"stage {sid} not final"
            stage_cache[sid] = attempts

        total = JobMetrics(jobs=len(jobs))
        for sid in stage_ids:
            # Skipped stages (shuffle output reused from an earlier job) ran no tasks and are
            # not counted. We SUM OVER ALL non-skipped ATTEMPTS of a stage, failed ones
            # included: every attempt's tasks really ran and moved data (a retried stage
            # re-reads and re-writes), so the totals are the data actually moved, not the
            # data a failure-free run would have moved.
            ran = [a for a in stage_cache[sid] if a["status"] != "SKIPPED"]
            if not ran:
                continue
            total.stages += 1
            for a in ran:
                total.tasks += a["numCompleteTasks"] + a["numFailedTasks"] + a["numKilledTasks"]
                total.shuffle_write_bytes += a["shuffleWriteBytes"]
                total.shuffle_read_bytes += a["shuffleLocalBytesRead"] + a["shuffleRemoteBytesRead"]
                total.shuffle_write_records += a["shuffleWriteRecords"]
                total.input_bytes += a["inputBytes"]
                total.output_bytes += a["outputBytes"]
                total.executor_run_time_ms += a["executorRunTime"]
        return total

    def _stage_attempts(self, stage_id: int) -> list[dict[str, Any]] | None:
        """All attempts of a stage (without task details), or None if not (or no longer) known."""
        try:
            attempts = self._get(f"/stages/{stage_id}?details=false")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        return attempts or None

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self._base + path, timeout=10) as resp:
            return json.load(resp)

    def _drain_listener_bus(self, timeout_s: float) -> None:
        """Best effort: wait until the listener bus has delivered all events posted so far.

        Every event of a finished action is posted before the action returns, so after this
        the REST data of the block's jobs is complete. ``LiveListenerBus.waitUntilEmpty`` is
        ``private[spark]`` (public in bytecode); if py4j cannot reach it, polling does the job.
        """
        # Internal API: on any failure (e.g. a timeout), polling in for_group is the fallback.
        with suppress(Exception):
            self._sc._jsc.sc().listenerBus().waitUntilEmpty(max(1, int(timeout_s * 1000)))


def _stage_final(attempt: dict[str, Any]) -> bool:
    """Whether a stage attempt is finished and its metrics are in the REST data."""
    if attempt.get("status") not in _STAGE_DONE:
        return False
    if attempt["status"] == "SKIPPED":
        return True
    # Task-end events can trail the stage-completed event; wait until none is in flight.
    return attempt.get("numActiveTasks", 0) == 0 and all(k in attempt for k in _STAGE_FIELDS)
