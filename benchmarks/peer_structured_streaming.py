"""Benchmark: strata against what a PySpark user would use instead, on the same URL counts.

The same increments of URL sightings ``{url}`` (``increment_records`` per increment, drawn
Zipf-like from ``key_space`` possible URLs, so the number of counted URLs grows every
increment) are counted per URL, incrementally, in one run on one Spark session (local[2]):

* ``strata_direct`` — a strata Controller in direct mode; the URL-count stage of
  ``strata.apps.urlcount`` with inner state keyed by URL (an epoch reads only the state of
  the URLs in the increment); time of ``Controller.run()`` (ingest timed apart), over the
  default columnar state store;
* ``strata_direct_indexed`` — the same over the indexed state store (pickled runs with a
  hash index);
* ``strata_vectorized`` — the same stage written as a vectorized translate
  (``count_urls_vectorized``: one pandas call per partition over columnar state);
* ``strata_query`` — ``SELECT url, count(*) AS count FROM urls GROUP BY url`` as a strata
  query (``strata.queries.add_query``), its answer kept incrementally;
* ``strata_blackbox`` — the same in black-box mode (all state shuffled every epoch);
* ``full_recompute`` — Spark SQL ``groupBy("url").count()`` over all increments so far,
  written to Parquet;
* ``ss_builtin_count`` — Structured Streaming: a Parquet file stream (one file per
  increment, ``maxFilesPerTrigger=1``), ``groupBy("url").count()``, update mode;
* ``ss_apply_in_pandas_with_state`` — the same stream, ``applyInPandasWithState`` counting;
* ``ss_transform_with_state_in_pandas`` / ``ss_transform_with_state`` — the same with
  ``transformWithStateInPandas`` / ``transformWithState`` (RocksDB state store), when the
  PySpark version has them and they run (otherwise the reason is in ``skipped``).

The methods run interleaved: increment 1 through every method in turn, then increment 2,
and so on (the streams stay running between their micro-batches), so that a change in the
machine's load falls on all of them alike. Every Structured Streaming sink is
``foreachBatch`` writing the micro-batch (the updated counts) to Parquet, as strata writes
its changed counts. The three Python-UDF streams take
minutes per full-size increment, so they run only the first ``--slow-increments`` (full: 3)
increments: with less state than the others see later, which favours them. Per increment
the benchmark copies the increment's file into the watched directory and times
``processAllAvailable()`` (wall seconds, the reported number; it includes up to one
``spark.sql.streaming.pollingDelay``, set to 50 ms); the query's own ``triggerExecution``
time is kept too. ``transformWithState*`` need the ``protobuf`` package (test extra).
Spark shuffle write bytes per increment come from Spark's event log
(:class:`strata.observability.spark_metrics.SparkMetrics`; for streams, the query's job group). All
methods' final counts are checked against the last full recomputation.

    python benchmarks/peer_structured_streaming.py [--quick] --json PATH [--plot PATH.png]

JSON to ``PATH`` and stdout, progress and a summary to stderr. Targets (medians of
increments 2..k of each method, increment 1 being warm-up for every method):

* strata direct >= 20x faster per increment than ``applyInPandasWithState``;
* strata direct <= 1.0x Structured Streaming's built-in count (``vs_ss_builtin_count``
  ratios: time of the strata method / time of the built-in count); the vectorized stage
  <= 0.6x; the query <= 0.7x.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# benchmarks/common.py (this script's folder)
from common import ROCKSDB, STATE_STORE_CONF, emit, event_log_dir, save, session_conf

# slow_increments: the Python-UDF streams (SLOW) run only the first this many increments
FULL = {"records": 200_000, "keys": 2_000_000, "increments": 10, "slow_increments": 3}
QUICK = {"records": 5_000, "keys": 50_000, "increments": 3, "slow_increments": 2}
METHODS = ("strata_direct", "strata_direct_indexed", "strata_vectorized", "strata_query",
           "strata_blackbox", "full_recompute", "ss_builtin_count",
           "ss_apply_in_pandas_with_state", "ss_transform_with_state_in_pandas",
           "ss_transform_with_state")
SLOW = ("ss_apply_in_pandas_with_state", "ss_transform_with_state_in_pandas",
        "ss_transform_with_state")
TARGET_VS_APPLY = 20.0  # strata direct at least this many times faster
TARGET_VS_BUILTIN = 1.0  # strata direct at most this many times the built-in count's time
TARGET_VECTORIZED = 0.6  # the vectorized translate, same ratio
TARGET_QUERY = 0.7  # the URL count as a strata query, same ratio
QUERY = "SELECT url, count(*) AS count FROM urls GROUP BY url"
COUNT_SCHEMA = "url string, count long"
POLLING_DELAY = "50ms"

Ctx = dict[str, Any]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def url(n: int) -> str:
    """The URL of id ``n`` (500 sites)."""
    return f"https://site{n % 500}.example.com/page/{n}"


# -- input data ------------------------------------------------------------------------------
def make_increments(root: Path, records: int, keys: int, increments: int, skew: float,
                    seed: int) -> tuple[list[Path], list[dict]]:
    """One Parquet file per increment; ids drawn with P(rank r) ~ 1 / r**skew (0: uniform),
    ranks scattered over the ids. Returns the files and per-increment key statistics."""
    rng = np.random.default_rng([seed, records, keys])
    perm = rng.permutation(keys)
    if skew > 0:
        cdf = np.cumsum(1.0 / np.arange(1, keys + 1, dtype=np.float64) ** skew)
        cdf /= cdf[-1]
    root.mkdir(parents=True, exist_ok=True)
    files, stats, seen = [], [], np.zeros(keys, bool)
    for e in range(1, increments + 1):
        ranks = (np.minimum(np.searchsorted(cdf, rng.random(records)), keys - 1) if skew > 0
                 else rng.integers(0, keys, records))
        ids = perm[ranks]
        seen[ids] = True
        path = root / f"increment-{e:04d}.parquet"
        pq.write_table(pa.table({"url": pa.array([url(int(n)) for n in ids], pa.string())}),
                       path, compression="zstd")
        files.append(path)
        stats.append({"distinct_urls": int(len(np.unique(ids))), "urls_so_far": int(seen.sum())})
    return files, stats


# -- Spark helpers ----------------------------------------------------------------------------
def stage_times(metrics: Any, group: str) -> dict[str, float]:
    """Seconds of the map (shuffle-writing) and result stages of job group ``group``, and
    the sum of their tasks' run time, from Spark's metrics (``SparkMetrics``)."""
    out = {"map_stage_s": 0.0, "reduce_stage_s": 0.0, "task_run_s": 0.0}
    for a in metrics.stage_attempts(group):
        if a.status != "COMPLETE":
            continue
        out["map_stage_s" if a.shuffle_write_bytes else "reduce_stage_s"] += a.seconds
        out["task_run_s"] += a.executor_run_time_ms / 1000
    return {k: round(v, 3) for k, v in out.items()}


def sorted_counts(table: pa.Table) -> pa.Table:
    """``(url, count)`` sorted by url, count as int64."""
    t = table.select(["url", "count"]).cast(pa.schema([("url", pa.string()),
                                                       ("count", pa.int64())]))
    return t.sort_by("url")


def latest_counts(out_dir: Path) -> pa.Table:
    """The final count per URL from per-batch outputs of monotone counts (max per URL)."""
    parts = [pq.read_table(p) for p in sorted(out_dir.glob("batch-*")) if any(p.iterdir())]
    if not parts:
        return sorted_counts(pa.table({"url": pa.array([], pa.string()),
                                       "count": pa.array([], pa.int64())}))
    t = pa.concat_tables([p.select(["url", "count"]) for p in parts])
    g = t.group_by("url").aggregate([("count", "max")])
    return sorted_counts(pa.table({"url": g["url"], "count": g["count_max"]}))


def reference_counts(files: list[Path]) -> pa.Table:
    """Counts per URL over ``files`` with pyarrow (for methods run on fewer increments)."""
    t = pa.concat_tables([pq.read_table(f) for f in files])
    g = t.group_by("url").aggregate([("url", "count")])
    return sorted_counts(pa.table({"url": g["url"], "count": g["url_count"]}))


# -- the methods: each runs one increment per step, so that all methods see the same load --------
class Method:
    """A way to count URLs incrementally: ``start``, one ``step`` per increment, ``finish``."""

    def __init__(self, name: str, ctx: Ctx) -> None:
        self.name, self.ctx = name, ctx

    def start(self) -> None:
        """Set up (not timed)."""

    def step(self, e: int, file: Path) -> dict:
        """Count increment ``e`` (in ``file``); a row with at least ``seconds``."""
        raise NotImplementedError

    def finish(self) -> pa.Table:
        """Stop; the final counts, sorted."""
        raise NotImplementedError


class Strata(Method):
    """A strata Controller over a fresh home: the URL-count stage per group in direct or
    black-box mode, the vectorized stage, or the SQL query ``QUERY``."""

    def __init__(self, name: str, ctx: Ctx, variant: str) -> None:
        super().__init__(name, ctx)
        self.variant = variant
        self.mode = "blackbox" if variant == "blackbox" else "direct"

    def start(self) -> None:
        from strata.apps.urlcount import urlcount_dataflow, urlcount_vectorized_dataflow
        from strata.controller import Controller

        if self.variant == "vectorized":
            df = urlcount_vectorized_dataflow()
        elif self.variant == "query":
            from strata.model import Dataflow
            from strata.queries import add_query

            df = Dataflow("urlcount")
            df.source("urls", "url string")
            add_query(df, "count", QUERY, output="counts")
        else:
            df = urlcount_dataflow("inner")
        self.home = self.ctx["tmp"] / f"home-{self.variant}"
        self.c = Controller(self.home, df, spark=self.ctx["spark"], mode=self.mode,
                            num_partitions=self.ctx["partitions"],
                            store="indexed" if self.variant == "direct_indexed" else "columns")
        self.c.lock()

    def step(self, e: int, file: Path) -> dict:
        spark = self.ctx["spark"]
        t0 = time.perf_counter()
        self.c.ingest("urls", [str(file)])
        ingest = time.perf_counter() - t0
        with self.ctx["metrics"].measure(f"peer-{self.mode}-{e}") as m:
            group = spark.sparkContext.getLocalProperty("spark.jobGroup.id")
            t0 = time.perf_counter()
            reports = self.c.run()
            secs = time.perf_counter() - t0
        (r,) = reports
        return {"seconds": round(secs, 4), "ingest_seconds": round(ingest, 4),
                "shuffle_bytes": m.shuffle_write_bytes, "epoch_seconds": round(r.seconds, 4),
                "state_bytes_read": r.metrics.get("state_bytes_read"),
                "state_bytes_compaction_read": r.metrics.get("state_bytes_compaction_read"),
                "state_bytes_total": r.metrics.get("state_bytes_total"),
                "keys_called": r.metrics.get("keys_called"),
                "records_out": r.records_out.get("counts", 0),
                **stage_times(self.ctx["metrics"], group)}

    def finish(self) -> pa.Table:
        if self.variant == "query":
            counts = sorted_counts(self.c.answer("count"))
        else:
            counts = sorted_counts(pa.Table.from_pylist(self.c.state_records("count")))
        self.c.close()
        shutil.rmtree(self.home, ignore_errors=True)
        return counts


class FullRecompute(Method):
    """Spark SQL over all increments so far, written to Parquet."""

    def start(self) -> None:
        self.files: list[Path] = []
        self.out = self.ctx["tmp"] / "full"

    def step(self, e: int, file: Path) -> dict:
        self.files.append(file)
        self.target = self.out / f"after-{e:04d}"
        with self.ctx["metrics"].measure(f"peer-full-{e}") as m:
            t0 = time.perf_counter()
            (self.ctx["spark"].read.parquet(*map(str, self.files))
             .groupBy("url").count().write.mode("overwrite").parquet(str(self.target)))
            secs = time.perf_counter() - t0
        return {"seconds": round(secs, 4), "shuffle_bytes": m.shuffle_write_bytes}

    def finish(self) -> pa.Table:
        counts = sorted_counts(pq.read_table(self.target))
        shutil.rmtree(self.out, ignore_errors=True)
        return counts


def _apply_in_pandas_count(key: tuple, pdfs: Iterator, state) -> Iterator:
    """applyInPandasWithState: add this batch's rows of the URL to its stored count."""
    import pandas as pd

    n = sum(len(p) for p in pdfs) + (state.get[0] if state.exists else 0)
    state.update((n,))
    yield pd.DataFrame({"url": [key[0]], "count": [n]})


