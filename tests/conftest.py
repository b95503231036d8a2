"""One Spark session for the whole test run, with workers on this interpreter.

Every test that needs Spark carries the ``spark`` marker, so ``pytest -m "not spark"``
(``make test-fast``) runs the rest in seconds: the collection hook below marks each test
whose fixtures include a Spark session (``spark`` and the fixtures built on it, the
``cluster`` and ``connect_server`` ones), and the tests that start Spark in another way
(a subprocess running the CLI or ``strata.demo``, a ``CliRunner`` running ``strata run``
without the fixture) carry the marker themselves. A run that selects no ``spark`` test
checks after every test that no JVM was started from this process.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# this run's own machine-wide run cache (storage/machine_runs.py), not the user's
MACHINE_RUN_CACHE = tempfile.mkdtemp(prefix="strata-test-runs-")
os.environ["STRATA_MACHINE_RUN_CACHE_DIR"] = MACHINE_RUN_CACHE


@pytest.fixture(scope="session")
def spark():
    from strata.physical import class_archive
    from strata.physical.session import get_spark

    # Spark's event log, from which strata.observability.spark_metrics reads job metrics
    events = tempfile.mkdtemp(prefix="strata-test-events-")
    # Spark's 200 shuffle partitions (with the adaptive coalescing strata's sessions turn
    # off) make each shuffle of the tests' own Spark SQL, such as their recomputations,
    # 200 tasks over a few rows; strata sets its epochs' partitions itself
    session = get_spark("local[2]", app_name="strata-tests", event_log_dir=events,
                        spark_driver_memory="2g", spark_sql_shuffle_partitions="4")
    # the driver JVM's class archive (physical/class_archive.py), built now rather than as
    # this process exits, so that the Spark processes the tests start use it
    if (archive := class_archive.archive_path()) is not None:
        class_archive.start_builder(archive)
    yield session
    session.stop()
    shutil.rmtree(events, ignore_errors=True)


@pytest.fixture(autouse=True)
def _the_test_session_first(request):
    """A ``spark`` test that starts Spark in this process without the fixture (a
    ``CliRunner`` running ``strata run``) gets the test session all the same: else, run
    first, it would create a session without the event log, which the fixture's
    ``get_spark`` then returns as the active one (and Spark's metrics read nothing)."""
    if request.node.get_closest_marker("spark") and "spark" not in request.fixturenames:
        request.getfixturevalue("spark")


# fixtures that hold or start a Spark session (the closure adds those built on them)
SPARK_FIXTURES = frozenset({"spark", "cluster", "connect_server"})
SPARK_MARKERS = ("cluster", "connect")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(
                item.get_closest_marker(m) for m in SPARK_MARKERS):
            item.add_marker(pytest.mark.spark)


def pytest_collection_finish(session):
    # a run with no ``spark`` test (``-m "not spark"``) must not start a JVM
    session.config.stash[_NO_SPARK] = bool(session.items) and not any(
        item.get_closest_marker("spark") for item in session.items)


_NO_SPARK = pytest.StashKey[bool]()


def _jvm_children() -> list[str]:
    """Command lines of the Java processes this process started (Linux ``/proc``)."""
    me, found = str(os.getpid()), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if fields[1] == me and "java" in cmd:
            found.append(cmd.split(" ", 1)[0])
    return found


@pytest.hookimpl(trylast=True)  # after the test's own teardown
def pytest_runtest_teardown(item, nextitem):
    if item.config.stash.get(_NO_SPARK, False) and (jvms := _jvm_children()):
        item.config.stash[_NO_SPARK] = False  # report the first such test only
        pytest.fail(f"{item.nodeid} started Spark (a JVM: {jvms[0]}) but has no `spark` "
                    "marker: add `@pytest.mark.spark` (tests/conftest.py)", pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(MACHINE_RUN_CACHE, ignore_errors=True)
