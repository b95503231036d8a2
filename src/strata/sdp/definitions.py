"""The datasets an SDP project defines, read from its SQL and Python files.

SQL files hold ``CREATE MATERIALIZED VIEW``, ``CREATE STREAMING TABLE``, ``CREATE
TEMPORARY VIEW`` and ``CREATE FLOW … AS INSERT INTO … BY NAME`` statements; Python files
define them with PySpark's own decorators (``@dp.materialized_view``, ``@dp.table``,
``@dp.temporary_view``, ``@dp.append_flow``), which report to the registry that is
active while the file runs: here :class:`Registry` (the one ``spark-pipelines`` installs
sends them to a Connect server instead). A Python body is called with a tracing
``spark`` (:mod:`strata.sdp.capture`) that turns it into SQL where it can.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.tokens import Tokenizer, TokenType

from strata.sdp.capture import capture_body
from strata.sdp.spec import PipelineError, PipelineSpec

MATERIALIZED_VIEW, STREAMING_TABLE, TEMPORARY_VIEW = ("materialized view", "streaming table",
                                                      "temporary view")


@dataclass
class Definition:
    """One dataset: its name, kind, where it is defined, and its query (a sqlglot SELECT)
    or, for a Python body strata could not read as SQL, why not (``opaque``) and the body
    itself (run by Spark at a full refresh)."""

    name: str
    kind: str
    file: Path
    line: int
    query: exp.Expr | None = None
    properties: dict[str, str] = field(default_factory=dict)
    policy: str | None = None
    opaque: str | None = None
    body: Callable[[], Any] | None = None
    flows: list[exp.Expr] = field(default_factory=list)  # appended by CREATE FLOW

    @property
    def where(self) -> str:
        return f"{self.file.name}:{self.line}"


_HEADER = re.compile(
    r"CREATE\s+(?:OR\s+REFRESH\s+)?(?P<kind>MATERIALIZED\s+VIEW|STREAMING\s+TABLE|"
    r"TEMPORARY\s+VIEW|TEMP\s+VIEW)\s+(?:IF\s+NOT\s+EXISTS\s+)?(?P<name>[`\w.]+)"
    r"(?P<rest>.*?)\bAS\s+(?P<query>(?:SELECT|WITH|FROM|\().*)$", re.I | re.S)
_FLOW = re.compile(r"CREATE\s+FLOW\s+(?P<name>[`\w.]+)\s+AS\s+INSERT\s+INTO\s+"
                   r"(?P<target>[`\w.]+)\s+(?:BY\s+NAME\s+)?(?P<query>.*)$", re.I | re.S)
_PROPERTY = re.compile(r"'([^']+)'\s*=\s*'([^']*)'")
_POLICY = re.compile(r"REFRESH\s+POLICY\s+(AUTO|INCREMENTAL\s+STRICT|INCREMENTAL|FULL)", re.I)


def statements(sql: str) -> list[tuple[str, int]]:
    """``sql`` split into statements at top-level semicolons, each with the line of its
    first token (comments before it are not part of it)."""
    out: list[tuple[str, int]] = []
    group: list[Any] = []
    for tok in [*Tokenizer(dialect="spark").tokenize(sql), None]:
        if tok is None or tok.token_type == TokenType.SEMICOLON:
            if group:
                out.append((sql[group[0].start:group[-1].end + 1], group[0].line))
            group = []
        else:
            group.append(tok)
    return out


def _parse_select(text: str, where: str) -> exp.Expr:
    try:
        return sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.ParseError as e:
        raise PipelineError(f"{where}: the query does not parse: {e}") from e


def _unquote(name: str) -> str:
    return name.replace("`", "").split(".")[-1]


def read_sql(file: Path, text: str) -> list[tuple[str, Any]]:
    """The definitions (``("dataset", Definition)``) and flows (``("flow", (target,
    query, where))``) of one SQL file."""
    out: list[tuple[str, Any]] = []
    for stmt, line in statements(text):
        where = f"{file.name}:{line}"
        if m := _HEADER.match(stmt):
            kind = " ".join(m["kind"].lower().split()).replace("temp view", TEMPORARY_VIEW)
            rest = m["rest"]
            policy = _POLICY.search(rest)
            props = dict(_PROPERTY.findall(rest[rest.upper().find("TBLPROPERTIES"):])
                         ) if "TBLPROPERTIES" in rest.upper() else {}
            out.append(("dataset", Definition(
                _unquote(m["name"]), kind, file, line, _parse_select(m["query"], where),
                props, "_".join(policy[1].lower().split()) if policy else None)))
        elif m := _FLOW.match(stmt):
            out.append(("flow", (_unquote(m["target"]), _parse_select(m["query"], where),
                                 where)))
        elif re.match(r"\s*(SET|USE)\b", stmt, re.I):
            continue  # session settings: strata takes them from the spec's configuration
        else:
            raise PipelineError(f"{where}: strata reads CREATE MATERIALIZED VIEW, CREATE "
                                "STREAMING TABLE, CREATE TEMPORARY VIEW and CREATE FLOW … "
                                f"INSERT INTO statements; found {stmt[:60]!r}")
    return out


def _python_registry() -> Any:
    """PySpark's registry interface and registration context (PySpark 4.1 and newer)."""
    try:
        from pyspark.pipelines import graph_element_registry as g
    except ImportError as e:
        raise PipelineError("SDP Python definitions need PySpark 4.1 or newer (it ships "
                            f"pyspark.pipelines): {e}") from e
    return g


