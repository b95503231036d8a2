"""strata.testing: unit tests of a pipeline's own functions (docs/testing.md).

Run a dataflow, or one stage, on given increments with the plain-Python reference
executor (the model's oracle) and on local Spark, and compare their outputs per flow and
epoch and their final state per stage::

    from strata.testing import assert_same, run_reference

    def test_counts(strata_spark):
        incs = [{"urls": [{"url": "a"}, {"url": "b"}]}, {"urls": [{"url": "a"}]}]
        assert run_reference(df, incs).outputs["counts"][1] == [{"url": "a", "count": 2}]
        assert_same(df, incs, strata_spark)
"""

from strata.testing.compare import Result, canon, difference, multiset, normalise
from strata.testing.driver import ReferenceRunner, SparkRunner, StageExecutor, run_dataflow
from strata.testing.kit import (
    Increments,
    assert_results_equal,
    assert_same,
    run_reference,
    run_spark,
    run_with,
)

__all__ = [
    "Increments", "ReferenceRunner", "Result", "SparkRunner", "StageExecutor",
    "assert_results_equal", "assert_same", "canon", "difference", "multiset", "normalise",
    "run_dataflow", "run_reference", "run_spark", "run_with",
]
