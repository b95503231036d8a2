"""Out-of-order sources: a cell is complete, and final, only once its source's progress
has passed the pane's end by the allowed disorder (``docs/windows.md``, "C2"). A result
whose C2 says every cell is complete is never refined, and equals DuckDB over all the
records of its range; records beyond the allowance are refused and counted."""

from __future__ import annotations

import logging
import random
from collections import Counter

import duckdb
import pandas as pd

from strata import Dataflow
from strata.controller import Controller
from strata.windows import Eviction, add_window, from_sql
from tests.rows import Rows
from tests.windows.weblog import DDL, LOOP_STORES, SQL, admitted, check_epoch, net, write

SPAN, WIDTH, EPOCHS, HOSTS = 6, 3, 6, ("h0", "h1", "h2")
ALLOWED = 3 * SPAN  # three increments late, at most


def _disordered(seed: int) -> tuple[list[list[dict]], int]:
    """Epoch *e* covers times [e·6, (e+1)·6) from every host; 10% of the (host, pane)
    cells (never a host's first) arrive 1–3 increments late. Returns the increments and
    how many cells came late."""
    rng = random.Random(seed)
    out: list[list[dict]] = [[] for _ in range(EPOCHS)]
    delayed = 0
    for e in range(EPOCHS):
        for h in HOSTS:
            for pane in range(e * SPAN // WIDTH, (e + 1) * SPAN // WIDTH):
                recs = [{"ts": pane * WIDTH + rng.randrange(WIDTH), "host": h,
                         "url": f"/u{rng.randrange(4)}", "bytes": rng.randrange(40),
                         "user": f"v{rng.randrange(5)}"} for _ in range(rng.randrange(1, 5))]
                late = rng.randint(1, 3) if e and rng.random() < 0.1 else 0
                delayed += late > 0
                out[min(e + late, EPOCHS - 1)] += recs
    return out, delayed


def _sql(range_: int, slide: int) -> str:
    return SQL.replace("GROUP BY url", f"GROUP BY url, WINDOW(ts, {range_}, {slide}, host)")


def _duckdb(records: list[dict], start: int, end: int) -> Rows:
    log = pd.DataFrame([r for r in records if start <= r["ts"] < end])  # noqa: F841
    want = duckdb.sql(SQL).df()
    return Rows(tuple(int(v) if hasattr(v, "item") and isinstance(v.item(), int) else v
                      for v in row) for row in want.itertuples(index=False))


def _complete_results(c, name: str) -> dict[tuple, tuple[int, list[dict]]]:
    """Each window whose result was published with C2 fraction 1.0: the epoch of that
    result and its rows; asserting no change to the window after it."""
    out: dict[tuple, tuple[int, list[dict]]] = {}
    for e, _ in c.stored_increments(f"{name}_windows"):
        for r in c.read_flow(f"{name}_windows", e).to_pylist():
            w = (r["window_start"], r["window_end"])
            assert w not in out or out[w][0] == e, (
                f"{name}: window {w} was complete in epoch {out[w][0]}, changed in {e}")
            if r["c2_fraction"] == 1.0 and r["_mult"] == 1:
                assert r["c2_complete"] == r["c2_cells"]
                out.setdefault(w, (e, []))[1].append(r)
    return out


def _rows(rows: list[dict]) -> Rows:
    return Rows((r["url"], r["n"], r["total"], r["biggest"], r["users"]) for r in rows)


@LOOP_STORES
def test_complete_results_are_final_under_out_of_order_arrival(spark, store, tmp_path, caplog):
    raw, delayed = _disordered(seed=21)
    assert delayed >= 2
    df = Dataflow("disorder")
    df.source("log", DDL)
    # within the allowance: complete-only results, and early (deadline) ones refined
    add_window(df, from_sql("ok", _sql(6, 3), disorder=ALLOWED, sources=HOSTS))
    add_window(df, from_sql("early", _sql(6, 3), disorder=ALLOWED, sources=HOSTS,
                            eviction=Eviction(deadline=0, lateness=40)))
    # beyond it: the default disorder, 0 (sources in event-time order)
    add_window(df, from_sql("tight", _sql(6, 3), sources=HOSTS))
    metrics: dict[str, list[dict]] = {}
    with caplog.at_level(logging.WARNING, logger="strata.windows.program"), Controller(
            str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for batch in raw:
            c.ingest("log", [write(tmp_path, batch)])
            for r in c.run():
                metrics.setdefault(r.stage, []).append(r.metrics)
        assert check_epoch(c, "early", EPOCHS, raw, WIDTH, disorder=ALLOWED, named=HOSTS)
        everything = [r for batch in raw for r in batch]
        ok = _complete_results(c, "ok")
        # every window whose panes every host has passed by the allowance went out
        # complete, and equals DuckDB over all the records of its range, late ones too
        assert len(ok) >= 4
        for (start, end), (_, rows) in ok.items():
            assert _rows(rows) == _duckdb(everything, start, end), (start, end)
        assert metrics["ok"][-1]["disorder_dropped"] == 0
        early = _complete_results(c, "early")
        assert any(m["windows_refined"] for m in metrics["early"])  # the incomplete ones
        for (start, end), (_, rows) in early.items():
            assert _rows(rows) == _duckdb(everything, start, end), (start, end)

        # beyond the allowance: the late records are refused, counted and logged; the
        # complete results are still final, and equal DuckDB over the records admitted
        frame = pd.DataFrame([{**r, "_epoch": e + 1, "_src": r["host"]}
                              for e, batch in enumerate(raw) for r in batch])
        keep = admitted(frame, {}, WIDTH, 0, HOSTS)
        refused = len(keep) - sum(keep)
        assert refused > 0 and metrics["tight"][-1]["disorder_dropped"] == refused
        kept = frame[keep].to_dict("records")
        tight = _complete_results(c, "tight")
        assert len(tight) >= 8
        assert metrics["tight"][-1]["late_dropped"] == 0  # refused as final, not late
        for (start, end), (_, rows) in tight.items():
            assert _rows(rows) == _duckdb(kept, start, end), (start, end)
        assert any(_duckdb(everything, *w) != _rows(rows) for w, (_, rows) in tight.items())
    warned = [m.getMessage() for m in caplog.records if "'tight'" in m.getMessage()]
    assert warned and all("refused" in m and "allowed disorder (0)" in m for m in warned)
    assert not [m for m in caplog.records if "'ok'" in m.getMessage()]


def test_a_source_first_heard_after_a_complete_result_cannot_change_it(spark, tmp_path):
    """A source neither named nor seen before has its records for panes a complete
    result covered refused: that result's C2 did not list it, and it is final."""
    df = Dataflow("newcomer")
    df.source("log", DDL)
    add_window(df, from_sql("w", _sql(4, 4)))

    def rec(ts: int, host: str) -> dict:
        return {"ts": ts, "host": host, "url": "/a", "bytes": 10, "user": "u"}

    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        c.ingest("log", [write(tmp_path, [rec(t, "h0") for t in (0, 2, 5)])])
        c.run()  # [0, 4) complete: h0 has passed it
        c.ingest("log", [write(tmp_path, [rec(1, "h9"), rec(6, "h9"), rec(9, "h9"),
                                            rec(9, "h0")])])
        report, = c.run()
        assert report.metrics["disorder_dropped"] == 1  # h9's time 1; its 6 is taken
        results = net(c, "w_windows", 2)
    assert [dict(k)["n"] for k in results[(0, 4)]] == [2]  # h0's two, never refined
    assert sorted(dict(k)["n"] for k in results[(4, 8)]) == [2]  # h0's 5 and h9's 6
    assert all(dict(k)["c2_fraction"] == 1.0 for cells in results.values() for k in cells)
    assert Counter(len(v) for v in results.values()) == Counter({1: 2})
