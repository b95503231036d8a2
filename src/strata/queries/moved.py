"""The query layer's module paths before it was split by job into subpackages, which homes
written before the split still name.

A committed manifest names the class of the program that wrote it
(``strata.queries.program:QueryProgram``), and a stage registered compiled is a pickle
naming the classes of its program's objects (``strata.queries.algebra.GroupBy``, …;
docs/architecture.md, "The home on disk" and "Adding a new kind of stage"). Importing an
old path gives the module at its new one, the same module object, so such a home reads
and runs as before. strata's own code imports the new paths only
(``tests/test_architecture.py`` checks it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

_SUBPACKAGES = {
    "plan": ("algebra", "errors", "expressions", "incremental", "monoids"),
    "front": ("api", "ctes", "sql", "sql_rows"),
    "arrow": ("arrow_expr", "arrow_lift", "arrow_step", "driver_rows", "rows"),
    "spark": ("dispatch", "evaluator", "explode", "frames", "outer_join", "tables",
              "window_functions"),
    "programs": ("iteration", "program", "recompute", "stage", "vector_route"),
}
MOVED = {f"strata.queries.{m}": f"strata.queries.{sub}.{m}"
         for sub, modules in _SUBPACKAGES.items() for m in modules}


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at the new one."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # an empty module, which exec_module replaces

    def exec_module(self, module: ModuleType) -> None:
        # a module may replace itself in sys.modules: the import then returns the new one
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])


def install() -> None:
    """Let the old paths be imported (once per process)."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.append(_OldPaths())
