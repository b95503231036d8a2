"""The README's Python snippets run as written (paths pointed at a temporary home); the
docs explain and the results are data: docs/performance.md's results section is what
``benchmarks/render_performance.py`` renders, and no prose carries run dates, commit
hashes or load averages."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import strata

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
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



def _renderer():
    spec = importlib.util.spec_from_file_location(
        "render_performance", ROOT / "benchmarks" / "render_performance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_performance_results_section_is_the_renderers_output():
    render = _renderer()
    text = render.DOC.read_text()
    assert render.BEGIN in text and render.END in text
    assert render.rewrite(text, render.render()) == text, (
        "docs/performance.md is out of date: run benchmarks/render_performance.py")


def test_results_files_are_named_by_benchmark_and_rendered_as_recorded(tmp_path):
    # a benchmark's run on the standalone cluster is stored beside its local one
    stems = [p.stem.removesuffix("_cluster")
             for p in (ROOT / "benchmarks" / "results").glob("*.json")]
    assert stems and all((ROOT / "benchmarks" / f"{s}.py").exists() for s in stems), stems
    render = _renderer()
    (tmp_path / "old.json").write_text(json.dumps(
        {"summary": {"ratio": {"value": 2.5, "target": ">= 2", "met": True}}}))
    (tmp_path / "new.json").write_text(json.dumps(
        {"summary": {"speedup": {"value": 0.4, "target": ">= 1", "met": False}},
         "run": {"commit": "f" * 40, "date": "D", "machine": {"cores": 8},
                 "load_average_1m": {"start": 0.5, "end": 1.5}}}))
    new, old = render.render(tmp_path).split("### old")  # sorted by name: new first
    assert "| `ratio` | 2.5 | >= 2 | yes |" in old
    # no script old.py; no commit, date, machine or load: never invented
    assert old.count("not recorded") == 5
    assert "| `speedup` | 0.4 | >= 1 | no |" in new
    assert f"commit: {'f' * 40}" in new and "machine: 8 cores" in new
    assert "0.5 at the start, 1.5 at the end" in new


_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)"
_DATE = re.compile(rf"\b20\d\d-\d\d-\d\d\b|\b\d{{1,2}}(?:–\d{{1,2}})? {_MONTH}\b"
                   rf"|\b{_MONTH}\.? (?:\d{{1,2}}|20\d\d)\b")
# 7 to 40 hex digits with at least one digit and one letter, not inside a longer word
_HASH = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
_LOAD = re.compile(r"\bload averages?\b|\bload\s*[~≈]?\s*\d", re.I)


def _prose(path: Path) -> str:
    """A page without docs/performance.md's generated region, which is data."""
    text = path.read_text()
    render = _renderer()
    start, end = text.find(render.BEGIN), text.find(render.END)
    return text if start < 0 else text[:start] + text[end + len(render.END):]


def test_readme_is_short_and_no_prose_carries_dates_hashes_or_loads():
    assert len(README.read_text().splitlines()) <= 150
    found = []
    for path in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(_prose(path).splitlines(), 1):
            found += [f"{path.name}:{n}: {kind} {m.group(0)!r}"
                      for rx, kind in ((_DATE, "date"), (_HASH, "commit"), (_LOAD, "load"))
                      for m in rx.finditer(line)]
    assert not found, "run dates, commit hashes or loads belong in benchmarks/results/: " + (
        "; ".join(found))


def test_the_prose_check_catches_what_it_is_for():
    assert _DATE.search("the run of 29 Nov") and _DATE.search("on 2026-11-29")
    assert _DATE.search("Nov 2026") and _HASH.search("at dc6bd47, before")
    assert _LOAD.search("load 0.39 → 2.91") and _LOAD.search("1-minute load average")
    assert not _HASH.search("1000000 rows, decade, 0.419×, `f_abc1234`")
    assert not _LOAD.search("load shedding, loaded 5 files")
