"""Spark plans for a series: a view of one segment, an occurrence from its views, and
the shared passes that compute several views of a segment at once.

:class:`SparkBackend` runs the operators of :mod:`strata.series.occurrence`'s one
interpreter as DataFrame plans: :func:`view_of_segment` computes a
:class:`~strata.series.normalize.View` from one segment's rows (``h`` for a partial
aggregate), :func:`occurrence` the rest of the query over the views of the occurrence's
window (partials merged per group with the monoids' ``⊗`` and answered with ``a``; rows
views unioned and joined or grouped). Stored views carry the table's column prefix
stripped, so that tables of the same subplan share them; an occurrence puts it back.
The jumbo, prefix and reordered passes compute many partial views in one scan.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable, Sequence

import sqlglot
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from strata.queries.plan import (
    MULT,
    Explode,
    GroupBy,
    GroupPlan,
    Join,
    Map,
    Query,
    QueryError,
    Scan,
    Windowed,
    bind,
    is_aggregate,
    to_sql,
)
from strata.queries.spark import answer, explode, lift, row_exprs, window_functions
from strata.series.normalize import SeriesPlan, View
from strata.series.occurrence import group_plan, occurrence_of, segment_view, unprefixed

ViewReader = Callable[[View, range], DataFrame]  # the stored views of a run of segments


class SparkBackend:
    """The operators of a series' plan as Spark plans (:class:`strata.series.occurrence.
    Backend`): any plan. Relations carry ``_mult`` (1 for every row of a segment; a
    join's rows the product of its sides')."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def scanned(self, node: Scan, segment: DataFrame) -> DataFrame:
        return segment.select(*[F.col(f"`{c}`").alias(node.prefix + c) for c in node.schema],
                              F.lit(1).cast("bigint").alias(MULT))

    def mapped(self, node: Map, d: DataFrame) -> DataFrame:
        if node.where is not None:
            d = d.where(F.expr(to_sql(node.where)))
        if node.outputs is not None:
            d = d.select(*[F.expr(to_sql(e)).alias(n) for n, e in node.outputs], MULT)
        return d

    def exploded(self, node: Explode, d: DataFrame) -> DataFrame:
        return explode.spark_rows(node, d)

    def windowed(self, node: Windowed, d: DataFrame) -> DataFrame:
        return window_functions.over_rows(node, d).withColumn(MULT, F.lit(1).cast("bigint"))

    def joined(self, node: Join, left: DataFrame, right: DataFrame) -> DataFrame:
        cond = functools.reduce(operator.and_, [
            left[f"`{lc}`"] == right[f"`{rc}`"] for lc, rc in node.on])
        return left.join(right, cond, node.how).select(
            *[left[f"`{c}`"] for c in node.left.columns],
            *[right[f"`{c}`"] for c in node.right.columns],
            (left[MULT] * F.coalesce(right[MULT], F.lit(1).cast("bigint"))).alias(MULT))

    def union(self, parts: Sequence[DataFrame]) -> DataFrame:
        return functools.reduce(DataFrame.unionByName, parts)

    def lifted(self, gp: GroupPlan, d: DataFrame) -> DataFrame:
        return lift(gp, d)

    def answered(self, gp: GroupPlan, stacked: DataFrame, merge: bool) -> DataFrame:
        merged = merge_partials(gp, stacked) if merge else stacked
        return answer(gp, merged, self.spark).withColumn(MULT, F.lit(1).cast("bigint"))

    def renamed(self, stored: DataFrame, names: dict[str, str]) -> DataFrame:
        # every column aliased, _mult too: two reads of one view table joined (a self-join)
        # then have no column in common for a join's side to be confused with
        return stored.select(*[F.col(f"`{old}`").alias(new) for old, new in names.items()],
                             F.col(MULT).alias(MULT))

    def finished(self, query: Query, out: DataFrame) -> DataFrame:
        out = out.select(*[F.col(f"`{c}`") for c in query.root.columns])
        if query.order_by:
            out = out.orderBy(*[F.col(f"`{c}`").asc_nulls_first() if asc
                                else F.col(f"`{c}`").desc_nulls_last()
                                for c, asc in query.order_by])
        return out.limit(query.limit) if query.limit is not None else out


def view_of_segment(view: View, segment: DataFrame) -> DataFrame:
    """The view's rows for one segment, as stored (the table's prefix stripped)."""
    return segment_view(view, segment, SparkBackend(segment.sparkSession))


def occurrence(plan: SeriesPlan, newest: int, read_views: ViewReader,
               spark: SparkSession) -> DataFrame:
    """The answer of the occurrence whose newest segment is ``newest``."""
    return occurrence_of(plan, newest, read_views, SparkBackend(spark))


def jumbo_eligible(view: View) -> bool:
    """Whether a view can be computed in a segment's jumbo pass: a partial aggregate over
    a segment's rows filtered and projected (an explode repeats them) without multiset
    parts (``count(DISTINCT)`` groups by its values as well)."""
    if view.kind != "partial":
        return False
    assert isinstance(view.node, GroupBy)
    try:
        row_exprs(view.node.child)
    except QueryError:
        return False
    return all(p.kind != "multiset" for p in group_plan(view.node, view.monoids).parts)


def jumbo_partials(views: Sequence[View], segment: DataFrame) -> DataFrame:
    """The partial views of one segment in one pass: one scan of the segment, one
    exchange for all of them (the jumbo query of the segment).

    Each row of the segment becomes one row per view whose filter it passes (like
    Spark's ``Expand`` for grouping sets), tagged ``_b`` with the view's index; one
    group-by on ``_b`` and the views' keys computes every view's monoid parts. Rows:
    ``_b``, ``k<i>`` (view *i*'s group key, NULL in other views' rows) and
    ``b<i>__<part>``; :func:`jumbo_branch` reads one view back from them."""
    pass_ = _Expansion(views, segment)
    expanded = pass_.base.select(pass_.expand())
    return expanded.groupBy("_b", *pass_.keys).agg(*pass_.aggs)


def prefix_group(views: Sequence[View]) -> tuple[list[int], list[str]]:
    """The views one exchange can serve, and the group keys they share: those that group
    by the key most of ``views`` group by (as Spark SQL over the stream's columns), and
    every key they all group by, in the first one's key order. A hash partitioning on
    these keys places each group of every such view in one partition. ``([], [])`` when no
    two views share a key."""
    keys = [[_over_stream(bind(to_sql(e), row_exprs(v.group.child)[1]), v.prefix)
             for _, e in v.group.keys] for v in views]
    counts = Counter(k for ks in keys for k in dict.fromkeys(ks))
    if not counts or max(counts.values()) < 2:
        return [], []
    top = max(counts.values())
    best = next(k for ks in keys for k in ks if counts[k] == top)
    group = [i for i, ks in enumerate(keys) if best in ks]
    common = set(keys[group[0]]).intersection(*[keys[i] for i in group[1:]])
    return group, [k for k in dict.fromkeys(keys[group[0]]) if k in common]


def prefix_partials(views: Sequence[View], segment: DataFrame, shared: Sequence[str],
                    partitions: int) -> DataFrame:
    """The jumbo pass with its exchange on the views' shared keys (``shared``, from
    :func:`prefix_group`; Comet's shared shuffle on a key prefix): the segment's rows that
    pass any view's filter are hashed once on those keys, then expanded per view and
    aggregated where they lie, since a hash partitioning on a subset of a grouping's keys
    already places each group in one partition. One scan and one exchange, of rows rather
    than of each task's partial groups (Spark combines no rows below an explicit
    repartition). Rows as :func:`jumbo_partials` gives them."""
    if not shared:
        raise QueryError("the views share no group key: no exchange can serve them all")
    pass_ = _Expansion(views, segment)
    prefix, columns = views[0].prefix, set(segment.columns)
    hashed, added = [], {}  # a key that is a column is hashed as it is, others computed
    for m, sql in enumerate(shared):
        tree = sqlglot.parse_one(sql, read="spark")
        if isinstance(tree, exp.Column) and tree.name in columns:
            hashed.append(prefix + tree.name)
        else:
            hashed.append(f"_s{m}")
            added[f"_s{m}"] = F.expr(bind(sql, {c: _quoted(prefix + c) for c in columns}))
    base = pass_.base.select("*", *[c.alias(n) for n, c in added.items()])
    base = base.where(functools.reduce(operator.or_, pass_.wheres))  # early filtering
    expanded = base.repartition(partitions, *map(F.col, map(_quoted, hashed))).select(
        *map(_quoted, hashed), pass_.expand())
    grouped = expanded.groupBy("_b", *map(_quoted, hashed), *pass_.keys).agg(*pass_.aggs)
    return grouped.select("_b", *pass_.keys, *map(_quoted, pass_.values))


def reorder_group(views: Sequence[View]) -> list[int]:
    """The views one grouping can serve with their filters pulled above it: the most
    views (at least two) that group by the same keys, as Spark SQL over the stream's
    columns, in any order; ``[]`` when no two do."""
    keys = [frozenset(_stream_keys(v)) for v in views]
    best, top = Counter(keys).most_common(1)[0] if keys else (frozenset(), 0)
    return [i for i, k in enumerate(keys) if k == best] if top >= 2 else []


def reordered_partials(views: Sequence[View], segment: DataFrame) -> DataFrame:
    """The jumbo pass with the views' filters pulled above one grouping (Comet's operator
    reordering; ``views`` all group by the same keys, :func:`reorder_group`): the rows
    that pass any view's filter are grouped once by the shared keys, each view's monoid
    parts aggregated over its own rows (``FILTER (WHERE …)``), and each group then yields
    a row per view that has rows in it. One scan and one exchange of partial groups
    carrying every view's parts, where :func:`jumbo_partials` exchanges a row per view
    and group. Rows as :func:`jumbo_partials` gives them."""
    pass_ = _Expansion(views, segment)
    view_keys = [_stream_keys(v) for v in views]
    view_parts = pass_.parts
    shared = view_keys[0]
    columns = {c: _quoted(views[0].prefix + c) for c in segment.columns}
    keys = [F.expr(bind(sql, columns)).alias(f"_s{m}") for m, sql in enumerate(shared)]
    aggs = []
    for i, ((where, defs), parts) in enumerate(zip(pass_.rows, view_parts, strict=True)):
        aggs += [F.expr(_filtered(bind(p.lift, defs), where)).alias(f"b{i}__{p.name}")
                 for p in parts]
    base = pass_.base.where(functools.reduce(operator.or_, pass_.wheres))
    grouped = base.groupBy(*keys).agg(*aggs)
    key_structs = [F.struct(*[F.col(f"_s{shared.index(k)}").alias(n) for (n, _), k in
                              zip(v.group.keys, ks, strict=True)])
                   if v.group.keys else F.struct(F.lit(0).alias("_t"))
                   for v, ks in zip(views, view_keys, strict=True)]
    never, branches = F.lit(False), []
    for i, parts in enumerate(view_parts):
        row = [F.lit(i).alias("_b")] + [
            (key if j == i else F.when(never, key)).alias(f"k{j}")
            for j, key in enumerate(key_structs)]
        row += [(F.col(_quoted(c)) if c.startswith(f"b{i}__")
                 else F.when(never, F.col(_quoted(c)))).alias(c) for c in pass_.values]
        # a view has rows in a group where its count part (the first) is not NULL
        present = F.col(_quoted(f"b{i}__{parts[0].name}"))
        branches.append(F.when(present.isNotNull(), F.struct(*row)))
    return grouped.select(F.inline(F.filter(F.array(*branches), lambda x: x.isNotNull())))


def pass_views(plan: str, candidates: list, group: Sequence[int],
                reorder: Sequence[int]) -> list:
    """The views (of ``candidates``) the new segment's pass computes under the scan plan
    ``plan``: none when separate, the shared-key ``group`` for a shared shuffle, the
    same-key ``reorder`` group for a shared grouping, else all (the jumbo pass)."""
    if plan == "separate":
        return []
    if plan == "prefix":
        return [candidates[i] for i in group]
    if plan == "reordered":
        return [candidates[i] for i in reorder]
    return candidates


def pass_partials(plan: str, views: Sequence[View], segment: DataFrame,
                  shared: Sequence[str], partitions: int) -> DataFrame:
    """The rows of the new segment's pass under scan plan ``plan`` (``prefix``,
    ``reordered``, or the jumbo pass), as :func:`jumbo_partials` gives them."""
    if plan == "prefix":
        return prefix_partials(views, segment, shared, partitions)
    if plan == "reordered":
        return reordered_partials(views, segment)
    return jumbo_partials(views, segment)


def _stream_keys(view: View) -> list[str]:
    """A partial view's group keys as Spark SQL over the stream's columns."""
    defs = row_exprs(view.group.child)[1]
    return [_over_stream(bind(to_sql(e), defs), view.prefix) for _, e in view.group.keys]


def _filtered(aggregate: str, where: str | None) -> str:
    """``aggregate`` (SQL with aggregate calls) over the rows passing ``where`` only."""
    if where is None:
        return aggregate
    cond = sqlglot.parse_one(where, read="spark")
    return sqlglot.parse_one(aggregate, read="spark").transform(
        lambda n: exp.Filter(this=n.copy(), expression=exp.Where(this=cond.copy()))
        if is_aggregate(n) else n).sql(dialect="spark")


class _Expansion:
    """What a pass over a segment computes: ``base`` (its columns under every view's
    prefix and ``_mult``), per view its row expressions, filter and monoid parts, and the
    names of every view's aggregated parts (``values``). The jumbo pass's per-view key
    structs and values (``fields``) and aggregates (``aggs``) are built when first read."""

    def __init__(self, views: Sequence[View], segment: DataFrame) -> None:
        prefixes = sorted({v.prefix for v in views})
        self.base = segment.select(
            *[F.col(f"`{c}`").alias(p + c) for p in prefixes for c in segment.columns],
            F.lit(1).cast("bigint").alias(MULT))
        self.nodes: list[GroupBy] = []
        for v in views:
            assert isinstance(v.node, GroupBy)
            self.nodes.append(v.node)
        self.rows = [row_exprs(node.child) for node in self.nodes]  # (filter, definitions)
        self.parts = [group_plan(node, v.monoids).parts
                      for node, v in zip(self.nodes, views, strict=True)]
        self.wheres = [F.expr(where) if where else F.lit(True) for where, _ in self.rows]
        self.values = [f"b{i}__{p.name}" for i, parts in enumerate(self.parts) for p in parts]
        self.keys = [f"k{i}" for i in range(len(views))]

    @functools.cached_property
    def read(self) -> list[dict[str, str]]:
        """Per view: its row definitions that its monoid parts' lifts read."""
        read = []
        for (_, defs), parts in zip(self.rows, self.parts, strict=True):
            used = {c.name for p in parts for c in sqlglot.parse_one(p.lift, read="spark")
                    .find_all(exp.Column)}
            read.append({c: sql for c, sql in defs.items() if c in used})
        return read

    @functools.cached_property
    def fields(self) -> list[list[tuple[str, Column]]]:
        """Per view: its key struct and the values its lifts read."""
        fields = []
        for i, node in enumerate(self.nodes):
            defs = self.rows[i][1]
            keys = [F.expr(bind(to_sql(e), defs)).alias(n) for n, e in node.keys] or [
                F.lit(0).alias("_t")]
            fields.append([(f"k{i}", F.struct(*keys)),
                           *[(f"b{i}__{c}", F.expr(sql)) for c, sql in self.read[i].items()]])
        return fields

    @functools.cached_property
    def aggs(self) -> list[Column]:
        """Every view's monoid parts, aggregated over that view's rows of the expansion."""
        aggs = []
        for i, parts in enumerate(self.parts):
            # other views' rows count for nothing (NULL parts: fewer bytes in the files)
            renamed = {c: f"`b{i}__{c}`" for c in self.read[i]} | {
                MULT: f"IF(`_b` = {i}, `{MULT}`, NULL)"}
            aggs += [F.expr(bind(p.lift, renamed)).alias(f"b{i}__{p.name}") for p in parts]
        return aggs

    def expand(self) -> Column:
        """Each row as one row per view whose filter it passes, tagged ``_b``: other
        views' columns NULLs of their types."""
        never = F.lit(False)
        branches = []
        for i in range(len(self.fields)):
            row = [F.lit(i).alias("_b"), F.col(MULT)]
            for j, group in enumerate(self.fields):
                row += [(c if j == i else F.when(never, c)).alias(n) for n, c in group]
            branches.append(F.when(self.wheres[i], F.struct(*row)))
        return F.inline(F.filter(F.array(*branches), lambda x: x.isNotNull()))


def _quoted(name: str) -> str:
    return f"`{name}`"


def _over_stream(sql: str, prefix: str) -> str:
    """``sql`` over a view's prefixed columns, rewritten over the stream's own names,
    without the parentheses :func:`bind` puts around a column (so that a key reads the
    same whether or not a projection renamed its column)."""
    tree = sqlglot.parse_one(sql, read="spark").transform(
        lambda n: n.this if isinstance(n, exp.Paren) and isinstance(n.this, exp.Column)
        else n)
    while isinstance(tree, exp.Paren):
        tree = tree.this
    for c in tree.find_all(exp.Column):
        c.set("this", exp.to_identifier(unprefixed(c.name, prefix), quoted=True))
    return tree.sql(dialect="spark")


def jumbo_branch(view: View, index: int, stored: DataFrame) -> DataFrame:
    """View ``index`` of a jumbo pass's rows, as :func:`view_of_segment` gives it."""
    parts = group_plan(view.group, view.monoids).parts
    return stored.select(F.col(f"k{index}").alias("_g"),
                         *[F.col(f"`b{index}__{p.name}`").alias(p.name) for p in parts])


def merge_partials(plan: GroupPlan, stacked: DataFrame) -> DataFrame:
    """``⊗`` over the partials of several segments: one row of parts per group."""
    aggs: list[Column] = []
    generic = []
    for p in plan.parts:
        c = F.col(f"`{p.name}`")
        if p.kind == "add":
            aggs.append(F.sum(c).alias(p.name))
        elif p.kind in ("least", "greatest"):
            aggs.append((F.min(c) if p.kind == "least" else F.max(c)).alias(p.name))
        else:  # a multiset or a user monoid: fold the segments' values with its merge
            aggs.append(F.collect_list(c).alias(p.name))
            generic.append(p)
    merged = stacked.groupBy("_g").agg(*aggs)
    for p in generic:
        body = bind(p.merge, {"s": "_s", "d": "_d"})
        lst = f"`{p.name}`"
        merged = merged.withColumn(p.name, F.expr(
            f"aggregate(slice({lst}, 2, greatest(size({lst}) - 1, 0)), element_at({lst}, 1), "
            f"(_s, _d) -> {body})"))
    return merged
