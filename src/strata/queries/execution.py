"""Run an incremental query's epoch on Spark as DataFrame plans (no Python per record).

State lives in bucketed Parquet tables under ``state/<stage>/tables/<name>/``, each
registered in the session's catalog as ``CLUSTERED BY (lineage) INTO n BUCKETS`` at its
location. Spark then joins a table with an increment bucketed the same way by shuffling
only the increment: the state side is read where it lies, in every epoch and after
restarts (docs/architecture.md, "Query state: bucketed tables"). A join's inputs are
appended to; a group-by's table is rewritten from the full outer join of state and
``h(Δ)``, which is already partitioned by bucket, so the write needs no shuffle either.

An epoch writes new table files to ``staging/``, the output increment to ``flows/``,
moves the staged files into the tables' directories and commits a manifest that lists
every live file. Files that an interrupted epoch moved but never committed are deleted
before the next epoch reads anything (and by the stage's garbage collection).
"""

from __future__ import annotations

import functools
import hashlib
import operator
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import SparkContext, StorageLevel, inheritable_thread_target
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from sqlglot import exp

from strata.model.errors import StrataError
from strata.model.schema import parse_ddl
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.queries.algebra import GroupBy, Join, Map, Nearest, Node, Scan
from strata.queries.expressions import MULT, bind, substitute, to_sql, widest
from strata.queries.incremental import GroupPlan, IncrementalQuery, JoinPlan, scanned
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.increments import Increment, read_records, write_table
from strata.storage.manifest import StateSnapshot

ANSWER = "answer"  # the table holding a query's answer when its root is not a group-by
BUCKET = "_strata_bucket"  # the partition column a bucketed table's write is split by
COMPACT_FILES_PER_BUCKET = 8  # a join input table is compacted beyond this many runs
MAX_CENTERS = 10_000  # a nearest join's centers are compared with every row
OUTPUT_ROWS_PER_TASK = 1_000_000  # input records per task writing an epoch's changes
# Session confs while a query epoch runs (besides its shuffle partitions). Spark plans a
# cached DataFrame (each epoch caches two or three) without automatic bucketed-scan removal
# and, unless cached plans may change their output partitioning, without AQE's final-stage
# shuffle optimisations: it clones the whole session to switch off any of these that is on.
# Off for the epoch, the session is used as it is. The plans stay the same: AQE is off in
# strata, and an epoch scans its tables in cached plans or in a grouping that needs buckets.
EPOCH_CONF = {"spark.sql.sources.bucketing.autoBucketedScan.enabled": "false",
              "spark.sql.adaptive.applyFinalStageShuffleOptimizations": "false"}
DRIVER_ROWS = 100_000  # an epoch's changes, an appended increment or a rewritten table up
# to this many rows: written by the driver
WRITE_THREADS = 4  # an epoch's writes run as this many concurrent Spark jobs at most


def _registered(spark: SparkSession) -> set[str]:
    """The strata tables this Spark application's catalog already has (registering one is
    a catalog round trip per epoch otherwise; a catalog is shared by the sessions of one
    application, that is of one SparkContext)."""
    return _REGISTERED.setdefault(spark.sparkContext, set())


_REGISTERED: weakref.WeakKeyDictionary[SparkContext, set[str]] = weakref.WeakKeyDictionary()


