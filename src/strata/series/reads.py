"""What a series epoch reads: its segments' views as Spark frames, and the views of an
occurrence's window, wherever each is (``docs/series.md``, "How it runs")."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from strata.queries.arrow import Rows
from strata.queries.spark import QueryTables
from strata.series.evaluate import jumbo_branch, view_of_segment
from strata.series.normalize import View
from strata.series.stored import SEGMENT, branch_rows, read_segment, spark_schema
from strata.storage.increments import Increment

Fresh = Mapping[tuple[str, int], tuple[View, Rows]]  # (view, segment) -> its rows now


def segment_frames(spark: SparkSession, segments: Mapping[int, Increment],
                   columns: Mapping[str, str], wanted: Mapping[tuple[str, int], View],
                   uses: Mapping[tuple[str, int], int], cached: list[DataFrame]
                   ) -> dict[tuple[str, int], tuple[View, Rows]]:
    """The ``wanted`` views of ``segments`` (whose columns are ``columns``) as Spark
    plans; a partial view used twice is cached (into ``cached``). Each reads its
    segment's columns itself: a cached segment is read back in full, which costs more
    than a pruned Parquet scan of the few columns a view needs."""
    scans: dict[int, DataFrame] = {}
    for _, j in wanted:
        if j not in scans:
            scans[j] = read_segment(spark, segments[j], columns)
    frames = {}
    for key, v in wanted.items():
        d = view_of_segment(v, scans[key[1]])
        if uses[key] > 1 and v.kind == "partial":  # rows: a pruned scan is cheaper
            d = d.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(d)
        frames[key] = (v, Rows.of_frame(d))
    return frames


def read_views(spark: SparkSession, tables: QueryTables, stored: Mapping[str, Mapping[str, dict]],
               fresh: Fresh, columns: Mapping[str, str], view: View, window: range
               ) -> DataFrame:
    """The views of ``window``: computed this epoch (``fresh``), in the view's co-located
    table, or in a segment's jumbo pass (none: the view over no rows)."""
    fp = view.fingerprint
    parts = [fresh[(fp, j)][1].frame() for j in window if (fp, j) in fresh]
    entries = {j: stored[fp][str(j)] for j in window if (fp, j) not in fresh}
    in_table = [j for j, e in entries.items() if "branch" not in e and e["files"]]
    table = tables.read(fp) if in_table else None
    if table is not None:
        parts.append(table.where(F.col(SEGMENT).isin(in_table)).drop(SEGMENT))
    parts += [jumbo_branch(view, e["branch"], branch_rows(spark, e))
              for e in entries.values() if "branch" in e and e["files"]]
    if not parts:
        return view_of_segment(view, spark.createDataFrame([], spark_schema(columns)))
    return functools.reduce(lambda a, b: a.unionByName(b), parts)


def view_schema(spark: SparkSession, columns: Mapping[str, str], view: View,
                staged: bool, known: dict) -> StructType:
    """The Spark schema of ``view``'s rows over a stream of ``columns`` (``staged``: as
    staged into its table, with the segment's number), from the Spark plan over no
    rows; kept in ``known``."""
    key = (view.fingerprint, staged)
    if key not in known:
        d = view_of_segment(view, spark.createDataFrame([], spark_schema(columns)))
        known[key] = (d.withColumn(SEGMENT, F.lit(1)) if staged else d).schema
    return known[key]
