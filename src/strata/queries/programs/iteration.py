"""Iterative queries (k-means, PageRank), kept up to date by diffusion.

An iteration names an *iterate* ``X`` (a keyed relation), a query ``init`` that gives
new keys their first value, and a ``step`` query over flows and ``X`` (scanned as a flow
named like the iterate) that groups by ``X``'s key and returns ``X``'s columns::

    X₀ = init(S)            (one row per key: duplicates keep any one)
    Xᵢ = Xᵢ₋₁ ◁ step(Xᵢ₋₁, S)   for i = 1 … times   (◁: step rows replace X rows by key)

Recomputing that for every increment of ``S`` redoes the whole loop over all data.
Instead each epoch runs Fegaras's approximation (TKDE 2016, §2 and §8.2): ``X`` keeps
its value from the last epoch; keys new in ``init(ΔS)`` join it; then each step feeds
what changed — ``ΔS`` in the first step, and the change ``ΔX`` of the iterate in every
step — through the step's incremental program. Inside the loop a step merges its
results only into the groups they touch (a right outer join with the state, the
*diffusion* ``T ⊗̂ ΔT``), held in an overlay; after the loop one full merge writes the
state (``T ⊗ ΔT``). So a step costs what changed and what it reaches, not the state.

Where ``X`` meets the data through an equi-join (PageRank's ranks joined to links), a
changed rank flows exactly to the rows it joins with. A nearest join (k-means' assignment
of points to centroids) assigns only the epoch's new rows, again in every step; older
rows keep the centre they were given — the approximation, measured against full
recomputation by ``benchmarks/queries.py``. Changes of ``X`` no larger than
``tolerance`` are not propagated (they stop the loop early when nothing else moves).
Iteration inputs must be insert-only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from strata.queries.arrow import arrow_step, driver_rows
from strata.queries.arrow.rows import Rows
from strata.queries.front.api import Relation
from strata.queries.front.sql import parse_sql
from strata.queries.plan.algebra import GroupBy, Map, Query, Scan
from strata.queries.plan.errors import NotIncrementalError, QueryError
from strata.queries.plan.expressions import MULT, widest
from strata.queries.plan.incremental import IncrementalQuery, derive
from strata.queries.programs.program import QueryProgram, output_ddl
from strata.queries.spark import dispatch
from strata.queries.spark.evaluator import EvalMode, Evaluator
from strata.queries.spark.frames import cut
from strata.queries.spark.tables import QueryTables

log = logging.getLogger(__name__)
ITERATE = "iterate"  # the table holding the iterate's current value
PENDING = "pending"  # the iterate's changes the step has not seen yet


@dataclass(frozen=True)
class Iteration:
    """An iterative query (see the module docstring); build it with :func:`iterate`."""

    name: str
    columns: Mapping[str, str]  # the iterate's columns → Spark types
    key: tuple[str, ...]
    init: str | Relation
    step: str | Relation
    times: int = 10
    tolerance: float = 0.0


def iterate(name: str, schema: str | Mapping[str, str], key: str | Sequence[str], *,
            init: str | Relation, step: str | Relation, times: int = 10,
            tolerance: float = 0.0) -> Iteration:
    """An iteration whose iterate ``name`` has columns ``schema`` (DDL text or a mapping)
    and unique ``key``. ``init`` (SQL or a relation, a filter/projection of flows)
    gives new keys their first value; ``step`` reads flows and ``name`` and must group by
    ``key`` returning the iterate's columns. Pass the result to ``add_query``."""
    from strata.model.schema import parse_ddl, type_ddl

    cols = dict(schema) if isinstance(schema, Mapping) else {
        f.name: type_ddl(f.type) for f in parse_ddl(schema)}
    keys = (key,) if isinstance(key, str) else tuple(key)
    if not set(keys) <= set(cols):
        raise QueryError(f"iterate {name!r}: key {list(keys)} is not among its columns "
                         f"{list(cols)}")
    if times < 1:
        raise QueryError(f"iterate {name!r}: times must be at least 1, not {times}")
    if tolerance < 0:
        raise QueryError(f"iterate {name!r}: tolerance must not be negative")
    return Iteration(name, cols, keys, init, step, times, tolerance)


