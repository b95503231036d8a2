"""An iteration step's operators over rows the driver holds, run in Arrow.

Within an iteration's epoch each step passes small tables the driver already holds
(:mod:`strata.queries.arrow.driver_rows`). Filtering and projecting them, assigning points to
their nearest centre and lifting a group-by's ``h`` from them were each a Spark job over
a local relation: planned, scheduled and collected, about 0.1–0.2 s each however few the
rows (docs/performance.md, "Iteration steps"). Here they run on the held Arrow tables
with :mod:`strata.queries.arrow.arrow_expr` and :mod:`strata.queries.arrow.arrow_lift`, and their
results are held in turn. Each function returns None when it cannot — the input is not
held, an expression or a type is outside what Arrow evaluates here, or an error (an
overflow) is Spark's to report — and the caller runs the Spark plan instead. Whether
they are tried at all is :func:`strata.queries.spark.dispatch.arrow_steps`'s to say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row
from pyspark.sql.types import StructField, StructType

from strata.physical import arrow_types
from strata.queries.arrow import arrow_expr, driver_rows
from strata.queries.arrow.arrow_expr import ARROW_TYPES, Unsupported
from strata.queries.arrow.arrow_lift import aggregate, outside, split_lift
from strata.queries.arrow.rows import Rows, spark_type
from strata.queries.plan.algebra import Map, Nearest, Scan
from strata.queries.plan.expressions import MULT, bind, to_sql
from strata.queries.plan.incremental import GroupPlan, answer_scope

_MERGE = {"add": "sum", "least": "min", "greatest": "max"}  # ⊗ as Arrow's aggregate


def _held(df: Rows, table: pa.Table) -> Rows:
    return Rows.of_arrow(df.spark, table, arrow_types.spark_schema(table.schema))


def renamed(df: Rows, names: dict[str, str]) -> Rows | None:
    """``df``'s columns ``names`` (old → new) and ``_mult``, if ``df`` is held."""
    table = df.arrow()
    if table is None:
        return None
    out = table.select([*names, MULT]).rename_columns([*names.values(), MULT])
    fields = {f.name: f for f in df.schema.fields}
    schema = StructType([*(StructField(new, fields[old].dataType, True)
                           for old, new in names.items()), fields[MULT]])
    return Rows.of_arrow(df.spark, out, schema)


def mapped(node: Map, d: Rows) -> Rows | None:
    """``node``'s filter and projection of held rows ``d`` (``_mult`` kept)."""
    table = d.arrow()
    if table is None:
        return None
    try:
        if node.where is not None:
            cond, _ = arrow_expr.evaluate(to_sql(node.where), table)
            table = table.filter(pc.fill_null(cond, False))
        if node.outputs is None:
            return Rows.of_arrow(d.spark, table, d.schema)
        out = arrow_expr.evaluate_all({n: to_sql(e) for n, e in node.outputs}, table)
    except Unsupported:
        return None
    return _held(d, out.append_column(table.schema.field(MULT), table.column(MULT)))


def nearest(node: Nearest, rows: Rows, centers: Sequence[Row]) -> Rows | None:
    """Held ``rows`` each with its nearest of ``centers`` (the right side's rows): the
    centre minimizing ``node.distance``, NULL counting as infinitely far and ties going
    to the earlier centre, as the Spark plan's ``least(struct(distance, i))`` picks."""
    table = rows.arrow()
    assert isinstance(node.right, Scan)  # the algebra's nearest joins a scanned flow
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
    return Rows.of_arrow(rows.spark, out, schema)


def negated(df: Rows) -> Rows | None:
    """Held ``df`` with ``_mult`` negated (its rows retracted)."""
    table = df.arrow()
    if table is None:
        return None
    i = table.schema.get_field_index(MULT)
    return Rows.of_arrow(df.spark, table.set_column(
        i, table.schema.field(MULT), pc.negate(table.column(MULT))), df.schema)


