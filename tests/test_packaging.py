"""The distribution: a name of its own on PyPI (``strata`` and ``strata-cli`` are other
projects'), ``import strata`` and the ``strata`` command, sample data in the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_the_wheel_is_strata_spark_with_the_command_and_the_sample_data(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q",
                    "-w", str(tmp_path)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("*.whl"))
    assert wheel.name.startswith("strata_spark-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "strata/data/sample/urls/day-1.jsonl" in names and "strata/__init__.py" in names
    info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "strata = strata.cli:app" in zipfile.ZipFile(wheel).read(info).decode()
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "Name: strata-spark" in zipfile.ZipFile(wheel).read(metadata).decode()


def _requirements() -> list[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + project["optional-dependencies"]["test"]


def _pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_dependencies_are_ranges_that_both_constraints_files_satisfy():
    """pyproject.toml gives ranges a team's environment can meet; constraints.txt (the
    venv and CI) and constraints-oldest.txt (make test-oldest) pin versions inside them."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    requirements = [Requirement(r) for r in _requirements()]
    assert not [str(r) for r in requirements if any(s.operator == "==" for s in r.specifier)]
    for name in ("constraints.txt", "constraints-oldest.txt"):
        pins = {canonicalize_name(k): v for k, v in _pins(name).items()}
        for req in requirements:
            pinned = pins.get(canonicalize_name(req.name))
            if pinned is not None:
                assert req.specifier.contains(pinned, prereleases=True), (name, str(req), pinned)
        assert "pyspark" in pins
    assert _pins("constraints-oldest.txt")["pyspark"].startswith("4.0.")