def compile_iteration(it: Iteration, flows: Mapping[str, Mapping[str, str]],
                      keys: Mapping[str, Sequence[str]] | None = None,
                      ) -> tuple[IncrementalQuery, IncrementalQuery]:
    """The incremental programs of ``it``'s init and step, checked against its iterate."""
    if it.name in flows:
        raise QueryError(f"iterate {it.name!r} has the name of a flow; rename it")
    keys = {**(keys or {}), it.name: list(it.key)}
    with_x = {**flows, it.name: {**it.columns, MULT: "bigint"}}

    def parsed(q: str | Relation, what: str) -> Query:
        try:
            if isinstance(q, Relation):
                return q.to_query(with_x, keys)
            return parse_sql(q, with_x, keys)
        except QueryError as e:
            raise QueryError(f"iterate {it.name!r}, {what}: {e}") from None

    init = derive(parsed(it.init, "init"))
    if not isinstance(init.root, (Map, Scan)) or it.name in init.input_flows:
        raise QueryError(f"iterate {it.name!r}: init must filter and project flows (no "
                         "join, group-by or the iterate itself); it is evaluated on each "
                         "increment's new rows")
    step = derive(parsed(it.step, "step"), iterate=it.name)
    for f in sorted(set(init.input_flows) | set(step.input_flows)):
        if f != it.name and MULT in flows[f]:
            raise NotIncrementalError(
                f"iterate {it.name!r}", f"flow {f!r} has deletes ({MULT}); iterations keep "
                "an approximate state that cannot take rows back", "feed it inserts only")
    root = step.root
    if it.name not in step.input_flows:
        raise QueryError(f"iterate {it.name!r}: the step does not read {it.name!r}")
    if not isinstance(root, GroupBy) or root.key is None or set(root.key) != set(it.key):
        raise QueryError(f"iterate {it.name!r}: the step must GROUP BY the iterate's key "
                         f"{list(it.key)} and return it as is")
    for what, q in (("init", init), ("step", step)):
        missing = set(it.columns) - set(q.root.columns)
        if missing:
            raise QueryError(f"iterate {it.name!r}: {what} does not return {sorted(missing)}")
        for c, t in it.columns.items():
            try:
                widest([q.root.columns[c], t])
            except QueryError:
                raise QueryError(f"iterate {it.name!r}: {what} returns {c} as "
                                 f"{q.root.columns[c]}, the iterate has {t}") from None
    return init, step


