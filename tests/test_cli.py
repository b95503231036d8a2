"""The ``strata`` command line, end to end on real files (typer's CliRunner).

The Spark-using tests share the session ``spark`` fixture: ``strata run`` obtains its
session through ``strata.physical.session.get_spark``, which returns the active one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

import strata
from strata.cli import app
from strata.model.dataflow import Dataflow
from strata.model.errors import StrataError
from strata.pipeline import load_dataflow, module_name_for, split_spec
from tests.helpers import epochs_in

HERE = Path(__file__).parent
URLCOUNT = HERE / "pipelines" / "urlcount_pipeline.py"
CYCLE = HERE / "pipelines" / "cycle_pipeline.py"
SAMPLE = Path(strata.__file__).parent / "data" / "sample" / "urls"
DAYS = [SAMPLE / f"day-{i}.jsonl" for i in (1, 2, 3)]

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def ok(*args: object):
    result = invoke(*args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def urls_of(*files: Path) -> list[str]:
    return [json.loads(line)["url"] for f in files for line in f.read_text().splitlines()
            if line.strip()]


def status_of(home: Path) -> dict:
    return json.loads(ok("status", "--home", home, "--json").stdout)


# -- help and version ------------------------------------------------------------------
HELP = {
    (): ["run", "ingest", "status", "show", "export", "graph", "series", "window",
         "--version", "Exit codes"],
    ("run",): ["PIPELINE", "--home", "--master", "--mode", "--partitions", "--until-idle",
               "--follow", "--watch", "--max-epochs", "--poll", "--json", "--traceback",
               "--py-files", "--remote"],
    ("ingest",): ["FLOW", "PATH", "--home", "--format", "--end-frame", "--json",
                  "--from-table", "--sql"],
    ("export",): ["FLOW", "--home", "--out", "--epoch", "--all"],
    ("status",): ["--home", "--json"],
    ("show",): ["FLOW", "--home", "--epoch", "--all", "--format", "--limit", "STAGE.state"],
    ("graph",): ["PIPELINE", "--out", ".png", ".dot"],
    ("series",): ["add", "list", "explain", "show", "drop"],
    ("series", "add"): ["NAME", "SQL", "--home", "--table", "--period", "--replace",
                        "--dry-run", "--json"],
    ("series", "show"): ["NAME", "--occurrence", "--all", "--format", "--limit"],
    ("window",): ["add", "list", "c2"],
    ("window", "add"): ["NAME", "SQL", "WINDOW", "--deadline", "--fidelity",
                        "--failure-timeout", "--lateness", "--source", "--shed-budget",
                        "--shed-kind", "--seed", "--dry-run", "--json"],
    ("window", "c2"): ["NAME", "--window", "--png", "--json"],
    ("query",): ["SQL", "WINDOW"],
}


@pytest.mark.parametrize("command", list(HELP), ids=lambda c: " ".join(c) or "strata")
def test_help_lists_the_options(command):
    result = ok(*command, "--help")
    for word in HELP[command]:
        assert word in result.stdout, (command, word)


def _command_paths(group, path=()):
    """Every command and group of the ``strata`` command, as argument paths."""
    yield path
    for name, sub in getattr(group, "commands", {}).items():
        yield from _command_paths(sub, (*path, name))


def test_no_help_prints_a_flag_as_a_typed_value():
    import typer

    paths = list(_command_paths(typer.main.get_command(app)))
    assert ("series", "correct") in paths and ("window", "c2") in paths
    for path in paths:
        out = ok(*path, "--help").stdout
        for raw in ("<bool>", "BOOLEAN", "<NoneType>"):
            assert raw not in out, (path, raw, out)
    assert "--legend" in ok("graph", "--help").stdout  # a flag pair is still listed


def test_version():
    assert ok("--version").stdout.startswith(f"strata {strata.__version__}")


def test_no_arguments_prints_usage():
    result = invoke()
    assert "Usage" in result.output and "run" in result.output


# -- end to end ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def urlcount_home(spark, tmp_path_factory):
    """A home where URL count ran two epochs over day-1 and day-2 (and the run's JSON)."""
    home = tmp_path_factory.mktemp("cli") / "home"
    first = json.loads(ok("run", URLCOUNT, "--home", home, "--json").stdout)
    assert first["epochs"] == 0 and first["reports"] == []  # registers the flows only
    for n, day in enumerate(DAYS[:2], 1):
        out = json.loads(ok("ingest", "--home", home, "urls", day, "--json").stdout)
        assert out["increment"] == n and out["records"] == 4000
        assert out["consumers"] == ["count"]
    ran = json.loads(ok("run", URLCOUNT, "--home", home, "--json").stdout)
    return home, ran


def test_run_json_reports_the_epochs(urlcount_home):
    _, ran = urlcount_home
    assert ran["epochs"] == 2 and ran["stopped"] == "idle"
    assert [(r["stage"], r["epoch"]) for r in ran["reports"]] == [("count", 1), ("count", 2)]
    assert [r["records_in"] for r in ran["reports"]] == [{"urls": 4000}, {"urls": 4000}]
    assert [r["records_out"]["counts"] for r in ran["reports"]] == [
        len(set(urls_of(DAYS[0]))), len(set(urls_of(DAYS[1])))]


def test_status_json(urlcount_home):
    home, _ = urlcount_home
    info = status_of(home)
    (stage,) = info["stages"]
    assert stage["stage"] == "count" and stage["epochs"] == 2 and stage["mode"] == "direct"
    assert stage["state_bytes"] > 0 and stage["partitions"] >= 1
    (conn,) = info["connectors"]
    assert (conn["flow"], conn["consumer"], conn["queued"], conn["queued_records"]) == (
        "urls", "count", 0, 0)
    (counts,) = info["terminal_flows"]
    assert counts["flow"] == "counts" and counts["increments"] == 2 and counts["epochs"] == [1, 2]
    assert info["unfinished_epochs"] == []


def test_status_table(urlcount_home):
    home, _ = urlcount_home
    out = ok("status", "--home", home).stdout
    for word in ("count", "urls", "counts", "direct", "stages", "queued input"):
        assert word in out


def test_show_all_counts_equal_a_counter(urlcount_home):
    home, _ = urlcount_home
    lines = ok("show", "counts", "--home", home, "--all", "--format", "jsonl").stdout
    latest: dict[str, int] = {}
    epochs = []
    for line in lines.splitlines():  # oldest increment first: later counts win
        rec = json.loads(line)
        latest[rec["url"]] = rec["count"]
        epochs.append(rec["_epoch"])
    assert latest == Counter(urls_of(*DAYS[:2]))
    assert epochs == sorted(epochs) and set(epochs) == {1, 2}


def test_show_one_epoch_and_the_newest(urlcount_home):
    home, _ = urlcount_home
    first = ok("show", "counts", "--home", home, "--epoch", "1", "--format", "jsonl").stdout
    assert {json.loads(x)["url"] for x in first.splitlines()} == set(urls_of(DAYS[0]))
    newest = ok("show", "counts", "--home", home, "--format", "jsonl", "--limit", "7").stdout
    assert len(newest.splitlines()) == 7
    table = ok("show", "counts", "--home", home, "--limit", "3").stdout
    assert "counts, epoch 2" in table and "url" in table and "more" in table


def test_show_state(urlcount_home):
    home, _ = urlcount_home
    out = ok("show", "count.state", "--home", home, "--format", "jsonl").stdout
    state = {r["url"]: r["count"] for r in map(json.loads, out.splitlines())}
    assert state == Counter(urls_of(*DAYS[:2]))
    assert "state of count after epoch 2" in ok("show", "count.state", "--home", home).stdout


@pytest.mark.parametrize("args, message", [
    (["urls"], "no stored increments"),  # consumed and garbage-collected
    (["nope"], "has no flow 'nope'"),
    (["counts", "--epoch", "9"], "no stored increment from epoch 9"),
    (["counts", "--epoch", "1", "--all"], "either --epoch N or --all"),
    (["ghost.state"], "no stage 'ghost'"),
    (["count.state", "--epoch", "1"], "keeps only its current state"),
])
def test_show_errors(urlcount_home, args, message):
    home, _ = urlcount_home
    result = invoke("show", *args, "--home", home)
    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.output


def test_run_with_progress_lines(spark, urlcount_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(urlcount_home[0], home)
    ok("ingest", "--home", home, "urls", DAYS[2])
    out = ok("run", URLCOUNT, "--home", home, "--max-epochs", "5").stdout
    assert "✓ count" in out and "epoch 3" in out and "urls 4,000" in out
    assert "1 epoch in" in out
    assert "nothing to run" in ok("run", URLCOUNT, "--home", home).stdout
    assert status_of(home)["stages"][0]["epochs"] == 3


def test_run_follow_stops_at_max_epochs(spark, urlcount_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(urlcount_home[0], home)
    ok("ingest", "--home", home, "urls", DAYS[2])
    ran = json.loads(ok("run", URLCOUNT, "--home", home, "--follow", "--poll", "0.1",
                        "--max-epochs", "1", "--json").stdout)
    assert ran["epochs"] == 1 and ran["stopped"] == "max-epochs"


def test_translate_error_is_a_clean_message(spark, tmp_path):
    pipeline = write(tmp_path / "failing_pipe.py", """
        from strata import Dataflow, Input

        def explode(key, urls, *, out):
            for u in urls:
                if u["url"] == "boom":
                    raise ValueError("cannot count boom")
                out.write("seen", u)

        dataflow = Dataflow("failing")
        dataflow.stage("explode", explode, inputs=[Input(dataflow.source("urls", "url string"),
                       route_by="url")], outputs={"seen": "url string"})
    """)
    home = tmp_path / "home"
    ok("run", pipeline, "--home", home)
    data = write(tmp_path / "in.jsonl", '{"url": "a"}\n{"url": "boom"}\n')
    ok("ingest", "--home", home, "urls", data)
    before = status_of(home)
    result = invoke("run", pipeline, "--home", home)
    assert result.exit_code == 1
    assert "translate raised in stage 'explode', epoch 1" in result.stderr
    assert "cannot count boom" in result.stderr and "Traceback" not in result.output
    assert "strata run --traceback" in result.stderr
    # a failed epoch leaves no trace: no unfinished epoch, the arrival still unframed
    after = status_of(home)
    assert after["unfinished_epochs"] == [] and after == before
    result = invoke("run", pipeline, "--home", home, "--traceback")
    assert result.exit_code == 1
    assert "in explode" in result.stderr and 'raise ValueError("cannot count boom")' in (
        result.stderr)
    assert "recovered" not in result.output


def test_a_spark_failure_is_one_line_and_traceback_adds_spark_s_context(spark, tmp_path):
    """Bad data that fails inside Spark (a division by zero in a query run as Spark tasks):
    the message names the stage and epoch with Spark's one-line cause; ``--traceback``
    adds the rest of Spark's message, without the JVM's stack."""
    pipeline = write(tmp_path / "ratio_pipe.py", """
        from strata import Dataflow
        from strata.queries import add_query

        dataflow = Dataflow("ratio")
        dataflow.source("R", "k bigint, v bigint, _mult bigint")
        add_query(dataflow, "ratio", "SELECT k, sum(v) / sum(k - k) AS r FROM R GROUP BY k")
    """)
    home = tmp_path / "home"
    ok("run", pipeline, "--home", home)
    ok("ingest", "--home", home, "R", write(tmp_path / "in.jsonl", '{"k": 1, "v": 2, "_mult": 1}'))
    with epochs_in(spark, "tasks"):
        short = invoke("run", pipeline, "--home", home)
        long = invoke("run", pipeline, "--home", home, "--traceback")
    assert short.exit_code == long.exit_code == 1
    assert "stage 'ratio', epoch 1" in short.stderr
    assert "cause: [DIVIDE_BY_ZERO]" in short.stderr and "strata run --traceback" in short.stderr
    context = long.stderr.split("epoch failed")[0]  # printed before the message
    assert "DIVIDE_BY_ZERO" in context and "\tat org.apache" not in long.stderr
    assert "== SQL" in context or "== DataFrame" in context, context  # Spark's query context


def test_readonly_commands_do_not_start_spark(urlcount_home, tmp_path):
    """status, show, ingest and graph in a fresh process where Java cannot even start."""
    home = tmp_path / "home"
    shutil.copytree(urlcount_home[0], home)
    script = textwrap.dedent("""
        import json, sys
        from typer.testing import CliRunner
        from pyspark import SparkContext
        from strata.cli import app
        home, pipeline, day, out = sys.argv[1:]
        commands = [["status", "--home", home], ["show", "counts", "--home", home],
                    ["show", "count.state", "--home", home], ["ingest", "--home", home, "urls",
                    day], ["graph", pipeline, "--out", out], ["status", "--home", home, "--json"]]
        results = [CliRunner().invoke(app, c) for c in commands]
        print(json.dumps({"codes": [r.exit_code for r in results],
                          "queued": json.loads(results[-1].stdout)["connectors"][0]["queued"],
                          "spark": SparkContext._active_spark_context is not None}))
    """)
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    proc = subprocess.run([sys.executable, "-c", script, str(home), str(URLCOUNT),
                           str(DAYS[2]), str(tmp_path / "g.dot")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"codes": [0] * 6, "queued": 1, "spark": False}


# -- ingest errors, locks, missing homes (no Spark needed) -----------------------------
@pytest.fixture
def registered_home(tmp_path) -> Path:
    """A home where the URL-count dataflow is registered (no epoch ran, Spark not used)."""
    home = tmp_path / "home"
    assert "nothing to run" in ok("run", URLCOUNT, "--home", home).stdout
    return home


def test_bad_jsonl_is_rejected_whole(registered_home, tmp_path):
    home = registered_home
    ok("ingest", "--home", home, "urls", DAYS[0])
    before = status_of(home)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"url": "a"}\n{"url": "b"}\n{"url": 5}\n{"url": "c"}\n')
    result = invoke("ingest", "--home", home, "urls", DAYS[1], bad)
    assert result.exit_code == 1
    assert "line 3" in result.stderr and "bad.jsonl" in result.stderr
    assert "Nothing was ingested" in result.stderr and "Traceback" not in result.output
    assert status_of(home) == before
    assert before["connectors"][0]["queued"] == 1


@pytest.mark.parametrize("args, message", [
    (["nope", "{day}"], "has no flow 'nope'"),
    (["counts", "{day}"], "written by stage 'count'"),
    (["urls", "{missing}"], "no such file"),
])
def test_ingest_errors(registered_home, tmp_path, args, message):
    args = [a.format(day=DAYS[0], missing=tmp_path / "missing.jsonl") for a in args]
    result = invoke("ingest", "--home", registered_home, *args)
    assert result.exit_code == 1 and message in result.stderr


def test_ingest_table_output(registered_home):
    out = ok("ingest", "--home", registered_home, "urls", DAYS[0], "--format", "jsonl").stdout
    assert "ingested 4,000 records into urls as increment 1" in out
    assert "waiting for: count" in out


def test_ingesting_parquet_as_csv_prints_only_the_clear_error(registered_home, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "urls.parquet"
    pq.write_table(pa.table({"url": [f"http://a/{i}\x84" for i in range(200)]}), path)
    proc = subprocess.run([sys.executable, "-m", "strata.cli", "ingest", "--home",
                           str(registered_home), "urls", str(path), "--format", "csv"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "urls.parquet, line " in proc.stderr
    assert "not UTF-8 text, so not CSV" in proc.stderr
    assert status_of(registered_home)["connectors"][0]["queued"] == 0


def test_run_on_a_locked_home_exits_75(registered_home):
    from strata.apps.urlcount import urlcount_dataflow
    from strata.controller import Controller

    holder = Controller(registered_home, urlcount_dataflow())
    holder.lock()
    try:
        result = invoke("run", URLCOUNT, "--home", registered_home)
    finally:
        holder.close()
    assert result.exit_code == 75  # EX_TEMPFAIL: retry later; 2 stays a usage error
    assert invoke("run", URLCOUNT, "--home", registered_home, "--mode", "nope").exit_code == 2
    assert "in use by another controller" in result.stderr and f"pid {os.getpid()}" in (
        result.stderr)
    assert "Traceback" not in result.output
    ok("run", URLCOUNT, "--home", registered_home)  # free again


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_follow_stops_cleanly_on_a_signal_while_idle(registered_home, sig):
    import signal
    import threading

    threading.Timer(1.0, os.kill, (os.getpid(), getattr(signal, sig))).start()
    ran = json.loads(ok("run", URLCOUNT, "--home", registered_home, "--follow",
                        "--json").stdout)
    assert ran == {**ran, "epochs": 0, "stopped": "stopped"}
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers put back


@pytest.mark.parametrize("command", [["status"], ["show", "counts"], ["ingest", "urls", "x"]])
def test_unknown_home(tmp_path, command):
    home = tmp_path / "nowhere"
    result = invoke(*command, "--home", home)
    assert result.exit_code == 1
    assert f"no strata home at {home}" in result.stderr
    assert "strata run PIPELINE --home" in result.stderr
    assert not home.exists()


def test_run_sets_session_confs_and_refuses_bad_ones(spark, tmp_path):
    """``--conf KEY=VALUE`` sets a runtime conf of the session; a conf Spark fixes at
    start-up, or a pair without ``=``, is a clear error and nothing runs."""
    home = tmp_path / "h"
    ok("run", URLCOUNT, "--home", home)
    ok("ingest", "--home", home, "urls", DAYS[0])
    try:
        ok("run", URLCOUNT, "--home", home, "--conf", "spark.strata.test.marker=a=b")
        assert spark.conf.get("spark.strata.test.marker") == "a=b"
    finally:
        spark.conf.unset("spark.strata.test.marker")
    ok("ingest", "--home", home, "urls", DAYS[1])
    for conf, message in [("spark.sql.shuffle.partitions", "write KEY=VALUE"),
                          ("spark.driver.memory=1g", "spark-defaults.conf")]:
        result = invoke("run", URLCOUNT, "--home", home, "--conf", conf)
        assert result.exit_code == 1 and message in result.stderr, result.output
        assert "Traceback" not in result.output
    assert status_of(home)["stages"][0]["epochs"] == 1


def test_run_reports_pipeline_errors(tmp_path):
    result = invoke("run", tmp_path / "missing.py", "--home", tmp_path / "h")
    assert result.exit_code == 1 and "not found" in result.stderr
    assert "Traceback" not in result.output


# -- pipeline loading --------------------------------------------------------------------
def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_load_file_with_dataflow_attribute():
    df = load_dataflow(str(URLCOUNT))
    assert isinstance(df, Dataflow) and df.name == "urlcount"


def test_load_file_with_build_function_and_explicit_attribute():
    assert load_dataflow(str(CYCLE)).name == "components"  # build_dataflow()
    assert load_dataflow(f"{CYCLE}:build_dataflow").name == "components"


def test_load_module_attribute_and_callable():
    assert load_dataflow("strata.apps.urlcount:urlcount_dataflow").name == "urlcount"
    assert load_dataflow("tests.pipelines.urlcount_pipeline").name == "urlcount"
    assert load_dataflow("tests.pipelines.urlcount_pipeline:dataflow").name == "urlcount"


def test_load_callable_attribute_of_a_file(tmp_path):
    path = write(tmp_path / "flows.py", """
        from strata.apps.urlcount import urlcount_dataflow

        def outer():
            return urlcount_dataflow("outer")

        class Builders:
            inner = staticmethod(lambda: urlcount_dataflow("inner"))
    """)
    assert load_dataflow(f"{path}:outer").stages["count"].state.grouping == "outer"
    assert load_dataflow(f"{path}:Builders.inner").stages["count"].state.grouping == "inner"


def test_load_file_imports_its_neighbours(tmp_path):
    write(tmp_path / "neighbour_flows_x1.py", """
        from strata.apps.urlcount import urlcount_dataflow
        NAME = "from-neighbour"
    """)
    path = write(tmp_path / "main_pipe.py", """
        from neighbour_flows_x1 import urlcount_dataflow, NAME

        def build_dataflow():
            df = urlcount_dataflow()
            df.name = NAME
            return df
    """)
    assert load_dataflow(str(path)).name == "from-neighbour"
    assert module_name_for(path) == module_name_for(tmp_path / "." / "main_pipe.py")


def test_load_single_dataflow_instance(tmp_path):
    path = write(tmp_path / "single.py", """
        from strata.apps.urlcount import urlcount_dataflow
        urls = urlcount_dataflow()
    """)
    assert load_dataflow(str(path)) is not None


@pytest.mark.parametrize("source, spec_suffix, message", [
    ("def helper():\n    return 1\n", "", "no dataflow found"),
    ("def helper():\n    return 1\n", "", "functions: helper"),
    ("x = 1\ndef broken(:\n    pass\n", "", "line 2"),
    ("raise RuntimeError('boom')\n", "", "RuntimeError: boom"),
    ("from strata.apps.urlcount import urlcount_dataflow as u\na = u()\nb = u()\n", "",
     "several dataflows (a, b)"),
    ("x = 1\n", ":missing", "no attribute 'missing'"),
    ("x = 1\n", ":x", "not a Dataflow"),
    ("def f(n):\n    return n\n", ":f", "callable with no arguments"),
    ("def f():\n    return 3\n", ":f", "returned a value of type int"),
    ("def f():\n    raise ValueError('nope')\n", ":f", "f() failed: ValueError: nope"),
])
def test_load_errors(tmp_path, source, spec_suffix, message):
    path = tmp_path / "bad_pipeline.py"
    path.write_text(source)
    with pytest.raises(StrataError) as err:
        load_dataflow(f"{path}{spec_suffix}")
    assert message in str(err.value)


def test_load_missing_file_and_module(tmp_path):
    with pytest.raises(StrataError, match="not found"):
        load_dataflow(str(tmp_path / "nope.py"))
    with pytest.raises(StrataError, match="cannot import module 'no_such_module_xyz'"):
        load_dataflow("no_such_module_xyz:df")


def test_split_spec():
    assert split_spec("a/b.py") == ("a/b.py", None)
    assert split_spec("a/b.py:build") == ("a/b.py", "build")
    assert split_spec("pkg.mod:obj.attr") == ("pkg.mod", "obj.attr")
    assert split_spec("pkg.mod") == ("pkg.mod", None)


def test_cli_reports_a_pipeline_without_dataflow(tmp_path):
    path = write(tmp_path / "empty_pipe.py", "X = 1\n")
    result = invoke("graph", path, "--out", tmp_path / "g.dot")
    assert result.exit_code == 1 and "no dataflow found" in result.stderr
    assert "Traceback" not in result.output


def test_sweep_removes_the_staged_file_of_a_killed_ingest(registered_home):
    home = registered_home
    env = {**os.environ, "STRATA_CRASH_AT": "ingest-before-commit"}
    killed = subprocess.run([sys.executable, "-m", "strata.cli", "ingest", "--home", str(home),
                             "urls", str(DAYS[0])], env=env, capture_output=True)
    assert killed.returncode == -9
    staged = list((home / "incoming" / "urls").iterdir())
    assert len(staged) == 1 and status_of(home)["connectors"][0]["queued"] == 0
    ok("run", URLCOUNT, "--home", home)
    assert not list((home / "incoming" / "urls").iterdir())
    ok("ingest", "--home", home, "urls", DAYS[0])  # the home goes on as before
    assert status_of(home)["connectors"][0]["queued"] == 1


def test_a_staged_ingest_is_dead_only_when_its_writer_is():
    from strata.controller.ingest import staged_ingest_is_dead, staging_token

    mine = staging_token()
    assert not staged_ingest_is_dead(mine)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    parts = mine.split("-")
    assert staged_ingest_is_dead("-".join([parts[0], parts[1], gone, parts[3]]))
    foreign = f"{int(time.time()) - 3600}-otherhost-1-abcdef"
    assert not staged_ingest_is_dead(foreign)
    assert staged_ingest_is_dead(foreign, now=time.time() + 7 * 3600)
    assert not staged_ingest_is_dead("0a1b2c3d")  # staged by an older strata: kept


def test_a_sources_only_dataflow_makes_a_home_for_queries(spark, tmp_path):
    pipeline = write(tmp_path / "sources.py", """
        from strata import Dataflow

        dataflow = Dataflow("sources")
        dataflow.source("urls", "url string")
    """)
    home = tmp_path / "home"
    assert "nothing to run" in ok("run", pipeline, "--home", home).stdout
    ok("query", "SELECT url, COUNT(*) AS n FROM urls GROUP BY url", "--home", home,
       "--name", "per_url")
    ok("ingest", "--home", home, "urls", DAYS[0])
    ok("run", pipeline, "--home", home)
    shown = ok("show", "per_url", "--home", home, "--format", "jsonl").stdout.splitlines()
    assert {r["url"]: r["n"] for r in map(json.loads, shown)} == Counter(urls_of(DAYS[0]))
    # queries registered after an ingest no stage read (so it is still stored): without
    # --from-start they see the next increment only; with it, the stored one first
    home = tmp_path / "later"
    ok("run", pipeline, "--home", home)
    ok("ingest", "--home", home, "urls", DAYS[0])
    ok("query", "SELECT url, COUNT(*) AS n FROM urls GROUP BY url", "--home", home,
       "--name", "later")
    said = ok("query", "SELECT url, COUNT(*) AS n FROM urls GROUP BY url", "--home", home,
              "--name", "from_start", "--from-start", "--json").stdout
    assert json.loads(said)["stored_increments_queued"] == 1
    ok("ingest", "--home", home, "urls", DAYS[1])
    ok("run", pipeline, "--home", home)
    for name, days in (("later", DAYS[1:2]), ("from_start", DAYS[:2])):
        shown = ok("show", name, "--home", home, "--format", "jsonl").stdout.splitlines()
        want = Counter(u for d in days for u in urls_of(d))
        assert {r["url"]: r["n"] for r in map(json.loads, shown)} == want, name


def test_a_run_that_fails_validation_writes_nothing(tmp_path):
    pipeline = write(tmp_path / "dangling.py", """
        from strata import Dataflow, Input

        dataflow = Dataflow("dangling")
        nobody = dataflow.flow("nobody", "url string")
        dataflow.stage("copy", lambda k, xs, *, out: None,
                       inputs=[Input(nobody, route_by="url")], outputs={"seen": "url string"})
    """)
    home = tmp_path / "home"
    result = invoke("run", pipeline, "--home", home)
    assert result.exit_code == 1 and "no stage writes it" in result.stderr
    assert not home.exists()