def ddl_of(schema: StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


@dataclass
class _Staged:
    """A table write of the epoch: ``df`` until written, then the ``files`` in staging."""

    name: str
    ddl: str
    mode: str  # "append" or "replace"
    lineage: list[str]
    path: str
    df: DataFrame | None
    files: list[str] = field(default_factory=list)
    rows: int | None = None  # of a replacing write, once written


class QueryTables:
    """The state tables of one query stage in one epoch."""

    def __init__(self, spark: SparkSession, layout: StageLayout, live: Mapping[str, dict],
                 n: int, token: str, sweep: bool = True) -> None:
        self.spark, self.layout, self.n, self.token = spark, layout, n, token
        self.live = {k: dict(v) for k, v in live.items()}
        self.staged: list[_Staged] = []
        self.overlay: dict[str, DataFrame] = {}  # keyed rows upserted, not yet staged
        self._read: dict[str, DataFrame | None] = {}
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
        if name not in self._read:  # its files do not change before the epoch commits
            self._read[name] = self._open(name)
        return self._read[name]

    def _open(self, name: str) -> DataFrame | None:
        t = self.live.get(name)
        if not t or not t["files"]:
            return None
        if not t["lineage"]:
            return self.spark.read.schema(t["ddl"]).parquet(*t["files"])
        ident = "strata_" + hashlib.sha1(
            f"{self._dir(name)}|{t['ddl']}|{self.n}".encode()).hexdigest()[:20]
        registered = _registered(self.spark)
        if ident not in registered:
            cols = ", ".join(f"`{c}`" for c in t["lineage"])
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS {ident} ({t['ddl']}) USING parquet "
                           f"CLUSTERED BY ({cols}) INTO {self.n} BUCKETS "
                           f"LOCATION '{self._dir(name)}'")
            registered.add(ident)
        self.spark.catalog.refreshTable(ident)  # its files changed since Spark listed them
        return self.spark.table(ident)

    def stage(self, name: str, df: DataFrame, lineage: Sequence[str], mode: str) -> None:
        """Stage ``df`` for table ``name``: ``mode`` is ``append`` (added to the table's
        files) or ``replace`` (becomes the table). Nothing runs yet: :meth:`writes` gives
        the epoch's staged writes, which run together with the epoch's output write."""
        path = fs.join(self.layout.staging_dir(self.token), f"{name}-{len(self.staged)}")
        self.staged.append(_Staged(name, ddl_of(df.schema), mode, list(lineage), path, df))

    def writes(self) -> list[Callable[[], None]]:
        """One function per staged table write; each writes its files into staging."""
        return [functools.partial(self._write, s) for s in self.staged if s.df is not None]

    def _write(self, s: _Staged) -> None:
        if s.lineage:
            files = None
            if s.mode == "append" or self._small(s.name):
                files, s.rows = self._write_small_bucketed(s.df, s.lineage, s.path)
            if files is None:
                files = self._write_bucketed(s.df, s.lineage, s.path)
                if s.mode == "replace":  # from the files' footers: no Spark job
                    s.rows = sum(pq.read_metadata(p, filesystem=fsys).num_rows
                                 for fsys, p in map(fs.resolve, files))
            s.files = files
        else:
            write_parquet(s.df, s.path)
            s.files = [fs.join(s.path, f) for f in fs.list_dir(s.path) if f.startswith("part-")]
        s.df = None

    def _small(self, name: str) -> bool:
        """Whether table ``name`` had at most half of ``DRIVER_ROWS`` rows: a rewrite of
        it likely fits on the driver (one that does not falls back to Spark)."""
        rows = self.live.get(name, {}).get("rows")
        return rows is not None and rows <= DRIVER_ROWS // 2

    def _write_small_bucketed(self, df: DataFrame, lineage: Sequence[str],
                              path: str) -> tuple[list[str] | None, int]:
        """Like :meth:`_write_bucketed` for up to ``DRIVER_ROWS`` rows (an increment
        appended to a join input or a small group-by's state usually is): the rows, with
        their bucket, come to the driver as Arrow and each bucket is written as one file.
        The files (None if there are more rows) and the number of rows."""
        table = (df.withColumn(BUCKET, self._bucket(lineage)).coalesce(1)
                 .limit(DRIVER_ROWS + 1).toArrow())
        if table.num_rows > DRIVER_ROWS:
            return None, table.num_rows
        bucket, table = table.column(BUCKET), table.drop_columns([BUCKET])
        files = []
        for b in sorted(pc.unique(bucket).to_pylist()):
            uri = fs.join(path, f"part-00000-{uuid.uuid4().hex[:12]}_{b:05d}.c000.parquet")
            write_table(uri, table.filter(pc.equal(bucket, b)))
            files.append(uri)
        return files, table.num_rows

    def _bucket(self, lineage: Sequence[str]) -> Column:
        """A row's bucket as Spark's ``bucketBy`` computes it: ``pmod(murmur3(lineage), n)``."""
        cols = ", ".join(f"`{c}`" for c in lineage)
        return F.expr(f"pmod(hash({cols}), {self.n})")

    def _write_bucketed(self, df: DataFrame, lineage: Sequence[str], path: str) -> list[str]:
        """Write ``df`` as files of a table bucketed by ``lineage`` into ``n`` buckets.

        A row's bucket is Spark's own (``pmod(murmur3(lineage), n)``, the expression behind
        ``bucketBy``), written as a partition column: each bucket's files land in their
        own directory and are renamed with the bucket number as ``bucketBy`` names them
        (``part-…_00003.c000.snappy.parquet``), which is how a bucketed scan assigns files
        to buckets. Unlike ``bucketBy`` (which writes only through ``saveAsTable``) this
        needs no catalog table per write. The rows stay in the partitions they were
        computed in (no shuffle), in at most one task per core."""
        tasks = max(1, min(self.n, self.spark.sparkContext.defaultParallelism))
        write_parquet(df.withColumn(BUCKET, self._bucket(lineage)).coalesce(tasks), path,
                      [BUCKET])
        files = []
        for d in fs.list_dir(path):
            if not d.startswith(f"{BUCKET}="):
                continue
            b = int(d.split("=", 1)[1])
            for f in fs.list_dir(fs.join(path, d)):
                if f.startswith("part-"):
                    stem, ext = f.split(".", 1)
                    dst = fs.join(path, f"{stem}_{b:05d}.{ext}")
                    fs.move(fs.join(path, d, f), dst)
                    files.append(dst)
        return sorted(files)

    # -- deferred writes (the steps of an iteration) -----------------------------------
    def lookup(self, name: str, keys: DataFrame) -> DataFrame | None:
        """The rows of keyed table ``name`` (committed, then overridden by rows upserted
        this epoch) whose ``_g`` is among ``keys``; None if it has neither."""
        base, over = self.read(name), self.overlay.get(name)
        if base is None and over is None:
            return None
        found = None
        if base is not None:  # a semi join with the bucketed table shuffles only ``keys``
            found = base.join(keys, "_g", "left_semi")
            if over is not None:
                found = found.join(over.select("_g"), "_g", "left_anti")
        if over is not None:
            mine = over.join(keys, "_g", "left_semi").where("_live").drop("_live")
            found = mine if found is None else found.unionByName(mine)
        return found

    def upsert(self, name: str, rows: DataFrame, live: Column) -> None:
        """Override keyed table ``name``'s rows with ``rows`` until :meth:`flush`; rows
        where ``live`` is false delete their key."""
        rows = rows.withColumn("_live", live)
        over = self.overlay.get(name)
        if over is not None:
            rows = over.join(rows.select("_g"), "_g", "left_anti").unionByName(rows)
        self.overlay[name] = cut(rows)[0]  # cuts the steps' lineage

    def current(self, name: str) -> DataFrame | None:
        """All rows of keyed table ``name``, with this epoch's upserts."""
        base, over = self.read(name), self.overlay.get(name)
        if over is None:
            return base
        mine = over.where("_live").drop("_live")
        if base is None:
            return mine
        return base.join(over.select("_g"), "_g", "left_anti").unionByName(mine)

    def flush_overlays(self) -> None:
        """Merge every upserted table into its committed rows (one full outer join on the
        lineage, the state side read where it lies) and stage the result."""
        for name, over in self.overlay.items():
            base = self.read(name)
            if base is None:
                merged = over.where("_live").drop("_live")
            else:
                b, o = base.alias("b"), over.alias("o")
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
                moved.append(dst)
            old = out.get(s.name, {}).get("files", []) if s.mode == "append" else []
            out[s.name] = {"files": old + moved, "ddl": s.ddl, "lineage": s.lineage}
            if s.mode == "replace" and s.rows is not None:
                out[s.name]["rows"] = s.rows
        return out


