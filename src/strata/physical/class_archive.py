"""A class-data-sharing archive of Spark's classes, so that a fresh process starts Spark faster.

Most of a cold ``strata run``'s fixed cost is the driver JVM loading and verifying Spark's
classes (docs/performance.md, "A cold run"). Java's dynamic class data sharing (CDS,
JDK 13+) stores the classes an application loaded in an archive that later JVMs map
instead of loading them again. When strata starts a classic Spark session
(:func:`strata.physical.session.get_spark`), :func:`driver_java_options` gives the driver
JVM ``-XX:SharedArchiveFile`` if an archive for this Java and this Spark exists. If none
exists, the session starts without one, and as the process exits it starts :func:`build`
in a detached background process, so that the build does not compete with the run. The
builder runs a small Spark application through ``spark-submit`` with
``-XX:ArchiveClassesAtExit``, checks the archive it wrote, and only then moves it into
place (a JVM given a truncated archive crashes, so nothing unchecked is ever used). One
builder runs at a time (a lock file); a failed build leaves a ``.failed`` file with its
reason and is tried again a day later. The builder runs without the caller's
``SPARK_CONF_DIR``, which Spark puts first on the driver's class path: the JVM cannot dump
an archive with a non-empty directory there, and a session started with one does not
match the archive (``-Xshare:auto`` starts it without).

``-Xshare:auto`` keeps the archive optional: a JVM whose class path or options do not match
it (a user's own jars, say) starts without it. ``STRATA_CLASS_ARCHIVE`` turns it off or
puts the archives elsewhere (docs/configuration.md).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Literal

from strata import config

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # no JVM warnings when it cannot be used
LOCK_STALE_SECONDS = 900.0  # a builder that held its lock this long is taken to have died
FAILED_RETRY_SECONDS = 86_400.0  # a failed build is tried again a day later
BUILD_TIMEOUT_SECONDS = 900.0
# confs that change the driver's class path: an archive of Spark's alone would not match
CLASS_PATH_CONFS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
WORKLOAD = files("strata") / "data" / "class_archive_workload.py"  # what the dump runs

Action = Literal["use", "build", "wait", "none"]


@dataclass(frozen=True)
class ArchiveState:
    """What is on disk for one archive: it exists, a builder's lock or a failed build's
    marker (each by its age in seconds; None: absent)."""

    exists: bool
    lock_age_seconds: float | None
    failed_age_seconds: float | None


def decide(state: ArchiveState) -> Action:
    """``use`` an archive that exists; ``wait`` while a live builder writes it; ``none``
    for a day after a failed build (then it is tried again: a failure may have been the
    machine's at the time); else ``build`` it."""
    if state.exists:
        return "use"
    if state.failed_age_seconds is not None and state.failed_age_seconds < FAILED_RETRY_SECONDS:
        return "none"
    if state.lock_age_seconds is not None and state.lock_age_seconds < LOCK_STALE_SECONDS:
        return "wait"
    return "build"


def archive_path() -> Path | None:
    """Where this Java's archive of this Spark's jars lives, or None (switched off, no
    Java, or not a POSIX system): ``spark-<version>-<where>-<what>.jsa`` in the setting's
    directory, ``where`` a hash of the java binary's and Spark's paths, ``what`` of the
    java binary and Spark's jars as installed there (a JVM refuses an archive whose jars
    changed since the dump, as a PySpark reinstalled at the same path does)."""
    setting = config.env(config.CLASS_ARCHIVE).strip()
    java, spark_home = _java(), _spark_home()
    if setting.lower() == "off" or os.name != "posix" or java is None or spark_home is None:
        return None
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    if setting.lower() == "auto" and cache.startswith("~"):
        return None  # no home directory to keep it in
    root = Path(setting) if setting.lower() != "auto" else Path(cache) / "strata"
    import pyspark

    where = _digest(os.path.realpath(java), spark_home)
    what = _digest(str(os.stat(java).st_mtime_ns), *_jars(spark_home))
    return root / f"spark-{pyspark.__version__}-{where}-{what}.jsa"


def _digest(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


def _jars(spark_home: str) -> list[str]:
    """Each jar on Spark's class path by name, size and modification time."""
    try:
        entries = sorted(os.scandir(os.path.join(spark_home, "jars")), key=lambda e: e.name)
        return [f"{e.name}:{e.stat().st_size}:{e.stat().st_mtime_ns}" for e in entries]
    except OSError:
        return []


def _superseded(path: Path) -> list[Path]:
    """The other archives, and failed builds' markers, of the same java and Spark home as
    ``path``: dumped from jars or a java binary since replaced, no JVM can use them."""
    where = path.stem.split("-")[-2]
    return [p for p in path.parent.glob(f"spark-*-{where}-*")
            if p.suffix in (".jsa", ".failed") and p.stem != path.stem]


def observe(path: Path) -> ArchiveState:
    return ArchiveState(path.is_file(), _age(_lock(path)), _age(_failed(path)))


def _age(path: Path) -> float | None:
    """Seconds since ``path`` was written, or None if it is not there."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return None


def driver_java_options(conf: dict[str, str]) -> str:
    """JVM options for the driver of a session strata starts with ``conf``: the archive's,
    if it is there; else nothing (starting its builder if none runs)."""
    path = archive_path()
    if path is None or any(conf.get(k) for k in CLASS_PATH_CONFS):
        return ""
    action = decide(observe(path))
    if action == "use":
        return use_options(path)
    if action == "build" and path not in _AT_EXIT:  # after this process's work, not during it
        _AT_EXIT.add(path)
        atexit.register(start_builder, path)
    return ""


_AT_EXIT: set[Path] = set()


def use_options(path: Path | None = None) -> str:
    """The JVM options that map the archive at ``path`` (default: this Java's and this
    Spark's, if built), or "": for other JVMs of the same installation too (a standalone
    cluster's daemons and executors, a Spark Connect server), never starting a build."""
    path = path or archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {QUIET}"


def start_builder(path: Path) -> None:
    """Run :func:`build` for ``path`` in a detached process that outlives this one."""
    if decide(observe(path)) != "build":
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.Popen([sys.executable, "-m", "strata.physical.class_archive", "build",
                          str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         env=_builder_env())
    except OSError:
        pass  # an unwritable cache: run without an archive


def build(path: Path) -> bool:
    """Write the archive at ``path`` unless another builder holds its lock: a small Spark
    application run by ``spark-submit`` dumps the classes it loaded at exit; the dump is
    checked by a JVM mapping it, then moved into place. Whether ``path`` exists after."""
    lock = _lock(path)
    if not _take(path):
        return path.is_file()
    for left in path.parent.glob(f"{path.stem}.*.tmp"):  # of a builder that was killed
        left.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    try:
        reason = _dump(tmp)
        if reason is None and not _maps(tmp):
            reason = "the JVM could not map the archive it wrote"
        if reason is None:
            os.replace(tmp, path)
            _failed(path).unlink(missing_ok=True)  # of an earlier try
            for old in _superseded(path):  # about 200 MB each
                old.unlink(missing_ok=True)
        else:
            _failed(path).write_text(reason + "\n")
    finally:
        for f in (tmp, lock):
            f.unlink(missing_ok=True)
    return path.is_file()


def _dump(tmp: Path) -> str | None:
    """Run the warm-up application with ``-XX:ArchiveClassesAtExit=tmp``; None if it
    wrote the archive, else why not."""
    submit = Path(_spark_home() or "") / "bin" / "spark-submit"
    with tempfile.TemporaryDirectory(prefix="strata-class-archive-") as work:
        cmd = [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
               "--driver-java-options", f"-XX:ArchiveClassesAtExit={tmp} {QUIET}",
               str(WORKLOAD), work]
        try:
            done = subprocess.run(cmd, env=_builder_env(), capture_output=True, text=True,
                                  timeout=BUILD_TIMEOUT_SECONDS, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            return f"{' '.join(cmd)}: {e}"
    if done.returncode or not tmp.is_file():
        return f"spark-submit exited {done.returncode}: {done.stderr[-2000:]}"
    return None


def _maps(archive: Path) -> bool:
    """Whether a JVM maps ``archive`` (a truncated one makes it crash)."""
    java = _java()
    try:
        done = subprocess.run([java or "java", f"-XX:SharedArchiveFile={archive}",
                               "-Xshare:auto", *QUIET.split(), "-version"],
                              capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _take(path: Path) -> bool:
    """Create the lock of the archive at ``path`` exclusively (after removing one left by
    a dead builder)."""
    lock = _lock(path)
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if decide(observe(path)) != "build":
                return False
            lock.unlink(missing_ok=True)  # stale
            continue
        except OSError:
            return False
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return True
    return False


def _lock(path: Path) -> Path:
    return path.with_suffix(".lock")


def _failed(path: Path) -> Path:
    return path.with_suffix(".failed")


def _java() -> str | None:
    """The ``java`` PySpark's launcher runs: ``$JAVA_HOME/bin/java``, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return java if java and os.path.isfile(java) else None


def _spark_home() -> str | None:
    """``$SPARK_HOME``, else the pip-installed PySpark's directory (as PySpark finds it)."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        import pyspark

        home = os.path.dirname(pyspark.__file__)
    return os.path.realpath(home) if os.path.isfile(os.path.join(home, "bin",
                                                                  "spark-submit")) else None


def _builder_env() -> dict[str, str]:
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("JAVA_TOOL_OPTIONS", None)  # the archive is of the default JVM
    # and of Spark's own class path: a conf directory goes first on it, and the JVM
    # cannot dump with a non-empty directory there ("Cannot have non-empty directory in
    # paths"); sessions started with one do not match the archive and start without it
    env.pop("SPARK_CONF_DIR", None)
    return env


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:
        sys.exit(0 if build(Path(sys.argv[2])) else 1)
