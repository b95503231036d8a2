"""One refresh of an SDP project (``strata pipelines run``): feed every source's new
files to its flow, run the dataflow's epochs, then publish each view where SDP would
(docs/sdp.md).

strata's home sits under the spec's ``storage`` (``storage/strata``) beside a record of
the plan it holds (``storage/strata-plan.json``). A changed plan, a source whose files
were rewritten or deleted, or ``--full-refresh`` rebuild the home from the sources: the
views are derived data, so the rebuild gives the same answers, by recomputation.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from strata.controller import Controller
from strata.faults import crashpoint
from strata.queries import QueryProgram
from strata.sdp.plan import PipelinePlan, ViewPlan
from strata.sdp.spec import PipelineError
from strata.storage import fs

MARKER = "_strata_published"  # in a published table: the epoch it shows (hidden from Spark)


@dataclass
class RefreshReport:
    """What one run did: files taken per source, epochs run, views published."""

    new_files: dict[str, int] = field(default_factory=dict)
    epochs: int = 0
    epoch_seconds: dict[str, float] = field(default_factory=dict)  # by stage, summed
    rebuilt: str | None = None  # why the home was rebuilt, if it was
    published: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"new_files": self.new_files, "epochs": self.epochs,
                "epoch_seconds": {k: round(v, 3) for k, v in self.epoch_seconds.items()},
                "rebuilt": self.rebuilt,
                "published": self.published, "seconds": round(self.seconds, 3)}


def warehouse(plan: PipelinePlan, spark: Any) -> str:
    """Where SDP puts the pipeline's tables: the warehouse (the spec's
    ``spark.sql.warehouse.dir``, else the session's), under the spec's database."""
    conf = plan.spec.configuration
    root = (plan.warehouse or conf.get("spark.sql.warehouse.dir")
            or spark.conf.get("spark.sql.warehouse.dir"))
    root = fs.normalize(root)
    db = plan.spec.database
    return fs.join(root, f"{db}.db") if db and db != "default" else root


def table_location(plan: PipelinePlan, spark: Any, name: str) -> str:
    return fs.join(warehouse(plan, spark), name)


def home_of(plan: PipelinePlan) -> str:
    return fs.join(fs.normalize(plan.spec.storage), "strata")


def _fingerprint(plan: PipelinePlan) -> dict[str, Any]:
    return {"sources": {f: [s.path, s.ddl] for f, s in plan.sources.items()},
            "views": {v.name: v.query.sql(dialect="spark") for v in plan.views
                      if v.incremental and v.query is not None}}


def parquet_files(path: str) -> list[str]:
    """The Parquet files of a source folder (or the file itself), as normalized URIs,
    skipping hidden and ``_``-prefixed files as Spark does."""
    uri = fs.normalize(path)
    filesystem, p = fs.resolve(uri)
    info = filesystem.get_file_info(p)
    if info.type == pafs.FileType.File:
        return [uri]
    if info.type != pafs.FileType.Directory:
        raise PipelineError(f"Parquet source {path} does not exist")
    found = filesystem.get_file_info(pafs.FileSelector(p, recursive=True))
    files = [i.path for i in found if i.type == pafs.FileType.File
             and not any(part.startswith(("_", ".")) for part in
                         i.path[len(p):].split("/") if part)]
    prefix = uri[: len(uri) - len(p)] if uri.endswith(p) else ""
    return sorted(prefix + f for f in files)


def _drop_home(plan: PipelinePlan) -> None:
    filesystem, p = fs.resolve(home_of(plan))
    if filesystem.get_file_info(p).type == pafs.FileType.Directory:
        filesystem.delete_dir(p)


def refresh(plan: PipelinePlan, spark: Any, *, full_refresh: Sequence[str] = (),
            full_refresh_all: bool = False,
            progress: Callable[[str], None] = lambda _m: None) -> RefreshReport:
    """Refresh every view of ``plan``; see the module's docstring."""
    t0 = time.perf_counter()
    report = RefreshReport()
    unknown = sorted(set(full_refresh) - {v.name for v in plan.views})
    if unknown:
        raise PipelineError(f"--full-refresh {unknown[0]!r}: the pipeline has no such "
                            "materialized view or streaming table")
    marker = fs.join(fs.normalize(plan.spec.storage), "strata-plan.json")
    stored = fs.read_json(marker) or {}
    generation = int(stored.get("generation", 0))
    if full_refresh_all or full_refresh:
        report.rebuilt = "a full refresh was asked for"
    elif stored and stored.get("state_format", 1) != QueryProgram.format_version:
        report.rebuilt = "another version of strata wrote its state"
    elif stored and stored.get("plan") != _fingerprint(plan):
        report.rebuilt = "the pipeline's definitions changed"
    files = {f: parquet_files(s.path) for f, s in plan.sources.items()}
    if report.rebuilt is None:
        report.rebuilt = _rewritten_source(plan, spark, files)
    if report.rebuilt:
        progress(f"rebuilding strata's state: {report.rebuilt}")
        _drop_home(plan)
        generation += 1
    fs.write_json_atomic(marker, {"plan": _fingerprint(plan), "generation": generation,
                                  "state_format": QueryProgram.format_version})
    with Controller(home_of(plan), plan.dataflow, spark=spark) as c:
        for flow, listed in files.items():
            report.new_files[flow] = len(c.ingest_new(flow, listed))
        for r in c.run():
            report.epochs += 1
            report.epoch_seconds[r.stage] = report.epoch_seconds.get(r.stage, 0.0) + r.seconds
            progress(f"{r.stage} epoch {r.epoch}: {sum(r.records_in.values())} records in, "
                     f"{sum(r.records_out.values())} out")
        crashpoint("sdp-before-publish")
        if not all(v.incremental for v in plan.views):
            _source_views(plan, spark, c)
        for v in plan.views:
            target = table_location(plan, spark, v.name)
            if v.incremental:
                # the answer of the stage's newest epoch, unless the table holds it
                # already (a table records the epoch it shows: a run that died before
                # publishing is made good by the next, which has nothing new to run)
                shows = {"generation": generation,
                         "epoch": c.catalog.stage_row(v.name).epochs}
                if fs.read_json(fs.join(target, MARKER)) != shows:
                    report.published[v.name] = _publish(target, c.answer(v.name), shows)
            else:
                report.published[v.name] = _full(plan, spark, v)
            progress(f"published {v.name}")
    report.seconds = time.perf_counter() - t0
    return report


