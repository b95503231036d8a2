"""Queries only (no translate stage): two input flows and one query stage, for running
over Spark Connect (tests/test_connect.py); more queries are registered with
``strata query``."""

from strata import Dataflow
from strata.queries import add_query

dataflow = Dataflow("queries")
dataflow.source("R", "x bigint, y bigint, _mult bigint")  # facts, with deletes
dataflow.source("D", "id bigint, name string, grp string, _mult bigint")  # keyed by id
add_query(dataflow, "totals", "SELECT x, count(*) AS c, sum(y) AS s FROM R GROUP BY x")
