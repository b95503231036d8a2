"""Joins with a lookup table: when one side is insert-only with a declared key (a
dimension), the other side's table keeps only its rows that have no match yet. Answers
equal DuckDB's after every epoch (rows arriving before their match, deletes of matched
and of waiting rows, the lookup side on either side of the JOIN, left and right joins
with the padded rows), in the driver and as Spark tasks; the waiting table holds
exactly the unmatched rows; a repeated key is refused with the flow and key named,
and nothing of the epoch is committed."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from strata import Dataflow
from strata.controller.controller import Controller
from strata.model.errors import EpochError
from strata.queries import add_query, derive, parse_sql
from strata.queries.spark import lookup_join
from strata.queries.spark.frames import local_rows
from tests.helpers import epochs_in
from tests.queries.oracle import duckdb_answer, normalized

FLOWS = {"R": {"x": "bigint", "y": "bigint", "_mult": "bigint"},
         "D": {"id": "bigint", "grp": "string"},
         "E": {"id": "bigint", "grp": "string", "_mult": "bigint"}}
KEYS = {"D": ["id"], "E": ["id"]}
TABLES = {"R": ["x", "y"], "D": ["id", "grp"]}
QUERIES = {
    "by_grp": "SELECT D.grp, sum(R.y) AS s, count(*) AS c FROM R JOIN D ON R.x = D.id "
              "GROUP BY D.grp",
    "pairs": "SELECT D.id, D.grp, R.y FROM D JOIN R ON D.id = R.x WHERE R.y > 1",
    "padded": "SELECT R.x, R.y, D.grp FROM R LEFT JOIN D ON R.x = D.id",
    "right_join": "SELECT D.grp, count(*) AS c, sum(R.y) AS s FROM D RIGHT JOIN R "
                  "ON R.x = D.id GROUP BY D.grp",
}
# each query's table of R rows (the lookup table D's other side)
WAITING = {"by_grp": "join0_left", "pairs": "join0_right", "padded": "join0_left",
           "right_join": "join0_left"}


def test_an_insert_only_keyed_side_is_the_lookup_table():
    plans = {sql: derive(parse_sql(sql, FLOWS, KEYS)) for sql in (
        QUERIES["by_grp"], QUERIES["pairs"],
        "SELECT E.grp, R.y FROM R JOIN E ON R.x = E.id",  # E deletes: no lookup side
        QUERIES["padded"],
        "SELECT D.grp, R.y FROM D LEFT JOIN R ON R.x = D.id")}  # D's padding needs R's rows
    sides = [next(iter(p.joins.values())).lookup for p in plans.values()]
    assert sides == ["right", "left", None, "right", None]
    assert "the changes of the waiting rows" in plans[QUERIES["padded"]].explain()
    assert "join0_right: the right rows, a lookup table" in plans[QUERIES["by_grp"]].explain()
    assert "join0_left: only the left rows that match none" in \
        plans[QUERIES["by_grp"]].explain()


def history() -> list[dict[str, list[dict]]]:
    """R rows arriving before their D row (waiting), D rows matching them later, deletes
    of matched and of waiting R rows, an R row and its D row in the same epoch, and an R
    row with a NULL key."""
    r0 = [{"x": i % 6, "y": i, "_mult": 1} for i in range(12)]
    r1 = [{"x": 6, "y": 20, "_mult": 1}, {"x": 7, "y": 21, "_mult": 1},
          {**r0[0], "_mult": -1}, {**r0[5], "_mult": -1}]  # x 0 matched, x 5 waiting
    r2 = [{"x": 8, "y": 30, "_mult": 1}, {**r0[4], "_mult": -1}, {"x": 3, "y": 9, "_mult": 1},
          {"x": None, "y": 50, "_mult": 1}]  # matches nothing, ever
    r3 = [{"x": 5, "y": 40, "_mult": 1}, {**r1[1], "_mult": -1}]
    d = [[{"id": i, "grp": "ab"[i % 2]} for i in (0, 1, 2)],
         [{"id": 3, "grp": "c"}, {"id": 6, "grp": "a"}],
         [{"id": 4, "grp": "b"}, {"id": 8, "grp": "c"}],
         [{"id": 5, "grp": "a"}, {"id": 7, "grp": "d"}]]
    return [{"R": r, "D": dd} for r, dd in zip((r0, r1, r2, r3), d, strict=True)]


def bag(records: list[dict], cols: list[str]) -> Counter:
    out: Counter = Counter()
    for r in records:
        out[tuple(r[c] for c in cols)] += r.get("_mult", 1)
    return +out


@pytest.mark.parametrize("where", ["driver", "tasks"])
def test_lookup_joins_equal_duckdb_and_keep_only_waiting_rows(spark, tmp_path, where):
    df = Dataflow("lookup")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("D", "id bigint, grp string")
    for name, sql in QUERIES.items():
        add_query(df, name, sql, keys={"D": ["id"]}, vectorized=False)
    seen: dict[str, list[dict]] = defaultdict(list)
    with epochs_in(spark, where), Controller(str(tmp_path), df, spark=spark,
                                             num_partitions=2) as c:
        for e, inc in enumerate(history(), 1):
            for flow, recs in inc.items():
                c.ingest(flow, recs)
                seen[flow] += recs
            c.run()
            for name, sql in QUERIES.items():
                got = normalized(tuple(r.values()) for r in c.answer(name).to_pylist())
                assert got == duckdb_answer(sql, seen, TABLES), (where, name, e)
            ids = {r["id"] for r in seen["D"]}
            waiting = bag([r for r in seen["R"] if r["x"] not in ids and r["x"] is not None],
                          ["x", "y"])
            for name, table in WAITING.items():
                rows = [r for r in c.state_records(name) if r["_table"] == table]
                kept = Counter()
                for r in rows:
                    kept[(r["R__x"], r["R__y"])] += r["_mult"]
                assert +kept == waiting, (where, name, e)


@pytest.mark.parametrize("where", ["driver", "tasks"])
def test_a_repeated_lookup_key_is_refused_naming_flow_and_key(spark, tmp_path, where):
    df = Dataflow("lookup_dup")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("D", "id bigint, grp string")
    add_query(df, "by_grp", QUERIES["by_grp"], keys={"D": ["id"]}, vectorized=False)
    first = history()[0]
    with epochs_in(spark, where), Controller(str(tmp_path), df, spark=spark,
                                             num_partitions=2) as c:
        c.ingest("R", first["R"])
        c.ingest("D", first["D"])
        c.run()
        before = normalized(tuple(r.values()) for r in c.answer("by_grp").to_pylist())
        c.ingest("D", [{"id": 9, "grp": "z"}, {"id": 2, "grp": "z"}])
        with pytest.raises(EpochError) as err:
            c.run()
        assert err.value.flow == "D" and err.value.key == {"id": 2}
        assert err.value.stage == "by_grp" and err.value.epoch == 2
        assert "declares (id) unique" in str(err.value)
        after = normalized(tuple(r.values()) for r in c.answer("by_grp").to_pylist())
        assert after == before
        assert c.catalog.stage_row("by_grp").epochs == 1


def test_join_tables_another_state_format_wrote_are_refused(spark, tmp_path):
    """A home whose join tables an earlier strata wrote (whole rows of both sides, no
    format in the state) is refused with what to do, not read as this format's."""
    df = Dataflow("lookup_format")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("D", "id bigint, grp string")
    add_query(df, "by_grp", QUERIES["by_grp"], keys={"D": ["id"]}, vectorized=False)
    first, second = history()[:2]
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        for flow, recs in first.items():
            c.ingest(flow, recs)
        c.run()
        [current] = tmp_path.rglob("by_grp/CURRENT")
        manifest = current.parent / f"manifest-{int(current.read_text()):08d}.json"
        snap = json.loads(manifest.read_text())
        assert snap["state"].pop("format") == 2
        manifest.write_text(json.dumps(snap))  # as format 1 left it
        for flow, recs in second.items():
            c.ingest(flow, recs)
        with pytest.raises(EpochError) as err:
            c.run()
        assert err.value.stage == "by_grp" and err.value.epoch == 2
        assert "join0_left, join0_right" in str(err.value)
        assert "state format 1" in str(err.value) and "new home" in str(err.value)
        assert c.catalog.stage_row("by_grp").epochs == 1


