"""The pane store on the executors: cells as Parquet beside Spark's partitions, windows
answered by Spark jobs (``docs/windows.md``, "Where the panes live").

With ``spark.strata.window.store`` at ``executors`` (or ``auto`` and a first epoch too
big for the driver), a window stage's driver keeps only what is small — per (source,
pane) record counts and progress, each window spec's frontier, the emitted windows' C2
scoreboards — and never a group:

* each epoch's lift ``h`` (a row per source, pane and group, its parts as columns) is
  written by Spark into ``cells-<epoch>-<attempt>/``;
* the windows due this epoch are answered in one Spark job: the cells of their panes
  are read, each joined to the windows it belongs to (a small broadcast mapping), merged
  per window and group (sums add, ``min``/``max`` take the least/greatest, multisets add
  multiplicities), answered with ``a`` and written, with their C2 summaries, into
  ``results-<epoch>-<attempt>.rows/`` — the rows as emitted, kept while the window may
  be refined;
* a second, light job writes them as changes to the query's flow: inserted, and where a
  window is refined, its rows as emitted before (read back, exactly) retracted and
  netted against the new ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from strata.model.schema import parse_ddl
from strata.queries.programs import output_ddl
from strata.queries.spark import answer, struct_type, write_parquet
from strata.storage import fs
from strata.storage.increments import Increment, write_table, written_increment
from strata.windows.outputs import window_bounds
from strata.windows.panes import WindowId, window_panes
from strata.windows.query import WindowPlan

_MERGES = {"add": F.sum, "least": F.min, "greatest": F.max}


def cells_dir(directory: str, epoch: int, token: str) -> str:
    return fs.join(directory, f"cells-{epoch:08d}-{token}")


def rows_dir(results_file: str) -> str:
    """Where the windows a results file names keep their rows as emitted."""
    return results_file.removesuffix(".parquet") + ".rows"


def write_cells(lifted: DataFrame, path: str) -> None:
    """Write an epoch's cells (the lift per source, pane and group) into ``path``."""
    write_parquet(lifted, path)


def answer_windows(spark: SparkSession, plan: WindowPlan, cells_schema: Any,
                   cells: Sequence[str], windows: Mapping[WindowId, Mapping[str, Any]],
                   rows_path: str) -> None:
    """Write the results of ``windows`` (each with its C2 summary columns) into
    ``rows_path``: one Spark job over ``cells``, the cell directories holding their
    panes."""
    assert plan.group is not None
    ids = list(windows)
    panes = [p for w in ids for p in window_panes(w)]
    read = (spark.read.schema(cells_schema).parquet(*cells) if cells
            else spark.createDataFrame([], cells_schema))
    read = read.where(F.col("_pane").between(min(panes), max(panes)))
    mapping = spark.createDataFrame(pa.table({
        "_w": [i for i, w in enumerate(ids) for _ in window_panes(w)], "_pane": panes},
        schema=pa.schema([("_w", pa.int64()), ("_pane", pa.int64())])))
    joined = read.join(F.broadcast(mapping), "_pane").drop("_src", "_pane")
    if not plan.group.node.keys:  # a total answers over no rows: a zero row per window
        zero = spark.range(len(ids)).select(
            F.col("id").alias("_w"), F.struct(F.lit(0).alias("_t")).alias("_g"),
            *[(F.lit(0) if p.name == "_cnt" else F.lit(None)).cast(
                read.schema[p.name].dataType).alias(p.name) for p in plan.group.parts])
        joined = joined.unionByName(zero)
    rows = answer(plan.group, _merged(plan, joined), spark, carry=("_w",))
    out = rows.join(F.broadcast(_bounds(spark, plan, windows)), "_w")
    write_parquet(out.select(*_result_casts(plan)), rows_path)


def write_changes(spark: SparkSession, plan: WindowPlan, rows_path: str,
                  refined: Mapping[WindowId, str], out_dir: str) -> Increment:
    """The flow's changes into ``out_dir``: the rows in ``rows_path`` inserted, and the
    ``refined`` windows' rows as emitted before (window → its rows' directory)
    retracted, netted against them."""
    columns = plan.result_columns()
    ddl = ", ".join(f"`{c}` {t}" for c, t in columns.items())
    out = spark.read.schema(struct_type(ddl)).parquet(rows_path).withColumn(
        "_mult", F.lit(1).cast("bigint"))
    if refined:
        bounds = spark.createDataFrame(pa.Table.from_pylist(
            [window_bounds(plan, w) for w in refined],
            parse_ddl(output_ddl({c: columns[c] for c in ("window_start", "window_end")})
                      ).remove(2)))
        old = (spark.read.schema(struct_type(ddl)).parquet(*sorted(set(refined.values())))
               .join(F.broadcast(bounds), ["window_start", "window_end"], "left_semi")
               .withColumn("_mult", F.lit(-1).cast("bigint")))
        out = _netted(out.unionByName(old), list(columns))
    write_parquet(out, out_dir)
    written = written_increment(out_dir)
    if not written.files:
        empty = pa.Table.from_pylist([], parse_ddl(output_ddl(columns)))
        write_table(fs.join(out_dir, "part-00000.parquet"), empty)
    return written_increment(out_dir)


def _result_casts(plan: WindowPlan) -> list[Any]:
    return [F.col(f"`{c}`").cast(t).alias(c) for c, t in plan.result_columns().items()]


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


def _bounds(spark: SparkSession, plan: WindowPlan,
            windows: Mapping[WindowId, Mapping[str, Any]]) -> DataFrame:
    """A row per window: its index, bounds and C2 summary columns."""
    columns = plan.result_columns()
    names = ["window_start", "window_end", *next(iter(windows.values()))]
    fields = parse_ddl(output_ddl({c: columns[c] for c in names}))
    rows = [{"_w": i, **window_bounds(plan, w), **summary}
            for i, (w, summary) in enumerate(windows.items())]
    schema = pa.schema([("_w", pa.int64()), *(fields.field(n) for n in names)])
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema))


def _netted(out: DataFrame, columns: list[str]) -> DataFrame:
    """Changes netted: a row retracted and inserted again goes out as neither."""
    summed = (out.groupBy(*[F.col(f"`{c}`") for c in columns])
              .agg(F.sum("_mult").alias("_n")).where("_n <> 0"))
    return summed.select(*[F.col(f"`{c}`") for c in columns],
                         F.explode(F.sequence(F.lit(1), F.abs("_n"))).alias("_k"),
                         F.signum("_n").cast("bigint").alias("_mult")).drop("_k")