def _stateful_processor(pandas: bool):
    """A transformWithState(InPandas) processor counting rows per URL in a ValueState."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("count", LongType())])

    class CountInPandas(StatefulProcessor):
        def init(self, handle) -> None:
            self.count = handle.getValueState("count", schema)

        def handleInputRows(self, key, rows, timerValues) -> Iterator:
            import pandas as pd

            n = sum(len(p) for p in rows) + (self.count.get()[0] if self.count.exists() else 0)
            self.count.update((n,))
            yield pd.DataFrame({"url": [key[0]], "count": [n]})

        def close(self) -> None:
            pass

    class CountRows(CountInPandas):
        def handleInputRows(self, key, rows, timerValues) -> Iterator:
            from pyspark.sql import Row

            n = sum(1 for _ in rows) + (self.count.get()[0] if self.count.exists() else 0)
            self.count.update((n,))
            yield Row(url=key[0], count=n)

    return CountInPandas() if pandas else CountRows()


def _counting(kind: str, stream):
    """The counting query of Structured Streaming method ``kind`` over ``stream``."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    g = stream.groupBy("url")
    if kind == "ss_builtin_count":
        return g.count()
    if kind == "ss_apply_in_pandas_with_state":
        return g.applyInPandasWithState(
            _apply_in_pandas_count, outputStructType=COUNT_SCHEMA, stateStructType="count long",
            outputMode="update", timeoutConf=GroupStateTimeout.NoTimeout)
    if kind == "ss_transform_with_state_in_pandas":
        return g.transformWithStateInPandas(
            statefulProcessor=_stateful_processor(True), outputStructType=COUNT_SCHEMA,
            outputMode="Update", timeMode="None")
    if kind == "ss_transform_with_state":
        return g.transformWithState(
            statefulProcessor=_stateful_processor(False), outputStructType=COUNT_SCHEMA,
            outputMode="Update", timeMode="None")
    raise ValueError(kind)


