"""A sales data cube maintained incrementally, answering range queries (BIPS paper, §3).

Raw sales facts ``{day, region, product, amount}`` arrive in bulk increments; range
queries ``{qid, region_from..region_to, product_from..product_to, day_from..day_to}``
arrive in increments of their own. The cube keeps ``sum(amount)`` and ``count(*)`` per
cell ``(region, product, day_bucket)`` (a bucket is a week, ``day // 7``)::

    sales ─► updates ─(updates: cell deltas)─┐
            (pre-aggregate                   ├─► cube (state: cells) ─(partials)─► answer ─► answers
             per increment)      queries ────┘   prefer(queries=4, updates=1)      (sum per qid)

- ``updates`` (groupwise, routed by cell, no state) pre-aggregates one increment of raw
  facts into one delta ``{region, product, day_bucket, sum, count}`` per touched cell.
- ``cube`` (stateful, keyed by cell, *inner* grouping) reads either an increment of
  deltas or an increment of queries in each epoch — ``prefer({"queries": 4, "updates": 1})``
  reads query increments four times as often as update increments when both wait. A
  delta is added to its cell. A query is routed to the *set* of cells its range covers,
  so an epoch reads only the state of those cells; each covered cell that exists writes a
  partial answer ``{qid, sum, count}``, and the query's first covered cell always writes
  one (zero if empty), so every query is answered even from an empty cube.
- ``answer`` (groupwise by qid) sums the partials of a query into ``{qid, sum, count}``.

A query increment is answered from the cube as it stands when the cube reads it: it
reflects exactly the update increments the cube absorbed in its earlier epochs. The cube's
granularity is a week: a query's day range is rounded *inward* to whole weeks (a week
counts only if all of its days are in the range), so ranges on week boundaries
(``day_from % 7 == 0``, ``day_to % 7 == 6``) are exact.

When queries keep the cube busy, the deltas the ``updates`` stage wrote wait unread; the
scheduler's bottleneck detection then skips ``updates`` (its only output is still
unread downstream) while another stage can run, instead of piling up deltas.

Run with ``strata run examples/datacube/pipeline.py --home DIR`` (see README.md).
"""

from __future__ import annotations

from collections.abc import Iterator

from strata import Dataflow, Emitter, Input, State
from strata.model.runnability import prefer

BUCKET_DAYS = 7  # a cube cell covers one week of one product in one region

SALES_SCHEMA = "day long, region long, product long, amount long"  # amount in cents
CELL_SCHEMA = "region long, product long, day_bucket long, sum long, count long"
QUERY_SCHEMA = ("qid long, region_from long, region_to long, product_from long, "
                "product_to long, day_from long, day_to long")
ANSWER_SCHEMA = "qid long, sum long, count long"
CELL = ("region", "product", "day_bucket")


def cell_of(sale: dict) -> tuple[int, int, int]:
    return sale["region"], sale["product"], sale["day"] // BUCKET_DAYS


def weeks_of(query: dict) -> range:
    """The buckets whose days all lie in ``[day_from, day_to]`` (rounded inward)."""
    first = -(-query["day_from"] // BUCKET_DAYS)  # ceil
    last = (query["day_to"] + 1) // BUCKET_DAYS - 1
    return range(first, last + 1)


def covered_cells(query: dict) -> set[tuple[int, int, int]]:
    """route_by of ``queries``: every cell key the query's range covers."""
    return {(r, p, w)
            for r in range(query["region_from"], query["region_to"] + 1)
            for p in range(query["product_from"], query["product_to"] + 1)
            for w in weeks_of(query)}


def anchor(query: dict) -> tuple[int, int, int] | None:
    """The query's first covered cell: it answers even if no covered cell has sales."""
    weeks = weeks_of(query)
    if not weeks or query["region_from"] > query["region_to"] or \
            query["product_from"] > query["product_to"]:
        return None
    return query["region_from"], query["product_from"], weeks[0]


def preaggregate(cell: tuple, sales: Iterator[dict], *, out: Emitter) -> None:
    """updates: one delta per cell touched by this increment of raw facts."""
    total = n = 0
    for s in sales:
        total += s["amount"]
        n += 1
    region, product, bucket = cell
    out.write("updates", {"region": region, "product": product, "day_bucket": bucket,
                          "sum": total, "count": n})


def cube_cell(cell: tuple, state: Iterator[dict], deltas: Iterator[dict],
              queries: Iterator[dict], *, out: Emitter) -> None:
    """cube: add the deltas to the cell; answer the queries covering it from the old value."""
    current = next(state, None)
    total = current["sum"] if current else 0
    n = current["count"] if current else 0
    for q in queries:  # an epoch reads queries or deltas, never both (prefer reads one flow)
        if current is not None or anchor(q) == tuple(cell):
            out.write("partials", {"qid": q["qid"], "sum": total, "count": n})
    changed = False
    for d in deltas:
        total += d["sum"]
        n += d["count"]
        changed = True
    if current is None and not changed:
        return  # a query visited an empty cell: keep no state for it
    region, product, bucket = cell
    out.state({"region": region, "product": product, "day_bucket": bucket,
               "sum": total, "count": n})


def answer(qid: int, partials: Iterator[dict], *, out: Emitter) -> None:
    """answer: the sum of one query's partial answers."""
    total = n = 0
    for p in partials:
        total += p["sum"]
        n += p["count"]
    out.write("answers", {"qid": qid, "sum": total, "count": n})


def build_dataflow() -> Dataflow:
    df = Dataflow("datacube")
    sales = df.source("sales", SALES_SCHEMA)
    queries = df.source("queries", QUERY_SCHEMA)
    df.stage("updates", preaggregate, inputs=[Input(sales, route_by=cell_of)],
             outputs={"updates": CELL_SCHEMA})
    df.stage(
        "cube",
        cube_cell,
        inputs=[Input("updates", route_by=CELL), Input(queries, route_by=covered_cells)],
        outputs={"partials": ANSWER_SCHEMA},
        state=State(CELL_SCHEMA, route_by=CELL, grouping="inner"),
        runnable=prefer({"queries": 4, "updates": 1}),
    )
    df.stage("answer", answer, inputs=[Input("partials", route_by="qid")],
             outputs={"answers": ANSWER_SCHEMA})
    return df
