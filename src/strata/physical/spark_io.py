"""The bytes an epoch's Spark jobs read, shuffled and wrote, from Spark's status store.

A stage program that learns from its own costs (the series stage's cost model) asks the
runner for them (``StageProgram.records_spark_io``): the runner notes the newest job
before the epoch and sums, after it, the stages of every job started since. Classic
Spark only: over Spark Connect there is no status store to read, and nothing is
recorded. Parquet's vectored reads do not show in Spark's input bytes (only footers do):
:func:`~strata.physical.session.get_spark` turns them off, and in a session that has them
on (Spark's default since 4.0) the bytes read are left out (:func:`reads_counted`)."""

from __future__ import annotations

from pyspark.sql import SparkSession

VECTORED_READS = "spark.hadoop.parquet.hadoop.vectored.io.enabled"


def reads_counted(spark: SparkSession) -> bool:
    """Whether Spark's input bytes count the column chunks a Parquet scan reads: only
    with Parquet's vectored reads off (on by default, they bypass the Hadoop statistics
    Spark counts). Set when the session starts; a session conf changed later does not
    reach the readers."""
    try:
        return str(spark.conf.get(VECTORED_READS, "true")).strip().lower() == "false"
    except Exception:  # noqa: BLE001  (a conf Spark cannot return: assume the default)
        return False


def newest_job(spark: SparkSession) -> int | None:
    """The id of the newest job Spark knows (-1 if none; None without a status store or
    if it cannot be read: a measurement never fails an epoch)."""
    store = _store(spark)
    if store is None:
        return None
    try:
        jobs = store.jobsList(None)  # newest first
        return int(jobs.apply(0).jobId()) if jobs.size() else -1
    except Exception:  # noqa: BLE001  (a py4j failure reading the store)
        return None


def io_since(spark: SparkSession, after: int) -> dict[str, int] | None:
    """Bytes read (input), shuffled (shuffle write) and written (output) by the jobs
    newer than job ``after``, each stage counted once; None if the store cannot be read."""
    store = _store(spark)
    if store is None:
        return None
    try:
        return _io_since(store, after)
    except Exception:  # noqa: BLE001  (a py4j failure reading the store)
        return None


def _io_since(store, after: int) -> dict[str, int]:
    jobs = store.jobsList(None)
    stages: set[int] = set()
    for i in range(jobs.size()):
        job = jobs.apply(i)
        if int(job.jobId()) <= after:
            break
        ids = job.stageIds()
        stages.update(int(ids.apply(k)) for k in range(ids.size()))
    out = {"read": 0, "shuffled": 0, "written": 0}
    for sid in stages:
        try:
            stage = store.lastStageAttempt(sid)
        except Exception:  # noqa: BLE001  (a stage the store no longer retains)
            continue
        out["read"] += int(stage.inputBytes())
        out["shuffled"] += int(stage.shuffleWriteBytes())
        out["written"] += int(stage.outputBytes())
    return out


def _store(spark: SparkSession):
    try:
        return spark.sparkContext._jsc.sc().statusStore()
    except Exception:  # noqa: BLE001  (Spark Connect: no SparkContext)
        return None
