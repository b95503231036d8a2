"""Spark DataFrame utilities of the query layer, with no query knowledge.

Cutting a plan's lineage (:func:`cut`), recognising rows the driver already holds
(:func:`local_rows`), empty relations Spark's optimizer can prune (:func:`empty_frame`),
running an epoch's writes as concurrent jobs (:func:`run_all`), bringing several small
DataFrames to the driver in one job (:func:`collect_together`) and writing Parquet with
less fixed work per write (:func:`write_parquet`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import inheritable_thread_target
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from strata.physical.session import is_connect
from strata.queries.arrow import driver_rows
from strata.queries.arrow.rows import Rows, spark_type
from strata.queries.spark import dispatch
from strata.storage import fs

WRITE_THREADS = 4  # an epoch's writes run as this many concurrent Spark jobs at most


def struct_type(ddl: str) -> StructType:
    """The Spark schema of ``ddl``, the DDL of a struct's fields (``a int, b string``)."""
    schema = spark_type(ddl)
    if not isinstance(schema, StructType):
        raise TypeError(f"{ddl!r} is the DDL of a {schema.simpleString()}, not of fields")
    return schema


def ddl_of(schema: StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


def cut(source: DataFrame | Rows, try_driver: bool = True) -> tuple[Rows, int | None]:
    """``source`` computed now, as a relation without lineage, and its rows if counted.

    Up to ``spark.strata.query.driverRows`` rows (docs/configuration.md; an iteration
    step's changes usually are) come to the driver as Arrow and go back as a local
    relation: one small job, and the plans built on it stay shallow and cheap to
    schedule however many steps run. More rows are checkpointed on the executors
    instead. ``try_driver`` False checkpoints them without trying (the caller expects
    more: a try that finds too many rows computes them twice)."""
    held = Rows.of_frame(source)
    if held.is_held:
        return held, held.num_rows
    df = held.frame()
    most = dispatch.driver_rows(df.sparkSession)
    limited = df.coalesce(1).limit(most + 1)
    if is_connect(df.sparkSession):
        rows = local_rows(df)
    else:
        rows = _local_under_limit(limited)
        if rows is not None and rows > most:  # the limit may be folded into it
            rows = local_rows(df)
    if rows == 0:  # held as an empty table, so steps that follow can stay in Arrow
        return Rows.of_arrow(df.sparkSession,
                                 driver_rows.arrow_schema(df.schema).empty_table(),
                                 df.schema), 0
    if most > 0 and try_driver:
        table = limited.toArrow()
        if table.num_rows <= most:
            return Rows.of_arrow(df.sparkSession, table, df.schema), table.num_rows
    return Rows.of_frame(df.localCheckpoint(eager=True)), None


def _local_under_limit(limited: DataFrame) -> int | None:
    """The rows of the local relation under ``limited``'s limit and coalesce, if Spark's
    optimizer makes it one; else None. On classic Spark a cut optimizes the plan it
    then runs this way once, where asking :func:`local_rows` first optimized it twice."""
    plan = limited._jdf.queryExecution().optimizedPlan()
    while plan.getClass().getSimpleName() in ("GlobalLimit", "LocalLimit", "Repartition"):
        plan = plan.child()
    if plan.getClass().getSimpleName() == "LocalRelation":
        return plan.data().size()
    return None


def local_rows(rows: DataFrame | Rows) -> int | None:
    """How many rows ``df`` has if Spark's optimizer makes it a local relation (rows held
    by the driver, e.g. from :func:`cut`, filtered or projected); else None.

    Over Spark Connect the optimized plan is the server's: the client's own plan is
    read instead, which knows the rows of a local relation it sent (and that a
    projection or filter of no rows has none); anything else is None (not known),
    which costs the optimizations that use it, not correctness."""
    held = Rows.of_frame(rows)
    if held.is_held:
        return held.num_rows
    df = held.frame()
    if is_connect(df.sparkSession):
        return _connect_local_rows(df)
    plan = df._jdf.queryExecution().optimizedPlan()
    if plan.getClass().getSimpleName() == "LocalRelation":
        return plan.data().size()
    return None


def _connect_local_rows(df: DataFrame) -> int | None:
    from pyspark.sql.connect import plan as cp

    node = getattr(df, "_plan", None)
    passed = False  # went through a projection or filter
    while isinstance(node, cp.Project | cp.Filter | cp.WithColumns | cp.SubqueryAlias):
        node, passed = node._child, True
    table = getattr(node, "_table", None) if isinstance(node, cp.LocalRelation) else None
    if table is not None:
        rows = table.num_rows
        return rows if rows == 0 or not passed else None
    return None


def empty_frame(spark: SparkSession, ddl: str) -> Rows:
    """No rows of schema ``ddl``, held; as a frame, one Spark's optimizer knows to be
    empty (a local relation: joins with it are dropped from plans, unlike an empty RDD's)."""
    schema = struct_type(ddl)
    return Rows.of_arrow(spark, driver_rows.arrow_schema(schema).empty_table(), schema)


def run_all(spark: SparkSession, writes: Sequence[Callable[[], None]]) -> None:
    """Run an epoch's writes as concurrent Spark jobs (one thread each, up to
    ``WRITE_THREADS``), so that one job's planning, file commits and scheduling overlap
    another's tasks; they read the same cached DataFrames. Waits for all of them, then
    raises the first error (in the order given)."""
    if WRITE_THREADS <= 1 or len(writes) <= 1:
        for w in writes:
            w()
        return
    global _POOL
    if _POOL is None:  # threads kept between epochs: each has its own JVM connection
        _POOL = ThreadPoolExecutor(WRITE_THREADS, "strata-write")
    # each write inherits the caller's job group and description (Spark's local properties)
    inherit = inheritable_thread_target(spark)
    futures = [_POOL.submit(inherit(w)) for w in writes]
    wait(futures)
    for f in futures:
        f.result()


_POOL: ThreadPoolExecutor | None = None


def _nullable(schema: StructType) -> StructType:
    """``schema`` with every field, nested ones too, nullable."""
    return StructType([StructField(f.name, _nullable(f.dataType) if isinstance(
        f.dataType, StructType) else f.dataType, True) for f in schema.fields])


def collect_together(frames: Mapping[str, DataFrame], most: int) -> dict[str, pa.Table] | None:
    """The rows of each of ``frames`` as Arrow tables, brought to the driver by one Spark
    job instead of one job each: each frame's rows become a struct column of its own in
    one union (the others' columns NULL there), tagged by the frame; None if together they
    have more than ``most`` rows (then nothing is kept)."""
    names = list(frames)
    tagged = [df.select(F.lit(i).alias("_frame"), F.struct(
        *[F.col(f"`{c}`") for c in df.columns]).alias(f"_f{i}"))
              for i, df in enumerate(frames.values())]
    union = functools.reduce(
        lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)
    # every field nullable: a frame's struct is NULL in the others' rows, and PySpark
    # refuses NULLs under a field Spark declares non-nullable when it converts to Arrow
    table = union.to(_nullable(union.schema)).coalesce(1).limit(most + 1).toArrow()
    if table.num_rows > most:
        return None
    tag = table.column("_frame")
    out = {}
    for i, name in enumerate(names):
        rows = table.filter(pc.equal(tag, i)).column(f"_f{i}").combine_chunks()
        out[name] = pa.Table.from_struct_array(rows)
    return out


def write_parquet(df: DataFrame, path: str, partition_by: Sequence[str] = ()) -> None:
    """Write ``df`` as Parquet files into the new directory ``path`` through Spark's
    committer, with less fixed work per write (it shows in small epochs): no ``_SUCCESS``
    marker (a manifest says which files are live), and on a local filesystem no ``.crc``
    file per file. The directory and the committer's ``_temporary/0/_temporary`` are made
    here, because Hadoop's local filesystem (without its native library) starts a
    ``chmod`` process for every directory and file it creates."""
    fsys, p = fs.resolve(path)
    fsys.create_dir(f"{p}/_temporary/0/_temporary", recursive=True)
    writer = df.write.mode("append").option(
        "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
    if fs.is_local(path):
        writer = (writer.option("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
                  .option("fs.file.impl.disable.cache", "true"))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(path)
