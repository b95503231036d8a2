"""Run a recovery pipeline until idle in a fresh process:
``python -m tests.recovery.worker HOME [PIPELINE_MODULE [CATALOG]]`` (default:
tests.recovery.pipeline; the catalog in the home).

Spark starts when the controller first needs it (a recovery or a first epoch), so a
process killed before its first job (``after-intent:1``) costs no Spark start."""

import importlib
import sys

import strata
from strata.controller import Controller

if __name__ == "__main__":
    print(f"strata from {strata.__file__}", flush=True)  # checked by tests.recovery.harness
    pipeline = importlib.import_module(sys.argv[2] if len(sys.argv) > 2
                                       else "tests.recovery.pipeline")
    if hasattr(pipeline, "setup"):
        pipeline.setup()
    with Controller(sys.argv[1], pipeline.build_dataflow(), master="local[2]",
                    catalog=sys.argv[3] if len(sys.argv) > 3 else None,
                    num_partitions=2, spark_conf=getattr(pipeline, "SPARK_CONF", None)) as c:
        c.run(on_epoch=lambda r: print(  # what ran, for the test's messages
            f"epoch {r.stage} {r.epoch}{' (recovered)' if r.recovered else ''}", flush=True))
