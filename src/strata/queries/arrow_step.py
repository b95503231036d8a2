"""An iteration step's operators over rows the driver holds, run in Arrow.

Within an iteration's epoch each step passes small tables the driver already holds
(:mod:`strata.queries.driver_rows`). Filtering and projecting them, assigning points to
their nearest centre and lifting a group-by's ``h`` from them were each a Spark job over
a local relation: planned, scheduled and collected, about 0.1–0.2 s each however few the
rows (docs/performance.md, "Iteration steps"). Here they run on the held Arrow tables
with :mod:`strata.queries.arrow_expr` and :mod:`strata.queries.arrow_lift`, and their
results are held in turn. Each function returns None when it cannot — the input is not
held, an expression or a type is outside what Arrow evaluates here, or an error (an
overflow) is Spark's to report — and the caller runs the Spark plan instead. The session
conf ``spark.strata.iteration.arrow=false`` turns the Arrow path off.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType

from strata.queries import arrow_expr, driver_rows
from strata.queries.algebra import Map, Nearest
from strata.queries.arrow_expr import ARROW_TYPES, Unsupported
from strata.queries.arrow_lift import aggregate, outside, split_lift
from strata.queries.expressions import MULT, to_sql
from strata.queries.frames import spark_type
from strata.queries.incremental import GroupPlan

CONF = "spark.strata.iteration.arrow"


def enabled(spark: SparkSession) -> bool:
    """Whether steps may run in Arrow: Spark's ANSI mode (whose semantics Arrow follows
    here) is on and ``spark.strata.iteration.arrow`` is not ``false``."""
    conf = spark.conf
    return (conf.get("spark.sql.ansi.enabled", "true").lower() == "true"
            and conf.get(CONF, "true").lower() != "false")


def _held(df: DataFrame, table: pa.Table) -> DataFrame:
    return driver_rows.from_arrow(df.sparkSession, table, from_arrow_schema(table.schema))


def renamed(df: DataFrame, names: dict[str, str]) -> DataFrame | None:
    """``df``'s columns ``names`` (old → new) and ``_mult``, if ``df`` is held."""
    table = driver_rows.held(df)
    if table is None:
        return None
    out = table.select([*names, MULT]).rename_columns([*names.values(), MULT])
    fields = {f.name: f for f in df.schema.fields}
    schema = StructType([*(StructField(new, fields[old].dataType, True)
                           for old, new in names.items()), fields[MULT]])
    return driver_rows.from_arrow(df.sparkSession, out, schema)


def mapped(node: Map, d: DataFrame) -> DataFrame | None:
    """``node``'s filter and projection of held rows ``d`` (``_mult`` kept)."""
    table = driver_rows.held(d)
    if table is None:
        return None
    try:
        if node.where is not None:
            cond, _ = arrow_expr.evaluate(to_sql(node.where), table)
            table = table.filter(pc.fill_null(cond, False))
        if node.outputs is None:
            return driver_rows.from_arrow(d.sparkSession, table, d.schema)
        out = arrow_expr.evaluate_all({n: to_sql(e) for n, e in node.outputs}, table)
    except Unsupported:
        return None
    return _held(d, out.append_column(table.schema.field(MULT), table.column(MULT)))


