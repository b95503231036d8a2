"""A pytest plugin with the ``strata_spark`` fixture: one local Spark session for the test
run (the active one if the run already has a session). Enable it in a ``conftest.py``::

    pytest_plugins = ["strata.testing.pytest_plugin"]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def strata_spark() -> Iterator[Any]:
    """A Spark session for ``strata.testing.run_spark``/``assert_same``; one started here
    is stopped at the end of the run, one that was already active is left running."""
    from pyspark.sql import SparkSession

    from strata.physical.session import get_spark

    active = SparkSession.getActiveSession()
    session = get_spark("local[2]", app_name="strata-testing")
    yield session
    if active is None:
        session.stop()
