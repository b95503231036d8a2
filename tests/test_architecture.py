"""Checks of the architecture's rules that a linter does not make (docs/architecture.md).

The import layers themselves are checked by ``lint-imports`` (contracts in
``pyproject.toml``), which ``.ci/run`` runs before the tests.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import networkx as nx

SRC = Path(__file__).resolve().parents[1] / "src" / "strata"
HOME_MODULE = SRC / "storage" / "home.py"

_DIRS = "state|flows|frames|incoming|tables|staging|pending|blackbox|CURRENT"
HOME_PATH_PATTERNS = [
    # a home directory joined onto a path
    re.compile(rf"""(?:fs\.join|os\.path\.join|Path)\([^)\n]*["'](?:{_DIRS})["']"""),
    # a home directory inside a path string
    re.compile(rf"""["'][^"'\n]*/(?:{_DIRS})/[^"'\n]*["']"""),
    # the files of a home and of a stage's state directory
    re.compile(r"""["'/]catalog\.sqlite|["'/]controller\.lock|["'/]manifest-|["'/]p\{[a-z_]+:05d\}"""),
]


def _python_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p != HOME_MODULE)


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """Lines of ``path`` that are code: docstrings and comments may name paths."""
    text = path.read_text()
    out, in_doc = [], False
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        quotes = stripped.count('"""') + stripped.count("'''")
        if in_doc:
            in_doc = quotes % 2 == 0
            continue
        if stripped.startswith(('"""', "'''")):
            in_doc = quotes % 2 == 1
            continue
        if stripped.startswith("#"):
            continue
        out.append((n, line.split("  #")[0]))
    return out


def test_no_home_path_is_spelled_outside_the_home_module():
    offenders = [
        f"{path.relative_to(SRC.parent)}:{n}: {line.strip()}"
        for path in _python_files()
        for n, line in _code_lines(path)
        if any(p.search(line) for p in HOME_PATH_PATTERNS)
    ]
    assert not offenders, "home paths belong in strata.storage.home:\n" + "\n".join(offenders)


