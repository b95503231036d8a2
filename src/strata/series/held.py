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

from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from strata.physical.program import EpochContext
from strata.physical.session import is_connect
from strata.queries.arrow import Rows, Unsupported, arrow_step, driver_rows
from strata.queries.plan import MULT, Explode, GroupPlan, Join, Map, Query, Scan, Windowed
from strata.queries.spark import QueryTables, dispatch
from strata.series.normalize import SeriesPlan, View
from strata.series.occurrence import occurrence_of, segment_view
from strata.storage import fs
from strata.storage.increments import FILE_CACHE, Increment, read_table

HeldReader = Callable[[View, range], "Rows | None"]


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
    if view.kind != "partial" or segment.arrow() is None:
        return None
    try:
        table = segment_view(view, segment, ArrowBackend()).arrow()
        assert table is not None  # the backend holds what it returns
        table = table.select(schema.names).cast(driver_rows.arrow_schema(schema))
    except (Unsupported, KeyError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return Rows.of_arrow(segment.spark, table, schema)


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
def _held(rows: Rows | None) -> Rows:
    """``rows`` if the driver holds them; else Arrow cannot go on."""
    if rows is None or rows.arrow() is None:
        raise Unsupported
    return rows


class ArrowBackend:
    """The operators of a series' plan in Arrow over rows the driver holds
    (:class:`strata.series.occurrence.Backend`), with the query layer's Arrow operators;
    :class:`Unsupported` where they do not do exactly what Spark's plan does."""

    def scanned(self, node: Scan, segment: Rows) -> Rows:
        rows = driver_rows.select(_held(segment), list(node.schema), {MULT: 1})
        return _held(arrow_step.renamed(rows, {c: node.prefix + c for c in node.schema}))

    def mapped(self, node: Map, d: Rows) -> Rows:
        return _held(arrow_step.mapped(node, d))

    def exploded(self, node: Explode, d: Rows) -> Rows:
        raise Unsupported

    def windowed(self, node: Windowed, d: Rows) -> Rows:
        raise Unsupported

    def joined(self, node: Join, left: Rows, right: Rows) -> Rows:
        if node.how not in ("inner", "left"):
            raise Unsupported
        return _held(driver_rows.joined(node, left, right))

    def union(self, parts: Sequence[Rows]) -> Rows:
        return _held(driver_rows.union([_held(p) for p in parts]))

    def lifted(self, gp: GroupPlan, d: Rows) -> Rows:
        return _held(arrow_step.lifted(gp, d))

    def answered(self, gp: GroupPlan, stacked: Rows, merge: bool) -> Rows:
        if not gp.node.keys:  # a total answers one row even over no rows: Spark's to do
            raise Unsupported
        h = _held(arrow_step.merged_partials(gp, stacked)) if merge else stacked
        done = arrow_step.merged(gp, h, None)
        return _held(done[1] if done is not None else None)

    def renamed(self, stored: Rows, names: dict[str, str]) -> Rows:
        return _held(arrow_step.renamed(stored, names))

    def finished(self, query: Query, out: Rows) -> pa.Table:
        table = _held(out).arrow()
        assert table is not None
        return driver_rows.ordered(table.select(list(query.root.columns)), query.order_by,
                                   query.limit)


def held_occurrence(plan: SeriesPlan, newest: int, read: HeldReader) -> pa.Table | None:
    """The answer of the occurrence at segment ``newest`` computed in Arrow from the
    held views ``read`` gives, as :func:`strata.series.evaluate.occurrence` computes it
    with Spark; None if a view is not held or an operator is not done here."""
    try:
        return occurrence_of(plan, newest, lambda v, w: _held(read(v, w)), ArrowBackend())
    except (Unsupported, pa.ArrowException, KeyError):  # an error is Spark's plan's to report
        return None


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
