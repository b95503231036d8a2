"""Tests of strata.observability.spark_metrics against a real local Spark (no mocks).

The session-scoped ``spark`` fixture (local[2]) comes from tests/conftest.py.
"""

from __future__ import annotations

from operator import add

import pytest

from strata.observability.spark_metrics import JobMetrics, SparkMetrics, current_job_group
from tests.helpers import session_confs


@pytest.fixture(scope="module")
def metrics(spark) -> SparkMetrics:
    return SparkMetrics(spark)


def _shuffle_job(sc, n: int) -> None:
    sc.parallelize(range(n), 4).map(lambda x: (x % 97, x)).reduceByKey(add).collect()


def test_shuffle_job_reports_shuffle_bytes(spark, metrics):
    sc = spark.sparkContext
    with metrics.measure("shuffle") as m:
        _shuffle_job(sc, 100_000)
    print("shuffle job:", m.to_json())
    assert m.jobs >= 1
    assert m.stages == 2  # map side + reduce side
    assert m.tasks == 8  # 4 map tasks + 4 reduce tasks
    assert m.shuffle_write_bytes > 0
    assert m.shuffle_write_records > 0
    # Local mode: every block written is read back locally, byte for byte.
    assert m.shuffle_read_bytes == m.shuffle_write_bytes
    assert m.executor_run_time_ms > 0


def test_narrow_job_has_no_shuffle(spark, metrics):
    sc = spark.sparkContext
    with metrics.measure("narrow") as m:
        sc.parallelize(range(1000), 2).map(lambda x: x * 2).collect()
    print("narrow job:", m.to_json())
    assert m.jobs == 1
    assert m.stages == 1
    assert m.tasks == 2
    assert m.shuffle_write_bytes == 0
    assert m.shuffle_read_bytes == 0


def test_shuffle_bytes_scale_with_data(spark, metrics):
    sc = spark.sparkContext

    # Summing ints combines map-side down to one record per key and partition, whatever the
    # input size; concatenating lists keeps every value, so the shuffled data grows with n.
    def run(n: int) -> JobMetrics:
        with metrics.measure(f"n{n}") as m:
            sc.parallelize(range(n), 4).map(lambda x: (x % 97, [x])).reduceByKey(add).count()
        return m

    single, double = run(100_000), run(200_000)
    print("single:", single.to_json(), "double:", double.to_json())
    ratio = double.shuffle_write_bytes / single.shuffle_write_bytes
    print("ratio double/single shuffle_write_bytes:", ratio)
    assert 1.5 <= ratio <= 2.5


def test_jobs_outside_block_not_counted(spark, metrics):
    sc = spark.sparkContext
    _shuffle_job(sc, 100_000)  # before the block: must not be counted
    with metrics.measure("inside") as m:
        sc.parallelize(range(1000), 2).map(lambda x: x + 1).collect()
    print("inside after outside shuffle:", m.to_json())
    assert m.jobs == 1
    assert m.shuffle_write_bytes == 0
    assert m.shuffle_read_bytes == 0


def test_skipped_stages_not_counted(spark, metrics):
    sc = spark.sparkContext
    rdd = sc.parallelize(range(100_000), 4).map(lambda x: (x % 97, x)).reduceByKey(add)
    with metrics.measure("first") as first:
        rdd.collect()
    with metrics.measure("reuse") as reuse:
        rdd.count()  # reuses the shuffle output: its map stage is skipped
    print("first:", first.to_json(), "reuse:", reuse.to_json())
    assert first.shuffle_write_bytes > 0
    assert reuse.jobs == 1
    assert reuse.stages == 1
    assert reuse.tasks == 4
    assert reuse.shuffle_write_bytes == 0
    assert reuse.shuffle_read_bytes == first.shuffle_read_bytes


def test_dataframe_jobs_are_measured(spark, metrics):
    from pyspark.sql import functions as F

    df = spark.range(50_000).withColumn("k", F.col("id") % 10)
    with metrics.measure("sql") as m:
        df.groupBy("k").count().collect()
    print("dataframe groupBy:", m.to_json())
    assert m.jobs >= 1
    assert m.shuffle_write_bytes > 0
    assert m.shuffle_read_bytes == m.shuffle_write_bytes


def test_job_group_is_restored(spark, metrics):
    sc = spark.sparkContext
    sc.setJobGroup("outer-group", "outer")
    try:
        with metrics.measure("inner"):
            assert current_job_group(sc).startswith("inner-")
        assert current_job_group(sc) == "outer-group"
        assert sc.getLocalProperty("spark.job.description") == "outer"
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    with metrics.measure("again"):
        pass
    assert current_job_group(sc) is None


