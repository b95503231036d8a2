"""Finding the dataflow a command runs: ``PIPELINE`` as a file or an importable module.

``PIPELINE`` is one of

- ``path/to/pipeline.py`` (a file, loaded under a stable module name derived from
  its path; its directory is put on ``sys.path`` so it can import its neighbours);
- ``package.module`` (an importable module; the current directory is importable);
- either of these followed by ``:attribute`` (``pipeline.py:build``,
  ``strata.apps.urlcount:urlcount_dataflow``; dotted attributes are followed).

The attribute may be a :class:`~strata.model.dataflow.Dataflow` or a function
called with no arguments that returns one. Without an attribute, the module's
``dataflow`` attribute is taken (a Dataflow or such a function), else its only
Dataflow object, else its function ``build_dataflow()``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError

_ATTR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MODULE = _ATTR
BUILDERS = ("build_dataflow",)


def load_dataflow(spec: str) -> Dataflow:
    """The dataflow named by ``spec`` (see the module docstring); StrataError if none."""
    target, attr = split_spec(spec)
    module = _load_module(target)
    if attr is not None:
        try:
            value = _getattr_path(module, attr)
        except AttributeError:
            raise StrataError(
                f"{target} has no attribute {attr!r}; {_found(module)}") from None
        return _resolve(value, f"{target}:{attr}")
    return _default(module, target)


def split_spec(spec: str) -> tuple[str, str | None]:
    """``"file.py:attr"`` → ``("file.py", "attr")``; no attribute → ``(spec, None)``."""
    spec = spec.strip()
    if not spec:
        raise StrataError("no pipeline given: pass a .py file or a module[:attribute]")
    head, sep, tail = spec.rpartition(":")
    # "C:\\x.py" style drive letters and paths ending in ':' are not attributes
    if sep and head and _ATTR.match(tail) and not (len(head) == 1 and head.isalpha()):
        return head, tail
    return spec, None


def is_file_spec(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target or os.path.isfile(target)


def module_name_for(path: Path) -> str:
    """A stable module name for the file at ``path`` (same file → same name)."""
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", resolved.stem)
    return f"strata_pipeline_{stem}_{digest}"


def _load_module(target: str) -> ModuleType:
    if is_file_spec(target):
        return _load_file(Path(target))
    if not _MODULE.match(target):
        raise StrataError(
            f"{target!r} is neither a .py file nor a module name; give a file path ending in "
            ".py or a module such as package.module[:attribute]")
    return _import_module(target)


def _load_file(path: Path) -> ModuleType:
    if not path.exists():
        raise StrataError(f"pipeline file {path} not found")
    if path.is_dir():
        raise StrataError(f"pipeline {path} is a directory; give the .py file that defines the "
                          "dataflow")
    resolved = path.resolve()
    name = module_name_for(resolved)
    folder = str(resolved.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise StrataError(f"cannot load {path} as Python source (does it end in .py?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and Spark workers look it up here
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        raise StrataError(
            f"syntax error in {path}, line {e.lineno}: {e.msg}"
            + (f"\n    {e.text.strip()}" if e.text else "")) from None
    except StrataError:
        sys.modules.pop(name, None)
        raise
    except Exception as e:  # noqa: BLE001  (user code: report it, not a traceback)
        sys.modules.pop(name, None)
        raise StrataError(f"loading {path} failed{_where(e, str(resolved))}: "
                          f"{type(e).__name__}: {e}") from None
    return module


def _import_module(name: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise StrataError(
                f"cannot import module {name!r} (no module named {e.name!r}); give a path "
                "ending in .py for a file, or make the module importable (PYTHONPATH)"
            ) from None
        raise StrataError(f"importing {name} failed: ModuleNotFoundError: {e}") from None
    except SyntaxError as e:
        raise StrataError(f"syntax error in {e.filename}, line {e.lineno}: {e.msg}") from None
    except StrataError:
        raise
    except Exception as e:  # noqa: BLE001
        raise StrataError(f"importing {name} failed: {type(e).__name__}: {e}") from None


def _where(e: BaseException, filename: str) -> str:
    """", line N" of the deepest frame of ``e`` inside ``filename``."""
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == filename]
    return f" at line {lines[-1]}" if lines else ""


def _getattr_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _resolve(value: Any, what: str) -> Dataflow:
    """A Dataflow, or what a zero-argument callable returns."""
    if isinstance(value, Dataflow):
        return value
    if not callable(value):
        raise StrataError(f"{what} is of type {type(value).__name__}, not a Dataflow or a "
                          "function returning one")
    try:
        sig = inspect.signature(value)
    except (TypeError, ValueError):  # no signature to check (some builtins): just call it
        sig = None
    if sig is not None:
        try:
            sig.bind()
        except TypeError:
            raise StrataError(f"{what} must be callable with no arguments to build the "
                              f"dataflow; its signature is {sig}") from None
    try:
        result = value()
    except StrataError:
        raise
    except Exception as e:  # noqa: BLE001
        raise StrataError(f"{what}() failed: {type(e).__name__}: {e}") from None
    if not isinstance(result, Dataflow):
        raise StrataError(f"{what}() returned a value of type {type(result).__name__}, not "
                          "a Dataflow")
    return result


def _dataflows(module: ModuleType) -> dict[str, Dataflow]:
    return {n: v for n, v in vars(module).items()
            if isinstance(v, Dataflow) and not n.startswith("_")}


def _functions(module: ModuleType) -> list[str]:
    return [n for n, v in vars(module).items()
            if inspect.isfunction(v) and not n.startswith("_")
            and v.__module__ == module.__name__]


def _found(module: ModuleType) -> str:
    flows, fns = _dataflows(module), _functions(module)
    parts = []
    if flows:
        parts.append("Dataflow objects: " + ", ".join(flows))
    if fns:
        parts.append("functions: " + ", ".join(fns))
    return "found " + ("; ".join(parts) if parts else "no Dataflow objects and no functions")


def _default(module: ModuleType, target: str) -> Dataflow:
    if hasattr(module, "dataflow"):
        return _resolve(module.dataflow, f"{target}:dataflow")
    flows = _dataflows(module)
    if len(flows) == 1:
        name, df = next(iter(flows.items()))
        return df
    for name in BUILDERS:
        if callable(getattr(module, name, None)):
            return _resolve(getattr(module, name), f"{target}:{name}")
    if len(flows) > 1:
        raise StrataError(
            f"{target} defines several dataflows ({', '.join(flows)}); choose one with "
            f"{target}:NAME")
    raise StrataError(
        f"no dataflow found in {target}: define `dataflow = ...` (a Dataflow), a function "
        f"`build_dataflow()` returning one, or name it with {target}:NAME; {_found(module)}")
