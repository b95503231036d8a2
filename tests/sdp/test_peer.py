"""strata and PySpark's own ``spark-pipelines`` on the same project give the same tables:
the shop example plus the project ``spark-pipelines init`` creates, after each of two
days of appends (SDP recomputes every view; strata changes them by the change)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from strata import sdp
from tests.sdp.shop import copy_project, same, table, write_day

CLI = Path(sys.executable).parent / "spark-pipelines"


def spark_pipelines(project: Path, warehouse: Path) -> None:
    conf = project / "conf"
    conf.mkdir(exist_ok=True)
    # each run a warehouse of its own: a new process has an empty catalog and would
    # refuse a managed table's existing folder
    (conf / "spark-defaults.conf").write_text(f"spark.sql.warehouse.dir file://{warehouse}\n"
                                              "spark.ui.enabled false\n")
    done = subprocess.run([str(CLI), "run", "--spec", str(project / "spark-pipeline.yml")],
                          cwd=project, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable,
                               "SPARK_CONF_DIR": str(conf)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


@pytest.mark.skipif(not CLI.exists(), reason="this PySpark has no spark-pipelines (< 4.1)")
@pytest.mark.parametrize("days", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_strata_and_spark_pipelines_publish_the_same_views(spark, tmp_path, days):
    project = tmp_path / "shop"
    spec = copy_project(project)
    init = tmp_path / "init"
    init.mkdir()
    subprocess.run([str(CLI), "init", "--name", "p"], cwd=init, check=True,
                   capture_output=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    for f in (init / "p" / "transformations").iterdir():  # the template's two views
        (project / "transformations" / f.name).write_text(f.read_text())
    for day in range(1, days + 1):
        write_day(project, day, 1000)
        spark_pipelines(project, tmp_path / f"sdp-{day}")
        plan = sdp.load(spec, warehouse=str(tmp_path / "strata"))
        sdp.refresh(plan, spark)
        names = [v.name for v in plan.views]
        assert len(names) == 8 and {"example_python_materialized_view",
                                    "example_sql_materialized_view"} <= set(names)
        for name in names:
            same(table(tmp_path / "strata" / name), table(tmp_path / f"sdp-{day}" / name),
                 f"{name} after day {day}")
    described = {v["name"]: v for v in sdp.describe(plan)}
    assert not described["example_python_materialized_view"]["incremental"]
    assert "spark.range" in described["example_python_materialized_view"]["why_full"]
    assert sum(v["incremental"] for v in described.values()) == 6