def test_new_rows_that_all_find_their_match_write_no_join_table(spark, tmp_path):
    """On Spark's path, an epoch whose new rows all match a stored lookup row (and whose
    lookup side is quiet) leaves both join tables' files as they were: nothing waits, so
    nothing is written. A row without its match is written to the waiting table."""
    df = Dataflow("lookup_quiet")
    df.source("R", "x bigint, y bigint, _mult bigint")
    df.source("D", "id bigint, grp string")
    add_query(df, "by_grp", QUERIES["by_grp"], keys={"D": ["id"]}, vectorized=False)
    seen: dict[str, list[dict]] = defaultdict(list)

    def epoch(c: Controller, inc: dict[str, list[dict]]) -> dict[str, list[str]]:
        for flow, recs in inc.items():
            c.ingest(flow, recs)
            seen[flow] += recs
        c.run()
        got = normalized(tuple(r.values()) for r in c.answer("by_grp").to_pylist())
        assert got == duckdb_answer(QUERIES["by_grp"], seen, TABLES)
        [current] = tmp_path.rglob("by_grp/CURRENT")
        manifest = current.parent / f"manifest-{int(current.read_text()):08d}.json"
        tables = json.loads(manifest.read_text())["state"]["tables"]
        return {t: tables[t]["files"] for t in ("join0_left", "join0_right")}

    d = [{"id": i, "grp": "ab"[i % 2]} for i in range(3)]
    with epochs_in(spark, "tasks"), Controller(str(tmp_path), df, spark=spark,
                                               num_partitions=2) as c:
        first = epoch(c, {"D": d, "R": [{"x": 9, "y": 1, "_mult": 1}]})
        matched = epoch(c, {"R": [{"x": i % 3, "y": i, "_mult": 1} for i in range(8)]})
        assert matched == first
        unmatched = epoch(c, {"R": [{"x": 1, "y": 5, "_mult": 1},
                                    {"x": 10, "y": 6, "_mult": 1}]})
        assert unmatched["join0_right"] == first["join0_right"]
        assert len(unmatched["join0_left"]) > len(first["join0_left"])
        rows = [r for r in c.state_records("by_grp") if r["_table"] == "join0_left"]
        assert bag(rows, ["R__x", "R__y"]) == Counter({(9, 1): 1, (10, 6): 1})


def test_waiting_rows_are_known_to_be_none_when_every_key_is_known(spark):
    """:func:`lookup_join.waiting` answers "nothing waits" as a frame Spark's optimizer
    knows to be empty (so no job writes it, and the rows are not read again); with a key
    missing it gives exactly the unmatched rows."""
    other = spark.createDataFrame([(1, 10), (2, 20), (2, 21)], "_j0 bigint, y bigint")
    known = spark.createDataFrame([(1,), (2,), (3,)], "_j0 bigint")
    none = lookup_join.waiting(other, known, ["_j0"])
    assert local_rows(none) == 0 and none.columns == other.columns
    some = lookup_join.waiting(other, known.where("_j0 <> 2"), ["_j0"])
    assert sorted(map(tuple, some.collect())) == [(2, 20), (2, 21)]
