"""The Spark Structured Streaming ``window()`` baseline of the windowed-aggregation benchmark.

:class:`SparkWindowStream`: one streaming query (file stream, ``maxFilesPerTrigger=1``).
Spark plans a sliding window as an ``Expand`` node copying every row into ``ceil(range /
slide)`` windows; :meth:`SparkWindowStream.feed` reports that node's own SQL metric.

    python benchmarks/windows_spark.py   # self-check: 3 small increments vs batch Spark SQL
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from common import STATE_STORE_CONF, session_conf  # benchmarks/common.py (this folder)

SCHEMA = "ts timestamp, source string, url string, bytes bigint"
KEYS = ["window_start", "window_end", "url"]
RESULT_SCHEMA = pa.schema([("window_start", pa.timestamp("us", tz="UTC")),
                           ("window_end", pa.timestamp("us", tz="UTC")), ("url", pa.string()),
                           ("count", pa.int64()), ("avg_bytes", pa.float64())])


def _plan_rows(plan: Any) -> list[tuple[str, int | None, bool]]:
    """``(node name, 'number of output rows' or None, is a leaf)`` of every node of a
    physical plan (a py4j ``SparkPlan``), depth first (a chain for a one-source query)."""
    out, stack = [], [plan]
    while stack:
        p = stack.pop()
        metric, children = p.metrics().get("numOutputRows"), p.children()
        n = children.size()
        out.append((p.nodeName(),
                    None if metric.isEmpty() else max(0, int(metric.get().value())), n == 0))
        stack.extend(children.apply(i) for i in reversed(range(n)))
    return out


def batch_rows(plan: Any) -> dict[str, Any]:
    """Row counts of one micro-batch from the SQL metrics of its executed stateful plan:
    ``input_rows`` (the leaves' (scans') output), ``expand_output_rows`` (the Expand
    nodes'), ``aggregated_rows`` (the first node with a row metric below the lowest, i.e.
    partial, HashAggregate) and ``expand_in_plan``."""
    nodes = _plan_rows(plan)
    partial = max((i for i, (n, _, _) in enumerate(nodes) if n == "HashAggregate"), default=-1)
    below = [r for _, r, _ in nodes[partial + 1:] if r is not None]
    expand = [r or 0 for n, r, _ in nodes if n == "Expand"]
    return {"input_rows": sum(r or 0 for _, r, leaf in nodes if leaf),
            "expand_output_rows": sum(expand),
            "aggregated_rows": below[0] if below and partial >= 0 else 0,
            "expand_in_plan": bool(expand)}


def _shaped(t: pa.Table) -> pa.Table:
    """``t`` (window bounds in microseconds since the epoch) as ``RESULT_SCHEMA``, sorted."""
    ts = pa.timestamp("us", tz="UTC")
    return pa.table([t["window_start"].cast(ts), t["window_end"].cast(ts), t["url"],
                     t["count"].cast(pa.int64()), t["avg_bytes"]],
                    schema=RESULT_SCHEMA).sort_by([(k, "ascending") for k in KEYS])


class FeedTimedOut(RuntimeError):
    """An increment took the stream longer than the caller would wait; the query is stopped."""

    def __init__(self, name: str, increment: str, seconds: float) -> None:
        super().__init__(f"{name}: {increment} not processed within {seconds:g} s")
        self.increment, self.seconds = increment, seconds


class SparkWindowStream:
    """One Structured Streaming query: a Parquet file stream (one file per increment) of
    records (ts timestamp, source string, url string, bytes bigint; ts a Parquet
    timestamp, UTC-adjusted or not), watermarked on ts and aggregated per
    (window(ts, range, slide), url) with count(*) and avg(bytes), update output mode,
    foreachBatch sink writing each micro-batch to Parquet under workdir.

    The watermark delay defaults to ``range_seconds`` (state of windows that ended longer
    ago is evicted; rows that late are dropped). Row metrics: SQL metrics of each
    micro-batch's executed stateful plan, the query's ``lastExecution`` captured in the
    sink (after ``processAllAvailable()`` it is the no-data batch that follows each data
    batch: zeros); per query, so queries may share a session. (REST ``/sql`` shows each
    batch as two executions: the outer lists an Expand without values; the nested
    foreachBatch write, with jobs, has them.) A tumbling window (range == slide) has no
    Expand: ``expand_output_rows`` is then the rows entering the aggregation (one per input
    row with a timestamp) and ``expand_in_plan`` is False. ``state_store`` names the state
    store provider class (default: the session's, i.e. Spark's in-memory HDFS-backed one;
    ``common.ROCKSDB`` for state the JVM heap does not hold well).
    """

    def __init__(self, spark: Any, workdir: str, range_seconds: int, slide_seconds: int,
                 name: str, watermark_seconds: int | None = None,
                 state_store: str | None = None) -> None:
        from pyspark.sql import functions as F

        self.name, self.base = name, Path(workdir)
        self.watch, self.staging, self.out = (self.base / d for d in ("in", "staging", "out"))
        for d in (self.watch, self.staging, self.out):
            d.mkdir(parents=True, exist_ok=True)
        self._lock, self._fed, self.query = threading.Lock(), 0, None
        self._executions: list[tuple[int, Any]] = []  # (batch id, IncrementalExecution)
        delay = range_seconds if watermark_seconds is None else watermark_seconds
        window = F.window("ts", f"{range_seconds} seconds", f"{slide_seconds} seconds")
        agg = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
               .parquet(str(self.watch)).withWatermark("ts", f"{delay} seconds")
               .groupBy(window.alias("window"), "url")
               .agg(F.count(F.lit(1)).alias("count"), F.avg("bytes").alias("avg_bytes")))
        with session_conf(spark, STATE_STORE_CONF, state_store):  # fixed at start
            self.query = (agg.writeStream.outputMode("update").foreachBatch(self._sink)
                          .option("checkpointLocation", str(self.base / "checkpoint"))
                          .queryName(name).start())

    def _sink(self, batch: Any, batch_id: int) -> None:
        """Write the micro-batch's updated windows; keep the execution that produced them."""
        from pyspark.sql import functions as F

        execution = self.query._jsq.streamingQuery().lastExecution()  # this batch's plan
        (batch.select(F.unix_micros("window.start").alias("window_start"),
                      F.unix_micros("window.end").alias("window_end"), "url",
                      F.col("count").cast("long").alias("count"), "avg_bytes")
         .write.mode("overwrite").parquet(str(self.out / f"batch-{batch_id:06d}")))
        with self._lock:
            self._executions.append((batch_id, execution))

    def feed(self, parquet_file: str, timeout_s: float | None = None) -> dict:
        """Copy the increment's file into the watched directory, processAllAvailable(), and
        return {"seconds": wall seconds from the file appearing until processAllAvailable()
        returns, "input_rows": rows of this micro-batch, "expand_output_rows": the Expand
        node's 'number of output rows' for it, "aggregated_rows": rows entering the (first,
        partial) HashAggregate, "expand_in_plan", "batches": micro-batches run (the data
        batch, then usually a no-data batch advancing the watermark and evicting state;
        row counts are summed over them), "batch_seconds": their triggerExecution times}.
        Past ``timeout_s`` seconds the query is stopped and :class:`FeedTimedOut` raised."""
        self._fed += 1
        src = Path(parquet_file)
        staged = self.staging / f"{self._fed:06d}-{src.name}"
        shutil.copy(src, staged)
        t0 = time.perf_counter()
        os.replace(staged, self.watch / staged.name)  # appears whole
        self._process_all_available(timeout_s, src.name)
        seconds = time.perf_counter() - t0
        with self._lock:  # the batches this file caused (the sink ran in processAllAvailable)
            executions, self._executions = self._executions, []
        per = [batch_rows(execution.executedPlan()) for _, execution in executions]
        row: dict[str, Any] = {"seconds": round(seconds, 4), "batches": len(executions),
                               **{k: sum(b[k] for b in per) for k in (
                                   "input_rows", "expand_output_rows", "aggregated_rows")},
                               "expand_in_plan": any(b["expand_in_plan"] for b in per)}
        if not row["expand_in_plan"]:
            row["expand_output_rows"] = row["aggregated_rows"]
        ids = {b for b, _ in executions}
        row["batch_seconds"] = [p["durationMs"]["triggerExecution"] / 1000  # not idle polls
                                for p in self.query.recentProgress
                                if p["batchId"] in ids and "addBatch" in p["durationMs"]]
        expected = pq.ParquetFile(src).metadata.num_rows
        if row["input_rows"] != expected:
            raise RuntimeError(f"{self.name}: {src.name} ({expected} rows) was read as "
                               f"{row['input_rows']} rows in {len(executions)} micro-batches")
        return row

    def _process_all_available(self, timeout_s: float | None, increment: str) -> None:
        """``processAllAvailable()``, given up after ``timeout_s`` seconds: it has no timeout
        of its own, so it runs in a thread, and stopping the query ends it."""
        if timeout_s is None:
            self.query.processAllAvailable()
            return
        errors: list[BaseException] = []

        def process() -> None:
            try:
                self.query.processAllAvailable()
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(e)

        worker = threading.Thread(target=process, daemon=True, name=f"{self.name}-feed")
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            self.query.stop()  # interrupts the micro-batch; processAllAvailable() returns
            worker.join(60)
            raise FeedTimedOut(self.name, increment, timeout_s)
        if errors:
            raise errors[0]

    def results(self) -> pa.Table:
        """The latest value of every (window_start, window_end, url) written by the sink,
        sorted by those keys: window_start, window_end (timestamp[us, UTC]), url, count
        (int64), avg_bytes (double)."""
        parts = []
        for d in sorted(self.out.glob("batch-*")):
            t = pq.read_table(d)
            if t.num_rows:
                batch = pa.repeat(pa.scalar(int(d.name[6:]), pa.int64()), t.num_rows)
                parts.append(t.select(RESULT_SCHEMA.names).append_column("batch", batch))
        if not parts:
            return RESULT_SCHEMA.empty_table()
        g = (pa.concat_tables(parts).sort_by("batch").group_by(KEYS, use_threads=False)
             .aggregate([("count", "last"), ("avg_bytes", "last")]))
        return _shaped(g.rename_columns({"count_last": "count", "avg_bytes_last": "avg_bytes"}))

    def stop(self) -> None:
        """Stop the query; raise its error if it failed."""
        if self.query is not None:
            self.query.stop()
            if self.query.exception() is not None:
                raise RuntimeError(f"{self.name} failed: {self.query.exception()}")


