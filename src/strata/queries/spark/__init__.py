"""The Spark path: where an epoch's rows are computed (``dispatch``), the evaluator of a
query's changes as DataFrame plans (each operator tried in Arrow first), its operators and
the bucketed state tables (docs/architecture.md, "Query state: bucketed tables")."""
