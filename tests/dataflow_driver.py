"""The kit's driver and executors (``strata.testing``, docs/testing.md) for the project's
own tests, with the tests' mode names.

``run_dataflow(df, batches, executor)`` pushes batches of source records through a
dataflow with a fixed schedule; :class:`ReferenceRunner` runs stage epochs with the
reference executor, :class:`SparkRunner` on Spark in a mode named ``"direct"``,
``"direct-indexed"`` (direct mode over the indexed state store) or ``"blackbox"``, with
an optional ``@tasks`` or ``@driver`` (``"direct@driver"``): every epoch as Spark tasks
or in the driver (``tests.helpers.epochs_in``); without, the session's confs decide.
"""

from __future__ import annotations

import sys
from contextlib import suppress

from strata.testing import ReferenceRunner, canon, multiset, normalise, run_dataflow
from strata.testing import SparkRunner as KitSparkRunner
from tests.helpers import epochs_in

__all__ = ["ReferenceRunner", "SparkRunner", "canon", "multiset", "normalise",
           "register_by_value", "run_dataflow"]


def register_by_value(module_name: str) -> None:
    """Ship ``module_name``'s functions to Spark workers by value (the workers cannot
    import test modules: ``tests/`` is not on their ``sys.path``)."""
    from pyspark import cloudpickle

    with suppress(ValueError):  # already registered
        cloudpickle.register_pickle_by_value(sys.modules[module_name])


register_by_value(__name__)


class SparkRunner(KitSparkRunner):
    """:class:`strata.testing.SparkRunner` with the mode named as above."""

    def __init__(self, spark, home: str, mode: str, num_partitions: int = 2,
                 files_per_input: int = 1) -> None:
        name = mode
        mode, _, where = mode.partition("@")
        mode, _, store = mode.partition("-")
        super().__init__(spark, home, mode, num_partitions, files_per_input,
                         store=store or "columns",
                         around_epoch=(lambda: epochs_in(spark, where)) if where else None)
        self.name = name
