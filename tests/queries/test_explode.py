"""Arrays turned into rows (``LATERAL VIEW [OUTER] explode``, ``explode`` in ``SELECT``,
``Relation.explode``): maintained over increments with deletes, equal to DuckDB's
``unnest`` over all rows so far; in a query series equal to DuckDB over each window."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from strata import Dataflow
from strata.controller.controller import Controller
from strata.queries import QueryError, add_query, table
from strata.queries.arrow.rows import Rows
from strata.queries.front.sql import parse_sql
from strata.queries.plan.algebra import Explode
from strata.queries.plan.expressions import col
from strata.queries.spark.explode import arrow_rows, spark_rows
from strata.series import Series, add_series, series_stage_name
from strata.series.normalize import explain
from tests.helpers import epochs_in
from tests.queries.oracle import check_history, normalized

DOCS = "id bigint, text string, tags array<string>, _mult bigint"
KINDS = "id bigint, grp string, _mult bigint"  # a dimension keyed by id
UNNESTED = "(SELECT id, unnest(tags) AS tag FROM docs)"

# name -> (strata SQL, DuckDB SQL)
QUERIES = {
    "tag_counts": (
        "SELECT tag, count(*) AS n, sum(id) AS s FROM docs "
        "LATERAL VIEW explode(tags) t AS tag WHERE id > 0 GROUP BY tag",
        f"SELECT tag, count(*) AS n, sum(id) AS s FROM {UNNESTED} WHERE id > 0 GROUP BY tag"),
    "word_count": (  # split is a Spark expression: its explode runs in Spark
        "SELECT word, count(*) AS n FROM docs "
        "LATERAL VIEW explode(split(text, ' ')) w AS word GROUP BY word",
        "SELECT word, count(*) AS n FROM (SELECT unnest(string_split(text, ' ')) AS word "
        "FROM docs) GROUP BY word"),
    "outer_rows": (  # a NULL or empty array keeps its row once, with a NULL tag
        "SELECT id, tag FROM docs LATERAL VIEW OUTER explode(tags) t AS tag "
        "WHERE tag IS NULL OR tag <> 'b'",
        "SELECT id, tag FROM docs LEFT JOIN LATERAL (SELECT unnest(docs.tags) AS tag) t "
        "ON true WHERE tag IS NULL OR tag <> 'b'"),
    "select_explode": (
        "SELECT id, explode(tags) AS tag FROM docs WHERE id % 2 = 0",
        "SELECT id, unnest(tags) AS tag FROM docs WHERE id % 2 = 0"),
    "positions": (  # posexplode: each element's 0-based index; a filter on it stays above
        "SELECT id, p, tag FROM docs LATERAL VIEW OUTER posexplode(tags) t AS p, tag "
        "WHERE p IS NULL OR p < 2",
        "SELECT id, p, tag FROM docs LEFT JOIN LATERAL (SELECT unnest(docs.tags) AS tag, "
        "unnest(range(len(docs.tags))) AS p) t ON true WHERE p IS NULL OR p < 2"),
    "joined_then_exploded": (
        "SELECT kinds.grp, tag, count(*) AS n FROM docs JOIN kinds ON docs.id = kinds.id "
        "LATERAL VIEW explode(docs.tags) t AS tag GROUP BY kinds.grp, tag",
        f"SELECT kinds.grp, tag, count(*) AS n FROM {UNNESTED} d JOIN kinds "
        "ON d.id = kinds.id GROUP BY kinds.grp, tag"),
}

texts = st.one_of(st.none(), st.lists(st.sampled_from(["to", "be", "or", "not", ""]),
                                      max_size=4).map(" ".join))
tag_lists = st.one_of(st.none(), st.lists(st.one_of(st.none(), st.sampled_from("abc")),
                                          max_size=3))
docs = st.lists(st.tuples(st.integers(0, 5), texts, tag_lists), min_size=1, max_size=8)


@st.composite
def histories(draw, n_increments=3):
    """Increments of docs (deletes remove rows present at the time) and kinds (one row
    per id; an update deletes the old row)."""
    bag: Counter = Counter()
    kinds: dict[int, str] = {}
    out = []
    for _ in range(n_increments):
        inc = [(i, t, tuple(g) if g is not None else None, 1) for i, t, g in draw(docs)]
        present = sorted((k for k, n in bag.items() if n > 0), key=repr)
        if present:
            inc += [(*k, -1) for k in draw(st.lists(st.sampled_from(present), max_size=3,
                                                      unique=True))]
        for i, t, g, m in inc:
            bag[(i, t, g)] += m
        k = []
        for i in draw(st.lists(st.integers(0, 5), max_size=3, unique=True)):
            if i in kinds:
                k.append({"id": i, "grp": kinds[i], "_mult": -1})
            kinds[i] = draw(st.sampled_from("xy"))
            k.append({"id": i, "grp": kinds[i], "_mult": 1})
        out.append({"docs": [{"id": i, "text": t, "tags": list(g) if g is not None else None,
                              "_mult": m} for i, t, g, m in inc], "kinds": k})
    return out


def duckdb_answer(sql: str, seen: dict[str, list[dict]]) -> list[tuple]:
    """DuckDB's answer over the bags the records so far describe."""
    con = duckdb.connect()
    for name, cols in {"docs": ["id", "text", "tags"], "kinds": ["id", "grp"]}.items():
        bag: Counter = Counter()
        for r in seen[name]:
            bag[tuple(tuple(v) if isinstance(v, list) else v for v in
                      (r[c] for c in cols))] += r["_mult"]
        rows = [[list(v) if isinstance(v, tuple) else v for v in k]
                for k, n in bag.items() for _ in range(n)]
        frame = pa.Table.from_pandas(pd.DataFrame(rows, columns=cols), preserve_index=False) \
            if rows else pa.table({c: pa.array([], pa.list_(pa.string()) if c == "tags"
                                               else pa.int64() if c == "id" else pa.string())
                                   for c in cols})
        con.register(f"{name}_rows", frame)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_rows")
    return normalized(con.execute(sql).fetchall())


