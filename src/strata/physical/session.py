"""Creating the Spark session strata runs on."""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.resources import files

from pyspark.sql import SparkSession

from strata import config
from strata.model.errors import StrataError
from strata.physical.class_archive import driver_java_options
from strata.physical.spark_io import VECTORED_READS

# Epochs evaluate time functions (date_trunc, to_date, hour, …) in UTC whatever the
# session or the machine says, so an answer (and the state it is built from) never
# depends on where an epoch ran: docs/architecture.md, "The life of one epoch".
TIME_ZONE = "spark.sql.session.timeZone"
# Session confs an epoch's Spark work runs with, whatever the session it runs in says (a
# user's notebook or job session has Spark's defaults): adaptive execution off, since a
# shuffle's output partition i must be read by task i (coalescing, skew-join splitting
# and local shuffle readers are all adaptive execution), and time in UTC.
# docs/architecture.md, "The life of one epoch".
JOB_CONFS = {"spark.sql.adaptive.enabled": "false", TIME_ZONE: "UTC"}


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no RDDs, no JVM
    in this process: only DataFrames, sent to the server as plans)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def get_spark(master: str | None = None, app_name: str = "strata", *,
              remote: str | None = None, event_log_dir: str | os.PathLike[str] | None = None,
              **conf: str) -> SparkSession:
    """Return the active Spark session, creating one for ``master`` (or ``remote``) if
    there is none.

    The default is embedded Spark (``local[*]``); pass a master URL (``spark://…``,
    ``yarn``, ``k8s://…``) to run the same dataflow on a cluster, or a Spark Connect URL
    ``remote`` (``sc://host:15002``; default ``$STRATA_REMOTE`` unless ``master`` is
    given) to send DataFrame plans to a Connect server: every kind of stage runs there
    (translate stages on DataFrames, ``physical/translate_arrow.py``). Adaptive query
    execution is switched off because strata relies on a shuffle's output partition
    ``i`` being read by task ``i`` (the state of partition ``i`` lives beside it).
    PySpark's DataFrame debugging context is off: it costs several JVM round trips for
    every column function a query plan is built from, and strata names the failing
    stage and epoch in its own errors.

    ``event_log_dir`` (a local directory, created if missing) makes a new classic session
    write Spark's event log there, uncompressed and in one file, for
    ``strata.observability.spark_metrics`` to read job metrics from at any data size
    (docs/architecture.md, "Layers"); without it those metrics come from the UI's REST API.
    """
    if master and remote:
        raise StrataError("give either a Spark master (--master) or a Spark Connect URL "
                          "(--remote), not both")
    explicit = remote is not None
    if master is None and remote is None:
        remote = config.env(config.REMOTE)
    if remote is not None and not remote.startswith("sc://"):
        raise StrataError(f"Spark Connect URL {remote!r}: write sc://HOST:PORT "
                          "(e.g. sc://127.0.0.1:15002)")
    active = SparkSession.getActiveSession()
    if active is not None:
        if explicit and not is_connect(active):
            raise StrataError(f"this process already runs a classic Spark session; it "
                              f"cannot also connect to {remote} (run strata in its own "
                              "process for Spark Connect)")
        return active
    # PySpark 4.3 warns about pandas 3 on import; strata's paths do not use the affected parts.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    # PySpark logs each failed DataFrame or SQL expression as JSON; strata reports it itself.
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if remote is not None:
        return _connect(remote, app_name, conf)
    # Python workers must run the interpreter that holds strata and its pinned deps.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    log4j = files("strata") / "data" / "log4j2.properties"
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master or config.env(config.MASTER))
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config(TIME_ZONE, "UTC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", "0")
        # Parquet's vectored reads bypass the Hadoop statistics behind Spark's input bytes
        # (only footers are counted); strata's cost model learns from those bytes
        .config(VECTORED_READS, "false")  # spark_io.reads_counted asks the same conf
        .config("spark.driver.memory", config.env(config.DRIVER_MEMORY))
    )
    confs = {k.replace("_", "."): v for k, v in conf.items()}
    java_options = f"-Dlog4j2.configurationFile=file:{log4j} " + driver_java_options(confs)
    builder = builder.config("spark.driver.extraJavaOptions", java_options.strip())
    if event_log_dir is not None:
        os.makedirs(event_log_dir, exist_ok=True)
        builder = (builder.config("spark.eventLog.enabled", "true")
                   .config("spark.eventLog.dir", os.path.abspath(event_log_dir))
                   .config("spark.eventLog.compress", "false")
                   .config("spark.eventLog.rolling.enabled", "false"))
    for k, v in confs.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _connect(remote: str, app_name: str, conf: dict[str, str]) -> SparkSession:
    """A Spark Connect session to ``remote``. Only session (SQL) confs reach the server;
    the server's own confs (memory, master, UI) are set where it is started."""
    try:
        import pyspark.sql.connect.session  # noqa: F401  (needs grpcio and friends)
    except ImportError as e:
        raise StrataError(f"Spark Connect needs PySpark's connect client ({e}); install "
                          "strata's dependencies (grpcio, grpcio-status, "
                          "googleapis-common-protos, zstandard)") from None
    builder = (
        SparkSession.builder.remote(remote)
        .appName(app_name)
        .config("spark.sql.adaptive.enabled", "false")
        .config(TIME_ZONE, "UTC")
    )
    for k, v in conf.items():
        builder = builder.config(k.replace("_", "."), v)
    try:
        spark = builder.getOrCreate()
        spark.conf.get("spark.sql.adaptive.enabled")  # the first call reaches the server
    except Exception as e:
        if not type(e).__module__.startswith(("pyspark", "grpc")):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StrataError(f"cannot reach the Spark Connect server at {remote}: {first[:300]}"
                          "\n  start one with $SPARK_HOME/sbin/start-connect-server.sh, or "
                          "run classic Spark with --master") from None
    return spark


