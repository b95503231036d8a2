"""The driver's path: rows the driver holds as Arrow (``Rows``, the seam with Spark's
path) and the operators evaluated over them in Arrow (docs/architecture.md, "The
driver's rows and Spark's")."""
