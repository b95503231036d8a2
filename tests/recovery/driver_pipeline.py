"""The crash-test pipeline (tests.recovery.pipeline) with its small epochs in the driver,
as they run by default: kills at ``driver-partition`` land between two partitions'
writes of one epoch."""

from tests.recovery.pipeline import batches, build_dataflow

__all__ = ["batches", "build_dataflow"]
SPARK_CONF = None  # the session's defaults: these epochs are small enough for the driver
