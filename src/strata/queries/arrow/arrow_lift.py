"""A group-by's lift ``h`` aggregated in Arrow, as Spark's aggregation would.

Two driver paths aggregate rows they hold instead of running a Spark job: a small epoch
of the vectorized query route (:mod:`strata.queries.programs.vector_route`) and an iteration step
(:mod:`strata.queries.spark.evaluator`). A part's lift qualifies when it is ``sum``, ``min`` or
``max`` of a row expression (:func:`split_lift`). Integer sums add as 128-bit decimals,
so a sum that leaves ``bigint`` (Spark's ANSI overflow error) is found, not wrapped.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

_WIDE = pa.decimal128(38, 0)


@functools.lru_cache(maxsize=1024)
def split_lift(lift: str) -> tuple[str, str] | None:
    """A lift ``sum(e)``, ``min(e)`` or ``max(e)`` as (Arrow's aggregate, ``e``)."""
    node = sqlglot.parse_one(lift, read="spark")
    funcs: dict[type, str] = {exp.Sum: "sum", exp.Min: "min", exp.Max: "max"}
    if type(node) not in funcs or node.expressions:
        return None
    return funcs[type(node)], node.this.sql("spark")


def aggregate(rows: pa.Table, keys: Sequence[str],
              values: Sequence[tuple[str, str]]) -> pa.Table:
    """``rows`` grouped by ``keys`` (NULL keys form a group, as in SQL), each
    ``(column, func)`` of ``values`` aggregated into column ``column``. An integer sum
    comes out as ``decimal128(38, 0)``: check it with :func:`outside` before narrowing."""
    columns = {k: rows[k] for k in keys}
    for column, func in values:
        value = rows[column]
        if func == "sum" and pa.types.is_integer(value.type):
            value = value.cast(_WIDE)
        columns[column] = value
    groups = pa.table(columns).group_by(list(keys), use_threads=False).aggregate(
        [(c, f) for c, f in values])
    return pa.table({**{k: groups[k] for k in keys},
                     **{c: groups[f"{c}_{f}"] for c, f in values}})


def outside(value: pa.ChunkedArray | pa.Array, target: pa.DataType) -> pa.Array:
    """Where a decimal ``value`` does not fit integer type ``target`` (NULL: fits)."""
    bound = pa.scalar(2 ** (target.bit_width - 1), _WIDE)
    return pc.fill_null(pc.or_(pc.greater_equal(value, bound),
                               pc.less(value, pc.negate(bound))), False)
