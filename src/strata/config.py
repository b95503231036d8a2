"""Every setting of strata in one table: Spark session confs (``spark.strata.*``) and
environment variables (``STRATA_*``), with their types, defaults and meanings.

Code reads a setting through this table, never by its name: ``conf(spark, SETTING)`` reads
a session conf, ``env(SETTING)`` an environment variable, each when it is called (a value
set later in the process counts) and parsed to the setting's type, its default when unset.
``docs/configuration.md`` is generated from the table::

    python -m strata.config --markdown > docs/configuration.md

This module imports nothing from strata, so every layer may import it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")


class SettingError(ValueError):
    """A setting's value does not parse as its type (the message names it and says
    what to write instead)."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One conf or environment variable: ``type`` is ``int``, ``float``, ``str`` or
    ``bool``; ``default`` is the value when unset (None: unset means "not given");
    ``choices`` (lowercase) limits a ``str`` setting; ``test_only`` marks settings only
    the tests and their scripts read."""

    name: str
    kind: Literal["conf", "env"]
    type: type
    default: T
    meaning: str
    test_only: bool = False
    choices: tuple[str, ...] = field(default=())


# every setting, in the order declared below: each is listed by being declared
_DECLARED: list[Setting[Any]] = []


def _conf(name: str, type_: type, default: Any, meaning: str, **kw: Any) -> Setting[Any]:
    _DECLARED.append(Setting(name, "conf", type_, default, meaning, **kw))
    return _DECLARED[-1]


def _env(name: str, type_: type, default: Any, meaning: str, **kw: Any) -> Setting[Any]:
    _DECLARED.append(Setting(name, "env", type_, default, meaning, **kw))
    return _DECLARED[-1]


# Session confs: where an epoch's work runs (docs/performance.md, docs/vectorized.md).
ARROW: Setting[bool] = _conf(
    "spark.strata.arrow", bool, True,
    "false: the driver leaves reading an epoch's rows and evaluating query steps to Spark "
    "(no pyarrow path).")
DRIVER_EPOCH_ROWS: Setting[int] = _conf(
    "spark.strata.driverEpoch.maxRows", int, 250_000,
    "The most input records an epoch run in the driver (no Spark job) has; -1: every "
    "epoch runs as Spark tasks. A program may bound it further.")
DRIVER_EPOCH_STATE_BYTES: Setting[int] = _conf(
    "spark.strata.driverEpoch.maxStateBytes", int, 128 << 20,
    "The most bytes of committed state an epoch run in the driver may read.")
TRANSLATE_DRIVER_RECORDS: Setting[int] = _conf(
    "spark.strata.translate.driverRecords", int, 50_000,
    "A translate stage's own bound on driverEpoch.maxRows: the driver calls translate on "
    "one core where Spark's tasks use them all, so larger epochs run as tasks.")
TRANSLATE_SLICE_RECORDS: Setting[int] = _conf(
    "spark.strata.translate.sliceRecords", int, 50_000,
    "A translate stage's input file of more than twice this many records is read by "
    "several map tasks (row slices), up to one per core.")
TRANSLATE_ROUTE: Setting[str] = _conf(
    "spark.strata.translate.route", str, "auto",
    "How a translate epoch's Spark job is built: rdd (parallelize, partitionBy), arrow "
    "(DataFrames: mapInArrow, repartition; also runs over Spark Connect) or auto (rdd on "
    "a classic session, arrow over Spark Connect).",
    choices=("auto", "rdd", "arrow"))
EXCHANGE: Setting[str] = _conf(
    "spark.strata.vectorized.exchange", str, "auto",
    "How a vectorized epoch's records cross the shuffle: arrow (packed batches), rows, "
    "or auto (arrow from vectorized.exchangeMinRecords input records).",
    choices=("auto", "arrow", "rows"))
EXCHANGE_MIN_RECORDS: Setting[int] = _conf(
    "spark.strata.vectorized.exchangeMinRecords", int, 50_000,
    "With exchange=auto, an epoch of at least this many input records crosses the "
    "shuffle packed as Arrow; below it the map side's Python stage costs more than it "
    "saves.")
QUERY_DRIVER_ROWS: Setting[int] = _conf(
    "spark.strata.query.driverRows", int, 100_000,
    "A query epoch's changes, an appended increment, an iteration step or a rewritten "
    "table of up to this many rows comes to the driver as Arrow and is written by it; "
    "more go through Spark (0: always Spark). An epoch of more input records writes its "
    "changes and appended rows with Spark without trying.")
QUERY_TABLE_ROWS: Setting[int] = _conf(
    "spark.strata.query.driverTableRows", int, 2_000_000,
    "A committed query table (an iteration's state, a small epoch's join inputs) of at "
    "most this many rows may be read by the driver and kept in its file cache.")
HELD_SEGMENT_ROWS: Setting[int] = _conf(
    "spark.strata.series.heldSegmentRows", int, 2_000_000,
    "A series segment ingested through the driver, of at most this many rows, has its "
    "views computed from the rows the driver holds (no Spark job); -1: never.")
WINDOW_STORE: Setting[str] = _conf(
    "spark.strata.window.store", str, "auto",
    "Where a SQL window stage keeps its pane store and answers its windows: driver (cells "
    "in the driver's memory, windows slid there), executors (cells in Parquet beside "
    "Spark's partitions, windows answered by Spark jobs; driver memory does not grow with "
    "the groups) or auto (executors when the stage's first epoch has more input records "
    "than driverEpoch.maxRows allows, or that is -1). Chosen at a stage's first epoch and "
    "kept; MapReduce windows always use the driver.",
    choices=("auto", "driver", "executors"))
TEST_MARKER: Setting[str | None] = _conf(
    "spark.strata.test.marker", str, None,
    "Read by no code: the CLI tests pass it with --conf to see a conf reach the session.",
    test_only=True)

# Environment variables.
HOME: Setting[str | None] = _env(
    "STRATA_HOME", str, None, "The strata home directory, when --home is not given.")
CATALOG: Setting[str | None] = _env(
    "STRATA_CATALOG", str, None,
    "A local (or mounted) path for the home's SQLite catalog, when --catalog is not given "
    "(default: inside a local home; a home on HDFS or an object store needs one).")
MASTER: Setting[str] = _env(
    "STRATA_MASTER", str, "local[*]",
    "The Spark master URL of a session strata starts (spark://…, yarn, k8s://…), when "
    "--master is not given.")
REMOTE: Setting[str | None] = _env(
    "STRATA_REMOTE", str, None,
    "A Spark Connect URL (sc://HOST:PORT) to run over, when neither --remote nor "
    "--master is given.")
DRIVER_MEMORY: Setting[str] = _env(
    "STRATA_DRIVER_MEMORY", str, "4g",
    "spark.driver.memory of a session strata starts (unless the call gives one).")
CLASS_ARCHIVE: Setting[str] = _env(
    "STRATA_CLASS_ARCHIVE", str, "auto",
    "Where the driver JVM's class-data-sharing archive of Spark's classes lives, which makes "
    "a session strata starts start faster: auto ($XDG_CACHE_HOME/strata, else "
    "~/.cache/strata; about 200 MB, built once in the background), a directory, or off.")
RUN_CACHE_MB: Setting[float] = _env(
    "STRATA_RUN_CACHE_MB", float, 256.0,
    "Megabytes of decoded state runs each process (driver or Python worker) keeps in "
    "memory; 0 turns it off.")
MACHINE_RUN_CACHE_MB: Setting[float] = _env(
    "STRATA_MACHINE_RUN_CACHE_MB", float, 2048.0,
    "Megabytes of uncompressed state runs the machine's processes share as files; 0 "
    "turns it off. Executors read it from their environment (spark.executorEnv.*).")
MACHINE_RUN_CACHE_DIR: Setting[str | None] = _env(
    "STRATA_MACHINE_RUN_CACHE_DIR", str, None,
    "The directory of the machine's run cache (unset: strata-runs-<uid> under the "
    "system's temporary directory).")
CRASH_AT: Setting[str | None] = _env(
    "STRATA_CRASH_AT", str, None,
    "name[:n]: kill the process with SIGKILL the n-th time it reaches crash point name "
    "(recovery tests).", test_only=True)
PROPERTY_SCALE: Setting[float] = _env(
    "STRATA_PROPERTY_SCALE", float, 1.0,
    "Multiplies the number of examples the property tests run.", test_only=True)
SLOW_SECONDS: Setting[float] = _env(
    "STRATA_SLOW_SECONDS", float, 0.0,
    "Seconds each call of the cluster fault tests' slow pipeline sleeps.", test_only=True)
SLOW_DIR: Setting[str | None] = _env(
    "STRATA_SLOW_DIR", str, None,
    "Where the slow pipeline leaves a file per Python worker pid (cluster fault tests).",
    test_only=True)


def _cluster(name: str, type_: type, default: Any, meaning: str) -> Setting[Any]:
    return _env(name, type_, default, f"scripts/local_cluster.sh: {meaning}", test_only=True)


CLUSTER = (
    _cluster("STRATA_CLUSTER_DIR", str, ".cluster",
             "the run directory (pids, logs, work dirs; relative to the repository)."),
    _cluster("STRATA_CLUSTER_PORT", int, 7078, "the master's RPC port."),
    _cluster("STRATA_CLUSTER_WEBUI_PORT", int, 8090, "the master's web UI port (serves /json)."),
    _cluster("STRATA_CLUSTER_WORKER_WEBUI_PORTS", str, "8091 8092", "the workers' web UI ports."),
    _cluster("STRATA_CLUSTER_WORKERS", int, 2, "the number of workers."),
    _cluster("STRATA_CLUSTER_CORES", int, 1, "cores per worker."),
    _cluster("STRATA_CLUSTER_MEMORY", str, "2g", "memory per worker."),
    _cluster("STRATA_CLUSTER_TIMEOUT", int, 90, "seconds start waits for the workers."),
    _cluster("STRATA_CLUSTER_PYTHONPATH", str, None,
             "extra PYTHONPATH for the workers' Python."),
)

SETTINGS: tuple[Setting[Any], ...] = tuple(_DECLARED)
BY_NAME: dict[str, Setting[Any]] = {s.name: s for s in SETTINGS}

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_EXPECTED = {int: ("a whole number", "a count"), float: ("a number", "a number"),
             bool: ("true or false", "true or false")}


def parse(setting: Setting[T], value: str | None) -> T:
    """``value`` (None or empty: unset) as ``setting``'s type; its default when unset.
    A :class:`SettingError` naming the setting when it does not parse."""
    if value is None or value == "":
        return setting.default
    text = value.strip()
    try:
        if setting.type is bool:
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError(text)
            return text.lower() in _TRUE  # type: ignore[return-value]
        if setting.type in (int, float):
            return setting.type(text)  # type: ignore[return-value]
    except ValueError:
        what, hint = _EXPECTED[setting.type]
        raise SettingError(f"{_described(setting)}={value!r} is not {what}; set it to "
                           f"{hint} (default {_shown(setting.default)})") from None
    if setting.choices:
        if text.lower() not in setting.choices:
            listed = ", ".join(f"'{c}'" for c in setting.choices[:-1])
            raise SettingError(f"{_described(setting)} is {listed} or "
                               f"'{setting.choices[-1]}', not {value!r}")
        return text.lower()  # type: ignore[return-value]
    return value  # type: ignore[return-value]


def conf(spark: Any, setting: Setting[T]) -> T:
    """Session conf ``setting`` of ``spark`` (a classic or Spark Connect session)."""
    assert setting.kind == "conf", setting.name
    return parse(setting, spark.conf.get(setting.name, None))


def env(setting: Setting[T]) -> T:
    """Environment variable ``setting``, read now."""
    assert setting.kind == "env", setting.name
    return parse(setting, os.environ.get(setting.name))


def _described(setting: Setting[Any]) -> str:
    return ("session conf " if setting.kind == "conf" else "environment variable ") + setting.name


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown() -> str:
    """``docs/configuration.md``: the table, one section per kind."""
    lines = ["# Configuration", "",
             "Every setting strata reads, generated from `src/strata/config.py` "
             "(`python -m strata.config --markdown > docs/configuration.md`; "
             "`tests/test_config.py` checks the two agree). Session confs are set on the "
             "Spark session (`strata run --conf KEY=VALUE`, `Controller(spark_conf=…)`, "
             "`spark.conf.set`) and read each time they are used; environment variables "
             "are read when used too.", ""]
    for kind, title in (("conf", "Session confs"), ("env", "Environment variables")):
        lines += [f"## {title}", "", "| Name | Type | Default | Meaning | Test only |",
                  "|---|---|---|---|---|"]
        for s in SETTINGS:
            if s.kind == kind:
                meaning = s.meaning.replace("|", "\\|")
                if s.choices:
                    meaning += " One of: " + ", ".join(f"`{c}`" for c in s.choices) + "."
                lines.append(f"| `{s.name}` | {s.type.__name__} | {_shown(s.default)} | "
                             f"{meaning} | {'yes' if s.test_only else ''} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m strata.config --markdown > docs/configuration.md")
    sys.stdout.write(markdown())
