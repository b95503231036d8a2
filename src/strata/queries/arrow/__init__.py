"""The driver's path: rows the driver holds as Arrow (``Rows``, the seam with Spark's
path) and the operators evaluated over them in Arrow (docs/architecture.md, "The
driver's rows and Spark's")."""

from strata.queries.arrow import arrow_expr, arrow_step, driver_rows
from strata.queries.arrow.arrow_expr import Unsupported
from strata.queries.arrow.arrow_lift import aggregate, outside
from strata.queries.arrow.rows import Rows

# arrow_expr, arrow_step and driver_rows are families of functions, used as namespaces
# (arrow_expr.evaluate, driver_rows.union, arrow_step.lifted, ...)
__all__ = ["Rows", "Unsupported", "aggregate", "arrow_expr", "arrow_step", "driver_rows",
           "outside"]
