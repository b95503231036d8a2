"""``strata query`` with WINDOW and ``strata window``: register, run, show, C2."""

from __future__ import annotations

import json
import random

from tests.test_cli import invoke, ok
from tests.windows.weblog import DDL, SQL, check_epoch, increments, write

WINDOWED = SQL.replace("GROUP BY url", "GROUP BY url, WINDOW(ts, 6, 3, host)")


def test_windows_from_the_cli(spark, tmp_path):
    pipeline = tmp_path / "weblog.py"
    pipeline.write_text("from strata import Dataflow\n\ndataflow = Dataflow('weblog')\n"
                        f"dataflow.source('log', {DDL!r})\n")
    home = tmp_path / "home"
    ok("run", pipeline, "--home", home)
    raw = increments(random.Random(3), 3, epochs=3, span=6)
    ok("ingest", "log", write(tmp_path, raw[0]), "--home", home)  # before: backfilled
    info = json.loads(ok("query", WINDOWED, "--name", "top", "--home", home,
                         "--json").stdout)
    assert info["registered"] and info["windows"][0]["panes"] == 2
    assert not info["invertible"]  # max(bytes): Two-Stacks
    out = ok("window", "add", "late", WINDOWED, "--home", home, "--deadline", "0",
             "--fidelity", "spatial=0.5", "--failure-timeout", "12", "--lateness", "6",
             "--disorder", "3").stdout
    assert "latency 0, fidelity spatial ≥ 0.5, failure after 12" in out
    assert "allowed disorder 3" in out
    bad = invoke("window", "add", "odd", WINDOWED, "--home", home, "--fidelity", "most")
    assert bad.exit_code == 1 and "KIND=SHARE" in bad.output
    taken = invoke("window", "add", "top", WINDOWED, "--home", home)
    assert taken.exit_code == 1 and "already has" in taken.output
    listed = json.loads(ok("window", "list", "--home", home, "--json").stdout)["windows"]
    assert [w["name"] for w in listed] == ["late", "top"]
    for batch in raw[1:]:
        ok("ingest", "log", write(tmp_path, batch), "--home", home)
    ok("run", pipeline, "--home", home)

    from strata import Dataflow
    from strata.controller import Controller

    df = Dataflow("weblog")
    df.source("log", DDL)
    with Controller(str(home), df, spark=spark) as c:  # equal DuckDB over their C2 cells
        assert check_epoch(c, "late", c.catalog.stage_row("late").epochs, raw, 3,
                           disorder=3) > 0

    shown = ok("show", "late_windows", "--all", "--home", home, "--format", "jsonl").stdout
    rows = [json.loads(line) for line in shown.splitlines()]
    assert rows and {"c2_fraction", "c2_spatial", "c2_temporal"} <= set(rows[0])
    png = tmp_path / "c2.png"
    board = json.loads(ok("window", "c2", "late", "--home", home, "--png", png,
                          "--json").stdout)
    assert board["summary"].startswith("C2 ") and png.stat().st_size > 1000
    assert {c["status"] for c in board["cells"]} <= {"data", "open", "empty", "pending",
                                                     "skipped", "failed"}
    table = ok("window", "c2", "late", "--home", home).stdout
    assert "h0" in table and "C2 " in table
    status = json.loads(ok("status", "--home", home, "--json").stdout)["stages"]
    assert any(s["stage"] == "late" and "source(s)" in (s["summary"] or "") for s in status)
    missing = invoke("window", "c2", "nope", "--home", home)
    assert missing.exit_code == 1


def test_a_record_without_an_event_time_or_source_is_refused_at_ingest(spark, tmp_path):
    """A window stage needs every record's event time and source: ingest refuses a
    record without one (nothing queued), for a stage `strata window add` registers and,
    after the next run registers the pipeline again, still."""
    pipeline = tmp_path / "weblog.py"
    pipeline.write_text("from strata import Dataflow\n\ndataflow = Dataflow('weblog')\n"
                        f"dataflow.source('log', {DDL!r})\n")
    home = tmp_path / "home"
    ok("run", pipeline, "--home", home)
    ok("window", "add", "top", WINDOWED, "--home", home)
    good = {"ts": 1, "host": "h0", "url": "/a", "bytes": 9, "user": None}
    for n, (field, bad) in enumerate([("ts", {**good, "ts": None}),
                                      ("host", {**good, "host": None})]):
        path = tmp_path / f"bad{n}.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        refused = invoke("ingest", "log", path, "--home", home)
        assert refused.exit_code == 1 and "Traceback" not in refused.output
        said = " ".join(refused.stderr.split())
        assert f"bad{n}.jsonl, line 2, field {field!r}: null, but the flow requires a " \
               "value" in said and "ingest the file again" in said and "'log'" in said
        status = json.loads(ok("status", "--home", home, "--json").stdout)
        assert [c["queued"] for c in status["connectors"] if c["flow"] == "log"] == [0]
        if n == 0:  # the pipeline registered again (the stage attached): still refused
            assert "nothing to run" in ok("run", pipeline, "--home", home).stdout
    parquet = write(tmp_path, [good, {**good, "ts": None}])
    refused = invoke("ingest", "log", parquet, "--home", home, "--by-reference")
    assert refused.exit_code == 1 and "column 'ts': 1 null(s)" in refused.stderr
    ok("ingest", "log", write(tmp_path, [good]), "--home", home)  # a user may be null