def nearest(node: Nearest, rows: DataFrame, centers: Sequence[Row]) -> DataFrame | None:
    """Held ``rows`` each with its nearest of ``centers`` (the right side's rows): the
    centre minimizing ``node.distance``, NULL counting as infinitely far and ties going
    to the earlier centre, as the Spark plan's ``least(struct(distance, i))`` picks."""
    table = driver_rows.held(rows)
    right = list(node.right.schema)
    prefixed = [node.right.prefix + c for c in right]
    types = [node.right.columns[p] for p in prefixed]
    if table is None or not centers or any(t not in ARROW_TYPES for t in types) or \
            set(prefixed) & set(table.column_names):
        return None
    got = pa.table({p: pa.array([r[c] for r in centers], ARROW_TYPES[t])
                    for p, c, t in zip(prefixed, right, types, strict=True)})
    n = table.num_rows
    best, pick = np.full(n, np.inf), np.zeros(n, dtype=np.int64)
    distance = to_sql(node.distance)
    try:
        for i in range(len(centers)):
            with_center = table
            for p in prefixed:
                with_center = with_center.append_column(p, pa.repeat(got[p][i], n))
            d = arrow_expr.as_double(arrow_expr.evaluate(distance, with_center))
            far = pc.fill_null(d, np.inf).to_numpy(zero_copy_only=False)
            if np.isnan(far).any():
                return None  # Spark orders NaN above every distance: leave it to Spark
            closer = far < best
            best, pick = np.where(closer, far, best), np.where(closer, i, pick)
    except Unsupported:
        return None
    chosen = got.take(pa.array(pick))
    left = [c for c in node.columns if c not in prefixed]
    out = pa.table({**{c: table.column(c) for c in left},
                    **{p: chosen.column(p) for p in prefixed}, MULT: table.column(MULT)})
    out = out.select([*node.columns, MULT])
    fields = {f.name: f for f in rows.schema.fields}
    schema = StructType([*(fields.get(c) or StructField(c, spark_type(node.columns[c]))
                           for c in node.columns), fields[MULT]])
    return driver_rows.from_arrow(rows.sparkSession, out, schema)


def negated(df: DataFrame) -> DataFrame | None:
    """Held ``df`` with ``_mult`` negated (its rows retracted)."""
    table = driver_rows.held(df)
    if table is None:
        return None
    i = table.schema.get_field_index(MULT)
    return driver_rows.from_arrow(df.sparkSession, table.set_column(
        i, table.schema.field(MULT), pc.negate(table.column(MULT))), df.schema)


def lifted(plan: GroupPlan, d: DataFrame) -> DataFrame | None:
    """``h`` of held rows ``d``: per group (``_g``, a struct of its keys) each part's lift,
    when every part is ``sum``, ``min`` or ``max`` of an expression Arrow evaluates and no
    key is a double (Spark groups -0.0 with 0.0 and every NaN together; Arrow does not)."""
    table = driver_rows.held(d)
    if table is None:
        return None
    node = plan.node
    splits = [split_lift(p.lift) if p.kind in ("add", "least", "greatest") else None
              for p in plan.parts]
    if any(s is None for s in splits):
        return None
    try:
        keys = (arrow_expr.evaluate_all({n: to_sql(e) for n, e in node.keys}, table)
                if node.keys else pa.table({"_t": pa.repeat(pa.scalar(0, pa.int32()),
                                                            table.num_rows)}))
        if any(pa.types.is_floating(t) for t in keys.schema.types):
            return None
        values = {f"__v{i}": arrow_expr.evaluate(arg, table)
                  for i, (_, arg) in enumerate(s for s in splits if s is not None)}
    except Unsupported:
        return None
    funcs = [s[0] for s in splits if s is not None]
    for (v, st), f in zip(values.values(), funcs, strict=True):
        if st == "void" or f == "sum" and st not in arrow_expr.NUMBERS:
            return None
        if f != "sum" and st == "double" and pc.any(pc.is_nan(v)).as_py():
            return None  # Spark's min and max order NaN above every number
    key_cols = [f"__k{j}" for j in range(keys.num_columns)]
    rows = pa.table({**{k: keys.column(j) for j, k in enumerate(key_cols)},
                     **{c: v for c, (v, _) in values.items()}})
    groups = aggregate(rows, key_cols, [(c, f) for c, f in zip(values, funcs, strict=True)])
    parts = {}
    for (c, (_, st)), f, p in zip(values.items(), funcs, plan.parts, strict=True):
        value = groups[c]
        target = ARROW_TYPES["bigint" if f == "sum" and st != "double" else st]
        if pa.types.is_decimal(value.type):
            if pc.any(outside(value, target)).as_py():
                return None  # Spark's ANSI overflow error
            value = value.cast(target)
        parts[p.name] = value
    g = pa.StructArray.from_arrays([groups[k].combine_chunks() for k in key_cols],
                                   names=keys.column_names)
    out = pa.table({"_g": g, **parts})
    return _held(d, out)
