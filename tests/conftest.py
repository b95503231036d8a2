"""One Spark session for the whole test run, with workers on this interpreter."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# this run's own machine-wide run cache (storage/machine_runs.py), not the user's
MACHINE_RUN_CACHE = tempfile.mkdtemp(prefix="strata-test-runs-")
os.environ["STRATA_MACHINE_RUN_CACHE_DIR"] = MACHINE_RUN_CACHE


@pytest.fixture(scope="session")
def spark():
    from strata.physical.session import get_spark

    # Spark's event log, from which strata.observability.spark_metrics reads job metrics
    events = tempfile.mkdtemp(prefix="strata-test-events-")
    session = get_spark("local[2]", app_name="strata-tests", event_log_dir=events,
                        spark_driver_memory="2g")
    yield session
    session.stop()
    shutil.rmtree(events, ignore_errors=True)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(MACHINE_RUN_CACHE, ignore_errors=True)
