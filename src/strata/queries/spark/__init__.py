"""The Spark path: where an epoch's rows are computed (``dispatch``), the evaluator of a
query's changes as DataFrame plans (each operator tried in Arrow first), its operators and
the bucketed state tables (docs/architecture.md, "Query state: bucketed tables")."""

from strata.queries.spark import dispatch, explode, window_functions
from strata.queries.spark.bucketed import bucket_of, read_bucketed, write_bucketed
from strata.queries.spark.frames import ddl_of, run_all, struct_type, write_parquet
from strata.queries.spark.group_by import answer, lift, row_exprs
from strata.queries.spark.tables import QueryTables

# dispatch (the driver's limits), explode and window_functions are used as namespaces
# (dispatch.driver_rows, explode.spark_rows, window_functions.over_rows)
__all__ = [
    "QueryTables", "answer", "bucket_of", "ddl_of", "dispatch", "explode", "lift",
    "read_bucketed", "row_exprs", "run_all", "struct_type", "window_functions",
    "write_bucketed", "write_parquet",
]
