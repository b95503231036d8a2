"""Queries run by recomputation, for users who opt in (``add_query(..., recompute=True)``,
``strata query --recompute``) when a query cannot be maintained incrementally.

The stage keeps every input flow's rows so far (table ``input_FLOW``, netted now and then)
and the last answer (table ``answer``). Each epoch evaluates the query over all rows so far
(the incremental program run against empty state is the query itself), replaces the answer
and emits the difference between the new and the old answer as the output's changes, so
downstream stages see the same changelog an incremental query would give. Its cost grows
with the inputs, not with the increment.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from strata.queries.arrow.rows import Rows
from strata.queries.plan.expressions import MULT
from strata.queries.plan.incremental import scanned
from strata.queries.programs.program import ANSWER, QueryProgram
from strata.queries.spark.evaluator import Evaluator
from strata.queries.spark.tables import QueryTables
from strata.queries.spark.window_functions import netted

INPUT = "input_{}"  # the table of one input flow's rows so far


class RecomputeProgram(QueryProgram):
    """The compiled form of a query stage that recomputes its answer every epoch."""

    driver_epochs = False  # every epoch reads all rows so far: Spark's work

    def answer_spec(self) -> dict:
        return {**super().answer_spec(), "table": ANSWER, "grouped": False}

    def evaluate(self, run: Evaluator) -> Rows:
        tables = run.tables
        everything: dict[str, DataFrame] = {}
        for flow in sorted(scanned(self.inc.root)):
            name = INPUT.format(flow)
            new, old = run.flow_rows(flow), tables.read(name)
            rows = new if old is None else old.unionByName(new)
            if tables.needs_compaction(name, bucketed=False):
                tables.stage(name, netted(rows), [], "replace")
            else:
                tables.stage(name, new, [], "append")
            everything[flow] = rows
        # against empty state, the incremental program's changes are the whole answer
        scratch = QueryTables(run.spark, tables.layout, {}, tables.n, tables.token, sweep=False)
        whole = Evaluator(self, run.spark, scratch, {}, frames=everything)
        try:
            answer = run.materialize(netted(whole.changes(self.inc.root).frame()))
        finally:
            whole.release()
        tables.stage(ANSWER, answer, [], "replace")
        old = tables.read(ANSWER)
        if old is None:
            return Rows.of_frame(answer)
        return Rows.of_frame(netted(answer.unionByName(old.withColumn(MULT, -F.col(MULT)))))

