"""Window functions (``f(…) OVER (PARTITION BY … ORDER BY …)``): their changes in an
epoch as Spark plans.

A window function's value for a row depends on the other rows of its partition, so a
new row can change the values of every row of its partition. The operator keeps its
input's rows (table ``window<i>``, appended each epoch and netted now and then) and, for
each partition the epoch's changes touch, emits the window over the partition's rows
after the epoch as inserts and the window over its rows before as deletes; rows whose
values did not change cancel out when the two are netted. Work is in proportion to the
touched partitions' rows (a query without ``PARTITION BY`` has one partition: every
epoch reads all of it). A row present ``k`` times counts as ``k`` rows.

Retracting exactly what an earlier epoch emitted needs the same values from the same
rows every time, so functions that number rows in order (``row_number``, ``lag``, …, a
``ROWS`` frame) order ties by every column of the row after the query's own order:
rows equal in every column are interchangeable (the SQL front end adds that order,
:func:`strata.queries.front.sql_rows.deterministic`).
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.queries.plan.algebra import Windowed
from strata.queries.plan.expressions import MULT, to_sql

if TYPE_CHECKING:
    from strata.queries.plan.incremental import WindowPlan
    from strata.queries.spark.tables import QueryTables


class Run(Protocol):
    """What a window's changes need of the epoch's evaluator (an
    :class:`~strata.queries.spark.evaluator.Evaluator`): its tables, and computing a plan
    once."""

    @property
    def tables(self) -> QueryTables: ...

    def materialize(self, df: DataFrame) -> DataFrame: ...


def over_rows(node: Windowed, rows: DataFrame) -> DataFrame:
    """``rows`` (the child's columns) with ``node``'s window columns."""
    return rows.select(*[F.col(f"`{c}`") for c in node.child.columns],
                       *[F.expr(to_sql(e)).alias(n) for n, e in node.outputs])


def netted(rows: DataFrame) -> DataFrame:
    """``rows`` with equal rows' multiplicities summed, rows that cancel out dropped."""
    cols = [c for c in rows.columns if c != MULT]
    return (rows.groupBy(*[F.col(f"`{c}`") for c in cols]).agg(F.sum(MULT).alias(MULT))
            .where(f"{MULT} <> 0").select(*[F.col(f"`{c}`") for c in rows.columns]))


def _windowed(node: Windowed, rows: DataFrame, sign: int) -> DataFrame:
    """The window over netted ``rows`` (each row ``_mult`` times), each output row with
    ``_mult`` = ``sign``."""
    cols = [F.col(f"`{c}`") for c in node.child.columns]
    copies = rows.where(F.col(MULT) > 0).select(
        *cols, F.explode(F.sequence(F.lit(1).cast("bigint"), F.col(MULT))).alias("_copy"))
    return over_rows(node, copies).withColumn(MULT, F.lit(sign).cast("bigint"))


def changes(run: Run, plan: WindowPlan, delta: DataFrame) -> DataFrame:
    """The changes of window operator ``plan`` given its input's changes ``delta``;
    stages ``delta`` into its table."""
    node, tables = plan.node, run.tables
    delta = delta.select(*[F.col(f"`{c}`") for c in node.child.columns], F.col(MULT))
    stored = tables.read(plan.name)
    before = None
    if stored is not None:
        before = stored
        if node.partition:  # the touched partitions' rows (NULL is a partition too)
            touched = delta.select(*[F.col(f"`{k}`") for k in node.partition]).distinct()
            same = functools.reduce(operator.and_, [
                F.col(f"s.`{k}`").eqNullSafe(F.col(f"t.`{k}`")) for k in node.partition])
            before = stored.alias("s").join(F.broadcast(touched.alias("t")), same,
                                            "left_semi")
        before = run.materialize(netted(before))
    after = netted(delta if before is None else before.unionByName(delta))
    out = _windowed(node, after, 1)
    if before is not None:
        out = out.unionByName(_windowed(node, before, -1))
    if stored is not None and tables.needs_compaction(plan.name, bucketed=False):
        tables.stage(plan.name, netted(stored.unionByName(delta)), [], "replace")
    else:
        tables.stage(plan.name, delta, [], "append")
    return run.materialize(netted(out))
