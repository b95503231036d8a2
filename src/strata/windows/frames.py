"""A window epoch's records as Spark frames: the increment with its source, event time
and pane (:func:`increment_frame`), and the one pass that lifts them into cells, a
group's parts per (source, pane, group) (:func:`lifted_cells`). Both pane stores start
from these (``docs/windows.md``, "Panes")."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from strata.queries.spark import lift, row_exprs, struct_type
from strata.windows.query import WindowPlan
from strata.windows.rows import scan_prefix


def increment_frame(plan: WindowPlan, spark: SparkSession, files: list[str]) -> DataFrame:
    """The increment's records with ``_src``, ``_t`` (event time in units), ``_pane``
    and ``_mult``."""
    # the flow's schema, as its increments are written: no footers read to infer it
    schema = struct_type(", ".join(f"`{c}` {t}" for c, t in plan.columns.items()))
    d = spark.read.schema(schema).parquet(*files) if files else spark.createDataFrame(
        [], schema)
    if "_mult" not in d.columns:
        d = d.withColumn("_mult", F.lit(1).cast("bigint"))
    t = F.expr(plan.time_sql)
    src = F.lit(plan.query.flow) if plan.one_source else F.col(
        f"`{plan.query.source}`").cast("string")
    return d.select("*", src.alias("_src"),
                    t.alias("_t"), F.floor(t / F.lit(plan.width)).alias("_pane"))


def lifted_cells(plan: WindowPlan, frame: DataFrame, keep: str | None = None,
                 stats: bool = False) -> DataFrame:
    """The only pass over records: ``h`` per (source, pane, group) of the rows the
    query's filter and ``keep`` pass. With ``stats``, all rows are aggregated, those
    not passing in groups of their own (``_pass`` false), and each group also counts
    its records (``_n``) and their earliest and latest event times."""
    assert plan.group is not None
    node = plan.group.node
    where, defs = row_exprs(node.child)
    prefix = scan_prefix(node.child)
    if prefix:
        frame = frame.select(*[F.col(f"`{c}`").alias(prefix + c) for c in plan.columns
                               if c != "_mult"], "_mult", "_src", "_pane", "_t")
    cond = " AND ".join(f"({c})" for c in (where, keep) if c)
    if not stats:
        d = frame.where(F.expr(cond)) if cond else frame
        d = d.select(*[F.expr(sql).alias(n) for n, sql in defs.items()], "_mult",
                     "_src", "_pane")
        return lift(plan.group, d, by=("_src", "_pane"))
    passes = F.coalesce(F.expr(cond), F.lit(False)) if cond else F.lit(True)
    d = frame.select(*[(F.when(passes, F.expr(sql)) if cond else F.expr(sql)).alias(n)
                       for n, sql in defs.items()], "_mult", "_src", "_pane", "_t",
                     passes.alias("_pass"))
    return lift(plan.group, d, by=("_src", "_pane", "_pass"), extra=[
        F.count(F.lit(1)).alias("_n"), F.min("_t").alias("_lo"), F.max("_t").alias("_hi")])
