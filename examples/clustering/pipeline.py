"""Clustering coefficients of an evolving undirected graph (CBP paper, section 3.1.1).

New edges ``{src, dst}`` arrive in increments (undirected, no deletions). For a node with
``N`` neighbours and ``E`` edges among them the clustering coefficient is
``2E / (N (N - 1))`` (0 when ``N < 2``). One stateful stage keyed by node keeps, per node,
its adjacency list and what it knows of its neighbours' adjacency lists (the
"friends-of-friends" relation), and recomputes the coefficient when that changes::

    edges ─(route: {src, dst})─► cluster (state: adj + fof, inner) ─► coefficients
                                  ▲    └─ adjacency (loopback) ─┐     {node, coef}
                                  └──(route: Multicast(node))───┘

- ``edges`` is routed to *both* endpoints (``route_by`` returns a set of keys), so each
  node sees its new neighbours.
- A node whose adjacency grew writes **one** ``adjacency`` record (its full, sorted
  neighbour list) and, in the same epoch, ``associate``s every neighbour with the multicast
  address ``("nbhd", node)``. In the next epoch the record, routed to
  ``Multicast(("nbhd", node))``, reaches all of them: one copy per partition rather than one
  per neighbour (the paper's Figure 7 writes one FoF record per neighbour instead).
- Each receiver stores the list in its FoF map and recomputes its coefficient; a record goes
  to ``coefficients`` only when the value changed. A node gaining a neighbour always hears
  from it (the neighbour's list grew too), so every affected coefficient is recomputed in
  the epoch after the edges arrive.
- State grouping is *inner*: an epoch reads only the state of nodes with new edges or with
  messages. Runnability is ``runnable_any`` (edges or messages); an epoch without new
  adjacency writes no messages, so the loop stops by itself.

Run with ``strata run examples/clustering/pipeline.py --home DIR`` (see README.md).
``build_dataflow(multicast=False)`` builds the paper's Figure 7 form instead (one
``adjacency`` record per neighbour, routed to it) and ``grouping="outer"`` an outer-grouped
state; ``benchmarks/clustering.py`` compares the four combinations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from strata import Dataflow, Emitter, Input, Multicast, State
from strata.model.runnability import runnable_any

EDGES_SCHEMA = "src bigint, dst bigint"
# a node's full neighbour list, multicast to its neighbourhood
ADJACENCY_SCHEMA = "src bigint, nbrs array<bigint>"
# the same, one copy per neighbour ``dst`` (without multicast)
ADJACENCY_TO_SCHEMA = "src bigint, dst bigint, nbrs array<bigint>"
COEF_SCHEMA = "node bigint, coef double"
# adj: own neighbours; fof: neighbour -> that neighbour's neighbours; coef: last emitted
NODE_SCHEMA = "node bigint, adj array<bigint>, fof map<bigint, array<bigint>>, coef double"


def both_endpoints(edge: dict) -> set[int]:
    """An undirected edge concerns both of its nodes."""
    return {edge["src"], edge["dst"]}


def neighbourhood(msg: dict) -> Multicast:
    """An adjacency record goes to every node its sender associated with its neighbourhood."""
    return Multicast(("nbhd", msg["src"]))


def coefficient(adj: set[int], fof: dict[int, list[int]]) -> float:
    """``2E / (N (N-1))``: each edge among the neighbours is seen from both of its ends."""
    n = len(adj)
    if n < 2:
        return 0.0
    twice_e = sum(len(adj.intersection(fof.get(v, ()))) for v in adj)
    return twice_e / (n * (n - 1))


def cluster(node: int, state: Iterator[dict], edges: Iterator[dict],
            adjacency: Iterator[dict], *, out: Emitter) -> None:
    """Figure 7: add new edges, tell the neighbourhood, absorb what neighbours told us."""
    _cluster(node, state, edges, adjacency, out, multicast=True)


def cluster_per_neighbour(node: int, state: Iterator[dict], edges: Iterator[dict],
                          adjacency: Iterator[dict], *, out: Emitter) -> None:
    """:func:`cluster` without multicast: one adjacency record per neighbour (Figure 7)."""
    _cluster(node, state, edges, adjacency, out, multicast=False)


def _cluster(node: int, state: Iterator[dict], edges: Iterator[dict],
             adjacency: Iterator[dict], out: Emitter, multicast: bool) -> None:
    prev = next(state, None)
    adj = set(prev["adj"]) if prev else set()
    fof = dict(prev["fof"]) if prev else {}  # a map column reads back as (key, value) pairs
    coef = prev["coef"] if prev else None

    added = {e["dst"] if e["src"] == node else e["src"] for e in edges} - adj - {node}
    if added:
        adj |= added
        nbrs = sorted(adj)
        if multicast:
            for neighbour in nbrs:  # old and new neighbours all hear the full list next epoch
                out.associate(neighbour, ("nbhd", node))
            out.write("adjacency", {"src": node, "nbrs": nbrs})
        else:
            for neighbour in nbrs:
                out.write("adjacency", {"src": node, "dst": neighbour, "nbrs": nbrs})

    heard = False
    for msg in adjacency:
        fof[msg["src"]] = msg["nbrs"]
        heard = True
    if heard:  # neighbours' lists (and ours, via the new neighbours' replies) are current
        new = coefficient(adj, fof)
        if new != coef:
            coef = new
            out.write("coefficients", {"node": node, "coef": coef})

    out.state({"node": node, "adj": sorted(adj), "fof": fof, "coef": coef})


def build_dataflow(multicast: bool = True,
                   grouping: Literal["inner", "outer"] = "inner") -> Dataflow:
    """The clustering dataflow: as described above by default; ``multicast=False`` sends one
    adjacency record per neighbour instead, ``grouping`` sets the state's grouping."""
    df = Dataflow("clustering")
    edges = df.source("edges", EDGES_SCHEMA)
    if multicast:
        adjacency = df.flow("adjacency", ADJACENCY_SCHEMA)
        translate, route = cluster, neighbourhood
    else:
        adjacency = df.flow("adjacency", ADJACENCY_TO_SCHEMA)
        translate, route = cluster_per_neighbour, "dst"
    df.stage(
        "cluster", translate,
        inputs=[Input(edges, route_by=both_endpoints),
                Input(adjacency, route_by=route)],
        outputs=[adjacency, df.flow("coefficients", COEF_SCHEMA)],
        state=State(NODE_SCHEMA, route_by="node", grouping=grouping),
        runnable=runnable_any,
    )
    return df
