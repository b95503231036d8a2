"""The warm, long-running mode: one controller and one Spark session that process
increments as they arrive, until asked to stop.

Increments arrive by ``strata ingest`` from another process (the catalog is shared), or
as files dropped into a landing directory: ``LANDING/<flow>/<file>`` is ingested as one
increment of ``flow`` and moved to ``LANDING/.ingested/<flow>/``; a file that does not
fit goes to ``LANDING/.rejected/<flow>/`` with the reason beside it. Writers should
create a file under a name starting with ``.`` or ending in ``.tmp``/``.part`` and
rename it when complete: such names are not picked up.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from strata.controller.controller import Controller, EpochReport
from strata.model.errors import StrataError

_PARTIAL = (".tmp", ".part", ".crdownload")


@dataclass(frozen=True)
class Landed:
    """One landing file taken: the increment it became, or why it was rejected."""

    flow: str
    file: str
    increment: int | None
    error: str | None = None


class Landing:
    """A landing directory watched for new files, one subdirectory per external flow."""

    def __init__(self, root: str | os.PathLike[str], controller: Controller) -> None:
        self.root = Path(root)
        self.controller = controller
        self.flows = [f.name for f in controller.dataflow.sources]
        for flow in self.flows:
            (self.root / flow).mkdir(parents=True, exist_ok=True)

    def take(self) -> list[Landed]:
        """Ingest every complete file waiting, oldest name first, one increment each."""
        landed = []
        for flow in self.flows:
            for path in sorted((self.root / flow).iterdir()):
                if not path.is_file() or path.name.startswith(".") or path.suffix in _PARTIAL:
                    continue
                landed.append(self._take(flow, path))
        return landed

    def _take(self, flow: str, path: Path) -> Landed:
        try:
            n = self.controller.ingest(flow, [str(path)])
        except StrataError as e:
            target = self._move(path, ".rejected", flow)
            Path(f"{target}.error.txt").write_text(f"{e}\n")
            return Landed(flow, str(path), None, str(e))
        self._move(path, ".ingested", flow)
        return Landed(flow, str(path), n)

    def _move(self, path: Path, where: str, flow: str) -> Path:
        folder = self.root / where / flow
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / path.name
        os.replace(path, target)
        return target


class StopSignal(Protocol):
    """What ``follow`` needs of its stop signal (``threading.Event`` has it)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class StopRequest:
    """A stop flag that a signal handler may set.

    ``threading.Event.set`` takes a lock that ``Event.wait`` holds for a moment on the
    main thread; a handler that runs in that moment waits for itself forever.
    """

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._set:
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                break
            time.sleep(left)
        return self._set


def follow(
    controller: Controller,
    stop: StopSignal,
    *,
    poll: float = 0.5,
    landing: Landing | None = None,
    max_epochs: int | None = None,
    on_epoch: Callable[[EpochReport], None] | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_landed: Callable[[Landed], None] | None = None,
    on_idle: Callable[[], None] | None = None,
) -> list[EpochReport]:
    """Run epochs as input arrives until ``stop`` is set (checked between epochs and
    while idle, so an epoch is never cut off) or ``max_epochs`` ran."""
    reports: list[EpochReport] = []
    while not stop.is_set():
        for landed in landing.take() if landing else ():
            if on_landed:
                on_landed(landed)
        left = None if max_epochs is None else max_epochs - len(reports)
        reports += controller.run(max_epochs=left, on_epoch=on_epoch, on_start=on_start,
                                  until=stop.is_set)
        if max_epochs is not None and len(reports) >= max_epochs:
            break
        if on_idle:
            on_idle()
        stop.wait(poll)
    return reports
