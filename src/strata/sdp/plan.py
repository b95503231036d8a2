"""An SDP project as a strata dataflow: which views are kept incrementally, which are
refreshed in full, and why (docs/sdp.md).

Every Parquet source (``parquet.`path```, ``spark.read.parquet(path)``) becomes an
external flow fed by the files that appear under its path; every materialized view and
streaming table a query stage whose output flow carries the view's name, so a view
over another view reads its changes; temporary views are inlined as subqueries. A
view that strata cannot maintain (or whose policy says ``full``) is recomputed by
Spark SQL at each refresh, and so is every view that reads one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from sqlglot import exp

from strata.model.dataflow import Dataflow
from strata.model.schema import to_ddl
from strata.queries import QueryError, add_query
from strata.sdp.definitions import TEMPORARY_VIEW, Definition
from strata.sdp.spec import PipelineError, PipelineSpec

POLICIES = ("auto", "incremental", "incremental_strict", "full")
POLICY_PROPERTIES = ("refresh_policy", "pipelines.refreshPolicy", "strata.refreshPolicy")


@dataclass
class Source:
    """A Parquet source: the folder (or file) and the flow its new files go to."""

    path: str
    flow: str
    ddl: str = ""


@dataclass
class ViewPlan:
    """How one materialized view or streaming table is refreshed."""

    definition: Definition
    policy: str
    query: exp.Expr | None  # sources renamed to flows, temporary views inlined
    reads: list[str] = field(default_factory=list)  # datasets and source flows
    incremental: bool = False
    why: str = ""  # why it is refreshed in full
    explain: str = ""  # h, ⊗ and a of its query stage

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass
class PipelinePlan:
    spec: PipelineSpec
    dataflow: Dataflow
    sources: dict[str, Source]  # by flow
    views: list[ViewPlan]  # in dependency order
    warehouse: str | None = None  # where tables go, if not the spec's or session's

    def view(self, name: str) -> ViewPlan:
        return next(v for v in self.views if v.name == name)


def keys_of(conf: Mapping[str, str]) -> dict[str, list[str]]:
    """Unique keys the spec declares (``strata.keys.customers: id``), which joins need."""
    return {k[len("strata.keys."):]: [c.strip() for c in v.split(",") if c.strip()]
            for k, v in conf.items() if k.startswith("strata.keys.")}


def policy_of(d: Definition, conf: Mapping[str, str]) -> str:
    props = {k: v for k, v in d.properties.items() if k in POLICY_PROPERTIES}
    value = d.policy or next(iter(props.values()), None) or conf.get(
        "strata.refreshPolicy", "auto")
    value = "_".join(value.lower().split())
    if value not in POLICIES:
        raise PipelineError(f"{d.where}: refresh policy {value!r}; choose one of "
                            f"{', '.join(POLICIES)}")
    return value


class _Resolver:
    """Renames a query's tables: sources to flows, temporary views to subqueries."""

    def __init__(self, spec: PipelineSpec, defs: dict[str, Definition]) -> None:
        self.spec, self.defs = spec, defs
        self.sources: dict[str, Source] = {}  # by path

    def source(self, raw: str) -> Source:
        path = raw if "://" in raw else str((self.spec.root / raw).resolve())
        if path not in self.sources:
            base = re.sub(r"\W+", "_", Path(path.rstrip("/")).stem).strip("_") or "files"
            name, n = base, 2
            taken = {s.flow for s in self.sources.values()} | set(self.defs)
            while name in taken:
                name, n = f"{base}_{n}", n + 1
            self.sources[path] = Source(path, name)
        return self.sources[path]

    def resolve(self, query: exp.Expr, where: str, reads: list[str],
                inlining: tuple[str, ...] = ()) -> exp.Expr:
        def rename(node: exp.Expr) -> exp.Expr:
            if not isinstance(node, exp.Table):
                return node
            inner = _streamed(node)
            if inner is not node:
                return rename(inner)
            if (node.args.get("db") and node.db.lower() == "parquet"
                    and isinstance(node.this, exp.Identifier)):
                src = self.source(node.name)
                reads.append(src.flow)
                return exp.to_table(src.flow).as_(node.alias_or_name
                                                  if node.alias else src.flow)
            name = node.name
            d = self.defs.get(name)
            if d is None:
                raise PipelineError(f"{where}: reads {node.sql(dialect='spark')!r}, which the "
                                    "pipeline does not define; strata reads the pipeline's "
                                    "datasets and Parquet sources (parquet.`path`)")
            if d.kind == TEMPORARY_VIEW:
                if name in inlining:
                    raise PipelineError(f"{where}: temporary view {name!r} reads itself")
                if d.query is None:
                    raise PipelineError(f"{d.where}: temporary view {name!r}: {d.opaque}")
                body = self.resolve(d.query.copy(), d.where, reads, (*inlining, name))
                return exp.Subquery(this=body, alias=exp.TableAlias(
                    this=exp.to_identifier(node.alias_or_name)))
            reads.append(name)
            return node

        return query.transform(rename, copy=True)