def build() -> Dataflow:
    df = Dataflow("exploded")
    df.source("docs", DOCS)
    df.source("kinds", KINDS)
    for name, (sql, _) in QUERIES.items():
        add_query(df, name, sql, keys={"kinds": ["id"]})
    return df


_WHERE = itertools.cycle(["driver", "tasks"])


@settings(max_examples=2, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=histories())
def test_explode_queries_agree_with_duckdb(spark, tmp_path_factory, history):
    """Every query after every increment, epochs in the driver (Arrow) and as Spark tasks
    in turn."""
    with epochs_in(spark, next(_WHERE)):
        check_history(spark, tmp_path_factory.mktemp("explode"), build(), history,
                      {name: ddb for name, (_, ddb) in QUERIES.items()}, duckdb_answer)


ROWS = StructType([StructField("id", LongType()), StructField("tags", ArrayType(StringType())),
                   StructField("_mult", LongType(), False)])


@pytest.mark.parametrize("outer", [False, True])
@pytest.mark.parametrize("position", [None, "p"])
def test_arrow_explode_equals_spark_explode(spark, outer, position):
    """Held rows are exploded in Arrow (no Spark job) into the rows and types Spark's
    explode (posexplode) gives: NULL and empty arrays, NULL elements, multiplicities
    kept, positions from 0 in each array (of a sliced array too)."""
    data = pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()),
                     "tags": pa.array([["a", "b", "a"], None, [], ["c", None], ["d"]],
                                      pa.list_(pa.string())),
                     "_mult": pa.array([1, 1, 2, -1, 1], pa.int64())})
    held = Rows.of_arrow(spark, pa.concat_tables([data.slice(0, 2), data.slice(2)]), ROWS)
    node = Explode(parse_sql("SELECT id, tags FROM docs",
                             {"docs": {"id": "bigint", "tags": "array<string>"}}).root,
                   "tag", col("tags"), outer, position)
    fast = arrow_rows(node, held)
    assert fast is not None  # the array is a column of held rows: Arrow ran it
    slow = spark_rows(node, spark.createDataFrame(data.to_pandas(), ROWS))
    assert fast.schema == slow.schema
    want = [(1, ["a", "b", "a"], 0, "a", 1), (1, ["a", "b", "a"], 1, "b", 1),
            (1, ["a", "b", "a"], 2, "a", 1), (4, ["c", None], 0, "c", -1),
            (4, ["c", None], 1, None, -1), (5, ["d"], 0, "d", 1)]
    if outer:
        want += [(2, None, None, None, 1), (3, [], None, None, 2)]
    if position is None:
        want = [(i, t, tag, m) for i, t, _, tag, m in want]
    for frame in (fast.frame(), slow):
        assert sorted(map(tuple, frame.collect()), key=repr) == sorted(want, key=repr)


def test_python_api_explodes_as_sql_does(spark, tmp_path):
    df = Dataflow("api")
    df.source("docs", DOCS)
    add_query(df, "api", table("docs").where("id > 0").explode("split(text, ' ')", "word")
              .where("word <> ''").group_by("word").agg(n="count(*)"))
    add_query(df, "sql", "SELECT word, count(*) AS n FROM docs LATERAL VIEW "
                         "explode(split(text, ' ')) w AS word WHERE id > 0 AND word <> '' "
                         "GROUP BY word")
    add_query(df, "projected", table("docs").select_("id", "tags").explode("tags", "tag",
                                                                          outer=True))
    recs = [{"id": 1, "text": "to be or not to be", "tags": ["a"], "_mult": 1},
            {"id": 0, "text": "skipped", "tags": None, "_mult": 1},
            {"id": 2, "text": "be  quick", "tags": [], "_mult": 1}]
    with Controller(str(tmp_path), df, spark=spark, num_partitions=2) as c:
        c.ingest("docs", recs)
        c.run()
        api = sorted(map(tuple, (r.values() for r in c.answer("api").to_pylist())))
        sql = sorted(map(tuple, (r.values() for r in c.answer("sql").to_pylist())))
        projected = c.answer("projected").to_pylist()
    assert api == sql == [("be", 3), ("not", 1), ("or", 1), ("quick", 1), ("to", 2)]
    assert sorted((r["id"], r["tag"]) for r in projected) == [(0, None), (1, "a"), (2, None)]