def test_the_home_path_check_finds_a_spelled_path(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('uri = fs.join(home, "state", stage)\nx = f"{home}/flows/{flow}"\n'
                      'db = Catalog(os.path.join(home, "catalog.sqlite"))\n')
    lines = [line for _, line in _code_lines(sample)]
    assert all(any(p.search(line) for p in HOME_PATH_PATTERNS) for line in lines)


def test_no_module_cites_a_document_outside_the_repository():
    cited = [f"{p.relative_to(SRC.parent)}" for p in SRC.rglob("*.py")
             if "DESIGN.md" in p.read_text()]
    assert not cited, f"cite docs/architecture.md instead of DESIGN.md: {cited}"


CATALOG_MODULE = SRC / "storage" / "catalog.py"
SQLITE_CALL = re.compile(r"\bsqlite3\b|\.execute(?:many|script)?\(")
SQL_TEXT = re.compile(r"""["'](?:SELECT|INSERT|UPDATE|DELETE FROM)\s""")
SPARK_SQL_PACKAGES = ("queries", "series", "sdp")  # Spark SQL text for DataFrame plans, not SQLite


def test_no_sql_outside_the_catalog():
    offenders = []
    for path in _python_files():
        if path == CATALOG_MODULE:
            continue
        spark_sql = path.relative_to(SRC).parts[0] in SPARK_SQL_PACKAGES
        for n, line in _code_lines(path):
            if SQLITE_CALL.search(line) or (SQL_TEXT.search(line) and not spark_sql):
                offenders.append(f"{path.relative_to(SRC.parent)}:{n}: {line.strip()}")
    assert not offenders, "SQL belongs in strata.storage.catalog:\n" + "\n".join(offenders)


def test_the_sql_check_finds_sql(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('db.execute("UPDATE stages SET epochs = 1")\nq = "SELECT name FROM x"\n')
    lines = [line for _, line in _code_lines(sample)]
    assert SQLITE_CALL.search(lines[0]) and SQL_TEXT.search(lines[1])


PYSPARK_PRIVATE = re.compile(r"pyspark\.sql\.classic|\._sc\b|__dict__\[[\"']schema[\"']\]")


def test_no_module_relies_on_pysparks_private_classes_or_fields():
    """Rows the driver holds are a strata type (``queries/arrow/rows.py``), not a subclass of
    PySpark's classic DataFrame with its private fields set (docs/architecture.md, "The
    driver's rows and Spark's")."""
    offenders = [f"{p.relative_to(SRC.parent)}:{n}" for p in sorted(SRC.rglob("*.py"))
                 for n, line in _code_lines(p) if PYSPARK_PRIVATE.search(line)]
    assert not offenders, offenders


MAX_FUNCTION_LINES = 80  # the code rule; ruff's PLR0915/C901 limits count statements
# typer verbs: their signatures are one parameter (and its help) per command-line option
LONG_FUNCTIONS_ALLOWED = SRC / "cli"


def _long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """The functions of ``path`` longer than ``limit`` lines (decorators included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > limit:
                out.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_is_longer_than_80_lines():
    offenders = [f for path in sorted(SRC.rglob("*.py"))
                 if LONG_FUNCTIONS_ALLOWED not in path.parents
                 for f in _long_functions(path)]
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def test_the_function_size_check_finds_a_long_function(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("@decorated\ndef f():\n" + "    x = 1\n" * 5 + "\ndef g():\n    pass\n")
    assert _long_functions(sample, limit=6) == ["sample.py:2 f (7 lines)"]


QUERIES = SRC / "queries"


def _module_of(path: Path, root: Path = SRC.parent) -> str:
    """The dotted name of module ``path`` on import path ``root``; a package is its
    ``__init__``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, here: str, modules: set[str]) -> list[str]:
    """What import ``node`` of a module of package ``here`` names: ``from P import name``
    is module ``P.name`` when there is one, else ``P`` (a package: its ``__init__``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1 packages
        anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
        base = f"{anchor}.{base}" if base else anchor
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def import_graph(package: Path, root: Path = SRC.parent) -> nx.DiGraph:
    """Module → the modules of ``package`` (a directory on import path ``root``) it
    imports, wherever the import is: at the top, in a function, under ``if
    TYPE_CHECKING:``. Names under the package that are no module of it are kept in
    ``graph.graph["unresolved"]``."""
    files = {_module_of(p, root): p for p in sorted(package.rglob("*.py"))}
    prefix = _module_of(package / "__init__.py", root) + "."
    graph = nx.DiGraph(unresolved=[])
    graph.add_nodes_from(files)
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _imported(node, here, set(files)):
                if target in files:
                    graph.add_edge(name, target)
                elif target.startswith(prefix):
                    graph.graph["unresolved"].append(f"{name}: {target}")
    return graph


def _cycles(graph: nx.DiGraph, most: int = 5) -> list[str]:
    return [" -> ".join([*c, c[0]]) for c in itertools.islice(nx.simple_cycles(graph), most)]


def test_the_query_layer_has_no_import_cycle():
    """Not even through a deferred import or a package's ``__init__``: a module inside a
    subpackage imports its siblings' modules, and only users outside the layer import a
    subpackage's surface (docs/architecture.md, "Layers")."""
    graph = import_graph(QUERIES)
    assert not graph.graph["unresolved"], graph.graph["unresolved"]
    assert "strata.queries.plan.algebra" in graph["strata.queries.spark.evaluator"]
    assert not _cycles(graph), "import cycles:\n" + "\n".join(_cycles(graph))


def test_the_cycle_check_finds_a_cycle_through_a_package_init(tmp_path):
    sub = tmp_path / "pkg" / "sub"
    sub.mkdir(parents=True)
    (sub.parent / "__init__.py").write_text("")
    (sub / "__init__.py").write_text("from pkg.sub.a import f\n")  # the surface
    (sub / "a.py").write_text("def f():\n    from . import b\n")  # deferred, relative
    (sub / "b.py").write_text("from pkg.sub import f\nfrom pkg.old import g\n")
    graph = import_graph(sub.parent, tmp_path)
    assert [sorted(c) for c in nx.simple_cycles(graph)] == [["pkg.sub", "pkg.sub.a", "pkg.sub.b"]]
    assert graph.graph["unresolved"] == ["pkg.sub.b: pkg.old"]


def _surface(package: Path) -> set[str]:
    """The names ``package``'s ``__init__`` declares in ``__all__``."""
    for node in ast.parse((package / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def test_other_packages_import_the_query_layer_by_its_surfaces():
    """``strata.queries`` or a subpackage (``strata.queries.spark``), and only the names
    its ``__all__`` declares; never a module inside a subpackage."""
    surfaces = {_module_of(p): _surface(p.parent) for p in QUERIES.glob("*/__init__.py")}
    surfaces["strata.queries"] = _surface(QUERIES)
    offenders = []
    for path in _python_files():
        if QUERIES in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [(node.module or "", a.name) for a in node.names]
            else:
                continue
            for module, name in names:
                if not (module + ".").startswith("strata.queries."):
                    continue
                if module not in surfaces or (name is not None and name not in surfaces[module]):
                    offenders.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: "
                                     f"{module} {name or ''}".rstrip())
    assert surfaces["strata.queries.spark"] and surfaces["strata.queries.plan"]
    assert not offenders, "import the query layer's surfaces:\n" + "\n".join(offenders)


def test_nothing_names_a_query_module_at_its_path_before_the_split():
    """Only ``strata.queries.moved`` (which maps them) and its test name the old paths."""
    from strata.queries.moved import MOVED

    old = "|".join(sorted((m.rpartition(".")[2] for m in MOVED), key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w.])(?:strata\.)?queries[./](?:{old})\b")
    root = SRC.parents[1]
    allowed = {SRC / "queries" / "moved.py", root / "tests" / "queries" / "test_old_paths.py"}
    texts = [*root.glob("*.md"), *(root / "docs").glob("*.md"),
             *(p for d in ("src", "tests", "benchmarks", "examples")
               for p in (root / d).rglob("*.py"))]
    offenders = [f"{p.relative_to(root)}:{n}: {line.strip()}" for p in sorted(texts)
                 if p not in allowed
                 for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not offenders, "name the new module paths:\n" + "\n".join(offenders)