def _streamed(node: exp.Table) -> exp.Expr:
    """``STREAM(x)`` / ``STREAM x``: the table ``x`` itself (strata reads only what is
    new in every source anyway)."""
    this = node.this
    if isinstance(this, exp.Anonymous) and this.name.upper() == "STREAM" and this.expressions:
        arg = this.expressions[0]
        parts = [p.name for p in arg.parts] if isinstance(arg, exp.Column) else [arg.name]
        if len(parts) == 2 and parts[0].lower() == "parquet":
            table = exp.Table(this=exp.to_identifier(parts[1], quoted=True),
                              db=exp.to_identifier("parquet"))
        else:
            table = exp.to_table(".".join(parts))
        return table.as_(node.alias) if node.alias else table
    if (isinstance(this, exp.Identifier) and this.name.upper() == "STREAM" and node.alias
            and not node.args.get("db")):
        return exp.to_table(node.alias)
    return node


def _order(views: dict[str, ViewPlan]) -> list[ViewPlan]:
    done: list[ViewPlan] = []
    state: dict[str, int] = {}

    def visit(v: ViewPlan, path: tuple[str, ...]) -> None:
        if state.get(v.name) == 2:
            return
        if state.get(v.name) == 1:
            raise PipelineError(f"{v.definition.where}: datasets read each other in a cycle: "
                                f"{' -> '.join((*path, v.name))}")
        state[v.name] = 1
        for r in v.reads:
            if r in views:
                visit(views[r], (*path, v.name))
        state[v.name] = 2
        done.append(v)

    for v in views.values():
        visit(v, ())
    return done


def _source_ddl(src: Source) -> str:
    try:
        schema = ds.dataset(src.path.removeprefix("file://"), format="parquet").schema
    except (OSError, ValueError) as e:
        raise PipelineError(f"Parquet source {src.path}: cannot read its schema ({e}); a "
                            "source needs at least one file before the first run") from e
    return to_ddl(schema)


def plan_pipeline(spec: PipelineSpec, definitions: list[Definition]) -> PipelinePlan:
    """The dataflow and every view's refresh mode. Raises :class:`PipelineError` for a
    view whose policy is ``incremental_strict`` and that strata cannot maintain."""
    defs = {d.name: d for d in definitions}
    resolver = _Resolver(spec, defs)
    views: dict[str, ViewPlan] = {}
    for d in definitions:
        if d.kind == TEMPORARY_VIEW:
            continue
        reads: list[str] = []
        queries = [q for q in [d.query, *d.flows] if q is not None]
        resolved = [resolver.resolve(q, d.where, reads) for q in queries]
        query: exp.Expr | None = None
        for part in resolved:  # a streaming table may be fed by several flows
            query = part if query is None else exp.union(query, part, distinct=False)
        views[d.name] = ViewPlan(d, policy_of(d, spec.configuration), query,
                                 sorted(set(reads)))
    ordered = _order(views)
    df = Dataflow(re.sub(r"\W+", "_", spec.name) or "pipeline")
    for src in resolver.sources.values():
        src.ddl = _source_ddl(src)
        df.source(src.flow, src.ddl)
    keys = keys_of(spec.configuration)
    for v in ordered:
        _decide(df, v, views, keys)
    return PipelinePlan(spec, df, {s.flow: s for s in resolver.sources.values()}, ordered)


def _decide(df: Dataflow, v: ViewPlan, views: dict[str, ViewPlan],
            keys: Mapping[str, list[str]]) -> None:
    """Add ``v``'s query stage to ``df`` if strata can maintain it, else say why not."""
    full_inputs = [r for r in v.reads if r in views and not views[r].incremental]
    if v.policy == "full":
        v.why = "its refresh policy is full"
    elif v.query is None:
        v.why = v.definition.opaque or "it has no query strata can read"
    elif full_inputs:
        v.why = f"it reads {', '.join(full_inputs)}, refreshed in full"
    else:
        try:
            stage = add_query(df, v.name, v.query.sql(dialect="spark"), output=v.name,
                              keys={k: c for k, c in keys.items() if k in v.reads})
        except QueryError as e:
            v.why = str(e)
        else:
            v.incremental = True
            v.explain = _explain(stage.program)
            return
    if v.policy == "incremental_strict":
        raise PipelineError(f"{v.definition.where}: {v.definition.kind} {v.name!r} has "
                            "refresh policy incremental_strict but cannot be refreshed "
                            f"incrementally: {v.why}")


def _explain(program: Any) -> str:
    explain = getattr(program, "explain", None)
    return explain() if callable(explain) else ""