def lifted(plan: GroupPlan, d: Rows, by: Sequence[str] = (),
           extra: Sequence[tuple[str, str, str]] = ()) -> Rows | None:
    """``h`` of held rows ``d``: per group (``_g``, a struct of its keys) each part's lift,
    when every part is ``sum``, ``min`` or ``max`` of an expression Arrow evaluates and no
    key is a double (Spark groups -0.0 with 0.0 and every NaN together; Arrow does not).
    Per ``by`` columns of ``d`` too (first in the result), with the ``extra`` aggregates
    (name, column of ``d``, ``sum``/``min``/``max``) last, as
    :func:`strata.queries.spark.lift` computes them."""
    table = d.arrow()
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
    extras = {f"__x{i}": (table.column(c), f) for i, (_, c, f) in enumerate(extra)}
    rows = pa.table({**{b: table.column(b) for b in by},
                     **{k: keys.column(j) for j, k in enumerate(key_cols)},
                     **{c: v for c, (v, _) in values.items()},
                     **{c: v for c, (v, _) in extras.items()}})
    try:
        groups = aggregate(rows, [*by, *key_cols], [
            *zip(values, funcs, strict=True), *((c, f) for c, (_, f) in extras.items())])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    parts = {}
    for (c, (_, st)), f, p in zip(values.items(), funcs, plan.parts, strict=True):
        target = ARROW_TYPES["bigint" if f == "sum" and st != "double" else st]
        parts[p.name] = _narrowed(groups[c], target)
    for (c, (v, f)), (name, _, _) in zip(extras.items(), extra, strict=True):
        parts[name] = _narrowed(groups[c], pa.int64() if f == "sum" else v.type)
    if any(v is None for v in parts.values()):
        return None
    g = pa.StructArray.from_arrays([groups[k].combine_chunks() for k in key_cols],
                                   names=keys.column_names)
    out = pa.table({**{b: groups[b] for b in by}, "_g": g, **parts})
    return _held(d, out)


