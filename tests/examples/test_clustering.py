"""examples/clustering: incremental clustering coefficients equal networkx's after every
increment, using one multicast message per changed node."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import networkx as nx

from strata.controller import Controller
from strata.pipeline import load_dataflow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clustering"


def _generator():
    spec = importlib.util.spec_from_file_location("clustering_generate", EXAMPLE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator_is_deterministic_and_writes_jsonl(tmp_path):
    gen = _generator()
    incs = gen.generate_increments(increments=3, size=40, seed=3)
    assert incs == gen.generate_increments(increments=3, size=40, seed=3)
    assert incs != gen.generate_increments(increments=3, size=40, seed=4)
    edges = [frozenset((r["src"], r["dst"])) for inc in incs for r in inc]
    assert len(edges) == len(set(edges)) and all(len(e) == 2 for e in edges)  # simple graph
    assert all(38 <= len(inc) <= 45 for inc in incs)
    paths = gen.write_increments(tmp_path, incs)
    assert [p.name for p in paths] == ["edges-0001.jsonl", "edges-0002.jsonl", "edges-0003.jsonl"]
    assert [json.loads(line) for line in paths[1].read_text().splitlines()] == incs[1]


def test_coefficients_match_networkx_after_every_increment(spark, tmp_path):
    increments = _generator().generate_increments(increments=5, size=80, seed=11)
    df = load_dataflow(str(EXAMPLE / "pipeline.py"))
    graph = nx.Graph()
    # one increment per run, then two queued together: the middle epoch of that run reads
    # new edges and the previous epoch's messages at once (Figure 7's runnable-on-any)
    rounds = [increments[:1], increments[1:2], increments[2:3], increments[3:]]
    with Controller(tmp_path / "home", df, spark=spark, num_partitions=2) as c:
        for i, batch in enumerate(rounds, 1):
            for edges in batch:
                c.ingest("edges", edges)
            reports = c.run()
            for edges in batch:
                graph.add_edges_from((e["src"], e["dst"]) for e in edges)
            expected = nx.clustering(graph)

            # per increment one epoch for the edges (adjacency multicast out), and one more
            # for the last messages (coefficients); it writes no adjacency, so the loopback
            # quiesces and the run stops by itself
            assert len(reports) == len(batch) + 1, i
            assert [r.records_in["edges"] for r in reports] == [len(e) for e in batch] + [0]
            assert reports[0].records_in["adjacency"] == 0
            assert not reports[-1].records_out.get("adjacency")
            # one adjacency record per node whose list grew, not one per neighbour
            for edges, report in zip(batch, reports, strict=False):
                touched = {n for e in edges for n in (e["src"], e["dst"])}
                assert report.records_out["adjacency"] == len(touched), i

            latest: dict[int, float] = {}
            for rec in c.read_flow("coefficients").to_pylist():  # oldest increment first
                latest[rec["node"]] = rec["coef"]
            assert latest.keys() == expected.keys(), i
            wrong = {n: (latest[n], x) for n, x in expected.items() if abs(latest[n] - x) > 1e-9}
            assert not wrong, (i, wrong)

            state = {r["node"]: r for r in c.state_records("cluster")}
            assert state.keys() == expected.keys()
            assert all(set(state[n]["adj"]) == set(graph[n]) for n in graph)
            assert all(abs(state[n]["coef"] - expected[n]) <= 1e-9 for n in graph)
    assert graph.number_of_edges() >= 400 and nx.average_clustering(graph) > 0.2
