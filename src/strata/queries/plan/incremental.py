"""From a query to its incremental program: ``state ← state ⊗ h(Δ)``, answer ``a(state)``.

:func:`derive` walks a normalized query and decides, per operator, what it keeps:

* ``Map`` keeps nothing: it maps the increment's rows (multiplicities pass through).
* ``Union`` keeps nothing: its changes are its inputs' changes, concatenated.
* ``Explode`` keeps nothing: it repeats each changed row per element (multiplicities
  pass through), as ``Map`` does with one output per row.
* ``Windowed`` keeps its input's rows. For each partition the increment touches, its
  changes are the window functions over the partition's rows after the epoch, less
  those over its rows before (rows whose values did not change cancel out).
* ``Join`` keeps both inputs, each bucketed by its join key (the *lineage*: the key that
  lets a new row on one side find the rows it joins with on the other). Its changes are
  ``ΔL ⋈ R ∪ L ⋈ ΔR ∪ ΔL ⋈ ΔR`` with multiplicities multiplied. A left join adds its
  padded rows' changes, from the net count of right rows per join key it touches. Many-to-many joins
  are refused: a new row may join with an unbounded number of old ones.
* ``GroupBy`` keeps one row per group keyed by the group key: ``_cnt`` (the group's
  multiplicity) and each aggregate's monoid parts. ``h`` aggregates the increment per
  group, ``⊗`` merges it into the state by a full outer join on the group key, and
  ``a`` (the non-homomorphic rest: divisions, ``HAVING``, output expressions) turns
  parts into answers. Its changes retract the old answer row and insert the new one.

The result is an :class:`IncrementalQuery`, which ``explain()`` prints and
:mod:`strata.queries.spark.evaluator` runs on Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.queries.plan.algebra import (
    Explode,
    GroupBy,
    Join,
    Map,
    Nearest,
    Node,
    Query,
    Scan,
    Union,
    Windowed,
)
from strata.queries.plan.errors import NotIncrementalError
from strata.queries.plan.expressions import bind, to_sql
from strata.queries.plan.monoids import COUNT_PART, Monoid, Part, monoid
from strata.queries.plan.normalize import normalize
from strata.queries.plan.prune import prune


@dataclass
class GroupPlan:
    """What a group-by keeps and how it merges."""

    node: GroupBy
    name: str  # its state table
    monoids: list[Monoid]

    @property
    def parts(self) -> list[Part]:
        return [COUNT_PART, *(p for m in self.monoids for p in m.parts)]

    def answer_sql(self) -> dict[str, str]:
        """``a``: each aggregate's answer, then the query's outputs over keys and those."""
        return {f"_a{i}": m.answer for i, m in enumerate(self.monoids)}


def answer_scope(plan: GroupPlan) -> dict[str, str]:
    """``a``'s names as SQL over a row of merged parts: each key (``_g.key``) and each
    aggregate's answer (``_a0``, …), for binding into the outputs and ``HAVING``."""
    filled = {p.name: f"coalesce(`{p.name}`, 0)" if p.kind == "add" else f"`{p.name}`"
              for p in plan.parts}
    scope = {n: f"_g.`{n}`" for n, _ in plan.node.keys}
    scope.update({a: bind(sql, filled) if filled else sql
                  for a, sql in plan.answer_sql().items()})
    return scope


@dataclass
class JoinPlan:
    node: Join
    name: str  # its state tables are {name}_left and {name}_right
    # "left" or "right": the side that is a lookup table (insert-only and unique per join
    # key, as a dimension is): kept whole, while the other side's table keeps only its
    # rows that match no lookup row yet (docs/architecture.md, "Joins with a lookup table")
    lookup: str | None = None


def lookup_side(node: Join, iterate: str | None) -> str | None:
    """The side of join ``node`` that can serve as its lookup table, if one can: a row
    of the other side that found its match never meets another (the key is unique and
    the side never deletes), so only unmatched rows need keeping. Of a left join only
    the right side (the left rows' padding is then theirs: unmatched or not). Not in
    the step of an iteration, whose steps hold their inputs back."""
    if iterate is not None:
        return None
    if node.right_unique and not node.right.retracts:
        return "right"
    if node.how == "inner" and node.left_unique and not node.left.retracts:
        return "left"
    return None


