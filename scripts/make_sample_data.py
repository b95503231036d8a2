"""Generate the bundled sample crawl: URL sightings in four daily increments.

Sightings follow a power law over pages, pages are spread over sites, and each day
adds some pages never seen before, as a growing crawl does. Deterministic (seeded).
"""

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "src/strata/data/sample/urls"
rng = random.Random(20101)
sites = [f"{w}.example.{tld}" for w in ("news", "shop", "blog", "wiki", "docs", "forum", "maps",
                                         "mail", "video", "music", "sport", "travel")
         for tld in ("com", "org")]
pages: list[str] = []


def new_page() -> str:
    site = sites[min(int(rng.paretovariate(0.7)) - 1, len(sites) - 1)]
    path = "/".join(rng.choice(["a", "b", "c", "d", "e", "f", "g", "h"]) + str(rng.randint(1, 99))
                    for _ in range(rng.randint(1, 3)))
    return f"https://{site}/{path}"


OUT.mkdir(parents=True, exist_ok=True)
for day in range(1, 5):
    pages += [new_page() for _ in range(600)]
    with open(OUT / f"day-{day}.jsonl", "w") as f:
        weights = [1 / (r + 1) ** 0.8 for r in range(len(pages))]  # Zipf-like popularity
        rng.shuffle(pages)  # today's most popular pages are not always yesterday's
        for url in rng.choices(pages, weights=weights, k=4000):
            f.write(json.dumps({"url": url}) + "\n")
print(f"wrote {OUT}")
