"""examples/datacube: range queries answered from an incrementally maintained data cube.

Checks every answer against DuckDB SQL over exactly the sales facts the cube had absorbed
when it read the query, the 4:1 preference of the cube for query increments, and the
scheduler's bottleneck detection holding back the ``updates`` stage.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa

from examples.datacube.generate import queries, sales
from strata.controller import Controller
from strata.pipeline import load_dataflow

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "datacube" / "pipeline.py"
DAYS, SALES_INCS, QUERY_INCS, PER_QUERY = 28, 4, 14, 3
QUEUED_SALES, QUEUED_QUERIES = 3, 12  # queued before the first run; the rest before the second


def replay(reports, ingested_before):
    """Walk the epochs in order, tracking what waited before each one.

    ``ingested_before[i]`` is ``(sales, queries)`` ingested before report ``i`` ran.
    Yields ``(report, waiting)``: the epochs per stage so far, sales waiting for
    ``updates``, deltas waiting for ``cube`` and queries waiting for ``cube``.
    """
    epochs = Counter()
    updates_out = cube_read_updates = cube_read_queries = 0
    for i, r in enumerate(reports):
        n_sales, n_queries = ingested_before[i]
        waiting = {"epochs": dict(epochs), "sales": n_sales - epochs["updates"],
                   "deltas": updates_out - cube_read_updates,
                   "queries": n_queries - cube_read_queries}
        yield r, waiting
        epochs[r.stage] += 1
        if r.stage == "updates":
            updates_out += 1  # every sales increment touches some cell: never empty
        elif r.stage == "cube":
            cube_read_updates += r.records_in["updates"] > 0
            cube_read_queries += r.records_in["queries"] > 0


def test_datacube_answers_preference_and_bottleneck(spark, tmp_path):
    facts = sales(seed=3, increments=SALES_INCS, days=DAYS, per_day=25)
    qs = queries(seed=3, increments=QUERY_INCS, per_query=PER_QUERY, days=DAYS)
    assert all(q["day_from"] % 7 == 0 and q["day_to"] % 7 == 6 for inc in qs for q in inc)

    reports, ingested_before = [], []
    with Controller(tmp_path / "home", load_dataflow(str(PIPELINE)),
                    spark=spark, num_partitions=2) as c:
        # first run: 3 sales and 12 query increments queued; second: 1 more sales, 2 queries
        done = (0, 0)
        for n_sales, n_queries in ((QUEUED_SALES, QUEUED_QUERIES), (SALES_INCS, QUERY_INCS)):
            for i in range(done[0], n_sales):
                c.ingest("sales", facts[i])
            for j in range(done[1], n_queries):
                c.ingest("queries", qs[j])
            done = (n_sales, n_queries)
            run = c.run()
            reports += run
            ingested_before += [(n_sales, n_queries)] * len(run)
        answers = c.read_flow("answers").to_pylist()

    steps = list(replay(reports, ingested_before))

    # every cube epoch reads exactly one increment of one flow (prefer)
    cube = [r for r in reports if r.stage == "cube"]
    assert all((r.records_in["updates"] > 0) != (r.records_in["queries"] > 0) for r in cube)
    assert sum(r.records_in["queries"] > 0 for r in cube) == QUERY_INCS
    assert sum(r.records_in["updates"] > 0 for r in cube) == SALES_INCS
    # the k-th delta increment the cube absorbs is the pre-aggregate of sales increment k
    cells = [len({(f["region"], f["product"], f["day"] // 7) for f in inc}) for inc in facts]
    assert [r.records_in["updates"] for r in cube if r.records_in["updates"]] == cells
    assert [r.records_in["sales"] for r in reports if r.stage == "updates"] == [
        len(inc) for inc in facts]

    # (1) correctness: query increment j is answered from the sales increments the cube
    # absorbed in its epochs before the one that read j
    absorbed_for, absorbed = [], 0
    for r in cube:
        if r.records_in["updates"]:
            absorbed += 1
        else:
            absorbed_for.append(absorbed)
    assert absorbed_for[0] == 0 and absorbed_for[-1] == SALES_INCS  # from empty to complete
    assert len(set(absorbed_for)) >= 3  # answers from several versions of the cube

    con = duckdb.connect()
    table = pa.Table.from_pylist([{"inc": i + 1, **f} for i, inc in enumerate(facts)
                                  for f in inc])
    con.register("sales", table)
    by_qid = {a["qid"]: a for a in answers}
    assert len(by_qid) == len(answers) == QUERY_INCS * PER_QUERY
    zero = 0
    for j, inc in enumerate(qs):
        for q in inc:
            want = con.execute(
                "SELECT coalesce(sum(amount), 0), count(*) FROM sales WHERE inc <= ? AND "
                "region BETWEEN ? AND ? AND product BETWEEN ? AND ? AND day BETWEEN ? AND ?",
                [absorbed_for[j], q["region_from"], q["region_to"], q["product_from"],
                 q["product_to"], q["day_from"], q["day_to"]]).fetchone()
            got = by_qid[q["qid"]]
            assert (got["sum"], got["count"]) == (int(want[0]), want[1]), (j, q)
            zero += want[1] == 0
    assert 0 < zero < len(answers)  # some queries hit an empty range, most do not

    # (2) the 4:1 preference: between two consecutive reads of a delta increment, with
    # queries waiting all along, the cube reads exactly four query increments
    gaps, run, steady = [], 0, False
    for r, w in steps:
        if r.stage != "cube":
            continue
        if r.records_in["updates"]:
            if steady:
                gaps.append(run)
            run, steady = 0, True
        elif w["deltas"] and w["queries"]:
            run += 1
        else:  # a query read with no delta waiting (or the last queries): not in the race
            steady = False
    assert len(gaps) >= 2 and gaps == [4] * len(gaps), gaps
    # (outside these windows the ratio drifts: prefer balances the cube's whole history,
    # so after epochs that could read queries only it reads a waiting delta at once)

    # (3) bottleneck detection: updates never runs while its previous output is unread by
    # the cube, although sales increments wait for it ...
    assert all(w["deltas"] == 0 for r, w in steps if r.stage == "updates")
    assert max(w["deltas"] for _, w in steps) == 1
    # ... and it is skipped while it would be first in line: it waits with sales queued and
    # has run fewer epochs than the stage chosen instead (fairness alone would pick it)
    skipped = [r for r, w in steps if r.stage != "updates" and w["sales"] > 0
               and w["epochs"].get("updates", 0) < w["epochs"].get(r.stage, 0)]
    assert len(skipped) >= 4
    assert all(w["deltas"] > 0 for r, w in steps if r in skipped)
