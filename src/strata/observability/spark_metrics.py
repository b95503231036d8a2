"""Measuring data movement from Spark's own metrics.

Benchmarks and tests use this to read what Spark itself reports for the jobs one block of code
ran (shuffle bytes, input/output bytes, tasks, task time) instead of reasoning about it. The
jobs of a block are identified by a Spark job group.

The numbers come from the application's event log when the session writes one uncompressed
to the local file system (``strata.physical.session.get_spark(event_log_dir=...)``, which
the test suite and the benchmarks use): :mod:`strata.observability.event_log` reads its new
lines, so a measurement costs the same at any data size. Otherwise they come from the
monitoring REST API served by the driver UI (``{uiWebUrl}/api/v1/applications/{appId}/jobs``
and ``.../stages/{stageId}``), whose answers slow down as the driver gets busy and its job
history grows; each request may then take the rest of the measurement's time budget, which
grows with the measured block's own wall time.

Either source is fed asynchronously by the listener bus, so right after an action returns its
jobs or stages may not yet show as finished. :meth:`SparkMetrics.for_group` therefore first
asks the listener bus to drain (best effort, through py4j) and then polls until every job of
the group (at least those Spark's status tracker lists) has finished and all of its stages
are final, within a bounded wait.

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
from datetime import UTC, datetime
from typing import Any

from strata.observability.event_log import EventLog, StageAttempt

__all__ = ["JobMetrics", "SparkMetrics", "StageAttempt", "current_job_group"]

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

    @classmethod
    def total(cls, jobs: int, attempts: list[StageAttempt]) -> JobMetrics:
        """The totals of ``jobs`` jobs whose stages ran ``attempts``. We SUM OVER ALL
        ATTEMPTS of a stage, failed ones included: every attempt's tasks really ran and
        moved data (a retried stage re-reads and re-writes), so the totals are the data
        actually moved, not the data a failure-free run would have moved."""
        out = cls(jobs=jobs, stages=len({a.stage_id for a in attempts}))
        for a in attempts:
            for f in fields(out)[2:]:
                setattr(out, f.name, getattr(out, f.name) + getattr(a, f.name))
        return out


def current_job_group(sc: Any) -> str | None:
    """The job group set on the calling thread of SparkContext ``sc``, or None."""
    return sc.getLocalProperty(_GROUP_KEY)




class SparkMetrics:
    """Reads job metrics of a Spark application from its event log or its UI's REST API."""

    def __init__(
        self, spark: Any, *, timeout_s: float = 60.0, poll_interval_s: float = 0.05,
        event_log: bool = True,
    ) -> None:
        """``spark`` is a SparkSession (or a SparkContext) writing an event log (see the
        module doc) or with its UI enabled. A Spark Connect session gives an unavailable
        instance (``available`` False) that measures nothing.

        ``timeout_s`` bounds how long :meth:`for_group` waits for Spark to report the group's
        jobs as finished (:meth:`measure` waits at least as long as its block ran);
        ``poll_interval_s`` is the sleep between polls. ``event_log=False`` reads the REST
        API even when the session writes an event log. ``source`` says where the numbers
        come from: ``"event log"``, ``"REST API"`` or ``"none"`` (Spark Connect).
        """
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self.available = not type(spark).__module__.startswith("pyspark.sql.connect")
        self._log: EventLog | None = None
        self._base = self._no_log = ""
        self.source = "none"
        if not self.available:  # Spark Connect: nothing to read metrics from here
            self._context = None
            return
        self._context = getattr(spark, "sparkContext", spark)
        log = EventLog.of(self._context) if event_log else "event_log=False was asked for"
        if isinstance(log, EventLog):
            self._log, self.source = log, "event log"
            return
        self._no_log = log
        ui = self._context.uiWebUrl
        if not ui:
            raise RuntimeError(
                f"Spark metrics need the session's event log or its UI, and {log} and the UI "
                "is off: create the session with get_spark(event_log_dir=DIR) (see "
                "strata.physical.session) or spark.ui.enabled=true."
            )
        app_id = urllib.parse.quote(self._context.applicationId, safe="")
        self._base = f"{ui.rstrip('/')}/api/v1/applications/{app_id}"
        self.source = "REST API"

    @contextmanager
    def measure(self, label: str = "strata") -> Iterator[JobMetrics]:
        """Runs the block in a fresh job group; on exit fills the yielded JobMetrics (in place)
        with the totals of that group's jobs.

        The job group of the calling thread is restored afterwards. Jobs started by the block
        from other threads are only counted if they inherit the group (Spark SQL's broadcast
        jobs do). If the block raises, the metrics stay empty. Nesting is not supported.
        """
        sc = self._context
        if sc is None:  # Spark Connect: the block runs, its metrics stay empty
            yield JobMetrics()
            return
        saved = {k: sc.getLocalProperty(k) for k in (_GROUP_KEY, _DESCRIPTION_KEY, _INTERRUPT_KEY)}
        group_id = f"{label}-{uuid.uuid4().hex}"
        result = JobMetrics()
        sc.setJobGroup(group_id, label)
        t0 = time.monotonic()
        try:
            yield result
        finally:
            for key, value in saved.items():
                sc.setLocalProperty(key, value)  # None removes the property
        # a bigger block keeps the driver busier for longer: wait at least as long as it ran
        wait = max(self.timeout_s, time.monotonic() - t0)
        result._update(self.for_group(group_id, timeout_s=wait))

    def for_group(self, group_id: str, *, timeout_s: float | None = None) -> JobMetrics:
        """Totals over the jobs of job group ``group_id``, waiting until Spark reports them done.

        Raises TimeoutError if a job or stage of the group is still unfinished (or its stage
        data is missing) after ``timeout_s`` (default: the instance's).
        """
        if not self.available:
            return JobMetrics()
        return JobMetrics.total(*self._collect(group_id, timeout_s))

    def stage_attempts(self, group_id: str, *, timeout_s: float | None = None
                       ) -> list[StageAttempt]:
        """The attempts of the stages the jobs of group ``group_id`` ran (skipped stages
        have none), once final, as :meth:`for_group` waits for them."""
        if not self.available:
            return []
        return self._collect(group_id, timeout_s)[1]

    # -- internals ---------------------------------------------------------------------------

    def _collect(self, group_id: str, timeout_s: float | None
                 ) -> tuple[int, list[StageAttempt]]:
        wait = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait
        self._drain_listener_bus(wait)
        assert self._context is not None
        expected = self._context.statusTracker().getJobIdsForGroup(group_id)
        stage_cache: dict[int, list[dict[str, Any]]] = {}
        while True:
            if self._log is not None:
                got = self._log.collect(group_id, expected)
            else:
                got = self._try_rest(group_id, stage_cache, deadline)
            if not isinstance(got, str):
                return got
            if time.monotonic() >= deadline:
                raise TimeoutError(self._timeout_message(group_id, wait, got))
            time.sleep(self.poll_interval_s)

    def _timeout_message(self, group_id: str, wait: float, waiting: str) -> str:
        head = f"Spark metrics of job group {group_id!r} not complete after {wait:g} s: {waiting}"
        if self._log is not None:
            return f"{head} (the event log {self._log.location} stopped growing?)"
        return (f"{head}, from the Spark UI's REST API, which is used because {self._no_log}; "
                "stage data may also have been evicted (spark.ui.retainedStages / "
                "spark.ui.retainedJobs). At bulk sizes create the session with "
                "get_spark(event_log_dir=DIR) (strata.physical.session): SparkMetrics then "
                "reads the event log instead")

    def _try_rest(self, group_id: str, stage_cache: dict[int, list[dict[str, Any]]],
                  deadline: float) -> tuple[int, list[StageAttempt]] | str:
        """The group's job count and stage attempts if all are final, else what is pending."""
        try:
            jobs = [j for j in self._get("/jobs", deadline) if j.get("jobGroup") == group_id]
            running = [j["jobId"] for j in jobs if j.get("status") not in _JOB_DONE]
            if running:
                return f"jobs {running} not finished"
            # A stage may belong to several (concurrent) jobs of the group: count it once.
            stage_ids = sorted({sid for j in jobs for sid in j.get("stageIds", [])})
            for sid in stage_ids:
                if sid in stage_cache:
                    continue
                attempts = self._stage_attempts(sid, deadline)
                if attempts is None:
                    return f"stage {sid} not reported"
                if not all(_stage_final(a) for a in attempts):
                    return f"stage {sid} not final"
                stage_cache[sid] = attempts
        except (TimeoutError, urllib.error.URLError) as e:
            if isinstance(e, urllib.error.HTTPError):
                raise
            return f"the REST API did not answer ({e})"
        # Skipped stages (shuffle output reused from an earlier job) ran no tasks: not counted.
        return len(jobs), [_rest_attempt(sid, a) for sid in stage_ids
                           for a in stage_cache[sid] if a["status"] != "SKIPPED"]

    def _stage_attempts(self, stage_id: int, deadline: float) -> list[dict[str, Any]] | None:
        """All attempts of a stage (without task details), or None if not (or no longer) known."""
        try:
            attempts = self._get(f"/stages/{stage_id}?details=false", deadline)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        return attempts or None

    def _get(self, path: str, deadline: float) -> Any:
        """One REST call, which may take the rest of the measurement's time budget."""
        timeout = max(1.0, deadline - time.monotonic())
        with urllib.request.urlopen(self._base + path, timeout=timeout) as resp:
            return json.load(resp)

    def _drain_listener_bus(self, timeout_s: float) -> None:
        """Best effort: wait until the listener bus has delivered all events posted so far.

        Every event of a finished action is posted before the action returns, so after this
        the event log (or REST data) of the block's jobs is complete. ``LiveListenerBus.
        waitUntilEmpty`` is ``private[spark]`` (public in bytecode); if py4j cannot reach it,
        polling does the job.
        """
        # Internal API: on any failure (e.g. a timeout), polling in for_group is the fallback.
        if self._context is None:  # Spark Connect: no listener bus here
            return
        with suppress(Exception):
            self._context._jsc.sc().listenerBus().waitUntilEmpty(max(1, int(timeout_s * 1000)))