@contextmanager
def job_confs(spark: SparkSession, confs: Mapping[str, str] = JOB_CONFS) -> Iterator[None]:
    """Run the block with session confs ``confs`` (default :data:`JOB_CONFS`), then leave
    each conf it changed as the session had it (:func:`set_confs`)."""
    changed = {k: v for k, v in confs.items() if spark.conf.get(k, None) != v}
    previous = set_confs(spark, changed) if changed else {}
    try:
        yield
    finally:
        if previous:
            set_confs(spark, previous)


def set_confs(spark: SparkSession, confs: Mapping[str, str | None]) -> dict[str, str | None]:
    """Set session confs (``None``: unset, back to Spark's default); what each was before
    (``None``: the session had not set it), so that ``set_confs(spark, previous)`` leaves
    the session exactly as it was. Each conf is asked for by its key: ``getAll`` would cost
    a py4j round trip per conf the session has (a tenth of a small epoch)."""
    previous = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)
    return previous


def set_runtime_confs(spark: SparkSession, confs: Mapping[str, str]) -> None:
    """Set session confs that may change while Spark runs (``strata run --conf``); a conf
    Spark fixes at start-up is refused, saying where it goes instead."""
    for key, value in confs.items():
        try:
            spark.conf.set(key, value)
        except Exception as e:
            if not type(e).__module__.startswith(("pyspark", "py4j")):
                raise
            raise StrataError(
                f"cannot set Spark conf {key}={value!r} on a running session "
                f"({str(e).splitlines()[0][:200]}); a conf Spark reads at start-up goes in "
                "spark-defaults.conf (under $SPARK_CONF_DIR) or the cluster's own settings"
                ) from None


def default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (the cores of a local master or the cluster's
    executors). Over Spark Connect there is no SparkContext to ask: the session's
    ``spark.default.parallelism`` if set, else how many partitions a range is split into
    by default (which is that parallelism), counted by one small job (cached per
    session)."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    with _PARALLELISM_LOCK:  # an epoch's concurrent writes ask at once: one job
        known = _PARALLELISM.get(id(spark))
        if known is None:
            conf = spark.conf.get("spark.default.parallelism", None)
            if conf:
                known = int(conf)
            else:
                from pyspark.sql import functions as F

                row = (spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p"))
                       .agg(F.max("p").alias("p")).first())
                known = 1 + (row["p"] if row is not None and row["p"] is not None else 0)
            _PARALLELISM[id(spark)] = known
    return known


_PARALLELISM: dict[int, int] = {}  # id(Connect session) -> its default parallelism
_PARALLELISM_LOCK = threading.Lock()
