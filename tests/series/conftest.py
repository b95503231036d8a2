"""Fixtures of the series tests."""

from __future__ import annotations

import pytest

from strata.config import HELD_SEGMENT_ROWS


@pytest.fixture
def spark_plans(spark):
    """Series epochs run their Spark plans: no segment is taken from the driver's memory
    (``strata.series.held``), as for a segment ingested by reference or by another
    process."""
    spark.conf.set(HELD_SEGMENT_ROWS.name, "-1")
    yield spark
    spark.conf.unset(HELD_SEGMENT_ROWS.name)
