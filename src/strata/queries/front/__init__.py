"""The front ends: SQL text (its CTEs inlined) and the Python API, parsed into the query
algebra (docs/sql.md)."""
