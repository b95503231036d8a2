"""An iterative query only (PageRank by ``iterate()``, no translate stage), for running
over Spark Connect (tests/test_connect.py): its steps pass tables the driver holds."""

from strata import Dataflow
from strata.queries import add_query, iterate

STEP = ("SELECT e.dst AS node, 0.15 + 0.85 * sum(x.rank / d.deg) AS rank FROM edges e "
        "JOIN ranks x ON e.src = x.node "
        "JOIN (SELECT src, count(*) AS deg FROM edges GROUP BY src) d ON e.src = d.src "
        "GROUP BY e.dst")

dataflow = Dataflow("ranks")
dataflow.source("edges", "src bigint, dst bigint")
add_query(dataflow, "pagerank", iterate(
    "ranks", "node bigint, rank double", "node",
    init="SELECT src AS node, 0.15 AS rank FROM edges", step=STEP, times=6))
