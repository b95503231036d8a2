"""How a query epoch writes its files: table files in the bucket Spark's own bucketing puts
their rows in, and the same changes and state whichever way they are written (by the driver
or by Spark, concurrently or one after another)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from strata import Dataflow
from strata.controller.controller import Controller
from strata.queries import add_query, frames
from strata.queries.tables import QueryTables
from strata.storage.home import StageLayout


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
    monkeypatch.setattr(frames, "DRIVER_ROWS", 0)  # all written by Spark
    monkeypatch.setattr(frames, "WRITE_THREADS", 1)  # one write after another
    spark_sequential = _run(spark, tmp_path / "b")
    assert driver_concurrent == spark_sequential
    assert driver_concurrent[2]  # an answer
