"""Manifests: the program's own state description, and homes written by the first format."""

from __future__ import annotations

import json

from strata.apps.urlcount import urlcount_dataflow
from strata.physical.runner import SparkStageRunner
from strata.storage import fs
from strata.storage.increments import read_records
from strata.storage.manifest import StateDir
from tests.helpers import increment


def _downgrade(path: str) -> None:
    """Rewrite a manifest in the first format: state fields at the top level."""
    d = json.loads(fs.read_bytes(path))
    old = {k: d[k] for k in ("stage", "epoch", "num_partitions", "outputs", "metrics")}
    # mode, runs, pending, blackbox (the first format knew only the indexed store)
    old.update({k: v for k, v in d["state"].items() if k != "store"})
    old.update(tables={}, query={})
    fs.write_json_atomic(path, old)


def test_a_manifest_names_its_program_and_keeps_its_state_description(spark, tmp_path):
    df = urlcount_dataflow("inner")
    stage = df.stages["count"]
    runner = SparkStageRunner(str(tmp_path / "home"), spark, num_partitions=2)
    runner.run_epoch(stage, {"urls": increment(str(tmp_path), df.flows["urls"],
                                               [{"url": "a"}, {"url": "b"}, {"url": "a"}])})
    snap = runner.committed(stage)
    assert (snap.kind, snap.program) == ("translate",
                                         "strata.physical.translate:TranslateProgram")
    assert snap.state["mode"] == "direct" and set(snap.state["runs"]) <= {"0", "1"}
    assert snap.state_bytes > 0 and snap.metrics["state_bytes_total"] == snap.state_bytes


def test_a_home_written_by_the_first_manifest_format_reads_and_runs_on(spark, tmp_path):
    df = urlcount_dataflow("outer")
    stage = df.stages["count"]
    home = str(tmp_path / "home")
    runner = SparkStageRunner(home, spark, num_partitions=2, store="indexed")
    first = [{"url": u} for u in "abcab"]
    runner.run_epoch(stage, {"urls": increment(str(tmp_path), df.flows["urls"], first)})
    before = sorted((r["url"], r["count"]) for r in runner.state_records(stage))
    sd = StateDir(runner.home.stage("count"))
    _downgrade(sd.layout.manifest(1))

    snap = sd.current()
    assert (snap.kind, snap.epoch) == ("translate", 1)
    assert sorted((r["url"], r["count"]) for r in runner.state_records(stage)) == before
    res = runner.run_epoch(stage, {"urls": increment(str(tmp_path), df.flows["urls"],
                                                     [{"url": "a"}, {"url": "d"}])})
    counts = {r["url"]: r["count"] for r in runner.state_records(stage)}
    assert counts == {"a": 3, "b": 2, "c": 1, "d": 1}
    assert sorted(r["url"] for r in read_records(res.outputs["counts"].files)) == ["a", "d"]
