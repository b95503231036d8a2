"""examples/joinview: the maintained join-aggregate view equals DuckDB running the view's
SQL on the current bags after every increment of inserts and deletes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import duckdb

from strata.controller import Controller
from strata.pipeline import load_dataflow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "joinview"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"joinview_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class DuckView:
    """R and S as change logs in DuckDB; R and S themselves are views expanding each
    (k, value) to its net multiplicity; ``rows()`` runs the pipeline's VIEW_SQL."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.db = duckdb.connect()
        for rel, col in (("r", "a"), ("s", "b")):
            self.db.execute(f"CREATE TABLE {rel}_log (k BIGINT, {col} BIGINT, op INTEGER)")
            self.db.execute(
                f"CREATE VIEW {rel.upper()} AS SELECT t.k, t.{col} FROM (SELECT k, {col}, "
                f"sum(op)::BIGINT AS m FROM {rel}_log GROUP BY k, {col} HAVING sum(op) > 0) t, "
                "range(t.m)")

    def add(self, rel: str, records: list[dict]) -> None:
        col = "a" if rel == "r" else "b"
        if records:
            self.db.executemany(f"INSERT INTO {rel}_log VALUES (?, ?, ?)",
                                [(r["k"], r[col], r["op"]) for r in records])

    def rows(self) -> dict[int, tuple]:
        rows = self.db.sql(self.sql).fetchall()
        return {k: (n, int(total), max_a) for k, n, total, max_a in rows}


def maintained(c: Controller) -> tuple[dict[int, tuple], dict[int, dict]]:
    """The view from the latest record per key in the output, and the latest records."""
    latest: dict[int, dict] = {}
    for rec in c.read_flow("view").to_pylist():  # oldest increment first
        latest[rec["k"]] = rec
    view = {k: (r["n"], r["total"], r["max_a"]) for k, r in latest.items() if not r["deleted"]}
    return view, latest


def test_generator_is_deterministic_and_only_deletes_live_rows(tmp_path):
    gen = _module("generate")
    incs = gen.generate_increments(increments=4, size=30, seed=5)
    assert incs == gen.generate_increments(increments=4, size=30, seed=5)
    for rel, col in (("r", "a"), ("s", "b")):
        bag: dict[tuple, int] = {}
        for inc in incs:
            for rec in inc[rel]:
                row = (rec["k"], rec[col])
                bag[row] = bag.get(row, 0) + rec["op"]
            assert min(bag.values()) >= 0
    assert any(r["op"] < 0 for inc in incs[1:] for r in inc["r"] + inc["s"])
    paths = gen.write_increments(tmp_path, incs)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{rel}-{i:04d}.jsonl" for i in range(1, 5) for rel in "rs")
    assert [json.loads(x) for x in paths[2]["s"].read_text().splitlines()] == incs[2]["s"]


def test_view_matches_duckdb_after_every_increment(spark, tmp_path):
    pipeline = _module("pipeline")
    increments = _module("generate").generate_increments(increments=5, size=40, seed=7)
    duck = DuckView(pipeline.VIEW_SQL)
    df = load_dataflow(str(EXAMPLE / "pipeline.py"))
    disappeared: set[int] = set()
    left: set[int] = set()
    before: dict[int, dict] = {}
    with Controller(tmp_path / "home", df, spark=spark, num_partitions=2) as c:
        previous: dict[int, tuple] = {}
        for i, inc in enumerate(increments, 1):
            for rel in ("r", "s"):
                c.ingest(rel, inc[rel])
                duck.add(rel, inc[rel])
            reports = c.run()
            assert [r.records_in for r in reports] == [
                {"r": len(inc["r"]), "s": len(inc["s"])}]  # one epoch reads both
            expected = duck.rows()
            view, latest = maintained(c)
            assert view == expected, i
            # only changed rows are written; a group that vanished gets a deletion marker
            written = c.read_flow("view", epoch=reports[0].epoch).to_pylist()
            changed = {k for k in set(previous) | set(expected)
                       if previous.get(k) != expected.get(k)}
            assert {r["k"] for r in written} == changed, i
            gone = set(previous) - set(expected)
            assert all(latest[k]["deleted"] and latest[k]["n"] == 0 for k in gone)
            disappeared |= gone
            state = {r["k"]: r for r in c.state_records("maintain")}
            live = {k for rel in ("r", "s") for (k,) in
                    duck.db.sql(f"SELECT DISTINCT k FROM {rel.upper()}").fetchall()}
            assert state.keys() == live, i  # keys whose bags emptied left the state
            left |= set(before) - set(state)
            before = state
            assert c.read_flow("rejects").num_rows == 0
            previous = expected
        assert len(disappeared) >= 2  # whole keys withdrawn (and ones that lost a side)
        assert left  # a key withdrawn from both R and S is gone from the state too

        # deleting a copy that is not there is rejected, not applied
        k = min(previous)
        c.ingest("s", [{"k": k, "b": 10_000, "op": -1}])
        c.run()
        assert c.read_flow("rejects").to_pylist() == [
            {"rel": "s", "k": k, "value": 10_000, "missing": 1}]
        assert maintained(c)[0] == previous
