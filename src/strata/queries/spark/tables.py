"""The state tables of one query stage in one epoch: bucketed Parquet, written by stage.

A query's state lives in Parquet tables under ``state/<stage>/tables/<name>/``, bucketed
by the query's lineage keys and registered in the session's catalog as
``CLUSTERED BY (lineage) INTO n BUCKETS`` at their location. Spark then joins a table with
an increment bucketed the same way by shuffling only the increment: the state side is read
where it lies, in every epoch and after restarts (docs/architecture.md, "Query state:
bucketed tables"). An epoch *stages* its table writes (:meth:`QueryTables.stage`), runs
them with its output write, and moves the files into place (:meth:`QueryTables.commit_files`)
just before its manifest is committed. Files that an interrupted epoch moved but never
committed are deleted before the next epoch reads anything.

A group-by's state is *versioned* (``docs/architecture.md``, "Group state by the change"):
an epoch appends only the groups it touched, each row stamped with the epoch (``_v``), and
a group with no rows left as a tombstone (``_cnt`` 0); the newest version of each group is
its row. Readers get the newest rows (:meth:`QueryTables.read`, :meth:`QueryTables.arrow`,
:mod:`strata.queries.spark.bucketed`), computed per bucket without a shuffle; the epoch
that finds the table has grown to twice its rows at the last rewrite (or has many files)
rewrites it.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from strata.model.errors import StrataError
from strata.physical import spark_hash
from strata.queries.arrow import driver_rows
from strata.queries.arrow.rows import Rows
from strata.queries.spark import dispatch, frames
from strata.queries.spark.bucketed import (
    BUCKET,
    VERSION,
    bucket_of,
    latest_arrow,
    latest_frame,
    read_bucketed,
    write_bucketed,
    write_buckets,
)
from strata.queries.spark.frames import cut, ddl_of, write_parquet
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.increments import FILE_CACHE, read_table, row_count, write_table

COMPACT_FILES_PER_BUCKET = 8  # a join input table is compacted beyond this many runs
VERSIONS_GROWTH = 2  # a versioned table is rewritten once its rows reach this × its groups
# A committed table of at most spark.strata.query.driverTableRows rows may be read by the
# driver (an iteration's state, a small epoch's join inputs): tens of MB as Arrow, kept in
# the driver's file cache between epochs (storage.increments.FILE_CACHE;
# docs/configuration.md).


@dataclass
class _Staged:
    """A table write of the epoch: ``df`` until written, then the ``files`` in staging."""

    name: str
    ddl: str
    mode: str  # "append", "replace" or "versions" (newer rows of keyed groups)
    lineage: list[str]
    path: str
    df: Rows | None
    files: list[str] = field(default_factory=list)
    rows: int | None = None  # of a replacing write, once written
    try_driver: bool | None = None  # an append's own choice (None: the epoch's size decides)


def _write_rows(s: _Staged, table: pa.Table, bucket: pa.Array | pa.ChunkedArray | None,
                cache: bool = False) -> None:
    """Write staged table ``s``'s rows ``table`` into its path from the driver: one file
    per bucket (each row's ``bucket``), or one file if the table is not bucketed (None);
    sets ``s.files`` and ``s.rows``. With ``cache``, the rows stay in the file cache."""
    if bucket is not None:
        s.files = write_buckets(table, bucket, s.path, cache)
    else:
        s.files = [fs.join(s.path, f"part-00000-{uuid.uuid4().hex[:12]}.c000.parquet")
                   ] if table.num_rows else []
        for f in s.files:
            write_table(f, table, cache)
    s.rows = table.num_rows


class QueryTables:
    """The state tables of one query stage in one epoch."""

    def __init__(self, spark: SparkSession, layout: StageLayout, live: Mapping[str, dict],
                 n: int, token: str, sweep: bool = True, version: int = 0,
                 records: int = 0) -> None:
        self.spark, self.layout, self.n, self.token = spark, layout, n, token
        self.version = version  # stamps the rows of a versioned write (the epoch)
        # an epoch of more input records than driverRows appends through Spark directly
        self.bulk = not dispatch.driver_may_hold(spark, records)
        self.live = {k: dict(v) for k, v in live.items()}
        self.staged: list[_Staged] = []
        self.overlay: dict[str, Rows] = {}  # keyed rows upserted, not yet staged
        self._read: dict[str, DataFrame | None] = {}
        self._arrow: dict[str, pa.Table | None] = {}
        self._reading = threading.Lock()
        if sweep:
            self._sweep()

    def _dir(self, name: str) -> str:
        return self.layout.table_dir(name)

    def _sweep(self) -> None:
        """Delete files an interrupted epoch moved into a table but never committed."""
        for name in fs.list_dir(self.layout.tables_root):
            keep = set(self.live.get(name, {}).get("files", []))
            for f in fs.list_dir(self._dir(name)):
                if fs.join(self._dir(name), f) not in keep:
                    fs.delete_quietly(fs.join(self._dir(name), f))
        fs.delete_quietly(self.layout.staging_dir())

    def read(self, name: str) -> DataFrame | None:
        """The committed table (bucketed by its lineage), or None if it has no rows yet."""
        with self._reading:  # epochs plan their writes in threads (frames.run_all)
            if name not in self._read:  # its files do not change before the epoch commits
                self._read[name] = self._open(name)
            return self._read[name]

    def has(self, name: str) -> bool:
        """Whether committed table ``name`` has rows (files)."""
        return bool(self.live.get(name, {}).get("files"))

    def schema(self, name: str) -> StructType:
        """The schema of the committed table's rows as readers get them (from the catalog
        entry: no Spark call)."""
        return StructType([f for f in self._stored_schema(name).fields if f.name != VERSION])

    def _stored_schema(self, name: str) -> StructType:
        return frames.struct_type(self.live[name]["ddl"])

    def versioned(self, name: str) -> bool:
        """Whether committed table ``name`` holds versions of its groups (:meth:`stage`
        with ``versions``) since it was last written whole."""
        return bool(self.live.get(name, {}).get("versions"))

    def versions_due(self, name: str) -> bool:
        """Whether versioned-or-not keyed table ``name`` should be written whole this
        epoch: it has rows from at least ``VERSIONS_GROWTH`` times as many row writes as
        it had groups when last written whole, or too many files."""
        t = self.live.get(name, {})
        if not self.versioned(name):
            return False
        whole = t.get("whole_rows") or 0
        return self.rows(name) >= VERSIONS_GROWTH * max(whole, 1) or \
            self.needs_compaction(name, factor=4)

    def read_versions(self, name: str) -> DataFrame | None:
        """Every stored row of keyed table ``name``, superseded versions and tombstones
        included (bucketed by ``_g``), or None if it has none."""
        return self._open(name, latest=False)

    def arrow(self, name: str) -> pa.Table | None:
        """The committed table as Arrow, read by the driver once per epoch, if it has rows
        and at most ``spark.strata.query.driverTableRows`` of them; else None."""
        with self._reading:  # a series epoch's answers read them in threads
            if name not in self._arrow:
                self._arrow[name] = self._read_small(name)
            return self._arrow[name]

    def _read_small(self, name: str) -> pa.Table | None:
        if not self.has(name) or self.rows(name) > dispatch.driver_table_rows(self.spark):
            return None
        table = read_table(self.live[name]["files"],
                           driver_rows.arrow_schema(self._stored_schema(name)), cache=True)
        if table is None or VERSION not in table.column_names:
            return table
        return latest_arrow(table) if self.versioned(name) else table.drop_columns([VERSION])

    def rows(self, name: str) -> int:
        """How many rows committed table ``name`` has (from its files' footers)."""
        t = self.live.get(name, {})
        if "rows" not in t:
            t["rows"] = sum(row_count(f) for f in t.get("files", []))
        return int(t["rows"])

    def small(self, limit: int | None = None) -> bool:
        """Whether every committed table has at most ``limit`` rows (default
        ``spark.strata.query.driverTableRows``)."""
        if limit is None:
            limit = dispatch.driver_table_rows(self.spark)
        return all(self.rows(name) <= limit for name in self.live)

    def _open(self, name: str, latest: bool = True) -> DataFrame | None:
        t = self.live.get(name)
        if not t or not t["files"]:
            return None
        if not t["lineage"]:
            return self.spark.read.schema(t["ddl"]).parquet(*t["files"])
        df = read_bucketed(self.spark, self._dir(name), t["ddl"], t["lineage"], self.n)
        if not latest or VERSION not in df.columns:
            return df
        return latest_frame(df) if self.versioned(name) else df.drop(VERSION)

    def stage(self, name: str, df: DataFrame | Rows, lineage: Sequence[str],
              mode: str, try_driver: bool | None = None) -> None:
        """Stage ``df`` for table ``name``: ``mode`` is ``append`` (added to the table's
        files) or ``replace`` (becomes the table). Nothing runs yet: :meth:`writes` gives
        the epoch's staged writes, which run together with the epoch's output write.
        ``try_driver`` says whether an append first tries to bring its rows to the driver
        (None: if the epoch's input records are few enough)."""
        path = fs.join(self.layout.staging_dir(self.token), f"{name}-{len(self.staged)}")
        rows = Rows.of_frame(df)
        if mode == "versions":  # each row stamped with this epoch
            rows = Rows.of_frame(rows.frame().withColumn(
                VERSION, F.lit(self.version).cast("bigint")))
        self.staged.append(_Staged(name, ddl_of(rows.schema), mode, list(lineage), path, rows,
                                   try_driver=try_driver))

    def writes(self) -> list[Callable[[], None]]:
        """One function per staged table write; each writes its files into staging."""
        return [functools.partial(self._write, s) for s in self.staged if s.df is not None]

    def write_small(self, extra: Mapping[str, DataFrame]) -> dict[str, pa.Table] | None:
        """Write every staged table whose rows fit in the driver (appends and rewrites of
        small tables, as :meth:`_write_small_bucketed` takes them) from one Spark job that
        also brings ``extra``'s rows (the epoch's changes) to the driver; those rows, or
        None if together they do not fit (then nothing is written: :meth:`writes` does it
        table by table). Call it only when the epoch is small: a miss costs a job."""
        todo: dict[str, _Staged] = {}
        wanted: dict[str, DataFrame] = {}
        for i, s in enumerate(self.staged):
            if s.df is None or s.df.arrow() is not None or (
                    s.lineage and s.mode != "append" and not self._small(s.name)):
                continue
            df = s.df.frame()
            todo[f"_t{i}"] = s
            wanted[f"_t{i}"] = (df.withColumn(BUCKET, bucket_of(s.lineage, self.n))
                                if s.lineage else df)
        wanted.update(extra)
        if len(wanted) < 2:
            return None
        got = frames.collect_together(wanted, dispatch.driver_rows(self.spark))
        if got is None:
            return None
        for key, s in todo.items():
            table = got[key]
            if s.lineage:
                _write_rows(s, table.drop_columns([BUCKET]), table.column(BUCKET))
            else:
                _write_rows(s, table, None)
            s.df = None
        return {k: got[k] for k in extra}

    def _write(self, s: _Staged) -> None:
        assert s.df is not None
        held = s.df.arrow()
        if held is not None and self._write_held(s, held):
            s.df = None
            return
        df = s.df.frame()
        if s.lineage:
            files = None
            tries = not self.bulk if s.try_driver is None else s.try_driver
            if (s.mode == "append" and tries) or self._small(s.name):
                files, s.rows = self._write_small_bucketed(df, s.lineage, s.path)
            if files is None:
                files = self._write_bucketed(df, s.lineage, s.path)
                if s.mode == "replace":  # from the files' footers: no Spark job
                    s.rows = sum(pq.read_metadata(p, filesystem=fsys).num_rows
                                 for fsys, p in map(fs.resolve, files))
            s.files = files
        else:
            write_parquet(df, s.path)
            s.files = [fs.join(s.path, f) for f in fs.list_dir(s.path) if f.startswith("part-")]
        s.df = None

    def _write_held(self, s: _Staged, table: pa.Table) -> bool:
        """Write rows the driver holds with pyarrow, no Spark job: a bucketed table's
        rows split by their bucket as Spark computes it (:mod:`strata.physical.spark_hash`),
        one file per bucket. False (nothing written) if a lineage column's type is one
        that module leaves to Spark. The files' rows are kept in the driver's file cache
        (moved with the files at commit): the next epoch in the driver reads the tables
        it wrote from there, not from disk."""
        bucket = None
        if s.lineage:
            hashed = spark_hash.partitions([table.column(c) for c in s.lineage], self.n)
            if hashed is None:
                return False
            bucket = pa.array(hashed)
        _write_rows(s, table, bucket, cache=True)
        return True

    def _small(self, name: str) -> bool:
        """Whether table ``name`` had at most half of ``spark.strata.query.driverRows``
        rows: a rewrite of it likely fits on the driver (one that does not falls back to
        Spark)."""
        rows = self.live.get(name, {}).get("rows")
        return rows is not None and rows <= dispatch.driver_rows(self.spark) // 2

    def _write_small_bucketed(self, df: DataFrame, lineage: Sequence[str],
                              path: str) -> tuple[list[str] | None, int]:
        """Like :meth:`_write_bucketed` for up to ``spark.strata.query.driverRows`` rows
        (an increment appended to a join input or a small group-by's state usually is):
        the rows, with their bucket, come to the driver as Arrow and each bucket is
        written as one file. The files (None if there are more rows) and the number of rows."""
        most = dispatch.driver_rows(self.spark)
        table = (df.withColumn(BUCKET, bucket_of(lineage, self.n)).coalesce(1)
                 .limit(most + 1).toArrow())
        if table.num_rows > most:
            return None, table.num_rows
        bucket, table = table.column(BUCKET), table.drop_columns([BUCKET])
        return write_buckets(table, bucket, path), table.num_rows

    def _write_bucketed(self, df: DataFrame, lineage: Sequence[str], path: str) -> list[str]:
        """Write ``df`` as files of a table bucketed by ``lineage`` into ``n`` buckets
        (:func:`write_bucketed`)."""
        return write_bucketed(self.spark, df, bucket_of(lineage, self.n), path, self.n)[""]

    # -- deferred writes (the steps of an iteration) -----------------------------------
    def lookup(self, name: str, keys: Rows) -> Rows | None:
        """The rows of keyed table ``name`` (committed, then overridden by rows upserted
        this epoch) whose ``_g`` is among ``keys``; None if it has neither."""
        if not self.has(name) and name not in self.overlay:
            return None
        held = self._lookup_held(name, keys)
        if held is not None:
            return held
        base, over = self.read(name), self.overlay.get(name)
        wanted = keys.frame()
        found = None
        if base is not None:  # a semi join with the bucketed table shuffles only ``keys``
            found = base.join(wanted, "_g", "left_semi")
            if over is not None:
                found = found.join(over.frame().select("_g"), "_g", "left_anti")
        if over is not None:
            mine = over.frame().join(wanted, "_g", "left_semi").where("_live").drop("_live")
            found = mine if found is None else found.unionByName(mine)
        return None if found is None else Rows.of_frame(found)

    def _lookup_held(self, name: str, keys: Rows) -> Rows | None:
        """:meth:`lookup` in Arrow, when the keys are held and :meth:`_current_held`
        applies; else None."""
        wanted, current = keys.arrow(), self._current_held(name)
        if wanted is None or current is None:
            return None
        rows, schema = current
        hit = driver_rows.match([rows.column("_g")], [wanted.column("_g")], "left semi")
        if hit is None:
            return None
        return Rows.of_arrow(self.spark, rows.take(hit.column("__l")), schema)

    def _current_held(self, name: str) -> tuple[pa.Table, StructType] | None:
        """:meth:`current`'s rows in Arrow and their schema, when the overlay (if any) is
        held and the committed table is small or absent; else None."""
        over = self.overlay.get(name)
        mine = over.arrow() if over is not None else None
        base = self.arrow(name) if self.has(name) else None
        if (over is not None and mine is None) or (self.has(name) and base is None):
            return None
        parts = []
        if base is not None:
            if mine is not None:  # a committed row an upsert overrode (or deleted) goes
                kept = driver_rows.match([base.column("_g")], [mine.column("_g")],
                                         "left anti")
                if kept is None:
                    return None
                base = base.take(kept.column("__l"))
            parts.append(base)
        if mine is not None:
            parts.append(mine.filter(pc.fill_null(mine.column("_live"), False))
                         .drop_columns(["_live"]))
        schema = self._row_schema(name)
        arrow_schema = driver_rows.arrow_schema(schema)
        try:
            rows = pa.concat_tables([p.select(arrow_schema.names).cast(arrow_schema)
                                     for p in parts])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            return None  # types Spark would reconcile: its plan does
        return rows, schema

    def _row_schema(self, name: str) -> StructType:
        """The schema of keyed table ``name``'s rows: the committed table's types, a
        column nullable if it is in the committed table or in the overlay."""
        over = self.overlay.get(name)
        mine = None if over is None else StructType(
            [f for f in over.schema.fields if f.name != "_live"])
        if not self.has(name):
            assert mine is not None
            return mine
        base = self.schema(name)
        if mine is None:
            return base
        loose = {f.name: f.nullable for f in mine.fields}
        return StructType([StructField(f.name, f.dataType, f.nullable or loose.get(f.name, True))
                           for f in base.fields])

    def upsert(self, name: str, rows: DataFrame | Rows, count: str | None = None) -> None:
        """Override keyed table ``name``'s rows with ``rows`` (one per ``_g``) until
        :meth:`flush_overlays`; a row whose column ``count`` is 0 deletes its key (with
        no ``count`` every row is live). Rows the driver holds are merged there."""
        live = driver_rows.with_live(Rows.of_frame(rows), count)
        over = self.overlay.get(name)
        if over is not None:
            merged = driver_rows.replace_by_key(over, live, "_g")
            live = merged if merged is not None else Rows.of_frame(over.frame().join(
                live.frame().select("_g"), "_g", "left_anti").unionByName(live.frame()))
        self.overlay[name] = cut(live)[0]  # cuts the steps' lineage

    def current(self, name: str) -> Rows | None:
        """All rows of keyed table ``name``, with this epoch's upserts."""
        base, over = self.read(name), self.overlay.get(name)
        if over is None:
            return None if base is None else Rows.of_frame(base)
        held = self._current_held(name)
        if held is not None:
            return Rows.of_arrow(self.spark, *held)
        mine = over.frame().where("_live").drop("_live")
        if base is None:
            return Rows.of_frame(mine)
        return Rows.of_frame(base.join(over.frame().select("_g"), "_g", "left_anti")
                             .unionByName(mine))

    def flush_overlays(self) -> None:
        """Merge every upserted table into its committed rows (one full outer join on the
        lineage, the state side read where it lies) and stage the result."""
        for name, over in self.overlay.items():
            held = self._current_held(name)  # the driver merges them when it holds both
            if held is not None:
                self.stage(name, Rows.of_arrow(self.spark, *held), ["_g"], "replace")
                continue
            base = self.read(name)
            if base is None:
                merged = over.frame().where("_live").drop("_live")
            else:
                b, o = base.alias("b"), over.frame().alias("o")
                j = b.join(o, F.col("b._g") == F.col("o._g"), "full_outer")
                took = F.col("o._g").isNotNull()
                merged = j.where(~took | F.col("o._live")).select(*[
                    F.when(took, F.col(f"o.`{c}`")).otherwise(F.col(f"b.`{c}`")).alias(c)
                    for c in base.columns])
            self.stage(name, merged, ["_g"], "replace")
        self.overlay.clear()

    def commit_files(self) -> dict[str, dict]:
        """Move staged files into their tables; the tables' new file lists."""
        out = {k: dict(v) for k, v in self.live.items()}
        for s in self.staged:
            if s.df is not None:
                raise StrataError(f"table {s.name!r} was staged but never written")
            moved = []
            for f in s.files:
                dst = fs.join(self._dir(s.name), f.rsplit("/", 1)[1])
                fs.move(f, dst)
                FILE_CACHE.move(f, dst)
                moved.append(dst)
            before = out.get(s.name, {})
            old = before.get("files", []) if s.mode != "replace" else []
            out[s.name] = {"files": old + moved, "ddl": s.ddl, "lineage": s.lineage}
            if s.mode == "replace" and s.rows is not None:
                out[s.name]["rows"] = s.rows
            if s.mode == "versions":
                out[s.name]["versions"] = True
                out[s.name]["whole_rows"] = before.get("whole_rows", before.get("rows", 0))
        return out

    def needs_compaction(self, name: str, bucketed: bool = True, factor: int = 1) -> bool:
        """Whether table ``name`` has so many files that it should be rewritten (netted):
        more than ``factor`` × ``COMPACT_FILES_PER_BUCKET`` per bucket (or in all, if not
        bucketed)."""
        files = len(self.live.get(name, {}).get("files", []))
        return files >= factor * COMPACT_FILES_PER_BUCKET * (self.n if bucketed else 1)
