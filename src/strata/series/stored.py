"""What a stream's series stage keeps between epochs, as plain data: the views stored per
segment (their files, rows and bytes), raw segments replaced by corrections, and the
epochs corrections took; with the small file helpers the stage's epochs share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from strata.model.errors import EpochError
from strata.model.schema import parse_ddl
from strata.physical.program import EpochContext
from strata.physical.runner import spark_failure
from strata.queries.spark import bucket_of, dispatch, read_bucketed, struct_type, write_parquet
from strata.series.normalize import SeriesPlan
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.increments import Increment, write_table
from strata.storage.manifest import StateSnapshot

VIEWS = "views"  # the jumbo passes' directory under state/<stage>/ (tables/: the rest)
SEGMENTS = "segments"  # corrected raw segments, under state/<stage>/
SEGMENT = "_s"  # the segment number of a view's rows in its co-located table
OCCURRENCE = "_occurrence"  # a re-emitted change's occurrence, by its newest segment


def changes_flow(series: str) -> str:
    """The flow of a series' re-emitted occurrences, as changes."""
    return f"{series}_changes"


def views_of(snap: StateSnapshot) -> dict[str, dict[str, dict]]:
    """fingerprint -> segment (as text: JSON keys) -> the view's files, rows and bytes."""
    return snap.state.get("views", {}) if snap.state else {}


def view_tables(views: Mapping[str, Mapping[str, dict]]) -> dict[str, dict]:
    """The co-located table of each view, as :class:`QueryTables` reads it: all its
    stored segments' files."""
    out: dict[str, dict] = {}
    for fp, by_segment in views.items():
        for e in by_segment.values():
            if "branch" in e:
                continue
            t = out.setdefault(fp, {"files": [], "ddl": e["ddl"],
                                    "lineage": ["_g"] if e["bucketed"] else []})
            t["files"] += e["files"]
    return out


def view_entry(layout: StageLayout, view: str, staged: Any) -> dict:
    """The state's entry of a view's segment staged for its co-located table (a
    ``QueryTables`` staged write): the files where committing moves them, their bytes and
    rows, the table's columns and whether it is bucketed."""
    return {"files": [fs.join(layout.table_dir(view), f.rsplit("/", 1)[1])
                      for f in staged.files],
            "bytes": sum(fs.size_of(f) for f in staged.files),
            "records": rows_of(staged.files), "ddl": staged.ddl,
            "bucketed": bool(staged.lineage)}


def staged_views(layout: StageLayout, keys: Sequence[tuple[str, int]], staged: Sequence[Any]
                 ) -> tuple[dict[str, dict[str, dict]], int]:
    """The state's entries of the views staged for ``keys`` ((view, segment) pairs, in
    the order of ``staged``), and the bytes of those the driver wrote (an append small
    enough for the driver has its rows counted): Spark does not count those."""
    written: dict[str, dict[str, dict]] = {}
    driver_bytes = 0
    for (fp, j), s in zip(keys, staged, strict=True):
        entry = written.setdefault(fp, {})[str(j)] = view_entry(layout, fp, s)
        if s.rows is not None:
            driver_bytes += entry["bytes"]
    return written, driver_bytes


def view_bytes(views: Mapping[str, Mapping[str, dict]], segment: int) -> dict[str, float]:
    """fingerprint -> the bytes of its view of ``segment``, for the views of it in
    ``views`` (fingerprint -> segment -> entry)."""
    return {fp: e[str(segment)]["bytes"] for fp, e in views.items() if str(segment) in e}


def view_rows(views: Mapping[str, Mapping[str, dict]], segment: int) -> dict[str, float]:
    """fingerprint -> the rows of its view of ``segment`` (from the files' footers)."""
    return {fp: e[str(segment)]["records"] for fp, e in views.items() if str(segment) in e}


def window_keys(plan: SeriesPlan, newest: int) -> list[tuple[str, int]]:
    """``(fingerprint, segment)`` of each view the occurrence ``newest`` of ``plan``
    reads."""
    window = plan.schedule.window(newest)
    return [(v.fingerprint, j) for v in plan.view_list() for j in window[v.table]]


