"""Shipping a pipeline's own Python code to Spark's workers.

User functions defined in a pipeline file are pickled by value (the file is loaded
under a name no worker can import). What they import from *their neighbours* — a
sibling module, the package the pipeline belongs to — is pickled by reference, so the
workers must be able to import it: locally from any working directory, and on a
cluster whose machines never saw the code. Spark's answer is ``addPyFile``; this
module zips each user source root once (by content) and adds it.

A source root is the directory a user module is imported from: for a module inside a
package, the package's top-level directory; for a plain module (``pipeline.py``,
``helpers.py``), the ``.py`` files and packages that sit beside it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from pyspark import cloudpickle

from strata.model.errors import StrataError
from strata.physical.session import is_connect

_SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "node_modules"}
_MAX_BYTES = 64 * 1024 * 1024
_IMPORTABLE = {"strata", "builtins", "operator", "functools", "__main__"}
_BY_VALUE: set[str] = set()
_SHIPPED: dict[int, set[str]] = {}  # id(SparkContext or Connect session) -> zips added


def user_modules(functions: Iterable[Any]) -> list[ModuleType]:
    """The modules defining ``functions`` that are the user's (not strata, not installed)."""
    found: dict[str, ModuleType] = {}
    for fn in functions:
        name = getattr(fn, "__module__", None) or ""
        module = sys.modules.get(name)
        if module is None or name.split(".")[0] in _IMPORTABLE or not _is_user(module):
            continue
        found[name] = module
    return list(found.values())


def pickle_by_value(modules: Iterable[ModuleType]) -> None:
    """Have cloudpickle carry these modules' functions by value, not by import path."""
    for module in modules:
        if module.__name__ not in _BY_VALUE:
            cloudpickle.register_pickle_by_value(module)
            _BY_VALUE.add(module.__name__)


def ship_modules(spark: Any, modules: Iterable[ModuleType]) -> list[str]:
    """Add the source root of every module in ``modules`` to Spark (once per content).

    Returns the zip files added by this call (empty when all were shipped before).
    """
    roots = {root for m in modules if (root := source_root(m)) is not None}
    return [z for r in sorted(roots, key=str) if _add(spark, z := zip_root(r))]


def ship_files(spark: Any, paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """``--py-files``: add each ``.py``, ``.zip`` or ``.egg`` file, or a directory zipped."""
    added = []
    for p in map(Path, paths):
        if not p.exists():
            raise StrataError(f"--py-files: {p} does not exist; give .py, .zip or .egg files "
                              "or directories of Python code")
        if p.is_dir():
            target = zip_root(_Root(p, whole=True))
        elif p.suffix in (".py", ".zip", ".egg"):
            target = str(p.resolve())
        else:
            raise StrataError(f"--py-files: {p} is not a .py, .zip or .egg file or a directory")
        if _add(spark, target):
            added.append(target)
    return added


class _Root:
    """A directory whose Python code is shipped: all of it (``whole``), or only its
    top-level ``.py`` files and packages (a plain module's neighbours)."""

    def __init__(self, path: Path, whole: bool, package: str | None = None) -> None:
        self.path, self.whole, self.package = path.resolve(), whole, package

    def _key(self) -> tuple:
        return (str(self.path), self.whole, self.package)

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Root) and self._key() == other._key()

    def __str__(self) -> str:
        return str(self.path / (self.package or ""))


def source_root(module: ModuleType) -> _Root | None:
    """Where ``module`` is imported from, as a root to ship (None: nothing to ship)."""
    origin = getattr(module, "__file__", None)
    if not origin:
        return None
    folder = Path(origin).resolve().parent
    if not (folder / "__init__.py").exists():
        return _Root(folder, whole=False)
    while (folder.parent / "__init__.py").exists():
        folder = folder.parent
    return _Root(folder.parent, whole=False, package=folder.name)


def zip_root(root: _Root) -> str:
    """A zip of ``root``'s Python files, named by their content, in the temp directory."""
    files = sorted(_python_files(root))
    digest = hashlib.sha1()
    total = 0
    for arc, path in files:
        data = path.read_bytes()
        total += len(data)
        if total > _MAX_BYTES:
            raise StrataError(
                f"the Python code beside {root} is over {_MAX_BYTES >> 20} MiB; put the "
                "pipeline in its own directory or package, or pass --py-files explicitly")
        digest.update(arc.encode() + b"\0" + data)
    target = Path(tempfile.gettempdir()) / f"strata-code-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, path in files:
                z.write(path, arc)
        os.replace(tmp, target)
    return str(target)


def _python_files(root: _Root) -> Iterable[tuple[str, Path]]:
    base = root.path
    if root.package:
        yield from _tree(base, base / root.package)
        return
    for entry in sorted(base.iterdir()):
        if entry.is_file() and entry.suffix == ".py":
            yield entry.name, entry
        elif entry.is_dir() and _keep(entry) and (root.whole or (entry / "__init__.py").exists()):
            yield from _tree(base, entry)


def _tree(base: Path, folder: Path) -> Iterable[tuple[str, Path]]:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if _keep(Path(dirpath) / d))
        for f in sorted(filenames):
            if f.endswith(".py"):
                path = Path(dirpath) / f
                yield str(path.relative_to(base)), path


def _keep(folder: Path) -> bool:
    name = folder.name
    return not name.startswith(".") and name not in _SKIP_DIRS and not (
        folder / "pyvenv.cfg").exists()


def _add(spark: Any, path: str) -> bool:
    """Add ``path`` to the workers' Python path: ``addPyFile``, or over Spark Connect
    (no SparkContext) the session's ``addArtifacts(pyfile=True)``."""
    connect = is_connect(spark)
    owner = spark if connect else spark.sparkContext
    shipped = _SHIPPED.setdefault(id(owner), set())
    if path in shipped:
        return False
    if connect:
        spark.addArtifacts(path, pyfile=True)
    else:
        owner.addPyFile(path)
    shipped.add(path)
    return True


def _is_user(module: ModuleType) -> bool:
    origin = getattr(module, "__file__", None) or ""
    if not origin or "site-packages" in origin or "dist-packages" in origin:
        return False
    stdlib = sysconfig.get_paths()["stdlib"]
    return not origin.startswith(stdlib)
