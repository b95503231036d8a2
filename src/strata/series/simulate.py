"""A trace simulator: the I/O of many query series with and without sharing.

As in Comet's simulator (§5 of the paper), a *trace* lists streams (with their segment
size) and query series over them; the simulator runs the real planner
(:func:`~strata.series.normalize.plan_series`: views, fingerprints, schedules) on every
series and counts, day by day, the bytes each way of running them would read and write:

* **without sharing**: every occurrence reads the raw segments of its window;
* **with sharing** (strata's plan): each new segment is scanned once, by the jumbo pass
  of its stream, if any series reads it; each view some series reads later is written
  once (its size is the series' ``view_ratio`` times the segment's) and read by every
  occurrence whose window holds it; a view read only now is not written.

One-off (ad hoc) queries read their window raw either way. The sizes are the trace's
(an analytic model, not a run): the point is how much the plan shares, at a scale no
test machine runs.

A trace is JSON::

    {"days": 28,
     "streams": {"clicks": {"segment_bytes": 1e9, "columns": {"A": "string", ...}}},
     "series": [{"name": "q1", "stream": "clicks", "sql": "SELECT ...",
                 "tables": {"log": "clicks[-6:0]"}, "period": 7, "view_ratio": 0.05,
                 "recurring": true}]}
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from strata.model.errors import StrataError
from strata.series.normalize import SeriesPlan
from strata.series.program import Series, plan_of


def simulate(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The bytes read and written over the trace's days, with and without sharing."""
    try:
        days, streams, entries = int(trace["days"]), trace["streams"], trace["series"]
    except (KeyError, TypeError, ValueError) as e:
        raise StrataError(f"a trace needs days, streams and series ({e})") from None
    plans = _trace_plans(entries, streams)
    raw = {"read": 0.0, "written": 0.0}
    shared = {"read": 0.0, "written": 0.0}
    views = 0
    for stream, group in plans.items():
        size = float(streams[stream]["segment_bytes"])
        ratio: dict[str, float] = {}
        for plan, r, _ in group:
            for v in plan.view_list():
                ratio[v.fingerprint] = max(ratio.get(v.fingerprint, 0.0), r)
        for n in range(1, days + 1):
            views += _day(group, n, days, size, ratio, raw, shared)
    raw_io, shared_io = sum(raw.values()), sum(shared.values())
    return {"series": len(entries), "streams": len(plans), "days": days,
            "views_written": views, "without_sharing": raw, "with_sharing": shared,
            "io_saving": round(1 - shared_io / raw_io, 4) if raw_io else 0.0}


Planned = list[tuple[SeriesPlan, float, bool]]  # a plan, its view ratio, recurring


def _trace_plans(entries: Sequence[Mapping[str, Any]], streams: Mapping[str, Any]
                 ) -> dict[str, Planned]:
    """The trace's series planned, by stream."""
    plans: dict[str, Planned] = defaultdict(list)
    for entry in entries:
        stream = entry["stream"]
        if stream not in streams:
            raise StrataError(f"series {entry['name']!r} reads unknown stream {stream!r}")
        s = Series(entry["name"], entry["sql"], entry.get("tables", {}),
                   int(entry.get("period", 1)))
        plan = plan_of(s, stream, streams[stream]["columns"])
        plans[stream].append((plan, float(entry.get("view_ratio", 1.0)),
                              entry.get("recurring", True)))
    return plans


def _day(group: Planned, n: int, days: int, size: float, ratio: Mapping[str, float],
         raw: dict[str, float], shared: dict[str, float]) -> int:
    """Day ``n`` of one stream's series (its segments of ``size`` bytes, each view
    ``ratio`` of that): its bytes added to ``raw`` and ``shared``; the views written."""
    scanned = False
    for plan, _, recurring in group:
        sched = plan.schedule
        if not recurring:  # ad hoc: run once, on the last day, raw either way
            if n == days:
                cost = sum(len([j for j in w if j >= 1])
                           for w in sched.window(n).values()) * size
                raw["read"] += cost
                shared["read"] += cost
            continue
        if not sched.due(n):
            continue
        raw["read"] += sum(len(w) for w in sched.window(n).values()) * size
        for v in plan.view_list():
            stored = [j for j in sched.window(n)[v.table] if j != n]
            shared["read"] += len(stored) * ratio[v.fingerprint] * size
    written = set()
    for plan, _, recurring in group:
        if not recurring:
            continue
        for v in plan.view_list():
            reads_now = plan.schedule.due(n) and n in plan.schedule.window(n)[v.table]
            later = plan.schedule.last_reader(n, v.table) > n
            scanned = scanned or reads_now or later
            if later:
                written.add(v.fingerprint)
    shared["written"] += sum(ratio[fp] for fp in written) * size
    if scanned:
        shared["read"] += size
    return len(written)


# -- a synthetic trace shaped like the paper's ------------------------------------------
TEMPLATES = [  # (SQL over `log`, view size / segment size)
    ("SELECT A, count(*) AS n FROM log GROUP BY A", 0.001),
    ("SELECT A, B, count(*) AS n FROM log GROUP BY A, B", 0.05),
    ("SELECT A, B, C, count(*) AS n FROM log WHERE E <= 3 GROUP BY A, B, C", 0.2),
    ("SELECT B, sum(E) AS s, max(E) AS m FROM log GROUP BY B", 0.03),
    ("SELECT D, count(*) AS n FROM log GROUP BY D", 0.1),
    ("SELECT A, avg(E) AS e FROM log WHERE A <> 'us' GROUP BY A", 0.001),
    ("SELECT C, count(DISTINCT D) AS users FROM log GROUP BY C", 0.3),
]
COLUMNS = {"A": "string", "B": "bigint", "C": "bigint", "D": "bigint", "E": "bigint"}


def generate_trace(series: int = 1000, streams: int = 50, days: int = 28, seed: int = 1
                   ) -> dict[str, Any]:
    """A trace with power-law stream popularity and the paper's mix: 75% recurring; of
    those 67% daily, 15% weekly, the rest every 2-3 days; windows of 1-7 segments;
    a fifth of the daily ones join today with yesterday."""
    rng = random.Random(seed)
    names = [f"s{i:03d}" for i in range(streams)]
    weights = [1 / (i + 1) ** 1.1 for i in range(streams)]
    out: list[dict[str, Any]] = []
    for k in range(series):
        stream = rng.choices(names, weights)[0]
        sql, ratio = rng.choice(TEMPLATES)
        u = rng.random()
        period = 1 if u < 0.67 else 7 if u < 0.82 else rng.choice([2, 3])
        last = 7 if period == 7 else rng.randint(1, 7)
        tables = {"log": f"{stream}[{1 - last}:0]"}
        if period == 1 and rng.random() < 0.2:  # today joined with yesterday
            sql = ("SELECT t.A AS A, t.n AS today, y.n AS yesterday FROM "
                   "(SELECT A, count(*) AS n FROM t GROUP BY A) t JOIN "
                   "(SELECT A, count(*) AS n FROM y GROUP BY A) y ON t.A = y.A")
            tables, ratio = {"t": stream, "y": f"{stream}[-1]"}, 0.001
        out.append({"name": f"q{k:04d}", "stream": stream, "sql": sql, "tables": tables,
                    "period": period, "view_ratio": ratio, "recurring": rng.random() < 0.75})
    return {"days": days, "series": out,
            "streams": {s: {"segment_bytes": rng.choice([1, 4, 16, 64]) * 2**30,
                            "columns": COLUMNS} for s in names}}
