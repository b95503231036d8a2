"""A web log from several servers for window tests: records (ts, host, url, bytes,
user) with integer event times, increments in which servers lag, skip or stop, and the
oracle: every window result equals DuckDB's aggregate over exactly the raw records of
the cells its C2 scoreboard says it includes, less the records the stage refuses
because their cells were complete already (``docs/windows.md``, "C2")."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.rows import Rows

# the window loops (random windows, out-of-order arrival, kill -9): over the executors'
# pane store in `make test`, over the driver's too in the slow tier (tests/windows/conftest.py)
LOOP_STORES = pytest.mark.parametrize(
    "store", [pytest.param("driver", marks=pytest.mark.slow), "executors"], indirect=True)

DDL = "ts bigint, host string, url string, bytes bigint, user string"
SCHEMA = pa.schema([("ts", pa.int64()), ("host", pa.string()), ("url", pa.string()),
                    ("bytes", pa.int64()), ("user", pa.string())])
SQL = ("SELECT url, count(*) AS n, sum(bytes) AS total, max(bytes) AS biggest, "
       "count(DISTINCT user) AS users FROM log WHERE bytes > 5 GROUP BY url")


def increments(rng: random.Random, hosts: int, epochs: int, span: int,
               per_epoch: int = 40, late: float = 0.2, silent: float = 0.2) -> list[list[dict]]:
    """Epoch *e* covers event times ``[e·span, (e+1)·span)``; a host is silent in an
    epoch with probability ``silent`` (its records come in a later one: late data)."""
    out: list[list[dict]] = []
    held: dict[str, list[dict]] = {}
    for e in range(epochs):
        batch = []
        for h in (f"h{i}" for i in range(hosts)):
            recs = [{"ts": e * span + rng.randrange(span), "host": h,
                     "url": f"/u{rng.randrange(5)}", "bytes": rng.randrange(40),
                     "user": f"v{rng.randrange(6)}"} for _ in range(per_epoch // hosts)]
            if rng.random() < late and e:  # a few stragglers from the previous epoch
                recs += [{**r, "ts": r["ts"] - span} for r in recs[:2]]
            if rng.random() < silent and e < epochs - 1:
                held.setdefault(h, []).extend(recs)
                continue
            batch += held.pop(h, []) + recs
        out.append(batch)
    return out


def write(tmp: Path, records: list[dict]) -> str:
    path = tmp / f"inc-{len(list(tmp.glob('inc-*')))}.parquet"
    pq.write_table(pa.Table.from_pylist(records, SCHEMA), path)
    return str(path)


def net(c, flow: str, upto: int) -> dict[tuple, Counter]:
    """The flow's rows netted over epochs ≤ ``upto``, per window (start, end)."""
    out: dict[int, Counter] = {}
    for e, _ in c.stored_increments(flow):
        if e > upto:
            continue
        for r in c.read_flow(flow, e).to_pylist():
            m = r.pop("_mult")
            w = (r["window_start"], r["window_end"])
            out.setdefault(w, Counter())[tuple(sorted(r.items()))] += m
    return {w: Counter({k: v for k, v in rows.items() if v}) for w, rows in out.items()}


def last_change(c, flow: str, upto: int) -> dict[tuple, int]:
    """The epoch of each window's last change in ``flow``."""
    out: dict[tuple, int] = {}
    for e, _ in c.stored_increments(flow):
        if e <= upto:
            t = c.read_flow(flow, e)
            for w in zip(t.column("window_start").to_pylist(),
                         t.column("window_end").to_pylist(), strict=True):
                out[w] = e
    return out


COMPLETE = ("data", "empty")


