"""Evaluating a query's changes for one epoch as Spark DataFrame plans (no Python per
record): the incremental operators ``h``, ``⊗`` and ``a`` of each group-by and join."""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType
from sqlglot import exp

from strata.model.errors import StrataError
from strata.queries.arrow import arrow_step, driver_rows
from strata.queries.arrow.rows import Rows, spark_type
from strata.queries.plan.algebra import (
    Explode,
    GroupBy,
    Join,
    Map,
    Nearest,
    Node,
    Scan,
    Union,
    Windowed,
)
from strata.queries.plan.expressions import MULT, bind, substitute, to_sql, widest
from strata.queries.plan.incremental import (
    GroupPlan,
    IncrementalQuery,
    JoinPlan,
    answer_scope,
    scanned,
)
from strata.queries.spark import (
    dispatch,
    explode,
    lookup_join,
    outer_join,
    window_functions,
)
from strata.queries.spark.bucketed import latest_frame
from strata.queries.spark.dispatch import EvalMode
from strata.queries.spark.frames import cut, empty_frame, local_rows, struct_type
from strata.queries.spark.group_by import lift
from strata.queries.spark.tables import QueryTables
from strata.storage.increments import Increment, read_table

MAX_CENTERS = 10_000  # a nearest join's centers are compared with every row


class CompiledQuery(Protocol):
    """What the evaluator reads of the program whose epoch it runs (a
    :class:`~strata.queries.programs.program.QueryProgram`): the incremental plan and the
    DDL of each input flow."""

    @property
    def inc(self) -> IncrementalQuery: ...

    @property
    def flow_ddl(self) -> Mapping[str, str]: ...


