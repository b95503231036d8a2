"""Bucketed Parquet tables on storage, and the newest version of each group in them.

A query's state tables are bucketed by their lineage keys as Spark's ``bucketBy`` buckets
them (``pmod(murmur3(lineage), n)``), so that a join or grouping on the keys reads them
where they lie, without a shuffle (docs/architecture.md, "Query state: bucketed tables"):
:func:`write_bucketed` writes them with Spark, :func:`write_buckets` from rows the driver
holds, :func:`read_bucketed` reads them back as a bucketed table. A versioned group-by
table holds several rows per group, each stamped with the epoch that wrote it;
:func:`latest_frame`, :func:`latest_arrow` and :func:`latest_records` keep each group's
newest (docs/architecture.md, "Group state by the change"). :mod:`strata.queries.spark.
tables` owns the tables of a stage and its epoch's writes.
"""

from __future__ import annotations

import hashlib
import uuid
import weakref
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from strata.physical.session import default_parallelism, is_connect
from strata.queries.arrow import driver_rows
from strata.queries.spark.frames import write_parquet
from strata.storage import fs
from strata.storage.increments import write_table

BUCKET = "_strata_bucket"  # the partition column a bucketed table's write is split by
VERSION = "_v"  # the epoch that wrote a versioned table's row
COUNT = "_cnt"  # a group's record count: 0 in a tombstone


def _registered(spark: SparkSession) -> set[str]:
    """The strata tables this Spark application's catalog already has (registering one is
    a catalog round trip per epoch otherwise; a catalog is shared by the sessions of one
    application, that is of one SparkContext). A Spark Connect session has no
    SparkContext here: its tables are remembered per session."""
    owner: object = spark if is_connect(spark) else spark.sparkContext
    return _REGISTERED.setdefault(owner, set())


_REGISTERED: weakref.WeakKeyDictionary[object, set[str]] = weakref.WeakKeyDictionary()


def write_buckets(table: pa.Table, bucket: pa.Array | pa.ChunkedArray, path: str,
                   cache: bool = False) -> list[str]:
    """Write ``table``'s rows into ``path``, one file per value of ``bucket`` (each row's
    bucket), named as ``bucketBy`` names a bucket's files; the files, by bucket. With
    ``cache``, each file's rows are kept in the driver's file cache as written."""
    files = []
    for b in sorted(pc.unique(bucket).to_pylist()):
        uri = fs.join(path, f"part-00000-{uuid.uuid4().hex[:12]}_{b:05d}.c000.parquet")
        write_table(uri, table.filter(pc.equal(bucket, b)), cache)
        files.append(uri)
    return files


def bucket_of(lineage: Sequence[str], n: int) -> Column:
    """A row's bucket as Spark's ``bucketBy`` computes it: ``pmod(murmur3(lineage), n)``."""
    cols = ", ".join(f"`{c}`" for c in lineage)
    return F.expr(f"pmod(hash({cols}), {n})")


def write_bucketed(spark: SparkSession, df: DataFrame, bucket: Column, path: str, n: int,
                   split: str | None = None) -> dict[str, list[str]]:
    """Write ``df`` as the files of tables bucketed into ``n`` buckets: one table, or with
    ``split`` one per value of that column (in ``<split>=<value>/``, as ``partitionBy``
    lays them out). The files of each table (keyed ``""``, or by its directory's name).

    A row's bucket is ``bucket`` (:func:`bucket_of` of the table's lineage, the expression
    behind ``bucketBy``), written as a partition column: each bucket's files land in their
    own directory and are moved up and renamed with the bucket number as ``bucketBy``
    names them (``part-…_00003.c000.snappy.parquet``), which is how a bucketed scan
    assigns files to buckets. Unlike ``bucketBy`` (which writes only through
    ``saveAsTable``) this needs no catalog table per write. The rows stay in the
    partitions they were computed in (no shuffle), in at most one task per core."""
    tasks = max(1, min(n, default_parallelism(spark)))
    write_parquet(df.withColumn(BUCKET, bucket).coalesce(tasks), path,
                  [split, BUCKET] if split else [BUCKET])
    tops = [""] if split is None else [d for d in fs.list_dir(path) if d.startswith(f"{split}=")]
    out = {}
    for top in tops:
        table = fs.join(path, top) if top else path
        files = []
        for d in fs.list_dir(table):
            if not d.startswith(f"{BUCKET}="):
                continue
            b = int(d.split("=", 1)[1])
            for f in fs.list_dir(fs.join(table, d)):
                if f.startswith("part-"):
                    stem, ext = f.split(".", 1)
                    dst = fs.join(table, f"{stem}_{b:05d}.{ext}")
                    fs.move(fs.join(table, d, f), dst)
                    files.append(dst)
            fs.delete_quietly(fs.join(table, d))
        out[top] = sorted(files)
    return out


