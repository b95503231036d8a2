"""Generate increments of integers from a drifting distribution, as JSONL.

The numbers model request latencies of a service in milliseconds, dumped in batches:
most requests are near a typical latency that drifts from batch to batch (a slow
degradation with day/night wobble), a fifth are slow outliers with a long tail. Values
are integers in ``[1, 5000]``, one record ``{"value": …}`` per line.

    python examples/median/generate.py --out /tmp/median-data --increments 5 --size 300

writes ``OUT/numbers-0001.jsonl`` … ``OUT/numbers-0005.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

MAX_VALUE = 5000


def increments(seed: int = 1, count: int = 5, size: int = 300) -> list[list[dict]]:
    """``count`` increments of about ``size`` records ``{"value": int}`` each."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        typical = 180 + 35 * i + 40 * math.sin(i)  # the drift
        n = max(1, int(rng.gauss(size, size / 8)))
        batch = []
        for _ in range(n):
            if rng.random() < 0.2:
                v = typical + rng.expovariate(1 / 400)  # a slow request
            else:
                v = rng.gauss(typical, typical / 4)
            batch.append({"value": int(min(MAX_VALUE, max(1, round(v))))})
        out.append(batch)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="directory for the JSONL files")
    p.add_argument("--increments", type=int, default=5, help="number of files (default 5)")
    p.add_argument("--size", type=int, default=300,
                   help="numbers per increment, about (default 300)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    everything: list[int] = []
    for i, batch in enumerate(increments(args.seed, args.increments, args.size), 1):
        path = args.out / f"numbers-{i:04d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in batch))
        everything += [r["value"] for r in batch]
        everything.sort()
        median = everything[(len(everything) - 1) // 2]
        print(f"{path}: {len(batch)} numbers; lower median of all {len(everything)} so far: "
              f"{median}")


if __name__ == "__main__":
    main()