@dataclass
class WindowPlan:
    node: Windowed
    name: str  # its state table: the input's rows


@dataclass
class IncrementalQuery:
    """A query with the incremental plan of each stateful operator."""

    query: Query
    root: Node
    groups: dict[int, GroupPlan] = field(default_factory=dict)  # id(node) -> plan
    joins: dict[int, JoinPlan] = field(default_factory=dict)
    windows: dict[int, WindowPlan] = field(default_factory=dict)
    recompute: bool = False  # run by recomputation (opted in: it is not incremental)

    def __getstate__(self) -> dict:
        # the plans are keyed by their operators' ids, which a copy does not keep
        state = dict(self.__dict__)
        for plans in ("groups", "joins", "windows"):
            state[plans] = list(state[plans].values())
        return state

    def __setstate__(self, state: dict) -> None:
        for plans in ("groups", "joins", "windows"):
            state[plans] = {id(p.node): p for p in state.get(plans, [])}
        self.__dict__.update(state)

    @property
    def input_flows(self) -> list[str]:
        """The flows the query scans."""
        return sorted(scanned(self.root))

    def explain(self) -> str:
        """``h``, ``⊗`` and ``a`` of every stateful operator, as readable text."""
        lines: list[str] = []
        if self.recompute:
            lines += ["recomputed every epoch over all rows so far (opted in): the output "
                      "carries new answer - old answer; the operators below run as if "
                      "against empty state"]
        self._explain(self.root, 0, lines)
        if self.query.order_by or self.query.limit is not None:
            order = ", ".join(f"{c} {'asc' if a else 'desc'}" for c, a in self.query.order_by)
            lines.append(f"when read: order by {order or '-'}; limit {self.query.limit}")
        return "\n".join(lines)

    def _explain(self, node: Node, depth: int, lines: list[str]) -> None:
        pad = "  " * depth
        lines.append(f"{pad}{node}")
        if isinstance(node, GroupBy):
            plan = self.groups[id(node)]
            keys = ", ".join(f"{to_sql(e)} as {n}" for n, e in node.keys) or "() (total)"
            lines.append(f"{pad}  state {plan.name}: one row per group, lineage key _g = "
                         f"({keys}), never re-shuffled")
            for p in plan.parts:
                lift = (f"map of {p.lift} → Σ _mult" if p.kind == "multiset" else p.lift)
                merge = bind(p.merge, {"s": f"s.{p.name}", "d": f"Δ.{p.name}"})
                lines.append(f"{pad}  h  {p.name} = {lift}")
                lines.append(f"{pad}  ⊗  {p.name} = {merge}")
            for (name, sql), m in zip(plan.answer_sql().items(), plan.monoids, strict=True):
                lines.append(f"{pad}  a  {name} = {sql}   -- {m.call.describe()}")
            for n, e in node.outputs:
                lines.append(f"{pad}  a  {n} = {to_sql(e)}")
            if node.having is not None:
                lines.append(f"{pad}  a  keep groups where {to_sql(node.having)}")
            lines.append(f"{pad}  groups whose _cnt reaches 0 leave the state")
        elif isinstance(node, Nearest):
            lines.append(f"{pad}  no state: each new row of the left side is assigned the "
                         "nearest row of the iterate in every step; older rows keep their "
                         "assignment (the diffusion approximation)")
        elif isinstance(node, Union):
            lines.append(f"{pad}  no state: Δout = the inputs' changes, concatenated")
        elif isinstance(node, Explode):
            lines.append(f"{pad}  no state: Δout = each changed row once per element, "
                         "_mult kept")
        elif isinstance(node, Windowed):
            parts = (f"partitioned by ({', '.join(node.partition)})" if node.partition
                     else "one partition: every epoch reads all of it")
            lines.append(f"{pad}  state {self.windows[id(node)].name}: the input's rows, "
                         f"{parts}")
            lines.append(f"{pad}  Δout = for each partition Δ touches, the window over its "
                         "rows after − over its rows before")
        elif isinstance(node, Join):
            join = self.joins[id(node)]
            if join.lookup is not None:
                other = "left" if join.lookup == "right" else "right"
                lines.append(f"{pad}  state {join.name}_{join.lookup}: the {join.lookup} "
                             "rows, a lookup table (insert-only, unique per join key); "
                             f"{join.name}_{other}: only the {other} rows that match none "
                             "of them yet; lineage _j0… = join key, never re-shuffled")
            else:
                lines.append(f"{pad}  state {join.name}_left, {join.name}_right: each side's "
                             "rows (append-only), lineage _j0… = join key, never re-shuffled")
            lines.append(f"{pad}  Δout = ΔL ⋈ R ∪ L ⋈ ΔR ∪ ΔL ⋈ ΔR, _mult = "
                         "L._mult · R._mult")
            if node.how == "left" and join.lookup is not None:
                lines.append(f"{pad}  and the NULL-padded left rows: the changes of the "
                             "waiting rows (and of rows with a NULL key), padded")
            elif node.how == "left":
                lines.append(f"{pad}  and the NULL-padded left rows: for each join key the "
                             "epoch touches, L's rows × ([no R row now] − [no R row before])"
                             ", ΔL's rows × [no R row now]")
        for c in node.children:
            self._explain(c, depth + 1, lines)


