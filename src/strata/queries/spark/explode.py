"""``explode``: each row once per element of an array, as a Spark plan and in Arrow.

An explode keeps no state: the changes of its output are its input's changes, each
repeated per element with its ``_mult`` (README, "A query"). Rows the
driver holds (:mod:`strata.queries.arrow.driver_rows`) are exploded in Arrow when the array is
a column; any other array expression (``split(text, ' ')``) runs as Spark's ``explode``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType
from sqlglot import exp

from strata.queries.arrow.rows import Rows
from strata.queries.plan.algebra import Explode
from strata.queries.plan.expressions import MULT, to_sql


def spark_rows(node: Explode, d: DataFrame) -> DataFrame:
    """``node`` over rows ``d`` (the child's columns, and ``_mult`` if ``d`` has it)."""
    array = F.expr(to_sql(node.source))
    if node.position:
        gen = (F.posexplode_outer if node.outer else F.posexplode)(array).alias(
            node.position, node.name)
    else:
        gen = (F.explode_outer if node.outer else F.explode)(array).alias(node.name)
    return d.select(*[F.col(f"`{c}`") for c in node.child.columns], gen,
                    *([F.col(MULT)] if MULT in d.columns else []))


def arrow_rows(node: Explode, d: Rows) -> Rows | None:
    """``node`` over held rows ``d`` in Arrow, or None (not held, or the array is not a
    column)."""
    table = d.arrow()
    source = node.source
    if table is None or not isinstance(source, exp.Column) or source.table or \
            source.name not in table.column_names:
        return None
    lists = table.column(source.name).combine_chunks()
    if not (pa.types.is_list(lists.type) or pa.types.is_large_list(lists.type)):
        return None
    rows = table.select([*node.child.columns, MULT])
    parents = pc.list_parent_indices(lists)
    out = rows.take(parents)
    if node.position:  # an element's index: its offset less its list's first offset
        offsets = lists.offsets.to_numpy()
        index = np.arange(len(parents), dtype=np.int64) + offsets[0]
        out = out.append_column(node.position, pa.array(
            (index - offsets[parents.to_numpy()]).astype(np.int32)))
    out = out.append_column(node.name, pc.list_flatten(lists))
    if node.outer:  # a NULL or empty array keeps its row once, with a NULL element
        bare = rows.filter(pc.equal(pc.fill_null(pc.list_value_length(lists), 0), 0))
        if node.position:
            bare = bare.append_column(node.position, pa.nulls(bare.num_rows, pa.int32()))
        out = pa.concat_tables([out, bare.append_column(
            node.name, pa.nulls(bare.num_rows, lists.type.value_type))])
    fields = {f.name: f for f in d.schema.fields}
    element = fields[source.name].dataType.elementType  # type: ignore[attr-defined]
    added = [StructField(node.position, IntegerType(), node.outer)] if node.position else []
    schema = StructType([*(fields[c] for c in node.child.columns), *added,
                         StructField(node.name, element, True), fields[MULT]])
    return Rows.of_arrow(d.spark, out.select(
        [*node.child.columns, *([node.position] if node.position else []), node.name, MULT]),
        schema)
