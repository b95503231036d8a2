"""A left join's NULL-padded rows: their changes in an epoch, as a Spark plan and in Arrow.

The evaluator joins the epoch's changes with the stored inputs as for an inner join
(:mod:`strata.queries.spark.evaluator`); a left join adds the changes of the left rows that
match no right row. For each join key the epoch touches, the net count of right rows
before and after the epoch (deletes subtract) says whether the key's left rows gain
their padding (the count falls to 0) or lose it (it rises from 0):

    Δpadded = L × ([no R row now] − [no R row before]) + ΔL × [no R row now]

restricted to the touched keys, plus the new left rows whose key has a NULL (they match
nothing, ever). Work is in proportion to the rows of the touched keys, as the matched
pairs' is (docs/architecture.md, "Query state: bucketed tables").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.queries.arrow import driver_rows
from strata.queries.plan.algebra import Join
from strata.queries.plan.expressions import MULT


def padded(node: Join, dl: DataFrame, dr: DataFrame, unkeyed: DataFrame,
           left: DataFrame | None, right: DataFrame | None, lineage: list[str]
           ) -> DataFrame:
    """Δpadded of left join ``node`` as a Spark plan: ``dl`` and ``dr`` are the epoch's
    changes with their lineage columns (rows with a NULL key are ``unkeyed``), ``left``
    and ``right`` the stored inputs (None when empty)."""
    touched = dl.select(*lineage).unionByName(dr.select(*lineage)).distinct()
    change = dr.groupBy(*lineage).agg(F.sum(MULT).alias("_dc"))
    counts = touched.join(change, lineage, "left")
    if right is not None:
        before = (right.join(touched, lineage, "left_semi").groupBy(*lineage)
                  .agg(F.sum(MULT).alias("_oc")))
        counts = counts.join(before, lineage, "left")
    else:
        counts = counts.withColumn("_oc", F.lit(0).cast("bigint"))
    old_none = (F.coalesce(F.col("_oc"), F.lit(0)) == 0).cast("bigint")
    new_none = ((F.coalesce(F.col("_oc"), F.lit(0)) + F.coalesce(F.col("_dc"), F.lit(0)))
                == 0).cast("bigint")
    counts = counts.select(*lineage, (new_none - old_none).alias("_flip"),
                           new_none.alias("_none"))
    lcols = [F.col(f"`{c}`") for c in node.left.columns]
    rows = [dl.join(counts.where("_none = 1"), lineage, "left_semi").select(*lcols, MULT),
            unkeyed.select(*lcols, MULT)]
    if left is not None:
        rows.append(left.join(counts.where("_flip <> 0"), lineage).select(
            *lcols, (F.col(MULT) * F.col("_flip")).alias(MULT)))
    pads = [F.lit(None).cast(t).alias(c) for c, t in node.right.columns.items()]
    return functools.reduce(DataFrame.unionByName, rows).select(*lcols, *pads, MULT)


def padded_arrow(new_left: pa.Table, new_right: pa.Table, unkeyed: pa.Table,
                 left: Sequence[pa.Table], right: Sequence[pa.Table],
                 lineage: Sequence[str], lcols: Sequence[str],
                 rtypes: Mapping[str, pa.DataType]) -> pa.Table | None:
    """Δpadded in Arrow, for an epoch in the driver: the same rows as :func:`padded`
    from held tables (``left`` and ``right``: the stored inputs' tables); None when a
    lineage type or an error is Spark's to handle."""
    lineage = list(lineage)
    if not all(driver_rows.groupable(new_left.schema.field(j).type) for j in lineage):
        return None

    def net(t: pa.Table, name: str) -> pa.Table:
        g = t.group_by(lineage, use_threads=False).aggregate([(MULT, "sum")])
        return g.rename_columns([name if c == f"{MULT}_sum" else c for c in g.column_names])

    try:
        keys = pa.concat_tables([new_left.select(lineage), new_right.select(lineage)],
                                promote_options="permissive").group_by(
                                    lineage, use_threads=False).aggregate([])
        counts = keys.join(net(new_right, "_dc"), lineage, join_type="left outer",
                           use_threads=False)
        before = pa.repeat(pa.scalar(0, pa.int64()), counts.num_rows)
        stored = [t for t in right if t.num_rows]
        if stored:
            old = pa.concat_tables(stored, promote_options="permissive").join(
                keys, lineage, join_type="left semi", use_threads=False)
            counts = counts.join(net(old, "_oc"), lineage, join_type="left outer",
                                 use_threads=False)
            before = pc.fill_null(counts.column("_oc"), 0)
        after = pc.add_checked(before, pc.fill_null(counts.column("_dc"), 0))
        none_now = pc.equal(after, 0)
        flip = pc.subtract(none_now.cast(pa.int64()), pc.equal(before, 0).cast(pa.int64()))
        counts = counts.select(lineage).append_column("_flip", flip)
        parts = [new_left.join(counts.filter(none_now).select(lineage), lineage,
                               join_type="left semi", use_threads=False).select(
                                   [*lcols, MULT]), unkeyed.select([*lcols, MULT])]
        flipped = counts.filter(pc.not_equal(flip, 0))
        for t in left:
            if t.num_rows and flipped.num_rows:
                j = t.join(flipped, lineage, join_type="inner", use_threads=False)
                parts.append(j.select(list(lcols)).append_column(
                    MULT, pc.multiply_checked(j.column(MULT), j.column("_flip"))))
        rows = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
        return None
    pads = {c: pa.nulls(rows.num_rows, t) for c, t in rtypes.items()}
    return pa.table({**{c: rows.column(c) for c in lcols}, **pads, MULT: rows.column(MULT)})
