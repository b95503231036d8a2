"""Shipping a pipeline's code: a multi-module pipeline runs from any directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from strata.physical.shipping import source_root, zip_root

HERE = Path(__file__).parent
PIPELINE = HERE / "multimodule" / "pipeline.py"
STRATA = [sys.executable, "-m", "strata.cli"]
WORDS = ["Apple", "pear", " apple", "Fig", "pear", "APPLE"]


def strata(*args: object, cwd: str = "/") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "STRATA_MASTER": "local[2]",
           "STRATA_DRIVER_MEMORY": "1g"}
    env.pop("PYTHONPATH", None)
    return subprocess.run([*STRATA, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.spark  # runs strata on Spark in a subprocess
def test_a_multi_module_pipeline_runs_from_another_directory(tmp_path):
    home, data = tmp_path / "home", tmp_path / "words.jsonl"
    data.write_text("".join(json.dumps({"word": w}) + "\n" for w in WORDS))
    first = strata("run", PIPELINE, "--home", home)
    assert first.returncode == 0, first.stderr
    assert strata("ingest", "words", data, "--home", home).returncode == 0
    result = strata("run", PIPELINE, "--home", home, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["epochs"] == 1
    shown = strata("show", "count.state", "--home", home, "--format", "jsonl")
    counts = {r["word"]: r["count"] for r in map(json.loads, shown.stdout.splitlines())}
    assert counts == Counter(w.strip().lower() for w in WORDS)


@pytest.mark.spark  # runs strata on Spark in a subprocess
def test_py_files_ships_code_from_elsewhere(tmp_path):
    lib, pipe = tmp_path / "lib", tmp_path / "pipe"
    lib.mkdir(), pipe.mkdir()
    (lib / "shout.py").write_text("def loud(word):\n    return word.upper()\n")
    (pipe / "pipeline.py").write_text(
        "from shout import loud\n"
        "from strata.model import Dataflow, Input\n"
        "dataflow = Dataflow('loud')\n"
        "w = dataflow.source('words', 'word string')\n"
        "def up(word, words, *, out):\n"
        "    for r in words:\n"
        "        out.write('loud', {'word': loud(r['word'])})\n"
        "dataflow.stage('up', up, inputs=[Input(w, route_by='word')],\n"
        "               outputs={'loud': 'word string'})\n")
    home, data = tmp_path / "home", tmp_path / "words.jsonl"
    data.write_text('{"word": "hi"}\n{"word": "yo"}\n')
    args = ("run", pipe / "pipeline.py", "--home", home, "--py-files", lib)
    assert strata(*args).returncode == 0
    assert strata("ingest", "words", data, "--home", home).returncode == 0
    result = strata(*args)
    assert result.returncode == 0, result.stderr
    shown = strata("show", "loud", "--home", home, "--format", "jsonl")
    assert sorted(json.loads(x)["word"] for x in shown.stdout.splitlines()) == ["HI", "YO"]


def test_the_zip_holds_the_neighbours_and_packages_only(monkeypatch):
    monkeypatch.syspath_prepend(str(PIPELINE.parent))
    import helpers

    root = source_root(helpers)
    assert root is not None
    names = zipfile.ZipFile(zip_root(root)).namelist()
    assert {"pipeline.py", "helpers.py", "wordtools/__init__.py",
            "wordtools/counting.py"} <= set(names)
    assert not any("__pycache__" in n for n in names)


def test_a_package_module_ships_its_top_level_package():
    import tests.multimodule_pkg.inner.mod as mod

    root = source_root(mod)
    assert root is not None and root.package == "tests"
    names = zipfile.ZipFile(zip_root(root)).namelist()
    assert "tests/multimodule_pkg/inner/mod.py" in names and "tests/__init__.py" in names
