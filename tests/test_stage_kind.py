"""A new kind of stage, written against the stage-program contract only.

``DistinctProgram`` emits each value of a column the first time it is seen and keeps the
values seen so far as its state (one Parquet file per epoch). It runs under the
controller beside a translate stage without any change to the controller, the runner or
the translate program (docs/architecture.md, "Adding a new kind of stage").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from strata import Dataflow, Input, State
from strata.controller import Controller
from strata.model.errors import EpochError
from strata.model.runnability import runnable_any
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.storage import fs
from strata.storage.home import Home, StageLayout
from strata.storage.increments import Increment, read_records, write_table
from strata.storage.manifest import StateSnapshot


class DistinctProgram(StageProgram):
    """Emits each value of ``column`` the first time it is seen."""

    kind = "distinct"

    def __init__(self, source: str, column: str, output: str) -> None:
        self.source, self.column, self.output = source, column, output

    def run(self, ctx: EpochContext) -> EpochOutcome:
        files = [f for inc in ctx.inputs.get(self.source, ()) for f in inc.files]
        schema = pa.schema([pa.field(self.column, pa.string())])
        new = schema.empty_table()
        if files:  # read through Spark, as a program on a cluster would
            new = ctx.spark.read.parquet(*files).select(self.column).distinct().toArrow()
            new = new.cast(schema)
        if any(v is None for v in new.column(self.column).to_pylist()):
            raise EpochError("a null value cannot be told apart", stage=ctx.stage.name,
                             epoch=ctx.epoch, flow=self.source)
        seen_file = ctx.committed.state.get("seen")
        seen = read_records([seen_file]) if seen_file else []
        old = pa.array([r[self.column] for r in seen], pa.string())
        fresh = new.filter(pc.invert(pc.is_in(new.column(self.column), value_set=old)))
        out = Home.output_file(ctx.output_dir(self.output), 0)
        size = write_table(out, fresh)
        everything = pa.concat_tables([pa.table({self.column: old}), fresh])
        state_file = fs.join(ctx.layout.program_dir("seen"), f"e{ctx.epoch}-{ctx.token}.parquet")
        write_table(state_file, everything)
        return EpochOutcome(outputs={self.output: Increment((out,), fresh.num_rows, size)},
                            state={"seen": state_file}, metrics={"seen": everything.num_rows})

    @classmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        return read_records([snap.state["seen"]])

    @classmethod
    def state_bytes(cls, layout: StageLayout, state: Mapping[str, Any]) -> int:
        return fs.size_of(state["seen"])

    @classmethod
    def collect_garbage(cls, layout: StageLayout, keep: StateSnapshot) -> None:
        directory = layout.program_dir("seen")
        for name in fs.list_dir(directory):
            if fs.join(directory, name) != keep.state.get("seen"):
                fs.delete_quietly(fs.join(directory, name))


def _count(url, state, urls, *, out):
    prev = next(state, None)
    n = sum(1 for _ in urls) + (prev["n"] if prev else 0)
    out.state({"url": url, "n": n})


def build() -> Dataflow:
    df = Dataflow("kinds")
    urls = df.source("urls", "url string")
    df.stage("count", _count, inputs=[Input(urls, route_by="url")],
             state=State("url string, n long", route_by="url", grouping="inner"))
    df.stage("firsts", None, program=DistinctProgram("urls", "url", "new_urls"),
             inputs=[Input(urls)], outputs={"new_urls": "url string"}, runnable=runnable_any)
    return df


def test_a_new_stage_kind_runs_under_the_controller(spark, tmp_path):
    days = [["a", "b", "a"], ["b", "c"], ["c"]]
    with Controller(tmp_path / "home", build(), spark=spark) as c:
        for day in days:
            c.ingest("urls", [{"url": u} for u in day])
            reports = c.run()
            assert {r.stage for r in reports} == {"count", "firsts"}
        got = [sorted(r["url"] for r in c.read_flow("new_urls", epoch=e).to_pylist())
               for e in (1, 2, 3)]
        assert got == [["a", "b"], ["c"], []]
        assert sorted(r["url"] for r in c.state_records("firsts")) == ["a", "b", "c"]
        assert {r["url"]: r["n"] for r in c.state_records("count")} == {"a": 2, "b": 2, "c": 2}
        snap = c.runner.committed("firsts")
        assert (snap.kind, snap.epoch) == ("distinct", 3)
        assert snap.program.endswith("test_stage_kind:DistinctProgram")
        assert snap.metrics["seen"] == 3
        # only the committed epoch's state file is left
        layout = Home(c.home).stage("firsts")
        assert fs.list_dir(layout.program_dir("seen")) == [snap.state["seen"].rsplit("/", 1)[1]]


def test_a_failed_epoch_of_a_new_kind_commits_nothing(spark, tmp_path):
    with Controller(tmp_path / "home", build(), spark=spark) as c:
        c.ingest("urls", [{"url": "a"}])
        c.run()
        before = c.runner.committed("firsts")
        c.ingest("urls", [{"url": None}])
        with pytest.raises(EpochError, match="null value"):
            c.run()
        after = c.runner.committed("firsts")
        assert (after.epoch, after.state) == (before.epoch, before.state)
        assert [r["url"] for r in c.state_records("firsts")] == ["a"]
        # the failed attempt's files are gone
        layout = Home(c.home).stage("firsts")
        assert len(fs.list_dir(layout.program_dir("seen"))) == 1
