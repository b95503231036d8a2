"""The driver JVM's class-data-sharing archive (strata/physical/class_archive.py): when it is
used, built or left alone, and that a Spark driver really maps the archive strata builds
(``-Xshare:on`` makes a JVM that cannot use it fail to start)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from strata.physical import class_archive
from strata.physical.class_archive import ArchiveState, decide

STALE = class_archive.LOCK_STALE_SECONDS


RETRY = class_archive.FAILED_RETRY_SECONDS


@pytest.mark.parametrize(("state", "action"), [
    (ArchiveState(exists=True, lock_age_seconds=None, failed_age_seconds=None), "use"),
    (ArchiveState(exists=True, lock_age_seconds=5.0, failed_age_seconds=5.0), "use"),
    (ArchiveState(exists=False, lock_age_seconds=None, failed_age_seconds=None), "build"),
    (ArchiveState(exists=False, lock_age_seconds=5.0, failed_age_seconds=None), "wait"),
    (ArchiveState(exists=False, lock_age_seconds=STALE + 1, failed_age_seconds=None),
     "build"),
    (ArchiveState(exists=False, lock_age_seconds=None, failed_age_seconds=5.0), "none"),
    # a failure is not for ever: a day later the build is tried again
    (ArchiveState(exists=False, lock_age_seconds=None, failed_age_seconds=RETRY + 1),
     "build"),
    (ArchiveState(exists=False, lock_age_seconds=5.0, failed_age_seconds=RETRY + 1), "wait"),
])
def test_what_a_starting_session_does_with_the_archive(state, action):
    assert decide(state) == action


def test_an_archive_on_disk_goes_to_the_driver_unless_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CLASS_ARCHIVE", str(tmp_path))
    path = class_archive.archive_path()
    assert path is not None and path.parent == tmp_path and path.suffix == ".jsa"
    path.write_bytes(b"")  # observed, never read, here
    options = class_archive.driver_java_options({})
    assert f"-XX:SharedArchiveFile={path}" in options and "-Xshare:auto" in options
    assert class_archive.use_options() == options  # for the other JVMs of the installation
    # a user's jars change the class path the archive was dumped with
    assert class_archive.driver_java_options({"spark.jars": "/x/extra.jar"}) == ""
    monkeypatch.setenv("STRATA_CLASS_ARCHIVE", "off")
    assert class_archive.archive_path() is None
    assert class_archive.driver_java_options({}) == ""


def test_the_builder_runs_without_the_callers_spark_conf_dir(monkeypatch, tmp_path):
    """Spark puts a conf directory first on the driver's class path, and the JVM cannot
    dump an archive with a non-empty directory there: a build that inherited one failed,
    and the archive was off for every session after."""
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xlog:class+load")
    env = class_archive._builder_env()
    assert "SPARK_CONF_DIR" not in env and "JAVA_TOOL_OPTIONS" not in env
    assert env["PYSPARK_DRIVER_PYTHON"] == sys.executable


def test_a_build_in_progress_is_not_started_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CLASS_ARCHIVE", str(tmp_path))
    path = class_archive.archive_path()
    assert path is not None
    path.with_suffix(".lock").write_text("1\n")  # a live builder's lock
    assert class_archive.build(path) is False  # does not take the lock, writes nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.with_suffix(".lock").name]
    assert class_archive.driver_java_options({}) == ""
    assert class_archive.use_options() == ""


def test_a_reinstalled_spark_names_another_archive_and_supersedes_the_old(tmp_path,
                                                                          monkeypatch):
    """A JVM refuses an archive whose jars changed since the dump (pip reinstalling PySpark
    at the same path): a changed jar names another archive, and the old one, which no JVM
    can use, is superseded; another Spark home's archive is not."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "jars").mkdir()
    (home / "bin" / "spark-submit").write_text("")
    jar = home / "jars" / "spark-core.jar"
    jar.write_bytes(b"v1")
    monkeypatch.setenv("STRATA_CLASS_ARCHIVE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARK_HOME", str(home))
    before = class_archive.archive_path()
    assert before is not None and class_archive.archive_path() == before
    jar.write_bytes(b"v2, reinstalled")
    after = class_archive.archive_path()
    assert after is not None and after != before
    other_home = after.with_name("spark-4.0.0-0123456789ab-0123456789ab.jsa")
    after.parent.mkdir()
    for p in (before, before.with_suffix(".failed"), after, other_home):
        p.write_bytes(b"")
    assert sorted(class_archive._superseded(after)) == sorted(
        [before, before.with_suffix(".failed")])


def _driver_maps(archive: Path) -> subprocess.CompletedProcess:
    """A fresh PySpark driver (PySpark's own builder) with ``-Xshare:on`` over ``archive``."""
    code = ("from pyspark.sql import SparkSession\n"
            "s = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
            f".config('spark.driver.extraJavaOptions', '-XX:SharedArchiveFile={archive} "
            "-Xshare:on').getOrCreate())\n"
            "print('counted', s.range(7).count())\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_suites_driver_archive_is_mapped_by_a_spark_driver(spark):
    """The archive tests/conftest.py's session asked for (built in the background as the
    suite starts, unless it already existed) is one a Spark driver maps."""
    path = class_archive.archive_path()
    if path is None:
        pytest.skip("STRATA_CLASS_ARCHIVE is off, or no java or spark-submit here")
    deadline = time.monotonic() + class_archive.BUILD_TIMEOUT_SECONDS
    while not path.is_file() and time.monotonic() < deadline:
        failed = path.with_suffix(".failed")
        assert not failed.exists(), failed.read_text()
        if decide(class_archive.observe(path)) == "build":
            class_archive.build(path)  # no builder is running: build it here
        time.sleep(2)
    assert path.is_file(), f"no archive at {path} after {class_archive.BUILD_TIMEOUT_SECONDS} s"
    done = _driver_maps(path)
    assert done.returncode == 0 and "counted 7" in done.stdout, done.stderr[-3000:]


@pytest.mark.slow
def test_build_writes_a_checked_archive_and_leaves_nothing_else(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_CLASS_ARCHIVE", str(tmp_path))
    path = class_archive.archive_path()
    assert path is not None
    path.with_name(f"{path.stem}.999999.tmp").write_bytes(b"half")  # a killed builder's
    where = path.stem.split("-")[-2]
    path.with_name(f"spark-0.0.0-{where}-0123456789ab.jsa").write_bytes(b"superseded")
    path.with_suffix(".failed").write_text("an earlier try\n")  # a day old, say
    assert class_archive.build(path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no lock, dump or marker
    done = _driver_maps(path)
    assert done.returncode == 0 and "counted 7" in done.stdout, done.stderr[-3000:]
    assert "-Xshare:auto" in class_archive.driver_java_options({})
