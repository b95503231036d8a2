"""The query algebra: plain Python data for scans, maps, joins and group-bys.

A query is a tree of nodes over strata flows (Fegaras's monoid comprehension algebra,
restricted to what strata runs): ``Scan`` reads a flow; ``Map`` is a flatten-map that
keeps at most one output per row (a filter and a projection); ``Join`` is a co-group on
equal keys followed by a flatten, i.e. an inner equi-join (or a left outer one, keeping
unmatched left rows padded with NULLs); ``Nearest`` joins each row
with the row of a small relation that minimizes a distance (k-means' assignment step);
``GroupBy`` groups and reduces each group with monoids (a total aggregate is a group-by
with no keys); ``Explode`` repeats each row once per element of an array (``LATERAL VIEW
explode``); ``Windowed`` adds window functions (``OVER (PARTITION BY …)``); ``Union`` is
the bag union of inputs with the same columns (``UNION ALL``; ``UNION``, ``INTERSECT``
and ``EXCEPT`` are group-bys over it).
(:mod:`strata.queries.plan.normalize` fuses adjacent maps and pushes filters below joins.)

Every node knows its columns and their Spark types, the columns that identify a row
(``key``, when known: a declared key of a flow, or a group-by's keys), and whether
the changes it emits can delete rows (``retracts``: an input with a ``_mult`` column,
or a group-by, whose changes retract old answers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from sqlglot import exp

from strata.queries.plan.errors import QueryError
from strata.queries.plan.expressions import (
    MULT,
    Expr,
    col,
    to_sql,
    type_of,
    widest,
    window_type,
)
from strata.queries.plan.monoids import AggCall, monoid


class Node:
    """A query operator. Each kind computes its ``columns`` (name -> Spark type), its
    ``key`` (the columns that identify a row, when known) and whether it ``retracts``."""

    @property
    def columns(self) -> dict[str, str]:
        raise NotImplementedError

    @property
    def key(self) -> tuple[str, ...] | None:
        raise NotImplementedError

    @property
    def retracts(self) -> bool:
        raise NotImplementedError

    @property
    def children(self) -> tuple[Node, ...]:
        return ()


@dataclass(frozen=True, eq=False)
class Scan(Node):
    """The rows of a flow; its columns are renamed ``prefix + name``."""

    flow: str
    schema: dict[str, str]  # the flow's columns (without _mult) → Spark types
    prefix: str = ""
    declared_key: tuple[str, ...] | None = None
    has_mult: bool = False

    @cached_property
    def columns(self) -> dict[str, str]:
        return {self.prefix + c: t for c, t in self.schema.items()}

    @cached_property
    def key(self) -> tuple[str, ...] | None:
        return tuple(self.prefix + c for c in self.declared_key) if self.declared_key else None

    @property
    def retracts(self) -> bool:
        return self.has_mult

    def __str__(self) -> str:
        return f"scan {self.flow}" + (f" as {self.prefix[:-2]}" if self.prefix else "")


@dataclass(frozen=True, eq=False)
class Map(Node):
    """Filter rows by ``where`` (if any), then compute ``outputs`` (None: keep all columns)."""

    child: Node
    where: Expr | None = None
    outputs: tuple[tuple[str, Expr], ...] | None = None

    def __post_init__(self) -> None:
        if self.where is not None:
            t = type_of(self.where, self.child.columns)
            if t != "boolean":
                raise QueryError(f"filter {to_sql(self.where)!r} is {t}, not a condition")
        self.columns  # noqa: B018  (type-checks the outputs)

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.child,)

    @cached_property
    def columns(self) -> dict[str, str]:
        if self.outputs is None:
            return dict(self.child.columns)
        names = [n for n, _ in self.outputs]
        if len(set(names)) != len(names) or MULT in names:
            raise QueryError(f"output columns must have distinct names (not {MULT}): {names}")
        return {n: type_of(e, self.child.columns) for n, e in self.outputs}

    @cached_property
    def key(self) -> tuple[str, ...] | None:
        ck = self.child.key
        if ck is None:
            return None
        if self.outputs is None:
            return ck
        plain = {e.name: n for n, e in self.outputs if isinstance(e, exp.Column)}
        return tuple(plain[k] for k in ck) if all(k in plain for k in ck) else None

    @property
    def retracts(self) -> bool:
        return self.child.retracts

    def __str__(self) -> str:
        parts = []
        if self.where is not None:
            parts.append(f"where {to_sql(self.where)}")
        if self.outputs is not None:
            parts.append("select " + ", ".join(
                n if isinstance(e, exp.Column) and e.name == n else f"{to_sql(e)} as {n}"
                for n, e in self.outputs))
        return "map " + "; ".join(parts)


@dataclass(frozen=True, eq=False)
class _Binary(Node):
    """An operator over two inputs whose rows it pairs: their columns side by side."""

    left: Node
    right: Node

    def _check_disjoint(self, what: str) -> None:
        clash = set(self.left.columns) & set(self.right.columns)
        if clash:
            raise QueryError(f"both sides of a {what} have columns {sorted(clash)}; "
                             "rename them")

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    @cached_property
    def columns(self) -> dict[str, str]:
        return {**self.left.columns, **self.right.columns}


@dataclass(frozen=True, eq=False)
class Join(_Binary):
    """Equi-join: rows of ``left`` and ``right`` with equal ``on`` columns; a ``left``
    join also keeps each left row that matches none, its right columns NULL."""

    on: tuple[tuple[str, str], ...]
    how: str = "inner"  # inner | left

    def __post_init__(self) -> None:
        self._check_disjoint("join")
        if not self.on:
            raise QueryError("a join needs at least one pair of equal columns (cross joins "
                             "are not supported)")
        for lc, rc in self.on:
            if lc not in self.left.columns or rc not in self.right.columns:
                raise QueryError(f"join condition {lc} = {rc}: no such columns")
            try:
                widest([self.left.columns[lc], self.right.columns[rc]])
            except QueryError:
                raise QueryError(
                    f"join condition {lc} = {rc} compares {self.left.columns[lc]} with "
                    f"{self.right.columns[rc]}; cast one side") from None

    @property
    def left_keys(self) -> list[str]:
        return [lc for lc, _ in self.on]

    @property
    def right_keys(self) -> list[str]:
        return [rc for _, rc in self.on]

    @property
    def left_unique(self) -> bool:
        """Each join key value has at most one row on the left."""
        return self.left.key is not None and set(self.left.key) <= set(self.left_keys)

    @property
    def right_unique(self) -> bool:
        return self.right.key is not None and set(self.right.key) <= set(self.right_keys)

    @cached_property
    def key(self) -> tuple[str, ...] | None:
        if self.how == "inner" and self.left_unique and self.right.key is not None:
            return self.right.key
        if self.right_unique and self.left.key is not None:
            return self.left.key  # (a left row's NULL-padded copy is still one row)
        return None

    @property
    def retracts(self) -> bool:
        return self.left.retracts or self.right.retracts

    @property
    def kind(self) -> str:
        if self.left_unique and self.right_unique:
            return "one-to-one"
        if self.left_unique or self.right_unique:
            return "one-to-many"
        return "many-to-many"

    def __str__(self) -> str:
        how = "left join" if self.how == "left" else "join"
        return f"{how} ({self.kind}) on " + " and ".join(f"{a} = {b}" for a, b in self.on)


@dataclass(frozen=True, eq=False)
class Nearest(_Binary):
    """Each row of ``left`` with the one row of ``right`` (a small relation, such as a
    set of centroids) that minimizes ``distance``; ties go to the earlier right row."""

    distance: Expr

    def __post_init__(self) -> None:
        self._check_disjoint("nearest join")
        t = type_of(self.distance, self.columns)
        try:
            widest([t, "double"])
        except QueryError:
            raise QueryError(f"nearest distance {to_sql(self.distance)!r} is {t}, not a "
                             "number") from None

    @property
    def key(self) -> tuple[str, ...] | None:
        return self.left.key

    @property
    def retracts(self) -> bool:
        return self.left.retracts or self.right.retracts

    def __str__(self) -> str:
        return f"nearest join minimizing {to_sql(self.distance)}"


@dataclass(frozen=True, eq=False)
class GroupBy(Node):
    """Group by ``keys`` and reduce with ``aggs``; ``outputs`` and ``having`` are
    expressions over the key names and ``_a0``, ``_a1``, … (the aggregates' answers)."""

    child: Node
    keys: tuple[tuple[str, Expr], ...]
    aggs: tuple[AggCall, ...]
    outputs: tuple[tuple[str, Expr], ...]
    having: Expr | None = None
    answer_types: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        scope = {n: type_of(e, self.child.columns) for n, e in self.keys}
        for i, a in enumerate(self.aggs):
            scope[f"_a{i}"] = monoid(a, f"_p{i}", self.child.columns,
                                     self.child.retracts).result_type
        self.answer_types.update(scope)
        self.columns  # noqa: B018
        if self.having is not None and type_of(self.having, scope) != "boolean":
            raise QueryError(f"HAVING {to_sql(self.having)!r} is not a condition")

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.child,)

    @cached_property
    def columns(self) -> dict[str, str]:
        names = [n for n, _ in self.outputs]
        if len(set(names)) != len(names):
            raise QueryError(f"output columns must have distinct names: {names}")
        return {n: type_of(e, self.answer_types) for n, e in self.outputs}

    @cached_property
    def key(self) -> tuple[str, ...] | None:
        plain = {e.name: n for n, e in self.outputs if isinstance(e, exp.Column)}
        keys = [n for n, _ in self.keys]
        return tuple(plain[k] for k in keys) if all(k in plain for k in keys) else None

    @property
    def retracts(self) -> bool:
        return True  # a changed answer retracts the group's old row

    def __str__(self) -> str:
        keys = ", ".join(to_sql(e) for _, e in self.keys) or "()"
        return f"group by {keys}: " + ", ".join(a.describe() for a in self.aggs)