class Stream(Method):
    """A Structured Streaming query over a Parquet file stream, sink foreachBatch -> Parquet."""

    API = {"ss_transform_with_state_in_pandas": "transformWithStateInPandas",
           "ss_transform_with_state": "transformWithState",
           "ss_apply_in_pandas_with_state": "applyInPandasWithState"}

    def start(self) -> None:
        from pyspark.sql import GroupedData

        spark, kind = self.ctx["spark"], self.name
        api = self.API.get(kind)
        if api and not hasattr(GroupedData, api):
            raise Unsupported(f"PySpark {spark.version} has no GroupedData.{api}")
        base = self.base = self.ctx["tmp"] / kind
        self.watch, self.staging, out = base / "in", base / "staging", base / "out"
        for d in (self.watch, self.staging, out):
            d.mkdir(parents=True)
        self.out = out

        def sink(batch, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(str(out / f"batch-{batch_id:05d}"))

        stream = (spark.readStream.schema("url string").option("maxFilesPerTrigger", 1)
                  .parquet(str(self.watch)))
        # the state store provider is fixed when the query starts (its session is a clone)
        rocksdb = ROCKSDB if kind.startswith("ss_transform_with_state") or self.ctx.get(
            "rocksdb") else None
        with session_conf(spark, STATE_STORE_CONF, rocksdb):
            self.query = (_counting(kind, stream).writeStream.outputMode("update")
                          .foreachBatch(sink)
                          .option("checkpointLocation", str(base / "checkpoint"))
                          .queryName(kind).start())
        self.shuffled = 0

    def step(self, e: int, file: Path) -> dict:
        shutil.copy(file, self.staging / file.name)
        t0 = time.perf_counter()
        os.replace(self.staging / file.name, self.watch / file.name)  # appears whole
        self.query.processAllAvailable()
        secs = time.perf_counter() - t0
        prog = self.query.lastProgress or {}
        rows = pq.ParquetFile(file).metadata.num_rows
        if prog.get("numInputRows") != rows:
            raise RuntimeError(f"{self.name}: increment {e} was not one micro-batch of "
                               f"{rows} rows: {prog.get('numInputRows')}")
        total = _group_shuffle(self.ctx, str(self.query.runId))
        row = {"seconds": round(secs, 4),
               "trigger_execution_s": prog["durationMs"]["triggerExecution"] / 1000,
               "shuffle_bytes": None if total is None else total - self.shuffled,
               "state_rows": sum(o.get("numRowsTotal", 0)
                                 for o in prog.get("stateOperators", []))}
        self.shuffled = total if total is not None else self.shuffled
        return row

    def stop(self) -> None:
        """Stop the query (also after a failure)."""
        if getattr(self, "query", None) is not None:
            self.query.stop()

    def finish(self) -> pa.Table:
        self.stop()
        if self.query.exception() is not None:
            raise RuntimeError(f"{self.name} failed: {self.query.exception()}")
        counts = latest_counts(self.out)
        shutil.rmtree(self.base, ignore_errors=True)
        return counts


def _group_shuffle(ctx: Ctx, group: str) -> int | None:
    """Shuffle write bytes of all jobs of a streaming query so far (its run id is its job
    group), or None if Spark no longer reports them."""
    try:
        return ctx["metrics"].for_group(group).shuffle_write_bytes
    except Exception:  # noqa: BLE001 - a measurement, not a result: report it missing
        return None


class Unsupported(Exception):
    """This PySpark cannot run a method."""


def make_method(name: str, ctx: Ctx) -> Method:
    if name.startswith("strata_"):
        return Strata(name, ctx, name.removeprefix("strata_"))
    if name == "full_recompute":
        return FullRecompute(name, ctx)
    return Stream(name, ctx)


def run_interleaved(names: list[str], ctx: Ctx, files: list[Path], n_slow: int,
                    around: Callable[[str, int], AbstractContextManager[dict]] | None = None,
                    reduce_counts: Callable[[pa.Table], Any] | None = None
                    ) -> tuple[dict, dict, dict, dict]:
    """Increment by increment, every method in turn (so a change of machine load hits all of
    them alike). Returns rows per method, final counts, skipped methods (why) and the load
    average around each method's steps. ``around(method, increment)``, if given, wraps each
    step; the dict it yields, filled by the time it exits, is added to the step's row
    (``benchmarks/scale.py`` measures the driver's memory so). A method that runs every
    increment collects its final counts after the last increment's round of all methods,
    so that collecting one method's counts does not weigh on another's step.
    ``reduce_counts``, if given, replaces each method's final counts by what it returns (a
    check against the expected counts: millions of counts per method are then not all
    held at once)."""
    methods, rows, counts, skipped, loads = {}, {}, {}, {}, {}

    def finish(method: Method) -> Any:
        got = method.finish()
        return got if reduce_counts is None else reduce_counts(got)

    def drop(name: str, e: Exception) -> None:
        if name in ("strata_direct", "full_recompute"):
            raise e
        skipped[name] = f"{type(e).__name__}: {e}"
        log(f"[{name}] skipped: {traceback.format_exc()}")
        m = methods.pop(name)
        if isinstance(m, Stream):
            m.stop()
        rows.pop(name, None)

    for name in names:
        methods[name] = make_method(name, ctx)
        try:
            methods[name].start()
        except Exception as e:  # noqa: BLE001 - record why a peer could not run
            drop(name, e)
    for e, f in enumerate(files, 1):
        for name in list(methods):
            last = n_slow if name in SLOW else len(files)
            if e > last:
                continue
            l0 = os.getloadavg()[0]
            try:
                with around(name, e) if around else nullcontext({}) as measured:
                    row = methods[name].step(e, f)
                row = {**row, **measured}
                if e == last < len(files):
                    counts[name] = finish(methods[name])
            except Exception as ex:  # noqa: BLE001
                drop(name, ex)
                continue
            loads.setdefault(name, []).append([round(l0, 2), round(os.getloadavg()[0], 2)])
            rows.setdefault(name, []).append(row)
            log(f"[{name}] increment {e}: {row['seconds']:.2f} s"
                + "".join(f", {k} {v}" for k, v in row.items() if k != "seconds"))
    for name in list(methods):
        if name not in counts and len(rows.get(name, ())) == len(files):
            try:
                counts[name] = finish(methods[name])
            except Exception as ex:  # noqa: BLE001
                drop(name, ex)
    return rows, counts, skipped, loads


# -- summary ---------------------------------------------------------------------------------
def _steady(xs: list[float]) -> list[float]:
    return xs[1:] or xs


def summarize(per: dict[str, list[float]], extra: dict[str, list[dict]]) -> dict:
    med = {m: statistics.median(_steady(xs)) for m, xs in per.items()}
    mean = {m: statistics.fmean(_steady(xs)) for m, xs in per.items()}
    out: dict[str, Any] = {
        "statistic": "median of per-increment wall seconds over increments 2..k, k the "
                     "increments the method ran (means alongside)",
        "median_seconds": {m: round(v, 3) for m, v in med.items()},
        "mean_seconds": {m: round(v, 3) for m, v in mean.items()},
        "targets": {},
    }
    d = "strata_direct"
    if d in med and "ss_apply_in_pandas_with_state" in med:
        v = med["ss_apply_in_pandas_with_state"] / med[d]
        out["targets"]["direct_speedup_vs_apply_in_pandas_with_state"] = {
            "value": round(v, 2), "target": f">= {TARGET_VS_APPLY:g}",
            "met": v >= TARGET_VS_APPLY,
            "mean_ratio": round(mean["ss_apply_in_pandas_with_state"] / mean[d], 2)}
    if d in med and "ss_builtin_count" in med:
        v = med[d] / med["ss_builtin_count"]
        trig = statistics.median(_steady([r["trigger_execution_s"]
                                          for r in extra["ss_builtin_count"]]))
        out["targets"]["direct_slowdown_vs_ss_builtin_count"] = {
            "value": round(v, 2), "target": f"<= {TARGET_VS_BUILTIN:g}",
            "met": v <= TARGET_VS_BUILTIN,
            "mean_ratio": round(mean[d] / mean["ss_builtin_count"], 2),
            "vs_trigger_execution": round(med[d] / trig, 2)}
    for m, name, target in (("strata_vectorized", "vectorized_over_ss_builtin_count",
                             TARGET_VECTORIZED),
                            ("strata_query", "query_over_ss_builtin_count", TARGET_QUERY)):
        if m in med and "ss_builtin_count" in med:
            v = med[m] / med["ss_builtin_count"]
            out["targets"][name] = {"value": round(v, 2), "target": f"<= {target:g}",
                                    "met": v <= target,
                                    "mean_ratio": round(mean[m] / mean["ss_builtin_count"], 2)}
    if "strata_direct_indexed" in med and "ss_builtin_count" in med:  # no target: a comparison
        out["direct_indexed_over_ss_builtin_count"] = round(
            med["strata_direct_indexed"] / med["ss_builtin_count"], 2)
    for m in per:
        if m.startswith("ss_") and m in extra:
            out.setdefault("ss_trigger_execution_median_s", {})[m] = round(statistics.median(
                _steady([r["trigger_execution_s"] for r in extra[m]])), 3)
    n = max(map(len, per.values()))
    out["cumulative_seconds"] = {m: round(sum(xs), 2) for m, xs in per.items() if len(xs) == n}
    return out


def human(result: dict) -> str:
    per = result["per_increment_seconds"]
    names = list(per)
    lines = ["", "incr " + "".join(f"{m.replace('ss_', '').replace('strata_', 's_')[:18]:>19s}"
                                   for m in names)]
    for i in range(result["increments"]):
        lines.append(f"{i + 1:4d} " + "".join(f"{per[m][i]:19.2f}" if i < len(per[m])
                                              else f"{'-':>19s}" for m in names))
    s = result["summary"]
    lines.append("median 2..n " + ", ".join(f"{m} {v}" for m, v in s["median_seconds"].items()))
    for name, t in s["targets"].items():
        lines.append(f"  [{'ok ' if t['met'] else 'MISS'}] {name} {t['value']} "
                     f"(target {t['target']})")
    for m, why in result["skipped"].items():
        lines.append(f"  skipped {m}: {why.splitlines()[0][:200]}")
    lines.append(f"counts identical to full recompute: {result['counts_identical']}; "
                 f"load average {result['load_average_1m']}; wall {result['wall_seconds']} s")
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for m, xs in result["per_increment_seconds"].items():
        ax.plot(range(1, len(xs) + 1), xs, marker="o", label=m)
    ax.set_yscale("log")
    ax.set_xlabel("increment")
    ax.set_ylabel("seconds per increment (log)")
    ax.set_xticks(range(1, result["increments"] + 1))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8.5)
    ax.set_title(f"URL count, {result['increment_records']:,} records per increment over "
                 f"{result['key_space']:,} URLs ({result['config']['master']}, "
                 f"load {result['load_average_1m']['start']}–{result['load_average_1m']['end']})",
                 fontsize=10)
    save(fig, path)


