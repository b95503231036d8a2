"""Reading job and stage metrics from a Spark application's event log, as it is written.

With ``spark.eventLog.enabled=true`` the driver writes every listener event as one JSON line
to a local file (``{spark.eventLog.dir}/{appId}.inprogress``, or ``events_N_{appId}`` files
in ``eventlog_v2_{appId}/`` when the log rolls). :class:`EventLog` reads the lines appended
since its last read (keeping a byte offset, so each line is read once however long the
application runs) and keeps, per job, its group and stages, and per stage attempt, the totals
of its tasks' metrics (``SparkListenerTaskEnd`` ``Task Metrics``). Only the events below are
parsed; the others (SQL plans, executor metrics, ...) are skipped by their event name.

The event log is written asynchronously (its own listener-bus queue) and flushed at every
job and stage end, so a group's data is complete once each of its jobs has its
``SparkListenerJobEnd`` and each of their submitted stage attempts its
``SparkListenerStageCompleted`` and as many task ends as task starts.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PREFIX = b'{"Event":"'
_EVENTS = frozenset({
    b"SparkListenerJobStart", b"SparkListenerJobEnd", b"SparkListenerStageSubmitted",
    b"SparkListenerStageCompleted", b"SparkListenerTaskStart", b"SparkListenerTaskEnd",
})
_GROUP_KEY = "spark.jobGroup.id"
_CODECS = (".lz4", ".lzf", ".snappy", ".zstd")  # spark.io.compression.codec short names
_ROLLING_FILE = re.compile(r"events_(\d+)_(.+)")


@dataclass
class StageAttempt:
    """One attempt of a stage that ran (skipped stages have none), with its tasks' totals."""

    stage_id: int
    attempt_id: int
    status: str = "ACTIVE"  # COMPLETE or FAILED when done
    submission_ms: int = 0
    completion_ms: int = 0
    tasks: int = 0  # ended tasks: succeeded, failed and killed
    shuffle_write_bytes: int = 0
    shuffle_read_bytes: int = 0  # local + remote
    shuffle_write_records: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    executor_run_time_ms: int = 0

    @property
    def seconds(self) -> float:
        """Wall seconds from submission to completion."""
        return max(0, self.completion_ms - self.submission_ms) / 1000


@dataclass
class _Job:
    group: str | None
    stage_ids: list[int]
    ended: bool = False


@dataclass
class _Attempt:
    run: StageAttempt
    completed: bool = False
    running_tasks: int = 0


@dataclass
class _File:
    path: Path
    offset: int = 0