def read_bucketed(spark: SparkSession, location: str, ddl: str, lineage: Sequence[str],
                  n: int, changing: bool = True) -> DataFrame:
    """The files in directory ``location`` (columns ``ddl``, written bucketed by
    ``lineage`` into ``n`` buckets) as a bucketed table: Spark reads it partitioned by
    ``lineage``, so a join or grouping on it does not shuffle it. Registered once per
    Spark application as ``CLUSTERED BY (lineage) INTO n BUCKETS`` at ``location``; a
    ``changing`` directory (one whose files an epoch replaces) is listed again."""
    ident = "strata_" + hashlib.sha1(
        f"{location}|{ddl}|{'|'.join(lineage)}|{n}".encode()).hexdigest()[:20]
    registered = _registered(spark)
    if ident not in registered:
        cols = ", ".join(f"`{c}`" for c in lineage)
        spark.sql(f"CREATE TABLE IF NOT EXISTS {ident} ({ddl}) USING parquet "
                  f"CLUSTERED BY ({cols}) INTO {n} BUCKETS LOCATION '{location}'")
        registered.add(ident)
    if changing:
        spark.catalog.refreshTable(ident)  # its files changed since Spark listed them
    return spark.table(ident)


# -- the newest version of each group -----------------------------------------------------
def latest_frame(df: DataFrame) -> DataFrame:
    """The newest row of each ``_g`` of versioned rows ``df`` (rows written whole carry no
    version and are the oldest), tombstones dropped, without ``_v``. Over a table bucketed
    by ``_g`` the grouping needs no shuffle."""
    others = [c for c in df.columns if c not in ("_g", VERSION)]
    newest = F.max_by(F.struct(*[F.col(f"`{c}`") for c in others]),
                      F.coalesce(F.col(VERSION), F.lit(-1)))
    return (df.groupBy("_g").agg(newest.alias("_r"))
            .select("_g", *[F.col(f"_r.`{c}`").alias(c) for c in others])
            .where(F.col(COUNT) != 0))


def latest_arrow(table: pa.Table) -> pa.Table | None:
    """:func:`latest_frame` in Arrow; None if a key column's type cannot be grouped here."""
    g = table.column("_g").combine_chunks()
    keys = {f"__k{i}": pc.struct_field(g, [i]) for i in range(g.type.num_fields)}
    if not all(driver_rows.groupable(k.type) for k in keys.values()):
        return None
    order = pc.sort_indices(pc.fill_null(table.column(VERSION), -1))
    newest = pa.table({**{k: v.take(order) for k, v in keys.items()},
                       "__i": order}).group_by(list(keys), use_threads=False).aggregate(
        [("__i", "last")])
    out = table.take(newest.column("__i_last")).drop_columns([VERSION])
    return out.filter(pc.not_equal(out.column(COUNT), 0))


def latest_records(rows: Sequence[dict], key: Callable[[dict], object]) -> list[dict]:
    """:func:`latest_frame` over rows read as dicts (``key`` makes a row's ``_g``
    hashable)."""
    newest: dict[object, dict] = {}
    for r in sorted(rows, key=lambda r: -1 if r.get(VERSION) is None else r[VERSION]):
        newest[key(r)] = r
    return [{k: v for k, v in r.items() if k != VERSION}
            for r in newest.values() if r.get(COUNT) != 0]
