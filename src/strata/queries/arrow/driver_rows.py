"""Rows the driver holds as Arrow, combined without Spark jobs.

An iteration's steps pass small tables from one to the next: what a group-by merged,
the overlay of upserted keys, the iterate's change. :func:`~strata.queries.spark.frames.cut`
brings such a table to the driver once, as a :class:`~strata.queries.arrow.rows.Rows`
holding it. Projections, unions, keyed replacements, equi-joins and orderings of held
tables run here in Arrow (also for a series' occurrences over held views), where a Spark
job over local relations, planned and run, cost about 0.2 s each, several times per step
(docs/performance.md, "Iteration steps"). Anything not held falls back to the DataFrame
operation, so callers need not know which they got.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from strata.physical import arrow_types
from strata.queries.arrow.rows import Rows
from strata.queries.plan.algebra import Join
from strata.queries.plan.expressions import MULT


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of Spark ``schema`` as strata stores it: timestamps in UTC
    (Spark writes Parquet timestamps as UTC instants; pyarrow reads them back so)."""
    return arrow_types.arrow_schema(schema)


def select(df: Rows, columns: Sequence[str],
           constants: Mapping[str, int] | None = None) -> Rows:
    """``df``'s ``columns``, then a bigint column per ``constants`` entry."""
    constants = dict(constants or {})
    table = df.arrow()
    if table is None:
        return Rows.of_frame(df.frame().select(*[F.col(f"`{c}`") for c in columns],
                         *[F.lit(v).cast("bigint").alias(n) for n, v in constants.items()]))
    fields = {f.name: f for f in df.schema.fields}
    out = table.select(list(columns))
    for name, value in constants.items():
        out = out.append_column(pa.field(name, pa.int64()),
                                pa.repeat(pa.scalar(value, pa.int64()), out.num_rows))
    schema = StructType([*(fields[c] for c in columns),
                         *(StructField(n, LongType(), False) for n in constants)])
    return Rows.of_arrow(df.spark, out, schema)


def union(frames: Sequence[Rows]) -> Rows:
    """The rows of all ``frames`` (by column name, as ``unionByName``)."""
    held_tables = [f.arrow() for f in frames]
    tables = [t for t in held_tables if t is not None]
    names = frames[0].columns
    if len(frames) > 1 and len(tables) == len(frames) and \
            len({tuple(t.select(names).schema.types) for t in tables}) == 1:
        schema = _nullable(tables[0].select(names).schema)
        out = pa.concat_tables([t.select(names).cast(schema) for t in tables])
        schemas = [StructType([f.schema[c] for c in names]) for f in frames]
        return Rows.of_arrow(frames[0].spark, out, _loosest(schemas))
    if len(frames) == 1:
        return frames[0]
    out = frames[0].frame()
    for f in frames[1:]:
        out = out.unionByName(f.frame())
    return Rows.of_frame(out)


def fields_of(df: Rows, column: str, where: str | None = None) -> Rows:
    """The fields of struct ``column`` as columns (``select("column.*")``), of the rows
    where boolean column ``where`` is true if it is given."""
    table = df.arrow()
    if table is None:
        f = df.frame()
        return Rows.of_frame((f.where(F.col(f"`{where}`")) if where else f)
                                 .select(f"`{column}`.*"))
    if where:
        table = table.filter(table.column(where))
    schema = df.schema[column].dataType
    assert isinstance(schema, StructType)
    rows = pa.Table.from_struct_array(table.column(column).combine_chunks())
    return Rows.of_arrow(df.spark, rows, schema)


def with_live(df: Rows, count: str | None, name: str = "_live") -> Rows:
    """``df`` with a boolean column ``name``: whether column ``count`` is not 0 (null
    where it is null), or true for every row if ``count`` is None."""
    table = df.arrow()
    if table is None:
        return Rows.of_frame(df.frame().withColumn(
            name, F.col(f"`{count}`") != 0 if count else F.lit(True)))
    live = (pc.not_equal(table.column(count), 0) if count
            else pa.repeat(pa.scalar(True), table.num_rows))
    schema = StructType([*df.schema.fields, StructField(name, BooleanType())])
    return Rows.of_arrow(df.spark, table.append_column(name, live), schema)


