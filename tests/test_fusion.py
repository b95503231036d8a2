"""Record-wise stages fuse into the groupwise stage's job: one job, same results."""

from __future__ import annotations

import pytest

from strata import Dataflow, Input, State, TranslateError
from strata.apps.urlcount import count_urls
from strata.observability.spark_metrics import SparkMetrics
from strata.physical.fusion import plan
from strata.physical.runner import SparkStageRunner
from strata.reference import ReferenceExecutor
from strata.storage.increments import read_records
from tests.helpers import epochs_in, increment


def extract(key, pages, *, out):
    for page in pages:
        for link in page["links"]:
            if link == "boom":
                raise RuntimeError("unparsable link")
            out.write("links", {"url": link})


def label(key, counts, *, out):
    for c in counts:
        out.write("labels", {"url": c["url"], "label": f"{c['url']} seen {c['count']}x"})


def crawl_dataflow() -> Dataflow:
    df = Dataflow("crawl")
    pages = df.source("pages", "url string, links array<string>")
    df.stage("extract", extract, inputs=[pages], outputs={"links": "url string"})
    df.stage("count", count_urls, inputs=[Input("links", route_by="url")],
             outputs={"counts": "url string, count long"},
             state=State("url string, count long", route_by="url", grouping="inner"))
    df.stage("label", label, inputs=["counts"], outputs={"labels": "url string, label string"})
    return df


BATCHES = [
    [{"url": "p1", "links": ["a", "b", "a"]}, {"url": "p2", "links": ["c"]}],
    [{"url": "p3", "links": ["a", "d"]}, {"url": "p4", "links": []}],
    [{"url": "p5", "links": ["b", "b", "e"]}],
]


def test_plan_fuses_both_neighbours():
    units = plan(crawl_dataflow())
    assert len(units) == 1
    u = units[0]
    assert u.stage.name == "count"
    assert [s.name for s in u.fusion.pre["links"]] == ["extract"]
    assert [s.name for s in u.fusion.post["counts"]] == ["label"]
    assert u.input_flows == ["pages"] and u.output_flows == ["labels"]
    assert u.name == "extract+count+label"


def test_no_fusion_across_a_flow_with_two_consumers():
    df = crawl_dataflow()
    df.stage("audit", lambda k, links, *, out: None, inputs=["links"])
    names = sorted(u.name for u in plan(df))
    assert names == ["audit", "count+label", "extract"]


@pytest.mark.parametrize("where", ["tasks", "driver"])
@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_fused_job_matches_unfused_reference(spark, tmp_path, mode, where):
    df = crawl_dataflow()
    unit = plan(df)[0]
    runner = SparkStageRunner(str(tmp_path), spark, mode=mode, num_partitions=3)
    ref = ReferenceExecutor()
    metrics = SparkMetrics(spark)
    for batch in BATCHES:
        links = ref.run(df.stages["extract"], {"pages": batch})["links"]
        counts = ref.run(df.stages["count"], {"links": links})["counts"]
        expected = ref.run(df.stages["label"], {"counts": counts})["labels"]
        inc = increment(tmp_path, df.flows["pages"], batch)
        with metrics.measure("fused") as m, epochs_in(spark, where):
            res = runner.run_epoch(unit.stage, {"links": inc}, fusion=unit.fusion)
        assert set(res.outputs) == {"labels"}
        got = read_records(res.outputs["labels"].files)
        assert sorted(got, key=str) == sorted(expected, key=str)
        # extract and label ran inside count's job (black-box epochs always run as one;
        # a small direct epoch in the driver runs none)
        assert m.jobs == (0 if where == "driver" and mode == "direct" else 1)
    assert not (tmp_path / "flows" / "links").exists()
    assert not (tmp_path / "flows" / "counts").exists()


def test_error_in_fused_stage_names_that_stage(spark, tmp_path):
    df = crawl_dataflow()
    unit = plan(df)[0]
    runner = SparkStageRunner(str(tmp_path), spark, num_partitions=2)
    inc = increment(tmp_path, df.flows["pages"], [{"url": "p9", "links": ["ok", "boom"]}])
    with pytest.raises(TranslateError) as e:
        runner.run_epoch(unit.stage, {"links": inc}, fusion=unit.fusion)
    assert "stage 'extract'" in str(e.value) and "p9" in str(e.value)
    assert runner.committed(unit.stage).epoch == 0