class Evaluator:
    """Evaluates the changes of every operator of a query for one epoch (bottom-up).

    ``frames`` gives flows' changes directly (instead of reading the epoch's increments);
    ``whole`` names, per flow, the keyed table that holds all its rows (an iterate)."""

    def __init__(self, program: CompiledQuery, spark: SparkSession, tables: QueryTables,
                 inputs: Mapping[str, Increment | Sequence[Increment]], *,
                 mode: EvalMode = EvalMode.EPOCH,
                 frames: Mapping[str, DataFrame | Rows] | None = None,
                 whole: Mapping[str, str] | None = None) -> None:
        self.program, self.spark, self.tables, self.inputs = program, spark, tables, inputs
        self.mode = mode
        self._frames: dict[str, Rows] = {k: Rows.of_frame(v) for k, v in (frames or {}).items()}
        self._whole: dict[str, str] = dict(whole or {})
        self._deferred = mode is not EvalMode.EPOCH  # until flushed
        self._only: str | None = None  # when set: subtrees not reading this flow are quiet
        self._cached: list[DataFrame] = []
        self._held: dict[str, list[Rows]] = {}  # join inputs appended when flushed
        self._lineage: dict[str, list[str]] = {}  # a held join input's lineage columns
        self._assigned: dict[int, tuple[Rows, Rows | None]] = {}
        # whether operators over rows the driver holds run in Arrow where they can
        self.arrow = mode is not EvalMode.EPOCH and dispatch.arrow_steps(spark)

    def step(self, frames: Mapping[str, Rows], only: str | None = None) -> None:
        """Start a step of a diffusion: ``frames`` are the changes given directly, and
        with ``only`` every subtree that does not read that flow is quiet (unchanged)."""
        if self.mode is not EvalMode.DIFFUSION:
            raise StrataError("steps belong to a diffusion (EvalMode.DIFFUSION)")
        self._frames, self._only = dict(frames), only

    def cache(self, df: DataFrame) -> DataFrame:
        """``df`` persisted until :meth:`release` (computed once however often it is used)."""
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._cached.append(df)
        return df

    def release(self) -> None:
        for df in self._cached:
            df.unpersist()

    def flush(self) -> None:
        """Write what a diffusion held back: join inputs, then merged group states."""
        self._deferred = False
        self._frames, self._only = {}, None
        for name, frames in self._held.items():
            # a step retracts what an earlier step inserted: held rows cancel here
            delta = driver_rows.netted(frames) if self.arrow else None
            if delta is None:
                delta = frames[0] if len(frames) == 1 else Rows.of_frame(functools.reduce(
                    DataFrame.unionByName, [f.frame() for f in frames]))
            if not (self.arrow and self._compact_held(name, delta)):
                self._append(name, delta, self._lineage[name])
        self._held.clear()
        self.tables.flush_overlays()

    def _compact_held(self, name: str, delta: Rows) -> bool:
        """Stage join input ``name`` rewritten with ``delta``, netted in Arrow, if it is due
        for compaction and small enough to read here; whether it was."""
        if not self.tables.needs_compaction(name):
            return False
        stored = self.tables.arrow(name)
        if stored is None:
            return False
        whole = driver_rows.netted([Rows.of_arrow(self.spark, stored,
                                                  self.tables.schema(name)), delta])
        if whole is None:
            return False
        self.tables.stage(name, whole, self._lineage[name], "replace")
        return True

    def changes(self, node: Node) -> Rows:
        """The rows ``node``'s result gains (``_mult`` > 0) and loses (< 0) this epoch."""
        if self._only is not None and self._only not in scanned(node):
            return self._empty(node)
        if isinstance(node, Scan):
            return self._scan(node)
        if isinstance(node, Nearest):
            return self._nearest(node, self.changes(node.left))
        if isinstance(node, Map):
            d = self.changes(node.child)
            held = arrow_step.mapped(node, d) if self.arrow else None
            if held is not None or (node.where is None and node.outputs is None):
                return held or d
            df = d.frame()
            if node.where is not None:
                df = df.where(F.expr(to_sql(node.where)))
            if node.outputs is not None:
                df = df.select(*[F.expr(to_sql(e)).alias(n) for n, e in node.outputs], MULT)
            return Rows.of_frame(df)
        if isinstance(node, Join):
            return self._join(self.program.inc.joins[id(node)],
                              self.changes(node.left), self.changes(node.right))
        if isinstance(node, GroupBy):
            return self._group(self.program.inc.groups[id(node)], self.changes(node.child))
        if isinstance(node, Union):
            return driver_rows.union([self.changes(c) for c in node.inputs])
        if isinstance(node, Explode):
            d = self.changes(node.child)
            held = explode.arrow_rows(node, d) if self.arrow else None
            return held if held is not None else Rows.of_frame(
                explode.spark_rows(node, d.frame()))
        if isinstance(node, Windowed):
            return Rows.of_frame(window_functions.changes(
                self, self.program.inc.windows[id(node)], self.changes(node.child).frame()))
        raise StrataError(f"cannot run query operator {type(node).__name__}")

    def _empty(self, node: Node) -> Rows:
        ddl = ", ".join([*(f"`{c}` {t}" for c, t in node.columns.items()), f"{MULT} bigint"])
        return empty_frame(self.spark, ddl)

    def _scan(self, node: Scan) -> Rows:
        if node.flow in self._frames:
            rows = self._frames[node.flow]
        else:  # held (read by the driver) when operators may run in Arrow
            held_rows = self.held_flow_rows(node.flow) if self.arrow else None
            if held_rows is not None:
                rows = held_rows
            else:
                df = self.flow_rows(node.flow)
                rows = cut(df)[0] if self.arrow else Rows.of_frame(df)
        names = {c: node.prefix + c for c in node.schema}
        held = arrow_step.renamed(rows, names) if self.arrow else None
        if held is not None:
            return held
        return Rows.of_frame(rows.frame().select(
            *[F.col(f"`{c}`").alias(n) for c, n in names.items()], MULT))

    def _files(self, flow: str) -> list[str]:
        incs = self.inputs.get(flow, ())
        return [f for inc in ([incs] if isinstance(incs, Increment) else incs)
                for f in inc.files]

    def held_flow_rows(self, flow: str) -> Rows | None:
        """:meth:`flow_rows` read by the driver with pyarrow and held (no Spark job), if
        the increment has at most ``spark.strata.query.driverRows`` rows and its types read as Spark
        reads them; else None."""
        schema = struct_type(self.program.flow_ddl[flow])
        try:
            table = read_table(self._files(flow), driver_rows.arrow_schema(schema),
                               dispatch.driver_rows(self.spark))
        except (OSError, KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            return None
        if table is None:
            return None
        mult = (table.column(MULT).cast(pa.int64()) if MULT in table.column_names
                else pa.array(np.ones(table.num_rows, np.int64)))
        fields = [f for f in schema.fields if f.name != MULT]
        table = table.select([f.name for f in fields]).append_column(MULT, mult)
        return Rows.of_arrow(self.spark, table, StructType(
            [*fields, StructField(MULT, LongType(), MULT in schema.fieldNames())]))

    def flow_rows(self, flow: str) -> DataFrame:
        """The epoch's increment of input ``flow``: its columns and ``_mult`` (1 if the
        flow has none)."""
        files = self._files(flow)
        ddl = self.program.flow_ddl[flow]
        df = (self.spark.read.schema(ddl).parquet(*files) if files
              else empty_frame(self.spark, ddl).frame())
        if MULT in df.columns:
            return df.withColumn(MULT, F.col(MULT).cast("bigint"))
        return df.withColumn(MULT, F.lit(1).cast("bigint"))

    def materialize(self, df: DataFrame) -> DataFrame:
        """``df``, computed once when first used. A diffusion leaves it as it is: what one
        step passes to the next is cut from its plan by :meth:`QueryTables.upsert` and
        :func:`~strata.queries.spark.frames.cut` (many cached plans would slow down the planning
        of every step, as Spark compares each plan with every cached one)."""
        return df if self._deferred else self.cache(df)

    # -- join ------------------------------------------------------------------------------
    def _join(self, plan: JoinPlan, left_rows: Rows, right_rows: Rows) -> Rows:
        node = plan.node
        types = [widest([node.left.columns[a], node.right.columns[b]]) for a, b in node.on]

        lineage = [f"_j{i}" for i in range(len(types))]

        def known(cols: list[str]) -> Column:
            ok = F.lit(True)
            for c in cols:
                ok = ok & F.col(f"`{c}`").isNotNull()  # NULL never equals anything
            return ok

        def keyed(d: DataFrame, cols: list[str]) -> DataFrame:
            # the lineage is the join key cast to a common type, one top-level column per
            # part: Spark hashes and compares those far faster than a struct of them
            return d.where(known(cols)).select("*", *[
                F.col(f"`{c}`").cast(t).alias(j)
                for c, t, j in zip(cols, types, lineage, strict=True)])

        outer = node.how == "left"
        held = self._join_held(plan, left_rows, right_rows, types, lineage) \
            if self.arrow else None
        if held is not None:
            return held
        dl, dr = left_rows.frame(), right_rows.frame()
        unkeyed = dl.where(~known(node.left_keys)) if outer else None
        dl, dr = keyed(dl, node.left_keys), keyed(dr, node.right_keys)
        left, right = self.tables.read(f"{plan.name}_left"), self.tables.read(
            f"{plan.name}_right")
        lcols, rcols = list(node.left.columns), list(node.right.columns)
        on = functools.reduce(operator.and_, [F.col(f"l.{j}") == F.col(f"r.{j}")
                                              for j in lineage])

        def pair(a: DataFrame, b: DataFrame) -> DataFrame:
            j = a.alias("l").join(b.alias("r"), on)
            return j.select(*[F.col(f"l.`{c}`") for c in lcols],
                            *[F.col(f"r.`{c}`") for c in rcols],
                            (F.col(f"l.{MULT}") * F.col(f"r.{MULT}")).alias(MULT))

        # a side known to be empty (quiet in an iteration step) joins with nothing: its
        # pairs are not built at all, as analysing them would cost more with every step
        quiet_l, quiet_r = local_rows(dl) == 0, local_rows(dr) == 0
        parts = [pair(dl, dr)]
        if right is not None and not quiet_l:
            parts.append(pair(dl, right))
        if left is not None and not quiet_r:
            parts.append(pair(left, dr))
        # rows held back by earlier steps of this epoch (joined apart, so that the
        # bucketed tables above are still read where they lie)
        if not quiet_l:
            parts += [pair(dl, r.frame()) for r in self._held.get(f"{plan.name}_right", [])]
        if not quiet_r:
            parts += [pair(lh.frame(), dr) for lh in self._held.get(f"{plan.name}_left", [])]
        gained = lookup_join.gains(plan, dl, dr, left, right, lineage)
        if outer:
            assert unkeyed is not None
            parts.append(outer_join.padded(plan.node, dl, dr, unkeyed, left, right, lineage)
                         if plan.lookup is None
                         else lookup_join.padded(plan.node, gained[0], unkeyed))
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        out = self.materialize(out)
        for side, delta in zip(("left", "right"), gained, strict=True):
            self._append(f"{plan.name}_{side}", Rows.of_frame(delta), lineage)
        return Rows.of_frame(out)

    def _join_held(self, plan: JoinPlan, dl: Rows, dr: Rows, types: list[str],
                   lineage: list[str]) -> Rows | None:
        """A step's join in Arrow: both sides' changes held, the stored inputs small and
        the inputs held back this epoch held too; else None."""
        node = plan.node
        kl = arrow_step.with_lineage(dl, node.left_keys, types, lineage)
        kr = arrow_step.with_lineage(dr, node.right_keys, types, lineage)
        if kl is None or kr is None:
            return None
        a, b = kl.arrow(), kr.arrow()
        assert a is not None and b is not None
        sides: dict[str, list[pa.Table]] = {}
        for side in ("left", "right"):
            name = f"{plan.name}_{side}"
            stored = self.tables.arrow(name) if self.tables.has(name) else None
            extra = [f.arrow() for f in self._held.get(name, [])]
            if (self.tables.has(name) and stored is None) or any(e is None for e in extra):
                return None
            sides[side] = [t for t in (stored, *extra) if t is not None]
        todo = [(a, b), *((a, r) for r in sides["right"] if a.num_rows),
                *((lt, b) for lt in sides["left"] if b.num_rows)]
        lcols, rcols = list(node.left.columns), list(node.right.columns)
        pairs = [arrow_step.paired(x, y, lineage, lcols, rcols) for x, y in todo]
        fields = {**{f.name: f for f in kr.schema.fields}, **{f.name: f for f in kl.schema.fields}}
        if node.how == "left":  # the right columns are NULL in padded rows
            fields.update({c: StructField(c, fields[c].dataType, True) for c in rcols})
        schema = StructType([fields[c] for c in [*lcols, *rcols, MULT]])
        arrow_schema = driver_rows.arrow_schema(schema)
        gained = lookup_join.gains_arrow(plan, a, b, sides["left"], sides["right"], lineage)
        if gained is None:
            return None
        if node.how == "left":
            rows = dl.arrow()
            assert rows is not None  # held, as with_lineage found
            no_key = pc.is_null(rows.column(node.left_keys[0]))
            for c in node.left_keys[1:]:
                no_key = pc.or_(no_key, pc.is_null(rows.column(c)))
            rtypes = {c: arrow_schema.field(c).type for c in rcols}
            pairs.append(outer_join.padded_arrow(
                a, b, rows.filter(no_key), sides["left"], sides["right"], lineage, lcols,
                rtypes) if plan.lookup is None else lookup_join.padded_arrow(
                    gained[0], rows.filter(no_key), lcols, rtypes))
        if any(p is None for p in pairs):
            return None
        try:
            out = pa.concat_tables([p.cast(arrow_schema) for p in pairs if p is not None])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None  # types Spark would reconcile: its plan does
        for side, delta, table in (("left", kl, gained[0]), ("right", kr, gained[1])):
            kept = delta if table is delta.arrow() else Rows.of_arrow(
                self.spark, table, delta.schema)
            self._append(f"{plan.name}_{side}", kept, lineage)
        return Rows.of_arrow(self.spark, out, schema)

    def _append(self, name: str, delta: Rows, lineage: list[str]) -> None:
        """Append a join input's increment to its table; when the table has many files,
        first rewrite it with rows netted (a delete cancels its insert), bucket by bucket."""
        if self._deferred:
            if local_rows(delta) != 0:
                self._held.setdefault(name, []).append(delta)
                self._lineage[name] = lineage
            return
        compact = self.tables.needs_compaction(name)
        if not compact and name in self.tables.live and local_rows(delta) == 0:
            return  # nothing to add to a table that exists: no job
        old = self.tables.read(name) if compact else None
        if old is not None:
            # grouping the bucketed table by all its columns (the lineage among them)
            # needs no shuffle: each bucket is netted where it lies
            cols = [c for c in old.columns if c != MULT]
            netted = (old.groupBy(*cols).agg(F.sum(MULT).alias(MULT)).where(f"{MULT} <> 0")
                      .select(*old.columns))
            self.tables.stage(name, netted, lineage, "replace")
        self.tables.stage(name, delta, lineage, "append")  # bucketed where it is: no shuffle

    # -- nearest join ----------------------------------------------------------------------
    def _nearest(self, node: Nearest, d: Rows) -> Rows:
        """This epoch's rows assigned to the nearest current center. A later step of the
        epoch re-assigns them: it retracts the previous assignment and inserts the new."""
        rows, before = self._assigned.get(id(node), (None, None))
        if rows is None:  # the first step: the epoch's new rows
            rows = cut(d)[0]
        assert isinstance(node.right, Scan)
        centers = self.tables.current(self._whole[node.right.flow])
        cols = list(node.right.schema)
        held = centers.arrow() if centers is not None else None
        got: Sequence[Any] = (
            held.select(cols).slice(0, MAX_CENTERS + 1).to_pylist() if held is not None
            else centers.frame().select(*cols).limit(MAX_CENTERS + 1).collect() if centers
            else [])
        if len(got) > MAX_CENTERS:
            raise StrataError(f"a nearest join compares each row with every center; "
                              f"{node.right.flow} has more than {MAX_CENTERS}")
        now = arrow_step.nearest(node, rows, got) if self.arrow and got else None
        if not got:
            now = self._empty(node)
        elif now is None:
            prefixed = [node.right.prefix + c for c in cols]
            dists = []
            for i, r in enumerate(got):
                lits = {p: exp.cast(exp.Literal.string(str(r[c])) if r[c] is not None
                                    else exp.Null(), node.right.columns[p])
                        for p, c in zip(prefixed, cols, strict=True)}
                dist = F.expr(to_sql(substitute(node.distance, lits)))
                dists.append(F.struct(F.coalesce(dist.cast("double"), F.lit(float("inf"))),
                                      F.lit(i)))
            pick = (F.least(*dists) if len(dists) > 1 else dists[0]).getField("col2")
            table = self.spark.createDataFrame(
                [(i, *[r[c] for c in cols]) for i, r in enumerate(got)],
                ", ".join(["`_i` int", *(f"`{p}` {node.right.columns[p]}"
                                          for p in prefixed)]))
            now = Rows.of_frame(rows.frame().withColumn("_i", pick)
                                .join(F.broadcast(table), "_i").select(*node.columns, MULT))
        now = cut(now)[0]
        self._assigned[id(node)] = (rows, now)
        if before is None:
            return now
        retracted = arrow_step.negated(before)
        if retracted is None:
            retracted = Rows.of_frame(before.frame().withColumn(MULT, -F.col(MULT)))
        return driver_rows.union([now, retracted])

    # -- group-by --------------------------------------------------------------------------
    def _touched_state(self, name: str, h: DataFrame) -> DataFrame | None:
        """The newest stored row of each group of ``h`` (a semi join, then the newest
        version per group: the stored side is read where it lies, only ``h``'s keys are
        shuffled)."""
        stored = self.tables.read_versions(name)
        if stored is None:
            return None
        # hash joins on h's keys: the stored side streams past them, unsorted
        touched = stored.join(h.select("_g").hint("shuffle_hash"), "_g", "left_semi")
        state = latest_frame(touched) if self.tables.versioned(name) else touched
        return state.hint("shuffle_hash")

    def _group(self, plan: GroupPlan, d: Rows) -> Rows:
        node = plan.node
        lifted = arrow_step.lifted(plan, d) if self.arrow else None
        h_rows = lifted if lifted is not None else Rows.of_frame(lift(plan, d.frame()))
        outputs = [n for n, _ in node.outputs]
        state_rows: Rows | None = None
        if self._deferred:  # only the groups this step touches, found by the held ``h``
            h_rows = cut(h_rows)[0]
            state_rows = self.tables.lookup(plan.name, driver_rows.select(h_rows, ["_g"]))
            done = arrow_step.merged(plan, h_rows, state_rows) if self.arrow else None
            if done is not None:
                self.tables.upsert(plan.name, done[0], count="_cnt")
                return done[1]
            state = None if state_rows is None else state_rows.frame()
        h = h_rows.frame()
        # by the change (docs/architecture.md, "Group state by the change"): only the groups
        # of ``h`` are merged and appended as their new versions; else the whole table
        touched_only = self._deferred or (self.tables.has(plan.name) and
                                          not self.tables.versions_due(plan.name))
        if not self._deferred:
            if touched_only and not h_rows.is_held:
                # read twice (the touched groups, then the merge), and Spark may compute
                # both branches at once, each reading the whole change: computed once
                h = self.materialize(h)
            state = self._touched_state(plan.name, h) if touched_only else \
                self.tables.read(plan.name)
        if state is None:  # no state yet: an empty table of the same shape
            empty = h.select("*", *[F.lit(None).cast(spark_type(node.columns[o])).alias(o)
                                    for o in outputs], F.lit(False).alias("_keep")).limit(0)
            state = empty
        s, dd = state.alias("s"), h.alias("d")
        j = s.join(dd, F.col("s._g") == F.col("d._g"),
                   "right_outer" if touched_only else "full_outer")
        merged = [F.coalesce(F.col("s._g"), F.col("d._g")).alias("_g"),
                  F.col("d._g").isNotNull().alias("_touched"),
                  F.coalesce(F.col("s._keep"), F.lit(False)).alias("_old_keep"),
                  *[F.col(f"s.`{o}`").alias(f"_old_{o}") for o in outputs]]
        merged += [F.expr(bind(p.merge, {"s": f"s.`{p.name}`", "d": f"d.`{p.name}`"}))
                   .alias(p.name) for p in plan.parts]
        m = j.select(*merged)
        scope = answer_scope(plan)
        m = m.select("*", *[F.expr(bind(to_sql(e), scope)).alias(o)
                            for o, e in node.outputs])
        keep = F.col("_cnt") != 0
        if node.having is not None:
            keep = keep & F.coalesce(F.expr(bind(to_sql(node.having), scope)), F.lit(False))
        m = m.withColumn("_keep", keep)
        state_cols = ["_g", *[p.name for p in plan.parts], *outputs, "_keep"]
        if self._deferred:
            m_rows = cut(m)[0]
            self.tables.upsert(plan.name, driver_rows.select(m_rows, state_cols), count="_cnt")
            m = m_rows.frame()
        else:  # every touched group's new version (a tombstone if emptied), or the table
            m = self.materialize(m)
            rows = m if touched_only else m.where("_cnt <> 0")
            self.tables.stage(plan.name, rows.select(*state_cols), ["_g"],
                              "versions" if touched_only else "replace")
        same = F.lit(True)
        for o in outputs:
            same = same & F.col(f"`{o}`").eqNullSafe(F.col(f"`_old_{o}`"))
        touched = m.where("_touched")
        retract = touched.where(F.col("_old_keep") & ~(F.col("_keep") & same)).select(
            *[F.col(f"`_old_{o}`").alias(o) for o in outputs], F.lit(-1).cast("bigint")
            .alias(MULT))
        insert = touched.where(F.col("_keep") & ~(F.col("_old_keep") & same)).select(
            *[F.col(f"`{o}`") for o in outputs], F.lit(1).cast("bigint").alias(MULT))
        return Rows.of_frame(self.materialize(retract.unionByName(insert)))
