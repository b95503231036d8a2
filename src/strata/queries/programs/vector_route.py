"""Group-by queries on the vectorized route: state partitioned by group, never shuffled.

The general plan of a group-by (:mod:`strata.queries.spark.evaluator`) finds the groups an
increment touches with a semi join over the whole state table and appends their new
versions (docs/architecture.md, "Group state by the change"): it writes in proportion to
the increment but still scans the state and groups its versions. A group-by that

* reads one flow through filters and projections (a flow with deletes, a ``_mult``
  column, only for counts, sums and averages: ``min`` and ``max`` cannot take a row back),
* groups by keys of integer, string, boolean or date type,
* computes only ``count``, ``sum``, ``avg``, ``min`` and ``max`` (no ``DISTINCT``, no user
  aggregate) and outputs its keys and aggregates as they are (no ``HAVING``, no
  expression over them)

runs instead as a vectorized stage (:mod:`strata.physical.vectorized`): Spark computes
``h`` (each part's lift, per group) over the increment, hash-partitions the groups into
the stage's fixed partitions, and the task of partition *p* merges them into *p*'s
columnar state with ``⊗`` (Arrow compute: ``+``, ``least``, ``greatest``), writes the
changed groups as a new state run and the answer's changes (−old row, +new row) as the
output increment. One Spark job per epoch; only the increment's groups cross the
shuffle. A small epoch runs in the driver (``VectorizedProgram.in_driver``): Spark reads
and projects the increment in one stage, Arrow aggregates ``h`` and the driver merges each
partition's groups; nothing is shuffled. SQL groups NULL keys together, which a
vectorized stage does not: each key is stored as its value with NULL replaced by a
placeholder, and a flag saying it was NULL.
``docs/vectorized.md``, "Group-by queries", has the measurements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from sqlglot import exp

from strata import config
from strata.model.errors import TranslateError
from strata.model.schema import parse_ddl
from strata.model.vectorized import VectorResult, VectorShape
from strata.physical import spark_hash
from strata.physical.exchange import with_partition
from strata.physical.program import EpochContext, EpochOutcome
from strata.physical.session import set_confs
from strata.physical.vectorized import VectorizedProgram, VectorState
from strata.queries.arrow import arrow_expr, driver_rows
from strata.queries.arrow.arrow_expr import ARROW_TYPES, Unsupported
from strata.queries.arrow.arrow_lift import aggregate, outside, split_lift
from strata.queries.plan.algebra import GroupBy
from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import MULT, parse, to_sql, type_of
from strata.queries.plan.incremental import IncrementalQuery
from strata.queries.spark import dispatch
from strata.queries.spark.group_by import row_exprs
from strata.storage.home import StageLayout
from strata.storage.increments import read_table
from strata.storage.manifest import StateSnapshot

# key type -> the placeholder a NULL key is stored as (its flag says it was NULL)
_PLACEHOLDER = {"tinyint": "0", "smallint": "0", "int": "0", "bigint": "0", "string": "''",
                "boolean": "false", "date": "DATE'1970-01-01'"}
# the same placeholders as Arrow values, for the types the driver's Arrow path evaluates
_PLACEHOLDER_VALUE: dict[str, Any] = {"tinyint": 0, "smallint": 0, "int": 0, "bigint": 0,
                                      "string": "", "boolean": False}
_FUNCS = {"count", "sum", "avg", "mean", "min", "max"}


@dataclass(frozen=True)
class GroupRoute:
    """A group-by query as the vectorized route runs it (plain data: it is also kept in
    the state, to answer from it)."""

    flow: str
    flow_ddl: str
    where: str | None  # SQL over the flow's columns
    columns: dict[str, str]  # the group-by's input columns -> SQL over the flow's columns
    keys: list[list[str]]  # [stored name, SQL over the input columns, type]
    parts: list[list[str]]  # [name, kind (add | least | greatest), lift SQL, type]
    aggregates: dict[str, list[str]]  # _a<i> -> [function, value part, count part]
    outputs: list[list[str]]  # [output column, _k<j> or _a<i>, type]
    order_by: list[list[Any]]
    limit: int | None
    deletes: bool = False  # the flow has _mult (every part is then a sum: invertible)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GroupRoute:
        return cls(**d)

    @property
    def state_keys(self) -> tuple[str, ...]:
        return tuple(n for name, _, _ in self.keys for n in (name, f"{name}_null"))

    def key_fields(self) -> list[pa.Field]:
        return [f for name, _, t in self.keys for f in (
            parse_ddl(f"`{name}` {t}").field(0), pa.field(f"{name}_null", pa.bool_()))]

    def state_schema(self) -> pa.Schema:
        """The stored groups: each key (and its NULL flag), then the monoid parts."""
        parts = parse_ddl(", ".join(f"`{n}` {t}" for n, _, _, t in self.parts))
        return pa.schema([*self.key_fields(), *parts])

    def output_schema(self) -> pa.Schema:
        return pa.schema([*parse_ddl(", ".join(f"`{c}` {t}" for c, _, t in self.outputs)),
                          pa.field(MULT, pa.int64())])


def group_route(inc: IncrementalQuery, flow_ddl: Mapping[str, str]) -> GroupRoute | None:
    """``inc`` as a :class:`GroupRoute`, or None when the vectorized route cannot run it
    (the general plan does)."""
    root = inc.root
    if inc.recompute or not isinstance(root, GroupBy) or inc.joins or len(inc.groups) != 1:
        return None
    if not root.keys or root.having is not None:
        return None
    try:
        where, columns = row_exprs(root.child)
    except QueryError:  # not a scan under filters and projections
        return None
    flows = inc.input_flows
    if len(flows) != 1:
        return None
    deletes = MULT in parse_ddl(flow_ddl[flows[0]]).names
    keys = []
    for name, e in root.keys:
        t = type_of(e, root.child.columns)
        if t not in _PLACEHOLDER:
            return None
        keys.append([name, to_sql(e), t])
    plan = inc.groups[id(root)]
    parts = [["_cnt", "add", "sum(`_mult`)", "bigint"]]
    aggregates = {}
    for i, m in enumerate(plan.monoids):
        func = "avg" if m.call.func == "mean" else m.call.func
        if func not in _FUNCS or m.call.distinct or m.call.user is not None or any(
                p.kind not in ("add", "least", "greatest") for p in m.parts):
            return None
        if not m.parts:  # count(*): the group's own count
            aggregates[f"_a{i}"] = ["count", "_cnt", "_cnt"]
            continue
        value = m.parts[0]
        types = {"sum": [m.result_type, "bigint"], "avg": ["double", "bigint"],
                 "count": ["bigint"], "min": [m.result_type], "max": [m.result_type]}[func]
        parts += [[p.name, p.kind, p.lift, t] for p, t in zip(m.parts, types, strict=True)]
        aggregates[f"_a{i}"] = [func, value.name, m.parts[-1].name]
    outputs = []
    for column, e in root.outputs:
        if not isinstance(e, exp.Column) or not (
                e.name in aggregates or e.name in {k for k, _ in root.keys}):
            return None
        outputs.append([column, e.name, root.columns[column]])
    if deletes and any(kind != "add" for _, kind, _, _ in parts):
        return None  # min and max cannot take a row back: the general plan keeps them
    return GroupRoute(flows[0], flow_ddl[flows[0]], where, dict(columns), keys, parts,
                      aggregates, outputs, [list(o) for o in inc.query.order_by],
                      inc.query.limit, deletes)


# -- ⊗ and a, over Arrow -----------------------------------------------------------------
def _merge(kind: str, old: pa.ChunkedArray, new: pa.ChunkedArray) -> pa.ChunkedArray:
    if kind == "add":
        return pc.add_checked(pc.fill_null(old, 0), pc.fill_null(new, 0))
    pick = pc.min_element_wise if kind == "least" else pc.max_element_wise
    return pick(old, new, skip_nulls=True)


def answers(route: GroupRoute, groups: pa.Table, prefix: str = "") -> dict[str, pa.Array]:
    """Each output column of the answer rows of ``groups`` (keys and parts, the parts'
    columns named ``prefix`` + part), as SQL computes them from the parts."""
    def part(name: str) -> pa.ChunkedArray:
        return groups[prefix + name]

    kinds = {n: k for n, k, _, _ in route.parts}
    values: dict[str, Any] = {}
    for a, (func, value, count) in route.aggregates.items():
        v = part(value)
        if kinds[value] == "add":
            v = pc.fill_null(v, 0)
        n = pc.fill_null(part(count), 0)
        if func in ("sum", "avg"):
            if func == "avg":
                v = pc.divide(pc.cast(v, pa.float64()), pc.cast(n, pa.float64()))
            v = pc.if_else(pc.greater(n, 0), v, pa.scalar(None, v.type))
        values[a] = v
    for name, _, _ in route.keys:
        values[name] = pc.if_else(groups[f"{name}_null"], pa.scalar(None, groups[name].type),
                                  groups[name])
    schema = route.output_schema()
    return {c: pc.cast(values[src], schema.field(c).type) for c, src, _ in route.outputs}


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    """``a <=> b`` as Spark compares: NULLs equal each other, and so do NaNs."""
    eq = pc.fill_null(pc.equal(a, b), False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    if pa.types.is_floating(a.type):
        both_null = pc.or_(both_null, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return pc.or_(eq, both_null)


@dataclass(frozen=True)
class MergeParts:
    """The vectorized translate of a :class:`GroupRoute`: over Arrow tables."""

    route: GroupRoute
    output: str
    arrow = True  # the vectorized route hands it Arrow tables, not pandas

    def __call__(self, state: pa.Table | None, inputs: Mapping[str, pa.Table]
                 ) -> VectorResult:
        route = self.route
        keys = list(route.state_keys)
        delta = inputs[route.flow]  # one row per group: Spark aggregated the increment
        stored = state if state is not None else route.state_schema().empty_table()
        old = stored.rename_columns([c if c in keys else f"s.{c}" for c in stored.column_names])
        both = delta.join(old, keys, join_type="left outer")
        try:
            merged = pa.table({**{k: both[k] for k in keys}, **{
                n: _merge(kind, both[f"s.{n}"], both[n]) for n, kind, _, _ in route.parts}})
        except pa.ArrowInvalid as e:  # add_checked: a bigint sum past 2^63
            raise OverflowError(f"a sum of this group overflows bigint ({e}); sum the column "
                                "as double or decimal in the query (sum(CAST(col AS double)))"
                                ) from None
        alive = pc.greater(merged["_cnt"], 0)  # a group whose rows were all deleted leaves
        new_state = merged.filter(alive).cast(route.state_schema())
        existed = pc.is_valid(both["s._cnt"])
        old_rows = answers(route, both, "s.")
        new_rows = answers(route, merged)
        same = existed
        for c in new_rows:
            same = pc.and_(same, _same(old_rows[c], new_rows[c]))
        out_schema = route.output_schema()

        def rows(columns: dict[str, Any], mask: Any, mult: int) -> pa.Table:
            t = pa.table({**columns, MULT: pa.array([mult] * len(both), pa.int64())})
            return t.filter(mask).cast(out_schema)

        changed = pc.invert(same)
        changes = pa.concat_tables([
            rows(old_rows, pc.and_(existed, pc.or_(changed, pc.invert(alive))), -1),
            rows(new_rows, pc.and_(alive, changed), 1)])
        return VectorResult({self.output: changes}, new_state)


def _braces(sql: str) -> str:
    return sql.replace("{", "{{").replace("}", "}}")


def _key_sql(route: GroupRoute) -> list[str]:
    """The stored key columns ``__k<2j>`` (NULL as the placeholder) and ``__k<2j+1>``
    (the NULL flag), as SQL over the group-by's input columns."""
    keys = []
    for j, (_, sql, t) in enumerate(route.keys):
        keys += [f"coalesce({sql}, CAST({_PLACEHOLDER[t]} AS {t})) AS __k{2 * j}",
                 f"({sql}) IS NULL AS __k{2 * j + 1}"]
    return keys


