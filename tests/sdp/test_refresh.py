"""strata refreshing an SDP project: every view equal to DuckDB's recomputation after
every run, under appends, declared deletes, rewritten sources and changed definitions."""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata import sdp
from tests.sdp.shop import ORACLE, copy_project, oracle, same, table, write_day


def refreshed(spec: Path, spark, warehouse: Path, **kw):
    plan = sdp.load(spec, warehouse=str(warehouse))
    return plan, sdp.refresh(plan, spark, **kw)


def test_every_view_follows_appends_like_a_recomputation(spark, tmp_path):
    project = tmp_path / "shop"
    spec, wh = copy_project(project), tmp_path / "warehouse"
    for day, files in ((1, 1), (2, 2), (3, 1)):
        write_day(project, day, 1500, files=files)
        plan, report = refreshed(spec, spark, wh)
        assert report.new_files["orders"] == files and report.rebuilt is None
        assert all(v.incremental for v in plan.views), sdp.describe(plan)
        for view in ORACLE:
            same(table(wh / view), oracle(project, view), f"{view} after day {day}")
    _, report = refreshed(spec, spark, wh)  # nothing new: nothing run, nothing rewritten
    assert report.epochs == 0 and report.published == {}


def test_a_changed_definition_or_a_rewritten_source_rebuilds_from_the_sources(spark,
                                                                             tmp_path):
    project = tmp_path / "shop"
    spec, wh = copy_project(project), tmp_path / "warehouse"
    write_day(project, 1, 800)
    write_day(project, 2, 800)
    refreshed(spec, spark, wh)
    (project / "data" / "orders" / "day-0001-000.parquet").unlink()  # a rewrite
    _, report = refreshed(spec, spark, wh)
    assert "no longer has" in report.rebuilt
    sql = project / "transformations" / "users.sql"
    sql.write_text(sql.read_text().replace("count(DISTINCT user_id) AS users",
                                           "count(DISTINCT user_id) AS users, count(*) AS n"))
    _, report = refreshed(spec, spark, wh)
    assert report.rebuilt == "the pipeline's definitions changed"
    marker = project / "storage" / "strata-plan.json"  # as strata left it before formats
    stored = json.loads(marker.read_text())
    del stored["state_format"]
    marker.write_text(json.dumps(stored))
    _, report = refreshed(spec, spark, wh)
    assert report.rebuilt == "another version of strata wrote its state"
    want = duckdb.sql(f"SELECT day, count(DISTINCT user_id) AS users, count(*) AS n FROM "
                      f"'{project}/data/orders/*.parquet' GROUP BY day").df()
    same(table(wh / "active_users"), want, "active_users")
    for view in ("daily_revenue", "top_products"):
        same(table(wh / view), oracle(project, view), view)


def _random_batches(seed: int, batches: int, size: int) -> list[list[tuple[int, int, int]]]:
    """Random appends, and deletes (``_mult`` -1) of rows appended before and not yet
    deleted: the change a source with declared deletes may carry."""
    rng = random.Random(seed)
    live: list[tuple[int, int]] = []
    out = []
    for _ in range(batches):
        rows = []
        for _ in range(size):
            if live and rng.random() < 0.35:
                k, v = live.pop(rng.randrange(len(live)))
                rows.append((k, v, -1))
            else:
                k, v = rng.randrange(6), rng.randrange(-5, 20)
                live.append((k, v))
                rows.append((k, v, 1))
        out.append(rows)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_declared_deletes_retract_rows(spark, tmp_path, seed):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "v.sql").write_text(
        "CREATE MATERIALIZED VIEW totals AS SELECT k, sum(v) AS s, count(*) AS n "
        "FROM parquet.`events` GROUP BY k;\n"
        "CREATE MATERIALIZED VIEW keys AS SELECT count(*) AS n FROM totals WHERE n > 1;")
    spec = tmp_path / "spark-pipeline.yml"
    spec.write_text("name: d\nstorage: st\nlibraries:\n  - glob:\n      include: t/**\n")
    (tmp_path / "events").mkdir()
    wh = tmp_path / "warehouse"
    for i, rows in enumerate(_random_batches(seed, 3, 40)):
        k, v, m = zip(*rows, strict=True)
        pq.write_table(pa.table({"k": pa.array(k, pa.int64()), "v": pa.array(v, pa.int64()),
                                 "_mult": pa.array(m, pa.int64())}),
                       tmp_path / "events" / f"{i}.parquet")
        refreshed(spec, spark, wh)
        want = duckdb.sql(
            f"SELECT k, sum(v * _mult) AS s, sum(_mult) AS n FROM "
            f"'{tmp_path}/events/*.parquet' GROUP BY k HAVING sum(_mult) > 0").df()
        same(table(wh / "totals"), want, f"totals after batch {i}")
        assert table(wh / "keys")["n"].tolist() == [int((want["n"] > 1).sum())]
