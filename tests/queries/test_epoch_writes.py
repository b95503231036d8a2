"""How a query epoch writes its files: table files in the bucket Spark's own bucketing puts
their rows in, and the same changes and state whichever way they are written (by the driver
or by Spark, concurrently or one after another)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata import Dataflow
from strata.config import QUERY_DRIVER_ROWS
from strata.controller.controller import Controller
from strata.queries import add_query
from strata.queries.arrow.rows import Rows
from strata.queries.spark import frames
from strata.queries.spark.tables import QueryTables
from strata.storage.home import StageLayout
from tests.helpers import session_confs


def _bucket_of_rows(files: list[str]) -> dict[int, int]:
    """Row id ``v`` -> the bucket number in the name of the file holding it."""
    out = {}
    for f in files:
        bucket = int(re.search(r"_(\d+)\.c000", Path(f).name).group(1))
        for v in pq.read_table(f, columns=["v"]).column("v").to_pylist():
            out[v] = bucket
    return out


@pytest.mark.parametrize("mode", ["replace", "append"])  # written by Spark; by the driver
def test_table_files_are_in_sparks_own_buckets(spark, tmp_path, mode):
    n = 4
    df = spark.range(2000).selectExpr(
        "named_struct('k', id % 97, 's', cast(id % 13 AS string)) AS _g", "id AS v")
    df.write.bucketBy(n, "_g").option("path", str(tmp_path / "ref")).saveAsTable(
        f"strata_test_bucket_reference_{mode}")
    spark.sql(f"DROP TABLE strata_test_bucket_reference_{mode}")
    reference = _bucket_of_rows([str(p) for p in (tmp_path / "ref").glob("part-*")])

    tables = QueryTables(spark, StageLayout(str(tmp_path / "state"), "t"), {}, n, "token")
    tables.stage("t", df.repartition(3), ["_g"], mode)  # rows not yet in bucket order
    for write in tables.writes():
        write()
    files = tables.commit_files()["t"]["files"]
    assert _bucket_of_rows(files) == reference
    assert len(set(reference.values())) == n


def test_tables_the_driver_writes_stay_in_its_file_cache(spark, tmp_path, monkeypatch):
    """Rows the driver holds are written with pyarrow and kept in the driver's file cache
    under the names their files have once committed, so the next epoch in the driver
    reads them from memory; what it keeps is what the files hold."""
    from pyspark.sql.types import LongType, StructField, StructType

    from strata.storage import increments
    from strata.storage.table_cache import TableCache

    cache = TableCache(64 << 20)
    monkeypatch.setattr(increments, "FILE_CACHE", cache)
    monkeypatch.setattr("strata.queries.spark.tables.FILE_CACHE", cache)  # its moves
    rows = pa.table({"_g": pa.array([i % 37 for i in range(500)], pa.int64()),
                     "v": pa.array(range(500), pa.int64())})
    schema = StructType([StructField("_g", LongType()), StructField("v", LongType())])
    tables = QueryTables(spark, StageLayout(str(tmp_path / "state"), "t"), {}, 4, "token")
    tables.stage("t", Rows.of_arrow(spark, rows, schema), ["_g"], "replace")
    for write in tables.writes():
        write()
    files = tables.commit_files()["t"]["files"]
    assert len(files) == 4 and set(cache) == set(files)  # one file per bucket
    for f in files:
        assert cache.get(f).to_pylist() == pq.read_table(f).to_pylist()
    assert sum(cache.get(f).num_rows for f in files) == 500


def _run(spark, home: Path) -> tuple[list, list, list]:
    df = Dataflow("w")
    df.source("R", "k bigint, x bigint")
    df.source("S", "k bigint, v bigint")
    add_query(df, "j", "SELECT R.x, sum(S.v) AS s, count(*) AS n FROM R JOIN S ON R.k = S.k "
                       "GROUP BY R.x", keys={"R": ["k"]})
    with Controller(str(home), df, spark=spark, num_partitions=2) as c:
        for e in range(3):
            c.ingest("R", [{"k": 10 * e + i, "x": i % 3} for i in range(10)])
            c.ingest("S", [{"k": (7 * i + e) % (10 * e + 10), "v": i} for i in range(30)])
            c.run()
        changes = Counter(tuple(r.values()) for r in c.read_flow("j_changes").to_pylist())
        state = Counter(repr(sorted(r.items())) for r in c.state_records("j"))
        return sorted(changes.items()), sorted(state.items()), c.answer("j").to_pylist()


def test_the_same_changes_and_state_however_written(spark, tmp_path, monkeypatch):
    driver_concurrent = _run(spark, tmp_path / "a")
    monkeypatch.setattr(frames, "WRITE_THREADS", 1)  # one write after another
    with session_confs(spark, {QUERY_DRIVER_ROWS.name: "0"}):  # all written by Spark
        spark_sequential = _run(spark, tmp_path / "b")
    assert driver_concurrent == spark_sequential
    assert driver_concurrent[2]  # an answer


def test_held_lookups_see_upserts_and_deletes_as_the_spark_plan_does(spark, tmp_path):
    """An iteration's lookups and current rows in Arrow (committed table small, overlay
    held) give what the DataFrame plan gives: an upsert overrides its committed row and
    a deleted key (count 0) hides it."""
    from strata.storage.increments import write_table

    ddl = "`_g` struct<k: int>, `v` bigint, `_cnt` bigint"
    committed = pa.table({"_g": [{"k": 1}, {"k": 2}, {"k": 4}], "v": [10, 20, 40],
                          "_cnt": [1, 1, 1]},
                         schema=pa.schema([("_g", pa.struct([("k", pa.int32())])),
                                           ("v", pa.int64()), ("_cnt", pa.int64())]))
    path = str(tmp_path / "committed.parquet")
    write_table(path, committed)
    layout = StageLayout(str(tmp_path / "state"), "t")

    def tables_with(upserts):
        tables = QueryTables(spark, layout, {"g": {"files": [path], "ddl": ddl,
                                                   "lineage": []}}, 2, "token", sweep=False)
        tables.upsert("g", upserts, count="_cnt")
        return tables

    rows = spark.createDataFrame([((2,), 25, 0), ((3,), 30, 1)], ddl)  # 2 deleted, 3 new
    held, plain = tables_with(rows), tables_with(rows)
    plain.overlay["g"] = Rows.of_frame(plain.overlay["g"].frame().where("true"))  # not held
    assert held.overlay["g"].is_held
    assert not plain.overlay["g"].is_held

    def keyed(rows):
        return sorted((r["_g"]["k"], r["v"]) for r in rows.frame().collect())

    assert held.current("g").is_held
    assert keyed(held.current("g")) == keyed(plain.current("g")) == [(1, 10), (3, 30), (4, 40)]
    keys = frames.cut(spark.createDataFrame([((k,),) for k in (1, 2, 3)], "_g struct<k: int>"))[0]
    found = held.lookup("g", keys)
    assert found is not None and found.is_held
    assert keyed(found) == keyed(plain.lookup("g", Rows.of_frame(keys.frame().where("true")))) \
        == [(1, 10), (3, 30)]


def _group_table(home: Path, stage: str) -> dict:
    from strata.storage.home import Home
    from strata.storage.manifest import StateDir

    tables = StateDir(Home(str(home)).stage(stage)).current().state["tables"]
    (entry,) = [t for t in tables.values() if t["lineage"] == ["_g"]]
    return entry


def test_a_group_by_epoch_writes_only_the_groups_it_touched(spark, tmp_path):
    """A general-plan group-by's epoch on Spark appends only the groups of its increment,
    as their new versions (an emptied group as a tombstone); every reader gets the newest
    row per group: the answer, the next epoch in the driver (Arrow) and on Spark; once the
    table has twice the rows it had when last written whole, an epoch rewrites it whole.
    Answers equal DuckDB's after every epoch."""
    from tests.helpers import epochs_in
    from tests.queries.oracle import duckdb_answer, normalized

    sql = "SELECT x, count(*) AS n, sum(y) AS s FROM R GROUP BY x HAVING count(*) > 1"
    df = Dataflow("versions")
    df.source("R", "x bigint, y bigint, _mult bigint")
    add_query(df, "q", sql)
    home, seen = tmp_path / "home", {"R": [], "D": [], "P": []}
    first = [{"x": k, "y": j, "_mult": 1} for k in range(100) for j in range(2)]
    later = [  # 40 groups each: one emptied (both its rows deleted), 39 grow
        [{"x": 90 + e, "y": j, "_mult": -1} for j in range(2)]
        + [{"x": k, "y": e, "_mult": 1} for k in range(39)] for e in range(1, 9)]
    written = []
    with Controller(str(home), df, spark=spark, num_partitions=2) as c:
        for e, rows in enumerate([first, *later], 1):
            with epochs_in(spark, "driver" if e == 4 else "tasks"):
                c.ingest("R", rows)
                seen["R"] += rows
                c.run()
            got = normalized(tuple(r.values()) for r in c.answer("q").to_pylist())
            assert got == duckdb_answer(sql, seen), e
            entry = _group_table(home, "q")
            if e == 2:  # before a later epoch collects the files it replaces
                fresh = [f for f in entry["files"] if f not in written[0]["files"]]
                stamped = pa.concat_tables([pq.read_table(f) for f in fresh])
            written.append(entry)
    assert "versions" not in written[0]  # the first epoch writes the table whole
    assert written[1]["versions"] and stamped.num_rows == 40  # the touched groups only
    assert set(stamped.column("_v").to_pylist()) == {2}
    assert sorted(stamped.column("_cnt").to_pylist())[0] == 0  # x = 92 is a tombstone
    # the driver's epoch (4) writes the table whole; Spark's epochs after it append again,
    # until one finds twice the rows of the last whole write and rewrites it
    assert "versions" not in written[3] and written[4]["versions"]
    assert any("versions" not in t for t in written[5:]), written


