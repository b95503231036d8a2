"""Change logs of two bags R(k, a) and S(k, b): inserts interleaved with deletes.

A small catalogue story: R holds *offers* (``k`` = item id, ``a`` = price in cents, from a
handful of price points, so equal rows repeat) and S holds *stock lots* (``k`` = item id,
``b`` = units in the lot). Item popularity is skewed (a few items get most of the rows).
Every record is ``{k, a|b, op}`` with ``op`` = +1 (insert one copy) or -1 (delete one copy).

- The first increment only inserts. Later ones mix inserts with deletes (about
  ``delete_share`` of the changes) of copies live before the increment, in random order.
- From the second increment on, each increment also withdraws *every* row of one item that
  is in the join, from R, from S, or from both in turn, so its view row disappears (and,
  from both, the item leaves the state); it may come back later through new inserts.

    python examples/joinview/generate.py --out DIR [--increments 5] [--size 40] [--seed 7]

writes ``DIR/r-NNNN.jsonl`` and ``DIR/s-NNNN.jsonl`` per increment.
Tests call :func:`generate_increments` for the records directly.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

PRICES = [499, 999, 1299, 1999, 2499, 4999, 9999]
RELATIONS = {"r": "a", "s": "b"}


def generate_increments(increments: int = 5, size: int = 40, seed: int = 7, *,
                        items: int | None = None, delete_share: float = 0.35,
                        ) -> list[dict[str, list[dict]]]:
    """``increments`` dicts ``{"r": [...], "s": [...]}`` of about ``size`` changes per
    relation each, deterministic in ``seed``."""
    rng = random.Random(seed)
    items = items or max(4, size // 2)
    weights = [1 / (i + 1) for i in range(items)]  # Zipf-like popularity
    live: dict[str, list[tuple[int, int]]] = {"r": [], "s": []}  # one entry per live copy

    def new_row(rel: str) -> tuple[int, int]:
        k = rng.choices(range(1, items + 1), weights)[0]
        return (k, rng.choice(PRICES)) if rel == "r" else (k, rng.randint(1, 50))

    out: list[dict[str, list[dict]]] = []
    for n in range(increments):
        changes: dict[str, list[tuple[int, int, int]]] = {"r": [], "s": []}
        if n > 0:  # withdraw a whole item (one that is in the join) from R, S or both
            sides = (("r",), ("s",), ("r", "s"))[(n - 1) % 3]
            joined = sorted({k for k, _ in live["r"]} & {k for k, _ in live["s"]})
            if joined:
                gone = rng.choice(joined)
                for rel in sides:
                    changes[rel] += [(k, v, -1) for k, v in live[rel] if k == gone]
                    live[rel] = [row for row in live[rel] if row[0] != gone]
        for rel in RELATIONS:
            deletable = live[rel][:]  # copies live before this increment
            rng.shuffle(deletable)
            while len(changes[rel]) < size:
                if n > 0 and deletable and rng.random() < delete_share:
                    row = deletable.pop()
                    live[rel].remove(row)
                    changes[rel].append((*row, -1))
                else:
                    row = new_row(rel)
                    live[rel].append(row)
                    changes[rel].append((*row, 1))
            rng.shuffle(changes[rel])  # inserts and deletes interleaved
        out.append({rel: [{"k": k, col: v, "op": op} for k, v, op in changes[rel]]
                    for rel, col in RELATIONS.items()})
    return out


def write_increments(out_dir: str | Path,
                     increments: list[dict[str, list[dict]]]) -> list[dict[str, Path]]:
    """``r-NNNN.jsonl`` and ``s-NNNN.jsonl`` per increment; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, inc in enumerate(increments, 1):
        files = {}
        for rel, records in inc.items():
            files[rel] = out / f"{rel}-{i:04d}.jsonl"
            files[rel].write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(files)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for r-NNNN.jsonl, s-NNNN.jsonl")
    ap.add_argument("--increments", type=int, default=5)
    ap.add_argument("--size", type=int, default=40, help="changes per relation per increment")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    incs = generate_increments(args.increments, args.size, args.seed)
    for files, inc in zip(write_increments(args.out, incs), incs, strict=True):
        for rel, path in files.items():
            dels = sum(1 for r in inc[rel] if r["op"] < 0)
            print(f"{path}: {len(inc[rel])} changes ({dels} deletes)")


if __name__ == "__main__":
    main()