def _scan(ctx: EpochContext, files: list[str], route: GroupRoute, head: str,
          tail: str) -> DataFrame:
    """``head`` + the increment's rows (filtered and projected; ``_mult`` 1) + ``tail``, as
    one SQL text: building the plan column by column costs ~200 JVM round trips."""
    d = ctx.spark.read.schema(route.flow_ddl).parquet(*files)
    columns = ", ".join(f"{sql} AS `{c}`" for c, sql in route.columns.items())
    where = f" WHERE {route.where}" if route.where else ""
    mult = f"`{MULT}`" if route.deletes else "1"
    rows = f"(SELECT {columns}, CAST({mult} AS bigint) AS `{MULT}` FROM "
    # spark.sql formats the text with str.format: braces of the query's own are escaped
    return ctx.spark.sql(_braces(head + rows) + "{d}" + _braces(f"{where}){tail}"), d=d)


class VectorQueryProgram(VectorizedProgram):
    """A query stage whose group-by runs on the vectorized route (module docstring)."""

    kind = "query"
    packs = False  # its groups leave Spark's aggregation partitioned as the stage needs
    same_kind_hint = ("a query strata now compiles for its vectorized route: "
                      "add_query(..., vectorized=False) keeps the plan it ran with")

    def __init__(self, inc: IncrementalQuery, route: GroupRoute, output: str,
                 output_ddl: str) -> None:
        self.inc, self.route, self.output, self.output_ddl = inc, route, output, output_ddl
        shape = VectorShape(route.state_keys, ((route.flow, route.state_schema()),),
                            {output: route.output_schema()}, route.state_schema())
        super().__init__(MergeParts(route, output), shape, "inner")

    def describe(self) -> str:
        return "query (group-by on the vectorized route)"

    def explain(self) -> str:
        keys = ", ".join(n for n in self.route.state_keys)
        return (f"{self.inc.explain()}\nruns on the vectorized route: h per group in Spark, "
                f"then each of the stage's partitions merges it into its columnar state "
                f"(keyed by {keys}) with Arrow; one Spark job per epoch. A small epoch "
                f"(spark.strata.driverEpoch.maxRows records, default "
                f"{config.DRIVER_EPOCH_ROWS.default:,}) reads the increment with pyarrow "
                f"(Spark when an expression or key type is outside the driver's) and "
                f"aggregates and merges it in the driver, with no shuffle")

    def run(self, ctx: EpochContext) -> EpochOutcome:
        # the groups come out of Spark's aggregation partitioned as the stage needs them:
        # with as many shuffle partitions, the stage's own repartition adds no exchange (in
        # the driver, one partition: the driver splits the groups itself)
        in_driver = self.in_driver(ctx)
        n = 1 if in_driver else ctx.num_partitions
        previous = set_confs(ctx.spark, {"spark.sql.shuffle.partitions": str(n)})
        try:
            outcome = self.run_where(ctx, in_driver)
        finally:
            set_confs(ctx.spark, previous)
        outcome.state["answer"] = self.route.to_json()
        return outcome

    def _input_rows(self, ctx: EpochContext) -> DataFrame | None:
        """``h`` of the increment: one row per group, its parts as struct ``__f0``."""
        route = self.route
        files = [f for inc in ctx.inputs.get(route.flow, ()) for f in inc.files]
        if not files:
            return None
        parts = ", ".join(f"'{name}', CAST({lift} AS {t})" for name, _, lift, t in route.parts)
        group = ", ".join(str(i + 1) for i in range(2 * len(route.keys)))
        return _scan(ctx, files, route, f"SELECT {', '.join(_key_sql(route))}, 0 AS __flow, "
                     f"named_struct({parts}) AS __f0 FROM ", f" GROUP BY {group}")

    def _driver_rows(self, ctx: EpochContext) -> pa.Table | None:
        """``h`` for an epoch in the driver: Spark reads and projects the increment (one
        stage, no shuffle) and Arrow aggregates its rows per group. A part whose lift is
        not a ``sum``, ``min`` or ``max`` of a row expression leaves it all to Spark."""
        route = self.route
        files = [f for inc in ctx.inputs.get(route.flow, ()) for f in inc.files]
        lifts = [s for _, _, lift, _ in route.parts if (s := split_lift(lift)) is not None]
        if not files or len(lifts) < len(route.parts):
            return self._spark_driver_rows(ctx)  # Spark computes h
        if dispatch.arrow_steps(ctx.spark):
            rows = self._arrow_lifted_rows(files, [arg for _, arg in lifts])
            if rows is not None:
                # hashed per group, not per row: the groups are fewer
                groups = self._aggregate(ctx, rows, [f for f, _ in lifts])
                partition = spark_hash.partitions(
                    [groups[c] for c in self._key_columns()], ctx.num_partitions)
                if partition is not None:
                    return groups.append_column("__p", pa.array(partition))
        args = ", ".join(f"{arg} AS __a{i}" for i, (_, arg) in enumerate(lifts))
        rows = with_partition(_scan(ctx, files, route, f"SELECT {', '.join(_key_sql(route))}, "
                                    f"{args} FROM ", ""),
                              self._key_columns(), ctx.num_partitions).toArrow()
        return self._aggregate(ctx, rows, [f for f, _ in lifts])

    def _arrow_lifted_rows(self, files: list[str], args: list[str]) -> pa.Table | None:
        """What Spark reads and projects for an epoch in the driver (keys and the lifted
        values ``__a<i>``; not ``__p``), computed here with no Spark job: pyarrow reads the
        increment and :mod:`~strata.queries.arrow.arrow_expr` evaluates the route's
        expressions. None when something is outside what it does (Spark does it all
        then)."""
        route = self.route
        try:
            # in_driver bounded the increment's records already
            flow = read_table(files, parse_ddl(route.flow_ddl))
            if flow is None:
                return None
            if route.where:
                cond, _ = arrow_expr.evaluate(route.where, flow)
                flow = flow.filter(pc.fill_null(cond, False))
            mult = (flow[MULT].cast(pa.int64()) if route.deletes
                    else pa.array(np.ones(flow.num_rows, np.int64)))
            used = {c.name for sql in [*(k[1] for k in route.keys), *args]
                    for c in parse(sql).find_all(exp.Column)}  # other columns stay unread
            rows = arrow_expr.evaluate_all(
                {c: sql for c, sql in route.columns.items() if c in used}, flow
            ).append_column(MULT, mult)
            columns: dict[str, pa.Array] = {}
            for j, (_, sql, t) in enumerate(route.keys):
                value, st = arrow_expr.evaluate(sql, rows)
                if st != t or t not in _PLACEHOLDER_VALUE:
                    return None
                typed = value.cast(ARROW_TYPES[t])
                columns[f"__k{2 * j}"] = pc.fill_null(typed, _PLACEHOLDER_VALUE[t])
                columns[f"__k{2 * j + 1}"] = pc.is_null(typed)
            for i, arg in enumerate(args):
                columns[f"__a{i}"] = arrow_expr.evaluate_all({"v": arg}, rows).column("v")
        except (Unsupported, pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
            return None
        return pa.table(columns)

    def _aggregate(self, ctx: EpochContext, rows: pa.Table, funcs: list[str]) -> pa.Table:
        """``rows`` (keys, each part's lifted value ``__a<i>`` and, when Spark read
        them, ``__p``) aggregated per group as :meth:`_input_rows`' Spark plan would.
        Integer sums add as decimals, so one overflowing bigint is an error naming its
        group, not a wrap-around."""
        keys = [c for c in [*self._key_columns(), "__p"] if c in rows.column_names]
        groups = aggregate(rows, keys, [(f"__a{i}", func) for i, func in enumerate(funcs)])
        parts = {}
        for i, (name, _, _, t) in enumerate(self.route.parts):
            value = groups[f"__a{i}"]
            target = parse_ddl(f"x {t}").field(0).type
            if pa.types.is_decimal(value.type) and pa.types.is_integer(target):
                self._check_range(ctx, groups, value, target, t)
            parts[name] = value.cast(target)
        return pa.table({**{k: groups[k] for k in keys}, "__flow": pa.array(
            [0] * groups.num_rows, pa.int32()), "__f0": pa.StructArray.from_arrays(
                [v.combine_chunks() for v in parts.values()], names=list(parts))})

    def _check_range(self, ctx: EpochContext, groups: pa.Table, value: pa.ChunkedArray,
                     target: pa.DataType, sql_type: str) -> None:
        over = outside(value, target)
        if pc.any(over).as_py():
            row = groups.filter(over).slice(0, 1).to_pylist()[0]
            raise TranslateError(
                f"OverflowError: a sum of this group overflows {sql_type} in one increment; "
                "sum the column as double or decimal in the query (sum(CAST(col AS double)))",
                stage=ctx.stage.name, epoch=ctx.epoch, has_key=True,
                key=[row[c] for c in self._key_columns()])

    def _key_columns(self) -> list[str]:
        return [f"__k{j}" for j in range(2 * len(self.route.keys))]

    @classmethod
    def read_answer(cls, layout: StageLayout, snap: StateSnapshot) -> pa.Table:
        """The answer from the stored groups, ``ORDER BY`` and ``LIMIT`` applied."""
        route = GroupRoute.from_json(snap.state["answer"])
        st = VectorState.from_json(snap.state)
        stored = [st.store(layout, p).scan() for p in sorted(st.runs)]
        groups = pa.concat_tables(stored) if stored else route.state_schema().empty_table()
        return driver_rows.ordered(pa.table(answers(route, groups.cast(route.state_schema()))),
                                   route.order_by, route.limit)

