"""Reading an SDP project: the spec, SQL statements, references, policies (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata.sdp.capture import TracingSession
from strata.sdp.definitions import MATERIALIZED_VIEW, load_definitions, read_sql, statements
from strata.sdp.plan import plan_pipeline
from strata.sdp.spec import PipelineError, load_spec


def project(tmp_path: Path, sql: str, conf: str = "") -> Path:
    (tmp_path / "t").mkdir(parents=True)
    (tmp_path / "t" / "views.sql").write_text(sql)
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"k": [1, 2], "v": [1.0, 2.0]}), data / "a.parquet")
    pq.write_table(pa.table({"id": [1], "name": ["x"]}), tmp_path / "dim.parquet")
    spec = tmp_path / "spark-pipeline.yml"
    spec.write_text(f"name: p\nstorage: st\n{conf}libraries:\n  - glob:\n"
                    "      include: t/**\n")
    return spec


def planned(spec: Path):
    s = load_spec(spec)
    return plan_pipeline(s, load_definitions(s, TracingSession(s.configuration)))


def test_statements_are_split_at_top_level_semicolons_with_their_lines():
    sql = ("-- c\nCREATE MATERIALIZED VIEW a AS SELECT ';' AS s;\n\n"
           "  CREATE TEMPORARY VIEW b\nAS SELECT 1;")
    assert statements(sql) == [("CREATE MATERIALIZED VIEW a AS SELECT ';' AS s", 2),
                               ("CREATE TEMPORARY VIEW b\nAS SELECT 1", 4)]


def test_create_statements_give_kind_properties_and_policy():
    [(_, d)] = read_sql(Path("v.sql"), "CREATE MATERIALIZED VIEW `db`.`m` COMMENT 'c' "
                        "TBLPROPERTIES ('refresh_policy' = 'full', 'x' = 'y') AS SELECT 1 AS o")
    assert (d.name, d.kind, d.properties, d.policy) == (
        "m", MATERIALIZED_VIEW, {"refresh_policy": "full", "x": "y"}, None)
    [(_, d)] = read_sql(Path("v.sql"), "CREATE OR REFRESH MATERIALIZED VIEW m REFRESH POLICY "
                        "INCREMENTAL STRICT AS SELECT 1 AS o")
    assert d.policy == "incremental_strict"


def test_a_plan_maps_sources_to_flows_and_inlines_temporary_views(tmp_path):
    spec = project(tmp_path, """
        CREATE TEMPORARY VIEW big AS SELECT k, v FROM parquet.`data` WHERE v > 1;
        CREATE MATERIALIZED VIEW s AS SELECT k, sum(v) AS t FROM big GROUP BY k;
        CREATE MATERIALIZED VIEW s2 AS SELECT count(*) AS n FROM s;
        CREATE STREAMING TABLE raw AS SELECT * FROM STREAM(parquet.`data`);""")
    plan = planned(spec)
    assert [v.name for v in plan.views] == ["s", "s2", "raw"]
    assert list(plan.sources) == ["data"] and plan.sources["data"].ddl == "k bigint, v double"
    assert plan.view("s").reads == ["data"] and plan.view("s2").reads == ["s"]
    assert all(v.incremental for v in plan.views)
    assert "sum" in plan.view("s").explain
    assert plan.spec.storage == str(tmp_path / "st")  # relative to the spec


def test_auto_falls_back_to_full_and_says_why_strict_refuses_naming_the_operator(tmp_path):
    sql = ("CREATE MATERIALIZED VIEW j AS SELECT a.k, d.name FROM parquet.`data` a "
           "JOIN parquet.`dim.parquet` d ON a.k = d.id;\n"
           "CREATE MATERIALIZED VIEW over_j AS SELECT count(*) AS n FROM j;")
    plan = planned(project(tmp_path, sql))
    assert not plan.view("j").incremental and "join" in plan.view("j").why.lower()
    assert plan.view("over_j").why == "it reads j, refreshed in full"
    keyed = planned(project(tmp_path / "k", sql, "configuration:\n  strata.keys.dim: id\n"))
    assert keyed.view("j").incremental and keyed.view("over_j").incremental
    strict = sql.replace("VIEW j AS", "VIEW j REFRESH POLICY INCREMENTAL STRICT AS")
    with pytest.raises(PipelineError, match=r"views.sql:1: .*'j'.*incremental_strict.*join"):
        planned(project(tmp_path / "s", strict))


@pytest.mark.parametrize("sql, message", [
    ("CREATE MATERIALIZED VIEW a AS SELECT * FROM nowhere", r"views.sql:1: reads 'nowhere'"),
    ("SELECT 1;\nDROP TABLE x", r"views.sql:1: strata reads CREATE"),
    ("CREATE MATERIALIZED VIEW a AS SELECT 1 AS o;\n\nCREATE MATERIALIZED VIEW a AS "
     "SELECT 2 AS o", r"views.sql:3: 'a' is defined twice \(also at views.sql:1\)"),
    ("CREATE MATERIALIZED VIEW a AS SELECT n FROM b;\nCREATE MATERIALIZED VIEW b AS "
     "SELECT n FROM a", r"cycle: a -> b -> a|cycle: b -> a -> b"),
    ("CREATE MATERIALIZED VIEW a AS SELECT FROM WHERE (", r"views.sql:1: the query does "
     "not parse"),
])
def test_a_broken_project_is_refused_naming_file_and_line(tmp_path, sql, message):
    with pytest.raises(PipelineError, match=message):
        planned(project(tmp_path, sql))


@pytest.mark.parametrize("text, message", [
    ("name: p\nlibraries: []\n", "the field 'storage' is missing"),
    ("name: p\nstorage: s\nfoo: 1\n", "unknown field 'foo'"),
    ("name: p\nstorage: s\nconfiguration:\n  a: 1\n", "quote numbers"),
    ("name: p\nstorage: s\nlibraries:\n  - glob:\n      include: t/**/*.sql\n", "folder/\\*\\*"),
])
def test_a_bad_spec_is_refused(tmp_path, text, message):
    (tmp_path / "spark-pipeline.yml").write_text(text)
    with pytest.raises(PipelineError, match=message):
        load_spec(tmp_path / "spark-pipeline.yml").files()


def test_dry_run_and_explain_from_the_shell_name_file_and_line_without_spark(tmp_path):
    from typer.testing import CliRunner

    from strata.cli import app

    runner = CliRunner()
    good = project(tmp_path / "good", "CREATE MATERIALIZED VIEW s AS SELECT k, count(*) AS n "
                                      "FROM parquet.`data` GROUP BY k;")
    done = runner.invoke(app, ["pipelines", "dry-run", "--spec", str(good)])
    assert done.exit_code == 0 and "1 views and tables, 1 incremental" in done.output
    explained = runner.invoke(app, ["pipelines", "explain", "--spec", str(good), "--json"])
    assert explained.exit_code == 0 and '"incremental": true' in explained.output
    bad = project(tmp_path / "bad", "CREATE MATERIALIZED VIEW s AS SELECT 1 AS o;\n\n"
                                    "CREATE MATERIALIZED VIEW t AS SELECT * FROM missing;")
    failed = runner.invoke(app, ["pipelines", "dry-run", "--spec", str(bad)])
    assert failed.exit_code == 1 and "views.sql:3: reads 'missing'" in failed.output
    assert "Traceback" not in failed.output