@dataclass(frozen=True, eq=False)
class Explode(Node):
    """Each row of ``child`` once per element of array ``source``, the element as column
    ``name`` (``explode``), after its 0-based index as column ``position`` if given
    (``posexplode``); ``outer`` also keeps a row whose array is NULL or empty, once,
    with a NULL element (``explode_outer``)."""

    child: Node
    name: str
    source: Expr
    outer: bool = False
    position: str | None = None

    def __post_init__(self) -> None:
        for new in filter(None, (self.position, self.name)):
            if new in self.child.columns or new == MULT or new == self.position == self.name:
                raise QueryError(f"explode's column {new!r} is already a column; name it "
                                 f"differently (AS …)")
        self.columns  # noqa: B018  (type-checks the source)

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.child,)

    @cached_property
    def columns(self) -> dict[str, str]:
        array = type_of(self.source, self.child.columns)
        if not (array.startswith("array<") and array.endswith(">")):
            raise QueryError(f"explode({to_sql(self.source)}) needs an array, not {array}")
        position = {self.position: "int"} if self.position else {}
        return {**self.child.columns, **position, self.name: array[len("array<"):-1]}

    @property
    def key(self) -> tuple[str, ...] | None:
        return None  # an array may repeat an element

    @property
    def retracts(self) -> bool:
        return self.child.retracts

    def __str__(self) -> str:
        gen = ("posexplode" if self.position else "explode") + ("_outer" if self.outer else "")
        names = f"{self.position}, {self.name}" if self.position else self.name
        return f"{gen} {to_sql(self.source)} as {names}"


