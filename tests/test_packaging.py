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