@dataclass
class EventLog:
    """The event log of one running application, read incrementally (see the module doc)."""

    location: Path  # the log file, or the directory of a rolling log
    app: str  # the sanitised application id in the file names
    _files: dict[int, _File] = field(default_factory=dict)
    _jobs: dict[int, _Job] = field(default_factory=dict)
    _groups: dict[str, list[int]] = field(default_factory=dict)
    _attempts: dict[tuple[int, int], _Attempt] = field(default_factory=dict)
    _stage_attempts: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def of(cls, sc: Any) -> EventLog | str:
        """The event log of SparkContext ``sc``, or why it cannot be read (not enabled, not
        on the local file system, compressed)."""
        conf = sc.getConf()
        if conf.get("spark.eventLog.enabled", "false").lower() != "true":
            return "the session's event log is off (spark.eventLog.enabled)"
        where = conf.get("spark.eventLog.dir", "file:/tmp/spark-events")
        url = urllib.parse.urlparse(where)
        if url.scheme not in ("", "file"):
            return f"the event log is not on the local file system ({where})"
        base = Path(urllib.parse.unquote(url.path) if url.scheme else where)
        # EventLogFileWriter.nameForAppAndAttempt: the application id, sanitised
        app = re.sub(r"[.${}'\"]", "_", re.sub(r"[ :/]", "-", sc.applicationId)).lower()
        found = sorted(base.glob(f"{app}*")) + sorted(base.glob(f"eventlog_v2_{app}*"))
        if not found:
            return f"no event log of application {sc.applicationId} in {base}"
        location = found[0]
        names = [p.name for p in location.iterdir()] if location.is_dir() else [location.name]
        if any(n.removesuffix(".inprogress").endswith(_CODECS) for n in names):
            return (f"the event log {location} is compressed (create the session with "
                    "spark.eventLog.compress=false)")
        with _LOCK:  # one reader per log: a new SparkMetrics does not re-read the log
            return _READERS.setdefault(location, cls(location, app))

    def collect(self, group_id: str, expected_jobs: Iterable[int] = ()
                ) -> tuple[int, list[StageAttempt]] | str:
        """Reads the new lines, then returns the number of jobs of group ``group_id`` and the
        attempts of their stages that ran, or what is still missing (a string) if a job of
        the group, one of ``expected_jobs`` included, or a stage attempt is unfinished."""
        with _LOCK:
            return self._collect(group_id, expected_jobs)

    def _collect(self, group_id: str, expected_jobs: Iterable[int]
                 ) -> tuple[int, list[StageAttempt]] | str:
        self._read()
        jobs = self._groups.get(group_id, [])
        missing = sorted(set(expected_jobs) - set(jobs))
        if missing:
            return f"jobs {missing} not yet in the event log {self.location}"
        running = [j for j in jobs if not self._jobs[j].ended]
        if running:
            return f"jobs {running} not finished"
        out = []
        for sid in sorted({s for j in jobs for s in self._jobs[j].stage_ids}):
            for key in self._stage_attempts.get(sid, []):
                a = self._attempts[key]
                if not a.completed or a.running_tasks > 0:
                    return f"stage {sid} (attempt {key[1]}) not final"
                out.append(a.run)
        return len(jobs), out

    # -- reading -----------------------------------------------------------------------------

    def _read(self) -> None:
        for f in self._current_files():
            with open(f.path, "rb") as stream:
                stream.seek(f.offset)
                data = stream.read()
            end = data.rfind(b"\n") + 1  # a partly written last line waits for the next read
            f.offset += end
            for line in data[:end].splitlines():
                if line.startswith(_PREFIX):
                    name = line[len(_PREFIX):line.find(b'"', len(_PREFIX))]
                    if name in _EVENTS:
                        self._apply(name.decode(), json.loads(line))

    def _current_files(self) -> list[_File]:
        """The files to read from, in order: the one file, or the rolling files not yet
        finished (all but the newest are complete once a newer one exists)."""
        if not self.location.is_dir():
            if not self.location.exists():  # the application ended: .inprogress renamed
                done = self.location.with_name(self.location.name.removesuffix(".inprogress"))
                self.location = done if done.exists() else self.location
            return [self._files.setdefault(0, _File(self.location))]
        for p in self.location.iterdir():
            m = _ROLLING_FILE.fullmatch(p.name)
            if m and m[2] == self.app and int(m[1]) not in self._files:
                self._files[int(m[1])] = _File(p)
        newest = max(self._files, default=0)
        return [f for i, f in sorted(self._files.items())
                if i == newest or f.offset < f.path.stat().st_size]

    def _apply(self, name: str, e: dict[str, Any]) -> None:
        if name == "SparkListenerJobStart":
            group = (e.get("Properties") or {}).get(_GROUP_KEY)
            self._jobs[e["Job ID"]] = _Job(group, list(e.get("Stage IDs", [])))
            if group is not None:
                self._groups.setdefault(group, []).append(e["Job ID"])
        elif name == "SparkListenerJobEnd":
            if e["Job ID"] in self._jobs:
                self._jobs[e["Job ID"]].ended = True
        elif name in ("SparkListenerStageSubmitted", "SparkListenerStageCompleted"):
            info = e["Stage Info"]
            key = (info["Stage ID"], info["Stage Attempt ID"])
            a = self._attempt(key)
            a.run.submission_ms = info.get("Submission Time") or a.run.submission_ms
            if name == "SparkListenerStageCompleted":
                a.completed = True
                a.run.status = "FAILED" if "Failure Reason" in info else "COMPLETE"
                a.run.completion_ms = info.get("Completion Time") or 0
        else:
            a = self._attempt((e["Stage ID"], e["Stage Attempt ID"]))
            if name == "SparkListenerTaskStart":
                a.running_tasks += 1
            else:
                a.running_tasks -= 1
                _add_task(a.run, e.get("Task Metrics") or {})

    def _attempt(self, key: tuple[int, int]) -> _Attempt:
        a = self._attempts.get(key)
        if a is None:
            a = self._attempts[key] = _Attempt(StageAttempt(*key))
            self._stage_attempts.setdefault(key[0], []).append(key)
        return a


def _add_task(run: StageAttempt, m: dict[str, Any]) -> None:
    """Adds one ended task's metrics (absent for some failed tasks) to its stage attempt."""
    read = m.get("Shuffle Read Metrics") or {}
    write = m.get("Shuffle Write Metrics") or {}
    run.tasks += 1
    run.shuffle_write_bytes += write.get("Shuffle Bytes Written", 0)
    run.shuffle_write_records += write.get("Shuffle Records Written", 0)
    run.shuffle_read_bytes += read.get("Local Bytes Read", 0) + read.get("Remote Bytes Read", 0)
    run.input_bytes += (m.get("Input Metrics") or {}).get("Bytes Read", 0)
    run.output_bytes += (m.get("Output Metrics") or {}).get("Bytes Written", 0)
    run.executor_run_time_ms += m.get("Executor Run Time", 0)


_READERS: dict[Path, EventLog] = {}  # event log location -> its reader (in this process)
_LOCK = threading.Lock()
