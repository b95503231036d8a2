"""The window crash pipeline (:mod:`tests.recovery.window_pipeline`) with its pane store
on the executors."""

from __future__ import annotations

from strata import config
from tests.recovery.window_pipeline import EPOCHS, QUERY, batches, build_dataflow, records

SPARK_CONF = {config.WINDOW_STORE.name: "executors"}

__all__ = ["EPOCHS", "QUERY", "SPARK_CONF", "batches", "build_dataflow", "records"]