def sealed_before(c, name: str, upto: int, width: int) -> dict[int, int | None]:
    """Per epoch *e* ≤ ``upto``: the end pane of the latest result published complete
    (every cell data or empty) in epochs before *e*."""
    live: dict[tuple, Counter] = {}
    epochs = dict(c.stored_increments(f"{name}_c2"))
    out, sealed = {}, None
    for e in range(1, upto + 1):
        out[e] = sealed
        if e not in epochs:
            continue
        for r in c.read_flow(f"{name}_c2", e).to_pylist():
            m = r.pop("_mult")
            live.setdefault((r["window_start"], r["window_end"]), Counter())[
                tuple(sorted(r.items()))] += m
        for (_, end), cells in live.items():
            rows = [dict(k) for k, m in cells.items() if m > 0]
            if rows and all(r["status"] in COMPLETE for r in rows):
                sealed = end // width if sealed is None else max(sealed, end // width)
    return out


def admitted(frame: pd.DataFrame, sealed: dict[int, int | None], width: int,
             disorder: int, named: tuple[str, ...] = ()) -> list[bool]:
    """Whether the stage aggregates each record (``_epoch``, ``_src``, ``ts``): not if
    its source had sent, in earlier epochs, a time ``disorder`` or more past its pane's
    end, nor if its source is new (not named, nothing earlier) and its pane is before
    the end of a result published complete earlier."""
    latest = frame.groupby(["_epoch", "_src"])["ts"].max().to_dict()  # per epoch, source
    out = []
    for e, s, t in zip(frame["_epoch"], frame["_src"], frame["ts"], strict=True):
        before = [v for (k, src), v in latest.items() if src == s and k < e]
        pane = t // width
        if before:
            out.append(max(before) < (pane + 1) * width + disorder)
        else:
            out.append(s in named or sealed.get(e) is None or pane >= sealed[e])
    return out


def check_epoch(c, name: str, upto: int, raw: list[list[dict]], width: int,
                sql: str = SQL, shed: bool = False, source: str | None = "host",
                disorder: int = 0, named: tuple[str, ...] = ()) -> int:
    """Check every live window result after epoch ``upto``; returns how many. ``source``
    is the column the query's sources are (None: the flow ``log`` is one source);
    ``disorder`` and ``named`` the query's allowed disorder and named sources."""
    results = net(c, f"{name}_windows", upto)
    boards = net(c, f"{name}_c2", upto)
    changed = last_change(c, f"{name}_c2", upto)
    frame = pd.DataFrame([{**r, "_epoch": e + 1} for e, batch in enumerate(raw)
                          for r in batch])
    frame["pane"] = frame["ts"] // width
    frame["_src"] = frame[source] if source else "log"
    frame = frame[admitted(frame, sealed_before(c, name, upto, width), width, disorder,
                           named)]
    checked = 0
    for w, cells in boards.items():
        if not cells:
            continue
        assert all(n == 1 for n in cells.values()), (w, cells)
        seen = frame[frame["_epoch"] <= changed[w]]
        included = set()
        for row in cells:
            r = dict(row)
            key = (r["source"], r["pane_start"] // width)
            n = int(((seen["_src"] == key[0]) & (seen["pane"] == key[1])).sum())
            if not shed:
                assert r["records"] == n, (w, r, n)
            if r["records"]:
                included.add(key)
        mask = [(h, p) in included for h, p in zip(seen["_src"], seen["pane"], strict=True)]
        log = seen[mask][["ts", "host", "url", "bytes", "user"]]  # DuckDB reads it
        want = duckdb.sql(sql).df() if len(log) else pd.DataFrame()
        got = [dict(k) for k, m in results.get(w, Counter()).items() for _ in range(m)]
        if not len(want):
            assert not got, (w, got)
        outputs = list(want.columns) if len(want) else []
        got_rows = Rows(tuple(_norm(r[o]) for o in outputs) for r in got) if outputs \
            else []
        want_rows = Rows(tuple(_norm(v) for v in row) for row in want.itertuples(
            index=False)) if outputs else []
        assert got_rows == want_rows, (w, got_rows, want_rows)
        checked += 1
    return checked


def _norm(v):
    return int(v) if hasattr(v, "item") and isinstance(v.item(), int) else v
