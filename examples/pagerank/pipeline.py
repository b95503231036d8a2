"""Incremental PageRank of an evolving web graph (CBP paper, section 3.1.2, Figures 8-9).

Links ``{src, dst}`` are inserted in increments (the first increment is the initial graph).
After every increment the dataflow writes the PageRank of every page, ``{node, rank}`` on
``ranks``, with networkx's conventions: damping ``ALPHA = 0.85``, uniform teleport, and the
rank of dangling pages (no out-links) spread uniformly over all pages; ranks sum to 1.

**Method** (Desikan et al., 2005, as used by CBP). Write a page's rank as ``rank(v) =
share * score(v)`` with ``score(v) = 1 + received(v)`` and ``received(v) = sum over links
u -> v of ALPHA * score(u) / outdeg(u)``. The common factor ``share = ((1 - ALPHA) +
ALPHA * D) / N`` is what every page gets by teleport plus its part of the dangling mass
``D``; it equals ``1 / sum(score)``. Scores depend only on a page's ancestors, so inserted
links change the scores of their sources' descendants only: the *affected subgraph* G.
Every other page, the supernode ``W - G``, keeps its score exactly, and its contributions
into G stay constant: they are already in the ``received`` sums of G's pages. Only G
iterates; the rest is rescaled by the new ``share`` when the ranks are published. G is
found by *propagation of change* rather than by a separate reachability pass: a page joins
G when a contribution it receives changes, and passes its own change on only once its
score moved by at least ``threshold`` since it last did (the threshold on rank change).
The remainder stays in state (``score - pushed``) and goes out with a later change, so
nothing is lost and the ranks converge to the exact PageRank.

Two stages, one cycle::

              ┌─ shares (route dst) ────────┐
              ├─ changes (route CONTROL) ───┤  loopbacks: one epoch per iteration
              ├─ converged (route ALL) ─────┤
              ▼                             │
    links ─► rank (inner state: pages, control) ─ changes (route node % buckets) ─┐
              ▲        │                                                          ▼
              │        ├─ uniform (route ALL) ─────────────────────────────► publish ─► ranks
              │        └─► rounds (a summary per round)                   (outer state)
              └──────────── published (route CONTROL) ◄───────────────────────┘

- ``rank`` (inner state) keeps one record per page ``{node, out, received, pushed}`` and one
  for the group ``CONTROL`` (the graph's totals). A page whose score moved by ``threshold``
  (or that gained out-links) writes to ``shares`` the change of the contribution each
  out-neighbour receives from it; each page called writes its change of score, of dangling
  score and the mass it pushed to ``changes``, which goes to ``CONTROL`` (and to ``publish``).
- ``CONTROL`` sums the changes: node count ``N``, ``sum(score)`` and the dangling pages'
  ``sum(score)``. When the mass pushed in an epoch falls below ``tolerance * N`` it writes a
  record to ``converged``, routed to ``ALL``: in the next epoch every page still receiving
  shares absorbs them without passing them on (they stay in ``score - pushed``). When an
  epoch pushed nothing, it writes the round's ``uniform`` share — the dangling mass spread
  over all pages plus the teleport — to ``publish``, routed to ``ALL`` (one copy per
  partition).
- ``publish`` (outer state ``{bucket, node, score, round}``, grouped by ``node % buckets``)
  adds the round's score changes, writes every page's ``rank = share * score`` to ``ranks``
  and a partial summary per bucket to ``published``; ``CONTROL`` turns those into one
  ``rounds`` record ``{round, pages, touched, epochs, pushed, dangling_mass, share,
  rank_sum}`` (``touched``: pages the round recomputed).

**Phases by runnability.** ``rank``'s rule :func:`phases` reads one phase's input only once
the previous phase's input is gone (CBP's "exclusively reads each successive phase's input
after the prior input becomes empty"): ``converged`` first (settle: absorb, stop
propagating), then ``shares`` and ``changes`` (iterate), then ``published`` (the round is
out), and ``links`` (the next round) only when the previous round is published. A round is
one epoch for the links, the iterations, one settle epoch, one for the totals, then
``publish`` and the epoch that reads its summary (together with the next links, if queued).
``publish``'s rule :func:`with_uniform` runs it once per round. ``publish`` feeds back
into ``rank``, so both are one cycle and the empty increments ``rank`` writes to it in
other epochs are not delivered (a cycle stops when it goes quiet).

Run with ``strata run examples/pagerank/pipeline.py --home DIR`` (see README.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

from strata import ALL, All, Dataflow, Emitter, Input, State
from strata.model.runnability import Decision

ALPHA = 0.85  # damping
THRESHOLD = 0.005  # a page passes its change on once its score moved this much
TOLERANCE = 0.001  # converged when the mass pushed in an epoch < TOLERANCE * pages
BUCKETS = 8  # groups of ``publish``
MAX_EPOCHS = 200  # settle a round after this many epochs even if not converged
CONTROL = "control"  # the key of rank's control group (pages are integers)

LINKS_SCHEMA = "src bigint, dst bigint"
SHARES_SCHEMA = "dst bigint, delta double"  # change of what dst receives from one in-link
# per page and epoch: change of score, of dangling score, mass pushed, new page?
CHANGES_SCHEMA = "node bigint, score double, dangling double, pushed double, new boolean"
CONVERGED_SCHEMA = "round bigint, pushed double"
UNIFORM_SCHEMA = "round bigint, pages bigint, dangling_mass double, share double"
PUBLISHED_SCHEMA = "round bigint, bucket bigint, pages bigint, touched bigint, rank_sum double"
ROUNDS_SCHEMA = ("round bigint, pages bigint, touched bigint, epochs bigint, pushed double, "
                 "dangling_mass double, share double, rank_sum double")
RANKS_SCHEMA = "node bigint, rank double"
TOTALS = ("struct<round:bigint, pages:bigint, total:double, dangling:double, epochs:bigint, "
          "pushed:double>")
# a page: node, out-links, contributions received, score last passed on; control: totals
RANK_STATE = f"node bigint, out array<bigint>, received double, pushed double, control {TOTALS}"
PUBLISH_STATE = "bucket bigint, node bigint, score double, round bigint"


# -- routing --------------------------------------------------------------------------------------
def endpoints(link: dict) -> set[int]:
    """A link concerns its source (new out-link) and its target (a new page, maybe)."""
    return {link["src"], link["dst"]}


def to_control(record: dict) -> str:
    return CONTROL


def everyone(record: dict) -> All:
    return ALL


def rank_key(record: dict) -> Any:
    """State records: pages by node, the totals under CONTROL."""
    return CONTROL if record["node"] is None else record["node"]


# -- rank ------------------------------------------------------------------------------------
def rank(key: Any, state: Iterator[dict], links: Iterator[dict], shares: Iterator[dict],
         changes: Iterator[dict], converged: Iterator[dict], published: Iterator[dict], *,
         out: Emitter, threshold: float = THRESHOLD, tolerance: float = TOLERANCE,
         max_epochs: int = MAX_EPOCHS) -> None:
    """Figure 9's per-node event handler: a page, or the control group."""
    prev = next(state, None)
    if key == CONTROL:
        control(prev, changes, converged, published, out, tolerance, max_epochs)
    else:
        page(key, prev, links, shares, converged, out, threshold)


