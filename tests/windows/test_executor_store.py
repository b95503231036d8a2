"""The pane store on the executors: the driver keeps no group, whatever their number;
results equal DuckDB's over the cells their C2 lists; ``auto`` chooses by the first
epoch's size."""

from __future__ import annotations

import json
import random

from strata import Dataflow, config
from strata.controller import Controller
from strata.storage.home import Home
from strata.storage.manifest import StateDir
from strata.windows import Eviction, add_window, from_sql
from tests.windows.weblog import SQL, check_epoch, write

WINDOW = SQL.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 4, 2, host)")


def _log(urls: int, epochs: int = 3, per_epoch: int = 600) -> list[list[dict]]:
    rng = random.Random(urls)
    return [[{"ts": e * 4 + rng.randrange(4), "host": f"h{i % 2}",
              "url": f"/u{rng.randrange(urls)}", "bytes": rng.randrange(40),
              "user": f"v{rng.randrange(9)}"} for i in range(per_epoch)]
            for e in range(epochs)]


def _run(spark, tmp_path, raw, name="w"):
    """Run ``raw`` epoch by epoch, checking every result: (committed state, the
    stage's in-memory state, windows checked)."""
    df = Dataflow("many")
    df.source("log", "ts bigint, host string, url string, bytes bigint, user string")
    add_window(df, from_sql(name, WINDOW, eviction=Eviction(deadline=0, lateness=8)))
    program = df.stages[name].program
    home = tmp_path / "home"
    checked = 0
    with Controller(str(home), df, spark=spark, num_partitions=2) as c:
        for e, batch in enumerate(raw, 1):
            c.ingest("log", [write(tmp_path, batch)])
            c.run()
            checked += check_epoch(c, name, e, raw, program.plan.width)
    return StateDir(Home(home).stage(name)).current().state, program._cache, checked


def test_the_driver_keeps_no_group_on_the_executors_store(spark, tmp_path):
    spark.conf.set(config.WINDOW_STORE.name, "executors")
    try:
        few, few_ws, checked_few = _run(spark, tmp_path / "few", _log(urls=20))
        many, many_ws, checked_many = _run(spark, tmp_path / "many", _log(urls=5000))
    finally:
        spark.conf.unset(config.WINDOW_STORE.name)
    assert checked_few and checked_many
    for state, ws in ((few, few_ws), (many, many_ws)):
        assert state["store"] == "executors"
        assert ws.cells == {} and all(e.rows == [] for e in ws.emitted.values())
        assert all(name.startswith("cells-") and not name.endswith(".parquet")
                   for name in state["cell_files"])
    # 250 times the groups: the same per-(source, pane) entries, the same size of state
    for key in ("records", "progress", "frontier", "cell_files", "result_files"):
        assert len(few[key]) == len(many[key]), key
    assert len(json.dumps(many)) < 1.2 * len(json.dumps(few))


def test_auto_puts_a_stage_too_big_for_the_driver_on_the_executors(
        spark, tmp_path):
    raw = _log(urls=50, epochs=2)
    spark.conf.set(config.DRIVER_EPOCH_ROWS.name, str(len(raw[0]) - 1))
    try:
        state, _, checked = _run(spark, tmp_path / "big", raw)
    finally:
        spark.conf.unset(config.DRIVER_EPOCH_ROWS.name)
    assert state["store"] == "executors" and checked
    state, _, checked = _run(spark, tmp_path / "small", raw)
    assert state["store"] == "driver" and checked
