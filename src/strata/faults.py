"""Fault injection for recovery tests.

Crash points: ``STRATA_CRASH_AT=name[:n]`` kills the process with SIGKILL the n-th time
(default: the first) execution reaches ``crashpoint(name)``. An unnamed point costs a lookup."""

from __future__ import annotations

import os
import signal
import threading

from strata import config

_hits: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    spec = config.env(config.CRASH_AT)
    if not spec:
        return None
    name, _, n = spec.partition(":")
    return name, int(n or 1)


def crashpoint(name: str) -> None:
    """Die here, at once and without cleanup, if the environment asks for it."""
    target = _target()
    if target is None or target[0] != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == target[1]:
        os.kill(os.getpid(), signal.SIGKILL)


def crash_later(name: str, seconds: float) -> threading.Timer | None:
    """Arm a kill that fires while the caller is busy (e.g. inside a Spark job)."""
    target = _target()
    if target is None or target[0] != name:
        return None
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] != target[1]:
        return None
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGKILL))
    timer.daemon = True
    timer.start()
    return timer