def scanned(node: Node) -> set[str]:
    """The flows ``node`` reads."""
    if isinstance(node, Scan):
        return {node.flow}
    return set().union(*(scanned(c) for c in node.children))


def derive(query: Query, iterate: str | None = None,
           recompute: bool = False) -> IncrementalQuery:
    """The incremental program of ``query`` (normalized and pruned first); ``iterate``
    names the iterate when ``query`` is the step of an iteration; ``recompute`` accepts
    many-to-many joins, for a query run by recomputation.

    Raises :class:`NotIncrementalError` naming the operator that blocks it."""
    root = prune(normalize(query.root))
    out = IncrementalQuery(Query(root, query.order_by, query.limit), root,
                           recompute=recompute)
    counter = iter(range(1_000_000))

    def visit(node: Node) -> None:
        for c in node.children:
            visit(c)
        if isinstance(node, Join):
            if node.kind == "many-to-many" and not recompute:
                raise NotIncrementalError(
                    f"join on {' and '.join(f'{a} = {b}' for a, b in node.on)}",
                    "is many-to-many (neither side has a declared key within the join "
                    "columns), so one new row can join with unboundedly many old ones",
                    "declare the key of the side that is unique per join key (keys= in the "
                    "Python API, --key FLOW=COL in the CLI), or let it run by recomputation "
                    "(allow_recompute=True, --allow-recompute)")
            if node.how == "left" and iterate is not None:
                raise NotIncrementalError(
                    f"left join on {' and '.join(f'{a} = {b}' for a, b in node.on)}",
                    "is not supported in the step of an iteration",
                    "join inside the step (inner join), or left-join the iterate's answer "
                    "in a query downstream of it")
            out.joins[id(node)] = JoinPlan(node, f"join{next(counter)}",
                                           lookup_side(node, iterate))
        elif isinstance(node, Nearest):
            if iterate is None or not isinstance(node.right, Scan) or \
                    node.right.flow != iterate or iterate in scanned(node.left):
                raise NotIncrementalError(
                    "nearest join", "a change to its centers can re-assign every row it "
                    "has ever seen, so no state keeps it incremental",
                    "use it in the step of iterate(), joining a flow with the iterate "
                    "itself: rows keep the center they got in the increment that brought "
                    "them (the paper's diffusion approximation)")
        elif isinstance(node, Windowed):
            if iterate is not None:
                raise NotIncrementalError(str(node), "is not supported in the step of an "
                                          "iteration", "apply it to the iterate's answer in "
                                          "a query downstream of it")
            out.windows[id(node)] = WindowPlan(node, f"window{next(counter)}")
        elif isinstance(node, GroupBy):
            monoids = [monoid(a, f"_p{i}", node.child.columns, node.child.retracts)
                       for i, a in enumerate(node.aggs)]
            out.groups[id(node)] = GroupPlan(node, f"group{next(counter)}", monoids)
        elif not isinstance(node, (Map, Scan, Nearest, Union, Explode)):
            raise NotIncrementalError(type(node).__name__, "is not a query operator")

    visit(root)
    return out