def groupable(t: pa.DataType) -> bool:
    """Whether Arrow groups a key field of type ``t`` as Spark compares it in a join
    (floats are not: Spark equates -0.0 with 0.0 and NaN with NaN)."""
    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_boolean(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def replace_by_key(old: Rows, new: Rows, key: str) -> Rows | None:
    """Keyed rows: ``old``'s rows whose struct column ``key`` is not in ``new``, then
    ``new``'s rows, computed in Arrow (both have one row per key); None unless both are
    held, have the same columns and ``key``'s fields are all of groupable types."""
    a, b = old.arrow(), new.arrow()
    if a is None or b is None or old.columns != new.columns or a.schema.types != b.schema.types:
        return None
    key_type = a.schema.field(key).type
    if not pa.types.is_struct(key_type) or not all(
            groupable(key_type.field(i).type) for i in range(key_type.num_fields)):
        return None
    both = pa.concat_tables([a.cast(_nullable(a.schema)),
                             b.cast(_nullable(a.schema))]).combine_chunks()
    keys = both.column(key).chunk(0) if both.num_rows else pa.array([], key_type)
    index = pa.table({**{f"k{i}": pc.struct_field(keys, [i]) for i in range(key_type.num_fields)},
                      "i": pa.array(np.arange(both.num_rows, dtype=np.int64))})
    last = index.group_by([f"k{i}" for i in range(key_type.num_fields)],
                          use_threads=False).aggregate([("i", "max")]).column("i_max")
    keep = pc.take(last, pc.sort_indices(last))  # the rows kept, in their order
    return Rows.of_arrow(old.spark, both.take(keep), _loosest([old.schema, new.schema]))


def _nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column nullable (top level: tables of one query's rows
    differ only there)."""
    return pa.schema([f.with_nullable(True) for f in schema])


def _loosest(schemas: Sequence[StructType]) -> StructType:
    """The first schema, each column nullable if it is in any of ``schemas`` (same
    columns by position)."""
    return StructType([StructField(f[0].name, f[0].dataType, any(g.nullable for g in f))
                       for f in zip(*(s.fields for s in schemas), strict=True)])


def _placeholder(t: pa.DataType) -> pa.Scalar | None:
    if pa.types.is_integer(t):
        return pa.scalar(0, t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.scalar("", t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.scalar(b"", t)
    if pa.types.is_boolean(t):
        return pa.scalar(False)
    return None


def _flat(columns: Sequence[pa.Array]) -> dict[str, pa.Array] | None:
    """Join columns for key values: each value with NULL replaced by a placeholder, and
    a flag saying it was NULL (so NULL matches NULL, as Spark compares struct fields).
    A struct column stands for its fields. None for a type Arrow does not match as
    Spark does (floats: Spark equates -0.0 with 0.0)."""
    out: dict[str, pa.Array] = {}
    parts: list[pa.Array] = []
    for c in columns:
        if pa.types.is_struct(c.type):
            parts += [pc.struct_field(c, [i]) for i in range(c.type.num_fields)]
        else:
            parts.append(c)
    for i, p in enumerate(parts):
        fill = _placeholder(p.type)
        if fill is None:
            return None
        out[f"__k{i}"] = pc.fill_null(p, fill)
        out[f"__n{i}"] = pc.is_null(p)
    return out


def match(left: Sequence[pa.Array], right: Sequence[pa.Array], how: str,
          ) -> pa.Table | None:
    """Rows of two tables with equal keys (``left`` and ``right``: their key columns, a
    struct column standing for its fields): a table of ``__l`` (left row) and, unless
    ``how`` is ``left semi`` or ``left anti``, ``__r`` (right row, NULL where a ``left
    outer`` row has none), in left row order. None if a key type is not matched here."""
    a, b = _flat([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
                  for c in left]), _flat([c.combine_chunks() if isinstance(
                      c, pa.ChunkedArray) else c for c in right])
    if a is None or b is None or [x.type for x in a.values()] != [x.type for x in b.values()]:
        return None
    n, m = len(next(iter(left))), len(next(iter(right)))
    lt = pa.table({**a, "__l": pa.array(np.arange(n, dtype=np.int64))})
    rt = pa.table({**b, "__r": pa.array(np.arange(m, dtype=np.int64))})
    if how in ("left semi", "left anti"):
        rt = rt.drop_columns(["__r"])
    out = lt.join(rt, list(a), join_type=how, use_threads=False)
    out = out.select(["__l"] if how in ("left semi", "left anti") else ["__l", "__r"])
    return out.take(pc.sort_indices(out, [("__l", "ascending")]))


def joined(node: Join, left: Rows, right: Rows) -> Rows | None:
    """The equi-join of held ``left`` and ``right`` (``inner`` or ``left``: a NULL key
    matches nothing, as in SQL), with ``_mult`` the product."""
    a, b = left.arrow(), right.arrow()
    if a is None or b is None:
        return None
    if [a.schema.field(lc).type for lc, _ in node.on] != \
            [b.schema.field(rc).type for _, rc in node.on]:
        return None
    b = b.filter(_no_null_key(b, [rc for _, rc in node.on]))
    valid = _no_null_key(a, [lc for lc, _ in node.on])
    keyed = a.filter(valid)
    pairs = match([keyed.column(lc) for lc, _ in node.on],
                              [b.column(rc) for _, rc in node.on],
                              "inner" if node.how == "inner" else "left outer")
    if pairs is None:
        return None
    ltake, rtake = keyed.take(pairs.column("__l")), b.take(pairs.column("__r"))
    if node.how == "left":  # left rows with a NULL key, their right columns NULL
        unkeyed = a.filter(pc.invert(valid))
        ltake = pa.concat_tables([ltake, unkeyed])
        rtake = pa.concat_tables([rtake, pa.table({c: pa.nulls(unkeyed.num_rows, t)
                                                   for c, t in zip(b.column_names,
                                                                   b.schema.types,
                                                                   strict=True)})])
    out = pa.table({**{c: ltake.column(c) for c in node.left.columns},
                    **{c: rtake.column(c) for c in node.right.columns},
                    MULT: pc.multiply(ltake.column(MULT),
                                      pc.fill_null(rtake.column(MULT), 1))})
    fields = [f for f in [*left.schema.fields, *right.schema.fields] if f.name != MULT]
    schema = StructType([StructField(f.name, f.dataType, True) for f in fields]
                        ).add(MULT, LongType(), False)
    return Rows.of_arrow(left.spark, out, schema)


def _no_null_key(table: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Where none of ``keys`` is NULL."""
    return functools.reduce(pc.and_, [pc.is_valid(table.column(k)) for k in keys])


def ordered(table: pa.Table, order_by: Sequence[Sequence], limit: int | None) -> pa.Table:
    """``table`` ordered by ``order_by`` ((column, ascending) pairs) as Spark orders rows
    (ascending: NULLs first and NaN above every number; descending: NaN first and NULLs
    last), then cut to ``limit`` rows. Each key's NULLs and NaNs are placed by a flag
    sorted before it: Arrow places both at one end for every key at once."""
    if order_by:
        keys: dict[str, pa.Array] = {}
        sort_keys = []
        for i, (c, asc) in enumerate(order_by):
            col = table.column(c)
            order = "ascending" if asc else "descending"
            keys[f"__n{i}"] = pc.is_valid(col) if asc else pc.is_null(col)  # False first
            sort_keys.append((f"__n{i}", "ascending"))
            if pa.types.is_floating(col.type):  # NaN is the largest number to Spark
                keys[f"__f{i}"] = pc.fill_null(pc.is_nan(col), False)
                sort_keys.append((f"__f{i}", order))
            keys[f"__k{i}"] = col
            sort_keys.append((f"__k{i}", order))
        table = table.take(pc.sort_indices(pa.table(keys), sort_keys=sort_keys))
    return table.slice(0, limit) if limit is not None else table


def netted(frames: Sequence[Rows], mult: str = "_mult") -> Rows | None:
    """The rows of held ``frames`` with equal rows' multiplicities (column ``mult``)
    added up and rows that cancel dropped; None unless all are held with the same
    columns of types Arrow groups by. Only identical values merge, so this never merges
    rows Spark would tell apart."""
    tables = [f.arrow() for f in frames]
    if any(t is None for t in tables) or len({tuple(f.columns) for f in frames}) != 1:
        return None
    both = pa.concat_tables([t.cast(_nullable(tables[0].schema))  # type: ignore[union-attr]
                             for t in tables])
    keys = [c for c in both.column_names if c != mult]
    if not all(pa.types.is_floating(t) or groupable(t)
               for t in both.select(keys).schema.types):
        return None
    sums = both.group_by(keys, use_threads=False).aggregate([(mult, "sum")])
    sums = pa.table({**{k: sums[k] for k in keys}, mult: sums[f"{mult}_sum"]})
    out = sums.filter(pc.not_equal(sums.column(mult), 0)).select(both.column_names)
    return Rows.of_arrow(frames[0].spark, out.cast(both.schema),
                      _loosest([f.schema for f in frames]))
