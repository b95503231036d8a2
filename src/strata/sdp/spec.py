"""An SDP project's spec (``spark-pipeline.yml``) read as ``spark-pipelines`` reads it.

The fields are SDP's own: ``name`` and ``storage`` (required), ``catalog``,
``database`` (or ``schema``), ``configuration`` (string to string) and ``libraries``
(``- glob: {include: PATTERN}``, a file or a ``folder/**``). strata keeps its home under
``storage`` (docs/sdp.md) and reads its own settings from ``configuration``
(``strata.keys.NAME``, ``strata.refreshPolicy``).
"""

from __future__ import annotations

import glob
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from strata.model.errors import StrataError

SPEC_NAMES = ("spark-pipeline.yaml", "spark-pipeline.yml")
FIELDS = {"name", "storage", "catalog", "database", "schema", "configuration", "libraries"}


class PipelineError(StrataError):
    """An SDP project strata cannot run as written: names the file (and line) and why."""


@dataclass(frozen=True)
class PipelineSpec:
    path: Path  # the spec file; libraries and relative paths are relative to its folder
    name: str
    storage: str
    catalog: str | None
    database: str | None
    configuration: Mapping[str, str]
    libraries: Sequence[str]  # glob patterns, as written

    @property
    def root(self) -> Path:
        return self.path.parent

    def files(self) -> list[Path]:
        """The definition files the libraries' globs match, in SDP's order (spec order,
        then the glob's), skipping Python caches."""
        seen: list[Path] = []
        for pattern in self.libraries:
            for p in sorted(self.root.glob(_glob(pattern, self.path))):
                if p.is_file() and "__pycache__" not in p.parts and p not in seen:
                    seen.append(p)
        return seen


def _glob(pattern: str, spec: Path) -> str:
    """SDP allows a file path or ``folder/**`` (everything below the folder)."""
    if not glob.has_magic(pattern):
        return pattern
    if pattern.endswith("/**") and not glob.has_magic(pattern[:-3]):
        return pattern + "/*"
    raise PipelineError(f"{spec}: library glob {pattern!r}: give a file or a folder/** "
                        "(as spark-pipelines does)")


def find_spec(start: Path) -> Path:
    """The spec file in ``start`` or its nearest ancestor that has one."""
    for folder in (start, *start.parents):
        found = [folder / n for n in SPEC_NAMES if (folder / n).is_file()]
        if len(found) > 1:
            raise PipelineError(f"{folder}: both spark-pipeline.yaml and .yml; keep one")
        if found:
            return found[0]
    raise PipelineError(f"no spark-pipeline.yml in {start} or above it; give --spec PATH")


def load_spec(path: str | Path | None = None) -> PipelineSpec:
    """Read and check the spec at ``path`` (default: found from the working folder)."""
    spec_path = Path(path) if path is not None else find_spec(Path.cwd())
    if not spec_path.is_file():
        raise PipelineError(f"pipeline spec {spec_path} does not exist")
    try:
        data = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise PipelineError(f"{spec_path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise PipelineError(f"{spec_path}: a pipeline spec is a mapping of fields")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise PipelineError(f"{spec_path}: unknown field {unknown[0]!r}; a spec has "
                            f"{', '.join(sorted(FIELDS))}")
    for required in ("name", "storage"):
        if required not in data:
            raise PipelineError(f"{spec_path}: the field {required!r} is missing")
    conf = data.get("configuration") or {}
    if not isinstance(conf, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in conf.items()):
        raise PipelineError(f"{spec_path}: configuration maps strings to strings "
                            "(quote numbers and booleans)")
    try:
        libraries = [entry["glob"]["include"] for entry in data.get("libraries") or []]
    except (KeyError, TypeError) as e:
        raise PipelineError(f"{spec_path}: each library is '- glob: {{include: PATTERN}}'"
                            ) from e
    storage = str(data["storage"])
    if "://" not in storage and not storage.startswith("/"):  # relative to the spec
        storage = str((spec_path.resolve().parent / storage).resolve())
    return PipelineSpec(spec_path.resolve(), str(data["name"]), storage,
                        data.get("catalog"), data.get("database", data.get("schema")),
                        dict(conf), libraries)
