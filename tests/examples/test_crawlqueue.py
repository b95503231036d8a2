"""examples/crawlqueue: the incremental crawl queue against a full recomputation in DuckDB."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from examples.crawlqueue.generate import generate
from examples.crawlqueue.pipeline import SITE_WEIGHT, THRESHOLD
from strata.controller import Controller
from strata.pipeline import load_dataflow
from strata.testing import assert_same

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "crawlqueue" / "pipeline.py"
INCREMENTS, SIZE = 4, 300

PAGES = pa.schema([("inc", pa.int64()), ("url", pa.string()), ("site", pa.string()),
                   ("links", pa.list_(pa.string())), ("crawled_at", pa.int64())])

# The queue's definition (pipeline.py docstring), recomputed from all pages up to $e.
COUNTS_SQL = """
WITH pairs AS (
    SELECT unnest(list_distinct(links)) AS url FROM pages WHERE inc <= $e
)
SELECT url, split_part(url, '/', 3) AS site, count(*) AS inlinks FROM pairs GROUP BY url
"""
QUEUE_SQL = f"""
WITH counts AS ({COUNTS_SQL}),
site_counts AS (SELECT site, sum(inlinks)::BIGINT AS inlinks FROM counts GROUP BY site),
changed AS (
    SELECT DISTINCT unnest(links) AS url FROM pages WHERE inc = $e
)
SELECT c.url, c.site, c.inlinks AS url_inlinks, s.inlinks AS site_inlinks,
       c.inlinks + {SITE_WEIGHT!r}::DOUBLE * s.inlinks AS score
FROM changed JOIN counts c USING (url) JOIN site_counts s USING (site)
WHERE c.url NOT IN (SELECT url FROM pages WHERE inc <= $e)
  AND c.inlinks + {SITE_WEIGHT!r}::DOUBLE * s.inlinks >= {THRESHOLD!r}
ORDER BY c.url
"""


def duckdb_pages(batches: list[list[dict]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("pages", pa.Table.from_pylist(
        [{"inc": i, **r} for i, b in enumerate(batches, 1) for r in b], PAGES))
    return con


def check_queue(con: duckdb.DuckDBPyConnection, e: int, queue: list[dict]) -> None:
    """``queue`` is the crawl queue of increment ``e`` as recomputed from all pages."""
    got = sorted(queue, key=lambda r: r["url"])
    want = con.execute(QUEUE_SQL, {"e": e}).fetchall()
    assert want, f"increment {e}: the reference queue is empty; the test is too weak"
    assert [(r["url"], r["site"], r["url_inlinks"], r["site_inlinks"]) for r in got] \
        == [w[:4] for w in want], f"crawl queue of increment {e}"
    assert [r["score"] for r in got] == pytest.approx([w[4] for w in want])


def check_count_state(con: duckdb.DuckDBPyConnection, e: int, state: list[dict]) -> None:
    """The count state holds every URL's and every site's in-link total up to ``e``."""
    counts = con.execute(COUNTS_SQL, {"e": e}).fetchall()
    sites: dict[str, int] = {}
    for _, site, n in counts:
        sites[site] = sites.get(site, 0) + n
    want_state = {f"u:{u}": n for u, _, n in counts} | {f"s:{s}": n for s, n in sites.items()}
    assert len(state) == len(want_state)
    assert {r["key"]: r["inlinks"] for r in state} == want_state


def test_crawl_queue_matches_full_recomputation(spark, tmp_path):
    batches = generate(seed=3, increments=INCREMENTS, size=SIZE)
    con = duckdb_pages(batches)

    with Controller(tmp_path / "home", load_dataflow(str(PIPELINE)),
                    spark=spark, num_partitions=2) as c:
        # extract fuses into count; score and threshold into merge: three jobs per increment
        assert sorted(c.units) == ["count", "crawled", "merge"]
        for e, batch in enumerate(batches, 1):
            c.ingest("pages", batch)
            reports = c.run()
            assert [(r.stage, r.epoch) for r in reports] == [
                ("count", e), ("crawled", e), ("merge", e)]
            assert reports[1].records_in["pages"] == len(batch)
            # count reads pages (extract runs inside its job): reported as pages, not links
            assert reports[0].records_in == {"pages": len(batch)}

            check_queue(con, e, c.read_flow("crawl_queue", e).to_pylist())
            check_count_state(con, e, c.state_records("count"))

            # the crawled state is the set of pages crawled so far, each once
            crawled = sorted(r["url"] for b in batches[:e] for r in b)
            assert sorted(r["url"] for r in c.state_records("crawled")) == crawled


def test_reference_and_spark_agree_stage_by_stage(spark):
    """strata.testing (docs/testing.md): every flow's increments and every stage's state
    are the same by the reference executor and on Spark, and the queue is the DuckDB one."""
    batches = generate(seed=5, increments=2, size=150)
    got = assert_same(load_dataflow(str(PIPELINE)), [{"pages": b} for b in batches], spark)
    assert got.epochs("crawl_queue") == len(batches)  # one epoch per increment
    con = duckdb_pages(batches)
    for e, queue in enumerate(got.outputs["crawl_queue"], 1):
        check_queue(con, e, queue)
    check_count_state(con, len(batches), got.state["count"])
    assert sorted(r["url"] for r in got.state["crawled"]) == sorted(
        r["url"] for b in batches for r in b)


def test_the_docstring_gives_the_site_weight_the_code_uses():
    import importlib.util

    spec = importlib.util.spec_from_file_location("crawl_pipeline_doc", PIPELINE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert f"``SITE_WEIGHT`` is {module.SITE_WEIGHT}" in module.__doc__
    assert "0.1 *" not in module.__doc__