class QueryProgram(StageProgram):
    """The compiled form of a query stage: runs its epochs on Spark."""

    kind = "query"

    def __init__(self, inc: IncrementalQuery, flow_ddl: Mapping[str, str], output: str,
                 output_ddl: str) -> None:
        self.inc = inc
        self.flow_ddl = dict(flow_ddl)  # input flow -> its DDL (with _mult if it has one)
        self.output = output
        self.output_ddl = output_ddl
        self._casts: list[str] | None = None
        self._schema: pa.Schema | None = None

    def answer_spec(self) -> dict:
        """What reading the answer needs, kept in each epoch's manifest so that the answer
        can be read without the dataflow or Spark (``strata show NAME``)."""
        root, q = self.inc.root, self.inc.query
        grouped = isinstance(root, GroupBy)
        counts = []
        if grouped and not root.keys:  # a total aggregate over no rows: count 0, else NULL
            counts = [n for n, e in root.outputs if getattr(e, "name", "") in {
                f"_a{i}" for i, a in enumerate(root.aggs) if a.func == "count"}]
        return {"table": self.inc.groups[id(root)].name if grouped else ANSWER,
                "grouped": grouped, "total": grouped and not root.keys,
                "total_counts": counts, "columns": list(q.columns), "ddl": self.output_ddl,
                "order_by": [list(o) for o in q.order_by], "limit": q.limit}

    # -- one epoch -------------------------------------------------------------------------
    def evaluate(self, run: _EpochRun) -> DataFrame:
        """The epoch's output changes; the new table contents are staged in ``run``."""
        changes = run.changes(self.inc.root)
        if not isinstance(self.inc.root, GroupBy):
            run.tables.stage(ANSWER, changes, [], "append")
        return changes

    def run(self, ctx: EpochContext) -> EpochOutcome:
        spark, n = ctx.spark, ctx.num_partitions
        previous = _set_confs(spark, {**EPOCH_CONF, "spark.sql.shuffle.partitions": str(n)})
        out_dir = ctx.output_dir(self.output)
        try:
            tables = QueryTables(spark, ctx.layout, _tables_of(ctx.committed), n, ctx.token)
            run = _EpochRun(self, spark, tables, ctx.inputs)
            try:
                changes = self.evaluate(run)
                out = changes.selectExpr(*self._output_casts())
                write_out = functools.partial(self._write_output, out, out_dir,
                                              _output_tasks(ctx.input_records, n))
                run_all(spark, [*tables.writes(), write_out])
            finally:
                run.release()
        finally:
            _set_confs(spark, previous)
        files = [fs.join(out_dir, f) for f in sorted(fs.list_dir(out_dir))
                 if f.startswith("part-")]
        rows = sum(pq.read_metadata(path, filesystem=fsys).num_rows
                   for fsys, path in map(fs.resolve, files))
        outputs = {self.output: Increment(tuple(files), rows, sum(fs.size_of(f) for f in files))}
        return EpochOutcome(outputs, {"tables": tables.commit_files(),
                                      "answer": self.answer_spec()}, n)

    # -- the committed state, read from files -------------------------------------------
    @classmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        """Rows of each table, marked with the table's name."""
        return [{"_table": name, **r} for name, t in _tables_of(snap).items()
                for r in read_records(t["files"])]

    @classmethod
    def read_answer(cls, layout: StageLayout, snap: StateSnapshot) -> pa.Table:
        from strata.queries.stage import read_answer

        return read_answer(snap)

    @classmethod
    def state_bytes(cls, layout: StageLayout, state: Mapping[str, Any]) -> int:
        return sum(fs.size_of(f) for t in state.get("tables", {}).values() for f in t["files"])

    @classmethod
    def collect_garbage(cls, layout: StageLayout, keep: StateSnapshot) -> None:
        referenced = {f for t in _tables_of(keep).values() for f in t["files"]}
        for table in fs.list_dir(layout.tables_root):
            for name in fs.list_dir(layout.table_dir(table)):
                uri = fs.join(layout.table_dir(table), name)
                if uri not in referenced:
                    fs.delete_quietly(uri)
        fs.delete_quietly(layout.staging_dir())

    def _write_output(self, out: DataFrame, out_dir: str, tasks: int) -> None:
        """Write the epoch's changes into ``out_dir``. Up to ``DRIVER_ROWS`` rows (an
        increment's changes usually are) come to the driver as Arrow and are written as one
        file the way ingested increments are, which costs a fraction of a Spark write job
        (committer, Hadoop job set-up, task-side writers); more are written by Spark, in
        ``tasks`` tasks."""
        table = out.coalesce(1).limit(DRIVER_ROWS + 1).toArrow()
        if table.num_rows <= DRIVER_ROWS:
            try:
                table = table.cast(self._output_schema())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # a type Arrow does not cast to the declared one: Spark writes it
            else:
                write_table(fs.join(out_dir, "part-00000.parquet"), table)
                return
        write_parquet(out.coalesce(tasks), out_dir)

    def _output_schema(self) -> pa.Schema:
        if self._schema is None:
            self._schema = parse_ddl(self.output_ddl)
        return self._schema

    def _output_casts(self) -> list[str]:
        """SQL casting the changes' columns to the declared output schema, in its order."""
        if self._casts is None:
            self._casts = [f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`"
                           for f in _spark_type(self.output_ddl).fields]
        return self._casts



def cut(df: DataFrame) -> tuple[DataFrame, int | None]:
    """``df`` computed now, as a DataFrame without lineage, and its rows if counted.

    Up to ``DRIVER_ROWS`` rows (an iteration step's changes usually are) come to the driver
    as Arrow and go back as a local DataFrame: one small job, and the plans built on it stay
    shallow and cheap to schedule however many steps run. More rows are checkpointed on the
    executors instead."""
    rows = local_rows(df)
    if rows is not None:
        return df, rows
    table = df.coalesce(1).limit(DRIVER_ROWS + 1).toArrow()
    if table.num_rows <= DRIVER_ROWS:
        return df.sparkSession.createDataFrame(table, schema=df.schema), table.num_rows
    return df.localCheckpoint(eager=True), None


def local_rows(df: DataFrame) -> int | None:
    """How many rows ``df`` has if Spark's optimizer makes it a local relation (rows held
    by the driver, e.g. from :func:`cut`, filtered or projected); else None."""
    plan = df._jdf.queryExecution().optimizedPlan()
    if plan.getClass().getSimpleName() == "LocalRelation":
        return plan.data().size()
    return None


def empty_frame(spark: SparkSession, ddl: str) -> DataFrame:
    """An empty DataFrame of schema ``ddl`` that Spark's optimizer knows to be empty (a
    local relation: joins with it are dropped from plans, unlike an empty RDD's)."""
    schema = _spark_type(ddl)
    return spark.createDataFrame(to_arrow_schema(schema).empty_table(), schema=schema)


def run_all(spark: SparkSession, writes: Sequence[Callable[[], None]]) -> None:
    """Run an epoch's writes as concurrent Spark jobs (one thread each, up to
    ``WRITE_THREADS``), so that one job's planning, file commits and scheduling overlap
    another's tasks; they read the same cached DataFrames. Waits for all of them, then
    raises the first error (in the order given)."""
    if WRITE_THREADS <= 1 or len(writes) <= 1:
        for w in writes:
            w()
        return
    global _POOL
    if _POOL is None:  # threads kept between epochs: each has its own JVM connection
        _POOL = ThreadPoolExecutor(WRITE_THREADS, "strata-write")
    # each write inherits the caller's job group and description (Spark's local properties)
    inherit = inheritable_thread_target(spark)
    futures = [_POOL.submit(inherit(w)) for w in writes]
    wait(futures)
    for f in futures:
        f.result()


_POOL: ThreadPoolExecutor | None = None


def write_parquet(df: DataFrame, path: str, partition_by: Sequence[str] = ()) -> None:
    """Write ``df`` as Parquet files into the new directory ``path`` through Spark's
    committer, with less fixed work per write (it shows in small epochs): no ``_SUCCESS``
    marker (a manifest says which files are live), and on a local filesystem no ``.crc``
    file per file. The directory and the committer's ``_temporary/0/_temporary`` are made
    here, because Hadoop's local filesystem (without its native library) starts a
    ``chmod`` process for every directory and file it creates."""
    fsys, p = fs.resolve(path)
    fsys.create_dir(f"{p}/_temporary/0/_temporary", recursive=True)
    writer = df.write.mode("append").option(
        "mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
    if "://" not in path or path.startswith("file:"):
        writer = (writer.option("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
                  .option("fs.file.impl.disable.cache", "true"))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(path)


def _set_confs(spark: SparkSession, confs: Mapping[str, str]) -> dict[str, str]:
    """Set session confs; their previous values (for setting them back)."""
    previous = {k: spark.conf.get(k) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    return previous


def _output_tasks(records: int, n: int) -> int:
    """How many tasks write an epoch's changes: one per ``OUTPUT_ROWS_PER_TASK`` input
    records (the changes of a group-by are at most twice its input's groups), at most
    ``n``. An epoch's changes are usually small, and a write costs about the same per
    task and file whatever their size."""
    return max(1, min(n, -(-records // OUTPUT_ROWS_PER_TASK)))



class _EpochRun:
    """Evaluates the changes of every operator for one epoch (bottom-up).

    An iteration evaluates its step several times in one epoch. Then the run is
    *deferred*: a group-by merges only the groups a step touches (a right outer join
    with the state, the paper's diffusion) into an overlay, join inputs are held back,
    and :meth:`flush` merges everything into the tables once at the end."""

    def __init__(self, program: QueryProgram, spark: SparkSession, tables: QueryTables,
                 inputs: Mapping[str, Increment | Sequence[Increment]]) -> None:
        self.program, self.spark, self.tables, self.inputs = program, spark, tables, inputs
        self._cached: list[DataFrame] = []
        self.frames: dict[str, DataFrame] = {}  # flow -> its changes, given directly
        self.whole: dict[str, str] = {}  # flow -> the keyed table holding all its rows
        self.deferred = False
        self.only: str | None = None  # when set: subtrees not reading this flow are quiet
        self._held: dict[str, list[DataFrame]] = {}  # join inputs appended when flushed
        self._lineage: dict[str, list[str]] = {}  # a held join input's lineage columns
        self._assigned: dict[int, tuple[DataFrame, DataFrame | None]] = {}

    def release(self) -> None:
        for df in self._cached:
            df.unpersist()

    def flush(self) -> None:
        """Write what a deferred run held back: join inputs, then merged group states."""
        self.deferred = False
        for name, frames in self._held.items():
            delta = frames[0]
            for f in frames[1:]:
                delta = delta.unionByName(f)
            self._append(name, delta, self.tables.read(name), self._lineage[name])
        self._held.clear()
        self.tables.flush_overlays()

    def changes(self, node: Node) -> DataFrame:
        """The rows ``node``'s result gains (``_mult`` > 0) and loses (< 0) this epoch."""
        if self.only is not None and self.only not in scanned(node):
            return self._empty(node)
        if isinstance(node, Scan):
            return self._scan(node)
        if isinstance(node, Nearest):
            return self._nearest(node, self.changes(node.left))
        if isinstance(node, Map):
            d = self.changes(node.child)
            if node.where is not None:
                d = d.where(F.expr(to_sql(node.where)))
            if node.outputs is not None:
                d = d.select(*[F.expr(to_sql(e)).alias(n) for n, e in node.outputs], MULT)
            return d
        if isinstance(node, Join):
            return self._join(self.program.inc.joins[id(node)],
                              self.changes(node.left), self.changes(node.right))
        if isinstance(node, GroupBy):
            return self._group(self.program.inc.groups[id(node)], self.changes(node.child))
        raise StrataError(f"cannot run query operator {type(node).__name__}")

    def _empty(self, node: Node) -> DataFrame:
        ddl = ", ".join([*(f"`{c}` {t}" for c, t in node.columns.items()), f"{MULT} bigint"])
        return empty_frame(self.spark, ddl)

    def _scan(self, node: Scan) -> DataFrame:
        if node.flow in self.frames:
            df = self.frames[node.flow]
            return df.select(*[F.col(f"`{c}`").alias(node.prefix + c) for c in node.schema],
                             MULT)
        df = self.flow_rows(node.flow)
        return df.select(*[F.col(f"`{c}`").alias(node.prefix + c) for c in node.schema],
                         MULT)

    def flow_rows(self, flow: str) -> DataFrame:
        """The epoch's increment of input ``flow``: its columns and ``_mult`` (1 if the
        flow has none)."""
        incs = self.inputs.get(flow, ())
        files = [f for inc in ([incs] if isinstance(incs, Increment) else incs)
                 for f in inc.files]
        ddl = self.program.flow_ddl[flow]
        df = (self.spark.read.schema(ddl).parquet(*files) if files
              else empty_frame(self.spark, ddl))
        if MULT in df.columns:
            return df.withColumn(MULT, F.col(MULT).cast("bigint"))
        return df.withColumn(MULT, F.lit(1).cast("bigint"))

    def _materialize(self, df: DataFrame) -> DataFrame:
        """``df``, computed once when first used. A deferred run leaves it as it is: what
        one step of an iteration passes to the next is cut from its plan by
        :meth:`QueryTables.upsert` and :func:`cut` (many cached plans would slow down the
        planning of every step, as Spark compares each plan with every cached one)."""
        if self.deferred:
            return df
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._cached.append(df)
        return df

    # -- join ------------------------------------------------------------------------------
    def _join(self, plan: JoinPlan, dl: DataFrame, dr: DataFrame) -> DataFrame:
        node = plan.node
        types = [widest([node.left.columns[a], node.right.columns[b]]) for a, b in node.on]

        lineage = [f"_j{i}" for i in range(len(types))]

        def keyed(d: DataFrame, cols: list[str]) -> DataFrame:
            # the lineage is the join key cast to a common type, one top-level column per
            # part: Spark hashes and compares those far faster than a struct of them
            ok = F.lit(True)
            for c in cols:
                ok = ok & F.col(f"`{c}`").isNotNull()  # NULL never equals anything
            return d.where(ok).select("*", *[
                F.col(f"`{c}`").cast(t).alias(j)
                for c, t, j in zip(cols, types, lineage, strict=True)])

        dl, dr = keyed(dl, node.left_keys), keyed(dr, node.right_keys)
        left, right = self.tables.read(f"{plan.name}_left"), self.tables.read(
            f"{plan.name}_right")
        lcols, rcols = list(node.left.columns), list(node.right.columns)
        on = functools.reduce(operator.and_, [F.col(f"l.{j}") == F.col(f"r.{j}")
                                              for j in lineage])

        def pair(a: DataFrame, b: DataFrame) -> DataFrame:
            j = a.alias("l").join(b.alias("r"), on)
            return j.select(*[F.col(f"l.`{c}`") for c in lcols],
                            *[F.col(f"r.`{c}`") for c in rcols],
                            (F.col(f"l.{MULT}") * F.col(f"r.{MULT}")).alias(MULT))

        # a side known to be empty (quiet in an iteration step) joins with nothing: its
        # pairs are not built at all, as analysing them would cost more with every step
        quiet_l, quiet_r = local_rows(dl) == 0, local_rows(dr) == 0
        parts = [pair(dl, dr)]
        if right is not None and not quiet_l:
            parts.append(pair(dl, right))
        if left is not None and not quiet_r:
            parts.append(pair(left, dr))
        # rows held back by earlier steps of this epoch (joined apart, so that the
        # bucketed tables above are still read where they lie)
        if not quiet_l:
            parts += [pair(dl, r) for r in self._held.get(f"{plan.name}_right", [])]
        if not quiet_r:
            parts += [pair(lh, dr) for lh in self._held.get(f"{plan.name}_left", [])]
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        out = self._materialize(out)
        for side, delta, old in (("left", dl, left), ("right", dr, right)):
            self._append(f"{plan.name}_{side}", delta, old, lineage)
        return out

    def _append(self, name: str, delta: DataFrame, old: DataFrame | None,
                lineage: list[str]) -> None:
        """Append a join input's increment to its table; when the table has many files,
        first rewrite it with rows netted (a delete cancels its insert), bucket by bucket."""
        if self.deferred:
            if local_rows(delta) != 0:
                self._held.setdefault(name, []).append(delta)
                self._lineage[name] = lineage
            return
        files = len(self.tables.live.get(name, {}).get("files", []))
        if old is not None and files >= COMPACT_FILES_PER_BUCKET * self.tables.n:
            # grouping the bucketed table by all its columns (the lineage among them)
            # needs no shuffle: each bucket is netted where it lies
            cols = [c for c in old.columns if c != MULT]
            netted = (old.groupBy(*cols).agg(F.sum(MULT).alias(MULT)).where(f"{MULT} <> 0")
                      .select(*old.columns))
            self.tables.stage(name, netted, lineage, "replace")
        self.tables.stage(name, delta, lineage, "append")  # bucketed where it is: no shuffle

    # -- nearest join ----------------------------------------------------------------------
    def _nearest(self, node: Nearest, d: DataFrame) -> DataFrame:
        """This epoch's rows assigned to the nearest current center. A later step of the
        epoch re-assigns them: it retracts the previous assignment and inserts the new."""
        rows, before = self._assigned.get(id(node), (None, None))
        if rows is None:  # the first step: the epoch's new rows
            rows = cut(d)[0]
        assert isinstance(node.right, Scan)
        centers = self.tables.current(self.whole[node.right.flow])
        cols = list(node.right.schema)
        got = centers.select(*cols).limit(MAX_CENTERS + 1).collect() if centers else []
        if len(got) > MAX_CENTERS:
            raise StrataError(f"a nearest join compares each row with every center; "
                              f"{node.right.flow} has more than {MAX_CENTERS}")
        if not got:
            now = self._empty(node)
        else:
            prefixed = [node.right.prefix + c for c in cols]
            dists = []
            for i, r in enumerate(got):
                lits = {p: exp.cast(exp.Literal.string(str(r[c])) if r[c] is not None
                                    else exp.Null(), node.right.columns[p])
                        for p, c in zip(prefixed, cols, strict=True)}
                dist = F.expr(to_sql(substitute(node.distance, lits)))
                dists.append(F.struct(F.coalesce(dist.cast("double"), F.lit(float("inf"))),
                                      F.lit(i)))
            pick = (F.least(*dists) if len(dists) > 1 else dists[0]).getField("col2")
            table = self.spark.createDataFrame(
                [(i, *[r[c] for c in cols]) for i, r in enumerate(got)],
                ", ".join(["`_i` int", *(f"`{p}` {node.right.columns[p]}"
                                          for p in prefixed)]))
            now = (rows.withColumn("_i", pick).join(F.broadcast(table), "_i")
                   .select(*node.columns, MULT))
        now = cut(now)[0]
        self._assigned[id(node)] = (rows, now)
        if before is None:
            return now
        return now.unionByName(before.withColumn(MULT, -F.col(MULT)))

    # -- group-by --------------------------------------------------------------------------
    def _group(self, plan: GroupPlan, d: DataFrame) -> DataFrame:
        node = plan.node
        key_cols = [F.expr(to_sql(e)).alias(n) for n, e in node.keys] or [F.lit(0).alias("_t")]
        keyed = d.select(F.struct(*key_cols).alias("_g"), "*")
        plain = [p for p in plan.parts if p.kind != "multiset"]
        h = keyed.groupBy("_g").agg(*[F.expr(p.lift).alias(p.name) for p in plain])
        for p in plan.parts:
            if p.kind != "multiset":
                continue
            v = (keyed.where(F.expr(f"{p.lift} IS NOT NULL"))
                 .groupBy("_g", F.expr(p.lift).alias("_v")).agg(F.sum(MULT).alias("_c"))
                 .where("_c <> 0")
                 .groupBy("_g").agg(F.map_from_entries(F.collect_list(F.struct("_v", "_c")))
                                    .alias(p.name)))
            h = h.join(v, "_g", "left")
        outputs = [n for n, _ in node.outputs]
        if self.deferred:  # only the groups this step touches
            state = self.tables.lookup(plan.name, h.select("_g"))
        else:
            state = self.tables.read(plan.name)
        if state is None:  # no state yet: an empty table of the same shape
            empty = h.select("*", *[F.lit(None).cast(_spark_type(node.columns[o])).alias(o)
                                    for o in outputs], F.lit(False).alias("_keep")).limit(0)
            state = empty
        s, dd = state.alias("s"), h.alias("d")
        j = s.join(dd, F.col("s._g") == F.col("d._g"),
                   "right_outer" if self.deferred else "full_outer")
        merged = [F.coalesce(F.col("s._g"), F.col("d._g")).alias("_g"),
                  F.col("d._g").isNotNull().alias("_touched"),
                  F.coalesce(F.col("s._keep"), F.lit(False)).alias("_old_keep"),
                  *[F.col(f"s.`{o}`").alias(f"_old_{o}") for o in outputs]]
        merged += [F.expr(bind(p.merge, {"s": f"s.`{p.name}`", "d": f"d.`{p.name}`"}))
                   .alias(p.name) for p in plan.parts]
        m = j.select(*merged)
        filled = {p.name: f"coalesce(`{p.name}`, 0)" if p.kind == "add" else f"`{p.name}`"
                  for p in plan.parts}
        scope = {n: f"_g.`{n}`" for n, _ in node.keys}  # a: over keys and aggregate answers
        scope.update({a: bind(sql, filled) if filled else sql
                      for a, sql in plan.answer_sql().items()})
        m = m.select("*", *[F.expr(bind(to_sql(e), scope)).alias(o)
                            for o, e in node.outputs])
        keep = F.col("_cnt") != 0
        if node.having is not None:
            keep = keep & F.coalesce(F.expr(bind(to_sql(node.having), scope)), F.lit(False))
        m = m.withColumn("_keep", keep)
        m = cut(m)[0] if self.deferred else self._materialize(m)
        state_cols = ["_g", *[p.name for p in plan.parts], *outputs, "_keep"]
        if self.deferred:
            self.tables.upsert(plan.name, m.select(*state_cols), F.col("_cnt") != 0)
        else:
            self.tables.stage(plan.name, m.where("_cnt <> 0").select(*state_cols), ["_g"],
                              "replace")
        same = F.lit(True)
        for o in outputs:
            same = same & F.col(f"`{o}`").eqNullSafe(F.col(f"`_old_{o}`"))
        touched = m.where("_touched")
        retract = touched.where(F.col("_old_keep") & ~(F.col("_keep") & same)).select(
            *[F.col(f"`_old_{o}`").alias(o) for o in outputs], F.lit(-1).cast("bigint")
            .alias(MULT))
        insert = touched.where(F.col("_keep") & ~(F.col("_old_keep") & same)).select(
            *[F.col(f"`{o}`") for o in outputs], F.lit(1).cast("bigint").alias(MULT))
        return self._materialize(retract.unionByName(insert))


def _spark_type(sql_type: str):
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(sql_type)


def output_ddl(columns: Mapping[str, str]) -> str:
    """The DDL of a query's output flow: its columns and the multiplicity."""
    return ", ".join([*(f"`{c}` {t}" for c, t in columns.items()), f"`{MULT}` bigint"])



def _tables_of(snap: StateSnapshot) -> dict[str, dict]:
    """A query stage's committed tables: name -> files, DDL, lineage (and rows)."""
    return snap.state.get("tables", {})
