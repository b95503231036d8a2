"""The program of query stages: one epoch of an incremental query as DataFrame plans.

:class:`QueryProgram` implements the stage-program contract (``physical/program.py``):
``run`` evaluates the epoch's changes with an :class:`~strata.queries.spark.evaluator.Evaluator`,
writes the changed tables into staging and the changes as the output increment, moves the
staged files into place and describes the new tables; the runner commits the manifest.
The committed state is read back (``read_state``, ``read_answer``) from files alone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from strata.model.errors import EpochError, StrataError
from strata.model.schema import parse_ddl
from strata.physical.program import EpochContext, EpochOutcome, StageProgram
from strata.physical.session import set_confs
from strata.queries.arrow import driver_rows
from strata.queries.arrow.rows import Rows
from strata.queries.plan.algebra import GroupBy
from strata.queries.plan.expressions import MULT
from strata.queries.plan.incremental import IncrementalQuery
from strata.queries.spark import dispatch
from strata.queries.spark.bucketed import VERSION, latest_records
from strata.queries.spark.evaluator import EvalMode, Evaluator
from strata.queries.spark.frames import run_all, struct_type, write_parquet
from strata.queries.spark.lookup_join import KeyNotUnique
from strata.queries.spark.tables import QueryTables
from strata.storage import fs
from strata.storage.home import StageLayout
from strata.storage.increments import read_records, write_table, written_increment
from strata.storage.manifest import StateSnapshot

ANSWER = "answer"  # the table holding a query's answer when its root is not a group-by
OUTPUT_ROWS_PER_TASK = 1_000_000  # input records per task writing an epoch's changes
# Session confs while a query epoch runs (besides its shuffle partitions). Spark plans a
# cached DataFrame (each epoch caches two or three) without automatic bucketed-scan removal
# and, unless cached plans may change their output partitioning, without AQE's final-stage
# shuffle optimisations: it clones the whole session to switch off any of these that is on.
# Off for the epoch, the session is used as it is. The plans stay the same: AQE is off in
# strata, and an epoch scans its tables in cached plans or in a grouping that needs buckets.
EPOCH_CONF = {"spark.sql.sources.bucketing.autoBucketedScan.enabled": "false",
              "spark.sql.adaptive.applyFinalStageShuffleOptimizations": "false"}


class QueryProgram(StageProgram):
    """The compiled form of a query stage: runs its epochs on Spark."""

    kind = "query"
    # 2: a join with a lookup table stores only the other side's waiting rows, and
    # every join only the columns used above it (queries/plan/prune.py)
    format_version = 2
    eval_mode = EvalMode.EPOCH  # how its evaluator merges changes into state
    driver_epochs = True  # a small epoch may run in the driver (EvalMode.DRIVER)

    def explain(self) -> str:
        """``h``, ``⊗`` and ``a`` of the query's stateful operators, as readable text."""
        return self.inc.explain()

    def whole_flows(self) -> dict[str, str]:
        """Flows whose whole contents a keyed table holds (an iteration's iterate)."""
        return {}

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
        total = isinstance(root, GroupBy) and not root.keys
        counts: list[str] = []
        if isinstance(root, GroupBy) and total:  # over no rows: count 0, else NULL
            counts = [n for n, e in root.outputs if getattr(e, "name", "") in {
                f"_a{i}" for i, a in enumerate(root.aggs) if a.func == "count"}]
        return {"table": self.inc.groups[id(root)].name if grouped else ANSWER,
                "grouped": grouped, "total": total,
                "total_counts": counts, "columns": list(q.columns), "ddl": self.output_ddl,
                "order_by": [list(o) for o in q.order_by], "limit": q.limit}

    # -- one epoch -------------------------------------------------------------------------
    def evaluate(self, run: Evaluator) -> Rows:
        """The epoch's output changes; the new table contents are staged in ``run``."""
        changes = run.changes(self.inc.root)
        if run.mode is EvalMode.DRIVER:
            run.flush()
        if not isinstance(self.inc.root, GroupBy):
            run.tables.stage(ANSWER, changes, [], "append")
        return changes

    def run(self, ctx: EpochContext) -> EpochOutcome:
        spark, n = ctx.spark, ctx.num_partitions
        previous = set_confs(spark, {**EPOCH_CONF, "spark.sql.shuffle.partitions": str(n)})
        out_dir = ctx.output_dir(self.output)
        try:
            self._check_format(ctx)
            tables = QueryTables(spark, ctx.layout, _tables_of(ctx.committed), n, ctx.token,
                                 version=ctx.epoch, records=ctx.input_records)
            run = Evaluator(self, spark, tables, ctx.inputs, mode=dispatch.epoch_mode(
                ctx, tables, self.eval_mode, self.driver_epochs),
                            whole=self.whole_flows())
            try:
                changes = self.evaluate(run)
                done = self._write_small(changes, tables, out_dir, ctx.input_records)
                write_out = functools.partial(self._write_output, changes, out_dir,
                                              ctx.input_records, n)
                run_all(spark, [*tables.writes(), *([] if done else [write_out])])
            except KeyNotUnique as e:
                raise EpochError(str(e), stage=ctx.stage.name, epoch=ctx.epoch, flow=e.flow,
                                 key=e.key, has_key=True) from e
            finally:
                run.release()
        finally:
            set_confs(spark, previous)
        outputs = {self.output: written_increment(out_dir)}
        return EpochOutcome(outputs, {"tables": tables.commit_files(),
                                      "answer": self.answer_spec(),
                                      "format": self.format_version}, n)

    def _check_format(self, ctx: EpochContext) -> None:
        """Refuse a committed state whose join tables another format wrote (before
        format 2 they held every row and column of both sides): read as this format's,
        they would give wrong answers."""
        written = ctx.committed.state.get("format", 1)
        mine = {f"{j.name}_{side}" for j in self.inc.joins.values() for side in ("left", "right")}
        joins = sorted(mine & set(_tables_of(ctx.committed)))
        if joins and written != self.format_version:
            raise EpochError(
                f"its join tables ({', '.join(joins)}) were written by another version of "
                f"strata (state format {written}; this one keeps format "
                f"{self.format_version}, in which a join stores only the columns used "
                f"above it and, with a lookup table, only the rows still waiting for a "
                f"match). Rebuild the stage's state: run the dataflow in a new home, "
                f"re-register a query with `strata query --replace`, or refresh a "
                f"pipeline with `strata pipelines run --full-refresh-all`",
                stage=ctx.stage.name, epoch=ctx.epoch)

    # -- the committed state, read from files -------------------------------------------
    @classmethod
    def read_state(cls, layout: StageLayout, snap: StateSnapshot) -> list[dict]:
        """Rows of each table (a versioned table's newest), marked with the table's name."""
        return [{"_table": name, **r} for name, t in _tables_of(snap).items()
                for r in _table_records(t)]

    @classmethod
    def read_answer(cls, layout: StageLayout, snap: StateSnapshot) -> pa.Table:
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

    def _write_small(self, changes: Rows, tables: QueryTables, out_dir: str,
                     records: int) -> bool:
        """In an epoch of at most half ``spark.strata.query.driverRows`` input records
        (its changes and appended rows then usually fit in the driver), bring the changes
        and the small table writes to the driver in one Spark job and write them there
        (:meth:`QueryTables.write_small`), instead of a job per table and one for the
        changes; whether the changes were written. Changes the driver already holds are
        written by :meth:`_write_output`, with no job."""
        if not dispatch.driver_may_hold(tables.spark, 2 * records):
            return False
        held = changes.arrow() is not None
        extra = {} if held else {"out": changes.frame().selectExpr(*self._output_casts())}
        got = tables.write_small(extra)
        return got is not None and not held and self._write_driver_output(got["out"], out_dir)

    def _write_output(self, changes: Rows, out_dir: str, records: int, n: int) -> None:
        """Write the epoch's changes into ``out_dir``. In an epoch of at most
        ``spark.strata.query.driverRows`` input records, up to that many changes (an
        increment's changes usually are) come to the driver as Arrow and are written as
        one file the way ingested increments are, which costs a fraction of a Spark write
        job (committer, Hadoop job set-up, task-side writers); otherwise, or if there are
        more, Spark writes them, in a task per ``OUTPUT_ROWS_PER_TASK`` input records (at
        most ``n``). A bulk epoch goes straight to Spark's write: bringing its first rows
        to the driver to find out would be a Spark job of its own. Changes the driver holds
        are cast and written with no Spark job."""
        held = changes.arrow()
        if held is not None and self._write_driver_output(held, out_dir):
            return
        out = changes.frame().selectExpr(*self._output_casts())
        most = dispatch.driver_rows(out.sparkSession)
        if dispatch.driver_may_hold(out.sparkSession, records):
            table = out.coalesce(1).limit(most + 1).toArrow()
            if table.num_rows <= most and self._write_driver_output(table, out_dir):
                return
        write_parquet(out.coalesce(_output_tasks(records, n)), out_dir)

    def _write_driver_output(self, changes: pa.Table, out_dir: str) -> bool:
        """Write ``changes`` (rows the driver has) into ``out_dir`` as one file of the
        declared output schema; False (nothing written: Spark casts and writes them) if a
        column is missing or of a type Arrow does not cast to the declared one."""
        schema = self._output_schema()
        try:
            table = changes.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
            return False
        write_table(fs.join(out_dir, "part-00000.parquet"), table)
        return True

    def _output_schema(self) -> pa.Schema:
        if self._schema is None:
            self._schema = parse_ddl(self.output_ddl)
        return self._schema

    def _output_casts(self) -> list[str]:
        """SQL casting the changes' columns to the declared output schema, in its order."""
        if self._casts is None:
            self._casts = [f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`"
                           for f in struct_type(self.output_ddl).fields]
        return self._casts


def _output_tasks(records: int, n: int) -> int:
    """How many tasks write an epoch's changes: one per ``OUTPUT_ROWS_PER_TASK`` input
    records (the changes of a group-by are at most twice its input's groups), at most
    ``n``. An epoch's changes are usually small, and a write costs about the same per
    task and file whatever their size."""
    return max(1, min(n, -(-records // OUTPUT_ROWS_PER_TASK)))


def output_ddl(columns: Mapping[str, str]) -> str:
    """The DDL of a query's output flow: its columns and the multiplicity."""
    return ", ".join([*(f"`{c}` {t}" for c, t in columns.items()), f"`{MULT}` bigint"])


def read_answer(snap: StateSnapshot) -> pa.Table:
    """A compiled query's current answer from its committed state (no Spark needed)."""
    spec = snap.state.get("answer") if snap.kind == "query" else None
    if not spec:
        raise StrataError(f"stage {snap.stage!r} is not a query, or has not run yet")
    cols = spec["columns"]
    schema = pa.schema([parse_ddl(spec["ddl"]).field(c) for c in cols])
    rows = _table_records(snap.state["tables"].get(spec["table"], {}))
    if spec["grouped"]:
        rows = [{c: r[c] for c in cols} for r in rows if r["_keep"]]
    else:  # an accumulated bag of changes: net each row's multiplicity
        net: dict[tuple, int] = {}
        for r in rows:
            k = tuple(_hashable(r[c]) for c in cols)
            net[k] = net.get(k, 0) + r[MULT]
        rows = [dict(zip(cols, k, strict=True)) for k, m in net.items() for _ in range(m)]
    if spec["total"] and not rows:  # a total aggregate over no rows
        rows = [{c: 0 if c in spec["total_counts"] else None for c in cols}]
    return driver_rows.ordered(pa.Table.from_pylist(rows, schema=schema), spec["order_by"],
                               spec["limit"])


def _hashable(v):
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def _table_records(entry: Mapping[str, Any]) -> list[dict]:
    """A committed table's rows as dicts: a versioned table's newest row per group."""
    rows = read_records(entry.get("files", []))
    if not entry.get("versions"):
        return [{k: v for k, v in r.items() if k != VERSION} for r in rows]
    return latest_records(rows, lambda r: _hashable(r["_g"]))


def _tables_of(snap: StateSnapshot) -> dict[str, dict]:
    """A query stage's committed tables: name -> files, DDL, lineage (and rows)."""
    return snap.state.get("tables", {})
