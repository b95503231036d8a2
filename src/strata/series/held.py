"""A new segment the driver still holds: its views and answers computed in Arrow.

A segment ingested through the driver (parsed from CSV or JSON, or given as records)
is written with its rows kept in the driver's file cache. While they are there and the
segment is within ``spark.strata.series.heldSegmentRows``, the series stage computes
the segment's partial views from those rows with the query layer's Arrow operators,
writes them with pyarrow, and answers the occurrences whose views it can read as Arrow
(the view tables the driver wrote stay in the same cache). No Spark job reads the
segment again: the ingest's parse is its one scan (``docs/series.md``, "Segments the
driver holds"). Each function returns None where Arrow cannot do what Spark would do
exactly (a multiset part, a float key, a total aggregate, an expression outside
:mod:`strata.queries.arrow.arrow_expr`); the caller then runs the Spark plan, which reads
the held rows as a local relation. Results are the same either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from strata.physical.program import EpochContext
from strata.physical.session import is_connect
from strata.queries.arrow import Rows, aggregate, arrow_step, driver_rows, outside
from strata.queries.plan import MULT, GroupBy, GroupPlan, Join, Map, Node, Scan, Union
from strata.queries.spark import QueryTables, dispatch
from strata.series.evaluate import group_plan, unprefixed
from strata.series.normalize import SeriesPlan, View, union_partials
from strata.storage import fs
from strata.storage.increments import FILE_CACHE, Increment, read_table

HeldReader = Callable[[View, range], "Rows | None"]
_MERGE = {"add": "sum", "least": "min", "greatest": "max"}


def held_segment(ctx: EpochContext, segment: Increment, schema: StructType
                 ) -> Rows | None:
    """The segment's rows (columns ``schema``) as a held frame, if every file of it is
    in the driver's file cache, it has at most ``spark.strata.series.heldSegmentRows``
    rows (``-1``: never) and Arrow steps are on (:func:`strata.queries.arrow.arrow_step.
    enabled`); else None. Never over Spark Connect, where every held frame is sent to
    the server when it is made."""
    limit = dispatch.held_segment_rows(ctx)
    if not segment.files or segment.records > limit or limit < 0 \
            or is_connect(ctx.spark) or not dispatch.arrow_steps(ctx.spark):
        return None
    if any(FILE_CACHE.get(f, touch=False) is None for f in segment.files):
        return None
    try:  # from the cache: every file is there
        rows = read_table(segment.files, driver_rows.arrow_schema(schema), cache=True)
    except (KeyError, ValueError, pa.ArrowNotImplementedError):
        return None
    return Rows.of_arrow(ctx.spark, rows, schema)


def held_view(view: View, segment: Rows, schema: StructType) -> Rows | None:
    """A partial view of held ``segment`` in Arrow, with ``schema`` (the Spark plan's:
    :func:`strata.series.evaluate.view_of_segment`), or None."""
    if view.kind != "partial":
        return None
    assert isinstance(view.node, GroupBy)
    d = _rows(view.node.child, segment)
    h = arrow_step.lifted(group_plan(view.node, view.monoids), d) if d is not None else None
    table = h.arrow() if h is not None else None
    if table is None:
        return None
    try:
        table = table.select(schema.names).cast(driver_rows.arrow_schema(schema))
    except (KeyError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return Rows.of_arrow(segment.spark, table, schema)


def _rows(node: Node, segment: Rows) -> Rows | None:
    """``node`` (a scan under maps) over held ``segment``, with ``_mult`` = 1."""
    if isinstance(node, Scan):
        if segment.arrow() is None:
            return None
        return arrow_step.renamed(driver_rows.select(segment, list(node.schema), {MULT: 1}),
                                  {c: node.prefix + c for c in node.schema})
    if isinstance(node, Map):
        d = _rows(node.child, segment)
        return arrow_step.mapped(node, d) if d is not None else None
    return None


def with_segment(frame: Rows, segment: int, schema: StructType) -> Rows:
    """Held view rows ``frame`` with the segment's number as column ``schema``'s last
    (the staged table's columns, as the Spark plan stages them)."""
    table = frame.arrow()
    assert table is not None
    last = schema.fields[-1]
    out = table.append_column(pa.field(last.name, pa.int32(), last.nullable),
                              pa.repeat(pa.scalar(segment, pa.int32()), table.num_rows))
    return Rows.of_arrow(frame.spark, out, schema)


def stored_held(table: pa.Table | None, schema: StructType, segment_column: str,
                window: Sequence[int], spark: SparkSession) -> Rows | None:
    """The rows of view table ``table`` (None: not readable by the driver) of the
    segments in ``window``, without the segment column, as a held frame."""
    if table is None:
        return None
    rows = table.filter(pc.is_in(table.column(segment_column),
                                 pa.array(list(window), table.schema.field(
                                     segment_column).type))).drop_columns([segment_column])
    return Rows.of_arrow(spark, rows, StructType(
        [f for f in schema.fields if f.name != segment_column]))


def uncached_bytes(files: Sequence[str]) -> int:
    """The bytes of those of ``files`` not in the driver's file cache: what reading
    them all in the driver reads from storage."""
    total = 0
    for f in files:
        if FILE_CACHE.get(f, touch=False) is None:
            fsys, path = fs.resolve(f)
            total += fsys.get_file_info(path).size
    return total


# -- an occurrence over held views ------------------------------------------------------
def held_occurrence(plan: SeriesPlan, newest: int, read: HeldReader) -> pa.Table | None:
    """The answer of the occurrence at segment ``newest`` computed in Arrow from the
    held views ``read`` gives, as :func:`strata.series.evaluate.occurrence` computes it
    with Spark; None if a view is not held or an operator is not done here."""
    windows = plan.schedule.window(newest)

    def evaluate(node: Node) -> Rows | None:
        view = plan.views.get(id(node))
        if view is not None:
            stored = read(view, windows[view.table])
            if stored is None:
                return None
            if view.kind == "partial":
                return _answered(group_plan(node, view.monoids), stored)  # type: ignore[arg-type]
            return arrow_step.renamed(stored, {unprefixed(c, view.prefix): c for c in node.columns})
        branches = union_partials(node, plan)
        if branches is not None:
            parts = [read(v, windows[v.table]) for v in branches]
            if any(p is None for p in parts):
                return None
            stacked = driver_rows.union(parts)  # type: ignore[arg-type]
            return _answered(group_plan(node, branches[0].monoids), stacked)  # type: ignore[arg-type]
        if isinstance(node, Map):
            d = evaluate(node.child)
            return arrow_step.mapped(node, d) if d is not None else None
        if isinstance(node, Join) and node.how in ("inner", "left"):
            left, right = evaluate(node.left), evaluate(node.right)
            return _joined(node, left, right) if left is not None and right is not None \
                else None
        if isinstance(node, Union):
            inputs = [evaluate(c) for c in node.inputs]
            if any(d is None for d in inputs):
                return None
            out = driver_rows.union(inputs)  # type: ignore[arg-type]
            return out if out.arrow() is not None else None
        if isinstance(node, GroupBy) and node.keys:  # over a join: its rows as they are
            d = evaluate(node.child)
            gp = group_plan(node)
            h = arrow_step.lifted(gp, d) if d is not None else None
            return _answered(gp, h, merge=False) if h is not None else None
        return None

    root = plan.query.root
    try:
        out = evaluate(root)
    except (pa.ArrowException, KeyError):  # an error is Spark's plan's to report
        return None
    table = out.arrow() if out is not None else None
    if table is None:
        return None
    table = table.select(list(root.columns))
    return _ordered(plan, table)


def _answered(gp: GroupPlan, stacked: Rows, merge: bool = True) -> Rows | None:
    """``a`` over held partials ``stacked`` (several segments' rows per group merged by
    ``⊗`` first, unless ``merge`` is False): the group-by's outputs, with ``_mult``."""
    if not gp.node.keys:  # a total answers one row even over no rows: Spark's to do
        return None
    h = _merged(gp, stacked) if merge else stacked
    done = arrow_step.merged(gp, h, None) if h is not None else None
    return done[1] if done is not None else None


def _merged(gp: GroupPlan, stacked: Rows) -> Rows | None:
    """``⊗`` of held partial rows per group (``_g``): sums, minima and maxima."""
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


def _joined(node: Join, left: Rows, right: Rows) -> Rows | None:
    """The equi-join of held ``left`` and ``right`` (``inner`` or ``left``: a NULL key
    matches nothing, as in SQL), with ``_mult`` the product."""
    a, b = left.arrow(), right.arrow()
    if a is None or b is None:
        return None
    if [a.schema.field(lc).type for lc, _ in node.on] != \
            [b.schema.field(rc).type for _, rc in node.on]:
        return None
    b = b.filter(_keyed(b, [rc for _, rc in node.on]))
    valid = _keyed(a, [lc for lc, _ in node.on])
    keyed = a.filter(valid)
    pairs = driver_rows.match([keyed.column(lc) for lc, _ in node.on],
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


def _keyed(table: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Where none of ``keys`` is NULL."""
    return functools.reduce(pc.and_, [pc.is_valid(table.column(k)) for k in keys])


def _ordered(plan: SeriesPlan, table: pa.Table) -> pa.Table | None:
    """``ORDER BY`` (ascending NULLs first, descending NULLs last, as the Spark plan)
    and ``LIMIT`` of the query; None for a float key (Spark orders NaN above every
    number and -0.0 with 0.0; Arrow does not)."""
    q = plan.query
    if q.order_by:
        if any(pa.types.is_floating(table.schema.field(c).type) for c, _ in q.order_by):
            return None
        table = table.take(pc.sort_indices(table, sort_keys=[
            (c, "ascending", "at_start") if asc else (c, "descending", "at_end")
            for c, asc in q.order_by]))
    if q.limit is not None:
        table = table.slice(0, q.limit)
    return table



# -- the stage's reads in a held epoch ----------------------------------------------------
def segment_views(segment: Rows, n: int, wanted: Mapping[tuple[str, int], View],
                  schema_of: Callable[[View], StructType]
                  ) -> dict[tuple[str, int], tuple[View, Rows]]:
    """Those ``wanted`` views of segment ``n`` that Arrow computes from held ``segment``
    (each with the schema ``schema_of`` gives it)."""
    out = {}
    for key, view in wanted.items():
        if key[1] == n:
            try:
                frame = held_view(view, segment, schema_of(view))
            except (pa.ArrowException, KeyError):  # an error is Spark's plan's to report
                frame = None
            if frame is not None:
                out[key] = (view, frame)
    return out


def read_held(tables: QueryTables, stored: Mapping[str, Mapping[str, dict]],
              fresh: Mapping[tuple[str, int], tuple[View, Rows]],
              driver_read: dict[str, int], segment_column: str, view: View,
              window: range) -> Rows | None:
    """The views of ``window`` as one held frame: computed this epoch, or read by the
    driver from the view's co-located table (its bytes not in the file cache counted in
    ``driver_read``); None if one is not held or the table is too large to read so."""
    fp = view.fingerprint
    parts = [fresh[(fp, j)][1] for j in window if (fp, j) in fresh]
    entries = {j: stored[fp][str(j)] for j in window if (fp, j) not in fresh}
    entries = {j: e for j, e in entries.items() if e["files"]}
    if any("branch" in e for e in entries.values()) or \
            any(p.arrow() is None for p in parts):
        return None
    if entries:
        driver_read.setdefault(fp, uncached_bytes(tables.live[fp]["files"]))
        rows = stored_held(tables.arrow(fp), tables.schema(fp), segment_column,
                           list(entries), tables.spark)
        held_rows = rows.arrow() if rows is not None else None
        held_parts = [h for h in (p.arrow() for p in parts) if h is not None]
        if rows is None or held_rows is None or len(held_parts) != len(parts):
            return None
        try:  # as the table's files have them (the fresh rows' nullability differs)
            target = held_rows.schema
            parts = [Rows.of_arrow(rows.spark, h.select(target.names).cast(target),
                                   rows.schema) for h in held_parts]
        except (KeyError, ValueError, pa.ArrowNotImplementedError):
            return None
        parts.append(rows)
    if not parts:
        return None
    out = driver_rows.union(parts) if len(parts) > 1 else parts[0]
    return out if out.arrow() is not None else None
