"""Pictures of dataflows: the Graphviz source, rendering, and ``strata graph``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strata import ALL, Dataflow, Input, Multicast, State
from strata.apps.urlcount import urlcount_dataflow
from strata.cli import app
from strata.graph import back_edges, describe_key, render, routing_kind, to_dot
from strata.model.errors import StrataError
from strata.pipeline import load_dataflow

PIPELINES = Path(__file__).parent / "pipelines"
CYCLE = PIPELINES / "cycle_pipeline.py"
URLCOUNT = PIPELINES / "urlcount_pipeline.py"
HAS_DOT = shutil.which("dot") is not None

runner = CliRunner()


@pytest.fixture(scope="module")
def cycle() -> Dataflow:
    return load_dataflow(str(CYCLE))


def edges_of(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if "->" in line]


def test_source_names_every_stage_and_flow(cycle):
    src = to_dot(cycle).source
    for name in [*cycle.stages, *cycle.flows]:
        assert name in src, name


def test_stateful_stage_has_double_border_and_state_loop():
    src = to_dot(urlcount_dataflow()).source
    (count,) = [x for x in src.splitlines() if "<B>count</B>" in x and "->" not in x]
    assert "peripheries=2" in count and "state: inner, by url" in count
    assert any("stage0 -> stage0" in e and "state" in e for e in edges_of(src))
    assert "shape=ellipse" in src and "<B>urls</B>" in src  # external input
    assert "shape=cylinder" in src and "<B>counts</B>" in src  # terminal flow


def test_cycle_loopback_broadcast_and_recordwise(cycle):
    src = to_dot(cycle).source
    edges = edges_of(src)
    ids = {n: f"stage{i}" for i, n in enumerate(cycle.stages)}
    (messages,) = [e for e in edges if "<B>messages</B>" in e]
    assert messages.startswith(f"{ids['propagate']} -> {ids['propagate']}")
    assert "style=dashed" in messages and "blue" in messages
    (updates,) = [e for e in edges if "<B>updates</B>" in e]
    assert updates.startswith(f"{ids['collect']} -> {ids['propagate']}")
    assert "red" in updates and "constraint=false" in updates and "order label" in updates
    (changes,) = [e for e in edges if "<B>changes</B>" in e]
    assert "dashed" not in changes and "by node" in changes
    (params,) = [e for e in edges if "everyone()" in e]
    assert "broadcast" in params and "penwidth=2.5" in params
    assert "record-wise, fused into propagate" in src
    assert "legend" not in to_dot(cycle, legend=False).source


def test_back_edges(cycle):
    assert back_edges(cycle) == {("collect", "propagate")}
    assert back_edges(urlcount_dataflow()) == set()


def test_describe_and_routing_kind():
    def everyone(r):
        return ALL

    def relay(r):
        return Multicast(r["to"])

    assert describe_key("url") == "url"
    assert describe_key(["a", "b"]) == "(a, b)"
    assert describe_key(everyone) == "everyone()"
    assert describe_key(lambda r: r) == "λ"
    assert describe_key(None) is None
    assert routing_kind(everyone) == "broadcast"
    assert routing_kind(relay) == "multicast"
    assert routing_kind(lambda r: r["k"]) is None
    assert routing_kind("url") is None


def test_names_needing_quotes_and_escapes():
    df = Dataflow("odd <names> & co")
    src = df.source("in-put", "k string")
    df.stage("a stage <1>", lambda k, st, xs, *, out: None, inputs=[Input(src, route_by="k")],
             outputs={"out-put": "k string"}, state=State("k string", route_by="k"))
    text = to_dot(df).source
    assert "a stage &lt;1&gt;" in text and "odd &lt;names&gt; &amp; co" in text


def test_render_dot_needs_no_binary(tmp_path, monkeypatch, cycle):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    out = render(cycle, tmp_path / "g.dot")
    assert out.read_text().startswith("// strata dataflow components")
    with pytest.raises(StrataError, match="apt-get install graphviz"):
        render(cycle, tmp_path / "g.png")
    assert not (tmp_path / "g.png").exists()


def test_render_rejects_unknown_suffix(tmp_path, cycle):
    with pytest.raises(StrataError, match="use a file ending in .dot"):
        render(cycle, tmp_path / "g.gif")


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz `dot` is not installed (apt-get install "
                                         "graphviz)")
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_render_binary_formats(tmp_path, cycle, suffix, magic):
    out = render(cycle, tmp_path / f"g{suffix}")
    assert out.read_bytes().startswith(magic)


def test_cli_graph_dot(tmp_path):
    out = tmp_path / "cycle.dot"
    result = runner.invoke(app, ["graph", str(CYCLE), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stdout and "3 stages, 7 flows" in result.stdout
    text = out.read_text()
    df = load_dataflow(str(CYCLE))
    for name in [*df.stages, *df.flows]:
        assert name in text


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz `dot` is not installed (apt-get install "
                                         "graphviz)")
def test_cli_graph_png(tmp_path):
    out = tmp_path / "urlcount.png"
    result = runner.invoke(app, ["graph", str(URLCOUNT), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 1000


def test_cli_graph_errors(tmp_path):
    result = runner.invoke(app, ["graph", str(CYCLE), "--out", str(tmp_path / "x.gif")])
    assert result.exit_code == 1 and "cannot tell the picture format" in result.stderr
    result = runner.invoke(app, ["graph", str(CYCLE), "--out", str(tmp_path / "no" / "x.dot")])
    assert result.exit_code == 1 and "does not exist" in result.stderr
