"""The README's Python snippets run as written (paths pointed at a temporary home)."""

from __future__ import annotations

import re
from pathlib import Path

import strata

README = Path(__file__).parent.parent / "README.md"
SAMPLE = Path(strata.__file__).parent / "data" / "sample" / "urls"


def test_the_readme_python_snippets_run_in_order(spark, tmp_path, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3
    namespace: dict = {}
    for block in blocks:
        code = (block.replace('"/data/urls"', repr(str(tmp_path / "home")))
                .replace('"day-1.jsonl"', repr(str(SAMPLE / "day-1.jsonl"))))
        exec(compile(code, str(README), "exec"), namespace)
    printed = capsys.readouterr().out.split()
    assert printed[:3] == ["count", "1", "{'urls':"]  # the run loop printed its epoch
    assert "revenue" in namespace["df"].stages


def test_the_demo_matches_recomputation_and_explains_its_table(spark, tmp_path, capsys):
    from strata.demo import main

    assert main(["--home", str(tmp_path / "demo")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "counts match a full recomputation" in out
    assert "a compacting epoch can read more than the state's total size" in out