@dataclass(frozen=True, eq=False)
class Windowed(Node):
    """Each row of ``child`` with window functions over its partition: ``outputs`` name
    ``f(…) OVER (PARTITION BY … ORDER BY …)`` expressions over the child's columns, all
    partitioned by the child's columns ``partition`` (none: one partition)."""

    child: Node
    partition: tuple[str, ...]
    outputs: tuple[tuple[str, exp.Window], ...]

    def __post_init__(self) -> None:
        for n, _ in self.outputs:
            if n in self.child.columns or n == MULT:
                raise QueryError(f"window column {n!r} is already a column; name it "
                                 "differently (AS …)")
        maps = [c for c, t in self.child.columns.items() if "map<" in t]
        if maps:  # its rows are kept and netted: compared column by column
            raise QueryError(f"window functions over rows with map columns {maps} are not "
                             "supported; select the other columns in a subquery first")
        self.columns  # noqa: B018  (type-checks the outputs)

    @property
    def children(self) -> tuple[Node, ...]:
        return (self.child,)

    @cached_property
    def columns(self) -> dict[str, str]:
        return {**self.child.columns,
                **{n: window_type(e, self.child.columns) for n, e in self.outputs}}

    @property
    def key(self) -> tuple[str, ...] | None:
        return self.child.key  # one output row per input row

    @property
    def retracts(self) -> bool:
        return True  # a new row in a partition changes the other rows' values

    def __str__(self) -> str:
        return "window " + ", ".join(f"{to_sql(e)} as {n}" for n, e in self.outputs)


@dataclass(frozen=True, eq=False)
class Union(Node):
    """The rows of all ``inputs`` (a bag union, ``UNION ALL``); each input has the same
    columns, in the same order, with the same types (the SQL front end aligns them)."""

    inputs: tuple[Node, ...]

    def __post_init__(self) -> None:
        if len(self.inputs) < 2:
            raise QueryError("a union needs at least two inputs")
        first = list(self.inputs[0].columns.items())
        for other in self.inputs[1:]:
            if list(other.columns.items()) != first:
                raise QueryError(f"the inputs of a union have different columns: {first} "
                                 f"and {list(other.columns.items())}")

    @property
    def children(self) -> tuple[Node, ...]:
        return self.inputs

    @property
    def columns(self) -> dict[str, str]:
        return dict(self.inputs[0].columns)

    @property
    def key(self) -> tuple[str, ...] | None:
        return None  # the same row may come from two inputs

    @property
    def retracts(self) -> bool:
        return any(c.retracts for c in self.inputs)

    def __str__(self) -> str:
        return f"union all of {len(self.inputs)} inputs"


@dataclass(frozen=True)
class Query:
    """A query: an operator tree plus how to present its answer (order and limit apply
    when the answer is read, not to the changes the query emits)."""

    root: Node
    order_by: tuple[tuple[str, bool], ...] = ()  # (output column, ascending)
    limit: int | None = None

    @property
    def columns(self) -> dict[str, str]:
        return self.root.columns


def passthrough(names: list[str]) -> tuple[tuple[str, Expr], ...]:
    return tuple((n, col(n)) for n in names)