@pytest.mark.parametrize(("sql", "writes"), [
    # the group state and the changes
    ("SELECT x, count(*) AS n, sum(y) AS s FROM R GROUP BY x HAVING count(*) > 1", 2),
    # R is the join's lookup table (insert-only, keyed): the check of its new keys, its
    # new rows, S's rows without a match, the answer's rows and the changes
    ("SELECT R.x, S.y FROM R JOIN S ON R.x = S.x", 5)])
def test_a_bulk_epoch_writes_each_table_and_its_changes_in_one_spark_job(spark, tmp_path,
                                                                       sql, writes):
    """An epoch on Spark's plans with more input records than
    ``spark.strata.query.driverRows`` writes each table and its changes as one Spark job
    each (a lookup table's new keys are checked by one more): none first brings rows to
    the driver to see whether they fit there. Answers equal DuckDB's."""
    from tests.helpers import epoch_jobs, epochs_in
    from tests.queries.oracle import duckdb_answer, normalized

    df = Dataflow("bulk")
    df.source("R", "x bigint, y bigint")
    df.source("S", "x bigint, y bigint")
    add_query(df, "q", sql, keys={"R": ["x"]})  # each R row has an x of its own
    seen: dict[str, list] = {"R": [], "S": []}
    jobs = []
    # as at bulk sizes: no broadcast join (a job of its own) for these small sides
    confs = {QUERY_DRIVER_ROWS.name: "20", "spark.sql.autoBroadcastJoinThreshold": "-1"}
    with session_confs(spark, confs), epochs_in(spark, "tasks"), \
            Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for e in range(3):
            jobs.append(epoch_jobs(spark, c, {
                "R": [{"x": 50 * e + i, "y": i % 7} for i in range(50)],
                "S": [{"x": (11 * i + e) % (50 * e + 50), "y": i} for i in range(50)]}, seen))
            got = normalized(tuple(r.values()) for r in c.answer("q").to_pylist())
            assert got == duckdb_answer(sql, seen, {"R": ["x", "y"], "S": ["x", "y"]}), e
    assert jobs[1:] == [writes, writes], jobs