# -- self-check --------------------------------------------------------------------------------
def _increments(root: Path, n: int, rows: int, seed: int = 1) -> list[str]:
    """``n`` Parquet files of ``rows`` records (4 sources, 100 URLs), a minute each."""
    import numpy as np

    rng, t0, files = np.random.default_rng(seed), 1_700_000_000, []
    root.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        ts = (t0 + 60 * k) * 1_000_000 + rng.integers(0, 60_000_000, rows)
        t = pa.table({"ts": pa.array(ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "source": pa.array([f"source-{i}" for i in rng.integers(0, 4, rows)]),
                      "url": pa.array([f"https://example.com/{i}"
                                       for i in rng.integers(0, 100, rows)]),
                      "bytes": pa.array(rng.integers(100, 100_000, rows), pa.int64())})
        files.append(str(root / f"increment-{k + 1:04d}.parquet"))
        pq.write_table(t, files[-1])
    return files


def _batch_reference(spark: Any, files: list[str], range_s: int, slide_s: int) -> pa.Table:
    """The same windows over all rows, by batch Spark SQL, shaped like ``results()``."""
    from pyspark.sql import functions as F

    w = F.window("ts", f"{range_s} seconds", f"{slide_s} seconds").alias("w")
    return _shaped(spark.read.schema(SCHEMA).parquet(*files).groupBy(w, "url")
                   .agg(F.count(F.lit(1)).alias("count"), F.avg("bytes").alias("avg_bytes"))
                   .select(F.unix_micros("w.start").alias("window_start"),
                           F.unix_micros("w.end").alias("window_end"), "url", "count",
                           "avg_bytes").toArrow())


def _self_check() -> int:
    """Feed 3 increments to a sliding (60 s / 5 s) and a tumbling (60 s) query on one
    session; compare their results with batch Spark SQL over all rows."""
    import sys
    import tempfile

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from strata.physical.session import get_spark

    spark = get_spark("local[2]", app_name="windows-spark-check")
    for k, v in {"shuffle.partitions": "2", "streaming.pollingDelay": "50ms"}.items():
        spark.conf.set(f"spark.sql.{k}", v)
    tmp = Path(tempfile.mkdtemp(prefix="windows-spark-"))
    files = _increments(tmp / "increments", 3, 5_000)
    shapes = {"sliding": (60, 5), "tumbling": (60, 60)}
    streams = {k: SparkWindowStream(spark, str(tmp / k), r, s, f"windows_{k}")
               for k, (r, s) in shapes.items()}
    failures = []
    try:
        for e, f in enumerate(files, 1):
            for k, stream in streams.items():
                row = stream.feed(f)
                ratio = row["expand_output_rows"] / row["input_rows"]
                print(f"{k:8s} increment {e}: {row}  expand/input {ratio:.2f}", flush=True)
                want = shapes[k][0] // shapes[k][1]
                if abs(ratio - want) > 1e-9 or row["aggregated_rows"] != row["expand_output_rows"]:
                    failures.append(f"{k} increment {e}: ratio {ratio}, expected {want}")
        for k, stream in streams.items():
            got, want = stream.results(), _batch_reference(spark, files, *shapes[k])
            same_keys = got.select(KEYS).equals(want.select(KEYS))
            same_counts = same_keys and got["count"].equals(want["count"])
            err = (pc.max(pc.abs(pc.divide(pc.subtract(got["avg_bytes"], want["avg_bytes"]),
                                           want["avg_bytes"]))).as_py() or 0.0
                   if same_keys else 1.0)
            print(f"{k:8s} final: {got.num_rows} (window, url) rows (batch SQL {want.num_rows})"
                  f", keys equal {same_keys}, counts equal {same_counts}, max relative avg "
                  f"error {err:.2e}")
            if not (same_counts and err < 1e-9 and got.num_rows):
                failures.append(f"{k}: results differ from batch Spark SQL")
    finally:
        for stream in streams.values():
            stream.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: " + "; ".join(failures) if failures else "self-check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(_self_check())
