"""Checks of the architecture's rules that a linter does not make (docs/architecture.md).

The import layers themselves are checked by ``lint-imports`` (contracts in
``pyproject.toml``), which ``.ci/run`` runs before the tests.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

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