def window_rows(plan: SeriesPlan, newest: int, views: Mapping[str, Mapping[str, dict]],
                known: Mapping[str, float]) -> float | None:
    """The rows of the views the occurrence ``newest`` of ``plan`` reads, together: a
    stored view's from its entry, one computed this epoch from the view's statistics
    ``known`` (its rows per segment so far); None if neither says for one of them."""
    rows = [views.get(fp, {}).get(str(j), {}).get("records", known.get(fp))
            for fp, j in window_keys(plan, newest)]
    return None if None in rows else sum(r for r in rows if r is not None)


def reads_any(plan: SeriesPlan, n: int, views: set[tuple[str, int]]) -> bool:
    """Whether the occurrence of ``plan`` at segment ``n`` reads one of ``views``."""
    return any(key in views for key in window_keys(plan, n))


def window_present(plan: SeriesPlan, n: int, views: Mapping[str, Mapping[str, dict]],
                   fresh: Mapping[tuple[str, int], Any]) -> bool:
    """Whether every view the occurrence of ``plan`` at segment ``n`` reads is stored
    (in ``views``) or computed this epoch (in ``fresh``)."""
    return all((fp, j) in fresh or str(j) in views.get(fp, {})
               for fp, j in window_keys(plan, n))


def column_bytes(segment: Increment) -> dict[str, float]:
    """Compressed bytes per column of a segment, from its Parquet footers."""
    out: dict[str, float] = {}
    for fsys, path in map(fs.resolve, segment.files):
        meta = pq.read_metadata(path, filesystem=fsys)
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                col = group.column(c)
                name = col.path_in_schema.split(".", 1)[0]
                out[name] = out.get(name, 0.0) + col.total_compressed_size
    return out


def rows_of(files: Sequence[str]) -> int:
    return sum(pq.read_metadata(path, filesystem=fsys).num_rows
               for fsys, path in map(fs.resolve, files))


def merged(a: Mapping[str, Mapping[str, dict]], b: Mapping[str, Mapping[str, dict]]
            ) -> dict[str, dict[str, dict]]:
    out = {fp: dict(v) for fp, v in a.items()}
    for fp, v in b.items():
        out.setdefault(fp, {}).update(v)
    return out


def increment_of(directory: str) -> Increment:
    files = [fs.join(directory, f) for f in sorted(fs.list_dir(directory))
             if f.startswith("part-")]
    rows = sum(pq.read_metadata(path, filesystem=fsys).num_rows
               for fsys, path in map(fs.resolve, files))
    return Increment(tuple(files), rows, sum(fs.size_of(f) for f in files))


def spark_schema(columns: Mapping[str, str]) -> StructType:
    return struct_type(", ".join(f"`{c}` {t}" for c, t in columns.items()))


def read_segment(spark: SparkSession, segment: Increment, columns: Mapping[str, str]
                 ) -> DataFrame:
    """A raw segment's rows, columns ``columns``. Its files have the stream's schema (an
    ingest casts the rows it copies and checks a referenced file's types), so Spark is
    given it instead of running a job that reads a footer to infer it."""
    schema = spark_schema(columns)
    if not segment.files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*segment.files)


def segment_of(snap: StateSnapshot) -> int:
    """The newest segment the stage has read (epochs that only corrected segments read
    none, so after one the epoch and the segment differ)."""
    return int(snap.state.get("segment", snap.epoch)) if snap.state else snap.epoch


def occurrence_epoch(state: Mapping[str, Any] | None, newest: int) -> int:
    """The epoch that answered the occurrence whose newest segment is ``newest``: its
    segment number, shifted by the correction epochs that ran before it."""
    taken = (state or {}).get("corrections", [])
    return newest + sum(1 for _, segment in taken if segment < newest)


def epoch_occurrence(state: Mapping[str, Any] | None, epoch: int) -> int:
    """The occurrence (its newest segment) a segment epoch answered: the inverse of
    :func:`occurrence_epoch`."""
    taken = (state or {}).get("corrections", [])
    return epoch - sum(1 for corrected_at, _ in taken if corrected_at < epoch)


def replaced_segments(state: Mapping[str, Any] | None) -> dict[int, Increment]:
    """Raw segments whose rows a correction replaced: segment -> the corrected rows."""
    return {int(j): Increment.from_json(e)
            for j, e in ((state or {}).get("replaced", {})).items()}


