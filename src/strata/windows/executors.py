"""The pane store on the executors: cells as Parquet beside Spark's partitions, windows
answered by Spark jobs (``docs/windows.md``, "Where the panes live").

With ``spark.strata.window.store`` at ``executors`` (or ``auto`` and a first epoch too
big for the driver), a window stage's driver keeps only what is small — per (source,
pane) record counts and progress, each window spec's frontier, the emitted windows' C2
scoreboards — and never a group:

* each epoch's lift ``h`` (a row per source, pane and group, its parts as columns) is
  written by Spark into ``cells-<epoch>-<attempt>/``, with the epoch ``_e`` that
  aggregated it;
* the windows due this epoch are answered in one Spark job: the cells of their panes
  are read, each joined to the windows it belongs to (a small broadcast mapping), merged
  per window and group (sums add, ``min``/``max`` take the least/greatest, multisets add
  multiplicities), answered with ``a`` and written to the query's flow with their C2.

A refined window's old result is not kept either: it is the same job over the cells of
epochs up to the one that emitted it (``_e`` ≤ that epoch), retracted (``_mult`` −1)
beside the new one and netted against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from strata.model.schema import parse_ddl
from strata.queries.programs import output_ddl
from strata.queries.spark import answer, write_parquet
from strata.storage import fs
from strata.storage.increments import Increment, row_count, write_table
from strata.windows.outputs import time_of
from strata.windows.panes import WindowId, window_panes
from strata.windows.query import WindowPlan

EPOCH = "_e"  # the column of a cell naming the epoch that aggregated it
_MERGES = {"add": F.sum, "least": F.min, "greatest": F.max}


@dataclass(frozen=True)
class Version:
    """One result of a window to compute: ``sign`` +1 (its result now) or −1 (the
    result emitted before, from the cells of epochs up to ``upto``), with the C2 summary
    columns it goes out with."""

    window: WindowId
    sign: int
    upto: int
    summary: Mapping[str, Any]


def cells_dir(directory: str, epoch: int, token: str) -> str:
    return fs.join(directory, f"cells-{epoch:08d}-{token}")


def write_cells(lifted: DataFrame, path: str, epoch: int) -> None:
    """Write an epoch's cells (the lift per source, pane and group) into ``path``."""
    write_parquet(lifted.withColumn(EPOCH, F.lit(epoch).cast("bigint")), path)


def rows_in(path: str) -> int:
    """The rows of the Parquet files Spark wrote into ``path`` (from their footers)."""
    return sum(row_count(f) for f in _parts(path))


def _parts(path: str) -> list[str]:
    return [fs.join(path, f) for f in sorted(fs.list_dir(path)) if f.startswith("part-")]


def answer_windows(spark: SparkSession, plan: WindowPlan, cells_schema: Any,
                   cell_dirs: Mapping[str, Sequence[int]], directory: str,
                   versions: Sequence[Version], out_dir: str) -> Increment:
    """Write the results of ``versions`` as changes into ``out_dir``: one Spark job
    over the cells of their panes (``cell_dirs``: name under ``directory`` → [lowest,
    highest] pane)."""
    assert plan.group is not None
    panes = {p for v in versions for p in window_panes(v.window)}
    lo, hi = min(panes), max(panes)
    dirs = [fs.join(directory, d) for d, (a, b) in sorted(cell_dirs.items())
            if a <= hi and b >= lo]
    schema = StructType([*cells_schema.fields, StructField(EPOCH, LongType())])
    cells = (spark.read.schema(schema).parquet(*dirs) if dirs
             else spark.createDataFrame([], schema))
    cells = cells.where(F.col("_pane").between(lo, hi))
    mapping = spark.createDataFrame(pa.table({
        "_w": [i for i, v in enumerate(versions) for _ in window_panes(v.window)],
        "_pane": [p for v in versions for p in window_panes(v.window)],
        "_upto": [v.upto for v in versions for _ in window_panes(v.window)]},
        schema=pa.schema([("_w", pa.int64()), ("_pane", pa.int64()), ("_upto", pa.int64())])))
    joined = (cells.join(F.broadcast(mapping), "_pane").where(F.col(EPOCH) <= F.col("_upto"))
              .drop("_src", "_pane", EPOCH, "_upto"))
    if not plan.group.node.keys:  # a total answers over no rows: a zero row per window
        zero = spark.range(len(versions)).select(
            F.col("id").alias("_w"), F.struct(F.lit(0).alias("_t")).alias("_g"),
            *[(F.lit(0) if p.name == "_cnt" else F.lit(None)).cast(
                cells.schema[p.name].dataType).alias(p.name) for p in plan.group.parts])
        joined = joined.unionByName(zero)
    rows = answer(plan.group, _merged(plan, joined), spark, carry=("_w",))
    out = rows.join(F.broadcast(_bounds(spark, plan, versions)), "_w")
    columns = plan.result_columns()
    out = out.select(*[F.col(f"`{c}`").cast(t).alias(c) for c, t in columns.items()],
                     F.col("_sign").cast("bigint").alias("_mult"))
    if any(v.sign < 0 for v in versions):
        out = _netted(out, list(columns))
    write_parquet(out, out_dir)
    files = _parts(out_dir)
    if not files:
        empty = pa.Table.from_pylist([], parse_ddl(output_ddl(columns)))
        files = [fs.join(out_dir, "part-00000.parquet")]
        write_table(files[0], empty)
    return Increment(tuple(files), sum(map(row_count, files)), sum(map(fs.size_of, files)))


def _merged(plan: WindowPlan, cells: DataFrame) -> DataFrame:
    """The cells merged per window and group: each part by its kind."""
    assert plan.group is not None
    by = ["_w", "_g"]
    plain = [p for p in plan.group.parts if p.kind != "multiset"]
    out = cells.groupBy(*by).agg(*[_MERGES[p.kind](p.name).alias(p.name) for p in plain])
    for p in plan.group.parts:
        if p.kind != "multiset":
            continue
        bag = (cells.select(*by, F.explode(p.name).alias("_v", "_c"))
               .groupBy(*by, "_v").agg(F.sum("_c").alias("_c")).where("_c <> 0")
               .groupBy(*by).agg(F.map_from_entries(F.collect_list(F.struct("_v", "_c")))
                                 .alias(p.name)))
        out = out.join(bag, by, "left")
    return out


def _bounds(spark: SparkSession, plan: WindowPlan, versions: Sequence[Version]
            ) -> DataFrame:
    """A row per version: its id, sign, window bounds and C2 summary columns."""
    columns = plan.result_columns()
    names = ["window_start", "window_end", *versions[0].summary]
    fields = parse_ddl(output_ddl({c: columns[c] for c in names}))
    width, at = plan.width, time_of(plan)
    rows = [{"_w": i, "_sign": v.sign, "window_start": at(v.window[0] * width),
             "window_end": at((v.window[0] + v.window[1]) * width), **v.summary}
            for i, v in enumerate(versions)]
    schema = pa.schema([("_w", pa.int64()), ("_sign", pa.int64()),
                        *(fields.field(n) for n in names)])
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema))


def _netted(out: DataFrame, columns: list[str]) -> DataFrame:
    """Changes netted: a row retracted and inserted again goes out as neither."""
    summed = (out.groupBy(*[F.col(f"`{c}`") for c in columns])
              .agg(F.sum("_mult").alias("_n")).where("_n <> 0"))
    return summed.select(*[F.col(f"`{c}`") for c in columns],
                         F.explode(F.sequence(F.lit(1), F.abs("_n"))).alias("_k"),
                         F.signum("_n").cast("bigint").alias("_mult")).drop("_k")