def load_definitions(spec: PipelineSpec, spark: Any) -> list[Definition]:
    """Every dataset of the project, flows attached to their targets, in file order.
    ``spark`` is what Python files see as ``spark`` (a tracing session)."""
    g = _python_registry()
    found: list[tuple[str, Any]] = []

    class Registry(g.GraphElementRegistry):  # type: ignore[name-defined]
        def register_output(self, output: Any) -> None:
            found.append(("output", output))

        def register_flow(self, flow: Any) -> None:
            found.append(("pyflow", flow))

        def register_auto_cdc_flow(self, flow: Any) -> None:
            raise PipelineError(f"flow {flow.name or flow.target!r}: strata does not run "
                                "Auto CDC flows; declare deletes with a _mult column")

        def register_sql(self, sql_text: str, file_path: Path) -> None:
            found.extend(read_sql(Path(file_path), sql_text))

    with g.graph_element_registration_context(Registry()):
        for file in spec.files():
            if file.suffix == ".sql":
                found.extend(read_sql(file, file.read_text(encoding="utf-8")))
            elif file.suffix == ".py":
                _run_python(file, spark)
            else:
                raise PipelineError(f"{file}: definitions are .py or .sql files")
    return _assemble(found, spark)


def _run_python(file: Path, spark: Any) -> None:
    module_spec = importlib.util.spec_from_file_location(file.stem, str(file))
    if module_spec is None or module_spec.loader is None:
        raise PipelineError(f"{file}: cannot be imported")
    module = importlib.util.module_from_spec(module_spec)
    module.__dict__["spark"] = spark
    try:
        module_spec.loader.exec_module(module)
    except PipelineError:
        raise
    except Exception as e:
        raise PipelineError(f"{file}: running its definitions failed: "
                            f"{type(e).__name__}: {e}") from e


_KINDS = {"MaterializedView": MATERIALIZED_VIEW, "StreamingTable": STREAMING_TABLE,
          "TemporaryView": TEMPORARY_VIEW}


def _assemble(found: list[tuple[str, Any]], spark: Any) -> list[Definition]:
    datasets: dict[str, Definition] = {}
    flows: list[tuple[str, exp.Expr | None, str, Any]] = []
    for what, item in found:
        if what == "dataset":
            _add(datasets, item)
        elif what == "flow":
            target, query, where = item
            flows.append((target, query, where, None))
        elif what == "output":
            loc = item.source_code_location
            kind = _KINDS.get(type(item).__name__)
            if kind is None:
                raise PipelineError(f"{Path(loc.filename).name}:{loc.line_number}: strata "
                                    f"does not run {type(item).__name__} outputs (sinks)")
            props = dict(getattr(item, "table_properties", None) or {})
            _add(datasets, Definition(_unquote(item.name), kind, Path(loc.filename),
                                      loc.line_number or 0, properties=props))
        else:  # a Python flow: the body of its target, or an append flow into it
            loc = item.source_code_location
            where = f"{Path(loc.filename).name}:{loc.line_number}"
            flows.append((_unquote(item.target), None, where, item))
    for target, query, where, pyflow in flows:
        if target not in datasets:
            raise PipelineError(f"{where}: flow into {target!r}, which the pipeline does "
                                "not define")
        d = datasets[target]
        if pyflow is not None:
            query, why = capture_body(pyflow.func, spark)
            if d.query is None and d.body is None and pyflow.name == pyflow.target:
                d.query, d.opaque, d.body = query, why, pyflow.func
                continue
            if query is None:
                raise PipelineError(f"{where}: append flow into {target!r}: {why}")
        if d.kind != STREAMING_TABLE:
            raise PipelineError(f"{where}: flows append to streaming tables; {target!r} "
                                f"is a {d.kind}")
        assert query is not None
        d.flows.append(query)
    for d in datasets.values():
        if d.query is None and d.body is None and not d.flows:
            raise PipelineError(f"{d.where}: {d.kind} {d.name!r} has no query")
    return list(datasets.values())


def _add(datasets: dict[str, Definition], d: Definition) -> None:
    if d.name in datasets:
        raise PipelineError(f"{d.where}: {d.name!r} is defined twice (also at "
                            f"{datasets[d.name].where})")
    datasets[d.name] = d