# -- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from strata.config import DRIVER_EPOCH_ROWS, TRANSLATE_ROUTE

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (under a minute)")
    ap.add_argument("--json", required=True, metavar="PATH")
    ap.add_argument("--plot", metavar="PATH.png")
    ap.add_argument("--records", type=int, help="records per increment")
    ap.add_argument("--keys", type=int, help="possible URLs")
    ap.add_argument("--increments", type=int)
    ap.add_argument("--slow-increments", type=int,
                    help=f"increments run by the slow Python-UDF streams {SLOW} (their state "
                         "is then smaller: a conservative comparison for strata)")
    ap.add_argument("--skew", type=float, default=0.9,
                    help="Zipf exponent of URL popularity (0: uniform)")
    ap.add_argument("--partitions", type=int, default=2,
                    help="strata partitions = spark.sql.shuffle.partitions (state partitions)")
    ap.add_argument("--methods", nargs="+", choices=METHODS,
                    help="default: all (--quick: all but transformWithStateInPandas, the "
                         "slowest, which no target reads)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--translate-route", choices=TRANSLATE_ROUTE.choices, default="auto",
                    help=f"{TRANSLATE_ROUTE.name} of the translate stages' epochs run as "
                         "Spark tasks (rdd or arrow; auto: rdd on a classic session)")
    ap.add_argument("--driver-epoch-rows", type=int,
                    help=f"{DRIVER_EPOCH_ROWS.name} (-1: every epoch as Spark tasks)")
    args = ap.parse_args(argv)
    size = QUICK if args.quick else FULL
    records, keys = args.records or size["records"], args.keys or size["keys"]
    n = args.increments or size["increments"]
    n_slow = min(n, args.slow_increments or size["slow_increments"])
    methods = args.methods or [m for m in METHODS if not (
        args.quick and m == "ss_transform_with_state_in_pandas")]

    wall0, load0 = time.perf_counter(), os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="strata-peer-"))
    t0 = time.perf_counter()
    files, stats = make_increments(tmp / "increments", records, keys, n, args.skew, args.seed)
    log(f"peer benchmark: {n} increments of {records:,} records over {keys:,} URLs "
        f"(skew {args.skew}), generated in {time.perf_counter() - t0:.1f} s; "
        f"distinct per increment {stats[0]['distinct_urls']:,}, URLs after the last "
        f"{stats[-1]['urls_so_far']:,}; load average {load0[0]:.2f}")
    ref_slow = reference_counts(files[:n_slow])  # for the streams run on fewer increments
    # the reference: Spark SQL's recomputation when it runs, else pyarrow's count
    ref_all = None if "full_recompute" in methods else reference_counts(files)

    import pyspark

    from strata.observability.spark_metrics import SparkMetrics
    from strata.physical.session import get_spark

    spark = get_spark(args.master, app_name="strata-bench-peer", event_log_dir=event_log_dir())
    spark.conf.set("spark.sql.shuffle.partitions", str(args.partitions))
    spark.conf.set(TRANSLATE_ROUTE.name, args.translate_route)
    if args.driver_epoch_rows is not None:
        spark.conf.set(DRIVER_EPOCH_ROWS.name, str(args.driver_epoch_rows))
    # idle streams poll their source this often (default 10 ms): less polling load on the
    # other methods, at most this much added to a stream's wall time per increment
    spark.conf.set("spark.sql.streaming.pollingDelay", POLLING_DELAY)
    ctx: Ctx = {"spark": spark, "metrics": SparkMetrics(spark, timeout_s=30), "tmp": tmp,
                "records": records, "partitions": args.partitions}
    try:
        # warm-up, not reported (full runs: --quick is a smoke run whose ratios nobody
        # quotes): JVM, Python workers, imports, a first streaming query
        if not args.quick:
            wfiles, _ = make_increments(tmp / "warm-inc", 2000, 20_000, 1, args.skew,
                                        args.seed + 1)
            t0 = time.perf_counter()
            run_interleaved(["strata_direct", "full_recompute", "ss_builtin_count"],
                            {**ctx, "records": 2000, "tmp": tmp / "warm"}, wfiles, 1)
            log(f"warm-up done in {time.perf_counter() - t0:.1f} s")
        extra, counts, skipped, loads = run_interleaved(methods, ctx, files, n_slow)
        per = {m: [r["seconds"] for r in rows] for m, rows in extra.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ref = counts.get("full_recompute", ref_all)
    identical = {m: bool(ref is not None and c.equals(ref)) for m, c in counts.items()
                 if len(per[m]) == n}
    identical |= {m: bool(c.equals(ref_slow)) for m, c in counts.items() if len(per[m]) < n}
    total = int(pc.sum(ref["count"]).as_py()) if ref is not None else None
    result = {
        "per_increment_seconds": per,
        "increment_records": records,
        "key_space": keys,
        "increments": n,
        "increments_run": {m: len(xs) for m, xs in per.items()},
        "summary": summarize(per, extra),
        "per_increment": extra,
        "increment_stats": stats,
        "counts_identical": all(identical.values()) and total == records * n,
        "counts_identical_by_method": identical,
        "final_urls": ref.num_rows if ref is not None else None,
        "skipped": skipped,
        "timing": {
            "strata_*": "wall seconds of Controller.run() after ingest (ingest_seconds apart)",
            "full_recompute": "wall seconds of read all increments so far, groupBy count, "
                              "write Parquet",
            "ss_*": "wall seconds from the file appearing in the watched directory until "
                    "processAllAvailable() returns; trigger_execution_s is the query's own "
                    "durationMs.triggerExecution",
        },
        "config": {"master": spark.sparkContext.master, "partitions": args.partitions,
                   "skew": args.skew, "seed": args.seed, "quick": args.quick,
                   TRANSLATE_ROUTE.name: args.translate_route,
                   DRIVER_EPOCH_ROWS.name: args.driver_epoch_rows,
                   "ss_state_store": {"ss_builtin_count": "HDFSBackedStateStoreProvider "
                                      "(default)", "ss_apply_in_pandas_with_state":
                                      "HDFSBackedStateStoreProvider (default)",
                                      "ss_transform_with_state*": "RocksDBStateStoreProvider"},
                   "ss_sink": "foreachBatch -> Parquet", "ss_source": "parquet file stream, "
                   "maxFilesPerTrigger=1, one file per increment",
                   "ss_polling_delay": POLLING_DELAY,
                   "order": "interleaved: each increment through every method in turn"},
        "machine": {"cores": os.cpu_count(), "spark": pyspark.__version__,
                    "python": platform.python_version(), "platform": platform.platform()},
        "command": shlex.join([Path(sys.argv[0]).as_posix(),
                               *(sys.argv[1:] if argv is None else argv)]),
        "load_average_1m": {"start": round(load0[0], 2), "end": round(os.getloadavg()[0], 2)},
        # 1-minute load average before and after each step, per method and increment
        "load_average_by_step": loads,
        "wall_seconds": round(time.perf_counter() - wall0, 1),
    }
    emit(result, args.json, args.plot, plot)
    log(human(result))
    if not result["counts_identical"]:
        log(f"ERROR: final counts differ from the full recomputation: {identical}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
