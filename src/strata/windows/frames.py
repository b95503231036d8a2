"""A window epoch's records as Spark frames: the increment with its source, event time
and pane (:func:`increment_frame`), and the one pass that lifts them into cells, a
group's parts per (source, pane, group) (:func:`lifted_cells`). Both pane stores start
from these (``docs/windows.md``, "Panes"). A small increment is lifted by the driver in
Arrow instead (:func:`lifted_in_arrow`), by the query layer's Arrow backend.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from strata.physical import arrow_types
from strata.queries.arrow import Rows, Unsupported, arrow_expr, arrow_step, driver_rows
from strata.queries.spark import lift, row_exprs, struct_type
from strata.storage.increments import read_table
from strata.windows.query import WindowPlan
from strata.windows.rows import scan_prefix

STATS = (("_n", "_one", "sum"), ("_lo", "_t", "min"), ("_hi", "_t", "max"))


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


def lifted_in_arrow(plan: WindowPlan, spark: SparkSession, files: Sequence[str],
                    floor: int | None) -> pa.Table | None:
    """:func:`lifted_cells` with ``stats`` (``keep``: panes from ``floor`` on) of the
    increment in ``files``, computed by the driver in Arrow; None where Arrow cannot
    (an expression or type it does not evaluate here, a sum that overflows), and the
    caller runs Spark's plan."""
    assert plan.group is not None
    schema = struct_type(", ".join(f"`{c}` {t}" for c, t in plan.columns.items()))
    table = read_table(files, driver_rows.arrow_schema(schema))
    assert table is not None
    if "_mult" not in table.column_names:
        table = table.append_column("_mult", pa.repeat(pa.scalar(1, pa.int64()),
                                                        table.num_rows))
    try:
        t, src = _event_time(plan, table), _source(plan, table)
        pane = _floor_div(t, plan.width)
        prefix = scan_prefix(plan.group.node.child)
        named = table.rename_columns([c if c == "_mult" else prefix + c
                                      for c in table.column_names])
        where, defs = row_exprs(plan.group.node.child)
        passes = (pc.fill_null(arrow_expr.evaluate(where, named)[0], False) if where
                  else pa.repeat(pa.scalar(True), table.num_rows))
        if floor is not None:
            passes = pc.and_(passes, pc.greater_equal(pane, floor))
    except Unsupported:
        return None
    values = {}
    for n, sql in defs.items():  # those Arrow cannot evaluate only fail the lift if it uses them
        try:
            v = arrow_expr.evaluate_all({n: sql}, named).column(0)
        except Unsupported:
            continue
        values[n] = pc.if_else(passes, v, pa.scalar(None, v.type))
    d = pa.table({**values, "_mult": table.column("_mult"), "_src": src, "_pane": pane,
                  "_t": t, "_pass": passes,
                  "_one": pa.repeat(pa.scalar(1, pa.int64()), table.num_rows)})
    rows = Rows.of_arrow(spark, d, arrow_types.spark_schema(d.schema))
    got = arrow_step.lifted(plan.group, rows, by=("_src", "_pane", "_pass"), extra=STATS)
    return None if got is None else got.arrow()


def _event_time(plan: WindowPlan, table: pa.Table) -> pa.Array:
    """The event time in the column's units, as ``plan.time_sql`` computes it."""
    column = table.column(plan.query.time).combine_chunks()
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", column.type.tz))
    return column.cast(pa.int64())


def _source(plan: WindowPlan, table: pa.Table) -> pa.Array:
    """Each record's source as a string, as Spark casts it."""
    if plan.one_source:
        return pa.repeat(pa.scalar(plan.query.flow), table.num_rows)
    column = table.column(plan.query.source).combine_chunks()
    if not (pa.types.is_string(column.type) or pa.types.is_integer(column.type)):
        raise Unsupported(f"a source of type {column.type}")
    return column.cast(pa.string())


def _floor_div(t: pa.Array, width: int) -> pa.Array:
    """``floor(t / width)`` in whole numbers."""
    q = pc.divide(t, width)  # truncates toward zero
    below = pc.and_(pc.less(t, 0), pc.not_equal(pc.multiply(q, width), t))
    return pc.if_else(below, pc.subtract(q, 1), q)
