"""How the ``strata`` command prints: clean errors with exit codes, JSON, sizes, times."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from strata.config import SettingError
from strata.model.errors import StrataError

# Exit codes: 2 is a usage error (click's); a locked home is EX_TEMPFAIL, worth retrying.
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_LOCKED = 75
EXIT_INTERRUPTED = 130


def out() -> Console:
    return Console(highlight=False, soft_wrap=True)


def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    text = Text("error: ", style="bold red")
    text.append(message, style="red")
    err().print(text)
    raise typer.Exit(code)


@contextmanager
def reported(traceback: bool | None = None) -> Iterator[None]:
    """Turn StrataErrors into a clean message and exit code (no traceback).

    ``traceback``: for a failed epoch, print the user code's traceback (True), or
    say how to see it (False); None where no epoch runs.
    """
    try:
        yield
    except SettingError as e:  # a conf or environment variable that does not parse
        fail(str(e), EXIT_ERROR)
    except StrataError as e:
        from strata.controller.lock import HomeLockedError
        from strata.model.errors import EpochError

        message = str(e)
        cause = e.cause if isinstance(e, EpochError) else None
        if cause and traceback:
            err().print(Text(cause.rstrip(), style="dim"))
        elif cause and traceback is False:
            message += "\n  (`strata run --traceback` prints the whole traceback)"
        fail(message, EXIT_LOCKED if isinstance(e, HomeLockedError) else EXIT_ERROR)


def dumps(obj: Any, **kw: Any) -> str:
    return json.dumps(obj, default=json_default, ensure_ascii=False, **kw)


def json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "—"


def flows_text(records: dict[str, int]) -> str:
    if not records:
        return "—"
    return ", ".join(f"{flow} {n:,}" for flow, n in records.items())


def spark_failure(e: BaseException) -> str:
    text = " ".join(str(e).split())
    msg = f"Spark failed: {type(e).__name__}: {text[:1500]}"
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway" in text:
        msg += (" (Spark could not start: is Java 17 or newer installed, and JAVA_HOME "
                "right or unset?)")
    return msg


def run_summary(console: Console, home: str, dataflow, reports: list, seconds: float,
                 stopped: str) -> None:
    if reports:
        n = len(reports)
        why = {"idle": "nothing more is runnable", "max-epochs": "--max-epochs reached",
               "interrupted": "interrupted", "stopped": "stopped on request"}[stopped]
        console.print(f"{n} epoch{'s' if n != 1 else ''} in {seconds:.1f} s; {why}.")
        return
    if stopped in ("interrupted", "stopped"):
        console.print(f"{stopped}; no epoch ran.")
        return
    sources = ", ".join(f.name for f in dataflow.sources) or "none"
    console.print(f"nothing to run: no input is waiting (external inputs: {sources}). "
                  f"Append some with `strata ingest --home {home} FLOW FILE…`.")


# -- ingest ----------------------------------------------------------------------------


def cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return dumps(value)


# -- graph -----------------------------------------------------------------------------