def page(node: int, prev: dict | None, links: Iterator[dict], shares: Iterator[dict],
         converged: Iterator[dict], out: Emitter, threshold: float) -> None:
    """Add new out-links, absorb changed contributions, pass a large enough change on."""
    settle = next(converged, None) is not None  # broadcast: the round has converged
    old_out = list(prev["out"]) if prev else []
    fresh = sorted({r["dst"] for r in links if r["src"] == node}.difference(old_out))
    links_out = old_out + fresh
    received = (prev["received"] if prev else 0.0) + sum(m["delta"] for m in shares)
    score, old_score = 1.0 + received, (1.0 + prev["received"]) if prev else 0.0
    pushed = prev["pushed"] if prev else 0.0
    mass = 0.0
    if links_out and not settle and (fresh or abs(score - pushed) >= threshold):
        share = ALPHA * score / len(links_out)
        delta = share - (ALPHA * pushed / len(old_out) if old_out else 0.0)
        if delta:
            for v in old_out:
                out.write("shares", {"dst": v, "delta": delta})
        for v in fresh:
            out.write("shares", {"dst": v, "delta": share})
        mass, pushed = abs(delta) * len(old_out) + share * len(fresh), score
    was_dangling = prev is not None and not old_out
    out.write("changes", {
        "node": node, "score": score - old_score, "pushed": mass, "new": prev is None,
        "dangling": (0.0 if links_out else score) - (old_score if was_dangling else 0.0)})
    out.state({"node": node, "out": links_out, "received": received, "pushed": pushed,
               "control": None})


def control(prev: dict | None, changes: Iterator[dict], converged: Iterator[dict],
            published: Iterator[dict], out: Emitter, tolerance: float, max_epochs: int) -> None:
    """Keep the totals; decide convergence; publish the uniform share; write the summary."""
    t = dict(prev["control"]) if prev else {"round": 0, "pages": 0, "total": 0.0,
                                            "dangling": 0.0, "epochs": 1, "pushed": 0.0}
    settling = next(converged, None) is not None
    acks = list(published)
    if acks:  # the round is published: summarize it, start counting the next one
        out.write("rounds", {
            "round": t["round"], "pages": sum(a["pages"] for a in acks),
            "touched": sum(a["touched"] for a in acks), "epochs": t["epochs"],
            "pushed": t["pushed"], "dangling_mass": t["dangling"] / t["total"],
            "share": 1.0 / t["total"], "rank_sum": sum(a["rank_sum"] for a in acks)})
        t["epochs"], t["pushed"] = 1, 0.0
    pushed, n = 0.0, 0
    for c in changes:
        n += 1
        t["pages"] += c["new"]
        t["total"] += c["score"]
        t["dangling"] += c["dangling"]
        pushed += c["pushed"]
    if n:  # an epoch of the round: the changes of the previous one
        t["epochs"] += 1
        t["pushed"] += pushed
        if pushed == 0.0:  # nothing in flight: totals are final
            # share = 1 / sum(score) = ((1 - ALPHA) + ALPHA * dangling_mass) / pages
            t["round"] += 1
            out.write("uniform", {"round": t["round"], "pages": t["pages"],
                                  "dangling_mass": t["dangling"] / t["total"],
                                  "share": 1.0 / t["total"]})
        elif not settling and (pushed < tolerance * t["pages"] or t["epochs"] >= max_epochs):
            out.write("converged", {"round": t["round"] + 1, "pushed": pushed})
    out.state({"node": None, "out": None, "received": None, "pushed": None, "control": t})


