"""A growing social graph, in increments of new friendships ``{src, dst}`` (JSON lines).

The graph grows like the Holme-Kim model (preferential attachment with triad formation),
which gives the heavy-tailed degrees and high clustering of real friendship networks:

- new members join and befriend ``m`` existing members: the first one chosen in proportion
  to degree ("popular people"), each further one, with probability ``p_triad``, a friend of
  the member just befriended (a friend of a friend), else again by degree;
- existing members also close triangles: a random member introduces two of its friends who
  are not yet friends (triadic closure), so old parts of the graph keep changing too.

Each increment holds about ``size`` new undirected edges, each written once (as
``{src, dst}`` with either orientation); no edge repeats an earlier one.

    python examples/clustering/generate.py --out DIR [--increments 4] [--size 100] [--seed 7]

writes ``DIR/edges-0001.jsonl`` … ``DIR/edges-000N.jsonl``. Tests call
:func:`generate_increments` for the records directly.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def generate_increments(increments: int = 4, size: int = 100, seed: int = 7, *,
                        m: int = 3, p_triad: float = 0.6, closure_share: float = 0.3,
                        seed_members: int = 5) -> list[list[dict]]:
    """``increments`` lists of about ``size`` new edges each, deterministic in ``seed``."""
    rng = random.Random(seed)
    adj: dict[int, set[int]] = {}
    ends: list[int] = []  # every edge endpoint once: uniform choice = choice by degree
    batch: list[dict] = []
    next_id = 1000

    def connect(u: int, v: int) -> bool:
        if u == v or v in adj.get(u, ()):
            return False
        adj.setdefault(u, set()).add(v)
        adj.setdefault(v, set()).add(u)
        ends.extend((u, v))
        # a friendship is recorded by whoever sent the request: either orientation
        batch.append({"src": u, "dst": v} if rng.random() < 0.5 else {"src": v, "dst": u})
        return True

    def join() -> None:
        nonlocal next_id
        me, next_id = next_id, next_id + 1
        target = rng.choice(ends)
        connect(me, target)
        for _ in range(m - 1):
            friends = list(adj[target] - adj[me] - {me})
            if friends and rng.random() < p_triad:
                target = rng.choice(sorted(friends))
            else:
                for _ in range(10):  # by degree, avoiding members already befriended
                    target = rng.choice(ends)
                    if target != me and target not in adj[me]:
                        break
            connect(me, target)

    def close_triangle() -> bool:
        for _ in range(20):
            hub = rng.choice(ends)
            friends = sorted(adj[hub])
            if len(friends) < 2:
                continue
            a, b = rng.sample(friends, 2)
            if connect(a, b):
                return True
        return False

    # a small circle of founding members
    founders = list(range(next_id, next_id + seed_members))
    next_id += seed_members
    for i, u in enumerate(founders):
        connect(u, founders[(i + 1) % seed_members])

    out: list[list[dict]] = []
    for _ in range(increments):
        while len(batch) < size:
            if adj and rng.random() < closure_share and close_triangle():
                continue
            join()
        out.append(batch[:])
        batch.clear()
    return out


def write_increments(out_dir: str | Path, increments: list[list[dict]]) -> list[Path]:
    """One ``edges-NNNN.jsonl`` file per increment; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, records in enumerate(increments, 1):
        path = out / f"edges-{i:04d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for edges-NNNN.jsonl")
    ap.add_argument("--increments", type=int, default=4)
    ap.add_argument("--size", type=int, default=100, help="new edges per increment (about)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    incs = generate_increments(args.increments, args.size, args.seed)
    for path, records in zip(write_increments(args.out, incs), incs, strict=True):
        print(f"{path}: {len(records)} edges")


if __name__ == "__main__":
    main()
