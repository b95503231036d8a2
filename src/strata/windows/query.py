"""Windowed queries: what a user declares, and its compiled plan.

A :class:`WindowQuery` aggregates a flow whose records carry an event time and a source
(the server a record comes from) over sliding windows of ``range`` every ``slide``
(tumbling when they are equal). The aggregation is SQL — ``SELECT url, count(*) AS n
FROM log GROUP BY url, WINDOW(ts, '1 hour', '5 minutes', host)``, any aggregate the
query layer has a monoid for — or a :class:`~strata.windows.aggregates.MapReduce`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import sqlglot
from sqlglot import exp

from strata.model.errors import StrataError
from strata.queries.front import inline_ctes, parse_sql
from strata.queries.plan import GroupBy, GroupPlan, QueryError, monoid
from strata.queries.spark import row_exprs
from strata.windows.aggregates import MapReduce, PartsAlgebra
from strata.windows.panes import Panes, parse_duration, shared_width, time_sql
from strata.windows.policies import SHED_KINDS, Eviction

_CALL = "STRATA_WINDOW"
RESULT_COLUMNS = {"window_start": "", "window_end": "", "c2_fraction": "double",
                  "c2_spatial": "double", "c2_temporal": "double", "c2_complete": "int",
                  "c2_cells": "int"}


@dataclass(frozen=True)
class Shedding:
    """Shed cells when an epoch's estimated processing time (a fixed part and a part per
    record, fitted to recent epochs) exceeds ``budget_seconds``; ``kind`` (random,
    spatial, temporal) says which cells go, chosen reproducibly from ``seed``."""

    budget_seconds: float
    kind: str = "random"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in SHED_KINDS or self.budget_seconds <= 0:
            raise StrataError(f"shedding is one of {SHED_KINDS} with a positive budget, not "
                              f"{self.kind} {self.budget_seconds}")


@dataclass(frozen=True)
class WindowQuery:
    """A windowed aggregation of ``flow``: ``sql`` (a grouped SELECT of that flow) or
    ``mapreduce``, over windows of ``range`` every ``slide`` of the ``time`` column,
    per source ``source`` (a flow without the default ``source`` column is one source,
    named like the flow); ``more`` adds windows of other ranges and slides over the same
    panes. ``sources`` names the sources expected (others seen count too); ``disorder``
    is how far (event time) a source may send out of order: a cell is complete, and
    final, once its source's progress has passed the pane's end by that much, and later
    records for it are refused (``docs/windows.md``, "C2"); ``eviction`` says when
    results go out; ``shedding`` when to drop load."""

    name: str
    flow: str
    range: str | int
    slide: str | int | None = None
    time: str = "ts"
    source: str = "source"
    sql: str | None = None
    mapreduce: MapReduce | None = None
    eviction: Eviction = field(default_factory=Eviction)
    sources: tuple[str, ...] = ()
    shedding: Shedding | None = None
    more: tuple[tuple[str | int, str | int | None], ...] = ()  # more (range, slide)
    disorder: str | int = 0  # allowed disorder per source (a watermark's delay)

    def __post_init__(self) -> None:
        if (self.sql is None) == (self.mapreduce is None):
            raise StrataError(f"window query {self.name!r}: give sql or mapreduce (one)")


def from_sql(name: str, sql: str, **options: Any) -> WindowQuery:
    """A window query from SQL whose ``GROUP BY`` has ``WINDOW(time, range[, slide[,
    source]])``; the table it reads is the flow."""
    try:  # WINDOW is a keyword to the parser: rename the call (any case, not in strings)
        tree = sqlglot.parse_one(re.sub(r"\bWINDOW\s*\(", f"{_CALL}(", sql, flags=re.I),
                                 read="spark")
    except sqlglot.errors.ParseError as e:
        raise QueryError(f"cannot parse the query: {e.errors[0]['description']}") from None
    tree = inline_ctes(tree)
    if isinstance(tree, exp.SetOperation):
        raise QueryError(f"a windowed query is one SELECT over one flow, not a "
                         f"{tree.key.upper()}: write a window query per flow, or a query "
                         "(strata query) that unions their answers")
    group = tree.args.get("group") if isinstance(tree, exp.Select) else None
    calls = [g for g in (group.expressions if group else [])
             if isinstance(g, exp.Anonymous) and g.name.upper() == _CALL]
    if group is None or not calls:
        raise QueryError("a windowed query groups by WINDOW(time, range[, slide[, source]]),"
                         " e.g. GROUP BY url, WINDOW(ts, '1 hour', '5 minutes', host); "
                         "several WINDOW(...) share one pane store")
    windows, columns = [], set()
    for call in calls:
        args = call.expressions
        text = call.sql().replace(_CALL, "WINDOW")
        if not 2 <= len(args) <= 4 or not isinstance(args[0], exp.Column) or (
                len(args) == 4 and not isinstance(args[3], exp.Column)):
            raise QueryError(f"{text}: WINDOW takes a time column, a range, an optional "
                             "slide and an optional source column")
        if not all(isinstance(a, exp.Literal) for a in args[1:3]):
            raise QueryError(f"{text}: range and slide are literals ('5 minutes', 300)")
        literal: list[str | int] = [a.this for a in args[1:3]]
        windows.append((literal[0], literal[1] if len(literal) > 1 else None))
        columns.add((args[0].name, args[3].name if len(args) == 4 else None))
    if len(columns) != 1:
        raise QueryError("the WINDOW(...) terms of a query name one time column and one "
                         "source column")
    time, source = columns.pop()
    group.set("expressions", [g for g in group.expressions if g not in calls])
    if not group.expressions:
        tree.set("group", None)
    tables = list(tree.find_all(exp.Table))
    if len({t.name for t in tables}) != 1:
        raise QueryError("a windowed query reads one flow")
    return WindowQuery(name, tables[0].name, windows[0][0], windows[0][1], time=time,
                       source=source or options.pop("source", "source"),
                       more=tuple(windows[1:]), sql=tree.sql(dialect="spark"), **options)


@dataclass
class WindowPlan:
    """A window query compiled against its flow's columns."""

    query: WindowQuery
    columns: Mapping[str, str]  # the flow's columns (with _mult if it has deletes)

    def __post_init__(self) -> None:
        q = self.query
        # a flow without the default source column is one source, named like the flow
        self.one_source = q.source == "source" and q.source not in self.columns
        for c in (q.time, *(() if self.one_source else (q.source,))):
            if c not in self.columns:
                raise StrataError(f"window query {q.name!r}: flow {q.flow!r} has no column "
                                  f"{c!r} (columns: {', '.join(self.columns)})")
        self.time_type = self.columns[q.time]
        self.time_sql = time_sql(q.time, self.time_type)
        specs = []
        for r, sl in ((q.range, q.slide), *q.more):
            rng = parse_duration(r, self.time_type)
            specs.append((rng, rng if sl is None else parse_duration(sl, self.time_type)))
        self.width = shared_width(specs)
        self.disorder = parse_duration(q.disorder, self.time_type, allow_zero=True)
        self.specs = [Panes(r, sl, self.width) for r, sl in dict.fromkeys(specs)]
        clash = set(self.outputs) & (set(RESULT_COLUMNS) | {"_mult"})
        if clash:
            raise StrataError(f"window query {q.name!r}: output columns {sorted(clash)} are "
                              "the window's own; rename them")
        self.algebra  # noqa: B018 (refuses aggregates that cannot run over panes)

    def __getstate__(self) -> dict:
        return {"query": self.query, "columns": self.columns}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def retracts(self) -> bool:
        return "_mult" in self.columns

    @cached_property
    def group(self) -> GroupPlan | None:
        """The SQL query's group-by and its monoids (None for a MapReduce)."""
        q = self.query
        if q.sql is None:
            return None
        flows = {q.flow: dict(self.columns)}
        root = parse_sql(q.sql, flows).root
        if not isinstance(root, GroupBy):
            raise QueryError(f"window query {q.name!r}: the query must be a GROUP BY over "
                             f"{q.flow!r} (with filters), not {root}")
        row_exprs(root.child)  # a scan under filters and projections only
        monoids = [monoid(a, f"_p{i}", root.child.columns, self.retracts)
                   for i, a in enumerate(root.aggs)]
        return GroupPlan(root, "", monoids)

    @cached_property
    def algebra(self) -> PartsAlgebra:
        if self.group is None:
            assert self.query.mapreduce is not None
            return self.query.mapreduce.algebra()
        return PartsAlgebra.of_kinds([p.kind for p in self.group.parts],
                                     f"window query {self.query.name!r}")

    @cached_property
    def outputs(self) -> dict[str, str]:
        if self.group is None:
            assert self.query.mapreduce is not None
            return self.query.mapreduce.output_columns()
        return dict(self.group.node.columns)

    @property
    def key_names(self) -> list[str]:
        return [n for n, _ in self.group.node.keys] if self.group else [
            self.query.mapreduce.key]  # type: ignore[union-attr]

    def result_columns(self) -> dict[str, str]:
        """The query's flow: each window's bounds, the outputs and its C2 summary."""
        return {"window_start": self.time_type, "window_end": self.time_type,
                **self.outputs, **{c: t for c, t in RESULT_COLUMNS.items() if t}}

    def scoreboard_columns(self) -> dict[str, str]:
        """The scoreboard flow: a row per window, source and pane."""
        return {"window_start": self.time_type, "window_end": self.time_type,
                "source": "string",
                "pane_start": self.time_type, "status": "string", "records": "bigint",
                "shed": "bigint"}