def phases(keys: dict[str, list], state: dict | None) -> Decision:
    """Runnability of ``rank``: one phase's input at a time, in the order settle, iterate,
    publish, next round; ``links`` only when the previous round is published (or made no
    changes at all). Its state is the current phase."""
    phase = (state or {}).get("phase", "idle")
    waiting = {f for f, ks in keys.items() if ks}
    if "converged" in waiting:
        take, phase = waiting & {"converged", "shares", "changes"}, "settle"
    elif waiting & {"shares", "changes"}:
        take, phase = waiting & {"shares", "changes"}, "iterate"
    elif "published" in waiting:
        take = {"published"} | (waiting & {"links"})
        phase = "links" if "links" in take else "idle"
    elif "links" in waiting and phase in ("idle", "links"):
        take, phase = {"links"}, "links"
    else:
        return set(), set(), state
    reads = {f: 1 if f == "links" else len(keys[f]) for f in take}
    return reads, reads, {"phase": phase}


# -- publish ----------------------------------------------------------------------------------
def publish(bucket: int, state: Iterator[dict], changes: Iterator[dict],
            uniform: Iterator[dict], *, out: Emitter) -> None:
    """Rescale every page of the bucket by the round's uniform share."""
    u = next(uniform)  # broadcast to every bucket
    pages = {r["node"]: [r["score"], r["round"]] for r in state}
    for c in changes:
        p = pages.setdefault(c["node"], [0.0, u["round"]])
        p[0] += c["score"]
        p[1] = u["round"]
    rank_sum = 0.0
    for node in sorted(pages):
        score, rnd = pages[node]
        rank_sum += score * u["share"]
        out.write("ranks", {"node": node, "rank": score * u["share"]})
        out.state({"bucket": bucket, "node": node, "score": score, "round": rnd})
    out.write("published", {
        "round": u["round"], "bucket": bucket, "pages": len(pages), "rank_sum": rank_sum,
        "touched": sum(1 for _, rnd in pages.values() if rnd == u["round"])})


def with_uniform(keys: dict[str, list], state: Any) -> Decision:
    """Runnability of ``publish``: once per round, when its uniform share arrives, with the
    score changes written before it (framing keys are ``rank``'s epochs)."""
    uniform = keys.get("uniform") or []
    if not uniform:
        return set(), set(), state
    before = sum(1 for k in keys.get("changes") or [] if k < uniform[0])
    reads = {"uniform": 1, "changes": before}
    return reads, reads, state


# -- the dataflow ----------------------------------------------------------------------------
def build_dataflow(threshold: float = THRESHOLD, tolerance: float = TOLERANCE,
                   buckets: int = BUCKETS, max_epochs: int = MAX_EPOCHS) -> Dataflow:
    """The two-stage incremental PageRank dataflow (see the module docstring)."""

    def bucket_of(record: dict) -> int:
        return record["node"] % buckets

    df = Dataflow("pagerank")
    links = df.source("links", LINKS_SCHEMA)
    shares = df.flow("shares", SHARES_SCHEMA)
    changes = df.flow("changes", CHANGES_SCHEMA)
    converged = df.flow("converged", CONVERGED_SCHEMA)
    published = df.flow("published", PUBLISHED_SCHEMA)
    uniform = df.flow("uniform", UNIFORM_SCHEMA)
    df.stage(
        "rank", partial(rank, threshold=threshold, tolerance=tolerance, max_epochs=max_epochs),
        inputs=[Input(links, route_by=endpoints), Input(shares, route_by="dst"),
                Input(changes, route_by=to_control), Input(converged, route_by=everyone),
                Input(published, route_by=to_control)],
        outputs=[shares, changes, converged, uniform, df.flow("rounds", ROUNDS_SCHEMA)],
        state=State(RANK_STATE, route_by=rank_key, grouping="inner"),
        runnable=phases,
    )
    df.stage(
        "publish", publish,
        inputs=[Input(changes, route_by=bucket_of),
                Input(uniform, route_by=everyone)],
        outputs=[published, df.flow("ranks", RANKS_SCHEMA)],
        state=State(PUBLISH_STATE, route_by="bucket"),
        runnable=with_uniform,
    )
    return df