def _narrowed(value: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray | None:
    """An aggregate as ``target``: an integer sum (a decimal) narrowed, None if it does
    not fit (Spark's ANSI overflow error)."""
    if not pa.types.is_decimal(value.type):
        return value
    if pc.any(outside(value, target)).as_py():
        return None
    return value.cast(target)


def merged(plan: GroupPlan, h: Rows, state: Rows | None,
           ) -> tuple[Rows, Rows] | None:
    """A step's group-by merge in Arrow: held ``h`` (touched groups) merged with their held
    ``state`` rows (None: no state yet) by ``⊗``, answered by ``a``. The new state rows
    (``_g``, parts, outputs, ``_keep``) and the group-by's changes (old answers out, new
    in), as the Spark plan of ``Evaluator._group`` computes them."""
    d, s = h.arrow(), state.arrow() if state is not None else None
    if d is None or (state is not None and s is None):
        return None
    node, outputs = plan.node, [n for n, _ in plan.node.outputs]
    if any(node.columns[o] not in ARROW_TYPES for o in outputs):
        return None  # a type Arrow does not evaluate here (a timestamp): Spark's plan
    if s is not None:
        pairs = driver_rows.match([d.column("_g")], [s.column("_g")], "left outer")
        if pairs is None:
            return None
        d, s = d.take(pairs.column("__l")), s.take(pairs.column("__r"))
        old = {c: s.column(c).combine_chunks() for c in s.column_names}
    else:
        old = {c: pa.nulls(d.num_rows, ARROW_TYPES[node.columns[c]]) for c in outputs}
        old["_keep"] = pa.nulls(d.num_rows, pa.bool_())
    both = pa.table({"s": pa.StructArray.from_arrays(list(old.values()), names=list(old)),
                     "d": pa.StructArray.from_arrays(
                         [d.column(c).combine_chunks() for c in d.column_names],
                         names=d.column_names)})
    try:
        m = pa.table({"_g": d.column("_g")})
        for p in plan.parts:
            if p.name not in old and s is not None:
                return None
            merge = bind(p.merge, {"s": f"s.`{p.name}`" if p.name in old else "NULL",
                                   "d": f"d.`{p.name}`"})
            m = m.append_column(p.name, arrow_expr.evaluate(merge, both)[0])
        m, keep = answered(plan, m)
        m = m.append_column("_keep", keep)
        same = pa.repeat(pa.scalar(True), m.num_rows)
        for o in outputs:
            pair = pa.table({"a": m.column(o), "b": old[o]})
            same = pc.and_(same, arrow_expr.evaluate("a <=> b", pair)[0])
    except Unsupported:
        return None
    old_keep, new_keep = pc.fill_null(old["_keep"], False), m.column("_keep")
    gone = pc.and_(old_keep, pc.invert(pc.and_(new_keep, same)))
    came = pc.and_(new_keep, pc.invert(pc.and_(old_keep, same)))
    out_schema = pa.schema([pa.field(o, ARROW_TYPES[node.columns[o]]) for o in outputs])
    retract = pa.table({o: old[o] for o in outputs}).cast(out_schema).filter(gone)
    insert = m.select(outputs).cast(out_schema).filter(came)
    changes = pa.concat_tables([
        retract.append_column(MULT, pa.repeat(pa.scalar(-1, pa.int64()), retract.num_rows)),
        insert.append_column(MULT, pa.repeat(pa.scalar(1, pa.int64()), insert.num_rows))])
    state_cols = ["_g", *(p.name for p in plan.parts), *outputs, "_keep"]
    rows = m.select(state_cols)
    if state is not None:  # the state's own types, so the overlay merges in Arrow
        target = driver_rows.arrow_schema(state.schema)
        try:
            rows = rows.cast(pa.schema([target.field(c) for c in state_cols]))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            return None
    return _held(h, rows), _held(h, changes)


def answered(plan: GroupPlan, m: pa.Table, total: bool = False
             ) -> tuple[pa.Table, pa.ChunkedArray]:
    """``a`` in Arrow over merged parts ``m`` (``_g`` and the parts): ``m`` with the
    outputs appended, and whether each row answers — its group has records (``_cnt`` ≠ 0;
    with ``total``, a total aggregate's row always, as SQL answers one over no rows) and
    ``HAVING`` keeps it — as :func:`strata.queries.spark.answer` computes them. Raises
    :class:`Unsupported` where Arrow cannot."""
    node, scope = plan.node, answer_scope(plan)
    for o, e in node.outputs:
        if node.columns[o] not in ARROW_TYPES:
            raise Unsupported(f"output {o!r} of type {node.columns[o]}")
        v, _ = arrow_expr.evaluate(bind(to_sql(e), scope), m)
        m = m.append_column(o, v.cast(ARROW_TYPES[node.columns[o]]))
    keep = (pa.chunked_array([pa.repeat(pa.scalar(True), m.num_rows)])
            if total and not node.keys else pc.not_equal(m.column("_cnt"), 0))
    if node.having is not None:
        having, _ = arrow_expr.evaluate(bind(to_sql(node.having), scope), m)
        keep = pc.and_kleene(keep, pc.fill_null(having, False))
    return m, keep


def merged_partials(gp: GroupPlan, stacked: Rows) -> Rows | None:
    """``⊗`` of held partial rows per group (``_g``; several segments' or tasks' ``h``
    of a group-by stacked): sums, minima and maxima; None for any other part."""
    table = stacked.arrow()
    if table is None or any(p.kind not in _MERGE for p in gp.parts):
        return None
    g = table.column("_g").combine_chunks()
    keys = [pc.struct_field(g, [i]) for i in range(g.type.num_fields)]
    if not all(driver_rows.groupable(k.type) for k in keys):
        return None
    names = [f"__k{i}" for i in range(len(keys))]
    rows = pa.table({**dict(zip(names, keys, strict=True)),
                     **{p.name: table.column(p.name) for p in gp.parts}})
    try:
        groups = aggregate(rows, names, [(p.name, _MERGE[p.kind]) for p in gp.parts])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    parts = {}
    for p in gp.parts:
        value, target = groups[p.name], table.schema.field(p.name).type
        if pa.types.is_decimal(value.type) and not pa.types.is_decimal(target) and \
                pc.any(outside(value, target)).as_py():
            return None  # Spark's ANSI overflow error
        parts[p.name] = value.cast(target)
    out = pa.table({"_g": pa.StructArray.from_arrays(
        [groups[k].combine_chunks() for k in names], fields=list(g.type)), **parts})
    return Rows.of_arrow(stacked.spark, out, stacked.schema)


def keyed(columns: Mapping[str, str], key: Sequence[str], rows: Rows,
          ) -> Rows | None:
    """Held ``rows`` that insert (``_mult`` > 0) as rows of an iterate with ``columns``
    (name → Spark type) and ``key``: ``_g`` (its key), its columns cast, ``_keep``."""
    table = rows.arrow()
    if table is None:
        return None
    table = table.filter(pc.greater(table.column(MULT), 0))
    try:
        cast = arrow_expr.evaluate_all({c: f"CAST(`{c}` AS {t})" for c, t in columns.items()},
                                       table)
    except Unsupported:
        return None
    g = pa.StructArray.from_arrays([cast.column(k).combine_chunks() for k in key],
                                   names=list(key)) if table.num_rows else \
        pa.array([], pa.struct([cast.schema.field(k) for k in key]))
    out = pa.table({"_g": g, **{c: cast.column(c) for c in columns},
                    "_keep": pa.repeat(pa.scalar(True), table.num_rows)})
    return _held(rows, out)


def moves(new: Rows, old: Rows | None, columns: Mapping[str, str],
          tolerance: float) -> tuple[Rows, Rows | None] | None:
    """Of held iterate rows ``new``, those that moved — new keys, or a column further
    than ``tolerance`` (floats) or different (others) from its ``old`` row — and the old
    rows they replace (None when there is no ``old``)."""
    n = new.arrow()
    o = old.arrow() if old is not None else None
    if n is None or (old is not None and o is None):
        return None
    if o is None:
        return new, None
    pairs = driver_rows.match([n.column("_g")], [o.column("_g")], "left outer")
    if pairs is None:
        return None
    n, o = n.take(pairs.column("__l")), o.take(pairs.column("__r"))
    both = pa.table({"n": pa.StructArray.from_arrays(
        [n.column(c).combine_chunks() for c in columns], names=list(columns)),
        "o": pa.StructArray.from_arrays([o.column(c).combine_chunks() for c in columns],
                                        names=list(columns)),
        "__tol": pa.repeat(pa.scalar(float(tolerance)), n.num_rows)})
    far = [f"coalesce(n.`{c}` - o.`{c}` > __tol OR o.`{c}` - n.`{c}` > __tol, "
           f"NOT (n.`{c}` <=> o.`{c}`))" if tolerance > 0 and t in ("float", "double")
           else f"NOT (n.`{c}` <=> o.`{c}`)" for c, t in columns.items()]
    try:
        differs, _ = arrow_expr.evaluate(" OR ".join(far), both)
    except Unsupported:
        return None
    had = pc.is_valid(pairs.column("__r"))
    moved = pc.or_(pc.invert(had), pc.fill_null(differs, False))
    schema = {f.name: f for f in new.schema.fields}
    try:
        old_rows = o.filter(pc.and_(had, moved)).select(n.column_names).cast(n.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
        return None
    return (Rows.of_arrow(new.spark, n.filter(moved), new.schema),
            Rows.of_arrow(new.spark, old_rows,
                                   StructType([schema[c] for c in n.column_names])))


def with_lineage(d: Rows, cols: Sequence[str], types: Sequence[str],
                 lineage: Sequence[str]) -> Rows | None:
    """Held join input ``d`` without rows whose key ``cols`` has a NULL, with each key
    column cast to the join's common type as lineage column ``lineage[i]``."""
    table = d.arrow()
    if table is None:
        return None
    ok = pa.repeat(pa.scalar(True), table.num_rows)
    for c in cols:
        ok = pc.and_(ok, pc.is_valid(table.column(c)))
    table = table.filter(ok)
    try:
        keys = arrow_expr.evaluate_all(
            {j: f"CAST(`{c}` AS {t})" for c, t, j in zip(cols, types, lineage, strict=True)},
            table)
    except Unsupported:
        return None
    for j in lineage:
        table = table.append_column(keys.schema.field(j), keys.column(j))
    return _held(d, table)


def _near(big: pa.Table, small: pa.Table, column: str) -> pa.Table:
    """The rows of ``big`` whose ``column`` has a value of ``small``'s, when ``big`` is
    much the larger (a stored join input against an increment): the join then hashes
    those few rows, not the whole table. As it is if Arrow cannot tell."""
    if big.num_rows <= 4 * small.num_rows:
        return big
    try:
        return big.filter(pc.is_in(big.column(column),
                                   value_set=small.column(column).combine_chunks()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return big


def paired(a: pa.Table, b: pa.Table, lineage: Sequence[str], lcols: Sequence[str],
           rcols: Sequence[str]) -> pa.Table | None:
    """The inner join of join inputs ``a`` and ``b`` on their lineage columns: ``lcols``
    of ``a``, ``rcols`` of ``b``, and the product of their ``_mult``."""
    a, b = _near(a, b, lineage[0]), _near(b, a, lineage[0])
    pairs = driver_rows.match([a.column(j) for j in lineage], [b.column(j) for j in lineage],
                              "inner")
    if pairs is None:
        return None
    left, right = a.take(pairs.column("__l")), b.take(pairs.column("__r"))
    try:
        mult = pc.multiply_checked(left.column(MULT), right.column(MULT))
    except pa.ArrowInvalid:
        return None  # Spark's overflow error
    return pa.table({**{c: left.column(c) for c in lcols},
                     **{c: right.column(c) for c in rcols}, MULT: mult})
