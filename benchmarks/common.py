"""What every benchmark script shares: its options, saving its figure, writing its result."""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

# the 1-minute load when the benchmark imported this module, i.e. as it started
_LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def parser(doc: str, *, seed: int | None = None, partitions: int = 2,
           master: str | None = None) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark takes: ``--quick``, ``--json
    PATH``, ``--plot PATH.png``, ``--partitions``, ``--master`` and (given a default)
    ``--seed``. The description is the first paragraph of ``doc``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    ap.add_argument("--json", required=True, metavar="PATH", help="write the results here")
    ap.add_argument("--plot", metavar="PATH.png", help="draw the per-epoch figure here")
    ap.add_argument("--partitions", type=int, default=partitions,
                    help=f"state partitions (default {partitions})")
    ap.add_argument("--master", default=master,
                    help=f"Spark master URL (default {master or 'local[*]'})")
    if seed is not None:
        ap.add_argument("--seed", type=int, default=seed)
    return ap


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_STORE_CONF = "spark.sql.streaming.stateStore.providerClass"


@contextmanager
def session_conf(spark, key: str, value: str | None) -> Iterator[None]:
    """Set ``key`` to ``value`` in ``spark``'s conf for the block (``None``: leave it as
    it is), then restore what it was: e.g. the state store provider of a streaming query,
    which Spark fixes when the query starts."""
    if value is None:
        yield
        return
    saved = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if saved is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, saved)


def target_figure(value: float | None, op: str, bound: float, **extra) -> dict:
    """A summary figure against its target (``op``: ``<=`` or ``>=``): ``{"value",
    "target", "met", **extra}``, ``met`` None when there is no value."""
    met = None if value is None else bool(value <= bound if op == "<=" else value >= bound)
    return {"value": value, "target": f"{op} {bound:g}", "met": met, **extra}


def save(fig, path: str, **layout) -> None:
    """Lay out, write and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout(**layout)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def emit(result: dict, json_path: str, plot_path: str | None,
         plot: Callable[[dict, str], None]) -> None:
    """Write ``result`` as JSON to ``json_path`` and stdout, and draw it if asked. The
    JSON records the run itself under ``run`` (:func:`run_record`), which
    ``benchmarks/render_performance.py`` prints in docs/performance.md."""
    result = {**result, "run": run_record()}
    text = json.dumps(result, indent=1)
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(json_path).write_text(text + "\n")
    print(text)
    if plot_path:
        plot(result, plot_path)


def run_record() -> dict:
    """What the results of this run were measured on: the commit (None outside a git
    checkout; ``dirty`` if the work tree had changes), the date (UTC), the machine and
    the 1-minute load average at the start and the end, and the command."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                                 cwd=Path(__file__).parent, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    try:
        import pyspark
        spark: str | None = pyspark.__version__
    except ImportError:
        spark = None
    end = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "spark": spark},
        "load_average_1m": {"start": _round(_LOAD_AT_START), "end": _round(end)},
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }


def _round(load: float | None) -> float | None:
    return None if load is None else round(load, 2)


def event_log_dir() -> str:
    """A fresh directory for the benchmark session's Spark event log (pass it to
    ``get_spark(event_log_dir=...)``), from which ``strata.observability.spark_metrics``
    reads job metrics at any data size; removed, after the session stops, at exit."""
    path = tempfile.mkdtemp(prefix="strata-bench-events-")
    atexit.register(_remove_event_log, path)
    return path


def _remove_event_log(path: str) -> None:
    from pyspark.sql import SparkSession

    with suppress(Exception):  # the session may already be gone at exit
        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
    shutil.rmtree(path, ignore_errors=True)
