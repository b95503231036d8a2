"""Run the recovery dataflow until idle in a fresh process: ``python worker.py HOME``."""

import sys

from strata.controller import Controller
from strata.physical.session import get_spark
from tests.recovery.pipeline import build_dataflow

if __name__ == "__main__":
    spark = get_spark("local[2]", app_name="strata-recovery", spark_ui_enabled="false")
    with Controller(sys.argv[1], build_dataflow(), spark=spark, num_partitions=2) as c:
        c.run()
