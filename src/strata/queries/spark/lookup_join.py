"""A join with a lookup table: what each side's stored table gains in an epoch, as a
Spark plan and in Arrow, and the check that keeps the lookup side's key unique.

When one side of an inner join never deletes and is unique per join key (a dimension
with a declared key, :func:`~strata.queries.plan.incremental.lookup_side`), a row of the
other side that has found its match can never meet another lookup row. So the lookup
side's table keeps all its rows, and the other side's only the rows still waiting for
their match:

    lookup table  gains Δlookup
    other table   gains ΔO ▷ (lookup ∪ Δlookup)  −  (other ⋉ Δlookup)

(the second term takes out the rows an arriving lookup row matched; deletes net with
their inserts when the table is compacted). The changes are those of any inner join,
ΔO ⋈ lookup ∪ other ⋈ Δlookup ∪ ΔO ⋈ Δlookup, with ``other`` the waiting rows: a row
matched before cannot match Δlookup, as its key is taken. In a left join with the lookup
table on the right, the left rows with NULL padding are exactly the waiting ones (and
those with a NULL key), so the padded rows' changes are the waiting table's gains,
padded. All of it holds only while the key is unique, so each epoch checks the lookup
side's new rows against the stored ones and refuses a second row of a key
(docs/architecture.md, "Joins with a lookup table").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.queries.arrow import driver_rows
from strata.queries.plan.algebra import Join, Map, Node, Scan
from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import MULT
from strata.queries.plan.incremental import JoinPlan
from strata.queries.spark.frames import ddl_of, empty_frame, local_rows


class KeyNotUnique(QueryError):
    """A lookup side's declared key arrived twice: the join's state would be wrong."""

    def __init__(self, flow: str | None, key: dict[str, Any]) -> None:
        self.flow, self.key = flow, key
        where = f"flow {flow!r}" if flow else "the join's lookup side"
        cols = ", ".join(key)
        super().__init__(
            f"{where} declares ({cols}) unique, but a row with {_shown(key)} arrived "
            f"when one was already there; a join keeps only the rows of its other side "
            f"that have no match yet, which needs the key unique. Remove the duplicate "
            f"from the input, or do not declare the key (then the join keeps every row "
            f"of both sides)")


def _shown(key: dict[str, Any]) -> str:
    return " and ".join(f"{c} = {v!r}" for c, v in key.items())


def _scan_of(node: Node) -> Scan | None:
    while isinstance(node, Map):
        node = node.child
    return node if isinstance(node, Scan) else None


def _violation(plan: JoinPlan, values: Sequence[Any]) -> KeyNotUnique:
    node = plan.node
    side = node.left if plan.lookup == "left" else node.right
    cols = node.left_keys if plan.lookup == "left" else node.right_keys
    scan = _scan_of(side)
    prefix = scan.prefix if scan is not None else ""
    names = [c[len(prefix):] if prefix and c.startswith(prefix) else c for c in cols]
    return KeyNotUnique(scan.flow if scan is not None else None,
                        dict(zip(names, values, strict=True)))


def _sides(plan: JoinPlan, left: Any, right: Any) -> tuple[Any, Any]:
    """(other, lookup) of a left and right pair."""
    return (right, left) if plan.lookup == "left" else (left, right)


def _back(plan: JoinPlan, other: Any, lookup: Any) -> tuple[Any, Any]:
    """(left, right) of an other and lookup pair."""
    return (lookup, other) if plan.lookup == "left" else (other, lookup)


# -- Spark -----------------------------------------------------------------------------
def gains(plan: JoinPlan, dl: DataFrame, dr: DataFrame, left: DataFrame | None,
          right: DataFrame | None, lineage: list[str]) -> tuple[DataFrame, DataFrame]:
    """What the left and right tables gain this epoch: ``dl`` and ``dr`` (the changes,
    with their lineage columns) for a join without a lookup side; see the module's
    docstring for one with. ``left`` and ``right`` are the stored tables (None: empty)."""
    if plan.lookup is None:
        return dl, dr
    other, look = _sides(plan, dl, dr)
    stored_other, stored_look = _sides(plan, left, right)
    quiet = local_rows(look) == 0
    if not quiet:
        check_unique(plan, look, stored_look, lineage)
    keys = [t.select(*lineage) for t in (look, stored_look)
            if t is not None and not (t is look and quiet)]
    kept = other
    if keys:
        known = keys[0] if len(keys) == 1 else keys[0].unionByName(keys[1])
        kept = waiting(other, known, lineage)
    if stored_other is not None and not quiet:
        matched = stored_other.join(look.select(*lineage), lineage, "left_semi")
        kept = kept.unionByName(matched.withColumn(MULT, -F.col(MULT)))
    return _back(plan, kept, look)


def waiting(other: DataFrame, known: DataFrame, lineage: list[str]) -> DataFrame:
    """``other ▷ known``: the new rows that found no lookup row. Usually every one found
    its match (a fact arrives after its dimension row), so one Spark job over ``other``'s
    key columns alone asks whether any key is missing first: if none is, nothing waits
    and ``other``'s other columns are not read a second time (the pairs read them once);
    otherwise the anti-join reads them."""
    missing = other.select(*lineage).join(known, lineage, "left_anti")
    [(some,)] = missing.agg(F.count(F.lit(1))).collect()
    if some:
        return other.join(known, lineage, "left_anti")
    return empty_frame(other.sparkSession, ddl_of(other.schema)).frame()


def padded(node: Join, waiting: DataFrame, unkeyed: DataFrame) -> DataFrame:
    """The NULL-padded rows' changes of left join ``node`` whose right side is the
    lookup table: the waiting rows' gains (:func:`gains`) and the new rows whose key
    has a NULL, their right columns NULL."""
    lcols = [F.col(f"`{c}`") for c in node.left.columns]
    pads = [F.lit(None).cast(t).alias(c) for c, t in node.right.columns.items()]
    return waiting.select(*lcols, MULT).unionByName(unkeyed.select(*lcols, MULT)).select(
        *lcols, *pads, MULT)


def check_unique(plan: JoinPlan, look: DataFrame, stored: DataFrame | None,
                 lineage: list[str]) -> None:
    """Raise :class:`KeyNotUnique` if the lookup side's new rows repeat a key among
    themselves or of ``stored`` (one Spark job)."""
    repeated = (look.groupBy(*lineage).agg(F.count(F.lit(1)).alias("_n"))
                .where("_n > 1").select(*lineage))
    if stored is not None:
        repeated = repeated.unionByName(
            look.select(*lineage).join(stored.select(*lineage), lineage, "left_semi"))
    # one row by an aggregate (one job), not limit(1), which may take a job per try
    [(found,)] = repeated.select(F.struct(*lineage).alias("_k")).agg(F.min("_k")).collect()
    if found is not None:
        raise _violation(plan, list(found))


# -- Arrow -----------------------------------------------------------------------------
def gains_arrow(plan: JoinPlan, a: pa.Table, b: pa.Table, left: Sequence[pa.Table],
                right: Sequence[pa.Table], lineage: list[str]
                ) -> tuple[pa.Table, pa.Table] | None:
    """:func:`gains` for an epoch in the driver: ``a`` and ``b`` the held changes,
    ``left`` and ``right`` the stored tables' parts; None where a key type is Spark's
    to match."""
    if plan.lookup is None:
        return a, b
    other, look = _sides(plan, a, b)
    stored_other, stored_look = _sides(plan, left, right)
    stored_look = [t for t in stored_look if t.num_rows]
    if look.num_rows and not _check_unique_arrow(plan, look, stored_look, lineage):
        return None
    keys = [t.select(lineage) for t in (look, *stored_look) if t.num_rows]
    kept = [other]
    if keys and other.num_rows:
        known = pa.concat_tables(keys, promote_options="permissive")
        waiting = driver_rows.match([other.column(j) for j in lineage],
                                    [known.column(j) for j in lineage], "left anti")
        if waiting is None:
            return None
        kept = [other.take(waiting.column("__l"))]
    if look.num_rows:
        for t in stored_other:
            hit = driver_rows.match([t.column(j) for j in lineage],
                                    [look.column(j) for j in lineage], "left semi")
            if hit is None:
                return None
            matched = t.take(hit.column("__l")).select(other.column_names)
            i = matched.column_names.index(MULT)
            kept.append(matched.set_column(i, MULT, pc.negate_checked(matched.column(MULT))))
    try:
        table = pa.concat_tables([k.cast(other.schema) for k in kept])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return _back(plan, table, look)


def padded_arrow(waiting: pa.Table, unkeyed: pa.Table, lcols: Sequence[str],
                 rtypes: dict[str, pa.DataType]) -> pa.Table | None:
    """:func:`padded` in Arrow (``rtypes``: the right columns' types)."""
    try:
        rows = pa.concat_tables([waiting.select([*lcols, MULT]),
                                 unkeyed.select([*lcols, MULT])],
                                promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    pads = {c: pa.nulls(rows.num_rows, t) for c, t in rtypes.items()}
    return pa.table({**{c: rows.column(c) for c in lcols}, **pads, MULT: rows.column(MULT)})


def _check_unique_arrow(plan: JoinPlan, look: pa.Table, stored: Sequence[pa.Table],
                        lineage: list[str]) -> bool:
    """:func:`check_unique` in Arrow; False if a key type is Spark's to match."""
    if not all(driver_rows.groupable(look.schema.field(j).type) for j in lineage):
        return False
    counts = look.select(lineage).group_by(lineage, use_threads=False).aggregate(
        [([], "count_all")])
    repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
    if repeated.num_rows:
        raise _violation(plan, [repeated.column(j)[0].as_py() for j in lineage])
    for t in stored:
        hit = driver_rows.match([look.column(j) for j in lineage],
                                [t.column(j) for j in lineage], "left semi")
        if hit is None:
            return False
        if hit.num_rows:
            row = int(hit.column("__l")[0].as_py())
            raise _violation(plan, [look.column(j)[row].as_py() for j in lineage])
    return True