class IterationProgram(QueryProgram):
    """The compiled form of an iteration stage: each epoch runs the diffusion loop."""

    def __init__(self, it: Iteration, init: IncrementalQuery, step: IncrementalQuery,
                 flow_ddl: Mapping[str, str], output: str) -> None:
        super().__init__(step, flow_ddl, output, output_ddl(it.columns))
        self.it, self.init = it, init

    def explain(self) -> str:
        it = self.it
        return "\n".join([
            f"iterate {it.name} ({', '.join(it.columns)}) keyed by {', '.join(it.key)}: "
            f"up to {it.times} steps per increment, tolerance {it.tolerance}",
            f"  table {ITERATE}: the iterate's current value, never re-shuffled",
            "  init (new keys only):", *("    " + s for s in self.init.explain().splitlines()),
            "  step (inside the loop each group-by merges by right outer join into an "
            "overlay; one full outer merge after the loop):",
            *("    " + s for s in self.inc.explain().splitlines())])

    def answer_spec(self) -> dict:
        return {"table": ITERATE, "grouped": True, "total": False, "total_counts": [],
                "columns": list(self.it.columns), "ddl": self.output_ddl, "order_by": [],
                "limit": None}

    eval_mode = EvalMode.DIFFUSION

    def whole_flows(self) -> dict[str, str]:
        return {self.it.name: ITERATE}

    def evaluate(self, run: Evaluator) -> Rows:
        it, tables = self.it, run.tables
        fresh = self._keyed(run.changes(self.init.root).frame().where(f"{MULT} > 0"))
        fresh = fresh.dropDuplicates(["_g"])
        known = tables.lookup(ITERATE, driver_rows.select(Rows.of_frame(fresh), ["_g"]))
        if known is not None:
            fresh = fresh.join(known.frame().select("_g"), "_g", "left_anti")
        tables.upsert(ITERATE, fresh)
        dx = self._signed(self._overlay(tables), 1)
        stored = tables.read(PENDING)
        if stored is not None:  # what the last step of the previous epoch moved
            small = tables.arrow(PENDING) if run.arrow else None
            carried = Rows.of_frame(stored) if small is None else \
                Rows.of_arrow(run.spark, small, tables.schema(PENDING))
            dx = driver_rows.union([dx, carried])
        fits = True  # the last step's moves fitted in the driver: this one tries it too
        for i in range(it.times):
            began = time.perf_counter()
            run.step({it.name: dx}, only=None if i == 0 else it.name)
            dy = run.changes(self.inc.root)
            keyed = arrow_step.keyed(it.columns, it.key, dy) if run.arrow else None
            new = keyed if keyed is not None else Rows.of_frame(
                self._keyed(dy.frame().where(f"{MULT} > 0")))
            old = tables.lookup(ITERATE, driver_rows.select(new, ["_g"]))
            done = arrow_step.moves(new, old, it.columns, it.tolerance) if run.arrow else None
            retract: Rows | None
            if done is not None:
                moved, retract = done
            elif old is None:
                moved, retract = cut(new, fits)[0], None
            else:
                n, o = new.frame().alias("n"), old.frame().alias("o")
                pairs = n.join(o, F.col("n._g") == F.col("o._g"), "left")
                pairs = pairs.where(F.col("o._g").isNull() | self._differs("n", "o"))
                j = cut(pairs.select(F.struct("n.*").alias("n"), F.struct("o.*").alias("o"),
                                     F.col("o._g").isNotNull().alias("had")), fits)[0]
                moved = cut(driver_rows.fields_of(j, "n"), fits)[0]
                retract = driver_rows.fields_of(j, "o", where="had")
            tables.upsert(ITERATE, moved)
            parts = [self._signed(moved, 1)]
            if retract is not None:
                parts.append(self._signed(retract, -1))
            dx, rows = cut(driver_rows.union(parts), fits)
            if rows is None:  # checkpointed: counted where its rows lie
                rows = dx.frame().count()
            fits = dispatch.driver_may_hold(run.spark, rows)
            secs = time.perf_counter() - began
            log.debug("iterate %s: step %d moved %s rows in %.3f s", it.name, i + 1,
                      rows, secs, extra={"step_seconds": secs})
            if rows == 0:
                log.debug("iterate %s: nothing moved after step %d", it.name, i + 1)
                break
        # the step has not seen the last step's moves yet: the next epoch feeds them first
        tables.stage(PENDING, dx, [], "replace")
        out = self._epoch_changes(run)
        run.flush()
        return out

    # -- helpers -------------------------------------------------------------------------
    def _keyed(self, df: DataFrame) -> DataFrame:
        """Rows of the iterate: lineage ``_g`` (its key), its columns cast, ``_keep``."""
        it = self.it
        return df.select(F.struct(*[F.col(f"`{k}`").cast(it.columns[k]).alias(k)
                                    for k in it.key]).alias("_g"),
                         *[F.col(f"`{c}`").cast(t).alias(c) for c, t in it.columns.items()],
                         F.lit(True).alias("_keep"))

    def _signed(self, rows: Rows, sign: int) -> Rows:
        return driver_rows.select(rows, list(self.it.columns), {MULT: sign})

    @staticmethod
    def _overlay(tables: QueryTables) -> Rows:
        """The iterate's rows upserted this epoch (without the ``_live`` flag)."""
        over = tables.overlay[ITERATE]
        return driver_rows.select(over, [c for c in over.columns if c != "_live"])

    def _differs(self, a: str, b: str, exact: bool = False) -> Column:
        """Row ``a`` differs from row ``b`` by more than the tolerance in some column."""
        out = F.lit(False)
        tol = 0.0 if exact else self.it.tolerance
        for c, t in self.it.columns.items():
            x, y = F.col(f"{a}.`{c}`"), F.col(f"{b}.`{c}`")
            if tol > 0 and t in ("float", "double"):
                far = F.coalesce(F.abs(x - y) > F.lit(tol), ~x.eqNullSafe(y))
            else:
                far = ~x.eqNullSafe(y)
            out = out | far
        return out

    def _epoch_changes(self, run: Evaluator) -> Rows:
        """The iterate's changes over the whole epoch: the keys it moved, old out, new in."""
        over = self._overlay(run.tables)
        base = run.tables.read(ITERATE)
        if base is None:
            return self._signed(over, 1)
        changed = over.frame()
        old = base.join(changed.select("_g"), "_g", "left_semi")
        n, o = changed.alias("n"), old.alias("o")
        j = n.join(o, F.col("n._g") == F.col("o._g"), "left").where(
            F.col("o._g").isNull() | self._differs("n", "o", exact=True))
        j = run.cache(j)
        return driver_rows.union([
            self._signed(Rows.of_frame(j.select("n.*")), 1),
            self._signed(Rows.of_frame(j.where(F.col("o._g").isNotNull()).select("o.*")), -1)])