def test_block_exception_restores_group(spark, metrics):
    sc = spark.sparkContext
    with pytest.raises(ValueError), metrics.measure("boom"):
        raise ValueError("boom")
    assert current_job_group(sc) is None


def test_empty_block_and_add():
    a = JobMetrics(jobs=1, tasks=2, shuffle_write_bytes=10)
    b = JobMetrics(jobs=2, tasks=3, shuffle_read_bytes=5)
    total = a + b
    assert total == JobMetrics(jobs=3, tasks=5, shuffle_write_bytes=10, shuffle_read_bytes=5)
    assert total.to_json()["tasks"] == 5


def test_empty_block_measures_nothing(spark, metrics):
    with metrics.measure("empty") as m:
        pass
    assert m == JobMetrics()


def test_ui_disabled_is_a_clear_error():
    from pyspark import SparkConf

    class NoUi:  # a context without the event log and without the UI
        uiWebUrl = None
        applicationId = "local-0"

        def getConf(self) -> SparkConf:
            return SparkConf(loadDefaults=False)

    with pytest.raises(RuntimeError, match="event_log_dir.*spark.ui.enabled"):
        SparkMetrics(NoUi())


def test_measures_come_from_the_event_log(metrics):
    # tests/conftest.py creates the session with get_spark(event_log_dir=...)
    assert metrics.source == "event log"


def test_parquet_read_reports_its_file_bytes_and_shuffle(spark, metrics, tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    path = tmp_path / "known.parquet"
    # random values do not compress: the file is large next to its footer
    pq.write_table(pa.table({"k": rng.integers(0, 50, 200_000), "v": rng.random(200_000)}),
                   path, compression="none")
    size = path.stat().st_size
    with session_confs(spark, {"spark.sql.shuffle.partitions": "4"}), \
            metrics.measure("parquet") as m:
        spark.read.parquet(str(path)).groupBy("k").sum("v").collect()
    print(f"parquet of {size} bytes:", m.to_json())
    assert 0.9 * size <= m.input_bytes <= 1.2 * size
    assert m.shuffle_write_bytes > 0
    assert m.shuffle_read_bytes == m.shuffle_write_bytes
    assert m.output_bytes == 0


def test_event_log_and_rest_api_agree(spark, metrics):
    sc = spark.sparkContext
    group = "agree-event-log-rest"
    sc.setJobGroup(group, "agree")
    try:
        _shuffle_job(sc, 50_000)
        with session_confs(spark, {"spark.sql.shuffle.partitions": "4"}):
            spark.range(20_000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    # a bound, not a timing: a loaded machine's UI can take minutes to answer
    rest = SparkMetrics(spark, event_log=False, timeout_s=600)
    assert rest.source == "REST API"
    from_log, from_rest = metrics.for_group(group), rest.for_group(group)
    print("event log:", from_log.to_json(), "REST:", from_rest.to_json())
    assert from_log == from_rest
    assert from_log.jobs >= 2 and from_log.shuffle_write_bytes > 0
    stages = metrics.stage_attempts(group)
    assert stages == rest.stage_attempts(group)
    assert {s.status for s in stages} == {"COMPLETE"}
    assert sum(s.shuffle_write_bytes for s in stages) == from_log.shuffle_write_bytes


def test_a_rolling_event_log_is_read_across_its_files_and_partial_lines(spark, metrics,
                                                                       tmp_path):
    from strata.observability.event_log import EventLog

    sc = spark.sparkContext
    group = "rolling-event-log"
    sc.setJobGroup(group, "rolling")
    try:
        _shuffle_job(sc, 10_000)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    want = metrics.stage_attempts(group)
    log = EventLog.of(sc)
    assert isinstance(log, EventLog)
    # this session's log, laid out as Spark rolls one: eventlog_v2_APP/events_N_APP
    lines = log.location.read_bytes().splitlines(keepends=True)
    end = max(i for i, line in enumerate(lines) if b'"SparkListenerJobEnd"' in line)
    rolled = tmp_path / f"eventlog_v2_{log.app}"
    rolled.mkdir()
    (rolled / f"events_1_{log.app}").write_bytes(b"".join(lines[:end // 2]))
    second = rolled / f"events_2_{log.app}"
    second.write_bytes(b"".join(lines[end // 2:end]) + lines[end][:20])  # JobEnd half written
    reader = EventLog(rolled, log.app)
    assert "not finished" in str(reader.collect(group))
    with open(second, "ab") as f:
        f.write(b"".join([lines[end][20:], *lines[end + 1:]]))
    assert reader.collect(group) == (1, want)
    assert sum(a.shuffle_write_bytes for a in want) > 0
