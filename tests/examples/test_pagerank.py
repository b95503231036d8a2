"""examples/pagerank: incremental PageRank stays within L1 1e-3 of networkx after every
round of link insertions, recomputing only part of the graph after the first."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from examples.pagerank.generate import generate_increments, write_increments
from examples.pagerank.pipeline import ALPHA
from strata.controller import Controller
from strata.pipeline import load_dataflow

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pagerank" / "pipeline.py"
MAX_L1 = 1e-3


def test_generator_is_deterministic_and_writes_jsonl(tmp_path):
    incs = generate_increments(initial_nodes=100, increments=3, size=20, seed=3)
    assert incs == generate_increments(initial_nodes=100, increments=3, size=20, seed=3)
    assert incs != generate_increments(initial_nodes=100, increments=3, size=20, seed=4)
    links = [(r["src"], r["dst"]) for inc in incs for r in inc]
    assert len(links) == len(set(links)) and all(s != d for s, d in links)  # a simple digraph
    graph = nx.DiGraph(links[: len(incs[0])])
    assert graph.number_of_nodes() == 100
    assert any(graph.out_degree(v) == 0 for v in graph)  # dangling pages
    assert [len(inc) for inc in incs[1:]] == [20, 20, 20]
    later = {p for inc in incs[1:] for r in inc for p in (r["src"], r["dst"])}
    assert later - set(graph)  # increments bring new pages too
    paths = write_increments(tmp_path, incs)
    assert [p.name for p in paths] == [f"links-000{i}.jsonl" for i in range(1, 5)]
    assert [json.loads(line) for line in paths[2].read_text().splitlines()] == incs[2]


def run_rounds(c: Controller, increments: list[list[dict]],
               runs: list[list[int]]) -> list[dict]:
    """Ingest the increments of each run (``runs``: indexes), run until idle, and check every
    round against networkx and the state's invariants. Returns per round the L1 error, the
    fraction of pages touched and the round's epochs (from the ``rounds`` summary)."""
    graphs: list[nx.DiGraph] = []
    for links in increments:
        graph = graphs[-1].copy() if graphs else nx.DiGraph()
        graph.add_edges_from((x["src"], x["dst"]) for x in links)
        graphs.append(graph)
    for run in runs:
        for i in run:
            c.ingest("links", increments[i])
        reports = c.run()
        graph = graphs[run[-1]]

        # phases: links are read only when nothing of the previous round is waiting, one
        # round after the other; one publish per round, whose summary rank reads next
        rank_in = [x.records_in for x in reports if x.stage == "rank"]
        assert [x["links"] for x in rank_in if x["links"]] == [len(increments[i]) for i in run]
        assert all(not (x["shares"] or x["changes"] or x["converged"])
                   for x in rank_in if x["links"])
        stages = [x.stage for x in reports]
        assert stages.count("publish") == len(run) and stages[-2:] == ["publish", "rank"]
        assert all(stages[i + 1] == "rank" and reports[i + 1].records_in["published"]
                   for i, s in enumerate(stages) if s == "publish")

        # rank's state: the graph's out-links; a page's `received` is exactly what its
        # in-neighbours last passed on (so the unaffected supernode's part stays right)
        records = c.state_records("rank")
        state = {x["node"]: x for x in records if x["node"] is not None}
        totals = next(x["control"] for x in records if x["node"] is None)
        assert state.keys() == set(graph) and totals["pages"] == len(graph)
        assert all(sorted(state[v]["out"]) == sorted(graph.successors(v)) for v in graph)
        for v in graph:
            inflow = sum(ALPHA * state[u]["pushed"] / len(state[u]["out"])
                         for u in graph.predecessors(v))
            assert state[v]["received"] == pytest.approx(inflow, abs=1e-9), v

        # the last round's touched pages, as publish's state records them
        summary = c.read_flow("rounds").to_pylist()[-1]
        published = c.state_records("publish")
        assert len(published) == len(graph)
        assert summary["touched"] == sum(1 for p in published if p["round"] == run[-1] + 1)

    # every round's answer: its `ranks` increment has every page once, summing to 1
    measured = []
    summaries = c.read_flow("rounds").to_pylist()
    answers = [c.read_flow("ranks", e).to_pylist() for e, _ in c.stored_increments("ranks")]
    assert len(summaries) == len(answers) == len(increments)
    for r, (graph, answer, summary) in enumerate(zip(graphs, answers, summaries, strict=True)):
        ranks = {x["node"]: x["rank"] for x in answer}
        expected = nx.pagerank(graph, alpha=ALPHA, tol=1e-10, max_iter=1000)
        assert ranks.keys() == expected.keys(), r
        l1 = sum(abs(ranks[v] - expected[v]) for v in graph)
        assert l1 <= MAX_L1, (r, l1)
        assert sum(ranks.values()) == pytest.approx(1.0, abs=1e-9)
        assert (summary["round"], summary["pages"]) == (r + 1, len(graph))
        assert summary["rank_sum"] == pytest.approx(1.0, abs=1e-9)
        measured.append({"l1": l1, "touched": summary["touched"] / summary["pages"],
                         "epochs": summary["epochs"]})
    return measured


def test_ranks_match_networkx_after_every_round(spark, tmp_path):
    increments = generate_increments(initial_nodes=150, increments=2, size=15, seed=7)
    with Controller(tmp_path / "home", load_dataflow(str(PIPELINE)), spark=spark,
                    num_partitions=2) as c:
        # the initial graph alone, then two rounds queued together
        measured = run_rounds(c, increments, [[0], [1, 2]])
    print("direct", measured)
    assert measured[0]["touched"] == 1.0  # the initial graph: everything is computed
    assert all(m["touched"] < 1.0 for m in measured[1:])  # later rounds: part of it


@pytest.mark.slow  # blackbox mode against the reference: test_properties' modes-agree tests
def test_blackbox_mode_matches_networkx(spark, tmp_path):
    increments = generate_increments(initial_nodes=50, increments=1, size=10, seed=6)
    with Controller(tmp_path / "home", load_dataflow(str(PIPELINE)), spark=spark,
                    num_partitions=2, mode="blackbox") as c:
        measured = run_rounds(c, increments, [[0], [1]])
    print("blackbox", measured)
    assert measured[-1]["touched"] < 1.0