def write_answer(ctx: EpochContext, flow: str, ddl: str, out: DataFrame | pa.Table,
                 by_driver: set[str], failure: str, through_spark: bool = False) -> None:
    """Write ``out`` as the epoch's increment of ``flow`` (whose columns are ``ddl``): from
    the driver when it is small or already there (an Arrow table; noted in ``by_driver``:
    Spark does not count those bytes), else through Spark; ``through_spark`` skips the
    driver's try, for an answer expected to be large (:func:`~strata.series.cost.
    through_spark`). A Spark failure (bad data in a window) is an
    :class:`EpochError` that says ``failure``."""
    out_dir = ctx.output_dir(flow)
    if isinstance(out, pa.Table):
        write_table(fs.join(out_dir, "part-00000.parquet"), out.cast(parse_ddl(ddl)))
        by_driver.add(flow)
        return
    most = dispatch.driver_rows(ctx)
    try:
        if through_spark:
            write_parquet(out, out_dir)
            return
        table = out.coalesce(1).limit(most + 1).toArrow()
        if table.num_rows > most:
            write_parquet(out, out_dir)
            return
    except Exception as e:
        raise EpochError(failure, stage=ctx.stage.name, epoch=ctx.epoch, flow=flow,
                         cause=spark_failure(e)) from e
    write_table(fs.join(out_dir, "part-00000.parquet"), table.cast(parse_ddl(ddl)))
    by_driver.add(flow)


def branch_buckets(views: int, n: int) -> Column:
    """The bucket of a jumbo pass's row in its view's files: its view's key's, as the
    view's co-located table buckets it (``_b`` is the view, ``k<i>`` view *i*'s key)."""
    bucket = F.when(F.col("_b") == 0, bucket_of(["k0"], n))
    for i in range(1, views):
        bucket = bucket.when(F.col("_b") == i, bucket_of([f"k{i}"], n))
    return bucket


def branch_entries(directory: str, ddl: str, views: int, n: int) -> list[dict]:
    """The state's entry of each view of a jumbo pass written into ``directory`` (a
    directory ``_b=<i>`` per view, its files bucketed by :func:`branch_buckets` into
    ``n`` buckets, columns ``ddl``): its files, bytes and rows."""
    return [{**increment_of(fs.join(directory, f"_b={i}")).to_json(), "branch": i,
             "ddl": ddl, "buckets": n} for i in range(views)]


def branch_rows(spark: SparkSession, entry: Mapping[str, Any]) -> DataFrame:
    """A jumbo pass's files of one view, read as a table bucketed by the view's key, as
    its co-located table is (so merging them with it shuffles neither); a home's older
    passes wrote them unbucketed."""
    if "buckets" not in entry:
        return spark.read.parquet(*entry["files"])
    location = entry["files"][0].rsplit("/", 1)[0]
    return read_bucketed(spark, location, entry["ddl"], [f"k{entry['branch']}"],
                         entry["buckets"], changing=False)  # written once, before any read


def collect_views(layout: StageLayout, keep: StateSnapshot) -> None:
    """Delete view files ``keep`` does not name: in the co-located tables
    (``tables/<view>/``), and the jumbo passes' directories
    (``views/<segment and attempt>/_b=<i>/``)."""
    live = {f for by_segment in views_of(keep).values() for e in by_segment.values()
            for f in e["files"]}
    for table in fs.list_dir(layout.tables_root):
        for name in fs.list_dir(layout.table_dir(table)):
            if fs.join(layout.table_dir(table), name) not in live:
                fs.delete_quietly(fs.join(layout.table_dir(table), name))
        if not fs.list_dir(layout.table_dir(table)):
            fs.delete_quietly(layout.table_dir(table))
    fs.delete_quietly(layout.staging_dir())
    fixed = {f.rsplit("/", 1)[0] for e in replaced_segments(keep.state).values()
             for f in e.files}
    for name in fs.list_dir(layout.program_dir(SEGMENTS)):
        if fs.join(layout.program_dir(SEGMENTS), name) not in fixed:
            fs.delete_quietly(fs.join(layout.program_dir(SEGMENTS), name))
    kept = live | {f.rsplit("/", 1)[0] for f in live}  # a pass's view: a directory
    root = layout.program_dir(VIEWS)
    for attempt in fs.list_dir(root):
        top = fs.join(root, attempt)
        for name in fs.list_dir(top):
            if fs.join(top, name) not in kept:
                fs.delete_quietly(fs.join(top, name))
        if not fs.list_dir(top):
            fs.delete_quietly(top)