def _rewritten_source(plan: PipelinePlan, spark: Any, files: dict[str, list[str]]
                      ) -> str | None:
    """Why the home must be rebuilt because a source lost files it had, if one did."""
    home = home_of(plan)
    filesystem, p = fs.resolve(home)
    if filesystem.get_file_info(p).type != pafs.FileType.Directory:
        return None
    with Controller(home, plan.dataflow, spark=spark) as c:
        for flow, listed in files.items():
            now = {fs.key(f) for f in listed}
            gone = [f for f in c.referenced_files(flow) if fs.key(f) not in now]
            if gone:
                return (f"source {plan.sources[flow].path} no longer has {gone[0]} "
                        f"(and {len(gone) - 1} more): it was rewritten")
    return None


def _publish(target: str, table: pa.Table, shows: dict[str, int]) -> dict[str, Any]:
    """Replace the table's files with ``table``: the new file is written under a
    temporary name, then the old files are removed, it is renamed in place, and the
    table's marker says which epoch it shows."""
    filesystem, p = fs.resolve(target)
    filesystem.create_dir(p, recursive=True)
    token = uuid.uuid4().hex[:12]
    tmp = f"{p}/.strata-{token}.parquet"
    pq.write_table(table, tmp, filesystem=filesystem)
    old = [i.path for i in filesystem.get_file_info(pafs.FileSelector(p))
           if i.path != tmp]
    for o in old:
        if filesystem.get_file_info(o).type == pafs.FileType.File:
            filesystem.delete_file(o)
        else:
            filesystem.delete_dir(o)
    crashpoint("sdp-publish")
    filesystem.move(tmp, f"{p}/part-00000-{token}.parquet")
    with filesystem.open_output_stream(f"{p}/_SUCCESS") as out:
        out.write(b"")
    fs.write_json_atomic(fs.join(target, MARKER), shows)
    return {"rows": table.num_rows, "mode": "incremental"}


def _source_views(plan: PipelinePlan, spark: Any, c: Controller) -> None:
    """Every source as a temporary view of all the files it has taken: what the views
    refreshed in full read."""
    for flow, src in plan.sources.items():
        paths = c.referenced_files(flow)
        frame = spark.read.parquet(*paths) if paths else spark.createDataFrame(
            [], src.ddl)
        frame.createOrReplaceTempView(flow)


def _full(plan: PipelinePlan, spark: Any, v: ViewPlan) -> dict[str, Any]:
    """Recompute ``v`` by Spark over the sources' views (:func:`_source_views`) and the
    published tables it reads."""
    for other in plan.views:
        if other.name in v.reads:
            spark.read.parquet(table_location(plan, spark, other.name)
                               ).createOrReplaceTempView(other.name)
    if v.query is not None:
        frame = spark.sql(v.query.sql(dialect="spark"))
    else:
        body = v.definition.body
        assert body is not None
        body.__globals__["spark"] = spark  # the body as written, on the real session
        frame = body()
    # Spark's own write, as SDP's: a full view may be as big as its sources
    frame.write.mode("overwrite").parquet(table_location(plan, spark, v.name))
    return {"mode": "full"}


def describe(plan: PipelinePlan) -> list[dict[str, Any]]:
    """Per view: kind, refresh mode and why, its sources, and h/⊗/a (``explain``)."""
    return [{"name": v.name, "kind": v.definition.kind, "defined": v.definition.where,
             "policy": v.policy, "incremental": v.incremental, "why_full": v.why or None,
             "reads": v.reads, "explain": v.explain} for v in plan.views]

