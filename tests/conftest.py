"""One Spark session for the whole test run, with workers on this interpreter."""

from __future__ import annotations

import os
import sys

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark():
    from strata.physical.session import get_spark

    session = get_spark("local[2]", app_name="strata-tests", spark_driver_memory="2g")
    yield session
    session.stop()
