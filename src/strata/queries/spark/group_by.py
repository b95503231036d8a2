"""A group-by's ``h`` and ``a`` as Spark DataFrame expressions, and a scan under maps as
SQL: the pieces of a query the Spark evaluator (:mod:`strata.queries.spark.evaluator`),
the vectorized route and iteration steps share."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from strata.queries.plan.algebra import Map, Node, Scan
from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import MULT, bind, to_sql
from strata.queries.plan.incremental import GroupPlan, answer_scope


def lift(plan: GroupPlan, d: DataFrame, by: Sequence[str] = (),
         extra: Sequence[Column] = ()) -> DataFrame:
    """``h``: the rows ``d`` (with ``_mult``) per group — ``_g``, a struct of the group's
    keys — as the group-by's monoid parts; per ``by`` columns of ``d`` too, and with the
    ``extra`` aggregates, if given."""
    key_cols = [F.expr(to_sql(e)).alias(n) for n, e in plan.node.keys] or [
        F.lit(0).alias("_t")]
    keyed = d.select(F.struct(*key_cols).alias("_g"), "*")
    group = [*by, "_g"]
    plain = [p for p in plan.parts if p.kind != "multiset"]
    h = keyed.groupBy(*group).agg(*[F.expr(p.lift).alias(p.name) for p in plain], *extra)
    for p in plan.parts:
        if p.kind != "multiset":
            continue
        v = (keyed.where(F.expr(f"{p.lift} IS NOT NULL"))
             .groupBy(*group, F.expr(p.lift).alias("_v")).agg(F.sum(MULT).alias("_c"))
             .where("_c <> 0")
             .groupBy(*group).agg(F.map_from_entries(F.collect_list(F.struct("_v", "_c")))
                                  .alias(p.name)))
        h = h.join(v, group, "left")
    return h


def row_exprs(node: Node) -> tuple[str | None, dict[str, str]]:
    """A scan under maps as SQL over the scan's columns: its filter and its columns."""
    if isinstance(node, Scan):
        return None, {c: f"`{c}`" for c in node.columns}
    if not isinstance(node, Map):
        raise QueryError(f"{node} is not a scan under filters and projections")
    where, defs = row_exprs(node.child)
    if node.where is not None:
        cond = bind(to_sql(node.where), defs)
        where = f"({where}) AND ({cond})" if where else cond
    if node.outputs is not None:
        defs = {n: bind(to_sql(e), defs) for n, e in node.outputs}
    return where, defs


def answer(plan: GroupPlan, merged: DataFrame, spark: SparkSession,
           carry: Sequence[str] = ()) -> DataFrame:
    """``a``: the group-by's output rows from merged parts (``HAVING`` applied; a total
    aggregate answers one row even over no rows, as SQL does), with the ``carry``
    columns of ``merged`` first."""
    node = plan.node
    if not node.keys and not carry:  # total: one group, present even when nothing was read
        one = spark.range(1).select(F.struct(F.lit(0).alias("_t")).alias("_g"))
        merged = one.join(merged, "_g", "left")
    scope = answer_scope(plan)
    keep = F.lit(True) if not node.keys else F.coalesce(F.col("_cnt"), F.lit(0)) != 0
    if node.having is not None:
        keep = keep & F.coalesce(F.expr(bind(to_sql(node.having), scope)), F.lit(False))
    return merged.where(keep).select(
        *carry, *[F.expr(bind(to_sql(e), scope)).alias(o) for o, e in node.outputs])