def _stage_final(attempt: dict[str, Any]) -> bool:
    """Whether a stage attempt is finished and its metrics are in the REST data."""
    if attempt.get("status") not in _STAGE_DONE:
        return False
    if attempt["status"] == "SKIPPED":
        return True
    # Task-end events can trail the stage-completed event; wait until none is in flight.
    return attempt.get("numActiveTasks", 0) == 0 and all(k in attempt for k in _STAGE_FIELDS)


def _rest_attempt(stage_id: int, a: dict[str, Any]) -> StageAttempt:
    """A stage attempt of the REST API as the event log's :class:`StageAttempt`."""
    return StageAttempt(
        stage_id, a.get("attemptId", 0), a["status"],
        _rest_ms(a.get("submissionTime")), _rest_ms(a.get("completionTime")),
        tasks=a["numCompleteTasks"] + a["numFailedTasks"] + a["numKilledTasks"],
        shuffle_write_bytes=a["shuffleWriteBytes"],
        shuffle_read_bytes=a["shuffleLocalBytesRead"] + a["shuffleRemoteBytesRead"],
        shuffle_write_records=a["shuffleWriteRecords"], input_bytes=a["inputBytes"],
        output_bytes=a["outputBytes"], executor_run_time_ms=a["executorRunTime"])


def _rest_ms(stamp: str | None) -> int:
    """Epoch milliseconds of a REST timestamp like ``2024-01-01T10:00:00.123GMT`` (0 if none)."""
    if not stamp:
        return 0
    when = datetime.strptime(stamp.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f")
    return round(when.replace(tzinfo=UTC).timestamp() * 1000)