@pytest.mark.parametrize(("sql", "says"), [
    ("SELECT posexplode(tags) FROM docs", "posexplode in SELECT is not supported"),
    ("SELECT * FROM docs LATERAL VIEW posexplode(tags) x AS p", "alias AS position, name"),
    ("SELECT explode(text) FROM docs", "needs an array, not string"),
    ("SELECT explode(tags) AS t, count(*) AS n FROM docs", "explode in a subquery"),
    ("SELECT explode(tags) AS a, explode(tags) AS b FROM docs", "one per query"),
    ("SELECT * FROM docs LATERAL VIEW explode(tags) x AS p, v", "LATERAL VIEW [OUTER]"),
    ("SELECT * FROM docs LATERAL VIEW explode(tags) x AS id", "repeat a name"),
])
def test_unsupported_explodes_are_refused_with_what_to_do(sql, says):
    flows = {"docs": {"id": "bigint", "text": "string", "tags": "array<string>"}}
    with pytest.raises(QueryError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_sql(sql, flows)


def test_filters_on_the_row_run_before_it_is_repeated():
    """A condition that does not read the element is pushed below the explode."""
    from strata.queries.plan.incremental import derive

    flows = {"docs": {"id": "bigint", "tags": "array<string>"}}
    root = derive(parse_sql("SELECT id, tag FROM docs LATERAL VIEW explode(tags) t AS tag "
                            "WHERE id > 1 AND tag <> 'a'", flows)).root
    assert isinstance(root.child, Explode)
    assert "`tag` <> 'a'" in str(root) and "`id` > 1" in str(root.child.child)


SEGMENT = pa.schema([("id", pa.int64()), ("text", pa.string()),
                     ("tags", pa.list_(pa.string()))])


def test_explode_series_equal_duckdb_over_each_window(spark, tmp_path):
    """A tag count over the last two segments keeps a partial view per segment (the
    explode runs once per segment), as does each side of an INTERSECT ALL of today's and
    yesterday's tags; every occurrence equals DuckDB over the raw window."""
    rng = random.Random(5)
    segments = [pa.Table.from_pylist([
        {"id": rng.randrange(6), "text": " ".join(rng.choices(["to", "be", "or"], k=2)),
         "tags": rng.choice([None, [], rng.choices("abc", k=rng.randrange(1, 4))])}
        for _ in range(rng.choice([1, 12]))], SEGMENT) for _ in range(4)]
    series = [
        Series("tags2", "SELECT tag, count(*) AS n FROM docs LATERAL VIEW explode(tags) t "
                        "AS tag GROUP BY tag", {"docs": "docs[-1:0]"}, 1),
        Series("words", "SELECT id, word FROM docs LATERAL VIEW explode(split(text, ' ')) "
                        "w AS word WHERE id > 2", {"docs": "docs"}, 1),
        Series("tags_again", "SELECT tag FROM today LATERAL VIEW explode(tags) t AS tag "
                             "INTERSECT ALL SELECT tag FROM yesterday LATERAL VIEW "
                             "explode(tags) t AS tag", {"today": "docs", "yesterday": "docs[-1]"},
               1),
    ]
    df = Dataflow("docs")
    df.source("docs", "id bigint, text string, tags array<string>")
    add_series(df, "docs", series)
    program = df.stages[series_stage_name("docs")].program
    plan = program.plans["tags2"]
    assert plan.decomposed and [v.kind for v in plan.view_list()] == ["partial"], explain(plan)
    assert [v.kind for v in program.plans["words"].view_list()] == ["rows"]
    duck = {"tags2": "SELECT tag, count(*) AS n FROM (SELECT unnest(tags) AS tag FROM docs) "
                     "GROUP BY tag",
            "words": "SELECT id, unnest(string_split(text, ' ')) AS word FROM docs "
                     "WHERE id > 2",
            "tags_again": "SELECT unnest(tags) AS tag FROM today INTERSECT ALL "
                          "SELECT unnest(tags) AS tag FROM yesterday"}
    with Controller(str(tmp_path / "home"), df, spark=spark, num_partitions=2) as c:
        for i, seg in enumerate(segments):
            path = tmp_path / f"seg-{i}.parquet"
            pq.write_table(seg, path)
            c.ingest("docs", [str(path)])
        c.run()
        for s in series:
            schedule = program.plans[s.name].schedule
            got = {e: c.read_flow(s.name, e) for e, _ in c.stored_increments(s.name)}
            assert sorted(got) == schedule.occurrences(range(1, len(segments) + 1))
            for n, answer in got.items():
                con = duckdb.connect()
                for name, idx in schedule.window(n).items():
                    con.register(name, pa.concat_tables([segments[j - 1] for j in idx]))
                want = normalized(con.execute(duck[s.name]).fetchall())
                assert normalized(tuple(r.values()) for r in answer.to_pylist()) == want, \
                    (s.name, n)
