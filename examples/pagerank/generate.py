"""An evolving web graph, in increments of link insertions ``{src, dst}`` (JSON lines).

Pages are integers. The graph grows by directed preferential attachment (in the manner of
Bollobás et al.'s scale-free digraphs), which gives the power-law in-degrees of the web:

- with probability ``p_new`` a new page appears: usually it links to ``1 +
  Geometric`` (mean ``out_links``) existing pages chosen in proportion to in-degree + 1
  (popular pages are linked more); with probability ``p_dangling`` it has no links of
  its own and is linked *from* an existing page instead (a new leaf, a dangling node);
- otherwise an existing page, chosen in proportion to out-degree + 1 (active pages link
  more; a dangling page may get its first link and stop dangling), links to an existing
  page chosen in proportion to in-degree + 1.

Increment 1 is the initial graph: it grows from a 3-page cycle until it has
``initial_nodes`` pages. Every later increment inserts ``size`` new links (some of them
from or to new pages). No link repeats an earlier one and no page links to itself.

    python examples/pagerank/generate.py --out DIR [--initial-nodes 300] [--increments 3] \
        [--size 40] [--seed 5]

writes ``DIR/links-0001.jsonl`` (the initial graph) … ``DIR/links-000N.jsonl``, where N
is ``increments + 1``. Tests and the benchmark call :func:`generate_increments` directly.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def generate_increments(initial_nodes: int = 300, increments: int = 3, size: int = 40,
                        seed: int = 5, *, out_links: float = 3.0, p_new: float = 0.3,
                        p_dangling: float = 0.25) -> list[list[dict]]:
    """The initial graph, then ``increments`` batches of ``size`` new links, as lists of
    ``{src, dst}`` records; deterministic in the arguments."""
    rng = random.Random(seed)
    out: dict[int, set[int]] = {}
    # each page once per (in-degree + 1), resp. (out-degree + 1): a uniform choice from
    # the list is a choice in proportion to that weight
    by_in: list[int] = []
    by_out: list[int] = []
    batch: list[dict] = []

    def add_page() -> int:
        page = len(out) + 1
        out[page] = set()
        by_in.append(page)
        by_out.append(page)
        return page

    def link(src: int, dst: int) -> bool:
        if src == dst or dst in out[src]:
            return False
        out[src].add(dst)
        by_in.append(dst)
        by_out.append(src)
        batch.append({"src": src, "dst": dst})
        return True

    def step() -> None:
        if rng.random() < p_new:
            page = add_page()
            if rng.random() < p_dangling:
                link(rng.choice(by_out[:-1]), page)
                return
            k = 1
            while rng.random() > 1 / out_links:
                k += 1
            for _ in range(k):
                for _ in range(10):  # a few tries to find a page not linked yet
                    if link(page, rng.choice(by_in)):
                        break
        else:
            src = rng.choice(by_out)
            for _ in range(10):
                if link(src, rng.choice(by_in)):
                    break

    pages = [add_page() for _ in range(3)]
    for i, page in enumerate(pages):
        link(page, pages[(i + 1) % 3])
    while len(out) < initial_nodes:
        step()
    result = [batch[:]]
    for _ in range(increments):
        batch.clear()
        while len(batch) < size:
            step()
        result.append(batch[:size])
    return result


def write_increments(out_dir: str | Path, increments: list[list[dict]]) -> list[Path]:
    """One ``links-NNNN.jsonl`` file per increment; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, records in enumerate(increments, 1):
        path = out / f"links-{i:04d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for links-NNNN.jsonl")
    ap.add_argument("--initial-nodes", type=int, default=300, help="pages of the initial graph")
    ap.add_argument("--increments", type=int, default=3, help="increments after the initial graph")
    ap.add_argument("--size", type=int, default=40, help="new links per increment")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    incs = generate_increments(args.initial_nodes, args.increments, args.size, args.seed)
    pages: set[int] = set()
    for path, records in zip(write_increments(args.out, incs), incs, strict=True):
        new = {p for r in records for p in (r["src"], r["dst"])} - pages
        pages |= new
        print(f"{path}: {len(records)} links, {len(new)} new pages, {len(pages)} pages so far")


if __name__ == "__main__":
    main()
